"""TurboQuant quantization math: the torch reference (CPU or GPU) and the slot layout.

Keys (``kb`` in 2, 3, 4; TurboQuant "MSE" quantizer, Zandieh et al. 2025,
arXiv:2504.19874, algorithm 1)::

    norm = ||k||                                  (fp32)
    y    = R (k / norm)                           R: D x D orthogonal, fixed per D
    code = index of the nearest Lloyd-Max centroid of N(0, 1/D) for each y_i
    y^   = centroid[code]
    s    = norm            (plain)   or   norm / ||y^||   (norm correction, ``_nc``)
    stored: codes (kb bits each) + fp16(s)
    k^   = s x R^T y^

``R`` is the randomized Hadamard transform ``H_D diag(signs) / sqrt(D)`` (Sylvester
Walsh-Hadamard matrix, random +-1 signs from a fixed seed) when D is a power of two, and
a seeded Haar-random orthogonal matrix (QR of a Gaussian matrix, signs fixed by diag(R))
otherwise (D = 96, 192, ...).  It is applied as a dense D x D product (one GEMM; at
D <= 256 as fast on a GPU as an O(D log D) butterfly).  8-bit keys are plain fp8 e4m3
(clamped to +-448), not normalized or rotated.

Values (per token and head, asymmetric uniform min/max)::

    scale = fp16((max(v) - min(v)) / (2**vb - 1)),  zero = fp16(min(v))
    code  = clamp(floor((v - zero) / scale + 0.5), 0, 2**vb - 1)  (0 where scale == 0)
    v^    = code x scale + zero

Slot layout (bytes of one token of one KV head; :func:`slot_layout`)::

    [0, KC)            key codes, packed         KC = ceil(D x kb / 8)  (fp8: D bytes)
    [KC, KC+2)         fp16 key scale s, little-endian     (absent for 8-bit keys)
    [K, K+VC)          value codes, packed       K = key bytes, VC = ceil(Dv x vb / 8)
    [K+VC, K+VC+2)     fp16 value scale, little-endian
    [K+VC+2, K+VC+4)   fp16 value zero point, little-endian

Packing: codes form a little-endian bit stream: code i occupies stream bits
[i x b, (i+1) x b), and stream bit j is bit (j mod 8) of byte j // 8.  (8 codes are b
bytes: the word sum_k code_{8g+k} << (b x k) is bytes [b g, b g + b), low byte first.)
8-bit codes are one byte each.  Unused high bits of the last byte are 0.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cache
from typing import Any

import torch

from kvcore_turboquant.codebook import gaussian_codebook
from kvcore_turboquant.schemes import TurboQuantConfig, turboquant_config

__all__ = [
    "ROTATION_SEED",
    "FP8_MAX",
    "SlotLayout",
    "slot_layout",
    "rotation_matrix",
    "hadamard_matrix",
    "codebook_tensors",
    "pack_codes",
    "unpack_codes",
    "quantize_keys",
    "dequantize_keys",
    "quantize_values",
    "dequantize_values",
    "encode_slots",
    "decode_slots",
    "quantize_dequantize_keys",
]

#: Seed of the rotation (signs or Gaussian matrix); part of the storage format: a cache
#: written with one seed must be read with the same one.
ROTATION_SEED = 2504_19874
#: Largest finite float8_e4m3fn value.
FP8_MAX = 448.0


@dataclass(frozen=True)
class SlotLayout:
    """Byte offsets inside one slot (one token of one KV head); see the module docstring."""

    head_size: int
    head_size_v: int
    key_codes: int  # bytes of packed key codes (fp8 values for 8-bit keys)
    key_scale: int  # offset of the fp16 key scale, -1 for 8-bit keys
    key_bytes: int
    value_offset: int
    value_codes: int
    value_scale: int
    value_zero: int
    slot_bytes: int


def slot_layout(scheme: Any, head_size: int, head_size_v: int | None = None) -> SlotLayout:
    """The :class:`SlotLayout` of a scheme (name, QuantScheme or TurboQuantConfig)."""
    cfg = turboquant_config(scheme)
    dv = head_size if head_size_v is None else head_size_v
    kc = cfg.key_code_bytes(head_size)
    kbytes = cfg.key_bytes(head_size)
    vc = cfg.value_code_bytes(dv)
    return SlotLayout(head_size, dv, kc, -1 if cfg.key_is_fp8 else kc, kbytes, kbytes, vc,
                      kbytes + vc, kbytes + vc + 2, cfg.slot_bytes(head_size, dv))


def hadamard_matrix(n: int) -> torch.Tensor:
    """The Sylvester (natural-order Walsh-Hadamard) matrix of order ``n`` (a power of
    two), entries +-1, float64 [n, n]."""
    if n < 1 or n & (n - 1):
        raise ValueError(f"Hadamard order must be a power of two, got {n}")
    h = torch.ones(1, 1, dtype=torch.float64)
    while h.shape[0] < n:
        h = torch.cat([torch.cat([h, h], 1), torch.cat([h, -h], 1)], 0)
    return h


@cache
def _rotation_cpu(head_size: int, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed * 4099 + head_size)
    if head_size & (head_size - 1) == 0:
        signs = torch.randint(0, 2, (head_size,), generator=g, dtype=torch.int64) * 2 - 1
        r = hadamard_matrix(head_size) * signs.to(torch.float64) / math.sqrt(head_size)
    else:
        a = torch.randn(head_size, head_size, generator=g, dtype=torch.float64)
        q, rr = torch.linalg.qr(a)
        r = q * torch.sign(torch.diagonal(rr))  # Haar-distributed (Mezzadri 2007)
    return r.to(torch.float32).contiguous()


def rotation_matrix(head_size: int, device: Any = None,
                    seed: int = ROTATION_SEED) -> torch.Tensor:
    """The key rotation R, float32 [head_size, head_size], orthogonal; ``y = R @ u``.

    Power-of-two head sizes: ``H diag(signs) / sqrt(D)`` (randomized Hadamard);
    others: a seeded Haar-random orthogonal matrix.  Cached per (head_size, seed).
    """
    if not isinstance(head_size, int) or head_size < 1:
        raise ValueError(f"head_size must be a positive int, got {head_size!r}")
    r = _rotation_cpu(head_size, seed)
    return r if device is None else r.to(device)


@cache
def _codebook_cpu(bits: int, head_size: int) -> tuple[torch.Tensor, torch.Tensor]:
    cb = gaussian_codebook(bits, head_size)
    return (torch.tensor(cb.centroids, dtype=torch.float32),
            torch.tensor(cb.boundaries, dtype=torch.float32))


def codebook_tensors(bits: int, head_size: int, device: Any = None
                     ) -> tuple[torch.Tensor, torch.Tensor]:
    """(centroids float32 [2**bits], boundaries float32 [2**bits - 1]) of the Lloyd-Max
    codebook of N(0, 1/head_size)."""
    c, b = _codebook_cpu(bits, head_size)
    return (c, b) if device is None else (c.to(device), b.to(device))


# ---- bit packing ----------------------------------------------------------------------
def pack_codes(codes: torch.Tensor, bits: int) -> torch.Tensor:
    """Pack integer codes [..., n] (each < 2**bits) into uint8 [..., ceil(n x bits / 8)]
    as a little-endian bit stream (module docstring)."""
    n = codes.shape[-1]
    nbytes = math.ceil(n * bits / 8)
    c = codes.to(torch.int64)
    if bits == 8:
        return c.to(torch.uint8)
    pad = (-n) % 8
    if pad:
        c = torch.nn.functional.pad(c, (0, pad))
    c = c.reshape(*c.shape[:-1], -1, 8)
    shifts = torch.arange(8, device=c.device, dtype=torch.int64) * bits
    word = (c << shifts).sum(-1)  # [..., G], at most 32 bits
    m = torch.arange(bits, device=c.device, dtype=torch.int64) * 8
    out = (word.unsqueeze(-1) >> m) & 0xFF  # [..., G, bits]
    out = out.reshape(*out.shape[:-2], -1)[..., :nbytes]
    return out.to(torch.uint8)


def unpack_codes(packed: torch.Tensor, bits: int, n: int) -> torch.Tensor:
    """Inverse of :func:`pack_codes`: uint8 [..., ceil(n x bits / 8)] -> int64 [..., n]."""
    p = packed.to(torch.int64)
    if bits == 8:
        return p[..., :n]
    i = torch.arange(n, device=p.device, dtype=torch.int64)
    g, k = i // 8, i % 8
    word = torch.zeros(*p.shape[:-1], n, dtype=torch.int64, device=p.device)
    for m in range(bits):
        idx = g * bits + m
        valid = idx < p.shape[-1]
        byte = p[..., idx.clamp(max=p.shape[-1] - 1)] * valid
        word |= byte << (8 * m)
    return (word >> (k * bits)) & ((1 << bits) - 1)


def _fp16_to_bytes(x: torch.Tensor) -> torch.Tensor:
    """fp16 values [...] -> uint8 [..., 2] (little-endian, host-endianness independent)."""
    bits = x.to(torch.float16).view(torch.int16).to(torch.int32) & 0xFFFF
    return torch.stack([bits & 0xFF, bits >> 8], -1).to(torch.uint8)


def _bytes_to_fp16(b: torch.Tensor) -> torch.Tensor:
    """uint8 [..., 2] -> float16 [...]."""
    bits = b[..., 0].to(torch.int32) | (b[..., 1].to(torch.int32) << 8)
    bits = torch.where(bits >= 32768, bits - 65536, bits)
    return bits.to(torch.int16).view(torch.float16)


# ---- keys -----------------------------------------------------------------------------
def quantize_keys(key: torch.Tensor, scheme: Any) -> tuple[torch.Tensor, torch.Tensor]:
    """Quantize keys with rotation + Lloyd-Max codes (``kb`` < 8).

    Parameters
    ----------
    key: float tensor [N, D] (any float dtype; computed in float32).
    scheme: a TurboQuant scheme (name, QuantScheme or TurboQuantConfig) with kb < 8.

    Returns
    -------
    codes: int64 [N, D], each in [0, 2**kb).
    scale: float16 [N]: the key norm, or with norm correction norm / ||centroid[codes]||.
    """
    cfg = turboquant_config(scheme)
    if cfg.key_is_fp8:
        raise ValueError("8-bit TurboQuant keys are fp8 values, not codes")
    x = key.to(torch.float32)
    d = x.shape[-1]
    r = rotation_matrix(d, x.device)
    cent, bnd = codebook_tensors(cfg.key_bits, d, x.device)
    norm = torch.sqrt((x * x).sum(-1))
    u = x / torch.clamp(norm, min=1e-30).unsqueeze(-1)
    y = u @ r.T
    codes = (y.unsqueeze(-1) > bnd).sum(-1)
    if cfg.norm_correction:
        yh = cent[codes]
        scale = norm / torch.sqrt((yh * yh).sum(-1))
    else:
        scale = norm
    return codes, scale.to(torch.float16)


def dequantize_keys(codes: torch.Tensor, scale: torch.Tensor, scheme: Any) -> torch.Tensor:
    """Keys float32 [N, D] from codes int [N, D] and fp16 scales [N] (``s R^T y^``)."""
    cfg = turboquant_config(scheme)
    d = codes.shape[-1]
    r = rotation_matrix(d, codes.device)
    cent, _ = codebook_tensors(cfg.key_bits, d, codes.device)
    yh = cent[codes.to(torch.int64)]
    return (yh @ r) * scale.to(torch.float32).unsqueeze(-1)


def quantize_dequantize_keys(key: torch.Tensor, scheme: Any) -> torch.Tensor:
    """Round trip of keys float [N, D] through the scheme's key format (float32 out)."""
    cfg = turboquant_config(scheme)
    if cfg.key_is_fp8:
        return _fp8(key.to(torch.float32)).to(torch.float32)
    return dequantize_keys(*quantize_keys(key, cfg), cfg)


def _fp8(x: torch.Tensor) -> torch.Tensor:
    return torch.clamp(x, -FP8_MAX, FP8_MAX).to(torch.float8_e4m3fn)


# ---- values ---------------------------------------------------------------------------
def quantize_values(value: torch.Tensor, bits: int
                    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Asymmetric uniform min/max quantization per row.

    value: float [N, Dv].  Returns codes int64 [N, Dv] in [0, 2**bits), scale float16
    [N] and zero point float16 [N] (``v ~= code x scale + zero``).
    """
    v = value.to(torch.float32)
    levels = (1 << bits) - 1
    vmin = v.min(-1).values
    vmax = v.max(-1).values
    scale16 = ((vmax - vmin) / levels).to(torch.float16)
    zero16 = vmin.to(torch.float16)
    s = scale16.to(torch.float32).unsqueeze(-1)
    z = zero16.to(torch.float32).unsqueeze(-1)
    q = torch.floor((v - z) / torch.where(s > 0, s, torch.ones_like(s)) + 0.5)
    q = torch.where(s > 0, q, torch.zeros_like(q))
    q = torch.clamp(q, 0, levels)
    return q.to(torch.int64), scale16, zero16


def dequantize_values(codes: torch.Tensor, scale: torch.Tensor,
                      zero: torch.Tensor) -> torch.Tensor:
    """float32 [N, Dv] = codes x scale + zero (scale, zero: [N])."""
    return (codes.to(torch.float32) * scale.to(torch.float32).unsqueeze(-1)
            + zero.to(torch.float32).unsqueeze(-1))


# ---- slots ----------------------------------------------------------------------------
def encode_slots(key: torch.Tensor, value: torch.Tensor, scheme: Any) -> torch.Tensor:
    """Encode K [N, D] and V [N, Dv] into uint8 slots [N, slot_bytes] (torch reference)."""
    cfg = turboquant_config(scheme)
    n, d = key.shape
    dv = value.shape[-1]
    lay = slot_layout(cfg, d, dv)
    out = torch.zeros(n, lay.slot_bytes, dtype=torch.uint8, device=key.device)
    if cfg.key_is_fp8:
        out[:, :d] = _fp8(key.to(torch.float32)).view(torch.uint8)
    else:
        codes, scale = quantize_keys(key, cfg)
        out[:, :lay.key_codes] = pack_codes(codes, cfg.key_bits)
        out[:, lay.key_scale:lay.key_scale + 2] = _fp16_to_bytes(scale)
    vc, vs, vz = quantize_values(value, cfg.value_bits)
    out[:, lay.value_offset:lay.value_scale] = pack_codes(vc, cfg.value_bits)
    out[:, lay.value_scale:lay.value_scale + 2] = _fp16_to_bytes(vs)
    out[:, lay.value_zero:lay.value_zero + 2] = _fp16_to_bytes(vz)
    return out


def decode_slots(slots: torch.Tensor, scheme: Any, head_size: int,
                 head_size_v: int | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Decode uint8 slots [N, slot_bytes] into (K float32 [N, D], V float32 [N, Dv])."""
    cfg = turboquant_config(scheme)
    lay = slot_layout(cfg, head_size, head_size_v)
    if slots.shape[-1] != lay.slot_bytes:
        raise ValueError(f"slots have {slots.shape[-1]} bytes, {cfg.name} at head_size "
                         f"{head_size}/{lay.head_size_v} needs {lay.slot_bytes}")
    if cfg.key_is_fp8:
        k = slots[:, :head_size].contiguous().view(torch.float8_e4m3fn).to(torch.float32)
    else:
        codes = unpack_codes(slots[:, :lay.key_codes], cfg.key_bits, head_size)
        scale = _bytes_to_fp16(slots[:, lay.key_scale:lay.key_scale + 2])
        k = dequantize_keys(codes, scale, cfg)
    vcodes = unpack_codes(slots[:, lay.value_offset:lay.value_scale], cfg.value_bits,
                          lay.head_size_v)
    vs = _bytes_to_fp16(slots[:, lay.value_scale:lay.value_scale + 2])
    vz = _bytes_to_fp16(slots[:, lay.value_zero:lay.value_zero + 2])
    return k, dequantize_values(vcodes, vs, vz)


def _config(scheme: Any) -> TurboQuantConfig:
    return turboquant_config(scheme)
