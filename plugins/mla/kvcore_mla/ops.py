"""MLA latent-cache kernels: write new tokens' latents into the paged cache, and gather
a request's latents back.  torch and triton are imported lazily (planning never needs
them).

Cache layouts (one tensor per layer, ``kv_cache[num_blocks, block_size, width]``; the
block stride may exceed ``block_size x width`` for an aligned page):

=================  ==============================  ===========================================
kv_cache_dtype     kv_cache dtype, width           one token's entry
=================  ==============================  ===========================================
``auto``,          the cache's float dtype,        ``[kv_c (kv_lora_rank) | k_pe (rope_dim)]``
``bfloat16``, ...  kv_lora_rank + rope_dim (576)
``fp8``            float8_e4m3fn or uint8, 576     the same, each value ``x / scale`` in fp8
                                                   e4m3 (per-tensor ``scale``)
``fp8_ds_mla``     uint8, 656                      bytes 0-511: kv_c in fp8 e4m3, tile t
                                                   (values 128t..128t+127) divided by its
                                                   scale; bytes 512-527: the 4 tile scales
                                                   (float32); bytes 528-655: k_pe (64 bf16)
=================  ==============================  ===========================================

fp8_ds_mla tile scale: ``amax(|tile|) / 448`` rounded up to a power of two (448 is the
largest e4m3 value; a power-of-two scale makes dividing and multiplying exact), so every
quantized value lies in [-448, 448] and the error of a value is at most half an e4m3
step: below 1/16 of the tile's largest magnitude.  Source: the FlashMLA sparse record of
DeepSeek-V3.2 (vLLM ``concat_and_cache_ds_mla`` / ``flashmla_sparse.py``).

Every kernel has a torch reference (``*_ref``, CPU or GPU) and a Triton version
(``*_triton``); the dispatchers use Triton for CUDA tensors or when
``TRITON_INTERPRET=1``, else the reference.  ``slot_mapping`` entries of -1 are padding:
those tokens are skipped and their cache slots left untouched.
"""

from __future__ import annotations

import os
from typing import Any

__all__ = [
    "DS_MLA_RECORD_BYTES",
    "concat_and_cache_mla",
    "concat_and_cache_mla_ref",
    "gather_mla_cache",
    "gather_mla_cache_ref",
    "slots_from_block_table",
    "use_triton",
]

#: kv_lora_rank, tile count, rope dim and byte offsets of the fp8_ds_mla record
DS_MLA_NOPE = 512
DS_MLA_TILE = 128
DS_MLA_ROPE = 64
DS_MLA_SCALE_OFFSET = DS_MLA_NOPE                       # 512
DS_MLA_ROPE_OFFSET = DS_MLA_NOPE + 4 * (DS_MLA_NOPE // DS_MLA_TILE)  # 528
DS_MLA_RECORD_BYTES = DS_MLA_ROPE_OFFSET + 2 * DS_MLA_ROPE            # 656
FP8_MAX = 448.0
_FLOAT_MODES = ("auto", "bfloat16", "bf16", "float16", "fp16", "half", "float32", "fp32",
                "float")
_FP8_MODES = ("fp8", "fp8_e4m3")


def use_triton(*tensors: Any) -> bool:
    """True when the Triton kernels should run: any tensor on CUDA, or
    ``TRITON_INTERPRET=1`` (CPU interpreter)."""
    if os.environ.get("TRITON_INTERPRET", "") == "1":
        return True
    return any(getattr(t, "is_cuda", False) for t in tensors)


def _mode(kv_cache_dtype: str) -> str:
    name = str(kv_cache_dtype).lower()
    if name in _FLOAT_MODES:
        return "float"
    if name in _FP8_MODES:
        return "fp8"
    if name == "fp8_ds_mla":
        return "fp8_ds_mla"
    from kvcore.errors import UnknownKVCacheDtypeError

    raise UnknownKVCacheDtypeError(
        f"MLA kernels support kv_cache_dtype auto, bfloat16, float16, float32, fp8 and "
        f"fp8_ds_mla, got {kv_cache_dtype!r}", kv_cache_dtype=kv_cache_dtype)


def _err(message: str, field: str, value: Any = None) -> Any:
    from kvcore.errors import KernelArgumentError

    return KernelArgumentError(message, field=field, value=value)


def _check_write(kv_c: Any, k_pe: Any, kv_cache: Any, slot_mapping: Any, mode: str,
                 scale: Any = None) -> Any:
    """All checks of a latent write, before any launch (kvcore.ops.checks); returns
    ``slot_mapping`` as a tensor (a list is converted)."""
    from kvcore.ops.checks import check_dtype, check_ids, check_scales, index_tensor

    for name, t in (("kv_c", kv_c), ("k_pe", k_pe), ("kv_cache", kv_cache)):
        if not hasattr(t, "dim"):
            raise _err(f"{name} must be a torch.Tensor; got {type(t).__name__}", name,
                       type(t).__name__)
    slot_mapping = index_tensor(slot_mapping, "slot_mapping", kv_cache.device)
    if kv_c.dim() != 2 or k_pe.dim() != 2 or kv_c.shape[0] != k_pe.shape[0]:
        raise _err(f"kv_c must be [T, kv_lora_rank] and k_pe [T, rope_dim] with the "
                   f"same T; got {tuple(kv_c.shape)} and {tuple(k_pe.shape)}", "k_pe",
                   tuple(k_pe.shape))
    check_dtype(kv_c, "kv_c")
    check_dtype(k_pe, "k_pe")
    if slot_mapping.dim() != 1 or slot_mapping.shape[0] != kv_c.shape[0]:
        raise _err(f"slot_mapping must be [T] with T = {kv_c.shape[0]}, got "
                   f"{tuple(slot_mapping.shape)}", "slot_mapping", tuple(slot_mapping.shape))
    _check_cache(kv_cache, mode, kv_c.shape[1], k_pe.shape[1])
    if mode == "fp8" and scale is not None:
        check_scales(scale=scale)
    nb, bs = kv_cache.shape[0], kv_cache.shape[1]
    check_ids([(slot_mapping, "slot_mapping", -1, nb * bs, "slot id")],
              f" (kv_cache has {nb} blocks x block_size {bs})")
    return slot_mapping


def _check_read(kv_cache: Any, block_table: Any, seq_lens: Any, mode: str,
                scale: Any) -> tuple[Any, Any]:
    """block_table / seq_lens as int tensors, checked against the cache (kvcore.ops.checks)."""
    from kvcore.ops.checks import block_table_and_lens, check_scales, index_tensor

    block_table = index_tensor(block_table, "block_table", kv_cache.device)
    seq_lens = index_tensor(seq_lens, "seq_lens", kv_cache.device)
    if mode == "fp8" and scale is not None:
        check_scales(scale=scale)
    return block_table_and_lens(block_table, seq_lens, kv_cache.device, kv_cache.shape[1],
                                kv_cache.shape[0])


def _check_cache(kv_cache: Any, mode: str, lora: int, rope: int) -> None:
    import torch

    if kv_cache.dim() != 3:
        raise _err(f"kv_cache must be [num_blocks, block_size, width], got "
                         f"{tuple(kv_cache.shape)}", "kv_cache", tuple(kv_cache.shape))
    if kv_cache.stride(2) != 1 or kv_cache.stride(1) != kv_cache.shape[2]:
        raise _err("kv_cache entries must be contiguous within a block", "kv_cache",
                   tuple(kv_cache.stride()))
    if mode == "fp8_ds_mla":
        if (lora, rope) != (DS_MLA_NOPE, DS_MLA_ROPE):
            raise _err(f"fp8_ds_mla holds kv_lora_rank 512 + rope 64, got "
                             f"{lora} + {rope}", "kv_c", lora)
        if kv_cache.dtype != torch.uint8 or kv_cache.shape[2] != DS_MLA_RECORD_BYTES:
            raise _err(f"fp8_ds_mla needs a uint8 cache [num_blocks, block_size, "
                             f"656], got {kv_cache.dtype} {tuple(kv_cache.shape)}", "kv_cache",
                       str(kv_cache.dtype))
        if kv_cache.stride(0) % 4 or kv_cache.storage_offset() % 4:
            raise _err("fp8_ds_mla blocks must start at multiples of 4 bytes", "kv_cache")
    else:
        if kv_cache.shape[2] != lora + rope:
            raise _err(f"kv_cache width must be kv_lora_rank + rope_dim = "
                             f"{lora + rope}, got {kv_cache.shape[2]}", "kv_cache", kv_cache.shape[2])
        if mode == "fp8" and kv_cache.dtype not in (torch.uint8, torch.float8_e4m3fn):
            raise _err(f"fp8 needs a float8_e4m3fn or uint8 cache, got "
                             f"{kv_cache.dtype}", "kv_cache", str(kv_cache.dtype))
        if mode == "float" and not kv_cache.dtype.is_floating_point:
            raise _err(f"a float kv_cache_dtype needs a float cache, got "
                             f"{kv_cache.dtype}", "kv_cache", str(kv_cache.dtype))


def _scale_value(scale: Any) -> float:
    if scale is None:
        return 1.0
    if hasattr(scale, "item"):
        return float(scale.reshape(-1)[0].item())
    return float(scale)


# ---- torch reference ------------------------------------------------------------------

def _pow2_ceil_ref(t: Any) -> Any:
    """Smallest power of two >= t (t float32, positive normal), exactly."""
    import torch

    bits = t.view(torch.int32)
    exp = (bits >> 23) & 0xFF
    exp = torch.where((bits & 0x7FFFFF) == 0, exp, exp + 1)
    return (exp << 23).view(torch.float32)


def ds_mla_quantize_ref(kv_c: Any, k_pe: Any) -> Any:
    """fp8_ds_mla records of T tokens: uint8 [T, 656] (see the module docstring)."""
    import torch

    t = kv_c.shape[0]
    x = kv_c.float().reshape(t, DS_MLA_NOPE // DS_MLA_TILE, DS_MLA_TILE)
    amax = x.abs().amax(dim=-1).clamp_min(1e-30)
    scale = _pow2_ceil_ref(amax / FP8_MAX)                       # [T, 4]
    q = (x * (1.0 / scale)[..., None]).clamp(-FP8_MAX, FP8_MAX)  # exact: power-of-2 scale
    out = torch.empty(t, DS_MLA_RECORD_BYTES, dtype=torch.uint8, device=kv_c.device)
    out[:, :DS_MLA_NOPE] = q.reshape(t, DS_MLA_NOPE).to(torch.float8_e4m3fn).view(
        torch.uint8)
    out[:, DS_MLA_SCALE_OFFSET:DS_MLA_ROPE_OFFSET] = scale.contiguous().view(torch.uint8)
    out[:, DS_MLA_ROPE_OFFSET:] = k_pe.to(torch.bfloat16).contiguous().view(torch.uint8)
    return out


def ds_mla_dequantize_ref(records: Any, out_dtype: Any = None) -> Any:
    """Inverse of :func:`ds_mla_quantize_ref`: uint8 [T, 656] -> [T, 576]."""
    import torch

    out_dtype = out_dtype or torch.bfloat16
    t = records.shape[0]
    records = records.contiguous()
    q = records[:, :DS_MLA_NOPE].view(torch.float8_e4m3fn).float()
    scale = records[:, DS_MLA_SCALE_OFFSET:DS_MLA_ROPE_OFFSET].contiguous().view(
        torch.float32)
    nope = (q.reshape(t, -1, DS_MLA_TILE) * scale[..., None]).reshape(t, DS_MLA_NOPE)
    rope = records[:, DS_MLA_ROPE_OFFSET:].contiguous().view(torch.bfloat16)
    return torch.cat([nope.to(out_dtype), rope.to(out_dtype)], dim=-1)


def concat_and_cache_mla_ref(kv_c: Any, k_pe: Any, kv_cache: Any, slot_mapping: Any,
                             kv_cache_dtype: str = "auto", scale: Any = None) -> None:
    """Torch reference of :func:`concat_and_cache_mla` (writes ``kv_cache`` in place)."""
    import torch

    mode = _mode(kv_cache_dtype)
    slot_mapping = _check_write(kv_c, k_pe, kv_cache, slot_mapping, mode, scale)
    keep = slot_mapping >= 0
    if not bool(keep.any()):
        return
    slots = slot_mapping[keep].long()
    bs = kv_cache.shape[1]
    blk, off = slots // bs, slots % bs
    kv_c, k_pe = kv_c[keep], k_pe[keep]
    if mode == "fp8_ds_mla":
        kv_cache[blk, off] = ds_mla_quantize_ref(kv_c, k_pe)
        return
    x = torch.cat([kv_c, k_pe], dim=-1)
    if mode == "float":
        kv_cache[blk, off] = x.to(kv_cache.dtype)
        return
    s = torch.tensor(_scale_value(scale), dtype=torch.float32, device=x.device)
    q = (x.float() / s).clamp(-FP8_MAX, FP8_MAX).to(torch.float8_e4m3fn)
    kv_cache[blk, off] = q if kv_cache.dtype == torch.float8_e4m3fn else q.view(torch.uint8)


def slots_from_block_table(block_table: Any, seq_lens: Any, block_size: int,
                           num_tokens: int | None = None) -> Any:
    """Slot of every token of every request, requests concatenated: int64
    [sum(seq_lens)], token p of request r -> ``block_table[r, p // block_size] x
    block_size + p % block_size``; -1 where the block id is negative (the null block as
    :func:`kvcore.runtime.kernel_tables.block_tables` maps it, padding).

    block_table: int [num_reqs, max_blocks_per_req]; seq_lens: int [num_reqs];
    num_tokens: ``sum(seq_lens)`` when the caller knows it (saves a device sync).
    """
    import torch

    seq_lens = seq_lens.to(device=block_table.device, dtype=torch.long)
    if num_tokens is None:
        num_tokens = int(seq_lens.sum())
    reqs = torch.repeat_interleave(torch.arange(len(seq_lens), device=block_table.device),
                                   seq_lens, output_size=num_tokens)
    starts = torch.cumsum(seq_lens, 0) - seq_lens
    pos = torch.arange(num_tokens, device=block_table.device) - starts[reqs]
    blocks = block_table.long()[reqs, pos // block_size]
    return torch.where(blocks >= 0, blocks * block_size + pos % block_size,
                       torch.full_like(blocks, -1))


def gather_mla_cache_ref(kv_cache: Any, block_table: Any, seq_lens: Any,
                         kv_cache_dtype: str = "auto", scale: Any = None,
                         out_dtype: Any = None, lora_rank: int = 512,
                         num_tokens: int | None = None) -> Any:
    """Torch reference of :func:`gather_mla_cache`."""
    import torch

    mode = _mode(kv_cache_dtype)
    out_dtype = out_dtype or torch.bfloat16
    bs = kv_cache.shape[1]
    width = DS_MLA_NOPE + DS_MLA_ROPE if mode == "fp8_ds_mla" else kv_cache.shape[2]
    _check_cache(kv_cache, mode, lora_rank, width - lora_rank)
    block_table, seq_lens = _check_read(kv_cache, block_table, seq_lens, mode, scale)
    slots = slots_from_block_table(block_table, seq_lens, bs, num_tokens)
    valid = slots >= 0  # a negative slot (null block, padding) is never read: zeros
    entries = kv_cache[slots[valid] // bs, slots[valid] % bs]
    if mode == "fp8_ds_mla":
        vals = ds_mla_dequantize_ref(entries, out_dtype)
    elif mode == "float":
        vals = entries.to(out_dtype)
    else:
        q = entries.view(torch.float8_e4m3fn) if entries.dtype == torch.uint8 else entries
        s = torch.tensor(_scale_value(scale), dtype=torch.float32, device=entries.device)
        vals = (q.float() * s).to(out_dtype)
    out = torch.zeros((slots.shape[0], *vals.shape[1:]), dtype=out_dtype,
                      device=vals.device)
    out[valid] = vals
    return out


# ---- dispatchers ------------------------------------------------------------------------

def concat_and_cache_mla(kv_c: Any, k_pe: Any, kv_cache: Any, slot_mapping: Any,
                         kv_cache_dtype: str = "auto", scale: Any = None, *,
                         backend: str | None = None) -> None:
    """Write the latents of T new tokens into a paged MLA cache (in place).

    Parameters
    ----------
    kv_c:
        [T, kv_lora_rank] compressed KV (bf16/fp16/fp32).
    k_pe:
        [T, rope_dim] RoPE key part.
    kv_cache:
        [num_blocks, block_size, width]: see the module docstring for the dtype and width
        of each ``kv_cache_dtype``.
    slot_mapping:
        int [T]: ``block_id x block_size + offset`` of each token; -1 = skip.
    kv_cache_dtype:
        ``auto`` (or an explicit float dtype), ``fp8`` or ``fp8_ds_mla``.
    scale:
        Per-tensor scale for ``fp8`` (a float or a 1-element tensor); unused otherwise
        (fp8_ds_mla computes a scale per 128-value tile).
    backend:
        ``"ref"`` or ``"triton"`` to force one; default: :func:`use_triton`.

    Raises kvcore.errors.KernelArgumentError (a KVCoreError, a ValueError) before any
    launch, on both backends, for mismatched shapes, a cache of the wrong dtype/width,
    a slot outside ``[-1, num_blocks x block_size)``, a non-integer ``slot_mapping``
    (a list of ints is converted), kv_c / k_pe not bf16/fp16/fp32, an fp8 scale not
    finite and > 0; UnknownKVCacheDtypeError for an unsupported kv_cache_dtype.
    """
    chosen = backend or ("triton" if use_triton(kv_c, kv_cache) else "ref")
    if chosen == "ref":
        return concat_and_cache_mla_ref(kv_c, k_pe, kv_cache, slot_mapping,
                                        kv_cache_dtype, scale)
    from kvcore_mla import _triton_ops

    mode = _mode(kv_cache_dtype)
    slot_mapping = _check_write(kv_c, k_pe, kv_cache, slot_mapping, mode, scale)
    return _triton_ops.concat_and_cache_mla_triton(
        kv_c, k_pe, kv_cache, slot_mapping, mode, _scale_value(scale))


def gather_mla_cache(kv_cache: Any, block_table: Any, seq_lens: Any,
                     kv_cache_dtype: str = "auto", scale: Any = None, out_dtype: Any = None,
                     lora_rank: int = 512, num_tokens: int | None = None, *,
                     backend: str | None = None) -> Any:
    """Read back the latents of a batch of requests through their block table.

    Parameters
    ----------
    kv_cache:
        As in :func:`concat_and_cache_mla`.
    block_table:
        int [num_reqs, max_blocks_per_req]: block ids of each request; a negative id
        (the null block as :func:`kvcore.runtime.kernel_tables.block_tables` maps it)
        is never read and gives zeros.
    seq_lens:
        int [num_reqs]: tokens of each request to read.
    kv_cache_dtype, scale:
        As in :func:`concat_and_cache_mla`.
    out_dtype:
        Output dtype (default bfloat16).
    lora_rank:
        kv_lora_rank (512), to check the cache width.
    num_tokens:
        ``sum(seq_lens)`` if known (avoids a device-to-host sync).

    Raises kvcore.errors.KernelArgumentError before any launch, on both backends: a
    ``seq_lens`` entry outside ``[0, max_blocks_per_req x block_size]``, a block id a
    request reads outside ``[-1, num_blocks)``, non-integer index tensors.

    Returns
    -------
    [sum(seq_lens), kv_lora_rank + rope_dim] (576) in ``out_dtype``, requests
    concatenated in order: ``[kv_c | k_pe]`` per token, dequantized.
    """
    chosen = backend or ("triton" if use_triton(kv_cache) else "ref")
    if chosen == "ref":
        return gather_mla_cache_ref(kv_cache, block_table, seq_lens, kv_cache_dtype, scale,
                                    out_dtype, lora_rank, num_tokens)
    import torch

    from kvcore_mla import _triton_ops

    mode = _mode(kv_cache_dtype)
    width = DS_MLA_NOPE + DS_MLA_ROPE if mode == "fp8_ds_mla" else kv_cache.shape[2]
    _check_cache(kv_cache, mode, lora_rank, width - lora_rank)
    block_table, seq_lens = _check_read(kv_cache, block_table, seq_lens, mode, scale)
    slots = slots_from_block_table(block_table, seq_lens, kv_cache.shape[1], num_tokens)
    return _triton_ops.gather_mla_cache_triton(
        kv_cache, slots, mode, _scale_value(scale), out_dtype or torch.bfloat16, lora_rank,
        width)
