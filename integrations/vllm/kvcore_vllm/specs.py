"""The spec bridge: kvcore specs <-> vLLM 0.32 ``KVCacheSpec`` objects, and
``KVCacheConfig`` both ways.

Kinds both libraries have (kvcore kind -> vLLM 0.32 class in
``vllm.v1.kv_cache_interface``)::

    full_attention            FullAttentionSpec
    sliding_window            SlidingWindowSpec
    chunked_local_attention   ChunkedLocalAttentionSpec
    cross_attention           CrossAttentionSpec
    encoder_only_attention    EncoderOnlyAttentionSpec
    sink_full_attention       SinkFullAttentionSpec
    mla_attention             MLAAttentionSpec                (kvcore-mla)
    hidden_state_cache        HiddenStateCacheSpec            (kvcore-mla)
    sliding_window_mla        SlidingWindowMLASpec            (kvcore-mla)
    mla_indexer               MLAAttentionSpec, cache_role=INDEXER  (kvcore-mla)
    rswa                      RSWASpec                        (kvcore-rswa)
    mamba                     MambaSpec                       (kvcore-mamba)
    turboquant_full_attention FullAttentionSpec with a TURBOQUANT_* kv_quant_mode
                                                              (kvcore-turboquant)

A kind only one side has raises :class:`~kvcore.errors.SpecError` naming it
(kvcore-only: ``kpool_tail``; vLLM-only: ``CircularBufferSpec``, ``HiSparseHotSpec``,
``HiSparseResidentSpec``).  ``UniformTypeKVCacheSpecs`` (vLLM's one group of layers of
one type with different pages) converts layer by layer.

Rule of every conversion: the spec's **page size in bytes is preserved** (kvcore's
``page_size_bytes`` == vLLM's ``page_size_bytes``, formulas: kvcore
``AttentionSpec.real_page_size_bytes``, vLLM ``AttentionSpec.unpadded_page_size_bytes``);
a pair whose page sizes would differ raises :class:`~kvcore.errors.SpecError` with both
figures instead of converting silently.  (Exception: ``encoder_only_attention``, which
keeps no cache; kvcore sizes its page 0 B, vLLM a nominal K/V page.)

Dtypes: vLLM's ``dtype`` is the cache's storage dtype (a ``torch.dtype``); kvcore keeps
the model ``dtype`` and a ``kv_cache_dtype`` scheme name.  ``auto`` maps to the model
dtype; ``fp8`` / ``fp8_e4m3`` / ``fp8_e5m2`` map to ``torch.float8_e4m3fn`` /
``float8_e5m2`` with ``KVQuantMode.FP8_PER_TENSOR``; other schemes map to the dtype
and mode vLLM's ``get_kv_quant_mode`` gives them.  Imports torch and vLLM lazily.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from kvcore.errors import SpecError
from kvcore_vllm.installer import check_int, check_type, require_vllm

__all__ = [
    "to_vllm_spec",
    "from_vllm_spec",
    "to_vllm_config",
    "from_vllm_config",
    "KIND_TO_VLLM",
    "KVCORE_ONLY_KINDS",
    "VLLM_ONLY_SPECS",
]

#: kvcore kind -> vLLM 0.32 class name
KIND_TO_VLLM: dict[str, str] = {
    "full_attention": "FullAttentionSpec",
    "sliding_window": "SlidingWindowSpec",
    "chunked_local_attention": "ChunkedLocalAttentionSpec",
    "cross_attention": "CrossAttentionSpec",
    "encoder_only_attention": "EncoderOnlyAttentionSpec",
    "sink_full_attention": "SinkFullAttentionSpec",
    "mla_attention": "MLAAttentionSpec",
    "hidden_state_cache": "HiddenStateCacheSpec",
    "sliding_window_mla": "SlidingWindowMLASpec",
    "mla_indexer": "MLAAttentionSpec",
    "rswa": "RSWASpec",
    "mamba": "MambaSpec",
    "turboquant_full_attention": "FullAttentionSpec",
}
#: kinds vLLM 0.32 has no spec class for
KVCORE_ONLY_KINDS = ("kpool_tail",)
#: vLLM 0.32 spec classes kvcore has no kind for
VLLM_ONLY_SPECS = ("CircularBufferSpec", "HiSparseHotSpec", "HiSparseResidentSpec")

_FP8 = {"fp8": "float8_e4m3fn", "fp8_e4m3": "float8_e4m3fn", "fp8_e5m2": "float8_e5m2"}
_MLA_KINDS = ("mla_attention", "hidden_state_cache", "sliding_window_mla", "mla_indexer")


def _torch() -> Any:
    import torch

    return torch


def _kvi() -> Any:
    from vllm.v1 import kv_cache_interface

    return kv_cache_interface


def _tdtype(name: str) -> Any:
    return getattr(_torch(), name)


def _dname(dt: Any) -> str:
    return str(dt).removeprefix("torch.")


def _check_page(kind: str, k_page: int, v_page: int, where: str) -> None:
    if kind == "encoder_only_attention":
        return  # kvcore sizes it 0 B (no cache kept); vLLM reports a nominal page
    if k_page != v_page:
        raise SpecError(f"{where}: kind {kind!r} would change its page size "
                        f"(kvcore {k_page} B, vLLM {v_page} B); not converted",
                        field="page_size_bytes", kind=kind, kvcore=k_page, vllm=v_page)


def _vllm_scheme_name(scheme: Any) -> str:
    """The name vLLM 0.32 knows a kvcore scheme by (kvcore may canonicalise another
    alias: ``turboquant_4bit_nc`` is kvcore's ``turboquant_k4v4_nc``)."""
    kvi = _kvi()
    names = (scheme.name, *getattr(scheme, "aliases", ()))
    for n in names:
        if n.startswith("turboquant_") and n.upper() not in kvi.KVQuantMode.__members__:
            continue
        return n
    return scheme.name


def _vllm_quant_mode(name: str) -> Any:
    """vLLM 0.32's ``get_kv_quant_mode(name)``; a name vLLM has no mode for (a
    kvcore-only TurboQuant scheme such as ``turboquant_k3v4``: vLLM looks it up as a
    ``KVQuantMode`` member, vllm/v1/kv_cache_interface.py:106-107) is a SpecError naming
    the dtype and vLLM's TurboQuant names, never a raw KeyError."""
    kvi = _kvi()
    try:
        return kvi.get_kv_quant_mode(name)
    except (KeyError, ValueError) as exc:
        tq = sorted(m.lower() for m in kvi.KVQuantMode.__members__
                    if m.startswith("TURBOQUANT_"))
        raise SpecError(
            f"kv_cache_dtype {name!r} has no vLLM 0.32 counterpart (vLLM's TurboQuant "
            f"kv_cache_dtypes: {', '.join(tq)}); it exists only in kvcore",
            field="kv_cache_dtype", value=name) from exc


def _storage_dtype(scheme: Any, mode: Any) -> Any:
    """The element dtype of a quantized cache (vLLM ``kv_cache_dtype_str_to_dtype``)."""
    torch = _torch()
    kvi = _kvi()
    st = getattr(scheme, "storage_dtype", None)
    if st:
        return _tdtype(st)
    if mode == kvi.KVQuantMode.INT8_PER_TOKEN_HEAD:
        return torch.int8
    if mode == kvi.KVQuantMode.FP8_PER_TOKEN_HEAD:
        return torch.float8_e4m3fn
    return torch.uint8


def to_vllm_spec(spec: Any) -> Any:
    """The vLLM 0.32 ``KVCacheSpec`` of a kvcore spec (same block size, page size and
    windows).

    Quantized schemes whose bytes per token are not ``head_size x element size``
    (per-token-head scales, NVFP4, TurboQuant, ``fp8_ds_mla``, the MLA indexer's fp8 +
    scale record) carry kvcore's figure as vLLM's ``state_content_bytes`` (bytes per
    head slot and stored state), the field vLLM's attention backends publish for packed
    layouts, so the page is kvcore's.

    Raises :class:`~kvcore.errors.SpecError` for a kind vLLM 0.32 does not have
    (``kpool_tail``) or one whose page vLLM would size differently."""
    require_vllm("to_vllm_spec()")
    from kvcore.specs import KVCacheSpec

    check_type("to_vllm_spec()", "spec", spec, KVCacheSpec, "a kvcore KVCacheSpec")
    kind = spec.kind
    if kind in KVCORE_ONLY_KINDS:
        raise SpecError(f"kind {kind!r} exists only in kvcore (vLLM 0.32 has no spec "
                        f"class for it); known pairs: {', '.join(KIND_TO_VLLM)}",
                        field="kind", value=kind)
    if kind not in KIND_TO_VLLM:
        raise SpecError(f"kind {kind!r} has no vLLM 0.32 counterpart; known pairs: "
                        f"{', '.join(KIND_TO_VLLM)}", field="kind", value=kind)
    kvi = _kvi()
    cls = getattr(kvi, KIND_TO_VLLM[kind])
    kw: dict[str, Any] = {"block_size": spec.block_size}
    if spec.page_size_padded is not None:
        kw["page_size_padded"] = spec.page_size_padded
    if kind == "mamba":
        kw.update(shapes=tuple(tuple(s) for s in spec.shapes),
                  dtypes=tuple(_tdtype(d) for d in spec.dtypes),
                  mamba_cache_mode=spec.mamba_cache_mode,
                  num_speculative_blocks=spec.num_speculative_blocks)
        out = cls(**kw)
        _check_page(kind, spec.page_size_bytes, out.page_size_bytes, "to_vllm_spec")
        return out
    kw.update(num_kv_heads=spec.num_kv_heads, head_size=spec.head_size)
    scheme = spec.scheme
    name = _vllm_scheme_name(scheme)
    if kind in _MLA_KINDS:
        kw["head_size_v"] = 0
        if getattr(spec, "compress_ratio", 1) != 1:
            kw["tokens_per_state"] = spec.compress_ratio
        for f in ("alignment", "model_version"):
            if getattr(spec, f, None) is not None:
                kw[f] = getattr(spec, f)
        if kind == "mla_indexer":
            kw["cache_role"] = kvi.SparseCacheRole.INDEXER
            kw["num_kv_heads"] = 1
        if name != "auto":
            kw["cache_dtype_str"] = name
    elif getattr(spec, "head_size_v", None) not in (None, spec.head_size):
        # asymmetric K / V heads (MiMo-V2-Flash: 192 / 128): vLLM's AttentionSpec field
        kw["head_size_v"] = spec.head_size_v
    if name == "auto":
        kw["dtype"] = _tdtype(spec.dtype)
    elif name in _FP8:
        kw["dtype"] = _tdtype(_FP8[name])
        kw["kv_quant_mode"] = kvi.KVQuantMode.FP8_PER_TENSOR
    else:
        mode = _vllm_quant_mode(name)
        if mode == kvi.KVQuantMode.NONE:
            kw["dtype"] = _tdtype(getattr(scheme, "storage_dtype", None) or name)
        else:
            kw["kv_quant_mode"] = mode
            kw["dtype"] = _storage_dtype(scheme, mode)
    fields = {x.name for x in dataclasses.fields(cls)}
    for f in ("sliding_window", "attention_chunk_size", "non_causal", "sink_len",
              "rswa_window"):
        if f in fields and hasattr(spec, f):
            v = getattr(spec, f)
            if v is not None:
                kw[f] = v
    out = _build(cls, kw, kind)
    real = spec.real_page_size_bytes
    if out.real_page_size_bytes != real and kind != "encoder_only_attention":
        # a packed record: carry kvcore's bytes per head slot and state
        cells = out.num_heads * out.num_states
        if real % cells == 0:
            kw["state_content_bytes"] = real // cells
            out = _build(cls, kw, kind)
    _check_page(kind, spec.page_size_bytes, out.page_size_bytes, "to_vllm_spec")
    return out


def _build(cls: Any, kw: dict[str, Any], kind: str) -> Any:
    try:
        return cls(**kw)
    except (TypeError, ValueError, AssertionError, KeyError) as e:
        raise SpecError(f"vLLM's {cls.__name__} refused kind {kind!r}: {e}",
                        field="kind", value=kind) from None


def from_vllm_spec(vspec: Any) -> Any:
    """The kvcore spec of a vLLM 0.32 ``KVCacheSpec`` (same block size, page size and
    windows).  The plugin kinds need their plugin installed (kvcore-mla, kvcore-mamba,
    kvcore-rswa, kvcore-turboquant); the class comes from kvcore's registry.

    Raises :class:`~kvcore.errors.SpecError` for a vLLM-only spec class (naming it) or
    a page kvcore would size differently."""
    require_vllm("from_vllm_spec()")
    from kvcore.registry import get_registry

    kvi = _kvi()
    name = type(vspec).__name__
    if name in VLLM_ONLY_SPECS:
        raise SpecError(f"vLLM spec {name} has no kvcore kind (vLLM-only); known pairs: "
                        f"{', '.join(sorted(set(KIND_TO_VLLM.values())))}",
                        field="kv_cache_spec", value=name)
    if name == "UniformTypeKVCacheSpecs":
        raise SpecError("from_vllm_spec: UniformTypeKVCacheSpecs holds one spec per "
                        "layer; convert its kv_cache_specs values one by one",
                        field="kv_cache_spec", value=name)
    mode = getattr(vspec, "kv_quant_mode", None)
    kind = {v: k for k, v in KIND_TO_VLLM.items()
            if k not in ("mla_indexer", "turboquant_full_attention")}.get(name)
    if kind is None:
        raise SpecError(f"vLLM spec {name} has no kvcore kind; known: "
                        f"{', '.join(sorted(set(KIND_TO_VLLM.values())))}",
                        field="kv_cache_spec", value=name)
    if name == "FullAttentionSpec" and mode is not None and mode.is_turboquant:
        kind = "turboquant_full_attention"
    if name == "MLAAttentionSpec" and vspec.cache_role == kvi.SparseCacheRole.INDEXER:
        kind = "mla_indexer"
    cls = get_registry().spec_class(kind) if hasattr(get_registry(), "spec_class") \
        else _spec_class(kind)
    kw: dict[str, Any] = {"block_size": vspec.block_size}
    if vspec.page_size_padded is not None:
        kw["page_size_padded"] = vspec.page_size_padded
    if kind == "mamba":
        kw.update(shapes=tuple(tuple(s) for s in vspec.shapes),
                  dtypes=tuple(_dname(d) for d in vspec.dtypes),
                  mamba_cache_mode=vspec.mamba_cache_mode,
                  num_speculative_blocks=vspec.num_speculative_blocks)
    else:
        kw.update(num_kv_heads=vspec.num_kv_heads, head_size=vspec.head_size)
        dname = _dname(vspec.dtype)
        cache_str = getattr(vspec, "cache_dtype_str", None)
        if kind in _MLA_KINDS:
            if kind == "mla_indexer":
                # kvcore's indexer spec encodes vLLM's record (fp8 keys + a scale)
                kw.pop("head_size")
                kw.pop("num_kv_heads")
            elif cache_str and cache_str != "auto":
                kw["kv_cache_dtype"] = cache_str
                kw["dtype"] = "bfloat16"
            else:
                kw["dtype"] = dname
            # the compression and the record alignment (DeepSeek-V4's indexer: 4 tokens
            # a state, 576-byte records) set the page as much as the heads do
            tps = getattr(vspec, "tokens_per_state", 1)
            if tps != 1:
                kw["compress_ratio"] = int(tps)
            for f in ("alignment", "model_version"):
                if getattr(vspec, f, None) is not None:
                    kw[f] = getattr(vspec, f)
        else:
            if vspec.head_size_v != vspec.head_size:
                kw["head_size_v"] = vspec.head_size_v
            if mode is None or mode == kvi.KVQuantMode.NONE:
                kw["dtype"] = dname
            elif mode == kvi.KVQuantMode.FP8_PER_TENSOR:
                kw["dtype"] = "bfloat16"
                kw["kv_cache_dtype"] = "fp8_e5m2" if dname == "float8_e5m2" else "fp8_e4m3"
            else:
                kw["dtype"] = "bfloat16"
                kw["kv_cache_dtype"] = mode.name.lower()
                if kind == "turboquant_full_attention":
                    kw.pop("dtype")
        fields = {f.name for f in dataclasses.fields(cls)}
        for f in ("sliding_window", "attention_chunk_size", "non_causal", "sink_len",
                  "rswa_window"):
            v = getattr(vspec, f, None)
            if f in fields and v is not None and (f != "non_causal" or v):
                kw[f] = v
    try:
        out = cls(**kw)
    except (TypeError, ValueError) as e:
        raise SpecError(f"from_vllm_spec: {name} -> kind {kind!r}: {e}", field="kind",
                        value=kind) from None
    _check_page(kind, out.page_size_bytes, vspec.page_size_bytes, "from_vllm_spec")
    return out


def _spec_class(kind: str) -> Any:
    from kvcore.registry import get_registry

    reg = get_registry()
    for attr in ("spec_class", "get_spec_class", "class_of"):
        fn = getattr(reg, attr, None)
        if fn is not None:
            return fn(kind)
    for st in reg.spec_types() if hasattr(reg, "spec_types") else ():
        if st.kind == kind:
            return st.cls
    raise SpecError(f"kind {kind!r} is not registered in kvcore (is its plugin "
                    "installed?)", field="kind", value=kind)


def from_vllm_config(vcfg: Any, *, max_model_len: int = 0) -> Any:
    """kvcore's :class:`~kvcore.kv_cache_config.KVCacheConfig` of a vLLM 0.32
    ``KVCacheConfig``: ``num_blocks``, groups (``layer_names``, spec; a
    ``UniformTypeKVCacheSpecs`` group becomes a packed group) and tensors.

    vLLM places layer ``layers[l]`` of a tensor at ``offset + l * layer_stride`` bytes of
    one backing allocation; kvcore lists one entry per distinct address, ``shared_by``
    the layers (of different groups) placed there, with vLLM's ``block_stride`` and,
    for a block-outermost layout (``layer_stride < block_stride``), the in-block
    ``offset``."""
    require_vllm("from_vllm_config()")
    from kvcore.kv_cache_config import KVCacheConfig, KVCacheGroupSpec, KVCacheTensor

    check_type("from_vllm_config()", "kv_cache_config", vcfg, _kvi().KVCacheConfig,
               "a vLLM 0.32 KVCacheConfig (vllm.v1.kv_cache_interface)")
    check_int("from_vllm_config()", "max_model_len", max_model_len, 0)

    groups: list[Any] = []
    for g in vcfg.kv_cache_groups:
        s = g.kv_cache_spec
        if type(s).__name__ == "UniformTypeKVCacheSpecs":
            layer_specs = tuple(from_vllm_spec(s.kv_cache_specs[n]) for n in g.layer_names)
            groups.append(KVCacheGroupSpec(tuple(g.layer_names), layer_specs[0],
                                           layer_specs))
        else:
            groups.append(KVCacheGroupSpec(tuple(g.layer_names), from_vllm_spec(s)))
    at: dict[tuple[int, int], list[str]] = {}
    size_of: dict[tuple[int, int], int] = {}
    block_outer = False
    for t in vcfg.kv_cache_tensors:
        inner = 0 < t.layer_stride < t.block_stride
        block_outer |= inner
        for i, name in enumerate(t.layers):
            a = t.offset + i * t.layer_stride
            key = (a, t.block_stride)
            at.setdefault(key, []).append(name)
            size_of[key] = t.block_stride * vcfg.num_blocks if inner else \
                (t.layer_stride or t.size)
    tensors = tuple(KVCacheTensor(size_of[k], tuple(v), k[0] if block_outer else 0, k[1])
                    for k, v in sorted(at.items()))
    layout = getattr(vcfg, "kv_cache_layout", None) or ("BLHNC" if block_outer
                                                        else "LBNHC")
    return KVCacheConfig(num_blocks=vcfg.num_blocks, kv_cache_tensors=tensors,
                         kv_cache_groups=tuple(groups), max_model_len=max_model_len,
                         kv_cache_layout=layout)


def _even_runs(names: list[str], addrs: list[int]) -> list[list[str]]:
    """Split layers (in order) into maximal runs whose byte addresses are evenly
    spaced (positive step)."""
    runs: list[list[str]] = []
    i = 0
    while i < len(names):
        j = i + 1
        if j < len(names) and addrs[j] > addrs[i]:
            step = addrs[j] - addrs[i]
            while j + 1 < len(names) and addrs[j + 1] - addrs[j] == step:
                j += 1
            j += 1
        runs.append(names[i:j])
        i = j
    return runs


def to_vllm_config(kcfg: Any) -> Any:
    """vLLM 0.32's ``KVCacheConfig`` of a kvcore plan.

    Groups get vLLM specs (a packed kvcore group becomes ``UniformTypeKVCacheSpecs``).
    Tensors: kvcore's entries are laid out one after another (layer-outermost) or as
    views into one buffer (block-outermost, ``kv_cache_layout`` starting with ``B``);
    each layer's byte address follows, and per group (and per spec of a packed group)
    one vLLM ``KVCacheTensor`` lists its layers in order with ``layer_stride`` (the
    distance between consecutive layers), ``block_stride`` and ``offset`` (the first
    layer's address), all of ``size`` = the whole allocation, as vLLM's planner does.

    Layers of one spec that are not evenly spaced in memory get one tensor per evenly
    spaced run.

    Raises :class:`~kvcore.errors.SpecError` for a kind vLLM does not have, and
    :class:`~kvcore.errors.ConfigError` when the plan has no ``num_blocks`` or a layer
    is in no tensor entry."""
    require_vllm("to_vllm_config()")
    from kvcore.errors import ConfigError
    from kvcore.kv_cache_config import KVCacheConfig

    check_type("to_vllm_config()", "kv_cache_config", kcfg, KVCacheConfig,
               "a kvcore KVCacheConfig (kvcore.plan / kvcore.plan_model)")

    kvi = _kvi()
    if kcfg.num_blocks is None:
        raise ConfigError("to_vllm_config: the plan has no num_blocks (planned without "
                          "a memory budget)", field="num_blocks")
    block_outer = str(kcfg.kv_cache_layout or "LBNHC").upper().startswith("B")
    addr: dict[str, int] = {}
    bstride: dict[str, int] = {}
    base = 0
    total = 0
    for t in kcfg.kv_cache_tensors:
        start = 0 if block_outer else base
        for n in t.shared_by:
            addr[n] = start + t.offset
            bstride[n] = t.block_stride
        base += t.size
        total = max(total, t.size) if block_outer else base
    groups = []
    tensors = []
    for gi, g in enumerate(kcfg.kv_cache_groups):
        specs = g.layer_specs if g.layer_specs is not None else (g.spec,) * len(g.layer_names)
        vspecs = [to_vllm_spec(s) for s in specs]
        if g.layer_specs is not None:
            vspec = kvi.UniformTypeKVCacheSpecs(
                block_size=g.spec.block_size,
                kv_cache_specs=dict(zip(g.layer_names, vspecs)))
        else:
            vspec = vspecs[0]
        groups.append(kvi.KVCacheGroupSpec(layer_names=list(g.layer_names),
                                           kv_cache_spec=vspec))
        by_spec: dict[Any, list[tuple[str, Any]]] = {}
        for n, s in zip(g.layer_names, specs):
            by_spec.setdefault(s, []).append((n, s))
        for s, members in by_spec.items():
            names = [n for n, _ in members]
            missing = [n for n in names if n not in addr]
            if missing:
                raise ConfigError(f"to_vllm_config: layer {missing[0]!r} of group {gi} "
                                  "is in no kv_cache_tensors entry",
                                  field="kv_cache_tensors", value=missing[0])
            page = s.page_size_bytes
            stride = bstride[names[0]] or page
            # one vLLM tensor per run of evenly spaced layers (vLLM's own planner has one
            # per group and spec; kvcore's layers of one spec need not be evenly spaced)
            for run in _even_runs(names, [addr[n] for n in names]):
                a0 = addr[run[0]]
                layer_stride = addr[run[1]] - a0 if len(run) > 1 else (
                    page if block_outer else stride * kcfg.num_blocks)
                tensors.append(kvi.KVCacheTensor(size=total, layers=list(run),
                                                 layer_stride=layer_stride,
                                                 block_stride=stride, offset=a0))
    return kvi.KVCacheConfig(num_blocks=kcfg.num_blocks, kv_cache_tensors=tensors,
                             kv_cache_groups=groups)
