"""Model adapter: any config with ``rswa_window`` gets ``rswa`` attention layers.

The R-SWA models in the wild are DeepSeek-V2-based OCR models (DeepSeek-OCR style,
``model_type`` ``deepseek_vl_v2`` with the decoder in ``language_config``; the window is
often set at serve time, e.g. ``--override-config '{"rswa_window": 128}'``, because
their config.json holds ``"rswa_window": null``).  The adapter reads:

* ``rswa_window`` at the top level or in ``language_config`` (null, absent or 0:
  not an R-SWA model, the adapter returns None and the next adapter tries);
* the decoder's ``num_hidden_layers``, ``num_attention_heads``,
  ``num_key_value_heads`` (default: the head count), ``head_dim`` (default
  ``hidden_size // num_attention_heads``; DeepSeek-OCR: 1280 / 10 = 128), from
  ``language_config`` merged over the top level (or ``text_config``, which
  :func:`kvcore.models.load_model_config` has merged already).

Layers are named ``model.layers.{i}.self_attn`` (i = 0 .. num_hidden_layers - 1).
KV heads are split over ``tensor_parallel_size`` ranks by kvcore's one rule (tp
divides the attention heads; ``kv_heads // tp`` per rank, or one replicated head when
tp is a multiple of the KV heads; anything else is a ConfigError).

An MLA decoder (``kv_lora_rank`` set and ``use_mla`` not false) is not served: MLA
stores one latent per token, not K and V per head, so an ``rswa`` page would be
wrong.  The adapter returns None for it (the next adapter, e.g. kvcore-mla for a
``deepseek_v2`` config, plans it as MLA; the plan's sizes are those of R-SWA anyway,
since R-SWA's per-request blocks equal full attention's) and warns that its gap blocks
will not be freed at run time.  A ``deepseek_vl_v2`` wrapper around an MLA decoder is
then served by no adapter (UnknownModelTypeError).
"""

from __future__ import annotations

import warnings
from typing import Any

from kvcore.errors import ConfigError
from kvcore.models.adapters import kv_heads_per_rank as core_kv_heads_per_rank
from kvcore.models.config import REQUIRED, ConfigView
from kvcore.units import bound
from kvcore_rswa.spec import RSWASpec

__all__ = ["rswa_layer_specs", "find_rswa_window", "DEFAULT_BLOCK_SIZE", "RSWAMLAWarning"]

#: block size when the cache config leaves it to the family (full attention's default)
DEFAULT_BLOCK_SIZE = 16


class RSWAMLAWarning(UserWarning):
    """An MLA config with ``rswa_window``: planned as MLA, gap blocks not freed."""


def _decoder_fields(model_config: Any) -> ConfigView:
    """The decoder's fields: the config with ``language_config`` merged over it."""
    view: ConfigView = model_config.view.merged_with("language_config")
    return view


def find_rswa_window(model_config: Any) -> int | None:
    """The config's ``rswa_window`` (top level, else ``language_config``), or None when
    absent, null or 0.  Raises ConfigError for a value that is not an int >= 0."""
    top = model_config.view
    src = top if top.has("rswa_window") else top.section("language_config")
    window: int | None = src.get_int("rswa_window", None, minimum=0,
                                     maximum=bound("sliding_window"))  # 0: disabled
    return window or None


def _positive(v: ConfigView, key: str, default: Any = None) -> int:
    """A positive, bounded int (kvcore's typed reader; absent -> ``default``, or an
    error naming the field when there is none)."""
    value: int = v.get_int(key, REQUIRED if default is None else default)
    return value


def is_mla(v: ConfigView) -> bool:
    """DeepSeek-V2 family MLA: ``kv_lora_rank`` set and ``use_mla`` not false."""
    return bool(v.get_int("kv_lora_rank", 0, minimum=0)) and v.get_bool("use_mla", True)


def rswa_layer_specs(model_config: Any, cache_config: Any) -> dict[str, RSWASpec] | None:
    """``{"model.layers.{i}.self_attn": RSWASpec}`` for a config with ``rswa_window``,
    else None.

    Raises ConfigError naming the field for a malformed ``rswa_window`` or attention
    field.
    """
    window = find_rswa_window(model_config)
    if window is None:
        return None
    v = _decoder_fields(model_config)
    where = getattr(model_config, "source", "") or getattr(model_config, "name", "") \
        or "config"
    if is_mla(v):
        warnings.warn(
            f"{where}: rswa_window={window} on an MLA decoder (kv_lora_rank="
            f"{v.get_int('kv_lora_rank')}): kvcore-rswa serves K/V attention only, so the "
            f"model is left to the next adapter (kvcore-mla serves deepseek_v2/v3 "
            f"configs; its plan has the same sizes, since R-SWA plans like full "
            f"attention), but the decode gap is not freed at run time",
            RSWAMLAWarning, stacklevel=2)
        return None
    layers = _positive(v, "num_hidden_layers")
    heads = _positive(v, "num_attention_heads")
    kv_heads = _positive(v, "num_key_value_heads", default=heads)
    head_dim = v.get_int("head_dim", None)
    if head_dim is None:
        head_dim = _positive(v, "hidden_size") // heads
        if head_dim < 1:
            v.get_int("head_dim")  # raises: missing, and not derivable
    if kv_heads > heads or heads % kv_heads:
        raise ConfigError(f"{where}: num_key_value_heads {kv_heads} must divide "
                          f"num_attention_heads {heads}", field="num_key_value_heads",
                          value=kv_heads)
    tp = getattr(cache_config, "tensor_parallel_size", 1) or 1
    if heads % tp:  # the one tensor-parallel rule (kvcore.models.adapters)
        raise ConfigError(f"{where}: num_attention_heads {heads} cannot be split over "
                          f"tensor_parallel_size {tp} (it must divide the head count, as "
                          f"in vLLM)", field="tensor_parallel_size", value=tp)
    kv_heads_per_rank = core_kv_heads_per_rank(kv_heads, tp, where)
    block_size = cache_config.block_size_or(DEFAULT_BLOCK_SIZE) \
        if hasattr(cache_config, "block_size_or") else \
        (getattr(cache_config, "block_size", None) or DEFAULT_BLOCK_SIZE)
    kv_cache_dtype = getattr(cache_config, "kv_cache_dtype", "auto") or "auto"
    if kv_cache_dtype == "auto" and getattr(model_config, "kv_cache_dtype", None):
        kv_cache_dtype = model_config.kv_cache_dtype
    dtype = getattr(model_config, "dtype", None) or "bfloat16"
    spec = RSWASpec(block_size=block_size, num_kv_heads=kv_heads_per_rank,
                    head_size=head_dim, dtype=dtype, kv_cache_dtype=kv_cache_dtype,
                    rswa_window=window)
    return {f"model.layers.{i}.self_attn": spec for i in range(layers)}
