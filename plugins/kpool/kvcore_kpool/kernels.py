"""k-pool tail kernels: a torch reference and a Triton version of each.

``kpool_tail_write``
    Writes the raw indexer key and gate scores of each new token into its request's
    ring block, at slot ``pos % ring_size`` (:class:`kvcore_kpool.spec.KPoolTailSpec`).
``kpool_compress``
    When a pool of ``kpool`` tokens is complete, reads its keys and gates back from
    the ring and writes one compressed key at the pool's slot of the pooled cache:

    1. ``w[t, d] = softmax_t(gate[t, d])``: a softmax over the pool's ``kpool`` tokens,
       separately for each channel ``d`` (gate scores have the key's shape);
    2. ``pooled[d] = sum_t w[t, d] * key[t, d]``;
    3. ``y = H_128 @ pooled / sqrt(128)``: the normalized (orthonormal) 128-point
       Walsh-Hadamard transform, Sylvester order (``H_1 = [1]``, ``H_2n = [[H, H], [H,
       -H]]``), applied to each consecutive 128 channels;
    4. ``scale = 2 ** ceil(log2(amax(|y|) / 448))`` (448 = the largest float8 e4m3fn
       value; a power of two so that dequantization is exact; 1 when ``y`` is all
       zeros), ``q = float8_e4m3fn(y / scale)`` (round to nearest even);
    5. ``q`` and ``scale`` are stored at the pool's slot (one scale per vector, i.e.
       per pool per head).

    The pooling (gate softmax and weighted sum) is that of GLM5-Next's k-pool indexer
    ("pool = softmax(gate)-weighted sum of k over kpool tokens"); the Hadamard rotation
    and power-of-two fp8 scale are the DSA indexer's key quantization (DeepSeek-V3.2).

Every tensor's shape is in its function's docstring; ``-1`` entries in an index
tensor are padding and are skipped.  The dispatchers run Triton on CUDA tensors or
under ``TRITON_INTERPRET=1``, the reference otherwise.  Importing this module imports
torch; Triton is imported on first use.
"""

from __future__ import annotations

import math
import os
from functools import lru_cache
from typing import Any

import torch

from kvcore.errors import KernelArgumentError
from kvcore.ops.checks import check_ids, index_tensor

__all__ = [
    "FP8_E4M3_MAX",
    "HADAMARD_SIZE",
    "hadamard_matrix",
    "pow2_scale",
    "kpool_pool_slot",
    "kpool_tail_write",
    "kpool_tail_write_ref",
    "kpool_tail_write_triton",
    "kpool_compress",
    "kpool_compress_ref",
    "kpool_compress_triton",
]

FP8_E4M3_MAX = 448.0
HADAMARD_SIZE = 128


@lru_cache(maxsize=8)
def _hadamard_cpu(n: int) -> torch.Tensor:
    if n < 1 or n & (n - 1):
        raise ValueError(f"a Hadamard size must be a power of two, got {n}")
    h = torch.ones(1, 1, dtype=torch.float32)
    while h.shape[0] < n:
        h = torch.cat([torch.cat([h, h], 1), torch.cat([h, -h], 1)], 0)
    return h / math.sqrt(n)


def hadamard_matrix(n: int = HADAMARD_SIZE, device: torch.device | str = "cpu"
                    ) -> torch.Tensor:
    """The normalized Sylvester Hadamard matrix ``H_n / sqrt(n)``, float32 ``[n, n]``
    (symmetric and orthonormal: ``H @ H = I``)."""
    return _hadamard_cpu(n).to(device)


def pow2_scale(amax: torch.Tensor) -> torch.Tensor:
    """``2 ** ceil(log2(amax / 448))`` computed exactly from the float32 bits (1 where
    ``amax`` is 0); float32, the shape of ``amax``."""
    x = (amax.float() / FP8_E4M3_MAX).contiguous()
    bits = x.view(torch.int32)
    exp = (bits >> 23) & 0xFF
    mant = bits & 0x7FFFFF
    e = exp - 127 + (mant != 0).to(torch.int32)
    e = torch.clamp(e, min=-126)
    scale = ((e + 127) << 23).view(torch.float32)
    return torch.where(amax > 0, scale, torch.ones_like(scale))


def kpool_pool_slot(block_table: torch.Tensor, pool_start: int, block_size: int,
                    kpool: int) -> int:
    """The flat slot of the pool starting at ``pool_start`` in a pooled cache of
    ``block_size // kpool`` entries per block: ``block_table[pool_start // block_size] x
    (block_size // kpool) + (pool_start % block_size) // kpool``; -1 (skipped by
    :func:`kpool_compress`) when that block id is negative (the null block as
    :func:`kvcore.runtime.kernel_tables.block_tables` maps it)."""
    if block_size % kpool or pool_start % kpool:
        raise ValueError(f"block_size {block_size} and pool_start {pool_start} must be "
                         f"multiples of kpool {kpool}")
    per_block = block_size // kpool
    bid = int(block_table[pool_start // block_size])
    if bid < 0:
        return -1
    return bid * per_block + (pool_start % block_size) // kpool


def _use_triton(t: torch.Tensor) -> bool:
    return t.is_cuda or os.environ.get("TRITON_INTERPRET") == "1"


#: the largest position the checks accept (positions index nothing by themselves: they
#: are taken modulo the ring size, but a negative one would make the Triton kernel's
#: C-style remainder negative)
_MAX_POSITION = 2 ** 62


def _err(message: str, field: str, value: object = None) -> KernelArgumentError:
    return KernelArgumentError(message, field=field, value=value)


def _check_ring(key_ring: torch.Tensor, gate_ring: torch.Tensor) -> None:
    for name, t in (("key_ring", key_ring), ("gate_ring", gate_ring)):
        if not isinstance(t, torch.Tensor):
            raise _err(f"{name} must be a torch.Tensor; got {type(t).__name__}", name)
    if key_ring.dim() != 4 or key_ring.shape != gate_ring.shape:
        raise _err(f"key_ring and gate_ring must both be [num_blocks, ring_size, "
                   f"num_heads, head_size], got {tuple(key_ring.shape)} and "
                   f"{tuple(gate_ring.shape)}", "gate_ring", tuple(gate_ring.shape))


def _check_tail_write(keys: torch.Tensor, gates: torch.Tensor, positions: Any,
                      ring_block_ids: Any, key_ring: torch.Tensor,
                      gate_ring: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """All checks of a tail write, on the host before any launch (kvcore.ops.checks):
    ring block ids in ``[-1, num_blocks)``, positions >= 0, shapes; returns
    ``(positions, ring_block_ids)`` as int tensors (lists are converted)."""
    _check_ring(key_ring, gate_ring)
    for name, t in (("keys", keys), ("gates", gates)):
        if not isinstance(t, torch.Tensor) or not t.is_floating_point():
            raise _err(f"{name} must be a float tensor; got "
                       f"{getattr(t, 'dtype', type(t).__name__)}", name)
    want = tuple(key_ring.shape[2:])
    if keys.dim() != 3 or keys.shape != gates.shape or tuple(keys.shape[1:]) != want:
        raise _err(f"keys and gates must both be [num_tokens, {want[0]}, {want[1]}] (the "
                   f"ring's heads and head_size), got {tuple(keys.shape)} and "
                   f"{tuple(gates.shape)}", "keys", tuple(keys.shape))
    positions = index_tensor(positions, "positions", keys.device)
    ring_block_ids = index_tensor(ring_block_ids, "ring_block_ids", keys.device)
    n = keys.shape[0]
    for name, t in (("positions", positions), ("ring_block_ids", ring_block_ids)):
        if tuple(t.shape) != (n,):
            raise _err(f"{name} must be [num_tokens] = [{n}], got {tuple(t.shape)}", name,
                       tuple(t.shape))
    nb = key_ring.shape[0]
    check_ids([(ring_block_ids, "ring_block_ids", -1, nb, "block id"),
               (positions, "positions", 0, _MAX_POSITION, "position")],
              f" (the ring has {nb} blocks)")
    return positions, ring_block_ids


# ---- tail write ------------------------------------------------------------------------
def kpool_tail_write_ref(keys: torch.Tensor, gates: torch.Tensor, positions: torch.Tensor,
                         ring_block_ids: torch.Tensor, key_ring: torch.Tensor,
                         gate_ring: torch.Tensor) -> None:
    """Torch reference of :func:`kpool_tail_write` (in place)."""
    positions, ring_block_ids = _check_tail_write(keys, gates, positions, ring_block_ids,
                                                  key_ring, gate_ring)
    ring = key_ring.shape[1]
    keep = ring_block_ids >= 0
    blocks = ring_block_ids[keep].long()
    slots = positions[keep].long() % ring
    key_ring[blocks, slots] = keys[keep].to(key_ring.dtype)
    gate_ring[blocks, slots] = gates[keep].to(gate_ring.dtype)


def kpool_tail_write_triton(keys: torch.Tensor, gates: torch.Tensor,
                            positions: torch.Tensor, ring_block_ids: torch.Tensor,
                            key_ring: torch.Tensor, gate_ring: torch.Tensor) -> None:
    """Triton version of :func:`kpool_tail_write` (one program per token; rings
    contiguous)."""
    positions, ring_block_ids = _check_tail_write(keys, gates, positions, ring_block_ids,
                                                  key_ring, gate_ring)
    num_tokens, num_heads, head_size = keys.shape
    if num_tokens == 0:
        return
    if not (key_ring.is_contiguous() and gate_ring.is_contiguous()):
        raise _err("key_ring and gate_ring must be contiguous", "key_ring")
    from kvcore_kpool._triton_kernels import _tail_write, next_pow2

    # cast on the torch side (a no-op when the dtypes agree): Triton's interpreter
    # rounds float32 -> bfloat16 casts without carrying into the exponent
    keys = keys.to(key_ring.dtype).contiguous()
    gates = gates.to(gate_ring.dtype).contiguous()
    _tail_write[(num_tokens,)](
        keys, gates, positions.to(torch.int64).contiguous(),
        ring_block_ids.to(torch.int64).contiguous(), key_ring, gate_ring,
        RING=key_ring.shape[1], HD=num_heads * head_size,
        HD_P=next_pow2(num_heads * head_size))


def kpool_tail_write(keys: torch.Tensor, gates: torch.Tensor, positions: torch.Tensor,
                     ring_block_ids: torch.Tensor, key_ring: torch.Tensor,
                     gate_ring: torch.Tensor) -> None:
    """Write each new token's raw key and gate scores into its request's ring block.

    Parameters
    ----------
    keys, gates: ``[num_tokens, num_heads, head_size]`` (any float dtype; cast to the
        ring's dtype).
    positions: int ``[num_tokens]``: absolute position of each token in its request.
    ring_block_ids: int ``[num_tokens]``: the ring block of each token's request (the
        request's only ``kpool_tail`` block), -1 for padding tokens (skipped).
    key_ring, gate_ring: ``[num_blocks, ring_size, num_heads, head_size]``, written in
        place at ``[ring_block_ids[t], positions[t] % ring_size]``.

    Raises kvcore.errors.KernelArgumentError (a KVCoreError, a ValueError) before any
    launch, on both paths: a ring block id outside ``[-1, num_blocks)``, a negative
    position, index tensors not int32/int64 (lists are converted), shapes that do not
    match the ring.
    """
    if _use_triton(keys):
        kpool_tail_write_triton(keys, gates, positions, ring_block_ids, key_ring, gate_ring)
    else:
        kpool_tail_write_ref(keys, gates, positions, ring_block_ids, key_ring, gate_ring)


# ---- pool compression ----------------------------------------------------------------
def _check_compress(key_ring: torch.Tensor, gate_ring: torch.Tensor,
                    out_cache: torch.Tensor, out_scale: torch.Tensor, kpool: int,
                    ring_block_ids: object = None, pool_starts: object = None,
                    out_slots: object = None) -> tuple[torch.Tensor, ...]:
    """All checks of a compression, on the host before any launch (kvcore.ops.checks):
    shapes and dtypes, ring block ids in ``[-1, num_blocks)``, out slots in
    ``[-1, num_slots)``, pool starts >= 0; returns the three index tensors (lists are
    converted)."""
    _check_ring(key_ring, gate_ring)
    ring, num_heads, head_size = key_ring.shape[1:]
    if head_size % HADAMARD_SIZE:
        raise _err(f"head_size {head_size} must be a multiple of the "
                   f"{HADAMARD_SIZE}-point Hadamard transform", "key_ring", head_size)
    if kpool < 1 or ring % kpool:
        raise _err(f"kpool {kpool} must divide the ring size {ring}", "kpool", kpool)
    if out_cache.dim() != 3 or out_cache.shape[1:] != (num_heads, head_size):
        raise _err(f"out_cache must be [num_slots, {num_heads}, {head_size}], got "
                   f"{tuple(out_cache.shape)}", "out_cache", tuple(out_cache.shape))
    if out_cache.dtype != torch.float8_e4m3fn:
        raise _err(f"out_cache must be float8_e4m3fn, got {out_cache.dtype}", "out_cache",
                   str(out_cache.dtype))
    if out_scale.shape != out_cache.shape[:2] or out_scale.dtype != torch.float32:
        raise _err(f"out_scale must be float32 [num_slots, {num_heads}], got "
                   f"{out_scale.dtype} {tuple(out_scale.shape)}", "out_scale",
                   tuple(out_scale.shape))
    dev = key_ring.device
    ids = index_tensor(ring_block_ids, "ring_block_ids", dev)
    starts = index_tensor(pool_starts, "pool_starts", dev)
    slots = index_tensor(out_slots, "out_slots", dev)
    n = ids.shape[0] if ids.dim() == 1 else -1
    for name, t in (("ring_block_ids", ids), ("pool_starts", starts),
                    ("out_slots", slots)):
        if t.dim() != 1 or t.shape[0] != n:
            raise _err(f"ring_block_ids, pool_starts and out_slots must all be "
                       f"[num_pools]; {name} is {tuple(t.shape)}", name, tuple(t.shape))
    check_ids([(ids, "ring_block_ids", -1, key_ring.shape[0], "block id"),
               (slots, "out_slots", -1, out_cache.shape[0], "slot"),
               (starts, "pool_starts", 0, _MAX_POSITION, "position")],
              f" (the ring has {key_ring.shape[0]} blocks, out_cache "
              f"{out_cache.shape[0]} slots)")
    return ids, starts, slots


def kpool_compress_ref(key_ring: torch.Tensor, gate_ring: torch.Tensor,
                       ring_block_ids: torch.Tensor, pool_starts: torch.Tensor,
                       out_slots: torch.Tensor, out_cache: torch.Tensor,
                       out_scale: torch.Tensor, kpool: int) -> None:
    """Torch reference of :func:`kpool_compress` (in place; float32 math)."""
    ring_block_ids, pool_starts, out_slots = _check_compress(
        key_ring, gate_ring, out_cache, out_scale, kpool, ring_block_ids, pool_starts,
        out_slots)
    ring, num_heads, head_size = key_ring.shape[1:]
    h = hadamard_matrix(HADAMARD_SIZE, key_ring.device)
    for p in range(ring_block_ids.shape[0]):
        blk, slot = int(ring_block_ids[p]), int(out_slots[p])
        if blk < 0 or slot < 0:
            continue
        start = int(pool_starts[p])
        ring_slots = (torch.arange(kpool, device=key_ring.device) + start) % ring
        k = key_ring[blk, ring_slots].float()                   # [kpool, H, D]
        g = gate_ring[blk, ring_slots].float()
        pooled = (torch.softmax(g, dim=0) * k).sum(0)           # [H, D]
        y = (pooled.view(num_heads, -1, HADAMARD_SIZE) @ h).view(num_heads, head_size)
        scale = pow2_scale(y.abs().amax(dim=-1))                # [H]
        out_cache[slot] = (y / scale[:, None]).to(torch.float8_e4m3fn)
        out_scale[slot] = scale


def kpool_compress_triton(key_ring: torch.Tensor, gate_ring: torch.Tensor,
                          ring_block_ids: torch.Tensor, pool_starts: torch.Tensor,
                          out_slots: torch.Tensor, out_cache: torch.Tensor,
                          out_scale: torch.Tensor, kpool: int) -> None:
    """Triton version of :func:`kpool_compress` (one program per pool and head, 128
    channels at a time; tensors contiguous)."""
    ring_block_ids, pool_starts, out_slots = _check_compress(
        key_ring, gate_ring, out_cache, out_scale, kpool, ring_block_ids, pool_starts,
        out_slots)
    num_pools = ring_block_ids.shape[0]
    ring, num_heads, head_size = key_ring.shape[1:]
    if num_pools == 0:
        return
    for name, t in (("key_ring", key_ring), ("gate_ring", gate_ring),
                    ("out_cache", out_cache), ("out_scale", out_scale)):
        if not t.is_contiguous():
            raise _err(f"{name} must be contiguous", name)
    from kvcore_kpool._triton_kernels import _compress, next_pow2

    _compress[(num_pools, num_heads)](
        key_ring, gate_ring, ring_block_ids.to(torch.int64).contiguous(),
        pool_starts.to(torch.int64).contiguous(), out_slots.to(torch.int64).contiguous(),
        hadamard_matrix(HADAMARD_SIZE, key_ring.device), out_cache, out_scale,
        RING=ring, H=num_heads, D=head_size, KPOOL=kpool, KPOOL_P=next_pow2(kpool),
        HN=HADAMARD_SIZE, FP8_MAX=FP8_E4M3_MAX)


def kpool_compress(key_ring: torch.Tensor, gate_ring: torch.Tensor,
                   ring_block_ids: torch.Tensor, pool_starts: torch.Tensor,
                   out_slots: torch.Tensor, out_cache: torch.Tensor,
                   out_scale: torch.Tensor, kpool: int) -> None:
    """Compress completed pools from the ring into the pooled fp8 cache.

    Parameters
    ----------
    key_ring, gate_ring: ``[num_blocks, ring_size, num_heads, head_size]``; head_size a
        multiple of 128.
    ring_block_ids: int ``[num_pools]``: the ring block of each pool's request (-1:
        padding, skipped).
    pool_starts: int ``[num_pools]``: absolute position of each pool's first token (a
        multiple of ``kpool``); its tokens are in ring slots ``(start + t) %
        ring_size``, t < kpool, and must all have been written.
    out_slots: int ``[num_pools]``: each pool's slot in the pooled cache
        (:func:`kpool_pool_slot`), -1: skipped.
    out_cache: float8_e4m3fn ``[num_slots, num_heads, head_size]``, written in place.
    out_scale: float32 ``[num_slots, num_heads]``: the power-of-two scale (dequantize:
        ``out_cache[s].float() * out_scale[s, :, None]``).
    kpool: tokens per pool.

    Raises kvcore.errors.KernelArgumentError before any launch, on both paths: a ring
    block id outside ``[-1, num_blocks)``, an out slot outside ``[-1, num_slots)``, a
    negative pool start, index tensors not int32/int64, shapes / dtypes that do not
    match.
    """
    if _use_triton(key_ring):
        kpool_compress_triton(key_ring, gate_ring, ring_block_ids, pool_starts, out_slots,
                              out_cache, out_scale, kpool)
    else:
        kpool_compress_ref(key_ring, gate_ring, ring_block_ids, pool_starts, out_slots,
                           out_cache, out_scale, kpool)
