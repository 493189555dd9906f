"""The byte layout of one attention page (one block id of one layer), without torch.

A page of an :class:`~kvcore.specs.AttentionSpec` layer holds ``block_size`` tokens of
K and V for ``num_kv_heads`` heads.  kvcore stores K first, then V, each contiguous
inside the page (FlashInfer's paged "NHD" layout, ``[num_blocks, 2, block_size,
num_kv_heads, head_size]``, generalised to ``head_size_v != head_size`` and to scales):

==========================  ==================================  ======================
part                        shape (token-major ``NHC``)         bytes
==========================  ==================================  ======================
K values                    ``[block_size, H, D]``              N x H x D x itemsize
K scales (per-token-head)   ``[block_size, H]`` float32         N x H x 4
V values                    ``[block_size, H, Dv]``             N x H x Dv x itemsize
V scales (per-token-head)   ``[block_size, H]`` float32         N x H x 4
padding                     (unification, ``page_size_padded``) page - real page
==========================  ==================================  ======================

so the real page is ``block_size x H x (D + Dv) x itemsize`` for the float and fp8
per-tensor dtypes and ``block_size x H x (D + 4)`` (K) plus ``block_size x H x (Dv + 4)``
(V) for ``int8_per_token_head`` / ``fp8_per_token_head``: exactly
:attr:`kvcore.specs.AttentionSpec.real_page_size_bytes` (the formula of
:mod:`kvcore.quant`).  Values and their scales are kept in separate planes (not one
``D + 4`` byte record per token-head) so that the value planes keep the plain paged
shape every attention kernel reads, and so that the float32 scales are 4-byte aligned
(the scale planes start at ``N x H x D`` bytes: a multiple of 4 whenever ``N x H x D``
is; :func:`attention_page_layout` checks it).

The ``kv_cache_layout`` option (``LBNHC`` by default) orders the axes: kvcore's kernels
accept ``NHC`` (token-major, the default) and ``HNC`` (head-major, ``LBHNC``/``BLHNC``),
the channel axis always innermost.  ``L`` before ``B`` (one buffer per layer) or after
(block-outermost) is expressed by the tensor's ``offset`` / ``block_stride`` instead.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from kvcore.dtypes import dtype_size, normalize_dtype
from kvcore.errors import KVCoreError

__all__ = [
    "AttentionPageLayout",
    "attention_page_layout",
    "FLOAT_KV_CACHE_DTYPES",
    "FP8_PER_TENSOR_KV_CACHE_DTYPES",
    "PER_TOKEN_HEAD_KV_CACHE_DTYPES",
    "SUPPORTED_KV_CACHE_DTYPES",
    "storage_dtype_name",
]

#: kv_cache_dtype names stored as plain floats (``auto`` = the model dtype)
FLOAT_KV_CACHE_DTYPES = ("auto", "bfloat16", "float16", "float32")
#: fp8 with one per-tensor scale for K and one for V (``stored = x / scale``)
FP8_PER_TENSOR_KV_CACHE_DTYPES = ("fp8", "fp8_e5m2")
#: values plus one float32 scale per token per head (``stored = x / scale``,
#: ``scale = max|x| / qmax`` over the head's channels)
PER_TOKEN_HEAD_KV_CACHE_DTYPES = ("int8_per_token_head", "fp8_per_token_head")
SUPPORTED_KV_CACHE_DTYPES = (FLOAT_KV_CACHE_DTYPES + FP8_PER_TENSOR_KV_CACHE_DTYPES
                             + PER_TOKEN_HEAD_KV_CACHE_DTYPES)

_ALIASES = {"bf16": "bfloat16", "fp16": "float16", "half": "float16", "fp32": "float32",
            "float": "float32", "fp8_e4m3": "fp8"}
_STORAGE = {"fp8": "float8_e4m3fn", "fp8_e5m2": "float8_e5m2",
            "int8_per_token_head": "int8", "fp8_per_token_head": "float8_e4m3fn"}


def canonical_kv_cache_dtype(kv_cache_dtype: str) -> str:
    """The canonical name of a kernel-supported ``kv_cache_dtype``.

    Raises
    ------
    KVCoreError
        the string names no layout these kernels implement (the message lists them).
    """
    name = _ALIASES.get(str(kv_cache_dtype), str(kv_cache_dtype))
    if name not in SUPPORTED_KV_CACHE_DTYPES:
        raise KVCoreError(
            f"kv_cache_dtype {kv_cache_dtype!r} has no kvcore.ops kernel; supported: "
            f"{', '.join(SUPPORTED_KV_CACHE_DTYPES)} (int4_per_token_head and nvfp4 are "
            f"planned but not yet implemented; plugin dtypes come with their plugin's "
            f"kernels)", field="kv_cache_dtype", value=kv_cache_dtype)
    return name


def storage_dtype_name(kv_cache_dtype: str, model_dtype: Any = "bfloat16") -> str:
    """Element dtype (torch spelling) of the stored K/V values of ``kv_cache_dtype``."""
    name = canonical_kv_cache_dtype(kv_cache_dtype)
    if name == "auto":
        return normalize_dtype(model_dtype)
    return _STORAGE.get(name, name)


@dataclass(frozen=True)
class AttentionPageLayout:
    """Where K, V and their scales sit inside one page (all offsets in bytes).

    Attributes
    ----------
    block_size, num_kv_heads, head_size, head_size_v:
        N, H, D and Dv of the page.
    kv_cache_dtype:
        Canonical kernel dtype name (see :data:`SUPPORTED_KV_CACHE_DTYPES`).
    storage_dtype:
        Element dtype of the K/V value planes (torch spelling).
    head_major:
        False for ``NHC`` ([N, H, D] planes), True for ``HNC`` ([H, N, D] planes).
    key_offset, key_scale_offset, value_offset, value_scale_offset:
        Byte offsets of the planes (the scale offsets are None without scales).
    page_size_bytes:
        Bytes of the real page (sum of the planes).
    """

    block_size: int
    num_kv_heads: int
    head_size: int
    head_size_v: int
    kv_cache_dtype: str
    storage_dtype: str
    head_major: bool
    key_offset: int
    key_scale_offset: int | None
    value_offset: int
    value_scale_offset: int | None
    page_size_bytes: int

    @property
    def has_scales(self) -> bool:
        return self.key_scale_offset is not None


def attention_page_layout(spec: Any, kv_cache_layout: str = "LBNHC") -> AttentionPageLayout:
    """The page layout of an :class:`~kvcore.specs.AttentionSpec` layer.

    Parameters
    ----------
    spec:
        An attention spec (``num_kv_heads``, ``head_size``, ``effective_head_size_v``,
        ``dtype``, ``kv_cache_dtype``, ``block_size``).
    kv_cache_layout:
        Five-letter axis order over L, B, H, N, C (docs/DESIGN.md section 5); the order of
        N and H picks ``NHC`` or ``HNC``; C must come last.

    Raises
    ------
    KVCoreError
        unsupported ``kv_cache_dtype``, a layout string that is not a permutation of
        LBHNC with C last, or scale planes that would not be 4-byte aligned.
    """
    layout = str(kv_cache_layout).upper()
    if sorted(layout) != sorted("LBHNC") or layout[-1] != "C":
        raise KVCoreError(
            f"kv_cache_layout {kv_cache_layout!r} must order the letters L, B, H, N, C "
            f"with C (channels) last, e.g. LBNHC (default), LBHNC or BLNHC",
            field="kv_cache_layout", value=kv_cache_layout)
    head_major = layout.index("H") < layout.index("N")
    kv_dtype = canonical_kv_cache_dtype(spec.kv_cache_dtype)
    storage = storage_dtype_name(kv_dtype, spec.dtype)
    itemsize = dtype_size(storage)
    n, h = spec.block_size, spec.num_kv_heads
    d = spec.head_size
    dv = getattr(spec, "effective_head_size_v", None) or spec.head_size
    k_bytes = n * h * d * itemsize
    v_bytes = n * h * dv * itemsize
    if kv_dtype in PER_TOKEN_HEAD_KV_CACHE_DTYPES:
        scale_bytes = n * h * 4
        if k_bytes % 4 or v_bytes % 4:
            raise KVCoreError(
                f"{kv_dtype}: block_size x num_kv_heads x head_size ({n} x {h} x {d}, "
                f"head_size_v {dv}) must be a multiple of 4 so that the float32 scale "
                f"planes are aligned", field="head_size", value=d)
        key_scale_offset: int | None = k_bytes
        value_offset = k_bytes + scale_bytes
        value_scale_offset: int | None = value_offset + v_bytes
        page = value_offset + v_bytes + scale_bytes
    else:
        key_scale_offset = value_scale_offset = None
        value_offset = k_bytes
        page = k_bytes + v_bytes
    return AttentionPageLayout(
        block_size=n, num_kv_heads=h, head_size=d, head_size_v=dv,
        kv_cache_dtype=kv_dtype, storage_dtype=storage, head_major=head_major,
        key_offset=0, key_scale_offset=key_scale_offset, value_offset=value_offset,
        value_scale_offset=value_scale_offset, page_size_bytes=page)
