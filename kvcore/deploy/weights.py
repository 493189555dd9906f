"""Weight bytes of a model from its ``config.json`` alone, whole and per rank.

:func:`estimate_weights` lists every tensor a checkpoint of the config holds (names and
shapes as in the HuggingFace / vLLM model code), stores each in the dtype the config
declares (``torch_dtype`` and ``quantization_config``), and places it on ranks the way
vLLM shards it:

* tensor parallel (``tensor_parallel_size``): column-parallel weights (q/k/v, gate/up,
  in_proj ...) split their output rows, row-parallel ones (o_proj, down_proj,
  out_proj) their input columns; k/v projections with fewer KV heads than ranks are
  replicated (one head per rank, vLLM's ``QKVParallelLinear``); embeddings and the LM head
  are vocab-parallel (vocabulary padded to a multiple of 64, vLLM's
  ``DEFAULT_VOCAB_PADDING_SIZE``); norms, routers, MLA's q/kv down-projections and the DSA
  indexer are replicated;
* MoE experts split by TP, or, with ``enable_expert_parallel``, whole experts over
  ``tensor_parallel_size * data_parallel_size`` ranks (vLLM's EP group);
* pipeline parallel: decoder layers split as vLLM's ``get_pp_indices`` does (an uneven
  remainder goes to the stages before the last), embeddings and vision/audio towers on the
  first stage, the final norm and LM head on the last (a tied head is stored again there);
* ``data_parallel_size`` replicas multiply GPUs, not per-rank memory.

Stored sizes (``quantization_config.quant_method``):

* ``fp8``: 1 byte per weight, plus a float32 ``weight_scale_inv`` per
  ``weight_block_size`` block (DeepSeek-V3 style) or one per tensor, plus a float32
  input scale per tensor with ``activation_scheme: static``;
* ``awq`` / ``gptq``: ``bits``-wide packed weights, fp16 scales and packed zeros per
  ``group_size`` inputs per output (GPTQ adds an int32 ``g_idx`` per input);
* ``mxfp4`` (gpt-oss): MoE experts as 4-bit values with one uint8 (E8M0) scale per 32;
* ``modelopt`` NVFP4 (``quant_algo: NVFP4`` or 4-bit float groups of 16): 4-bit values,
  one FP8 scale per 16, a float32 global and input scale per tensor; modelopt FP8: 1 byte
  plus float32 scales;
* ``compressed-tensors``: per ``config_groups`` entry: ``num_bits``, ``type``,
  ``strategy`` (tensor, channel, group, block, tensor_group) and ``group_size`` give the
  packed weight, scales (and zero points when not symmetric);
* modules matched by the config's ignore list (``ignore``, ``ignored_layers``,
  ``modules_to_not_convert``, ``exclude_modules``; globs or ``re:`` regexes) stay in
  ``torch_dtype``.  Embeddings, norms, routers and biases are never quantized; the LM head
  only by compressed-tensors / modelopt when the ignore list does not name it.

MTP / next-n layers (``num_nextn_predict_layers``, ``mtp_num_hidden_layers``) are in the
checkpoint total but reported apart (``mtp_bytes``) and only loaded per rank with
``include_mtp_layers``, as vLLM loads them only for speculative decoding.

When a ``model.safetensors.index.json`` lies beside the config, its
``metadata.total_size`` is the exact checkpoint size and wins for the total; per-rank
figures are the config breakdown scaled by ``total_size / config total``
(``source == "safetensors-index"``).

Accuracy: ``tests/test_weights.py`` checks every full embedded config against published
checkpoint figures (each cited; within 0.5% for dense bf16 models, 3% for quantized and
MoE ones), and the parameter count of every embedded config and of generated configs of
each supported family against transformers' own model built on the meta device (equal,
parameter for parameter).  Engines may pad some tensors when loading them (vLLM's MXFP4
MoE kernels round the experts' dimensions up); those bytes are not in the checkpoint and
not counted here.
"""

from __future__ import annotations

import fnmatch
import math
import re
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kvcore.errors import ConfigError
from kvcore.models.config import (
    REQUIRED,
    ConfigView,
    ModelConfig,
    load_model_config,
    read_json_file,
)
from kvcore.planning import pp_layer_partition  # one definition

__all__ = ["WeightTensor", "WeightsEstimate", "estimate_weights", "pp_layer_partition",
           "TENSOR_CLASSES", "WeightsIndexWarning"]


class WeightsIndexWarning(UserWarning):
    """A safetensors index whose total differs from the config's estimate by more than
    :data:`INDEX_MISMATCH_FACTOR`."""

#: tensor classes of the breakdown
TENSOR_CLASSES = ("embedding", "lm_head", "attention", "mlp", "moe_experts",
                  "moe_shared_experts", "router", "norm", "mamba", "linear_attention",
                  "mtp", "vision", "audio", "encoder")

#: vLLM pads vocab-parallel embeddings to a multiple of this (DEFAULT_VOCAB_PADDING_SIZE)
VOCAB_PADDING = 64

_FLOAT_BYTES = {"float32": 4, "float": 4, "float16": 2, "bfloat16": 2, "half": 2}


@dataclass(frozen=True)
class WeightTensor:
    """One checkpoint tensor (or ``count`` identical ones, e.g. the experts of a layer).

    Attributes
    ----------
    name:
        HF module name of the (first) tensor, e.g. ``model.layers.3.mlp.experts.0.up_proj``.
    tensor_class:
        One of :data:`TENSOR_CLASSES`.
    shape:
        ``(out_features, in_features)`` for a linear, ``(numel,)`` otherwise.
    count:
        Identical tensors this entry stands for (experts of one layer, ...).
    parallel:
        ``column`` / ``row`` (split by TP), ``kv`` (split over min(TP, num_kv_heads)),
        ``vocab`` (rows padded to 64 and split by TP), ``expert`` (split by TP or EP),
        ``replicated``.
    where:
        ``embed`` (first PP stage), ``head`` (last stage), ``layer`` (``layer`` index),
        ``tower`` (first stage), ``mtp`` (last stage, loaded only with MTP).
    linear:
        A weight matrix a quantization method may store quantized.
    bias:
        A bias of ``shape[0]`` elements goes with the weight (never quantized).
    """

    name: str
    tensor_class: str
    shape: tuple[int, ...]
    count: int = 1
    parallel: str = "replicated"
    where: str = "layer"
    layer: int = -1
    linear: bool = False
    bias: bool = False
    dtype_bytes: int | None = None  # forces an element size (float32 parameters)

    @property
    def numel(self) -> int:
        return math.prod(self.shape) * self.count + (self.shape[0] * self.count
                                                     if self.bias else 0)


@dataclass(frozen=True)
class WeightsEstimate:
    """Weight bytes of a model, whole and per rank.

    Attributes
    ----------
    total_bytes:
        The whole checkpoint (MTP layers and towers included), bytes; from the safetensors
        index when ``source == "safetensors-index"``.
    config_total_bytes:
        The same from the config breakdown.
    total_params:
        Parameters in the checkpoint (scales and zero points not counted).
    per_rank_bytes:
        Bytes one GPU loads on the fullest pipeline stage (MTP only with
        ``include_mtp_layers``).
    per_stage_bytes:
        Bytes per rank of each pipeline stage.
    by_class:
        Whole-checkpoint bytes per tensor class.
    mtp_bytes:
        Whole-checkpoint bytes of the MTP / next-n layers (0 without).
    source:
        ``"config"`` or ``"safetensors-index"``.
    quantization:
        The weight quantization method (``None`` = unquantized).
    num_gpus:
        ``tensor_parallel_size * pipeline_parallel_size * data_parallel_size``.
    """

    total_bytes: int
    config_total_bytes: int
    total_params: int
    per_rank_bytes: int
    per_stage_bytes: tuple[int, ...]
    by_class: dict[str, int]
    mtp_bytes: int
    mtp_params: int
    source: str
    quantization: str | None
    tensor_parallel_size: int
    pipeline_parallel_size: int
    data_parallel_size: int
    enable_expert_parallel: bool
    include_mtp_layers: bool
    num_gpus: int
    index_path: str | None = None
    notes: tuple[str, ...] = field(default=())

    def to_dict(self) -> dict[str, Any]:
        return {
            "weights_bytes": self.per_rank_bytes,
            "weights_bytes_total": self.total_bytes,
            "weights_bytes_config_total": self.config_total_bytes,
            "weights_params_total": self.total_params,
            "weights_bytes_per_stage": list(self.per_stage_bytes),
            "weights_bytes_by_class": dict(self.by_class),
            "weights_mtp_bytes": self.mtp_bytes,
            "weights_mtp_params": self.mtp_params,
            "weights_source": self.source,
            "weights_quantization": self.quantization,
            "num_gpus": self.num_gpus,
        }


# ---- config reading ------------------------------------------------------------------------
#
# Every field is read through kvcore.models.config's typed readers (ConfigView): a present
# field of the wrong type or out of its bounds is a ConfigError naming it, never a default
# and never a TypeError; counts that drive a loop (layers, tower depth, MTP layers) are
# bounded (kvcore.units.BOUNDS) before the loop runs.

#: the most layers of any one stack (decoder, encoder, tower, MTP) a config may declare
MAX_LAYERS = 10_000


class _Builder:
    def __init__(self) -> None:
        self.tensors: list[WeightTensor] = []

    def add(self, name: str, cls: str, shape: Sequence[int], **kw: Any) -> None:
        shape = tuple(int(s) for s in shape)
        if all(s > 0 for s in shape) and kw.get("count", 1) > 0:
            self.tensors.append(WeightTensor(name, cls, shape, **kw))

    def linear(self, name: str, cls: str, out_f: int, in_f: int, parallel: str,
               **kw: Any) -> None:
        self.add(name, cls, (out_f, in_f), parallel=parallel, linear=True, **kw)

    def norm(self, name: str, size: int, cls: str = "norm", bias: bool = False,
             **kw: Any) -> None:
        self.add(name, cls, (size,), bias=bias, **kw)


def _layers(v: ConfigView, *keys: str, default: Any = REQUIRED) -> int:
    """A layer count (>= 0, at most :data:`MAX_LAYERS`): checked before any loop."""
    n: int = v.get_first_int(*keys, default=default, minimum=0, maximum=MAX_LAYERS)
    return n


def _layer_kinds(cfg: ModelConfig, n: int) -> list[str]:
    """'attention' | 'linear_attention' per layer (mixer)."""
    v = cfg.view
    lt = cfg.layer_types
    if lt and len(lt) == n:
        return ["linear_attention" if "linear" in t else "attention" for t in lt]
    interval = v.get_int("full_attention_interval", None)
    if interval and v.has("linear_num_key_heads"):
        return ["attention" if (i + 1) % interval == 0 else "linear_attention"
                for i in range(n)]
    kda_list = cfg.section("linear_attn_config").get_list_of_int("kda_layers", None,
                                                                   minimum=1)
    if kda_list is not None:
        kda = set(kda_list)  # 1-based
        return ["linear_attention" if i + 1 in kda else "attention" for i in range(n)]
    return ["attention"] * n


class _MoELayout:
    """Which decoder layers are MoE (read once, before the layer loop)."""

    def __init__(self, v: ConfigView, num_experts: int) -> None:
        self.e = num_experts
        self.mlp_types = v.get_list_of_str("mlp_layer_types", None)
        self.mlp_only = set(v.get_list_of_int("mlp_only_layers", []))
        self.first_k = v.get_int("first_k_dense_replace", 0, minimum=0)
        self.has_first_k = v.has("first_k_dense_replace")
        self.freq = v.get_int_or_list("moe_layer_freq", 1)
        self.step = v.get_int("decoder_sparse_step", None) or \
            v.get_int("interleave_moe_layer_step", None) or 1
        self.interleave = v.has("interleave_moe_layer_step")

    def is_moe(self, i: int) -> bool:
        if self.e <= 0:
            return False
        if self.mlp_types is not None and i < len(self.mlp_types):
            return "dense" not in self.mlp_types[i].lower()
        if i in self.mlp_only or i < self.first_k:
            return False
        if isinstance(self.freq, list):
            return bool(self.freq[i]) if i < len(self.freq) else True
        if self.interleave and self.step > 1:
            return (i + 1) % self.step == 0
        return (i - self.first_k) % self.freq == 0 if self.has_first_k \
            else (i + 1) % self.step == 0


#: the fields that give the routed-expert count, in the order vLLM's configs use them
EXPERT_COUNT_KEYS = ("n_routed_experts", "num_experts", "num_local_experts",
                     "moe_num_experts")


#: the fields that give the experts each token is routed to
TOP_K_KEYS = ("num_experts_per_tok", "experts_per_token", "top_k_experts",
              "moe_topk", "num_selected_experts")


def _num_experts(v: ConfigView) -> int:
    """Routed experts per MoE layer (0 = dense).  A present count must be an int >= 0:
    ``"128"``, -3, 2.5 or true are errors naming the field (never 0 experts).  A config
    that routes each token to k > 0 experts (``num_experts_per_tok``) must give a count
    of at least k: without it the model would silently plan as dense (vLLM's MoE layers
    need ``top_k <= num_experts``)."""
    n: int = v.get_first_int(*EXPERT_COUNT_KEYS, default=0, minimum=0, maximum=1 << 16)
    top_k = v.get_first_int(*TOP_K_KEYS, default=0, minimum=0, maximum=1 << 16)
    if top_k and n < top_k:
        key = next((k for k in EXPERT_COUNT_KEYS if v.has(k)), None)
        tk = next(k for k in TOP_K_KEYS if v.has(k))
        if key is None:
            raise ConfigError(
                f"{v.where}: the config routes each token to {tk} = {top_k} experts but "
                f"gives no expert count ({', '.join(EXPERT_COUNT_KEYS)}); without it the "
                f"model would be planned as dense", field=EXPERT_COUNT_KEYS[0])
        raise ConfigError(f"{v.where}: {key} = {n} is fewer than {tk} = {top_k} (each "
                          f"token is routed to {tk} of the experts)", field=key, value=n)
    return n


def _attention(b: _Builder, cfg: ModelConfig, p: str, i: int, h: int,
               cls: str = "attention", where: str = "layer") -> None:
    v = cfg.view
    if v.get_int("kv_lora_rank", 0, minimum=0):
        _mla(b, v, p, i, h, cls, where)
        return
    heads = v.get_int("num_attention_heads")
    kv = v.get_int("num_key_value_heads", heads)
    hd = cfg.head_dim or v.get_int("head_dim")
    v_hd = v.get_int("v_head_dim", 0, minimum=0) or hd  # MiMo: v/o narrower than q/k
    pattern = v.get_list_of_int("hybrid_layer_pattern", None, maximum=1)  # MiMo-V2
    swa = None
    if pattern is not None and 0 <= i < len(pattern):
        swa = pattern[i] == 1
    elif cfg.layer_types and 0 <= i < len(cfg.layer_types):
        t = cfg.layer_types[i]
        global_hd = v.get_int("global_head_dim", 0, minimum=0)
        if t == "full_attention" and global_hd:  # Gemma-4 full layers
            hd = v_hd = global_hd
            kv = v.get_int("num_global_key_value_heads", 0, minimum=0) or kv
        swa = "sliding" in t
    swa_hd = v.get_int("swa_head_dim", 0, minimum=0)
    if swa and swa_hd:  # separate SWA shapes (MiMo-V2)
        heads = v.get_int("swa_num_attention_heads", 0, minimum=0) or heads
        kv = v.get_int("swa_num_key_value_heads", 0, minimum=0) or kv
        hd = swa_hd
        v_hd = v.get_first_int("swa_v_head_dim", "v_head_dim", default=0, minimum=0) or hd
    mt = cfg.model_type
    attention_bias = v.get_bool("attention_bias", False)
    qkv_bias = attention_bias or mt in ("qwen2", "qwen2_moe", "qwen2_vl", "qwen2_5_vl")
    o_bias = attention_bias and mt not in ("qwen2", "qwen2_moe")
    # output-gated attention: the q projection carries the gate (Qwen3-Next / 3.5 default)
    gated = v.get_bool("attn_output_gate", mt.startswith(("qwen3_next", "qwen3_5")))
    kw: dict[str, Any] = {"where": where, "layer": i}
    b.linear(f"{p}.self_attn.q_proj", cls, heads * hd * (2 if gated else 1), h, "column",
             bias=qkv_bias, **kw)
    b.linear(f"{p}.self_attn.k_proj", cls, kv * hd, h, "kv", bias=qkv_bias, **kw)
    k_eq_v = v.get_bool("attention_k_eq_v", False) and cfg.layer_types is not None and \
        0 <= i < len(cfg.layer_types) and cfg.layer_types[i] == "full_attention"
    if not k_eq_v:
        b.linear(f"{p}.self_attn.v_proj", cls, kv * v_hd, h, "kv", bias=qkv_bias, **kw)
    b.linear(f"{p}.self_attn.o_proj", cls, h, heads * v_hd, "row", bias=o_bias, **kw)
    if v.get_bool("add_swa_attention_sink_bias" if swa else "add_full_attention_sink_bias",
                  False):
        b.add(f"{p}.self_attn.attention_sink_bias", cls, (heads,), parallel="column", **kw)
    if mt == "olmo2":  # OLMo-2 normalizes the whole q / k projections
        b.norm(f"{p}.self_attn.q_norm", heads * hd, **kw)
        b.norm(f"{p}.self_attn.k_norm", kv * hd, **kw)
    elif mt in ("qwen3", "qwen3_moe", "qwen3_next", "qwen3_5", "qwen3_5_moe",
                "qwen3_5_text", "qwen3_5_moe_text", "gemma3", "gemma3_text", "gemma4",
                "gemma4_text", "qwen3_vl", "qwen3_vl_moe"):
        b.norm(f"{p}.self_attn.q_norm", hd, **kw)
        b.norm(f"{p}.self_attn.k_norm", hd, **kw)
    if mt == "gpt_oss":
        b.add(f"{p}.self_attn.sinks", cls, (heads,), parallel="column", **kw)


def _mla(b: _Builder, v: ConfigView, p: str, i: int, h: int, cls: str, where: str) -> None:
    heads = v.get_int("num_attention_heads")
    q_lora = v.get_int("q_lora_rank", 0, minimum=0)
    kv_lora = v.get_int("kv_lora_rank")
    nope = v.get_int("qk_nope_head_dim", minimum=0)
    rope = v.get_int("qk_rope_head_dim", minimum=0)
    v_dim = v.get_int("v_head_dim")
    kw: dict[str, Any] = {"where": where, "layer": i}
    bias = v.get_bool("attention_bias", False)
    if q_lora:
        b.linear(f"{p}.self_attn.q_a_proj", cls, q_lora, h, "replicated", bias=bias, **kw)
        b.norm(f"{p}.self_attn.q_a_layernorm", q_lora, **kw)
        b.linear(f"{p}.self_attn.q_b_proj", cls, heads * (nope + rope), q_lora, "column",
                 **kw)
    else:
        b.linear(f"{p}.self_attn.q_proj", cls, heads * (nope + rope), h, "column", **kw)
    b.linear(f"{p}.self_attn.kv_a_proj_with_mqa", cls, kv_lora + rope, h, "replicated",
             bias=bias, **kw)
    b.norm(f"{p}.self_attn.kv_a_layernorm", kv_lora, **kw)
    b.linear(f"{p}.self_attn.kv_b_proj", cls, heads * (nope + v_dim), kv_lora, "column", **kw)
    b.linear(f"{p}.self_attn.o_proj", cls, h, heads * v_dim, "row", **kw)
    types = v.get_list_of_str("indexer_types", None)
    shared = types is not None and 0 <= i < len(types) and types[i] != "full"
    ih = v.get_int("index_n_heads", 0, minimum=0)
    idim = v.get_int("index_head_dim", 0, minimum=0)
    if ih and idim and not shared:
        # DSA lightning indexer (GLM-5.2's "shared" layers reuse another layer's)
        b.linear(f"{p}.self_attn.indexer.wq_b", cls, ih * idim, q_lora or h, "replicated",
                 **kw)
        b.linear(f"{p}.self_attn.indexer.wk", cls, idim, h, "replicated", **kw)
        b.norm(f"{p}.self_attn.indexer.k_norm", idim, bias=True, **kw)
        b.add(f"{p}.self_attn.indexer.weights_proj", cls, (ih, h), parallel="replicated",
              **kw)


def _gdn(b: _Builder, v: ConfigView, p: str, i: int, h: int) -> None:
    """Gated DeltaNet (Qwen3-Next / Qwen3.5 linear_attention layers)."""
    nk = v.get_int("linear_num_key_heads")
    nv = v.get_int("linear_num_value_heads")
    dk = v.get_int("linear_key_head_dim")
    dv = v.get_int("linear_value_head_dim")
    kern = v.get_int("linear_conv_kernel_dim", 4)
    key_dim, value_dim = nk * dk, nv * dv
    cls = "linear_attention"
    kw: dict[str, Any] = {"layer": i}
    b.linear(f"{p}.linear_attn.in_proj_qkvz", cls, 2 * key_dim + 2 * value_dim, h,
             "column", **kw)
    b.linear(f"{p}.linear_attn.in_proj_ba", cls, 2 * nv, h, "column", **kw)
    b.add(f"{p}.linear_attn.conv1d", cls, (2 * key_dim + value_dim, kern),
          parallel="column", **kw)
    b.add(f"{p}.linear_attn.dt_bias", cls, (nv,), parallel="column", **kw)
    b.add(f"{p}.linear_attn.A_log", cls, (nv,), parallel="column", **kw)
    b.norm(f"{p}.linear_attn.norm", dv, **kw)
    b.linear(f"{p}.linear_attn.out_proj", cls, h, value_dim, "row", **kw)


def _kda(b: _Builder, v: ConfigView, p: str, i: int, h: int) -> None:
    """Kimi Delta Attention (``linear_attn_config.kda_layers``), as vLLM's
    ``kimi_gdn_linear_attn``: q/k/v (+ a full-rank gate g, or the low-rank g_a/g_b), the
    f_a/f_b gate, beta (b), float32 short convolutions, dt_bias and A_log."""
    lin = v.section("linear_attn_config")
    nh = lin.get_int("num_heads", None) or v.get_int("num_attention_heads", 1)
    hd = lin.get_int("head_dim", 128)
    kern = lin.get_int("short_conv_kernel_size", 4)
    d = nh * hd
    cls = "linear_attention"
    kw: dict[str, Any] = {"layer": i}
    full_gate = lin.get_bool("use_full_rank_gate", False)
    for proj in ("q_proj", "k_proj", "v_proj") + (("g_proj",) if full_gate else ()):
        b.linear(f"{p}.self_attn.{proj}", cls, d, h, "column", **kw)
    for conv in ("q_conv1d", "k_conv1d", "v_conv1d"):
        b.add(f"{p}.self_attn.{conv}", cls, (d, kern), parallel="column", dtype_bytes=4,
              **kw)
    b.linear(f"{p}.self_attn.f_a_proj", cls, hd, h, "replicated", **kw)
    b.linear(f"{p}.self_attn.f_b_proj", cls, d, hd, "column", **kw)
    b.linear(f"{p}.self_attn.b_proj", cls, nh, h, "column", **kw)
    if not full_gate:
        b.linear(f"{p}.self_attn.g_a_proj", cls, hd, h, "replicated", **kw)
        b.linear(f"{p}.self_attn.g_b_proj", cls, d, hd, "column", **kw)
    b.add(f"{p}.self_attn.A_log", cls, (nh,), parallel="column", dtype_bytes=4, **kw)
    b.add(f"{p}.self_attn.dt_bias", cls, (d,), parallel="column", dtype_bytes=4, **kw)
    b.norm(f"{p}.self_attn.o_norm", hd, **kw)
    b.linear(f"{p}.self_attn.o_proj", cls, h, d, "row", **kw)


def _mamba2(b: _Builder, p: str, i: int, h: int, *, d_inner: int, nheads: int,
            ngroups: int, d_state: int, d_conv: int, conv_bias: bool, proj_bias: bool,
            where: str = "layer") -> None:
    cls = "mamba"
    kw: dict[str, Any] = {"layer": i, "where": where}
    conv_dim = d_inner + 2 * ngroups * d_state
    b.linear(f"{p}.mixer.in_proj", cls, 2 * d_inner + 2 * ngroups * d_state + nheads, h,
             "column", bias=proj_bias, **kw)
    b.add(f"{p}.mixer.conv1d", cls, (conv_dim, d_conv), parallel="column", bias=conv_bias,
          **kw)
    for name in ("dt_bias", "A_log", "D"):
        b.add(f"{p}.mixer.{name}", cls, (nheads,), parallel="column", **kw)
    b.add(f"{p}.mixer.norm", cls, (d_inner,), parallel="column", **kw)
    b.linear(f"{p}.mixer.out_proj", cls, h, d_inner, "row", bias=proj_bias, **kw)


def _mlp(b: _Builder, p: str, i: int, h: int, inter: int,
         gated: bool = True, bias: bool = False, cls: str = "mlp",
         where: str = "layer", prefix: str = "mlp") -> None:
    kw: dict[str, Any] = {"layer": i, "where": where}
    if gated:
        b.linear(f"{p}.{prefix}.gate_proj", cls, inter, h, "column", bias=bias, **kw)
    b.linear(f"{p}.{prefix}.up_proj", cls, inter, h, "column", bias=bias, **kw)
    b.linear(f"{p}.{prefix}.down_proj", cls, h, inter, "row", bias=bias, **kw)


def _moe(b: _Builder, cfg: ModelConfig, p: str, i: int, h: int, where: str = "layer",
         cls_override: str | None = None) -> None:
    v = cfg.view
    e = _num_experts(v)
    inter = v.get_first_int("moe_intermediate_size", "intermediate_size")
    kw: dict[str, Any] = {"layer": i, "where": where}
    cls_e = cls_override or "moe_experts"
    cls_s = cls_override or "moe_shared_experts"
    cls_r = cls_override or "router"
    mt = cfg.model_type
    bias = mt == "gpt_oss"
    b.add(f"{p}.mlp.gate", cls_r, (e, h), parallel="replicated", bias=bias, **kw)
    if mt.startswith("gemma4"):  # Gemma-4's router: a scale per hidden unit and expert
        b.add(f"{p}.router.scale", cls_r, (h,), **kw)
        b.add(f"{p}.router.per_expert_scale", cls_r, (e,), **kw)
    if v.get_str("topk_method", "") == "noaux_tc" or mt in ("glm_moe_dsa", "glm4_moe"):
        b.add(f"{p}.mlp.gate.e_score_correction_bias", cls_r, (e,), dtype_bytes=4, **kw)
    for proj in ("gate_proj", "up_proj", "down_proj"):
        out_f, in_f = (h, inter) if proj == "down_proj" else (inter, h)
        b.add(f"{p}.mlp.experts.0.{proj}", cls_e, (out_f, in_f), count=e,
              parallel="expert", linear=True, bias=bias, **kw)
    shared = v.get_first_int("n_shared_experts", "num_shared_experts", default=0,
                             minimum=0, maximum=1 << 16)
    if shared:
        _mlp(b, p, i, h, inter * shared, cls=cls_s, where=where,
             prefix="mlp.shared_experts")
    if mt.startswith("llama4"):  # Llama-4: one shared expert of intermediate_size
        _mlp(b, p, i, h, inter, cls=cls_s, where=where, prefix="mlp.shared_expert")
    sh_inter = v.get_int("shared_expert_intermediate_size", 0, minimum=0)
    if sh_inter:
        _mlp(b, p, i, h, sh_inter, cls=cls_s, where=where, prefix="mlp.shared_expert")
        b.add(f"{p}.mlp.shared_expert_gate", cls_r, (1, h), **kw)


def _towers(b: _Builder, top: ConfigView, text_hidden: int) -> None:
    vc = top.section("vision_config")
    if not vc.is_empty():
        _vision(b, vc, text_hidden)
    ac = top.section("audio_config")
    if ac.has("hidden_size") or ac.has("d_model"):
        hh = ac.get_first_int("hidden_size", "d_model")
        layers = _layers(ac, "num_hidden_layers", "encoder_layers", default=0)
        inter = ac.get_first_int("intermediate_size", "encoder_ffn_dim", default=4 * hh)
        for i in range(layers):
            for proj in ("q", "k", "v", "o"):
                b.linear(f"audio_tower.layers.{i}.{proj}", "audio", hh, hh, "column",
                         where="tower", bias=True)
            b.linear(f"audio_tower.layers.{i}.fc1", "audio", inter, hh, "column",
                     where="tower", bias=True)
            b.linear(f"audio_tower.layers.{i}.fc2", "audio", hh, inter, "row",
                     where="tower", bias=True)
        b.linear("audio_tower.projector", "audio", text_hidden, hh, "column", where="tower")


#: the fields that give a vision tower's width
VISION_WIDTH_KEYS = ("hidden_size", "vt_hidden_size", "embed_dim")


def _vision(b: _Builder, vc: ConfigView, text_hidden: int) -> None:
    """A vision tower.  A present ``vision_config`` must give the tower's width (one of
    :data:`VISION_WIDTH_KEYS`): without it the tower would be silently dropped."""
    hv = vc.get_first_int(*VISION_WIDTH_KEYS, default=None)
    if hv is None:
        raise ConfigError(
            f"{vc.where}: vision_config has none of {', '.join(VISION_WIDTH_KEYS)} (the "
            f"vision tower's width, needed for its weights)", field="vision_config")
    layers = _layers(vc, "num_hidden_layers", "depth", "vt_num_hidden_layers", default=0)
    inter = vc.get_first_int("intermediate_size", "vt_intermediate_size", default=4 * hv)
    patch = vc.get_int("patch_size", 14)
    chans = vc.get_first_int("num_channels", "in_channels", default=3)
    temporal = vc.get_int("temporal_patch_size", 1)
    mtype = vc.get_str("model_type", "")
    gemma4 = mtype.startswith("gemma4")
    bias = not gemma4 and vc.get_bool("attn_bias", True)
    kw: dict[str, Any] = {"where": "tower"}
    if mtype == "llama4_vision_model":
        _llama4_vision(b, vc, hv, layers, inter, patch, chans, text_hidden)
        return
    b.linear("vision_tower.patch_embed", "vision", hv, chans * temporal * patch * patch,
             "replicated", bias=not gemma4 and vc.get_bool("patch_embed_proj_bias", True),
             **kw)
    n_pos = vc.get_int("num_position_embeddings", 0, minimum=0)
    image = vc.get_int("image_size", 0, minimum=0)
    pos_size = vc.get_int("position_embedding_size", 0, minimum=0)
    pos_h = vc.get_int("init_pos_emb_height", 0, minimum=0)
    if n_pos:
        b.add("vision_tower.pos_embed", "vision", (n_pos, hv), **kw)
    elif image:
        b.add("vision_tower.position_embedding", "vision", ((image // patch) ** 2, hv), **kw)
    elif pos_size:
        b.add("vision_tower.position_embedding_table", "vision", (2, pos_size, hv), **kw)
    elif pos_h:
        b.add("vision_tower.pos_emb", "vision",
              (pos_h * vc.get_int("init_pos_emb_width", 1), hv), **kw)
    head_dim = vc.get_int("head_dim", 0, minimum=0) or 64
    layer_norm = vc.get_str("norm_type", "layer_norm") != "rmsnorm"
    for i in range(layers):
        q = f"vision_tower.layers.{i}"
        for proj in ("q_proj", "k_proj", "v_proj"):
            b.linear(f"{q}.{proj}", "vision", hv, hv, "column", bias=bias, **kw)
        b.linear(f"{q}.o_proj", "vision", hv, hv, "row", bias=bias, **kw)
        if gemma4:
            b.norm(f"{q}.q_norm", head_dim, cls="vision", **kw)
            b.norm(f"{q}.k_norm", head_dim, cls="vision", **kw)
            for n in range(4):
                b.norm(f"{q}.norm{n}", hv, cls="vision", **kw)
            b.linear(f"{q}.mlp.gate_proj", "vision", inter, hv, "column", **kw)
        else:
            b.norm(f"{q}.norm1", hv, cls="vision", bias=layer_norm, **kw)
            b.norm(f"{q}.norm2", hv, cls="vision", bias=layer_norm, **kw)
        b.linear(f"{q}.mlp.fc1", "vision", inter, hv, "column", bias=bias, **kw)
        b.linear(f"{q}.mlp.fc2", "vision", hv, inter, "row", bias=bias, **kw)
    if gemma4 and vc.get_bool("standardize", False):
        b.add("vision_tower.std_bias", "vision", (hv,), **kw)
        b.add("vision_tower.std_scale", "vision", (hv,), **kw)
    merge = vc.get_int("spatial_merge_size", 0, minimum=0, maximum=1 << 10)
    if mtype == "siglip_vision_model":
        b.norm("vision_tower.post_layernorm", hv, cls="vision", bias=True, **kw)
        # Gemma-3 projector: mm_input_projection_weight + mm_soft_emb_norm
        b.add("multi_modal_projector.mm_input_projection_weight", "vision",
              (hv, text_hidden), **kw)
        b.norm("multi_modal_projector.mm_soft_emb_norm", hv, cls="vision", **kw)
    elif merge:  # Qwen-VL patch merger (+ deepstack mergers)
        out = vc.get_int("out_hidden_size", 0, minimum=0) or text_hidden
        m = hv * merge * merge
        deepstack = vc.get_list_of_int("deepstack_visual_indexes", [],
                                       maximum=MAX_LAYERS)
        for j in range(1 + len(deepstack)):
            q = f"vision_tower.merger.{j}"
            b.norm(f"{q}.norm", hv if j == 0 else m, cls="vision", bias=True, **kw)
            b.linear(f"{q}.linear_fc1", "vision", m, m, "column", bias=True, **kw)
            b.linear(f"{q}.linear_fc2", "vision", out, m, "row", bias=True, **kw)
    else:
        b.linear("multi_modal_projector.linear", "vision", text_hidden, hv, "column", **kw)


def _llama4_vision(b: _Builder, vc: ConfigView, hv: int, layers: int, inter: int,
                   patch: int, chans: int, text_hidden: int) -> None:
    """Llama-4's vision encoder (HF ``Llama4VisionModel``) and projector."""
    kw: dict[str, Any] = {"where": "tower"}
    n_pos = (vc.get_int("image_size", 336) // patch) ** 2 + 1
    b.add("vision_model.class_embedding", "vision", (hv,), **kw)
    b.add("vision_model.positional_embedding_vlm", "vision", (n_pos, hv), **kw)
    b.linear("vision_model.patch_embedding.linear", "vision", hv, chans * patch * patch,
             "column", **kw)
    for name in ("layernorm_pre", "layernorm_post"):
        b.norm(f"vision_model.{name}", hv, cls="vision", bias=True, **kw)
    for i in range(layers):
        q = f"vision_model.model.layers.{i}"
        for proj in ("q_proj", "k_proj", "v_proj"):
            b.linear(f"{q}.self_attn.{proj}", "vision", hv, hv, "column", bias=True, **kw)
        b.linear(f"{q}.self_attn.o_proj", "vision", hv, hv, "row", bias=True, **kw)
        b.linear(f"{q}.mlp.fc1", "vision", inter, hv, "column", bias=True, **kw)
        b.linear(f"{q}.mlp.fc2", "vision", hv, inter, "row", bias=True, **kw)
        b.norm(f"{q}.input_layernorm", hv, cls="vision", bias=True, **kw)
        b.norm(f"{q}.post_attention_layernorm", hv, cls="vision", bias=True, **kw)
    # pixel shuffle: channels x 1/ratio^2 (HF Llama4VisionPixelShuffleMLP; 0.5 in every
    # released config)
    ratio = vc.get_float("pixel_shuffle_ratio", 0.5, minimum=1 / 64, maximum=1.0)
    shuffled = int(hv / (ratio * ratio))
    adapter_in = vc.get_int("projector_input_dim", 0, minimum=0) or shuffled
    adapter_out = vc.get_int("projector_output_dim", 0, minimum=0) or adapter_in
    b.linear("vision_model.vision_adapter.mlp.fc1", "vision", adapter_in, shuffled,
             "column", **kw)
    b.linear("vision_model.vision_adapter.mlp.fc2", "vision", adapter_out, adapter_in,
             "row", **kw)
    b.linear("multi_modal_projector.linear_1", "vision", text_hidden,
             vc.get_int("vision_output_dim", 0, minimum=0) or adapter_out, "column", **kw)


def _whisper(b: _Builder, v: ConfigView) -> None:
    d = v.get_int("d_model")
    vocab = v.get_int("vocab_size")
    mels = v.get_int("num_mel_bins", 80)
    kw_e: dict[str, Any] = {"where": "tower"}
    b.add("model.encoder.conv1", "encoder", (d, mels, 3), bias=True, **kw_e)
    b.add("model.encoder.conv2", "encoder", (d, d, 3), bias=True, **kw_e)
    b.add("model.encoder.embed_positions", "encoder",
          (v.get_int("max_source_positions"), d), **kw_e)

    def layer(prefix: str, cls: str, ffn: int, cross: bool, i: int, where: str) -> None:
        kw: dict[str, Any] = {"where": where, "layer": i}
        for att in ("self_attn",) + (("encoder_attn",) if cross else ()):
            b.linear(f"{prefix}.{att}.q_proj", cls, d, d, "column", bias=True, **kw)
            b.linear(f"{prefix}.{att}.k_proj", cls, d, d, "column", **kw)
            b.linear(f"{prefix}.{att}.v_proj", cls, d, d, "column", bias=True, **kw)
            b.linear(f"{prefix}.{att}.out_proj", cls, d, d, "row", bias=True, **kw)
            b.norm(f"{prefix}.{att}_layer_norm", d, bias=True, **kw)
        b.linear(f"{prefix}.fc1", cls, ffn, d, "column", bias=True, **kw)
        b.linear(f"{prefix}.fc2", cls, d, ffn, "row", bias=True, **kw)
        b.norm(f"{prefix}.final_layer_norm", d, bias=True, **kw)

    enc_layers = _layers(v, "encoder_layers")
    dec_layers = _layers(v, "decoder_layers")
    enc_ffn = v.get_int("encoder_ffn_dim")
    dec_ffn = v.get_int("decoder_ffn_dim")
    target = v.get_int("max_target_positions")
    for i in range(enc_layers):
        layer(f"model.encoder.layers.{i}", "encoder", enc_ffn, False, i, "tower")
    b.norm("model.encoder.layer_norm", d, cls="encoder", bias=True, **kw_e)
    b.add("model.decoder.embed_tokens", "embedding", (vocab, d), parallel="vocab",
          where="embed")
    b.add("model.decoder.embed_positions", "embedding", (target, d), where="embed")
    for i in range(dec_layers):
        layer(f"model.decoder.layers.{i}", "attention", dec_ffn, True, i, "layer")
    b.norm("model.decoder.layer_norm", d, bias=True, where="head")
    # proj_out is tied to embed_tokens (not stored)


def _mamba_ssm(b: _Builder, v: ConfigView) -> None:
    """state-spaces ``mamba_ssm`` schema (d_model, n_layer, ssm_cfg, attn_layer_idx)."""
    d = v.get_int("d_model")
    n = _layers(v, "n_layer")
    vocab = v.get_int("vocab_size")
    mult = v.get_int("pad_vocab_size_multiple", 1, maximum=1 << 16)
    vocab = -(-vocab // mult) * mult
    ssm = v.section("ssm_cfg")
    d_state = ssm.get_int("d_state", 128)
    expand = ssm.get_int("expand", 2, maximum=1 << 10)
    headdim = ssm.get_int("headdim", 64)
    ngroups = ssm.get_int("ngroups", 1)
    d_conv = ssm.get_int("d_conv", 4)
    conv_bias = ssm.get_bool("conv_bias", True)
    proj_bias = ssm.get_bool("bias", False)
    d_inner = expand * d
    attn_idx = set(v.get_list_of_int("attn_layer_idx", [], maximum=MAX_LAYERS))
    attn = v.section("attn_cfg")
    d_mlp = v.get_int("d_intermediate", 0, minimum=0)
    rms = v.get_bool("rms_norm", True)
    if attn_idx:
        nh = attn.get_int("num_heads", 1)
        nkv = attn.get_int("num_heads_kv", nh)
        hd = attn.get_int("head_dim", max(d // nh, 1))
        a_conv = attn.get_int("d_conv", 0, minimum=0)
        qkv_bias = attn.get_bool("qkv_proj_bias", True)
        out_bias = attn.get_bool("out_proj_bias", True)
    b.add("backbone.embedding", "embedding", (vocab, d), parallel="vocab", where="embed")
    for i in range(n):
        p = f"backbone.layers.{i}"
        if i in attn_idx:
            qkv = hd * (nh + 2 * nkv)
            b.linear(f"{p}.mixer.in_proj", "attention", qkv, d, "column", bias=qkv_bias,
                     layer=i)
            if a_conv > 0:
                b.add(f"{p}.mixer.conv1d", "attention", (qkv, a_conv),
                      parallel="column", bias=True, layer=i)
            b.linear(f"{p}.mixer.out_proj", "attention", d, nh * hd, "row", bias=out_bias,
                     layer=i)
        else:
            _mamba2(b, p, i, d, d_inner=d_inner, nheads=d_inner // headdim,
                    ngroups=ngroups, d_state=d_state, d_conv=d_conv,
                    conv_bias=conv_bias, proj_bias=proj_bias)
        b.norm(f"{p}.norm", d, bias=not rms, layer=i)
        if d_mlp:
            _mlp(b, p, i, d, d_mlp)
            b.norm(f"{p}.norm2", d, bias=not rms, layer=i)
    b.norm("backbone.norm_f", d, bias=not rms, where="head")
    if not v.get_bool("tie_embeddings", True):
        b.add("lm_head", "lm_head", (vocab, d), parallel="vocab", where="head", linear=True)


def _mamba1(b: _Builder, p: str, i: int, h: int, *, d_inner: int, d_state: int,
            dt_rank: int, d_conv: int, conv_bias: bool, proj_bias: bool,
            inner_norms: bool = False) -> None:
    """A Mamba-1 mixer (HF ``MambaMixer`` / Jamba's, vLLM ``MambaMixer``)."""
    cls = "mamba"
    kw: dict[str, Any] = {"layer": i}
    b.linear(f"{p}.in_proj", cls, 2 * d_inner, h, "column", bias=proj_bias, **kw)
    b.add(f"{p}.conv1d", cls, (d_inner, d_conv), parallel="column", bias=conv_bias, **kw)
    b.linear(f"{p}.x_proj", cls, dt_rank + 2 * d_state, d_inner, "row", **kw)
    b.linear(f"{p}.dt_proj", cls, d_inner, dt_rank, "column", bias=True, **kw)
    b.add(f"{p}.A_log", cls, (d_inner, d_state), parallel="column", **kw)
    b.add(f"{p}.D", cls, (d_inner,), parallel="column", **kw)
    b.linear(f"{p}.out_proj", cls, h, d_inner, "row", bias=proj_bias, **kw)
    if inner_norms:  # Jamba: RMSNorms on dt, B and C
        for name, size in (("dt_layernorm", dt_rank), ("b_layernorm", d_state),
                           ("c_layernorm", d_state)):
            b.norm(f"{p}.{name}", size, **kw)


def _dt_rank(v: ConfigView, key: str, h: int) -> int:
    value = v.get_int_or_str(key, "auto", choices=("auto",))
    return math.ceil(h / 16) if value == "auto" else int(value)


def _hf_mamba(b: _Builder, cfg: ModelConfig) -> None:
    """transformers' Mamba / FalconMamba / Mamba2 schema (hidden_size, state_size ...)."""
    v = cfg.view
    h = v.get_int("hidden_size")
    vocab = v.get_int("vocab_size")
    n = _layers(v, "num_hidden_layers")
    d_state = v.get_int("state_size", 16)
    d_conv = v.get_int("conv_kernel", 4)
    conv_bias = v.get_bool("use_conv_bias", True)
    proj_bias = v.get_bool("use_bias", False)
    if cfg.model_type == "mamba2":
        heads = v.get_int("num_heads")
        head_dim = v.get_int("head_dim", 64)
        ngroups = v.get_int("n_groups", 1)
    else:
        d_inner = v.get_int("intermediate_size") if v.has("intermediate_size") else \
            v.get_int("expand", 2, maximum=1 << 10) * h
        dt_rank = _dt_rank(v, "time_step_rank", h)
    b.add("backbone.embeddings", "embedding", (vocab, h), parallel="vocab", where="embed")
    for i in range(n):
        p = f"backbone.layers.{i}"
        b.norm(f"{p}.norm", h, layer=i)
        if cfg.model_type == "mamba2":
            _mamba2(b, p, i, h, d_inner=heads * head_dim, nheads=heads,
                    ngroups=ngroups, d_state=d_state, d_conv=d_conv, conv_bias=conv_bias,
                    proj_bias=proj_bias)
        else:
            _mamba1(b, f"{p}.mixer", i, h, d_inner=d_inner, d_state=d_state,
                    dt_rank=dt_rank, d_conv=d_conv, conv_bias=conv_bias,
                    proj_bias=proj_bias)
    b.norm("backbone.norm_f", h, where="head")
    if not v.get_bool("tie_word_embeddings", cfg.model_type != "mamba2"):
        b.add("lm_head", "lm_head", (vocab, h), parallel="vocab", where="head", linear=True)


def _jamba(b: _Builder, cfg: ModelConfig, h: int) -> None:
    """Jamba: attention every ``attn_layer_period`` (offset), Mamba-1 elsewhere; MoE every
    ``expert_layer_period`` (offset), a dense MLP elsewhere."""
    v = cfg.view
    n = _layers(v, "num_hidden_layers")
    a_period = v.get_int("attn_layer_period", 8)
    a_offset = v.get_int("attn_layer_offset", 4, minimum=0)
    e_period = v.get_int("expert_layer_period", 2)
    e_offset = v.get_int("expert_layer_offset", 1, minimum=0)
    e = _num_experts(v)
    inter = v.get_int("intermediate_size")
    mamba = dict(d_inner=v.get_int("mamba_expand", 2, maximum=1 << 10) * h,
                 d_state=v.get_int("mamba_d_state", 16),
                 dt_rank=_dt_rank(v, "mamba_dt_rank", h),
                 d_conv=v.get_int("mamba_d_conv", 4),
                 conv_bias=v.get_bool("mamba_conv_bias", True),
                 proj_bias=v.get_bool("mamba_proj_bias", False))
    for i in range(n):
        p = f"model.layers.{i}"
        kw: dict[str, Any] = {"layer": i}
        b.norm(f"{p}.input_layernorm", h, **kw)
        b.norm(f"{p}.pre_ff_layernorm", h, **kw)
        if i % a_period == a_offset:
            _attention(b, cfg, p, i, h)
        else:
            _mamba1(b, f"{p}.mamba", i, h, inner_norms=True, **mamba)  # type: ignore[arg-type]
        if e > 1 and i % e_period == e_offset:
            b.add(f"{p}.feed_forward.router", "router", (e, h), **kw)
            for proj, (o, m) in (("gate_proj", (inter, h)), ("up_proj", (inter, h)),
                                 ("down_proj", (h, inter))):
                b.add(f"{p}.feed_forward.experts.0.{proj}", "moe_experts", (o, m), count=e,
                      parallel="expert", linear=True, **kw)
        else:
            _mlp(b, p, i, h, inter, prefix="feed_forward")


_NEMOTRON_KINDS = {"mamba": "M", "attention": "*", "mlp": "-", "moe": "E"}


def _nemotron_h(b: _Builder, cfg: ModelConfig, h: int) -> int:
    v = cfg.view
    where_s = cfg.source or cfg.name or "config"
    pattern = v.get_str("hybrid_override_pattern", None)
    kinds: list[str]
    if pattern is not None:
        bad = sorted(set(pattern) - set(_NEMOTRON_KINDS.values()))
        if bad:
            raise ConfigError(f"{where_s}: hybrid_override_pattern has unknown "
                              f"character(s) {bad}; valid: M (mamba), * (attention), "
                              f"- (mlp), E (moe)", field="hybrid_override_pattern")
        kinds = list(pattern)
    else:
        types = v.get_list("layers_block_type", None, item="str",
                           choices=tuple(_NEMOTRON_KINDS))
        if types is None:
            raise ConfigError(f"{where_s}: nemotron_h needs hybrid_override_pattern or "
                              f"layers_block_type", field="hybrid_override_pattern")
        kinds = [_NEMOTRON_KINDS[t] for t in types]
    if len(kinds) > MAX_LAYERS:
        raise ConfigError(f"{cfg.source or cfg.name or 'config'}: the layer pattern has "
                          f"{len(kinds):,} layers (at most {MAX_LAYERS:,})",
                          field="hybrid_override_pattern", value=len(kinds))
    nheads = v.get_int("mamba_num_heads")
    head = v.get_int("mamba_head_dim")
    m2 = dict(d_inner=nheads * head, nheads=nheads, ngroups=v.get_int("n_groups", 1),
              d_state=v.get_int("ssm_state_size"), d_conv=v.get_int("conv_kernel", 4),
              conv_bias=v.get_bool("use_conv_bias", True),
              proj_bias=v.get_bool("mamba_proj_bias", False))
    if "*" in kinds:
        heads = v.get_int("num_attention_heads")
        kv = v.get_int("num_key_value_heads", heads)
        hd = v.get_first_int("attention_head_dim", "head_dim", default=max(h // heads, 1))
        ab = v.get_bool("attention_bias", False)
    if "E" in kinds:
        e = _num_experts(v)
        inter = v.get_int("moe_intermediate_size")
        # latent MoE (Nemotron-3 Ultra): experts work in moe_latent_size, reached
        # through fc1/fc2 latent projections
        latent = v.get_int("moe_latent_size", 0, minimum=0)
        sh = v.get_int("moe_shared_expert_intermediate_size", 0, minimum=0)
    if "-" in kinds:
        mlp_inter = v.get_int("intermediate_size")
        mlp_bias = v.get_bool("mlp_bias", False)
    for i, k in enumerate(kinds):
        p = f"backbone.layers.{i}"
        b.norm(f"{p}.norm", h, layer=i)
        if k == "M":
            _mamba2(b, p, i, h, **m2)  # type: ignore[arg-type]
        elif k == "*":
            b.linear(f"{p}.mixer.q_proj", "attention", heads * hd, h, "column", bias=ab,
                     layer=i)
            b.linear(f"{p}.mixer.k_proj", "attention", kv * hd, h, "kv", bias=ab, layer=i)
            b.linear(f"{p}.mixer.v_proj", "attention", kv * hd, h, "kv", bias=ab, layer=i)
            b.linear(f"{p}.mixer.o_proj", "attention", h, heads * hd, "row", bias=ab,
                     layer=i)
        elif k == "E":
            width = latent or h
            b.add(f"{p}.mixer.gate", "router", (e, h), layer=i)
            b.add(f"{p}.mixer.gate.e_score_correction_bias", "router", (e,),
                  dtype_bytes=4, layer=i)
            for proj, (o, n) in (("up_proj", (inter, width)), ("down_proj", (width, inter))):
                b.add(f"{p}.mixer.experts.0.{proj}", "moe_experts", (o, n), count=e,
                      parallel="expert", linear=True, layer=i)
            if latent:
                b.linear(f"{p}.mixer.fc1_latent_proj", "moe_experts", latent, h,
                         "replicated", layer=i)
                b.linear(f"{p}.mixer.fc2_latent_proj", "moe_experts", h, latent,
                         "replicated", layer=i)
            if sh:
                _mlp(b, p, i, h, sh, gated=False, cls="moe_shared_experts",
                     prefix="mixer.shared_experts")
        else:
            _mlp(b, p, i, h, mlp_inter, gated=False, bias=mlp_bias, prefix="mixer")
    return len(kinds)


def weight_tensors(cfg: ModelConfig) -> list[WeightTensor]:
    """Every tensor of a checkpoint of ``cfg`` (see the module docstring).

    Raises ConfigError naming a missing or malformed field (every count that drives a
    loop is bounded first, so a 10**30 layer count is refused at once).
    """
    v = cfg.view
    b = _Builder()
    mt = cfg.model_type
    if mt == "whisper":
        _whisper(b, v)
        return b.tensors
    if v.has("d_model") and v.has("n_layer"):
        _mamba_ssm(b, v)
        return b.tensors
    if mt in ("mamba", "falcon_mamba", "mamba2"):
        _hf_mamba(b, cfg)
        return b.tensors
    h = v.get_int("hidden_size")
    vocab = v.get_int("vocab_size")
    b.add("model.embed_tokens", "embedding", (vocab, h), parallel="vocab", where="embed")
    if mt == "nemotron_h":
        _nemotron_h(b, cfg, h)
    elif mt == "jamba":
        _jamba(b, cfg, h)
    else:
        n = _layers(v, "num_hidden_layers")
        kinds = _layer_kinds(cfg, n)
        e = _num_experts(v)
        layout = _MoELayout(v, e)
        gemma = mt.startswith(("gemma2", "gemma3", "gemma4"))  # four norms per layer
        for i in range(n):
            p = f"model.layers.{i}"
            _decoder_layer(b, cfg, p, i, h, kinds[i], layout, gemma)
        _mtp(b, cfg, h, vocab, layout)
    b.norm("model.norm", h, where="head")
    if not v.get_bool("tie_word_embeddings", mt.startswith("gemma")):
        b.add("lm_head", "lm_head", (vocab, h), parallel="vocab", where="head", linear=True)
    _towers(b, v, h)
    return b.tensors


def _decoder_layer(b: _Builder, cfg: ModelConfig, p: str, i: int, h: int, kind: str,
                   layout: _MoELayout, gemma: bool, where: str = "layer",
                   cls_override: str | None = None) -> None:
    v = cfg.view
    kw: dict[str, Any] = {"layer": i, "where": where}
    ncls = cls_override or "norm"
    b.norm(f"{p}.input_layernorm", h, cls=ncls, **kw)
    b.norm(f"{p}.post_attention_layernorm", h, cls=ncls, **kw)
    if gemma:
        b.norm(f"{p}.pre_feedforward_layernorm", h, cls=ncls, **kw)
        b.norm(f"{p}.post_feedforward_layernorm", h, cls=ncls, **kw)
    if kind == "linear_attention":
        if v.has("linear_attn_config"):
            _kda(b, v, p, i, h)
        else:
            _gdn(b, v, p, i, h)
    else:
        _attention(b, cfg, p, i, h, cls=cls_override or "attention", where=where)
    moe = layout.is_moe(i)
    moe_block = gemma and v.get_bool("enable_moe_block", False)
    if moe:
        _moe(b, cfg, p, i, h, where=where, cls_override=cls_override)
    if not moe or moe_block:
        # Llama-4's dense layers use intermediate_size_mlp (intermediate_size is the
        # experts')
        inter = v.get_first_int("intermediate_size_mlp", "intermediate_size") \
            if cfg.model_type.startswith("llama4") else v.get_int("intermediate_size")
        _mlp(b, p, i, h, inter, cls=cls_override or "mlp", where=where,
             bias=v.get_bool("mlp_bias", False))
    if moe and moe_block:  # Gemma-4: extra norms of the MoE
        for name in ("pre_feedforward_layernorm_2", "post_feedforward_layernorm_1",
                     "post_feedforward_layernorm_2"):
            b.norm(f"{p}.{name}", h, cls=ncls, **kw)
        b.add(f"{p}.layer_scalar", ncls, (1,), **kw)


def _mtp(b: _Builder, cfg: ModelConfig, h: int, vocab: int, layout: _MoELayout) -> None:
    v = cfg.view
    n = _layers(v, "num_hidden_layers")
    nextn = _layers(v, "num_nextn_predict_layers", default=0) \
        if cfg.model_type != "qwen3_next" else 0
    for j in range(nextn):  # DeepSeek-V3 / GLM: a full decoder layer + its own head
        i = n + j
        p = f"model.layers.{i}"
        kw: dict[str, Any] = {"where": "mtp", "layer": i}
        _decoder_layer(b, cfg, p, i, h, "attention", layout, False, where="mtp",
                       cls_override="mtp")
        b.norm(f"{p}.enorm", h, cls="mtp", **kw)
        b.norm(f"{p}.hnorm", h, cls="mtp", **kw)
        b.linear(f"{p}.eh_proj", "mtp", h, 2 * h, "replicated", **kw)
        b.norm(f"{p}.shared_head.norm", h, cls="mtp", **kw)
        b.add(f"{p}.embed_tokens", "mtp", (vocab, h), parallel="vocab", **kw)
        b.add(f"{p}.shared_head.head", "mtp", (vocab, h), parallel="vocab", **kw)
    mtp_n = _layers(v, "mtp_num_hidden_layers", default=0)
    if cfg.model_type == "qwen3_next":  # vLLM's Qwen3NextMTP: num_nextn_predict_layers, 1
        mtp_n = _layers(v, "num_nextn_predict_layers", default=1)
    for j in range(mtp_n):  # Qwen3-Next / Qwen3.5: mtp.* (embeddings shared)
        p = f"mtp.layers.{j}"
        kw = {"where": "mtp", "layer": n + j}
        _decoder_layer(b, cfg, p, n + j, h, "attention", layout, False, where="mtp",
                       cls_override="mtp")
        if j == 0:
            b.linear("mtp.fc", "mtp", h, 2 * h, "column", **kw)
            b.norm("mtp.pre_fc_norm_embedding", h, cls="mtp", **kw)
            b.norm("mtp.pre_fc_norm_hidden", h, cls="mtp", **kw)
            b.norm("mtp.norm", h, cls="mtp", **kw)


# ---- quantization --------------------------------------------------------------------------
#
# Each method's fields are read with the values that method accepts (vLLM 0.32,
# vllm/model_executor/layers/quantization/): AWQ 4-bit only (auto_awq.py TYPE_MAP), GPTQ
# 4 or 8 bits (auto_gptq.py TYPE_MAP), group sizes a positive int or -1 (per channel),
# fp8 ``weight_block_size`` a pair of positive ints (fp8.py: "2 dimensions"),
# compressed-tensors ``num_bits`` 2-8 for int (WNA16_SUPPORTED_BITS) and 4 or 8 for
# float, its strategies as compressed-tensors' QuantizationStrategy, ignore lists of
# strings.  Anything else is a ConfigError naming the field.

@dataclass(frozen=True)
class _Scheme:
    method: str            # fp8 | int | mxfp4 | nvfp4 | ct
    bits: int = 8
    group: int = 0         # 0 = per tensor / channel by strategy
    block: tuple[int, int] | None = None
    strategy: str = "tensor"
    symmetric: bool = True
    static_input: bool = False
    g_idx: bool = False
    float_type: bool = True
    targets_lm_head: bool = False
    experts_only: bool = False
    ignore: tuple[str, ...] = ()
    scale_bytes: int = 4


#: bits each integer method accepts (vLLM 0.32)
QUANT_BITS = {"awq": (4,), "awq_marlin": (4,), "gptq": (4, 8), "gptq_marlin": (4, 8),
              "compressed-tensors-int": (2, 3, 4, 5, 6, 7, 8),
              "compressed-tensors-float": (4, 8)}
#: compressed-tensors' QuantizationStrategy values
CT_STRATEGIES = ("tensor", "channel", "group", "block", "token", "tensor_group",
                 "attn_head")
#: the largest group size accepted (2^24: a group wider than any layer's input is a typo)
MAX_GROUP_SIZE = 1 << 24
_IGNORE_KEYS = ("ignore", "ignored_layers", "modules_to_not_convert", "exclude_modules")


def _companion_quantization(cfg: ModelConfig) -> ConfigView | None:
    """``quantization`` of a modelopt ``hf_quant_config.json`` beside the config (the
    same candidates :func:`kvcore.models.config.load_model_config` reads)."""
    if not cfg.source:
        return None
    path = Path(cfg.source)
    stem_parts = path.stem.split(".")
    for cand in (path.with_name(path.name.replace(".json", ".hf_quant_config.json")),
                 path.with_name(stem_parts[0] + ".hf_quant_config."
                                + ".".join(stem_parts[1:] + ["json"])),
                 path.with_name("hf_quant_config.json")):
        if cand != path and cand.is_file():
            top = ConfigView(read_json_file(cand, "hf_quant_config"), where=str(cand))
            quant = top.section("quantization")
            return top if quant.is_empty() else quant
    return None


def _group_size(q: ConfigView, *keys: str, default: int) -> int:
    """A group size: a positive int, or -1 (one group per channel, GPTQ's convention)."""
    for key in keys:
        if q.has(key):
            g: int = q.get_int(key, minimum=-1, maximum=MAX_GROUP_SIZE)
            if g == 0:
                q.get_int(key)  # raises: 0 is not a group size
            return g
    return default


def _pair(q: ConfigView, key: str) -> tuple[int, int] | None:
    blk = q.get_list_of_int(key, None, minimum=1, maximum=1 << 20, length=2)
    return (blk[0], blk[1]) if blk else None


def _scheme(cfg: ModelConfig) -> tuple[_Scheme | None, str | None]:
    q = cfg.section("quantization_config")
    if q.is_empty():
        q = _companion_quantization(cfg) or q
    if q.is_empty():
        return None, None
    method = q.get_str("quant_method", "").lower()
    producer = q.section("producer")
    if not method and (q.has("quant_algo") or producer.get_str("name", "") == "modelopt"):
        method = "modelopt"  # modelopt exports name the algorithm, not the method
    ignore = tuple(x for key in _IGNORE_KEYS for x in q.get_list_of_str(key, []))
    if method == "fp8":
        return _Scheme("fp8", block=_pair(q, "weight_block_size"),
                       static_input=q.get_str("activation_scheme", "dynamic",
                                              choices=("static", "dynamic")) == "static",
                       ignore=ignore), "fp8"
    if method == "fbgemm_fp8":  # per-channel fp8 (Meta's Llama-3.1-405B-FP8)
        return _Scheme("fp8", strategy="channel", ignore=ignore), "fbgemm_fp8"
    if method in ("awq", "gptq", "awq_marlin", "gptq_marlin"):
        bits = q.get_first_int("bits", "w_bit", default=4, maximum=64)
        if bits not in QUANT_BITS[method]:
            key = "bits" if q.has("bits") else "w_bit"
            raise ConfigError(
                f"{cfg.source or cfg.name or 'config'}: quantization_config.{key} = {bits} "
                f"is not a bit width {method} supports (valid: "
                f"{', '.join(map(str, QUANT_BITS[method]))}; vLLM 0.32)",
                field=f"quantization_config.{key}", value=bits)
        group = _group_size(q, "group_size", "q_group_size", default=128)
        return _Scheme("int", bits=bits, group=group, scale_bytes=2,
                       g_idx=method.startswith("gptq"), float_type=False,
                       ignore=ignore), method
    if method == "mxfp4":
        return _Scheme("mxfp4", bits=4, group=32, experts_only=True, ignore=ignore), method
    if method == "modelopt":
        algo = q.get_str("quant_algo", "").upper()
        groups = q.section("config_groups")
        if algo == "FP8":
            return _Scheme("fp8", static_input=True, targets_lm_head=True,
                           ignore=ignore), "modelopt-fp8"
        if algo == "NVFP4" or q.has("config_groups") and not groups.is_empty():
            return _Scheme("nvfp4", bits=4, group=16, targets_lm_head=True,
                           ignore=ignore), "modelopt-nvfp4"
        if algo.startswith("W4A"):  # W4A8_AWQ and the like
            return _Scheme("int", bits=4, group=_group_size(q, "group_size", default=128),
                           scale_bytes=2, float_type=False, targets_lm_head=True,
                           ignore=ignore), f"modelopt-{algo.lower()}"
        return None, f"modelopt-{algo.lower() or 'unknown'}"
    if method == "compressed-tensors":
        groups_list = q.sections("config_groups")
        first = groups_list[0] if groups_list else q.section("config_groups")
        for g in groups_list:  # every group is checked, the first one sizes the weights
            _ct_weights(g.section("weights"))
        return _ct_scheme(first.section("weights"), ignore)
    if method in ("bitsandbytes",):
        bits = 4 if q.get_bool("load_in_4bit", False) else 8
        return _Scheme("int", bits=bits, group=64, scale_bytes=4, float_type=False,
                       ignore=ignore), f"bitsandbytes-{bits}bit"
    return None, method or None


def _ct_weights(w: ConfigView) -> tuple[int, str, str, int, tuple[int, int] | None, bool]:
    """(num_bits, type, strategy, group_size, block_structure, symmetric) of a
    compressed-tensors ``weights`` entry, each checked against the scheme's valid values."""
    typ = w.get_str("type", "int", choices=("int", "float"))
    bits = w.get_int("num_bits", 8, maximum=64)
    valid = QUANT_BITS[f"compressed-tensors-{typ}"]
    if bits not in valid:
        raise ConfigError(f"{w.where}: {w.prefix}.num_bits = {bits} is not a {typ} width "
                          f"compressed-tensors supports (valid: "
                          f"{', '.join(map(str, valid))})", field=f"{w.prefix}.num_bits",
                          value=bits)
    group = w.get_int("group_size", 0, maximum=MAX_GROUP_SIZE)  # absent: 0 (no groups)
    strategy = w.get_str("strategy", "group" if group else "tensor", choices=CT_STRATEGIES)
    blk = _pair(w, "block_structure")
    if strategy == "group" and not group:
        w.get_int("group_size")  # raises: the group strategy needs a group_size
    symmetric = w.get_bool("symmetric", True)
    return bits, typ, strategy, group, blk, symmetric


def _ct_scheme(w: ConfigView, ignore: tuple[str, ...]) -> tuple[_Scheme, str]:
    bits, typ, strategy, group, blk, symmetric = _ct_weights(w)
    if typ == "float" and bits == 4:
        return _Scheme("nvfp4", bits=4, group=group or 16, targets_lm_head=True,
                       ignore=ignore), "compressed-tensors-nvfp4"
    return _Scheme("ct", bits=bits, group=group, strategy=strategy, block=blk,
                   symmetric=symmetric, float_type=typ == "float", targets_lm_head=True,
                   scale_bytes=4 if typ == "float" else 2,
                   ignore=ignore), f"compressed-tensors-{typ}{bits}"


def _ignored(name: str, patterns: Sequence[str]) -> bool:
    for p in patterns:
        if p.startswith("re:"):
            try:
                if re.match(p[3:], name):
                    return True
            except re.error:
                continue
        elif fnmatch.fnmatchcase(name, p) or fnmatch.fnmatchcase(name, p + ".*") or \
                name.endswith("." + p) or name == p:
            return True
    return False


def _quantized_bytes(s: _Scheme, out_f: int, in_f: int) -> float:
    n = out_f * in_f
    if s.method == "fp8":
        scales = math.ceil(out_f / s.block[0]) * math.ceil(in_f / s.block[1]) \
            if s.block else out_f if s.strategy == "channel" else 1
        return n + 4 * scales + (4 if s.static_input else 0)
    if s.method == "mxfp4":
        return n / 2 + n / 32
    if s.method == "nvfp4":
        return n / 2 + n / 16 + 4 + 4
    if s.method == "int":
        g = s.group if s.group and s.group > 0 else in_f
        ngroups = math.ceil(in_f / g)
        return (n * s.bits / 8 + ngroups * out_f * s.scale_bytes
                + ngroups * out_f * s.bits / 8 + (4 * in_f if s.g_idx else 0))
    # compressed-tensors int/float
    if s.strategy == "block" and s.block:
        scales = math.ceil(out_f / s.block[0]) * math.ceil(in_f / s.block[1])
    elif s.strategy in ("group", "tensor_group") and s.group:
        scales = out_f * math.ceil(in_f / s.group)
    elif s.strategy == "channel":
        scales = out_f
    else:
        scales = 1
    zeros = 0 if s.symmetric else scales * max(1, s.bits // 8)
    shape = 16 if s.bits < 8 else 0  # pack-quantized stores weight_shape (2 x int64)
    return n * s.bits / 8 + scales * s.scale_bytes + zeros + shape


def _tensor_bytes(t: WeightTensor, dt: int, s: _Scheme | None) -> tuple[float, int]:
    """(bytes, params) of an entry in the whole checkpoint."""
    params = t.numel
    elem = t.dtype_bytes or dt
    if s is None or not t.linear or len(t.shape) != 2 or t.tensor_class in (
            "vision", "audio", "encoder", "embedding", "router") or \
            (t.name == "lm_head" and not s.targets_lm_head) or \
            (s.experts_only and ".experts." not in t.name) or _ignored(t.name, s.ignore):
        return float(params * elem), params
    if t.name.endswith(".mlp.gate") or ".indexer.weights_proj" in t.name:
        return float(params * elem), params
    out_f, in_f = t.shape
    b = _quantized_bytes(s, out_f, in_f) * t.count
    if t.bias:
        b += out_f * t.count * dt
    return b, params


# ---- per rank ------------------------------------------------------------------------------

def _rank_share(t: WeightTensor, tp: int, ep: int, kv_heads: int, ep_on: bool) -> float:
    """Fraction of the entry one rank holds."""
    if t.parallel in ("column", "row"):
        return 1 / tp
    if t.parallel == "kv":
        return 1 / min(tp, max(kv_heads, 1))
    if t.parallel == "vocab":
        rows = t.shape[0]
        padded = -(-rows // VOCAB_PADDING) * VOCAB_PADDING
        return (-(-padded // tp)) / rows
    if t.parallel == "expert":
        if ep_on and ep > 1:
            return (-(-t.count // ep)) / t.count
        return 1 / tp
    return 1.0


def estimate_weights(
    model: str | Path | ModelConfig,
    *,
    tensor_parallel_size: int = 1,
    pipeline_parallel_size: int = 1,
    data_parallel_size: int = 1,
    enable_expert_parallel: bool = False,
    include_mtp_layers: bool = False,
    index_path: str | Path | None = None,
) -> WeightsEstimate:
    """Weight bytes of a model from its config (see the module docstring for the rules).

    Parameters
    ----------
    model:
        A :class:`ModelConfig`, a config.json path, a folder holding one, or an embedded
        name.
    tensor_parallel_size, pipeline_parallel_size, data_parallel_size:
        The parallel layout (positive ints).  DP multiplies GPUs, not per-rank bytes
        (except the expert split under ``enable_expert_parallel``).
    enable_expert_parallel:
        Split MoE experts whole over ``tensor_parallel_size * data_parallel_size`` ranks
        instead of splitting each expert by TP.
    include_mtp_layers:
        Load the MTP / next-n layers per rank (on the last stage).
    index_path:
        A ``model.safetensors.index.json``; default: the one beside the config, if any.

    Returns
    -------
    WeightsEstimate
        Bytes (whole checkpoint, per rank, per stage, per tensor class).

    Raises
    ------
    ConfigError
        A field needed for the estimate is missing or malformed, a parallel size is not a
        positive int, or the safetensors index is unreadable.
    """
    from kvcore.units import as_int

    cfg = model if isinstance(model, ModelConfig) else load_model_config(model)
    for name, value in (("tensor_parallel_size", tensor_parallel_size),
                        ("pipeline_parallel_size", pipeline_parallel_size),
                        ("data_parallel_size", data_parallel_size)):
        if as_int(value) is None or value < 1:  # numpy integers too
            raise ConfigError(f"{name} must be a positive int, got {value!r}", field=name,
                              value=repr(value))
    tp, pp, dp = (int(as_int(v) or 1) for v in (tensor_parallel_size,
                                                pipeline_parallel_size, data_parallel_size))
    tensors = weight_tensors(cfg)
    from kvcore.dtypes import dtype_size

    dt = dtype_size(cfg.dtype) if cfg.dtype else 2
    scheme, qname = _scheme(cfg)
    kv_heads = cfg.num_key_value_heads or 1
    ep = tp * dp
    layer_ids = sorted({t.layer for t in tensors if t.where == "layer"})
    num_layers = len(layer_ids)
    if pp > max(num_layers, 1):
        raise ConfigError(f"pipeline_parallel_size {pp} exceeds the model's {num_layers} "
                          f"decoder layers", field="pipeline_parallel_size", value=pp)
    parts = pp_layer_partition(num_layers, pp) if num_layers else [0] * pp
    stage_of: dict[int, int] = {}
    pos = 0
    for s_i, count in enumerate(parts):
        for lid in layer_ids[pos:pos + count]:
            stage_of[lid] = s_i
        pos += count
    total = 0.0
    params = 0
    by_class: dict[str, float] = {}
    mtp = 0.0
    mtp_params = 0
    stages = [0.0] * pp
    tied_head_again = False
    for t in tensors:
        b, n = _tensor_bytes(t, dt, scheme)
        total += b
        params += n
        by_class[t.tensor_class] = by_class.get(t.tensor_class, 0.0) + b
        if t.where == "mtp":
            mtp += b
            mtp_params += n
            if not include_mtp_layers:
                continue
        share = b * _rank_share(t, tp, ep, kv_heads, enable_expert_parallel)
        if t.where in ("embed", "tower"):
            stages[0] += share
            if t.name.endswith("embed_tokens") and pp > 1 and not any(
                    x.name == "lm_head" for x in tensors) and t.where == "embed":
                tied_head_again = True
                stages[-1] += share  # a tied head is a second copy on the last stage
        elif t.where in ("head", "mtp"):
            stages[-1] += share
        else:
            stages[stage_of.get(t.layer, 0)] += share
    notes: list[str] = []
    if scheme is None and qname:
        notes.append(f"quantization_config.quant_method {qname!r} is not modelled: weights "
                     f"counted in {cfg.dtype} (an upper bound)")
    if tied_head_again:
        notes.append("tied embeddings: the last pipeline stage holds its own LM head copy")
    source = "config"
    index_total = None
    idx = Path(index_path) if index_path is not None else _index_beside(cfg)
    if idx is not None:
        index_total = read_safetensors_index_total(idx)
        source = "safetensors-index"
        emb = by_class.get("embedding", 0.0)
        note = check_index_total(index_total, total, emb, str(idx))
        if note:
            warnings.warn(note, WeightsIndexWarning, stacklevel=2)
            notes.append(note)
    config_total = int(round(total))
    factor = index_total / total if index_total and total else 1.0
    return WeightsEstimate(
        total_bytes=int(index_total) if index_total else config_total,
        config_total_bytes=config_total,
        total_params=params,
        per_rank_bytes=int(math.ceil(max(stages) * factor)),
        per_stage_bytes=tuple(int(math.ceil(x * factor)) for x in stages),
        by_class={k: int(round(v * factor)) for k, v in by_class.items()},
        mtp_bytes=int(round(mtp * factor)),
        mtp_params=mtp_params,
        source=source,
        quantization=qname,
        tensor_parallel_size=tp, pipeline_parallel_size=pp, data_parallel_size=dp,
        enable_expert_parallel=enable_expert_parallel,
        include_mtp_layers=include_mtp_layers,
        num_gpus=tp * pp * dp,
        index_path=str(idx) if idx is not None else None,
        notes=tuple(notes),
    )


def _index_beside(cfg: ModelConfig) -> Path | None:
    if not cfg.source:
        return None
    p = Path(cfg.source).parent / "model.safetensors.index.json"
    if Path(cfg.source).name == "config.json" and p.is_file():
        return p
    return None


def read_safetensors_index_total(path: str | Path) -> int:
    """``metadata.total_size`` (bytes) of a ``model.safetensors.index.json``.

    Raises ConfigError (unreadable, not JSON, no ``metadata.total_size`` that is a positive
    int of at most :data:`kvcore.units.MAX_BYTES`).
    """
    from kvcore.units import MAX_BYTES

    data = read_json_file(path, "safetensors index")
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: a safetensors index must be a JSON object holding "
                          f"metadata.total_size (bytes)", field="metadata.total_size",
                          path=str(path))
    meta = ConfigView(data, where=str(path)).section("metadata", required=True)
    size: int = meta.get_int("total_size", maximum=MAX_BYTES)
    return size


#: an index total further than this factor from the config's own estimate is warned about:
#: the estimate is within 3% of every published checkpoint kvcore tests against
#: (tests/test_weights.py), so a factor of 2 is not a rounding matter but a different
#: checkpoint (another precision, a missing tower, a wrong index file)
INDEX_MISMATCH_FACTOR = 2.0


def check_index_total(index_total: int, config_total: float, embedding_bytes: float,
                      where: str) -> str | None:
    """Compare a safetensors index's ``metadata.total_size`` with the config's estimate.

    Returns a warning note when they differ by more than :data:`INDEX_MISMATCH_FACTOR`
    (None otherwise).  Raises ConfigError for the impossible: fewer bytes than the
    embeddings alone (each ``vocab_size x hidden_size`` in the checkpoint dtype; quantized
    checkpoints keep embeddings unquantized).
    """
    if embedding_bytes and index_total < embedding_bytes:
        raise ConfigError(
            f"{where}: metadata.total_size = {index_total:,} bytes is fewer than the "
            f"embeddings alone ({int(embedding_bytes):,} bytes from vocab_size x "
            f"hidden_size); the index does not belong to this config",
            field="metadata.total_size", value=index_total)
    if config_total and not (1 / INDEX_MISMATCH_FACTOR <= index_total / config_total
                             <= INDEX_MISMATCH_FACTOR):
        return (f"{where}: metadata.total_size ({index_total / 2**30:,.2f} GiB) differs "
                f"from the config's estimate ({config_total / 2**30:,.2f} GiB) by more "
                f"than {INDEX_MISMATCH_FACTOR:g}x; check that the index and the config are "
                f"of the same checkpoint (the index's figure is used)")
    return None
