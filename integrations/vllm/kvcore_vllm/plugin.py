"""vLLM's ``vllm.general_plugins`` entry point (``kvcore = kvcore_vllm.plugin:register``).

vLLM calls :func:`register` in every process it starts (``load_general_plugins()``).
It installs the bridge only when the environment asks for it, so installing
kvcore-vllm changes nothing by itself:

* ``KVCORE_VLLM=1``: :func:`kvcore_vllm.install` with the manager, falling back to
  vLLM's own manager (with a warning) for a configuration it does not support (e.g. a
  Mamba hybrid), so ``vllm serve`` never fails because of the switch;
* ``KVCORE_VLLM_PLANNER=1`` (with ``KVCORE_VLLM=1``): the planner too.

Any other value than ``0``/``1``/unset is a :class:`~kvcore.errors.ConfigError` naming
the variable, so a typo does not silently run vLLM's own manager.
"""

from __future__ import annotations

import os

from kvcore.errors import ConfigError

__all__ = ["register"]


def _flag(name: str) -> bool:
    v = os.environ.get(name, "").strip()
    if v in ("", "0"):
        return False
    if v == "1":
        return True
    raise ConfigError(f"{name}={v!r}: use 1 (on) or 0 / unset (off)", field=name, value=v)


def register() -> None:
    """Install kvcore's KV-cache manager into vLLM when ``KVCORE_VLLM=1``."""
    if not _flag("KVCORE_VLLM"):
        return
    from kvcore_vllm.installer import install

    install(manager=True, planner=_flag("KVCORE_VLLM_PLANNER"), fallback=True)
