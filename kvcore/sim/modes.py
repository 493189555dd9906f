"""vLLM 0.32's rules for the cache modes a ``vllm serve`` line ends up running.

The simulator, the tuner and ``kvcore plan --judge sim`` must simulate what vLLM would
run, not what a flag literally says.  vLLM 0.32 (paths relative to ``vllm/``):

* ``--mamba-cache-mode`` takes ``align`` or ``none`` only (config/cache.py
  ``MambaCacheMode = Literal["align", "none"]``; the serve parser refuses anything
  else).  kvcore's own ``all`` mode (kvcore-mamba) stays a ``kvcore plan`` feature.
* Prefix caching is on by default for generative models, hybrid ones included, and off
  for attention-free ones such as pure Mamba (config/model.py
  ``is_prefix_caching_supported``; engine/arg_utils.py
  ``_set_default_chunked_prefill_and_prefix_caching_args``).
* For every model with Mamba / linear-attention layers, ``MambaModelConfig.
  verify_and_update_config`` (model_executor/models/config.py:685-705, run through
  ``HybridAttentionMambaModelConfig`` for hybrids, config/vllm.py:2661) then sets
  ``mamba_cache_mode`` from prefix caching: on and ``none`` -> ``align`` (an info
  log), off and not ``none`` -> ``none`` (a warning).  So with Mamba layers the mode
  that runs is ``align`` exactly when prefix caching is on.
* With prefix caching on, the same method asserts chunked prefill ("Chunked prefill is
  required for mamba cache mode 'align'."): vLLM does not start a model with Mamba
  layers, prefix caching on and ``--no-enable-chunked-prefill``.

:func:`resolve_mamba_cache_mode` applies these rules; :func:`mamba_layout` says whether a
model has Mamba layers and attention layers (planned once per model and cached).
"""

from __future__ import annotations

import functools
from typing import Any

from kvcore.errors import ConfigError

__all__ = ["VLLM_MAMBA_CACHE_MODES", "check_vllm_mamba_cache_mode", "mamba_layout",
           "default_prefix_caching", "resolve_mamba_cache_mode",
           "check_vllm_chunked_prefill"]

#: vLLM 0.32's ``MambaCacheMode`` (config/cache.py)
VLLM_MAMBA_CACHE_MODES = ("align", "none")


def check_vllm_mamba_cache_mode(mode: Any) -> str:
    """``mode`` if vLLM 0.32 takes it (``align`` | ``none``); ConfigError naming
    ``mamba_cache_mode`` otherwise (kvcore's ``all`` is named as kvcore's own)."""
    if mode in VLLM_MAMBA_CACHE_MODES:
        return str(mode)
    extra = (" ('all' is kvcore's own mode, not vLLM 0.32's: kvcore plan "
             "--mamba-cache-mode all plans it)" if mode == "all" else "")
    raise ConfigError(f"mamba_cache_mode {mode!r}: vLLM 0.32 takes align or none "
                      f"(config/cache.py MambaCacheMode){extra}; valid: align, none",
                      field="mamba_cache_mode", value=str(mode))


@functools.lru_cache(maxsize=64)
def _layout(model: str) -> tuple[bool, bool]:
    import kvcore

    try:
        cfg = kvcore.plan_model(model, kv_cache_memory_bytes=1 << 40, max_model_len=4096)
    except Exception:  # noqa: BLE001 - a model the planner refuses has no layout to say
        return False, True
    kinds = [g.spec.kind for g in cfg.kv_cache_groups]
    return any(k == "mamba" for k in kinds), any(k != "mamba" for k in kinds)


def mamba_layout(model: Any) -> tuple[bool, bool]:
    """``(has_mamba, has_attention)`` of a model (a name, path or ModelConfig): whether
    its plan has a Mamba / linear-attention group and whether it has any other group.
    A model that cannot be planned counts as ``(False, True)``."""
    from kvcore.models.config import ModelConfig

    if isinstance(model, ModelConfig):
        return _layout.__wrapped__(model)  # type: ignore[arg-type]
    return _layout(str(model))


def default_prefix_caching(model: Any) -> bool:
    """vLLM 0.32's default ``enable_prefix_caching`` for a generative model: off for an
    attention-free one (Mamba layers only), else on (``is_prefix_caching_supported``)."""
    has_mamba, has_attention = mamba_layout(model)
    return not (has_mamba and not has_attention)


def resolve_mamba_cache_mode(mode: str | None, enable_prefix_caching: bool,
                             has_mamba: bool) -> tuple[str, str | None]:
    """``(mode vLLM runs, note or None)`` for ``--mamba-cache-mode mode`` (None: not
    given) with prefix caching on or off, on a model with or without Mamba layers
    (module docstring; without Mamba layers the mode is moot: ``none``).  The note says
    when vLLM changes a mode that was given.
    Raises ConfigError for a mode vLLM 0.32 refuses."""
    if mode is not None:
        check_vllm_mamba_cache_mode(mode)
    if not has_mamba:  # no Mamba layers: the mode has nothing to act on
        return "none", None
    run = "align" if enable_prefix_caching else "none"
    note = None
    if mode is not None and mode != run:
        note = (f"mamba_cache_mode {mode} runs as {run}: vLLM 0.32 sets {run} when prefix "
                f"caching is {'on' if enable_prefix_caching else 'off'} "
                f"(model_executor/models/config.py MambaModelConfig)")
    return run, note


def check_vllm_chunked_prefill(mode_run: str, enable_chunked_prefill: bool) -> None:
    """Refuse what vLLM 0.32 refuses to start: the Mamba cache mode ``align`` (the mode
    that runs, :func:`resolve_mamba_cache_mode`: a model with Mamba layers and prefix
    caching on) without chunked prefill (``MambaModelConfig.verify_and_update_config``
    asserts it).  Raises ConfigError naming ``enable_chunked_prefill``."""
    if mode_run == "align" and not enable_chunked_prefill:
        raise ConfigError("enable_chunked_prefill False: vLLM 0.32 requires chunked prefill "
                          "for mamba cache mode 'align', which it runs on models with "
                          "Mamba layers when prefix caching is on "
                          "(model_executor/models/config.py MambaModelConfig); valid: "
                          "chunked prefill on, or prefix caching off",
                          field="enable_chunked_prefill", value=False)
