"""Model-family adapters: HF / mamba_ssm config -> ``{layer name: spec}`` for hybrid and
pure state-space models.

Every adapter returns the layers in layer order: recurrent layers as
:class:`~kvcore_mamba.spec.MambaSpec`, attention layers as kvcore
:class:`~kvcore.specs.FullAttentionSpec` (block size ``cache_config.block_size`` or 16,
KV heads split over ``tensor_parallel_size``, a head count below it replicated: one head
per rank).  Layers without a cache (MLP, MoE) are left out.

State block size: in ``none`` mode a bound on the request length (one block per
request): ``max_position_embeddings`` when the config has it, else
:data:`NONE_MODE_BLOCK_SIZE`; the planner may replace it with ``max_model_len``.  In
``align`` / ``all`` mode the attention block size (grouping keeps the two equal).

Which layers are which (each from the model's config class / reference code):

* ``mamba`` / ``falcon_mamba`` (transformers ``MambaConfig``: hidden_size, state_size,
  conv_kernel, expand, intermediate_size) and the mamba_ssm schema (``d_model``,
  ``n_layer``, ``ssm_cfg``; ``mamba_ssm.modules.mamba_simple.Mamba`` defaults d_state 16,
  d_conv 4, expand 2): every layer Mamba1, except ``attn_layer_idx``.
* ``mamba2`` (transformers ``Mamba2Config``: num_heads, head_dim, n_groups, state_size,
  conv_kernel, expand) and the mamba_ssm schema (``mamba_ssm.modules.mamba2.Mamba2``
  defaults d_state 128, d_conv 4, expand 2, headdim 64, ngroups 1; ``attn_layer_idx``
  layers are ``mamba_ssm.modules.mha.MHA`` with ``attn_cfg`` num_heads, num_heads_kv,
  head_dim).
* ``jamba``: layer i is attention when ``i % attn_layer_period == attn_layer_offset``
  (transformers ``JambaConfig.layers_block_type``), else Mamba1 with d_inner =
  ``mamba_expand x hidden_size``, ``mamba_d_state``, ``mamba_d_conv``.
* ``nemotron_h``: ``hybrid_override_pattern`` (M Mamba2, * attention, - MLP, E MoE) or
  ``layers_block_type`` (mamba / attention / mlp / moe; its length is the layer count);
  Mamba2 with d_inner = ``mamba_num_heads x mamba_head_dim`` (vLLM ``nemotron_h.py``); SSM
  state float32 unless ``mamba_ssm_cache_dtype`` says otherwise.
* ``qwen3_next``: ``layer_types``, or layer i full attention when
  ``(i + 1) % full_attention_interval == 0``, else gated DeltaNet (HF
  ``Qwen3NextConfig``).
* ``qwen3_5`` / ``qwen3_5_moe`` (and their ``*_text`` types): ``layer_types`` with
  ``linear_attention`` (gated DeltaNet) and ``full_attention``; SSM dtype
  ``mamba_ssm_dtype``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from kvcore.errors import ConfigError
from kvcore.models.config import REQUIRED, ConfigView
from kvcore.specs import FullAttentionSpec, KVCacheSpec
from kvcore_mamba.shapes import (
    gated_delta_net_state_shapes,
    mamba1_state_shapes,
    mamba2_state_shapes,
    ssm_state_dtype,
)
from kvcore_mamba.spec import MambaSpec

__all__ = ["MODEL_TYPES", "NONE_MODE_BLOCK_SIZE", "mamba_layer_specs"]

#: block size of a ``none``-mode state when the config gives no max_position_embeddings
NONE_MODE_BLOCK_SIZE = 1 << 20

_DEFAULT_BLOCK_SIZE = 16


# ---- small readers ---------------------------------------------------------------------

def _where(mc: Any) -> str:
    return getattr(mc, "source", "") or getattr(mc, "name", "") or "config"


def _int(v: ConfigView, key: str, mc: Any, default: int | None = None,
         within: str | None = None) -> int:
    """A positive, plausibly bounded int field (kvcore's typed reader: absent -> the
    default, present but invalid -> ConfigError naming the field by its path, e.g.
    ``ssm_cfg.d_state``)."""
    value: int = v.get_int(key, REQUIRED if default is None else default)
    return value


def _obj(v: ConfigView, key: str, mc: Any) -> ConfigView:
    """A sub-object field (``ssm_cfg``, ``attn_cfg``): absent -> empty, not an object ->
    ConfigError."""
    return v.section(key)


def _kv_heads_per_rank(kv_heads: int, tp: int, mc: Any) -> int:
    """KV heads on one rank: ``kv / tp``, or 1 (replicated) when ``kv < tp``."""
    if kv_heads < tp:
        return 1
    if kv_heads % tp:
        raise ConfigError(
            f"{_where(mc)}: num_key_value_heads {kv_heads} is not divisible by "
            f"tensor_parallel_size {tp}", field="num_key_value_heads", value=kv_heads)
    return kv_heads // tp


class _Ctx:
    """What every adapter needs from the two configs."""

    def __init__(self, mc: Any, cc: Any) -> None:
        self.mc = mc
        self.view: ConfigView = mc.view
        # the engine's --mamba-ssm-cache-dtype wins over the config
        self.ssm_override = getattr(cc, "mamba_ssm_cache_dtype", None) or None
        self.tp = int(getattr(cc, "tensor_parallel_size", 1) or 1)
        self.mode = getattr(cc, "mamba_cache_mode", "none") or "none"
        self.num_spec = int(getattr(cc, "num_speculative_tokens", 0) or 0)
        self.include_mtp = bool(getattr(cc, "include_mtp_layers", False))
        self.dtype: str = mc.dtype
        bs = getattr(cc, "block_size", None)
        self.attn_block = _DEFAULT_BLOCK_SIZE if bs is None else bs
        kvd = getattr(cc, "kv_cache_dtype", "auto") or "auto"
        if kvd == "auto" and getattr(mc, "kv_cache_dtype", None):
            kvd = mc.kv_cache_dtype
        self.kv_cache_dtype = kvd
        self.chunk_size = self._chunk_size()

    def _chunk_size(self) -> int | None:
        """The SSM kernel's chunk (tokens): ``mamba_chunk_size`` (Bamba, FalconH1,
        Granite) or ``chunk_size`` (Mamba2, NemotronH, Zamba; mamba_ssm schema: in
        ``ssm_cfg``), as vLLM ``ModelConfig.get_mamba_chunk_size`` reads it; None when
        the config has none (each adapter then gives its kernel's default: Mamba2 256,
        transformers ``Mamba2Config`` and mamba_ssm ``Mamba2``; NemotronH 128,
        ``NemotronHConfig``; gated DeltaNet 64, the FLA chunk kernels' ``FLA_CHUNK_SIZE``
        in vLLM; Mamba1 none: its scan has no chunks)."""
        v = self.view
        for src, key in ((v, "mamba_chunk_size"), (v, "chunk_size"),
                         (v.section("ssm_cfg"), "chunk_size")):
            if src.has(key):
                return _int(src, key, self.mc)
        return None

    def ssm_dtype(self, default: str | None = None) -> str:
        """The recurrent-state dtype (see :func:`kvcore_mamba.shapes.ssm_state_dtype`);
        the engine's override first."""
        return ssm_state_dtype(self.view, self.dtype, default, override=self.ssm_override)

    @property
    def state_block(self) -> int:
        if self.mode == "none":
            return self.mc.max_position_embeddings or NONE_MODE_BLOCK_SIZE
        return self.attn_block

    def state(self, shapes: tuple, dtypes: tuple,
              chunk_default: int | None = None) -> MambaSpec:
        chunk = self.chunk_size if self.chunk_size is not None else chunk_default
        return MambaSpec(block_size=self.state_block, shapes=shapes, dtypes=dtypes,
                         mamba_cache_mode=self.mode, num_speculative_blocks=self.num_spec,
                         mamba_chunk_size=chunk)

    def attention(self, kv_heads: int, head_size: int) -> FullAttentionSpec:
        return FullAttentionSpec(
            block_size=self.attn_block, num_kv_heads=_kv_heads_per_rank(kv_heads, self.tp,
                                                                        self.mc),
            head_size=head_size, dtype=self.dtype, kv_cache_dtype=self.kv_cache_dtype)

    def std_attention(self) -> FullAttentionSpec:
        """Attention from the normalized fields (num_key_value_heads, head_dim)."""
        mc = self.mc
        kv = mc.num_key_value_heads
        head = _int(self.view, "head_dim", mc, default=0) or \
            _int(self.view, "attention_head_dim", mc, default=0) or mc.head_dim
        if kv is None or head is None:
            missing = "num_key_value_heads" if kv is None else "head_dim"
            raise ConfigError(f"{_where(mc)}: missing field {missing!r} for the attention "
                              f"layers of model_type {mc.model_type!r}", field=missing)
        return self.attention(kv, head)


# ---- Mamba1 / Mamba2 --------------------------------------------------------------------

def _is_mamba_ssm_schema(v: ConfigView) -> bool:
    return v.has("d_model") and v.has("n_layer")


def _mamba1_state(c: _Ctx, *, d_inner: int, d_state: int, d_conv: int) -> MambaSpec:
    shapes = mamba1_state_shapes(d_inner=d_inner, d_state=d_state, d_conv=d_conv, tp=c.tp)
    return c.state(shapes, (c.dtype, c.ssm_dtype()))


def _mamba2_state(c: _Ctx, *, d_inner: int, n_groups: int, n_heads: int, head_dim: int,
                  d_state: int, d_conv: int, ssm_default: str | None = None,
                  chunk_default: int = 256) -> MambaSpec:
    shapes = mamba2_state_shapes(d_inner=d_inner, n_groups=n_groups, n_heads=n_heads,
                                 head_dim=head_dim, d_state=d_state, d_conv=d_conv,
                                 tp=c.tp, num_spec=c.num_spec)
    return c.state(shapes, (c.dtype, c.ssm_dtype(ssm_default)),
                   chunk_default)


def _mamba_ssm_layers(c: _Ctx, state: MambaSpec) -> dict[str, KVCacheSpec]:
    """mamba_ssm schema: ``n_layer`` blocks, attention at ``attn_layer_idx``."""
    v, mc = c.view, c.mc
    n = _int(v, "n_layer", mc)
    attn_idx = v.get_list("attn_layer_idx", [], item="int", minimum=0, maximum=n - 1)
    if len(set(attn_idx)) != len(attn_idx):
        raise ConfigError(f"{_where(mc)}: field 'attn_layer_idx' lists a layer twice",
                          field="attn_layer_idx")
    attn = None
    if attn_idx:
        cfg = _obj(v, "attn_cfg", mc)
        if not cfg.has("num_heads"):
            raise ConfigError(f"{_where(mc)}: field 'attn_cfg' must give num_heads for the "
                              f"attention layers {attn_idx}", field="attn_cfg")
        heads = _int(cfg, "num_heads", mc, within="attn_cfg")
        kv = _int(cfg, "num_heads_kv", mc, default=heads, within="attn_cfg")
        if kv > heads or heads % kv:
            raise ConfigError(f"{_where(mc)}: attn_cfg.num_heads_kv {kv} must divide "
                              f"attn_cfg.num_heads {heads}", field="attn_cfg.num_heads_kv",
                              value=kv)
        if c.tp > 1 and heads % c.tp:
            raise ConfigError(f"{_where(mc)}: attn_cfg.num_heads {heads} is not divisible "
                              f"by tensor_parallel_size {c.tp} (vLLM requires the size to "
                              f"divide the attention heads)", field="tensor_parallel_size",
                              value=c.tp)
        d_model = _int(v, "d_model", mc)
        head = _int(cfg, "head_dim", mc, default=max(1, d_model // heads),
                    within="attn_cfg")
        attn = c.attention(kv, head)
    out: dict[str, KVCacheSpec] = {}
    idx = set(attn_idx)
    for i in range(n):
        name = f"backbone.layers.{i}.mixer"
        out[name] = attn if i in idx else state  # type: ignore[assignment]
    return out


def _mamba1(c: _Ctx) -> dict[str, KVCacheSpec]:
    v, mc = c.view, c.mc
    if _is_mamba_ssm_schema(v):
        ssm = _obj(v, "ssm_cfg", mc)
        d_model = _int(v, "d_model", mc)
        expand = _int(ssm, "expand", mc, default=2, within="ssm_cfg")
        state = _mamba1_state(c, d_inner=expand * d_model,
                              d_state=_int(ssm, "d_state", mc, default=16, within="ssm_cfg"),
                              d_conv=_int(ssm, "d_conv", mc, default=4, within="ssm_cfg"))
        return _mamba_ssm_layers(c, state)
    hidden = _int(v, "hidden_size", mc)
    d_inner = _int(v, "intermediate_size", mc,
                   default=_int(v, "expand", mc, default=2) * hidden)
    state = _mamba1_state(c, d_inner=d_inner, d_state=_int(v, "state_size", mc, default=16),
                          d_conv=_int(v, "conv_kernel", mc, default=4))
    n = _int(v, "num_hidden_layers", mc)
    return {f"backbone.layers.{i}.mixer": state for i in range(n)}


def _mamba2(c: _Ctx) -> dict[str, KVCacheSpec]:
    v, mc = c.view, c.mc
    if _is_mamba_ssm_schema(v):
        ssm = _obj(v, "ssm_cfg", mc)
        d_model = _int(v, "d_model", mc)
        d_inner = _int(ssm, "expand", mc, default=2, within="ssm_cfg") * d_model
        d_ssm = _int(ssm, "d_ssm", mc, default=d_inner, within="ssm_cfg")
        head_dim = _int(ssm, "headdim", mc, default=64, within="ssm_cfg")
        if d_ssm % head_dim:
            raise ConfigError(f"{_where(mc)}: d_ssm {d_ssm} is not a multiple of headdim "
                              f"{head_dim}", field="ssm_cfg.headdim")
        state = _mamba2_state(c, d_inner=d_ssm,
                              n_groups=_int(ssm, "ngroups", mc, default=1, within="ssm_cfg"),
                              n_heads=d_ssm // head_dim, head_dim=head_dim,
                              d_state=_int(ssm, "d_state", mc, default=128, within="ssm_cfg"),
                              d_conv=_int(ssm, "d_conv", mc, default=4, within="ssm_cfg"))
        return _mamba_ssm_layers(c, state)
    hidden = _int(v, "hidden_size", mc)
    d_inner = _int(v, "intermediate_size", mc,
                   default=_int(v, "expand", mc, default=2) * hidden)
    state = _mamba2_state(c, d_inner=d_inner, n_groups=_int(v, "n_groups", mc, default=8),
                          n_heads=_int(v, "num_heads", mc, default=128),
                          head_dim=_int(v, "head_dim", mc, default=64),
                          d_state=_int(v, "state_size", mc, default=128),
                          d_conv=_int(v, "conv_kernel", mc, default=4))
    n = _int(v, "num_hidden_layers", mc)
    return {f"backbone.layers.{i}.mixer": state for i in range(n)}


# ---- Jamba --------------------------------------------------------------------------

def _jamba(c: _Ctx) -> dict[str, KVCacheSpec]:
    v, mc = c.view, c.mc
    n = _int(v, "num_hidden_layers", mc, default=32)
    period = _int(v, "attn_layer_period", mc, default=8)
    offset = v.get_int("attn_layer_offset", 4, minimum=0, maximum=period - 1)
    if not 0 <= offset < period:
        raise ConfigError(f"{_where(mc)}: field 'attn_layer_offset' = {offset!r} must be an "
                          f"int in [0, attn_layer_period={period})",
                          field="attn_layer_offset")
    hidden = _int(v, "hidden_size", mc)
    state = _mamba1_state(c, d_inner=_int(v, "mamba_expand", mc, default=2) * hidden,
                          d_state=_int(v, "mamba_d_state", mc, default=16),
                          d_conv=_int(v, "mamba_d_conv", mc, default=4))
    attn = c.std_attention()
    out: dict[str, KVCacheSpec] = {}
    for i in range(n):
        if i % period == offset:
            out[f"model.layers.{i}.self_attn.attn"] = attn
        else:
            out[f"model.layers.{i}.mamba"] = state
    return out


# ---- Nemotron-H -----------------------------------------------------------------------

_NEMOTRON_CHARS = {"M": "mamba", "*": "attention", "-": "mlp", "E": "moe"}


def nemotron_h_layer_kinds(config: ConfigView | dict[str, Any],
                           where: str = "config") -> list[str]:
    """Per-layer block types of a Nemotron-H config: ``mamba`` / ``attention`` / ``mlp``
    / ``moe``, from ``hybrid_override_pattern`` or ``layers_block_type``.  Raises
    ConfigError for an unknown character or type, or a pattern whose length disagrees
    with ``num_hidden_layers``."""
    v = config if isinstance(config, ConfigView) else ConfigView(config, where=where)
    pattern = v.get_str("hybrid_override_pattern", None)
    if pattern is not None:
        if len(pattern) > 10_000:
            raise ConfigError(f"{where}: hybrid_override_pattern has {len(pattern):,} "
                              f"layers, implausibly many (at most 10,000)",
                              field="hybrid_override_pattern")
        bad = sorted(set(pattern) - set(_NEMOTRON_CHARS))
        if bad:
            raise ConfigError(
                f"{where}: hybrid_override_pattern has unknown character(s) {bad}; valid: "
                f"M (mamba), * (attention), - (mlp), E (moe)",
                field="hybrid_override_pattern")
        kinds = [_NEMOTRON_CHARS[ch] for ch in pattern]
    else:
        listed = v.get_list("layers_block_type", None)
        if not listed:
            raise ConfigError(f"{where}: a nemotron_h config needs hybrid_override_pattern "
                              f"or layers_block_type", field="hybrid_override_pattern")
        if len(listed) > 10_000:
            raise ConfigError(f"{where}: layers_block_type has {len(listed):,} layers, "
                              f"implausibly many (at most 10,000)", field="layers_block_type")
        bad = sorted({str(k)[:40] for k in listed if not isinstance(k, str)
                      or k not in _NEMOTRON_CHARS.values()})
        if bad:
            raise ConfigError(f"{where}: layers_block_type has unknown type(s) {bad}; "
                              f"valid: mamba, attention, mlp, moe",
                              field="layers_block_type")
        kinds = [str(k) for k in listed]
    n = v.get_int("num_hidden_layers", None)
    if n is not None and n != len(kinds):
        raise ConfigError(f"{where}: num_hidden_layers {n} but the layer pattern has "
                          f"{len(kinds)} entries", field="num_hidden_layers")
    return kinds


def _nemotron_h(c: _Ctx) -> dict[str, KVCacheSpec]:
    v, mc = c.view, c.mc
    kinds = nemotron_h_layer_kinds(v, _where(mc))
    heads = _int(v, "mamba_num_heads", mc)
    head_dim = _int(v, "mamba_head_dim", mc)
    state = _mamba2_state(c, d_inner=heads * head_dim, n_groups=_int(v, "n_groups", mc),
                          n_heads=heads, head_dim=head_dim,
                          d_state=_int(v, "ssm_state_size", mc),
                          d_conv=_int(v, "conv_kernel", mc, default=4),
                          ssm_default="float32", chunk_default=128)
    attn = c.std_attention() if "attention" in kinds else None
    out: dict[str, KVCacheSpec] = {}
    for i, k in enumerate(kinds):
        if k == "mamba":
            out[f"model.layers.{i}.mixer"] = state
        elif k == "attention":
            out[f"model.layers.{i}.mixer.attn"] = attn  # type: ignore[assignment]
    if c.include_mtp:
        mtp = v.get_list("mtp_layers_block_type", [], item="str",
                         choices=tuple(_NEMOTRON_CHARS.values()))
        for j, k in enumerate(mtp):
            if k == "attention":
                out[f"mtp.layers.{j}.mixer.attn"] = c.std_attention()
            elif k == "mamba":
                out[f"mtp.layers.{j}.mixer"] = state
    return out


# ---- Qwen3-Next / Qwen3.5 (gated DeltaNet) -----------------------------------------------

def _qwen_layer_types(c: _Ctx) -> list[str]:
    v, mc = c.view, c.mc
    n = _int(v, "num_hidden_layers", mc)
    types = v.get_list("layer_types", None, item="str")
    if types is not None:
        if len(types) != n:
            raise ConfigError(f"{_where(mc)}: layer_types has {len(types)} entries but "
                              f"num_hidden_layers is {n}", field="layer_types")
        bad = sorted({t for t in types if t not in ("linear_attention", "full_attention")})
        if bad:
            raise ConfigError(f"{_where(mc)}: layer_types has unknown type(s) {bad}; valid: "
                              f"linear_attention, full_attention", field="layer_types")
        return list(types)
    interval = _int(v, "full_attention_interval", mc)
    return ["full_attention" if (i + 1) % interval == 0 else "linear_attention"
            for i in range(n)]


def _gated_delta_net(c: _Ctx) -> dict[str, KVCacheSpec]:
    v, mc = c.view, c.mc
    types = _qwen_layer_types(c)
    shapes = gated_delta_net_state_shapes(
        num_k_heads=_int(v, "linear_num_key_heads", mc),
        num_v_heads=_int(v, "linear_num_value_heads", mc),
        head_k_dim=_int(v, "linear_key_head_dim", mc),
        head_v_dim=_int(v, "linear_value_head_dim", mc),
        conv_kernel=_int(v, "linear_conv_kernel_dim", mc, default=4),
        tp=c.tp, num_spec=c.num_spec)
    state = c.state(shapes, (c.dtype, c.ssm_dtype()), chunk_default=64)
    attn = c.std_attention() if "full_attention" in types else None
    out: dict[str, KVCacheSpec] = {}
    for i, t in enumerate(types):
        if t == "full_attention":
            out[f"model.layers.{i}.self_attn.attn"] = attn  # type: ignore[assignment]
        else:
            out[f"model.layers.{i}.linear_attn"] = state
    if c.include_mtp:
        key = "mtp_num_hidden_layers" if v.has("mtp_num_hidden_layers") \
            else "num_nextn_predict_layers"
        n_mtp = v.get_int(key, 0, minimum=0)
        for j in range(n_mtp):
            out[f"mtp.layers.{j}.self_attn.attn"] = c.std_attention()
    return out


_ADAPTERS: dict[str, Callable[[_Ctx], dict[str, KVCacheSpec]]] = {
    "mamba": _mamba1,
    "falcon_mamba": _mamba1,
    "mamba2": _mamba2,
    "jamba": _jamba,
    "nemotron_h": _nemotron_h,
    "qwen3_next": _gated_delta_net,
    "qwen3_5": _gated_delta_net,
    "qwen3_5_moe": _gated_delta_net,
    "qwen3_5_text": _gated_delta_net,
    "qwen3_5_moe_text": _gated_delta_net,
}

#: the model_type values these adapters serve
MODEL_TYPES: tuple[str, ...] = tuple(_ADAPTERS)


def mamba_layer_specs(model_config: Any, cache_config: Any) -> dict[str, KVCacheSpec] | None:
    """``{layer name: spec}`` in layer order for a model type in :data:`MODEL_TYPES`, else
    None.  Raises ConfigError naming a missing or malformed field, or a
    ``tensor_parallel_size`` that does not divide a sharded dimension."""
    adapter = _ADAPTERS.get(model_config.model_type)
    if adapter is None:
        return None
    return adapter(_Ctx(model_config, cache_config))
