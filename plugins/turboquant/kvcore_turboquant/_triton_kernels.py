"""Triton kernels of TurboQuant store / dequantize (imported only when used).

One program handles ``BT`` tokens of one KV head.  The math and the slot layout are
those of :mod:`kvcore_turboquant.quantizer` (the torch reference), step for step, so
that under ``TRITON_INTERPRET=1`` codes, norms and scales come out identical.  On a GPU,
``tl.dot`` runs with ``input_precision="ieee"`` (no TF32) and fp32 division may differ
from the reference in the last bit, which can move a coordinate that sits exactly on a
decision boundary to the neighbouring code.
"""

from __future__ import annotations

import triton
import triton.language as tl


@triton.jit
def _store_fp16(cache_ptr, addr, x, valid):
    bits = x.to(tl.float16).to(tl.uint16, bitcast=True).to(tl.int32)
    tl.store(cache_ptr + addr, (bits & 0xFF).to(tl.uint8), mask=valid)
    tl.store(cache_ptr + addr + 1, ((bits >> 8) & 0xFF).to(tl.uint8), mask=valid)


@triton.jit
def _load_fp16(cache_ptr, addr, valid):
    lo = tl.load(cache_ptr + addr, mask=valid, other=0).to(tl.int32)
    hi = tl.load(cache_ptr + addr + 1, mask=valid, other=0).to(tl.int32)
    bits = (lo | (hi << 8)).to(tl.uint16)
    return bits.to(tl.float16, bitcast=True).to(tl.float32)


@triton.jit
def _fp8_e4m3_bits(x):
    """float32 -> float8_e4m3fn bit patterns (uint8), round to nearest even, clamped to
    +-448; integer arithmetic, so the interpreter and a GPU agree with torch's cast
    (the interpreter's own fp8 cast drops the rounding carry into the exponent)."""
    a = tl.minimum(tl.abs(x), 448.0)
    sign = (x.to(tl.int32, bitcast=True) >> 31) & 1
    bits = a.to(tl.int32, bitcast=True)
    # normals: round the fp32 mantissa to 3 bits (RNE), carry flows into the exponent;
    # rebias the exponent from 127 to 7: subtract (127 - 7) << 3
    normal = ((bits + 0x7FFFF + ((bits >> 20) & 1)) >> 20) - 960
    # subnormals (a < 2**-6): steps of 2**-9, RNE via the 2**23 magic number
    sub = ((a * 512.0 + 8388608.0) - 8388608.0).to(tl.int32)
    code = tl.where(a < 0.015625, sub, normal)
    return (code | (sign << 7)).to(tl.uint8)


@triton.jit
def _pack_store(cache_ptr, base, codes, valid, OFF, BITS: tl.constexpr, BT: tl.constexpr,
                BD: tl.constexpr, NBYTES: tl.constexpr):
    """Store codes [BT, BD] (int32, 0 past the head size) as a little-endian bit stream
    of NBYTES bytes at cache_ptr + base[t] + OFF."""
    if BITS == 8:
        d = tl.arange(0, BD)
        tl.store(cache_ptr + base[:, None] + OFF + d[None, :], codes.to(tl.uint8),
                 mask=valid[:, None] & (d[None, :] < NBYTES))
    else:
        c3 = tl.reshape(codes.to(tl.int64), (BT, BD // 8, 8))
        k = tl.arange(0, 8).to(tl.int64)
        word = tl.sum(c3 << (k[None, None, :] * BITS), axis=2)  # [BT, BD // 8]
        g = tl.arange(0, BD // 8)
        for m in tl.static_range(BITS):
            byte = ((word >> (8 * m)) & 0xFF).to(tl.uint8)
            idx = g * BITS + m
            tl.store(cache_ptr + base[:, None] + OFF + idx[None, :], byte,
                     mask=valid[:, None] & (idx[None, :] < NBYTES))


@triton.jit
def _load_unpack(cache_ptr, base, valid, OFF, BITS: tl.constexpr, BT: tl.constexpr,
                 BD: tl.constexpr, NBYTES: tl.constexpr):
    """Codes int32 [BT, BD] read from the bit stream at cache_ptr + base[t] + OFF."""
    d = tl.arange(0, BD)
    if BITS == 8:
        codes = tl.load(cache_ptr + base[:, None] + OFF + d[None, :],
                        mask=valid[:, None] & (d[None, :] < NBYTES), other=0).to(tl.int32)
    else:
        g = d // 8
        k = d % 8
        word = tl.zeros([BT, BD], dtype=tl.int32)
        for m in tl.static_range(BITS):
            idx = g * BITS + m
            b = tl.load(cache_ptr + base[:, None] + OFF + idx[None, :],
                        mask=valid[:, None] & (idx[None, :] < NBYTES), other=0)
            word = word | (b.to(tl.int32) << (8 * m))
        codes = (word >> (k * BITS)[None, :]) & ((1 << BITS) - 1)
    return codes


@triton.jit
def turboquant_store_kernel(
    key_ptr, value_ptr, cache_ptr, slot_ptr, rot_ptr, bnd_ptr, cent_ptr,
    T, stride_kt, stride_kh, stride_vt, stride_vh,
    stride_cb, stride_cs, stride_ch, block_size,
    D: tl.constexpr, DV: tl.constexpr, BD: tl.constexpr, BDV: tl.constexpr,
    BT: tl.constexpr, KB: tl.constexpr, VB: tl.constexpr, NC: tl.constexpr,
    KC: tl.constexpr, KEY_BYTES: tl.constexpr, VC: tl.constexpr, CH: tl.constexpr,
):
    pid = tl.program_id(0)
    h = tl.program_id(1)
    t = (pid * BT + tl.arange(0, BT)).to(tl.int64)
    tmask = t < T
    slot = tl.load(slot_ptr + t, mask=tmask, other=-1).to(tl.int64)
    valid = tmask & (slot >= 0)
    slot = tl.where(valid, slot, 0)
    base = (slot // block_size) * stride_cb + (slot % block_size) * stride_cs + h * stride_ch

    # ---- key ----
    d = tl.arange(0, BD)
    dmask = d < D
    m2 = valid[:, None] & dmask[None, :]
    x = tl.load(key_ptr + t[:, None] * stride_kt + h * stride_kh + d[None, :], mask=m2,
                other=0.0).to(tl.float32)
    if KB == 8:
        b8 = _fp8_e4m3_bits(x)
        tl.store(cache_ptr + base[:, None] + d[None, :], b8, mask=m2)
    else:
        norm = tl.sqrt(tl.sum(x * x, axis=1))
        u = x / tl.maximum(norm, 1e-30)[:, None]
        j = tl.arange(0, BD)
        ssq = tl.zeros([BT], dtype=tl.float32)
        # y = u R^T, CH output coordinates at a time (bounds the rotation tile to
        # BD x CH floats); CH is a multiple of 8, so each chunk packs into whole bytes
        for c0 in tl.static_range(0, BD, CH):
            i = c0 + tl.arange(0, CH)
            imask = i < D
            # rt[j, i] = R[i, j]  (R row-major [D, D])
            rt = tl.load(rot_ptr + i[None, :] * D + j[:, None],
                         mask=(j[:, None] < D) & imask[None, :], other=0.0)
            y = tl.dot(u, rt, input_precision="ieee")
            codes = tl.zeros([BT, CH], dtype=tl.int32)
            for kk in tl.static_range((1 << KB) - 1):
                codes += (y > tl.load(bnd_ptr + kk)).to(tl.int32)
            codes = tl.where(imask[None, :], codes, 0)
            if NC:
                yh = tl.load(cent_ptr + codes)
                yh = tl.where(imask[None, :], yh, 0.0)
                ssq += tl.sum(yh * yh, axis=1)
            _pack_store(cache_ptr, base, codes, valid, c0 * KB // 8, KB, BT, CH,
                        KC - c0 * KB // 8)
        if NC:
            scale = norm / tl.sqrt(ssq)
        else:
            scale = norm
        _store_fp16(cache_ptr, base + KC, scale, valid)

    # ---- value ----
    dv = tl.arange(0, BDV)
    dvm = dv < DV
    m2v = valid[:, None] & dvm[None, :]
    v = tl.load(value_ptr + t[:, None] * stride_vt + h * stride_vh + dv[None, :], mask=m2v,
                other=0.0).to(tl.float32)
    LEVELS: tl.constexpr = (1 << VB) - 1
    vmin = tl.min(tl.where(dvm[None, :], v, float("inf")), axis=1)
    vmax = tl.max(tl.where(dvm[None, :], v, float("-inf")), axis=1)
    s16 = ((vmax - vmin) / LEVELS).to(tl.float16)
    z16 = vmin.to(tl.float16)
    s = s16.to(tl.float32)
    z = z16.to(tl.float32)
    spos = s > 0
    q = tl.floor((v - z[:, None]) / tl.where(spos, s, 1.0)[:, None] + 0.5)
    q = tl.where(spos[:, None], q, 0.0)
    q = tl.minimum(tl.maximum(q, 0.0), LEVELS * 1.0)
    vcodes = tl.where(dvm[None, :], q.to(tl.int32), 0)
    _pack_store(cache_ptr, base, vcodes, valid, KEY_BYTES, VB, BT, BDV, VC)
    _store_fp16(cache_ptr, base + KEY_BYTES + VC, s, valid)
    _store_fp16(cache_ptr, base + KEY_BYTES + VC + 2, z, valid)


@triton.jit
def turboquant_dequant_kernel(
    cache_ptr, slot_ptr, rot_ptr, cent_ptr, kout_ptr, vout_ptr,
    N, stride_cb, stride_cs, stride_ch, block_size,
    stride_kn, stride_kh, stride_vn, stride_vh,
    D: tl.constexpr, DV: tl.constexpr, BD: tl.constexpr, BDV: tl.constexpr,
    BT: tl.constexpr, KB: tl.constexpr, VB: tl.constexpr,
    KC: tl.constexpr, KEY_BYTES: tl.constexpr, VC: tl.constexpr, CH: tl.constexpr,
):
    pid = tl.program_id(0)
    h = tl.program_id(1)
    n = (pid * BT + tl.arange(0, BT)).to(tl.int64)
    nmask = n < N
    slot = tl.load(slot_ptr + n, mask=nmask, other=-1).to(tl.int64)
    valid = nmask & (slot >= 0)
    slot = tl.where(valid, slot, 0)
    base = (slot // block_size) * stride_cb + (slot % block_size) * stride_cs + h * stride_ch

    # ---- key ----
    d = tl.arange(0, BD)
    dmask = d < D
    m2 = valid[:, None] & dmask[None, :]
    if KB == 8:
        b = tl.load(cache_ptr + base[:, None] + d[None, :], mask=m2, other=0)
        k = b.to(tl.float8e4nv, bitcast=True).to(tl.float32)
        k = tl.where(m2, k, 0.0)
        tl.store(kout_ptr + n[:, None] * stride_kn + h * stride_kh + d[None, :],
                 k.to(kout_ptr.dtype.element_ty), mask=nmask[:, None] & dmask[None, :])
    else:
        codes = _load_unpack(cache_ptr, base, valid, 0, KB, BT, BD, KC)
        yh = tl.load(cent_ptr + codes, mask=dmask[None, :], other=0.0)
        scale = _load_fp16(cache_ptr, base + KC, valid)
        # k = y^ R  (= R^T y^ per row), CH output coordinates at a time
        for c0 in tl.static_range(0, BD, CH):
            i = c0 + tl.arange(0, CH)
            imask = i < D
            r = tl.load(rot_ptr + d[:, None] * D + i[None, :],
                        mask=dmask[:, None] & imask[None, :], other=0.0)
            k = tl.dot(yh, r, input_precision="ieee") * scale[:, None]
            k = tl.where(valid[:, None] & imask[None, :], k, 0.0)
            tl.store(kout_ptr + n[:, None] * stride_kn + h * stride_kh + i[None, :],
                     k.to(kout_ptr.dtype.element_ty), mask=nmask[:, None] & imask[None, :])

    # ---- value ----
    dv = tl.arange(0, BDV)
    dvm = dv < DV
    vcodes = _load_unpack(cache_ptr, base, valid, KEY_BYTES, VB, BT, BDV, VC)
    s = _load_fp16(cache_ptr, base + KEY_BYTES + VC, valid)
    z = _load_fp16(cache_ptr, base + KEY_BYTES + VC + 2, valid)
    v = vcodes.to(tl.float32) * s[:, None] + z[:, None]
    v = tl.where(valid[:, None] & dvm[None, :], v, 0.0)
    tl.store(vout_ptr + n[:, None] * stride_vn + h * stride_vh + dv[None, :],
             v.to(vout_ptr.dtype.element_ty), mask=nmask[:, None] & dvm[None, :])
