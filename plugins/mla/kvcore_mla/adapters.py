"""Model adapters of kvcore-mla: HF config -> ``{layer name: spec}`` for MLA families.

=================  ===========================================================  =========
model_type         layers (per decoder layer ``i``)                              source
=================  ===========================================================  =========
``deepseek_v2``,   ``model.layers.{i}.self_attn.attn``: mla_attention,           vLLM
``deepseek_v3``    head 576 = kv_lora_rank + qk_rope_head_dim                    deepseek_v2.py
``deepseek_v32``   as V3, plus ``model.layers.{i}.self_attn.indexer.k_cache``:   vLLM
                   mla_indexer (index_head_dim 128 -> 132 B/token)               deepseek_v2.py
``glm_moe_dsa``    as V3.2; with ``indexer_types``, only "full" layers own an     GLM-5.2
                   indexer cache ("shared" layers reuse another layer's)         config
``deepseek_v4``    see :func:`deepseek_v4_layer_specs`                           vLLM
                                                                                 deepseek_v4
``kimi_k3``,       ``full_attn_layers`` (1-based): mla_attention; ``kda_layers``   vLLM
``kimi_linear``    (1-based): the ``mamba`` kind of kvcore-mamba (KDA state)     kimi_linear.py
=================  ===========================================================  =========

Common rules: the block size defaults to 64 (``cache_config.block_size`` None); the
model dtype is ``model_config.dtype``; the kv_cache_dtype is ``cache_config.kv_cache_dtype``
unless ``auto``, else the one the HF config declares (``model_config.kv_cache_dtype``),
else ``auto``.  The MLA latent is not sharded by tensor parallelism (one latent per
token on every rank), so ``tensor_parallel_size`` does not change MLA pages.
Multi-token-prediction layers (``num_nextn_predict_layers``, numbered after the decoder
layers, as in the checkpoints) are added when ``cache_config.include_mtp_layers``.
"""

from __future__ import annotations

from typing import Any

from kvcore.errors import ConfigError, KVCoreError
from kvcore.models.config import REQUIRED, field_int, field_list
from kvcore.specs import KVCacheSpec
from kvcore_mla.specs import (
    DEEPSEEK_V4,
    FP8_DS_MLA,
    MLAAttentionSpec,
    MLAIndexerSpec,
    SlidingWindowMLASpec,
)

__all__ = [
    "MLA_MODEL_TYPES",
    "DEFAULT_MLA_BLOCK_SIZE",
    "mla_layer_specs",
    "deepseek_layer_specs",
    "glm_moe_dsa_layer_specs",
    "deepseek_v4_layer_specs",
    "kimi_layer_specs",
    "kda_state_shapes",
]

DEFAULT_MLA_BLOCK_SIZE = 64
#: DeepSeek-V4 compressed layers use a logical block ``V4_COMPRESSED_BLOCK_FACTOR`` times
#: the sliding-window block (256 for 64), so that a ratio-4 page holds as many states
#: (64) as a sliding-window page holds tokens (vLLM hard-codes 64 and 256).
V4_COMPRESSED_BLOCK_FACTOR = 4


def _kv_cache_dtype(mc: Any, cc: Any) -> str:
    explicit = getattr(cc, "kv_cache_dtype", "auto") or "auto"
    if explicit != "auto":
        return explicit
    return getattr(mc, "kv_cache_dtype", None) or "auto"


def _block_size(cc: Any) -> int:
    bs = getattr(cc, "block_size", None)
    return DEFAULT_MLA_BLOCK_SIZE if bs is None else bs


def _num_layers(mc: Any) -> int:
    n = mc.num_hidden_layers
    if not isinstance(n, int) or n <= 0:
        raise ConfigError(f"{mc._where()}: missing or invalid field 'num_hidden_layers' "
                          f"({n!r}; needed for model_type {mc.model_type!r})",
                          field="num_hidden_layers")
    return n


def _num_mtp(mc: Any, cc: Any) -> int:
    if not getattr(cc, "include_mtp_layers", False):
        return 0
    n: int = mc.get_int("num_nextn_predict_layers", 0, minimum=0)
    return n


def _latent_head_size(mc: Any) -> int:
    """``kv_lora_rank + qk_rope_head_dim`` (576 for DeepSeek-V2/V3, GLM-5, Kimi)."""
    return mc.require("kv_lora_rank") + mc.require("qk_rope_head_dim")


def _mla(mc: Any, cc: Any, **extra: Any) -> MLAAttentionSpec:
    return MLAAttentionSpec(
        block_size=_block_size(cc), num_kv_heads=1, head_size=_latent_head_size(mc),
        dtype=mc.dtype, kv_cache_dtype=_kv_cache_dtype(mc, cc), **extra)


def _indexer(mc: Any, cc: Any) -> MLAIndexerSpec:
    return MLAIndexerSpec(block_size=_block_size(cc), num_kv_heads=1,
                          head_size=mc.require("index_head_dim"), dtype=mc.dtype)


def deepseek_layer_specs(mc: Any, cc: Any) -> dict[str, KVCacheSpec]:
    """DeepSeek-V2/V2.5/V3/R1/V3.1 (``deepseek_v2``, ``deepseek_v3``) and V3.2
    (``deepseek_v32``: plus one indexer cache per layer).

    DeepSeek-V3, bf16: 61 layers x 576 x 2 B = 70,272 B per token.
    """
    n = _num_layers(mc) + _num_mtp(mc, cc)
    with_indexer = mc.model_type == "deepseek_v32"
    out: dict[str, KVCacheSpec] = {}
    mla = _mla(mc, cc)
    indexer = _indexer(mc, cc) if with_indexer else None
    for i in range(n):
        out[f"model.layers.{i}.self_attn.attn"] = mla
        if indexer is not None:
            out[f"model.layers.{i}.self_attn.indexer.k_cache"] = indexer
    return out


def glm_moe_dsa_layer_specs(mc: Any, cc: Any) -> dict[str, KVCacheSpec]:
    """GLM-5 / 5.1 / 5.2 (``glm_moe_dsa``): MLA plus the DSA indexer.

    ``indexer_types`` (GLM-5.2) lists per layer "full" (the layer computes its own
    indexer keys, so it owns an indexer cache) or "shared" (it reuses the top-k of an
    earlier layer: no indexer cache).  Without the field every layer is "full" (GLM-5).
    MTP layers beyond the list own an indexer cache (an assumption: GLM-5.2 sets
    ``index_share_for_mtp_iteration``, which shares within one MTP step only).
    """
    num_layers = _num_layers(mc)
    n = num_layers + _num_mtp(mc, cc)
    types = mc.get_list("indexer_types", None, choices=("full", "shared"))
    if types is not None:
        if len(types) < num_layers:
            raise ConfigError(
                f"{mc._where()}: field 'indexer_types' must list 'full' or 'shared' for "
                f"each of the {num_layers} layers, got {types!r}", field="indexer_types")
    mla, indexer = _mla(mc, cc), _indexer(mc, cc)
    out: dict[str, KVCacheSpec] = {}
    for i in range(n):
        out[f"model.layers.{i}.self_attn.attn"] = mla
        if types is None or i >= len(types) or types[i] == "full":
            out[f"model.layers.{i}.self_attn.indexer.k_cache"] = indexer
    return out


def deepseek_v4_layer_specs(mc: Any, cc: Any) -> dict[str, KVCacheSpec]:
    """DeepSeek-V4 (``deepseek_v4``), after vLLM ``vllm/models/deepseek_v4``.

    Every layer ``i`` keeps a sliding window of latents:
    ``model.layers.{i}.self_attn.attn``: sliding_window_mla, block B (64), window
    ``sliding_window`` (128), head ``head_dim`` (512).  ``compress_ratios[i]`` (the list
    may hold one more entry than layers, for the MTP layer) adds, for ratio r in {4, 128}:

    * ``model.layers.{i}.self_attn.mla_attn``: mla_attention, block 4B (256),
      ``compress_ratio`` r (one state per r tokens: 64 states a page for r=4, 2 for 128);
    * ``model.layers.{i}.self_attn.compressor.state_cache``: sliding_window_mla in
      float32 holding the not-yet-compressed token states: head ``2 x coff x head_dim``
      (kv and score; ``coff`` = 2 for the overlapping r=4 compressor, else 1), window
      ``coff x r``, block 4 (r=4) or 8 (r=128), as vLLM ``CompressorStateCache``;
    * r = 4 only (compressed sparse attention): the indexer,
      ``model.layers.{i}.self_attn.indexer.k_cache`` (mla_indexer, index_head_dim 128,
      block 4B, ratio 4) and its compressor state
      ``model.layers.{i}.self_attn.indexer.compressor.state_cache`` (float32, head
      ``2 x 2 x index_head_dim``, block 4, window 8).

    Ratios 0 and 1 mean sliding window only.  The kv_cache_dtype defaults (``auto``) to
    ``fp8_ds_mla`` with ``model_version="deepseek_v4"`` (584 B per state, pages aligned
    to 576 B), the layout FlashMLA uses for V4; every V4 spec carries alignment 576 in
    that mode, as vLLM does.
    """
    num_layers = _num_layers(mc)
    ratios = mc.get_list("compress_ratios", None, item="int", minimum=0,
                         choices=(0, 1, 4, 128))
    if ratios is None:
        ratios = [0] * num_layers
    if len(ratios) not in (num_layers, num_layers + 1):
        raise ConfigError(
            f"{mc._where()}: field 'compress_ratios' must list 0, 1, 4 or 128 for each of "
            f"the {num_layers} layers (plus one for the MTP layer), got {ratios!r}",
            field="compress_ratios")
    n_mtp = _num_mtp(mc, cc)
    head = mc.require("head_dim")
    window = mc.require("sliding_window")
    kv_dtype = _kv_cache_dtype(mc, cc)
    if kv_dtype == "auto":
        kv_dtype = FP8_DS_MLA
    flashmla = kv_dtype in (FP8_DS_MLA, "fp8_ds_mla_v4")
    align = 576 if flashmla else None
    bs = _block_size(cc)
    cbs = V4_COMPRESSED_BLOCK_FACTOR * bs
    common = dict(num_kv_heads=1, dtype=mc.dtype, model_version=DEEPSEEK_V4)
    swa = SlidingWindowMLASpec(block_size=bs, head_size=head, sliding_window=window,
                               kv_cache_dtype=kv_dtype, alignment=align, **common)

    def state(block: int, width: int, win: int) -> SlidingWindowMLASpec:
        return SlidingWindowMLASpec(block_size=block, head_size=width, sliding_window=win,
                                    num_kv_heads=1, dtype="float32", alignment=align)

    out: dict[str, KVCacheSpec] = {}
    for i in range(num_layers + n_mtp):
        r = ratios[i] if i < len(ratios) else 0
        p = f"model.layers.{i}.self_attn"
        out[f"{p}.attn"] = swa
        if r <= 1:
            continue
        if cbs % r:
            raise ConfigError(
                f"{mc._where()}: block size {bs} gives compressed blocks of {cbs} tokens, "
                f"not a multiple of compress ratio {r}; use a block size that is a "
                f"multiple of {r // V4_COMPRESSED_BLOCK_FACTOR}", field="block_size")
        coff = 2 if r == 4 else 1
        out[f"{p}.mla_attn"] = MLAAttentionSpec(
            block_size=cbs, head_size=head, kv_cache_dtype=kv_dtype, compress_ratio=r,
            alignment=align, **common)
        out[f"{p}.compressor.state_cache"] = state(4 if r == 4 else 8, 2 * coff * head,
                                                   coff * r)
        if r == 4:
            ih = mc.require("index_head_dim")
            out[f"{p}.indexer.k_cache"] = MLAIndexerSpec(
                block_size=cbs, head_size=ih, dtype=mc.dtype, compress_ratio=4,
                alignment=align)
            out[f"{p}.indexer.compressor.state_cache"] = state(4, 2 * 2 * ih, 2 * 4)
    return out


def kda_state_shapes(mc: Any, tp: int = 1, num_speculative_tokens: int = 0
                     ) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """Per-request state shapes of one Kimi Delta Attention (KDA) layer on one TP rank.

    From ``linear_attn_config`` (``num_heads`` H, ``head_dim`` D,
    ``short_conv_kernel_size`` K): the short convolutions over q, k and v keep the last
    K - 1 inputs (plus one per draft token), ``(K - 1 + num_spec, 3 x H x D / tp)`` in the
    model dtype, and the recurrent state is one D x D matrix per head, ``(H / tp, D, D)``
    in float32 (vLLM ``MambaStateShapeCalculator.kda_state_shape`` /
    ``kda_state_dtype``; the older vLLM form splits the convolution state into three
    ``(K - 1, H x D / tp)`` tensors: same bytes).  This is the formula kvcore-mamba's
    ``kvcore_mamba.shapes.kda_state_shapes`` uses too (computed here because plugins do
    not import each other).  Kimi-K3 (H 96, D 128, K 4), TP 1:
    3 x 36,864 x 2 + 96 x 128 x 128 x 4 = 6,512,640 B per layer per request.

    Raises ConfigError naming a missing or bad field, or an indivisible ``tp``.
    """
    lac = mc.get_dict("linear_attn_config")
    vals: dict[str, int] = {}
    for key, default in (("num_heads", REQUIRED), ("head_dim", REQUIRED),
                         ("short_conv_kernel_size", 4)):
        vals[key] = field_int(lac, key, default, where=mc._where(),
                              path=f"linear_attn_config.{key}", model_type=mc.model_type)
    h, d, k = vals["num_heads"], vals["head_dim"], vals["short_conv_kernel_size"]
    if h % tp:
        raise ConfigError(
            f"{mc._where()}: linear_attn_config.num_heads {h} is not divisible by "
            f"tensor_parallel_size {tp}", field="tensor_parallel_size")
    return ((k - 1 + num_speculative_tokens, 3 * h * d // tp), (h // tp, d, d))


def _kda_state_dtypes(mc: Any) -> tuple[str, str]:
    """(conv dtype, recurrent dtype): the model dtype, and ``mamba_ssm_cache_dtype`` /
    ``mamba_ssm_dtype`` when the config sets one (``auto`` = model dtype), else float32
    (vLLM ``kda_state_dtype``)."""
    from kvcore.dtypes import normalize_dtype

    for key in ("mamba_ssm_cache_dtype", "mamba_ssm_dtype"):
        value = mc.get_str(key, None)
        if value is not None:
            return mc.dtype, (mc.dtype if value.lower() == "auto"
                              else normalize_dtype(value))
    return mc.dtype, "float32"


#: block size of a ``none``-mode state when the config gives no max_position_embeddings
#: (kvcore-mamba's convention: one block per request, sized by the longest request)
NONE_MODE_STATE_BLOCK_SIZE = 1 << 20


def _kda_spec(mc: Any, cc: Any) -> KVCacheSpec:
    """The KDA state spec, built from the registry's ``mamba`` class (kvcore-mamba).

    Follows kvcore-mamba's conventions: ``none`` mode -> block_size =
    max_position_embeddings (one block per request); ``align`` / ``all`` -> the
    attention block size; ``num_speculative_blocks`` = num_speculative_tokens.
    Raises MissingPluginError naming kvcore-mamba when it is not installed.
    """
    from dataclasses import fields

    from kvcore.registry import get_registry

    mamba_cls = get_registry().spec_class("mamba")  # MissingPluginError -> kvcore-mamba
    num_spec = int(getattr(cc, "num_speculative_tokens", 0) or 0)
    mode = getattr(cc, "mamba_cache_mode", "none") or "none"
    shapes = kda_state_shapes(mc, int(getattr(cc, "tensor_parallel_size", 1) or 1),
                              num_spec)
    block = (mc.max_position_embeddings or NONE_MODE_STATE_BLOCK_SIZE) if mode == "none" \
        else _block_size(cc)
    kwargs: dict[str, Any] = dict(block_size=block, shapes=shapes,
                                  dtypes=_kda_state_dtypes(mc), mamba_cache_mode=mode)
    if "num_speculative_blocks" in {f.name for f in fields(mamba_cls)}:
        kwargs["num_speculative_blocks"] = num_spec
    try:
        return mamba_cls(**kwargs)
    except TypeError as exc:
        raise KVCoreError(
            f"the 'mamba' spec class {mamba_cls.__name__} does not accept the fields "
            f"kvcore-mla passes for the KDA layers ({', '.join(kwargs)}): {exc}") from exc


def kimi_layer_specs(mc: Any, cc: Any) -> dict[str, KVCacheSpec]:
    """Kimi-K3 / Kimi-Linear: MLA full-attention layers and KDA linear-attention layers.

    ``linear_attn_config.full_attn_layers`` and ``kda_layers`` are 1-based layer
    numbers; as in vLLM 0.32 (``is_kda_layer``) a layer of ``kda_layers`` is KDA and
    every other decoder layer MLA (``full_attn_layers`` is checked, not needed).  MLA layer ``i`` (0-based): ``model.layers.{i}.self_attn.attn``
    (mla_attention, head kv_lora_rank + qk_rope_head_dim = 576); KDA layer ``i``:
    ``model.layers.{i}.self_attn`` with the ``mamba`` kind taken from the registry
    (kvcore-mamba, never imported), shapes from :func:`kda_state_shapes`.

    kvcore-mla owns these model types (the hook is firstresult, so one adapter returns
    every layer).  Raises MissingPluginError naming kvcore-mamba when it is not
    installed.
    """
    lac = mc.get_dict("linear_attn_config")
    num_layers = _num_layers(mc)
    full = field_list(lac, "full_attn_layers", [], where=mc._where(),
                      path="linear_attn_config.full_attn_layers")
    kda = field_list(lac, "kda_layers", [], where=mc._where(),
                     path="linear_attn_config.kda_layers")
    kinds: dict[int, str] = {}
    for key, idx, kind in (("full_attn_layers", full, "mla"), ("kda_layers", kda, "kda")):
        if not isinstance(idx, list) or any(
                not isinstance(x, int) or isinstance(x, bool) or not 1 <= x <= num_layers
                for x in idx):
            raise ConfigError(f"{mc._where()}: field 'linear_attn_config.{key}' must list "
                              f"1-based layer numbers in 1..{num_layers}",
                              field=f"linear_attn_config.{key}")
        for x in idx:
            if x - 1 in kinds:
                raise ConfigError(f"{mc._where()}: layer {x} is listed twice in "
                                  f"linear_attn_config", field=f"linear_attn_config.{key}")
            kinds[x - 1] = kind
    mla = _mla(mc, cc)
    kda_spec = _kda_spec(mc, cc) if kda else None
    out: dict[str, KVCacheSpec] = {}
    # vLLM 0.32 decides per layer: config.is_kda_layer(i) ((i + 1) in kda_layers) is a KDA
    # layer, every other one MultiHeadLatentAttention (models/kimi_k3, kimi_linear);
    # full_attn_layers is never consulted, so a layer in neither list is MLA
    kinds = {i: "kda" if kinds.get(i) == "kda" else "mla" for i in range(num_layers)}
    for i in sorted(kinds):
        if kinds[i] == "mla":
            out[f"model.layers.{i}.self_attn.attn"] = mla
        else:
            out[f"model.layers.{i}.self_attn"] = kda_spec  # type: ignore[assignment]
    return out


_ADAPTERS = {
    "deepseek_v2": deepseek_layer_specs,
    "deepseek_v3": deepseek_layer_specs,
    "deepseek_v32": deepseek_layer_specs,
    "kimi_k2": deepseek_layer_specs,
    "glm_moe_dsa": glm_moe_dsa_layer_specs,
    "deepseek_v4": deepseek_v4_layer_specs,
    "kimi_k3": kimi_layer_specs,
    "kimi_linear": kimi_layer_specs,
}

#: the HF model_type values kvcore-mla serves
MLA_MODEL_TYPES: tuple[str, ...] = tuple(_ADAPTERS)


def mla_layer_specs(model_config: Any, cache_config: Any) -> dict[str, KVCacheSpec] | None:
    """The ``kvcore_layer_specs`` adapter: specs for the model types in
    :data:`MLA_MODEL_TYPES`, None for any other."""
    fn = _ADAPTERS.get(model_config.model_type)
    if fn is None:
        return None
    return fn(model_config, cache_config)
