"""Model-family adapters of the core architectures (registered by ``kvcore/builtins.py``
through the ``kvcore_layer_specs`` hook).

Each adapter turns a :class:`~kvcore.models.ModelConfig` into ``{layer name: spec}``;
layer names follow the HF module paths (``model.layers.{i}.self_attn``; Whisper:
``model.decoder.layers.{i}.self_attn`` / ``.encoder_attn``).  The per-layer attention
kind follows the model code of HF transformers (and vLLM's model files):

* ``layer_types`` (``full_attention`` / ``sliding_attention`` / ``chunked_attention``),
  when present, decides;
* mistral / mixtral: ``sliding_window`` on every layer when set;
* qwen2 / qwen3 / qwen3_moe: sliding only when ``use_sliding_window`` is true, on layers
  ``>= max_window_layers``;
* gemma2: layer i is local (sliding) when ``(i + 1) % 2``; gemma3: when
  ``(i + 1) % sliding_window_pattern`` (default 6);
* gemma4: full layers use ``global_head_dim`` and ``num_global_key_value_heads``;
* gpt_oss: ``layer_types`` (alternating sliding 128 / full); the attention sinks are
  learned per-head logits and take no cache;
* llama4: chunked local attention (``attention_chunk_size``) except the NoPE layers,
  which are global: ``no_rope_layers[i] == 0``, default every fourth layer
  (``(i + 1) % 4 == 0``);
* mimo_v2_flash: ``hybrid_layer_pattern`` (0 full, 1 sliding) with ``swa_*`` head counts
  and dims, ``v_head_dim`` for V;
* whisper: decoder self-attention plus cross-attention (sized per request by
  ``max_source_positions`` encoder frames); the encoder needs no cache.

Tensor parallelism (:func:`check_tensor_parallel`, one rule for every adapter, core or
plugin): ``tp`` divides the attention heads; each rank holds ``num_kv_heads // tp`` KV
heads, and a head count below ``tp`` that divides it is replicated (one head per rank),
as in vLLM; MLA's latent cache is replicated on every rank.

Every field is read through the typed readers of :class:`~kvcore.models.ModelConfig`
(``get_int`` / ``get_bool`` / ``get_list`` ...): a present but invalid value is an error
naming the field; only an absent one (or null) takes the family's default.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from kvcore.errors import ConfigError
from kvcore.models.config import REQUIRED, CacheConfig, ModelConfig
from kvcore.specs import (
    ChunkedLocalAttentionSpec,
    CrossAttentionSpec,
    FullAttentionSpec,
    KVCacheSpec,
    SlidingWindowSpec,
)

__all__ = ["CORE_MODEL_TYPES", "core_layer_specs", "kv_heads_per_rank",
           "check_tensor_parallel", "is_mla_config", "resolve_kv_cache_dtype",
           "DEFAULT_BLOCK_SIZE"]

DEFAULT_BLOCK_SIZE = 16


def kv_heads_per_rank(num_kv_heads: int, tp: int, where: str = "config") -> int:
    """KV heads one tensor-parallel rank holds: ``num_kv_heads / tp``, or 1 when
    ``tp`` is a multiple of ``num_kv_heads`` (each head replicated on ``tp /
    num_kv_heads`` ranks), as vLLM's ``QKVParallelLinear``.

    Raises ConfigError when neither divides the other.
    """
    if tp <= 1:
        return num_kv_heads
    if num_kv_heads >= tp:
        if num_kv_heads % tp:
            raise ConfigError(
                f"{where}: num_key_value_heads {num_kv_heads} cannot be split over "
                f"tensor_parallel_size {tp} (it must divide it or be a multiple of it)",
                field="tensor_parallel_size", value=tp)
        return num_kv_heads // tp
    if tp % num_kv_heads:
        raise ConfigError(
            f"{where}: tensor_parallel_size {tp} is not a multiple of num_key_value_heads "
            f"{num_kv_heads}, so the heads cannot be replicated evenly",
            field="tensor_parallel_size", value=tp)
    return 1


def is_mla_config(model: ModelConfig) -> bool:
    """An MLA model (DeepSeek-V2 family): ``kv_lora_rank`` set and ``use_mla`` not
    false.  Its latent cache is one head replicated on every rank."""
    return bool(model.get_int("kv_lora_rank", 0, minimum=0)) and \
        model.get_bool("use_mla", True)


def check_tensor_parallel(model: ModelConfig, tp: int) -> None:
    """The one tensor-parallel rule, applied before any adapter runs:

    * ``tp`` divides ``num_attention_heads`` (Whisper: ``decoder_attention_heads``), as
      vLLM's ``ModelConfig.verify_with_parallel_config`` requires;
    * ``num_key_value_heads`` is a multiple of ``tp`` or ``tp`` a multiple of it (heads
      replicated), as vLLM's ``QKVParallelLinear``; not checked for MLA, whose latent
      cache is replicated on every rank.

    A config without attention heads (pure state-space models) is checked by its
    adapter's own sharded dimensions.  Raises ConfigError naming
    ``tensor_parallel_size``.
    """
    if tp <= 1:
        return
    where = model.source or model.name or model.model_type
    key = "decoder_attention_heads" if model.model_type == "whisper" else \
        "num_attention_heads"
    heads = model.get_int(key, None)
    if heads is not None and heads % tp:
        raise ConfigError(
            f"{where}: {key} {heads} cannot be split over tensor_parallel_size {tp} "
            f"(it must divide the head count, as in vLLM)",
            field="tensor_parallel_size", value=tp)
    kv = model.num_key_value_heads if key == "num_attention_heads" else heads
    if kv and not is_mla_config(model):
        kv_heads_per_rank(kv, tp, where)


def resolve_kv_cache_dtype(model: ModelConfig, cache: CacheConfig) -> str:
    """``cache.kv_cache_dtype`` unless ``auto``; then the config's declared KV
    quantization; else ``auto`` (the model dtype)."""
    if cache.kv_cache_dtype and cache.kv_cache_dtype != "auto":
        return cache.kv_cache_dtype
    return model.kv_cache_dtype or "auto"


class _Builder:
    """Shared construction of attention specs for one model."""

    def __init__(self, model: ModelConfig, cache: CacheConfig) -> None:
        self.model = model
        self.cache = cache
        self.block_size = cache.block_size_or(DEFAULT_BLOCK_SIZE)
        self.kv_cache_dtype = resolve_kv_cache_dtype(model, cache)
        self.where = model.source or model.name or model.model_type
        check_tensor_parallel(model, cache.tensor_parallel_size)

    def common(self, num_kv_heads: int, head_size: int, head_size_v: int | None = None
               ) -> dict[str, Any]:
        return dict(
            block_size=self.block_size,
            num_kv_heads=kv_heads_per_rank(num_kv_heads, self.cache.tensor_parallel_size,
                                           self.where),
            head_size=head_size,
            head_size_v=None if head_size_v in (None, head_size) else head_size_v,
            dtype=self.model.dtype,
            kv_cache_dtype=self.kv_cache_dtype,
        )

    def full(self, kv: int, hd: int, hv: int | None = None) -> KVCacheSpec:
        """A full-attention layer; a kv_cache_dtype whose scheme names its own spec kind
        (e.g. TurboQuant) gives that kind."""
        from kvcore.registry import get_registry

        reg = get_registry()
        kind = reg.kv_cache_dtype(self.kv_cache_dtype).spec_kind
        cls = reg.spec_class(kind) if kind else FullAttentionSpec
        return cls(**self.common(kv, hd, hv))

    def sliding(self, window: int, kv: int, hd: int, hv: int | None = None) -> KVCacheSpec:
        return SlidingWindowSpec(sliding_window=window, **self.common(kv, hd, hv))

    def chunked(self, chunk: int, kv: int, hd: int, hv: int | None = None) -> KVCacheSpec:
        return ChunkedLocalAttentionSpec(attention_chunk_size=chunk,
                                         **self.common(kv, hd, hv))


def _name(i: int) -> str:
    return f"model.layers.{i}.self_attn"


def _window(m: ModelConfig, field: str = "sliding_window") -> int:
    w = m.get_int(field, None)
    if w is None:
        raise ConfigError(f"{m.source or m.name}: field {field!r} must be a positive int "
                          f"for sliding-window layers, got null or nothing", field=field)
    return int(w)


def _from_layer_types(m: ModelConfig, b: _Builder, types: tuple[str, ...],
                      kv: int, hd: int, hv: int | None = None,
                      full_shape: tuple[int, int, int | None] | None = None
                      ) -> dict[str, KVCacheSpec]:
    n = m.num_hidden_layers or len(types)
    if len(types) != n:
        raise ConfigError(f"{b.where}: layer_types has {len(types)} entries for "
                          f"num_hidden_layers {n}", field="layer_types")
    out: dict[str, KVCacheSpec] = {}
    for i, t in enumerate(types):
        if t in ("full_attention", "global_attention", "attention"):
            fkv, fhd, fhv = full_shape or (kv, hd, hv)
            out[_name(i)] = b.full(fkv, fhd, fhv)
        elif t in ("sliding_attention", "sliding_window_attention", "local_attention"):
            out[_name(i)] = b.sliding(_window(m), kv, hd, hv)
        elif t in ("chunked_attention", "chunked_local_attention"):
            chunk = m.get_int("attention_chunk_size")
            out[_name(i)] = b.chunked(chunk, kv, hd, hv)
        else:
            raise ConfigError(
                f"{b.where}: layer_types[{i}] = {t!r} is not an attention kind the core "
                f"knows (full_attention, sliding_attention, chunked_attention); a plugin "
                f"may serve it", field="layer_types", value=t)
    return out


def _llama_like(m: ModelConfig, c: CacheConfig) -> dict[str, KVCacheSpec]:
    n, _, kv, hd = m.require_attention()
    b = _Builder(m, c)
    if m.layer_types:
        return _from_layer_types(m, b, m.layer_types, kv, hd)
    if m.model_type == "gpt_oss":
        # transformers' GptOssConfig default: even layers sliding, odd layers full
        types = tuple("sliding_attention" if (i + 1) % 2 else "full_attention"
                      for i in range(n))
        return _from_layer_types(m, b, types, kv, hd)
    window = m.sliding_window
    first_sliding = 0
    if m.model_type in ("qwen2", "qwen2_moe", "qwen3", "qwen3_moe"):
        # HF Qwen2/Qwen3 configs: sliding only with use_sliding_window, on layers
        # >= max_window_layers
        if not m.get_bool("use_sliding_window", False):
            window = None
        first_sliding = m.get_int("max_window_layers", 0, minimum=0)
    out: dict[str, KVCacheSpec] = {}
    for i in range(n):
        if window is not None and i >= first_sliding:
            out[_name(i)] = b.sliding(window, kv, hd)
        else:
            out[_name(i)] = b.full(kv, hd)
    return out


def _gemma(m: ModelConfig, c: CacheConfig) -> dict[str, KVCacheSpec]:
    n, _, kv, hd = m.require_attention()
    b = _Builder(m, c)
    if m.model_type == "gemma2":
        pattern = 2
    else:  # HF Gemma3TextConfig: sliding_window_pattern, default 6 (checked even when
        # layer_types, which wins, is present: a present invalid value is an error)
        key = "sliding_window_pattern" if m.has("sliding_window_pattern") \
            else "_sliding_window_pattern"
        pattern = m.get_int(key, 6)
    if m.layer_types:
        types = m.layer_types
    else:
        types = tuple("sliding_attention" if (i + 1) % pattern else "full_attention"
                      for i in range(n))
    full_shape = None
    if m.model_type.startswith("gemma4"):
        gkv = m.get_int("num_global_key_value_heads", kv)
        ghd = m.get_int("global_head_dim", hd)
        full_shape = (gkv, ghd, None)
    return _from_layer_types(m, b, types, kv, hd, full_shape=full_shape)


def _llama4(m: ModelConfig, c: CacheConfig) -> dict[str, KVCacheSpec]:
    n, _, kv, hd = m.require_attention()
    b = _Builder(m, c)
    chunk = m.get_int("attention_chunk_size", None)
    # HF Llama4TextConfig: an empty or absent no_rope_layers means the default,
    # every fourth layer NoPE ((i + 1) % 4 == 0); entries are 1 (RoPE) or 0 (NoPE)
    no_rope = m.get_list("no_rope_layers", [], item="int", minimum=0, choices=(0, 1))
    if no_rope and len(no_rope) != n:
        raise ConfigError(f"{b.where}: no_rope_layers has {len(no_rope)} entries for "
                          f"{n} layers", field="no_rope_layers")
    out: dict[str, KVCacheSpec] = {}
    for i in range(n):
        use_rope = bool(no_rope[i]) if no_rope else (i + 1) % 4 != 0
        if chunk and use_rope:
            out[_name(i)] = b.chunked(chunk, kv, hd)
        else:
            out[_name(i)] = b.full(kv, hd)
    return out


def _mimo(m: ModelConfig, c: CacheConfig) -> dict[str, KVCacheSpec]:
    n, _, kv, hd = m.require_attention()
    b = _Builder(m, c)
    pattern = m.get_list("hybrid_layer_pattern", item="int", minimum=0, choices=(0, 1),
                         length=n)
    hv = m.get_int("v_head_dim", None)
    swa_kv = m.get_int("swa_num_key_value_heads", kv)
    swa_hd = m.get_int("swa_head_dim", hd)
    swa_hv = m.get_int("swa_v_head_dim", hv)
    window_key = "sliding_window" if m.has("sliding_window") \
        else "sliding_window_size"
    window = m.get_int(window_key, None)
    heads = m.num_attention_heads or 0
    if swa_kv > heads or heads % swa_kv:
        raise ConfigError(f"{b.where}: swa_num_key_value_heads {swa_kv} must divide "
                          f"num_attention_heads {heads}", field="swa_num_key_value_heads",
                          value=swa_kv)
    out: dict[str, KVCacheSpec] = {}
    for i in range(n):
        if pattern[i] == 1:
            if not window:
                raise ConfigError(f"{b.where}: missing field 'sliding_window'",
                                  field="sliding_window")
            out[_name(i)] = b.sliding(window, swa_kv, swa_hd, swa_hv)
        else:
            out[_name(i)] = b.full(kv, hd, hv)
    return out


def _whisper(m: ModelConfig, c: CacheConfig) -> dict[str, KVCacheSpec]:
    n = m.get_int("decoder_layers", m.num_hidden_layers or REQUIRED)
    heads = m.get_int("decoder_attention_heads")
    d_model = m.get_int("d_model")
    m.get_int("max_source_positions")
    if d_model % heads:
        raise ConfigError(f"{m.source or m.name}: d_model {d_model} is not a multiple of "
                          f"decoder_attention_heads {heads}", field="d_model")
    b = _Builder(m, c)
    hd = d_model // heads
    out: dict[str, KVCacheSpec] = {}
    for i in range(n):
        out[f"model.decoder.layers.{i}.self_attn"] = b.full(heads, hd)
    for i in range(n):
        out[f"model.decoder.layers.{i}.encoder_attn"] = CrossAttentionSpec(
            **b.common(heads, hd))
    return out


_ADAPTERS: dict[str, Callable[[ModelConfig, CacheConfig], dict[str, KVCacheSpec]]] = {
    **{t: _llama_like for t in ("llama", "mistral", "mixtral", "qwen2", "qwen2_moe", "qwen3",
                                "qwen3_moe", "phi3", "granite", "olmo2", "gemma")},
    "gemma2": _gemma,
    "gemma3": _gemma,
    "gemma3_text": _gemma,
    "gemma4": _gemma,
    "gemma4_text": _gemma,
    "gpt_oss": _llama_like,
    "llama4": _llama4,
    "llama4_text": _llama4,
    "mimo_v2_flash": _mimo,
    "whisper": _whisper,
}

#: model_type values the core's adapters serve
CORE_MODEL_TYPES: tuple[str, ...] = tuple(_ADAPTERS)


def core_layer_specs(model: ModelConfig, cache: CacheConfig) -> dict[str, KVCacheSpec] | None:
    """Per-layer specs for a core architecture, or None for another model type."""
    adapter = _ADAPTERS.get(model.model_type)
    if adapter is None and model.text_model_type:
        adapter = _ADAPTERS.get(model.text_model_type)
    if adapter is None:
        return None
    return adapter(model, cache)
