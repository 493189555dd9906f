"""Triton kernels of :mod:`kvcore.ops.cache` (imported only when a Triton path runs).

Quantization rounds explicitly (round half to even through the ``1.5 x 2**23`` trick,
and an exact-value fp8 rounding from the fp32 exponent bits) before the final cast, so
that the compiled kernel and the Triton interpreter (whose fp32 -> fp8 cast does not
round to nearest even) store the same bytes as the torch references.
"""

from __future__ import annotations

import triton
import triton.language as tl

# quantization modes (constexpr MODE)
MODE_FLOAT = 0
MODE_FP8_PER_TENSOR = 1
MODE_INT8_PER_TOKEN_HEAD = 2
MODE_FP8_PER_TOKEN_HEAD = 3

_RNE_MAGIC = 12582912.0  # 1.5 * 2**23: (x + M) - M rounds |x| < 2**22 half to even


@triton.jit
def _round_half_even(x):
    return (x + 12582912.0) - 12582912.0


@triton.jit
def _round_to_fp8(x, MANT_BITS: tl.constexpr, MIN_EXP: tl.constexpr, MAX_VAL: tl.constexpr):
    """Round fp32 ``x`` to the nearest (ties to even) value of an fp8 format, saturating.

    MANT_BITS / MIN_EXP / MAX_VAL: 3 / -6 / 448 for e4m3fn, 2 / -14 / 57344 for e5m2.
    The result is exactly representable, so any cast to the fp8 type is exact.
    """
    x = tl.minimum(tl.maximum(x, -MAX_VAL), MAX_VAL)
    bits = x.to(tl.int32, bitcast=True)
    e = ((bits >> 23) & 0xFF) - 127
    e = tl.maximum(e, MIN_EXP)
    inv_step = ((127 - (e - MANT_BITS)) << 23).to(tl.float32, bitcast=True)
    step = ((127 + (e - MANT_BITS)) << 23).to(tl.float32, bitcast=True)
    return _round_half_even(x * inv_step) * step


@triton.jit
def _round_to_bf16(x):
    """fp32 ``x`` rounded to the nearest bfloat16 (ties to even), still as fp32 (so the
    final cast is exact; the interpreter's fp32 -> bf16 cast truncates)."""
    bits = x.to(tl.int32, bitcast=True)
    bits = (bits + 0x7FFF + ((bits >> 16) & 1)) & -65536
    return bits.to(tl.float32, bitcast=True)


@triton.jit
def _cast_out(y, out_ptr, ROUND_BF16: tl.constexpr):
    if ROUND_BF16:
        y = _round_to_bf16(y.to(tl.float32))
    return y.to(out_ptr.dtype.element_ty)


@triton.jit
def _quantize_tile(x, inv, MODE: tl.constexpr, MANT_BITS: tl.constexpr,
                   MIN_EXP: tl.constexpr, MAX_VAL: tl.constexpr):
    if MODE == 0:
        y = x
    elif MODE == 2:
        y = _round_half_even(tl.minimum(tl.maximum(x * inv, -127.0), 127.0))
    else:
        y = _round_to_fp8(x * inv, MANT_BITS, MIN_EXP, MAX_VAL)
    return y


@triton.jit
def _store_one(src_ptr, dst_ptr, scale_ptr, slot_block, slot_off, t, head_start,
               stride_t, stride_h, stride_cb, stride_cn, stride_ch,
               stride_sb, stride_sn, stride_sh, num_heads,
               HEAD_SIZE: tl.constexpr, BLOCK_H: tl.constexpr, BLOCK_D: tl.constexpr,
               MODE: tl.constexpr, QMAX: tl.constexpr, MANT_BITS: tl.constexpr,
               MIN_EXP: tl.constexpr, MAX_VAL: tl.constexpr, ROUND_BF16: tl.constexpr):
    heads = head_start + tl.arange(0, BLOCK_H)
    chans = tl.arange(0, BLOCK_D)
    hmask = heads < num_heads
    mask = hmask[:, None] & (chans[None, :] < HEAD_SIZE)
    x = tl.load(src_ptr + t * stride_t + heads[:, None] * stride_h + chans[None, :],
                mask=mask, other=0.0)
    dst = (dst_ptr + slot_block * stride_cb + slot_off * stride_cn
           + heads[:, None] * stride_ch + chans[None, :])
    if MODE == 0:
        tl.store(dst, _cast_out(x, dst_ptr, ROUND_BF16), mask=mask)
    elif MODE == 1:
        inv = tl.math.div_rn(1.0, tl.load(scale_ptr))
        y = _quantize_tile(x.to(tl.float32), inv, MODE, MANT_BITS, MIN_EXP, MAX_VAL)
        tl.store(dst, y.to(dst_ptr.dtype.element_ty), mask=mask)
    else:
        xf = x.to(tl.float32)
        amax = tl.max(tl.abs(xf), axis=1)
        s = tl.math.div_rn(amax, QMAX)
        pos = s > 0
        inv = tl.where(pos, tl.math.div_rn(1.0, tl.where(pos, s, 1.0)), 0.0)
        y = _quantize_tile(xf, inv[:, None], MODE, MANT_BITS, MIN_EXP, MAX_VAL)
        tl.store(dst, y.to(dst_ptr.dtype.element_ty), mask=mask)
        tl.store(scale_ptr + slot_block * stride_sb + slot_off * stride_sn
                 + heads * stride_sh, s, mask=hmask)


@triton.jit
def reshape_and_cache_kernel(
    key_ptr, value_ptr, key_cache_ptr, value_cache_ptr, k_scale_ptr, v_scale_ptr,
    slot_mapping_ptr,
    stride_kt, stride_kh, stride_vt, stride_vh,
    stride_kcb, stride_kcn, stride_kch, stride_vcb, stride_vcn, stride_vch,
    stride_ksb, stride_ksn, stride_ksh, stride_vsb, stride_vsn, stride_vsh,
    num_heads, block_size,
    HEAD_SIZE: tl.constexpr, HEAD_SIZE_V: tl.constexpr, BLOCK_H: tl.constexpr,
    BLOCK_D: tl.constexpr, BLOCK_DV: tl.constexpr, MODE: tl.constexpr,
    QMAX: tl.constexpr, MANT_BITS: tl.constexpr, MIN_EXP: tl.constexpr,
    MAX_VAL: tl.constexpr, ROUND_BF16: tl.constexpr,
):
    """grid = (num_tokens, cdiv(num_heads, BLOCK_H)): one token's heads tile, K and V."""
    t = tl.program_id(0).to(tl.int64)
    head_start = tl.program_id(1) * BLOCK_H
    slot = tl.load(slot_mapping_ptr + t).to(tl.int64)
    if slot < 0:
        return
    blk = slot // block_size
    off = slot % block_size
    _store_one(key_ptr, key_cache_ptr, k_scale_ptr, blk, off, t, head_start,
               stride_kt, stride_kh, stride_kcb, stride_kcn, stride_kch,
               stride_ksb, stride_ksn, stride_ksh, num_heads,
               HEAD_SIZE, BLOCK_H, BLOCK_D, MODE, QMAX, MANT_BITS, MIN_EXP, MAX_VAL,
               ROUND_BF16)
    _store_one(value_ptr, value_cache_ptr, v_scale_ptr, blk, off, t, head_start,
               stride_vt, stride_vh, stride_vcb, stride_vcn, stride_vch,
               stride_vsb, stride_vsn, stride_vsh, num_heads,
               HEAD_SIZE_V, BLOCK_H, BLOCK_DV, MODE, QMAX, MANT_BITS, MIN_EXP, MAX_VAL,
               ROUND_BF16)


@triton.jit
def _load_one(cache_ptr, scale_ptr, out_ptr, blk, off, out_row, head_start,
              stride_cb, stride_cn, stride_ch, stride_sb, stride_sn, stride_sh,
              stride_ot, stride_oh, num_heads,
              HEAD_SIZE: tl.constexpr, BLOCK_H: tl.constexpr, BLOCK_D: tl.constexpr,
              MODE: tl.constexpr, ROUND_BF16: tl.constexpr):
    """A negative ``blk`` (the null block, padding) is never read: zeros are stored."""
    heads = head_start + tl.arange(0, BLOCK_H)
    chans = tl.arange(0, BLOCK_D)
    hmask = heads < num_heads
    mask = hmask[:, None] & (chans[None, :] < HEAD_SIZE)
    # (vector comparisons: the interpreter rejects a mask and-ed with a scalar bool)
    lmask = mask & ((chans[None, :] * 0 + blk) >= 0)
    smask = hmask & ((heads * 0 + blk) >= 0)
    blk = tl.maximum(blk, 0)
    x = tl.load(cache_ptr + blk * stride_cb + off * stride_cn
                + heads[:, None] * stride_ch + chans[None, :], mask=lmask, other=0.0)
    if MODE == 0:
        y = x
    elif MODE == 1:
        y = x.to(tl.float32) * tl.load(scale_ptr)
    else:
        s = tl.load(scale_ptr + blk * stride_sb + off * stride_sn + heads * stride_sh,
                    mask=smask, other=0.0)
        y = x.to(tl.float32) * s[:, None]
    tl.store(out_ptr + out_row * stride_ot + heads[:, None] * stride_oh + chans[None, :],
             _cast_out(y, out_ptr, ROUND_BF16), mask=mask)


@triton.jit
def gather_cache_kernel(
    key_cache_ptr, value_cache_ptr, k_scale_ptr, v_scale_ptr, key_out_ptr, value_out_ptr,
    block_table_ptr, seq_lens_ptr, cu_seq_lens_ptr,
    stride_bt,
    stride_kcb, stride_kcn, stride_kch, stride_vcb, stride_vcn, stride_vch,
    stride_ksb, stride_ksn, stride_ksh, stride_vsb, stride_vsn, stride_vsh,
    stride_kot, stride_koh, stride_vot, stride_voh,
    num_heads, block_size,
    HEAD_SIZE: tl.constexpr, HEAD_SIZE_V: tl.constexpr, BLOCK_H: tl.constexpr,
    BLOCK_D: tl.constexpr, BLOCK_DV: tl.constexpr, MODE: tl.constexpr,
    ROUND_BF16: tl.constexpr,
):
    """grid = (max_blocks_per_req x block_size, batch, cdiv(num_heads, BLOCK_H)): one
    token position of one request (positions past its length return at once), the
    mirror of the store kernel (one token per program keeps many loads in flight)."""
    pos = tl.program_id(0)
    b = tl.program_id(1).to(tl.int64)
    head_start = tl.program_id(2) * BLOCK_H
    seq_len = tl.load(seq_lens_ptr + b)
    if pos >= seq_len:
        return
    blk = tl.load(block_table_ptr + b * stride_bt + pos // block_size).to(tl.int64)
    off = pos % block_size
    row = tl.load(cu_seq_lens_ptr + b).to(tl.int64) + pos
    _load_one(key_cache_ptr, k_scale_ptr, key_out_ptr, blk, off, row, head_start,
              stride_kcb, stride_kcn, stride_kch, stride_ksb, stride_ksn, stride_ksh,
              stride_kot, stride_koh, num_heads, HEAD_SIZE, BLOCK_H, BLOCK_D, MODE,
              ROUND_BF16)
    _load_one(value_cache_ptr, v_scale_ptr, value_out_ptr, blk, off, row, head_start,
              stride_vcb, stride_vcn, stride_vch, stride_vsb, stride_vsn, stride_vsh,
              stride_vot, stride_voh, num_heads, HEAD_SIZE_V, BLOCK_H, BLOCK_DV, MODE,
              ROUND_BF16)


@triton.jit
def copy_blocks_kernel(rows_ptr, pairs_ptr, stride_row, row_len, BLOCK: tl.constexpr):
    """grid = (num_pairs, cdiv(row_len, BLOCK)): rows[dst, i] = rows[src, i]; a pair
    with a negative id is skipped (the host side also drops such pairs)."""
    p = tl.program_id(0).to(tl.int64)
    i = tl.program_id(1).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    src = tl.load(pairs_ptr + 2 * p).to(tl.int64)
    dst = tl.load(pairs_ptr + 2 * p + 1).to(tl.int64)
    mask = (i < row_len) & ((i * 0 + src) >= 0) & ((i * 0 + dst) >= 0)
    src = tl.maximum(src, 0)
    dst = tl.maximum(dst, 0)
    x = tl.load(rows_ptr + src * stride_row + i, mask=mask)
    tl.store(rows_ptr + dst * stride_row + i, x, mask=mask)


__all__ = ["reshape_and_cache_kernel", "gather_cache_kernel", "copy_blocks_kernel",
           "triton", "MODE_FLOAT", "MODE_FP8_PER_TENSOR", "MODE_INT8_PER_TOKEN_HEAD",
           "MODE_FP8_PER_TOKEN_HEAD"]
