"""Model adapter: configs with ``index_kpool`` get one ``kpool_tail`` ring per indexer.

The ``index_kpool`` field (GLM5-Next style DSA indexers: keys pooled ``index_kpool``
tokens at a time, ``index_head_dim`` channels) adds a per-request tail beside each
indexer.  The rest of the model (MLA attention and the pooled indexer cache, or plain
attention) is another adapter's business, so this adapter is a pluggy *wrapper* around
the ``kvcore_layer_specs`` hook: it lets the family adapter (core, kvcore-mla, ...)
answer, then adds the tails:

* a tail ``model.layers.{i}.self_attn.indexer.kpool_tail`` for every layer ``i`` that
  has an ``mla_indexer`` layer, or when the model has none, for every layer ``i``
  with a prefix-cached attention layer (``model.layers.{i}....``);
* each tail is inserted right after layer ``i``'s last entry (layer order is kept);
* its ``block_size`` is the block size of layer ``i``'s attention; its ``head_size``
  ``index_head_dim`` (default 128), one head, the model dtype for keys and gates;
* an ``mla_indexer`` spec whose ``compress_ratio`` is 1 gets ``compress_ratio =
  index_kpool`` (its pooled cache holds one state per pool).

When no adapter serves the model, the tails go beside full-attention layers built
from the config (``model.layers.{i}.self_attn``; block size default 64, so that a
ring of up to 64 slots divides it), unless the model type is one a known plugin
serves or the config is MLA (``kv_lora_rank``): then None, so that the core's
"install kvcore-mla" error is not hidden.  ``index_kpool`` absent, null, 0 or 1 (no
pooling): the answer passes through unchanged.
"""

from __future__ import annotations

import dataclasses
import re
from typing import Any

from kvcore.errors import ConfigError, SpecError
from kvcore.models.adapters import kv_heads_per_rank
from kvcore.specs import FullAttentionSpec, KVCacheSpec
from kvcore_kpool.spec import KPoolTailSpec

__all__ = ["find_index_kpool", "add_kpool_tails", "DEFAULT_BLOCK_SIZE", "TAIL_SUFFIX"]

DEFAULT_BLOCK_SIZE = 64
TAIL_SUFFIX = "self_attn.indexer.kpool_tail"
_LAYER = re.compile(r"^model\.layers\.(\d+)\.")


def _where(model_config: Any) -> str:
    return getattr(model_config, "source", "") or getattr(model_config, "name", "") \
        or "config"


def find_index_kpool(model_config: Any) -> int | None:
    """``index_kpool`` (top level or ``text_config``/``language_config``), or None when
    absent, null, 0 or 1; raises ConfigError for a value that is not an int >= 0."""
    top = model_config.view
    src = top
    for nested in ("text_config", "language_config"):
        if not src.has("index_kpool") and top.section(nested).has("index_kpool"):
            src = top.section(nested)
    kpool: int | None = src.get_int("index_kpool", None, minimum=0, maximum=1 << 16)
    return kpool if kpool is not None and kpool > 1 else None


def _int_field(model_config: Any, key: str, default: int) -> int:
    """A positive, bounded int (kvcore's typed reader; absent -> ``default``)."""
    value: int = model_config.get_int(key, default)
    return value


def _base_layers(model_config: Any, cache_config: Any) -> dict[str, KVCacheSpec]:
    where = _where(model_config)
    layers, heads, kv_heads, head_dim = model_config.require_attention()
    tp = getattr(cache_config, "tensor_parallel_size", 1) or 1
    kv_cache_dtype = getattr(cache_config, "kv_cache_dtype", "auto") or "auto"
    if kv_cache_dtype == "auto" and getattr(model_config, "kv_cache_dtype", None):
        kv_cache_dtype = model_config.kv_cache_dtype
    del heads
    spec = FullAttentionSpec(
        block_size=cache_config.block_size_or(DEFAULT_BLOCK_SIZE),
        num_kv_heads=kv_heads_per_rank(kv_heads, tp, where), head_size=head_dim,
        dtype=model_config.dtype, kv_cache_dtype=kv_cache_dtype)
    return {f"model.layers.{i}.self_attn": spec for i in range(layers)}


def _may_fall_back(model_config: Any) -> bool:
    """Build full-attention layers only for a model no known plugin serves and that is
    not MLA (a missing kvcore-mla must stay an error, not become full attention)."""
    from kvcore.registry import KNOWN_PLUGIN_MODEL_TYPES

    types = {model_config.model_type, getattr(model_config, "text_model_type", None)}
    if types & set(KNOWN_PLUGIN_MODEL_TYPES):
        return False
    return not model_config.get_int("kv_lora_rank", 0, minimum=0)


def add_kpool_tails(model_config: Any, cache_config: Any,
                    layer_specs: dict[str, KVCacheSpec] | None
                    ) -> dict[str, KVCacheSpec] | None:
    """``layer_specs`` (another adapter's answer, or None) with the tails added.

    Returns ``layer_specs`` unchanged for a config without pooling.  Raises
    ConfigError naming ``index_kpool`` when the ring does not divide a layer's
    attention block size.
    """
    kpool = find_index_kpool(model_config)
    if kpool is None:
        return layer_specs
    where = _where(model_config)
    if layer_specs is None:
        if not _may_fall_back(model_config):
            return None  # let the core say which plugin serves it
        layer_specs = _base_layers(model_config, cache_config)
    head_size = _int_field(model_config, "index_head_dim", 128)
    num_spec = getattr(cache_config, "num_speculative_tokens", 0) or 0

    indexer_layers = {name for name, s in layer_specs.items() if s.kind == "mla_indexer"}
    if indexer_layers:
        anchors = indexer_layers
    else:
        anchors = {name for name, s in layer_specs.items()
                   if s.scales_with_block_size and s.participates_in_prefix_caching}
    # the attention block size of each anchored layer index, and its last entry
    block_of: dict[int, int] = {}
    last_of: dict[int, str] = {}
    for name in layer_specs:
        m = _LAYER.match(name)
        if m is None:
            continue
        i = int(m.group(1))
        last_of[i] = name
        if name in anchors:
            block_of.setdefault(i, layer_specs[name].block_size)
    if not block_of:
        return layer_specs

    out: dict[str, KVCacheSpec] = {}
    for name, spec in layer_specs.items():
        if spec.kind == "mla_indexer" and getattr(spec, "compress_ratio", None) == 1:
            spec = dataclasses.replace(spec, **{"compress_ratio": kpool})
        out[name] = spec
        m = _LAYER.match(name)
        if m is None:
            continue
        i = int(m.group(1))
        if i in block_of and last_of[i] == name:
            try:
                tail = KPoolTailSpec(block_size=block_of[i], kpool=kpool,
                                     head_size=head_size, num_kv_heads=1,
                                     dtype=model_config.dtype,
                                     num_speculative_tokens=num_spec)
            except SpecError as exc:
                extra = {k: v for k, v in exc.extra.items() if k != "field"}
                raise ConfigError(f"{where}: index_kpool = {kpool}: {exc.message}",
                                  field="index_kpool", **extra) from exc
            out[f"model.layers.{i}.{TAIL_SUFFIX}"] = tail
    return out
