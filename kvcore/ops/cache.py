"""Paged K/V cache kernels: write new tokens, read requests back, copy blocks.

Each operation has a torch reference (``*_ref``: any device, used as the oracle of the
tests) and a Triton kernel; the public function dispatches (:func:`use_triton`): Triton
on CUDA tensors or under ``TRITON_INTERPRET=1``, the reference otherwise; ``impl=``
forces one.

Cache tensors are the per-layer views that :func:`kvcore.ops.allocate_tensors` makes
(:mod:`kvcore.ops.layout` gives the page layout):

- ``key_cache``: ``[num_blocks, block_size, num_kv_heads, head_size]``, ``value_cache``:
  ``[num_blocks, block_size, num_kv_heads, head_size_v]``, any strides whose channel
  stride is 1 (pages may be padded, interleaved with other layers, or head-major);
- element dtype: the model dtype (``auto``), ``bfloat16`` / ``float16`` / ``float32``,
  ``float8_e4m3fn`` (``fp8``, ``fp8_per_token_head``), ``float8_e5m2`` (``fp8_e5m2``)
  or ``int8`` (``int8_per_token_head``);
- slot ``s`` is token ``s % block_size`` of block ``s // block_size``
  (vLLM's ``slot_mapping``); ``-1`` marks a padding token, which is skipped.

Scales (``k_scale``, ``v_scale``):

- float dtypes: unused;
- ``fp8`` / ``fp8_e5m2`` (per tensor, vLLM convention): a Python float or a one-element
  float32 tensor; ``stored = fp8(x / scale)``, ``x ~= stored x scale``;
- ``int8_per_token_head`` / ``fp8_per_token_head``: the scale planes, float32
  ``[num_blocks, block_size, num_kv_heads]``, written by :func:`reshape_and_cache`
  (``scale = max|x| / qmax`` over the head's channels, qmax 127 for int8 and 448 for
  fp8 e4m3; an all-zero head stores scale 0) and read by :func:`gather_cache`.

Quantization multiplies by the float32 reciprocal of the scale and rounds half to even
(int8 values clamp to [-127, 127]; fp8 saturates at the format's largest finite value).

Example
-------
>>> import torch
>>> from kvcore.ops import reshape_and_cache, gather_cache
>>> kc = torch.zeros(4, 16, 2, 8); vc = torch.zeros(4, 16, 2, 8)
>>> k = torch.randn(3, 2, 8); v = torch.randn(3, 2, 8)
>>> reshape_and_cache(k, v, kc, vc, torch.tensor([16, 17, -1]), "auto")
>>> ko, vo = gather_cache(kc, vc, torch.tensor([[1]]), torch.tensor([2]), "auto")
>>> bool(torch.equal(ko, k[:2]))
True
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from kvcore.errors import KVCoreError
from kvcore.ops._dispatch import use_triton
from kvcore.ops.checks import (
    block_table_and_lens,
    check_copy_pairs,
    check_dtype,
    check_ids,
    check_scales,
    index_tensor,
)
from kvcore.ops.layout import (
    FLOAT_KV_CACHE_DTYPES,
    FP8_PER_TENSOR_KV_CACHE_DTYPES,
    canonical_kv_cache_dtype,
)

__all__ = [
    "reshape_and_cache",
    "reshape_and_cache_ref",
    "gather_cache",
    "gather_cache_ref",
    "copy_blocks",
    "copy_blocks_ref",
]

# storage dtype name -> (mantissa bits, min normal exponent, max finite) for fp8 formats
_FP8_FORMATS = {"float8_e4m3fn": (3, -6, 448.0), "float8_e5m2": (2, -14, 57344.0)}
_QMAX = {"int8_per_token_head": 127.0, "fp8_per_token_head": 448.0}
_MODES = {"float": 0, "fp8_per_tensor": 1, "int8_per_token_head": 2,
          "fp8_per_token_head": 3}


def _torch() -> Any:
    import torch

    return torch


def _family(kv_dtype: str) -> str:
    if kv_dtype in FLOAT_KV_CACHE_DTYPES:
        return "float"
    if kv_dtype in FP8_PER_TENSOR_KV_CACHE_DTYPES:
        return "fp8_per_tensor"
    return kv_dtype


def _dtype_name(t: Any) -> str:
    return str(t.dtype).replace("torch.", "")


def _check_cache_dtype(cache: Any, kv_dtype: str, what: str) -> None:
    name = _dtype_name(cache)
    fam = _family(kv_dtype)
    if fam == "float":
        ok = name in ("bfloat16", "float16", "float32") and (
            kv_dtype == "auto" or name == kv_dtype)
    elif fam == "fp8_per_tensor":
        ok = name == ("float8_e5m2" if kv_dtype == "fp8_e5m2" else "float8_e4m3fn")
    elif kv_dtype == "int8_per_token_head":
        ok = name == "int8"
    else:
        ok = name == "float8_e4m3fn"
    if not ok:
        raise KVCoreError(f"{what} has dtype {name}, which does not store "
                          f"kv_cache_dtype {kv_dtype!r}", field=what, value=name)


def _check_caches(key_cache: Any, value_cache: Any, num_heads: int, head_size: int,
                  head_size_v: int, kv_dtype: str) -> None:
    if key_cache.dim() != 4 or value_cache.dim() != 4:
        raise KVCoreError(
            f"key_cache and value_cache must be [num_blocks, block_size, num_kv_heads, "
            f"head_size]; got {tuple(key_cache.shape)} and {tuple(value_cache.shape)}",
            field="key_cache")
    if tuple(key_cache.shape)[:3] != tuple(value_cache.shape)[:3]:
        raise KVCoreError(f"key_cache {tuple(key_cache.shape)} and value_cache "
                          f"{tuple(value_cache.shape)} differ in blocks/tokens/heads",
                          field="value_cache")
    if key_cache.shape[2] != num_heads or key_cache.shape[3] != head_size \
            or value_cache.shape[3] != head_size_v:
        raise KVCoreError(
            f"caches {tuple(key_cache.shape)}, {tuple(value_cache.shape)} do not hold "
            f"{num_heads} heads of K size {head_size} and V size {head_size_v}",
            field="key_cache")
    _check_cache_dtype(key_cache, kv_dtype, "key_cache")
    _check_cache_dtype(value_cache, kv_dtype, "value_cache")


def _scale_tensors(k_scale: Any, v_scale: Any, kv_dtype: str, key_cache: Any) -> tuple[Any, Any]:
    """Per-tensor scales as one-element float32 tensors on the cache's device; scale
    planes checked for per-token-head dtypes; None for float dtypes."""
    torch = _torch()
    fam = _family(kv_dtype)
    if fam == "float":
        return None, None
    if fam == "fp8_per_tensor":
        check_scales(k_scale=k_scale, v_scale=v_scale)
        out = []
        for s in (k_scale, v_scale):
            t = s if isinstance(s, torch.Tensor) else torch.tensor(float(s))
            out.append(t.to(device=key_cache.device, dtype=torch.float32).reshape(1))
        return out[0], out[1]
    want = tuple(key_cache.shape[:3])
    for name, s in (("k_scale", k_scale), ("v_scale", v_scale)):
        if not isinstance(s, torch.Tensor) or tuple(s.shape) != want \
                or s.dtype != torch.float32:
            raise KVCoreError(
                f"{kv_dtype}: {name} must be the float32 scale plane [num_blocks, "
                f"block_size, num_kv_heads] = {list(want)}; got "
                f"{getattr(s, 'shape', s)!r}", field=name)
    return k_scale, v_scale


# ---- reshape_and_cache ------------------------------------------------------------------

def _quantize_ref(x: Any, cache: Any, kv_dtype: str, scale: Any) -> tuple[Any, Any]:
    """(stored values, per-token-head scales or None) of ``x`` [n, H, D]."""
    torch = _torch()
    fam = _family(kv_dtype)
    if fam == "float":
        return x.to(cache.dtype), None
    xf = x.float()
    if fam == "fp8_per_tensor":
        maxv = _FP8_FORMATS[_dtype_name(cache)][2]
        inv = torch.reciprocal(scale)
        return (xf * inv).clamp(-maxv, maxv).to(cache.dtype), None
    qmax = _QMAX[kv_dtype]
    s = xf.abs().amax(dim=-1) / qmax
    pos = s > 0
    inv = torch.where(pos, torch.reciprocal(torch.where(pos, s, torch.ones_like(s))),
                      torch.zeros_like(s))
    y = xf * inv[..., None]
    if kv_dtype == "int8_per_token_head":
        return y.clamp(-127.0, 127.0).round().to(torch.int8), s
    return y.clamp(-qmax, qmax).to(cache.dtype), s


def _check_write_args(key: Any, value: Any, key_cache: Any, value_cache: Any,
                      slot_mapping: Any, kv_dtype: str) -> Any:
    """All of reshape_and_cache's checks, before any launch; returns ``slot_mapping``
    as a tensor (a list is converted)."""
    for name, t in (("key", key), ("value", value), ("key_cache", key_cache),
                    ("value_cache", value_cache)):
        if not hasattr(t, "dim"):
            raise KVCoreError(f"{name} must be a torch.Tensor; got {type(t).__name__}",
                              field=name, value=type(t).__name__)
    slot_mapping = index_tensor(slot_mapping, "slot_mapping", key_cache.device)
    if key.dim() != 3 or value.dim() != 3 or key.shape[:2] != value.shape[:2]:
        raise KVCoreError(f"key must be [num_tokens, num_kv_heads, head_size] and value "
                          f"[num_tokens, num_kv_heads, head_size_v]; got "
                          f"{tuple(key.shape)} and {tuple(value.shape)}", field="key")
    check_dtype(key, "key")
    check_dtype(value, "value", same_as=(key, "key"))
    if slot_mapping.dim() != 1 or slot_mapping.shape[0] != key.shape[0]:
        raise KVCoreError(f"slot_mapping must be [num_tokens] = [{key.shape[0]}]; got "
                          f"{tuple(slot_mapping.shape)}", field="slot_mapping")
    _check_caches(key_cache, value_cache, key.shape[1], key.shape[2], value.shape[2],
                  kv_dtype)
    num_blocks, block_size = key_cache.shape[0], key_cache.shape[1]
    check_ids([(slot_mapping, "slot_mapping", -1, num_blocks * block_size, "slot id")],
              f" (the cache has {num_blocks} blocks x block_size {block_size})")
    return slot_mapping


def reshape_and_cache_ref(key: Any, value: Any, key_cache: Any, value_cache: Any,
                          slot_mapping: Any, kv_cache_dtype: str = "auto",
                          k_scale: Any = 1.0, v_scale: Any = 1.0) -> None:
    """Torch reference of :func:`reshape_and_cache` (same arguments, any device)."""
    kv_dtype = canonical_kv_cache_dtype(kv_cache_dtype)
    slot_mapping = _check_write_args(key, value, key_cache, value_cache, slot_mapping,
                                     kv_dtype)
    ks, vs = _scale_tensors(k_scale, v_scale, kv_dtype, key_cache)
    idx = (slot_mapping >= 0).nonzero().squeeze(1)
    slots = slot_mapping[idx].long()
    block_size = key_cache.shape[1]
    blk, off = slots // block_size, slots % block_size
    for x, cache, scale in ((key, key_cache, ks), (value, value_cache, vs)):
        q, s = _quantize_ref(x[idx], cache, kv_dtype, scale)
        cache[blk, off] = q
        if s is not None:
            scale[blk, off] = s


def _next_pow2(n: int) -> int:
    return 1 << max(0, int(n) - 1).bit_length()


def _strides3(t: Any | None) -> tuple[int, int, int]:
    return (0, 0, 0) if t is None or t.dim() != 3 else tuple(t.stride())  # type: ignore[return-value]


def _fp8_params(cache: Any) -> tuple[int, int, float]:
    return _FP8_FORMATS.get(_dtype_name(cache), (3, -6, 448.0))


def _require_unit_channel_stride(**tensors: Any) -> None:
    for name, t in tensors.items():
        if t.stride(-1) != 1:
            raise KVCoreError(f"{name} must have channel stride 1 for the Triton kernel; "
                              f"got strides {tuple(t.stride())}", field=name)


def reshape_and_cache(key: Any, value: Any, key_cache: Any, value_cache: Any,
                      slot_mapping: Any, kv_cache_dtype: str = "auto", k_scale: Any = 1.0,
                      v_scale: Any = 1.0, *, impl: str = "auto") -> None:
    """Write the K and V of new tokens into their paged cache slots (in place).

    Parameters
    ----------
    key : torch.Tensor
        ``[num_tokens, num_kv_heads, head_size]``, bfloat16/float16/float32.
    value : torch.Tensor
        ``[num_tokens, num_kv_heads, head_size_v]``, same dtype and device.
    key_cache, value_cache : torch.Tensor
        ``[num_blocks, block_size, num_kv_heads, head_size(_v)]`` views (any strides,
        channel stride 1), dtype as the module docstring lists for ``kv_cache_dtype``.
    slot_mapping : torch.Tensor
        ``[num_tokens]`` int32/int64, the slot of each token (``block_id x block_size
        + offset``), ``-1`` to skip.  Slots must be distinct.
    kv_cache_dtype : str
        ``auto``, ``bfloat16``, ``float16``, ``float32``, ``fp8`` (``fp8_e4m3``),
        ``fp8_e5m2``, ``int8_per_token_head`` or ``fp8_per_token_head``.
    k_scale, v_scale : float or torch.Tensor
        Per-tensor scales (fp8) or the float32 scale planes ``[num_blocks, block_size,
        num_kv_heads]`` (per-token-head dtypes, written here); unused for floats.
    impl : str
        ``auto`` (see :func:`kvcore.ops.use_triton`), ``triton`` or ``ref``.

    Raises
    ------
    KVCoreError
        shapes, dtypes or scales that do not match (the message names the argument).
    kvcore.errors.KernelArgumentError
        (a KVCoreError) checked before any launch, on both paths
        (:mod:`kvcore.ops.checks`): a slot outside ``[-1, num_blocks x block_size)``,
        ``slot_mapping`` not int32/int64 (a list of ints is converted), key / value not
        bfloat16/float16/float32 or of different dtypes, an fp8 scale not finite
        and > 0.
    """
    if not use_triton(key, impl):
        reshape_and_cache_ref(key, value, key_cache, value_cache, slot_mapping,
                              kv_cache_dtype, k_scale, v_scale)
        return
    torch = _torch()
    from kvcore.ops import _triton_cache as tk

    kv_dtype = canonical_kv_cache_dtype(kv_cache_dtype)
    slot_mapping = _check_write_args(key, value, key_cache, value_cache, slot_mapping,
                                     kv_dtype)
    ks, vs = _scale_tensors(k_scale, v_scale, kv_dtype, key_cache)
    key = key if key.stride(-1) == 1 else key.contiguous()
    value = value if value.stride(-1) == 1 else value.contiguous()
    _require_unit_channel_stride(key_cache=key_cache, value_cache=value_cache)
    num_tokens, num_heads, head_size = key.shape
    head_size_v = value.shape[2]
    if num_tokens == 0:
        return
    block_d, block_dv = _next_pow2(head_size), _next_pow2(head_size_v)
    block_h = max(1, min(_next_pow2(num_heads), 4096 // max(block_d, block_dv)))
    mode = _MODES[_family(kv_dtype)]
    mant, min_exp, maxv = _fp8_params(key_cache)
    grid = (num_tokens, -(-num_heads // block_h))
    tk.reshape_and_cache_kernel[grid](
        key, value, key_cache, value_cache,
        ks if ks is not None else key, vs if vs is not None else value,
        slot_mapping,
        key.stride(0), key.stride(1), value.stride(0), value.stride(1),
        key_cache.stride(0), key_cache.stride(1), key_cache.stride(2),
        value_cache.stride(0), value_cache.stride(1), value_cache.stride(2),
        *_strides3(ks), *_strides3(vs),
        num_heads, key_cache.shape[1],
        HEAD_SIZE=head_size, HEAD_SIZE_V=head_size_v, BLOCK_H=block_h, BLOCK_D=block_d,
        BLOCK_DV=block_dv, MODE=mode, QMAX=_QMAX.get(kv_dtype, 1.0), MANT_BITS=mant,
        MIN_EXP=min_exp, MAX_VAL=maxv,
        ROUND_BF16=key_cache.dtype == torch.bfloat16 and key.dtype != torch.bfloat16,
        num_warps=4, enable_fp_fusion=False,
    )


# ---- gather_cache -------------------------------------------------------------------------

def _out_dtype(key_cache: Any, kv_dtype: str, out_dtype: Any) -> Any:
    torch = _torch()
    if out_dtype is not None:
        return out_dtype
    return key_cache.dtype if _family(kv_dtype) == "float" else torch.float32


def _check_read_args(key_cache: Any, value_cache: Any, block_table: Any, seq_lens: Any,
                     kv_dtype: str) -> tuple[Any, Any]:
    """All of gather_cache's checks, before any launch; returns ``(block_table,
    seq_lens)`` as tensors (lists are converted)."""
    for name, t in (("key_cache", key_cache), ("value_cache", value_cache)):
        if not hasattr(t, "dim"):
            raise KVCoreError(f"{name} must be a torch.Tensor; got {type(t).__name__}",
                              field=name, value=type(t).__name__)
    if key_cache.dim() != 4 or value_cache.dim() != 4:
        raise KVCoreError("key_cache and value_cache must be [num_blocks, block_size, "
                          "num_kv_heads, head_size]", field="key_cache")
    _check_caches(key_cache, value_cache, key_cache.shape[2], key_cache.shape[3],
                  value_cache.shape[3], kv_dtype)
    block_table, seq_lens = block_table_and_lens(block_table, seq_lens, key_cache.device,
                                                 key_cache.shape[1], key_cache.shape[0])
    return block_table, seq_lens


def _dequantize_ref(stored: Any, scale: Any, kv_dtype: str, out_dtype: Any) -> Any:
    fam = _family(kv_dtype)
    if fam == "float":
        return stored.to(out_dtype)
    if fam == "fp8_per_tensor":
        return (stored.float() * scale).to(out_dtype)
    return (stored.float() * scale[..., None]).to(out_dtype)


def gather_cache_ref(key_cache: Any, value_cache: Any, block_table: Any, seq_lens: Any,
                     kv_cache_dtype: str = "auto", k_scale: Any = 1.0, v_scale: Any = 1.0,
                     *, out_dtype: Any = None) -> tuple[Any, Any]:
    """Torch reference of :func:`gather_cache` (same arguments, any device)."""
    torch = _torch()
    kv_dtype = canonical_kv_cache_dtype(kv_cache_dtype)
    block_table, seq_lens = _check_read_args(key_cache, value_cache, block_table,
                                             seq_lens, kv_dtype)
    ks, vs = _scale_tensors(k_scale, v_scale, kv_dtype, key_cache)
    dtype = _out_dtype(key_cache, kv_dtype, out_dtype)
    block_size = key_cache.shape[1]
    blks, offs = [], []
    for b, n in enumerate(seq_lens.tolist()):
        pos = torch.arange(n, device=block_table.device)
        blks.append(block_table[b].long()[pos // block_size])
        offs.append(pos % block_size)
    blk = torch.cat(blks) if blks else torch.zeros(0, dtype=torch.long)
    off = torch.cat(offs) if offs else torch.zeros(0, dtype=torch.long)
    blk, off = blk.to(key_cache.device), off.to(key_cache.device)
    valid = blk >= 0  # a negative id (the null block, padding) is never read: zeros
    vb, vo = blk[valid], off[valid]
    out = []
    for cache, scale in ((key_cache, ks), (value_cache, vs)):
        s = scale if scale is None or scale.numel() == 1 else scale[vb, vo]
        res = torch.zeros((blk.shape[0], *cache.shape[2:]), dtype=dtype,
                          device=cache.device)
        res[valid] = _dequantize_ref(cache[vb, vo], s, kv_dtype, dtype)
        out.append(res)
    return out[0], out[1]


def gather_cache(key_cache: Any, value_cache: Any, block_table: Any, seq_lens: Any,
                 kv_cache_dtype: str = "auto", k_scale: Any = 1.0, v_scale: Any = 1.0,
                 *, out_dtype: Any = None, num_tokens: int | None = None,
                 impl: str = "auto") -> tuple[Any, Any]:
    """Read the K and V of a batch of requests back through their block tables.

    Parameters
    ----------
    key_cache, value_cache : torch.Tensor
        ``[num_blocks, block_size, num_kv_heads, head_size(_v)]`` (see
        :func:`reshape_and_cache`).
    block_table : torch.Tensor
        ``[batch, max_blocks_per_req]`` int32/int64: block ids of each request, in
        token order (entries past a request's length are ignored).  A negative id
        (the null block as :func:`kvcore.runtime.kernel_tables.block_tables` maps it)
        is never read: its positions come back as zeros.
    seq_lens : torch.Tensor
        ``[batch]`` int32/int64, tokens of each request to read (from position 0).
    kv_cache_dtype, k_scale, v_scale :
        As written by :func:`reshape_and_cache`.
    out_dtype : torch.dtype, optional
        Dtype of the result; default the cache dtype for float caches, float32 for
        quantized ones (values are dequantized: ``stored x scale``).
    num_tokens : int, optional
        ``sum(seq_lens)`` when the caller knows it (saves a device sync).
    impl : str
        ``auto``, ``triton`` or ``ref``.

    Raises
    ------
    kvcore.errors.KernelArgumentError
        checked before any launch, on both paths: a ``seq_lens`` entry outside
        ``[0, max_blocks_per_req x block_size]``, a block id a request reads outside
        ``[-1, num_blocks)``, index tensors not int32/int64 (lists are converted), an
        fp8 scale not finite and > 0.

    Returns
    -------
    key : torch.Tensor
        ``[sum(seq_lens), num_kv_heads, head_size]``, requests concatenated in batch
        order (request b starts at ``cumsum(seq_lens)[b] - seq_lens[b]``).
    value : torch.Tensor
        ``[sum(seq_lens), num_kv_heads, head_size_v]``.
    """
    if not use_triton(key_cache, impl):
        return gather_cache_ref(key_cache, value_cache, block_table, seq_lens,
                                kv_cache_dtype, k_scale, v_scale, out_dtype=out_dtype)
    torch = _torch()
    from kvcore.ops import _triton_cache as tk

    kv_dtype = canonical_kv_cache_dtype(kv_cache_dtype)
    block_table, seq_lens = _check_read_args(key_cache, value_cache, block_table,
                                             seq_lens, kv_dtype)
    _require_unit_channel_stride(key_cache=key_cache, value_cache=value_cache)
    ks, vs = _scale_tensors(k_scale, v_scale, kv_dtype, key_cache)
    dtype = _out_dtype(key_cache, kv_dtype, out_dtype)
    _, block_size, num_heads, head_size = key_cache.shape
    head_size_v = value_cache.shape[3]
    total = int(seq_lens.sum().item()) if num_tokens is None else int(num_tokens)
    key = torch.empty(total, num_heads, head_size, dtype=dtype, device=key_cache.device)
    value = torch.empty(total, num_heads, head_size_v, dtype=dtype,
                        device=key_cache.device)
    batch, max_blocks = block_table.shape
    if total == 0 or batch == 0 or max_blocks == 0:
        return key, value
    cu = torch.cumsum(seq_lens, 0) - seq_lens
    if block_table.stride(1) != 1:
        block_table = block_table.contiguous()
    block_d, block_dv = _next_pow2(head_size), _next_pow2(head_size_v)
    block_h = max(1, min(_next_pow2(num_heads), 4096 // max(block_d, block_dv)))
    if batch > 65535:
        raise KVCoreError(f"gather_cache: batch {batch} exceeds the 65,535 requests one "
                          f"launch handles (grid axis 1)", field="block_table")
    grid = (max_blocks * block_size, batch, -(-num_heads // block_h))
    tk.gather_cache_kernel[grid](
        key_cache, value_cache, ks if ks is not None else key_cache,
        vs if vs is not None else value_cache, key, value,
        block_table, seq_lens, cu, block_table.stride(0),
        key_cache.stride(0), key_cache.stride(1), key_cache.stride(2),
        value_cache.stride(0), value_cache.stride(1), value_cache.stride(2),
        *_strides3(ks), *_strides3(vs),
        key.stride(0), key.stride(1), value.stride(0), value.stride(1),
        num_heads, block_size,
        HEAD_SIZE=head_size, HEAD_SIZE_V=head_size_v, BLOCK_H=block_h, BLOCK_D=block_d,
        BLOCK_DV=block_dv, MODE=_MODES[_family(kv_dtype)],
        ROUND_BF16=dtype == torch.bfloat16 and key_cache.dtype != torch.bfloat16,
        num_warps=4,
    )
    return key, value


# ---- copy_blocks --------------------------------------------------------------------------

def _block_rows(cache: Any) -> Any:
    """``cache`` as ``[num_blocks, bytes_per_block]`` rows (widest int type that fits),
    sharing memory; each block's elements must fill one dense span."""
    torch = _torch()
    if cache.dim() == 0:
        raise KVCoreError("copy_blocks: a cache must have a leading block axis",
                          field="caches")
    inner = cache[0] if cache.shape[0] else cache.new_empty(cache.shape[1:])
    dims = sorted(range(inner.dim()), key=lambda i: -inner.stride(i))
    if not inner.permute(*dims).is_contiguous():
        raise KVCoreError(
            f"copy_blocks: each block of a cache must be one dense span of memory; got "
            f"shape {tuple(cache.shape)} strides {tuple(cache.stride())}", field="caches")
    n = inner.numel()
    rows = torch.as_strided(cache, (cache.shape[0], n), (cache.stride(0), 1),
                            cache.storage_offset())
    rows = rows.view(torch.uint8)
    isz_bytes = rows.shape[1]
    stride_bytes = rows.stride(0)
    addr = rows.data_ptr()
    for wide, size in ((torch.int64, 8), (torch.int32, 4), (torch.int16, 2)):
        if isz_bytes % size == 0 and stride_bytes % size == 0 and addr % size == 0:
            return rows.view(wide)
    return rows


def _pairs(src_to_dst: Any, device: Any) -> Any:
    """The pairs as int64 ``[n, 2]`` on ``device`` (unchecked; see :func:`_checked`)."""
    torch = _torch()
    pairs = index_tensor(src_to_dst, "src_to_dst", device)
    if pairs.numel() == 0:
        return pairs.reshape(0, 2).to(device=device, dtype=torch.int64)
    if pairs.dim() != 2 or pairs.shape[1] != 2:
        raise KVCoreError(f"src_to_dst must be [num_pairs, 2] (source, destination block "
                          f"ids); got shape {tuple(pairs.shape)}", field="src_to_dst")
    return pairs.to(device=device, dtype=torch.int64)


def _checked(caches: Sequence[Any], src_to_dst: Any) -> list[tuple[Any, Any]]:
    """Every cache's rows and its kept pairs (those without a -1), all checked before
    any copy: ids in ``[-1, num_blocks)``, destinations distinct and not sources."""
    out = []
    seen: dict[tuple[str, int], Any] = {}
    for i, cache in enumerate(caches):
        if not hasattr(cache, "dim"):
            raise KVCoreError(f"copy_blocks: caches[{i}] must be a torch.Tensor; got "
                              f"{type(cache).__name__}", field="caches")
        rows = _block_rows(cache)
        key = (str(cache.device), int(cache.shape[0]))
        if key not in seen:
            pairs = _pairs(src_to_dst, cache.device)
            check_copy_pairs(pairs[:, 0], pairs[:, 1], cache.shape[0],
                             hint=f" (caches[{i}] has {cache.shape[0]} blocks)")
            keep = (pairs >= 0).all(dim=1)
            if pairs.shape[0] and not bool(keep.all()):
                pairs = pairs[keep]
            seen[key] = pairs.contiguous()
        out.append((rows, seen[key]))
    return out


def copy_blocks_ref(caches: Sequence[Any], src_to_dst: Any) -> None:
    """Torch reference of :func:`copy_blocks`."""
    for rows, pairs in _checked(caches, src_to_dst):
        if pairs.shape[0]:
            rows[pairs[:, 1]] = rows[pairs[:, 0]]


def copy_blocks(caches: Sequence[Any], src_to_dst: Any, *, impl: str = "auto") -> None:
    """Copy whole blocks inside each cache: ``cache[dst] = cache[src]`` (in place).

    Used when a request forks (copy-on-write of a partly filled block).

    Parameters
    ----------
    caches : sequence of torch.Tensor
        Tensors with a leading block axis ``[num_blocks, ...]`` (K/V value planes,
        scale planes, or the raw ``uint8 [num_blocks, page_size_bytes]`` page views of
        :func:`kvcore.ops.allocate_tensors`); each block one dense span of memory.
    src_to_dst : torch.Tensor or sequence of pairs
        ``[num_pairs, 2]`` int64 (source block id, destination block id); destinations
        distinct and not also sources; ids in ``[0, num_blocks)``; a pair with a
        -1 (the null block as kernel tables map it, padding) is skipped.
    impl : str
        ``auto``, ``triton`` or ``ref``.

    Raises
    ------
    kvcore.errors.KernelArgumentError
        checked for every cache before any copy, on both paths: an id outside
        ``[-1, num_blocks)``, a repeated destination, a destination that is also a
        source, ``src_to_dst`` not integer.
    """
    checked = _checked(caches, src_to_dst)  # all caches checked before any copy
    for cache, (rows, pairs) in zip(caches, checked):
        if pairs.shape[0] == 0:
            continue
        if not use_triton(cache, impl):
            rows[pairs[:, 1]] = rows[pairs[:, 0]]
            continue
        from kvcore.ops import _triton_cache as tk

        row_len = rows.shape[1]
        block = min(16384 // rows.element_size(), _next_pow2(row_len))  # <= 16 KiB
        grid = (pairs.shape[0], -(-row_len // block))
        tk.copy_blocks_kernel[grid](rows, pairs, rows.stride(0), row_len, BLOCK=block,
                                    num_warps=4)
