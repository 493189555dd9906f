"""Triton kernels of :mod:`kvcore_kpool.kernels` (imported on first use)."""

import triton
import triton.language as tl


def next_pow2(n: int) -> int:
    return 1 << max(0, (n - 1).bit_length())


@triton.jit
def _tail_write(KEYS, GATES, POS, BLK, KRING, GRING,
                RING: tl.constexpr, HD: tl.constexpr, HD_P: tl.constexpr):
    t = tl.program_id(0)
    blk = tl.load(BLK + t)
    if blk >= 0:
        slot = tl.load(POS + t) % RING
        offs = tl.arange(0, HD_P)
        mask = offs < HD
        dst = (blk * RING + slot) * HD + offs
        k = tl.load(KEYS + t * HD + offs, mask=mask)
        g = tl.load(GATES + t * HD + offs, mask=mask)
        tl.store(KRING + dst, k.to(KRING.dtype.element_ty), mask=mask)
        tl.store(GRING + dst, g.to(GRING.dtype.element_ty), mask=mask)


@triton.jit
def _round_to_e4m3(v):
    # Round float32 |v| <= 448 to the nearest float8 e4m3fn value (ties to even) in
    # float32 arithmetic, so that the final cast is exact.  (Triton's interpreter
    # rounds fp8 casts without carrying into the exponent; the hardware cast is
    # right, and this is equal to it.)  Step of the binade: 2 ** (max(E, -6) - 3), E
    # the float32 exponent of v (e4m3 has 3 mantissa bits, subnormals below 2 ** -6).
    bits = v.to(tl.int32, bitcast=True)
    e = tl.maximum(((bits >> 23) & 0xFF) - 127, -6)
    step = ((e - 3 + 127) << 23).to(tl.float32, bitcast=True)
    x = v / step
    r = (x + 12582912.0) - 12582912.0   # 1.5 * 2**23: round to nearest even integer
    return r * step


@triton.jit
def _compress(KRING, GRING, BLK, START, SLOT, HAD, OUT, SCALE,
              RING: tl.constexpr, H: tl.constexpr, D: tl.constexpr, KPOOL: tl.constexpr,
              KPOOL_P: tl.constexpr, HN: tl.constexpr, FP8_MAX: tl.constexpr):
    p = tl.program_id(0)
    h = tl.program_id(1)
    blk = tl.load(BLK + p)
    slot = tl.load(SLOT + p)
    if (blk >= 0) & (slot >= 0):
        start = tl.load(START + p)
        offs_t = tl.arange(0, KPOOL_P)
        tmask = offs_t < KPOOL
        ring_slot = (start + offs_t) % RING
        offs_i = tl.arange(0, HN)
        had = tl.load(HAD + offs_i[:, None] * HN + offs_i[None, :])   # [HN, HN]
        amax = tl.full((), 0.0, tl.float32)
        # pass 1: pool, rotate, track the vector's absmax
        for c in range(0, D // HN):
            base = ((blk * RING + ring_slot[:, None]) * H + h) * D + c * HN \
                + offs_i[None, :]
            k = tl.load(KRING + base, mask=tmask[:, None], other=0.0).to(tl.float32)
            g = tl.load(GRING + base, mask=tmask[:, None], other=float("-inf"))
            g = g.to(tl.float32)
            g = g - tl.max(g, axis=0)[None, :]
            w = tl.exp(g)
            w = w / tl.sum(w, axis=0)[None, :]
            pooled = tl.sum(w * k, axis=0)                            # [HN]
            y = tl.sum(pooled[:, None] * had, axis=0)                 # [HN]
            amax = tl.maximum(amax, tl.max(tl.abs(y), axis=0))
        # power-of-two scale from the float32 bits of amax / FP8_MAX
        x = amax / FP8_MAX
        bits = x.to(tl.int32, bitcast=True)
        e = ((bits >> 23) & 0xFF) - 127 + ((bits & 0x7FFFFF) != 0).to(tl.int32)
        e = tl.maximum(e, -126)
        scale = ((e + 127) << 23).to(tl.float32, bitcast=True)
        scale = tl.where(amax > 0.0, scale, 1.0)
        # pass 2: recompute (cheap: KPOOL x HN per chunk) and store fp8
        for c in range(0, D // HN):
            base = ((blk * RING + ring_slot[:, None]) * H + h) * D + c * HN \
                + offs_i[None, :]
            k = tl.load(KRING + base, mask=tmask[:, None], other=0.0).to(tl.float32)
            g = tl.load(GRING + base, mask=tmask[:, None], other=float("-inf"))
            g = g.to(tl.float32)
            g = g - tl.max(g, axis=0)[None, :]
            w = tl.exp(g)
            w = w / tl.sum(w, axis=0)[None, :]
            pooled = tl.sum(w * k, axis=0)
            y = tl.sum(pooled[:, None] * had, axis=0)
            q = _round_to_e4m3(y / scale).to(tl.float8e4nv)
            tl.store(OUT + (slot * H + h) * D + c * HN + offs_i, q)
        tl.store(SCALE + slot * H + h, scale)
