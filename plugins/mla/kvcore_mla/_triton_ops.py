"""Triton versions of the MLA latent-cache kernels (see :mod:`kvcore_mla.ops` for the
layouts and the public entry points).  Imported only when a kernel runs.

fp8 e4m3 values are encoded and decoded with integer bit arithmetic (round to nearest,
ties to even, as torch's ``.to(torch.float8_e4m3fn)``) rather than Triton's fp8 cast:
the results are then the same on a GPU and under ``TRITON_INTERPRET=1``, whose fp8
emulation rounds some values wrongly (e.g. -125.5 -> -64 with triton 3.x).  Scales are
powers of two built from exponent bits, so quantizing is exact division.  For the
same reason float32 -> bfloat16 conversions are done on the bits (round to nearest
even): the interpreter truncates.
"""

from __future__ import annotations

from typing import Any

import torch
import triton
import triton.language as tl

from kvcore_mla.ops import (
    DS_MLA_NOPE,
    DS_MLA_RECORD_BYTES,
    DS_MLA_ROPE,
    DS_MLA_ROPE_OFFSET,
    DS_MLA_SCALE_OFFSET,
    DS_MLA_TILE,
)

__all__ = ["concat_and_cache_mla_triton", "gather_mla_cache_triton"]


@triton.jit
def _fp8e4m3_bits(q):
    """float32 in [-448, 448] -> int32 e4m3fn bit pattern (0..255), RNE."""
    bits = q.to(tl.int32, bitcast=True)
    sign = ((bits >> 31) & 1) << 7
    a = tl.abs(q)
    abits = a.to(tl.int32, bitcast=True)
    exp = ((abits >> 23) & 0xFF) - 127
    mant = abits & 0x7FFFFF
    # normal e4m3 (exponent >= -6): keep 3 mantissa bits, round half to even
    m = mant >> 20
    rem = mant & 0xFFFFF
    up = (rem > 0x80000) | ((rem == 0x80000) & ((m & 1) == 1))
    m = m + up.to(tl.int32)
    e = exp + (m >> 3)
    normal = ((e + 7) << 3) | (m & 7)
    # subnormal e4m3: multiples of 2^-9, round half to even (8 -> the smallest normal)
    s = a * 512.0
    f = tl.floor(s)
    fi = f.to(tl.int32)
    r = s - f
    up2 = (r > 0.5) | ((r == 0.5) & ((fi & 1) == 1))
    sub = fi + up2.to(tl.int32)
    return tl.where(exp >= -6, normal, sub) | sign


@triton.jit
def _fp8e4m3_value(b):
    """int32 e4m3fn bit pattern -> float32 (exact)."""
    sign = (b >> 7) & 1
    e = (b >> 3) & 0xF
    m = b & 7
    normal = (((e + 120) << 23) | (m << 20)).to(tl.float32, bitcast=True)
    sub = m.to(tl.float32) * 0.001953125
    v = tl.where(e == 0, sub, normal)
    return tl.where(sign == 1, -v, v)


@triton.jit
def _bf16_bits(x):
    """float32 -> int16 bit pattern of the nearest bfloat16 (ties to even)."""
    b = x.to(tl.int32, bitcast=True)
    b = b + 0x7FFF + ((b >> 16) & 1)
    return (b >> 16).to(tl.int16)


@triton.jit
def _write_plain_kernel(kv_c_ptr, k_pe_ptr, cache_ptr, slot_ptr, kv_c_stride, k_pe_stride,
                        block_stride, block_size, scale,
                        L: tl.constexpr, R: tl.constexpr, BL: tl.constexpr,
                        BR: tl.constexpr, FP8: tl.constexpr, BF16: tl.constexpr):
    t = tl.program_id(0)
    slot = tl.load(slot_ptr + t).to(tl.int64)
    jl = tl.arange(0, BL)
    jr = tl.arange(0, BR)
    ml = (jl < L) & ((jl * 0 + slot) >= 0)
    mr = (jr < R) & ((jr * 0 + slot) >= 0)
    slot = tl.maximum(slot, 0)
    base = (slot // block_size) * block_stride + (slot % block_size) * (L + R)
    x = tl.load(kv_c_ptr + t * kv_c_stride + jl, mask=ml, other=0.0)
    y = tl.load(k_pe_ptr + t * k_pe_stride + jr, mask=mr, other=0.0)
    if FP8:
        qx = tl.minimum(tl.maximum(tl.math.div_rn(x.to(tl.float32), scale), -448.0), 448.0)
        qy = tl.minimum(tl.maximum(tl.math.div_rn(y.to(tl.float32), scale), -448.0), 448.0)
        tl.store(cache_ptr + base + jl, _fp8e4m3_bits(qx).to(tl.uint8), mask=ml)
        tl.store(cache_ptr + base + L + jr, _fp8e4m3_bits(qy).to(tl.uint8), mask=mr)
    elif BF16:  # cache_ptr is an int16 view of a bfloat16 cache
        tl.store(cache_ptr + base + jl, _bf16_bits(x.to(tl.float32)), mask=ml)
        tl.store(cache_ptr + base + L + jr, _bf16_bits(y.to(tl.float32)), mask=mr)
    else:
        tl.store(cache_ptr + base + jl, x.to(cache_ptr.dtype.element_ty), mask=ml)
        tl.store(cache_ptr + base + L + jr, y.to(cache_ptr.dtype.element_ty), mask=mr)


@triton.jit
def _write_ds_mla_kernel(kv_c_ptr, k_pe_ptr, u8_ptr, f32_ptr, bf16_ptr, slot_ptr,
                         kv_c_stride, k_pe_stride, block_stride, block_size,
                         NT: tl.constexpr, TILE: tl.constexpr, ROPE: tl.constexpr,
                         RECORD: tl.constexpr, SCALE_OFF: tl.constexpr,
                         ROPE_OFF: tl.constexpr):
    t = tl.program_id(0)
    slot = tl.load(slot_ptr + t).to(tl.int64)
    rows = tl.arange(0, NT)
    cols = tl.arange(0, TILE)
    idx = rows[:, None] * TILE + cols[None, :]
    jr = tl.arange(0, ROPE)
    ok = (idx * 0 + slot) >= 0          # [NT, TILE]; False for a -1 (padding) slot
    ok_rows = (rows * 0 + slot) >= 0
    ok_rope = (jr * 0 + slot) >= 0
    slot = tl.maximum(slot, 0)
    base = (slot // block_size) * block_stride + (slot % block_size) * RECORD  # bytes
    x = tl.load(kv_c_ptr + t * kv_c_stride + idx).to(tl.float32)
    amax = tl.maximum(tl.max(tl.abs(x), axis=1), 1e-30)
    tb = tl.math.div_rn(amax, 448.0).to(tl.int32, bitcast=True)
    e = (tb >> 23) & 0xFF
    e = tl.where((tb & 0x7FFFFF) == 0, e, e + 1)       # round up to a power of two
    scale = (e << 23).to(tl.float32, bitcast=True)
    inv = ((254 - e) << 23).to(tl.float32, bitcast=True)  # 1 / scale, exact
    q = tl.minimum(tl.maximum(x * inv[:, None], -448.0), 448.0)
    tl.store(u8_ptr + base + idx, _fp8e4m3_bits(q).to(tl.uint8), mask=ok)
    tl.store(f32_ptr + (base + SCALE_OFF) // 4 + rows, scale, mask=ok_rows)
    y = tl.load(k_pe_ptr + t * k_pe_stride + jr).to(tl.float32)
    tl.store(bf16_ptr + (base + ROPE_OFF) // 2 + jr, _bf16_bits(y), mask=ok_rope)


@triton.jit
def _gather_plain_kernel(cache_ptr, slot_ptr, out_ptr, block_stride, block_size, scale,
                         W: tl.constexpr, BW: tl.constexpr, FP8: tl.constexpr,
                         OUT_BF16: tl.constexpr):
    i = tl.program_id(0)
    slot = tl.load(slot_ptr + i).to(tl.int64)
    j = tl.arange(0, BW)
    m = j < W
    ok = m & ((j * 0 + slot) >= 0)  # a negative slot (null block) is never read: zeros
    slot = tl.maximum(slot, 0)
    base = (slot // block_size) * block_stride + (slot % block_size) * W
    v = tl.load(cache_ptr + base + j, mask=ok, other=0)
    if FP8:
        val = _fp8e4m3_value(v.to(tl.int32)) * scale
    else:
        val = v.to(tl.float32)
    if OUT_BF16:  # out_ptr is an int16 view of a bfloat16 output
        tl.store(out_ptr + i * W + j, _bf16_bits(val), mask=m)
    else:
        tl.store(out_ptr + i * W + j, val.to(out_ptr.dtype.element_ty), mask=m)


@triton.jit
def _gather_ds_mla_kernel(u8_ptr, f32_ptr, bf16_ptr, slot_ptr, out_ptr, block_stride,
                          block_size, NT: tl.constexpr, TILE: tl.constexpr,
                          ROPE: tl.constexpr, RECORD: tl.constexpr,
                          SCALE_OFF: tl.constexpr, ROPE_OFF: tl.constexpr,
                          OUT_BF16: tl.constexpr):
    i = tl.program_id(0)
    slot = tl.load(slot_ptr + i).to(tl.int64)
    rows = tl.arange(0, NT)
    idx = rows[:, None] * TILE + tl.arange(0, TILE)[None, :]
    jr = tl.arange(0, ROPE)
    # a negative slot (null block, padding) is never read: zeros
    ok_idx = (idx * 0 + slot) >= 0
    ok_rows = (rows * 0 + slot) >= 0
    ok_rope = (jr * 0 + slot) >= 0
    slot = tl.maximum(slot, 0)
    base = (slot // block_size) * block_stride + (slot % block_size) * RECORD
    b = tl.load(u8_ptr + base + idx, mask=ok_idx, other=0).to(tl.int32)
    scale = tl.load(f32_ptr + (base + SCALE_OFF) // 4 + rows, mask=ok_rows, other=0.0)
    nope = _fp8e4m3_value(b) * scale[:, None]
    width = NT * TILE + ROPE
    if OUT_BF16:  # out_ptr is an int16 view; the RoPE part is copied bit for bit
        tl.store(out_ptr + i * width + idx, _bf16_bits(nope))
        rope_bits = tl.load(bf16_ptr + (base + ROPE_OFF) // 2 + jr,
                            mask=ok_rope, other=0)
        tl.store(out_ptr + i * width + NT * TILE + jr, rope_bits)
    else:
        tl.store(out_ptr + i * width + idx, nope.to(out_ptr.dtype.element_ty))
        rope = tl.load(bf16_ptr + (base + ROPE_OFF) // 2 + jr,
                       mask=ok_rope, other=0).to(tl.bfloat16, bitcast=True)
        tl.store(out_ptr + i * width + NT * TILE + jr,
                 rope.to(tl.float32).to(out_ptr.dtype.element_ty))


def _byte_views(kv_cache: Any) -> tuple[Any, Any, Any]:
    """uint8, float32 and int16 (bfloat16 bits) flat views of the cache's storage from its first
    byte (element offsets are computed in bytes and divided in the kernels)."""
    n = kv_cache.shape[0] * kv_cache.stride(0)
    flat = kv_cache.as_strided((n,), (1,))
    return flat, flat.view(torch.float32), flat.view(torch.int16)


def concat_and_cache_mla_triton(kv_c: Any, k_pe: Any, kv_cache: Any, slot_mapping: Any,
                                mode: str, scale: float) -> None:
    """Triton :func:`kvcore_mla.ops.concat_and_cache_mla` (inputs already checked)."""
    t = kv_c.shape[0]
    if t == 0:
        return
    kv_c = kv_c if kv_c.stride(1) == 1 else kv_c.contiguous()
    k_pe = k_pe if k_pe.stride(1) == 1 else k_pe.contiguous()
    block_size = kv_cache.shape[1]
    if mode == "fp8_ds_mla":
        u8, f32, bf16 = _byte_views(kv_cache)
        _write_ds_mla_kernel[(t,)](
            kv_c, k_pe, u8, f32, bf16, slot_mapping, kv_c.stride(0), k_pe.stride(0),
            kv_cache.stride(0), block_size, NT=DS_MLA_NOPE // DS_MLA_TILE, TILE=DS_MLA_TILE,
            ROPE=DS_MLA_ROPE, RECORD=DS_MLA_RECORD_BYTES, SCALE_OFF=DS_MLA_SCALE_OFFSET,
            ROPE_OFF=DS_MLA_ROPE_OFFSET)
        return
    lora, rope = kv_c.shape[1], k_pe.shape[1]
    bf16 = mode == "float" and kv_cache.dtype == torch.bfloat16
    cache = kv_cache.view(torch.uint8) if mode == "fp8" else (
        kv_cache.view(torch.int16) if bf16 else kv_cache)
    _write_plain_kernel[(t,)](
        kv_c, k_pe, cache, slot_mapping, kv_c.stride(0), k_pe.stride(0), kv_cache.stride(0),
        block_size, float(scale), L=lora, R=rope, BL=triton.next_power_of_2(lora),
        BR=triton.next_power_of_2(rope), FP8=mode == "fp8", BF16=bf16)


def gather_mla_cache_triton(kv_cache: Any, slots: Any, mode: str, scale: float,
                            out_dtype: Any, lora_rank: int, width: int) -> Any:
    """Triton :func:`kvcore_mla.ops.gather_mla_cache` for precomputed ``slots``."""
    n = slots.shape[0]
    out = torch.empty(n, width, dtype=out_dtype, device=kv_cache.device)
    if n == 0:
        return out
    block_size = kv_cache.shape[1]
    out_bf16 = out_dtype == torch.bfloat16
    dst = out.view(torch.int16) if out_bf16 else out
    if mode == "fp8_ds_mla":
        u8, f32, bf16 = _byte_views(kv_cache)
        _gather_ds_mla_kernel[(n,)](
            u8, f32, bf16, slots, dst, kv_cache.stride(0), block_size,
            NT=DS_MLA_NOPE // DS_MLA_TILE, TILE=DS_MLA_TILE, ROPE=DS_MLA_ROPE,
            RECORD=DS_MLA_RECORD_BYTES, SCALE_OFF=DS_MLA_SCALE_OFFSET,
            ROPE_OFF=DS_MLA_ROPE_OFFSET, OUT_BF16=out_bf16)
        return out
    cache = kv_cache.view(torch.uint8) if mode == "fp8" else kv_cache
    _gather_plain_kernel[(n,)](
        cache, slots, dst, kv_cache.stride(0), block_size, float(scale), W=width,
        BW=triton.next_power_of_2(width), FP8=mode == "fp8", OUT_BF16=out_bf16)
    return out
