"""TurboQuant store / dequantize: torch reference and Triton, behind one dispatcher.

The paged cache of one layer is a uint8 tensor ``kv_cache [num_blocks, block_size,
num_kv_heads, slot_bytes]`` (its block stride may exceed ``block_size x num_kv_heads x
slot_bytes`` when the page is padded; the last axis must be contiguous).  Slot ``s`` is
token ``s % block_size`` of block ``s // block_size``; one slot holds K and V of one
token of one head (layout: :mod:`kvcore_turboquant.quantizer`).

Dispatch (``impl="auto"``): Triton for CUDA tensors or when ``TRITON_INTERPRET=1``, the
torch reference otherwise; ``impl="torch"`` / ``"triton"`` force one.

Example
-------
>>> import torch
>>> from kvcore_turboquant.kernels import (allocate_kv_cache, turboquant_store,
...                                        turboquant_dequant)
>>> cache = allocate_kv_cache(4, 16, 2, "turboquant_4bit_nc", head_size=128)
>>> k, v = torch.randn(3, 2, 128), torch.randn(3, 2, 128)
>>> turboquant_store(k, v, cache, torch.tensor([0, 17, -1]), "turboquant_4bit_nc",
...                  impl="torch")
>>> k2, v2 = turboquant_dequant(cache, torch.tensor([0, 17]), "turboquant_4bit_nc",
...                             impl="torch")
>>> k2.shape, v2.shape
(torch.Size([2, 2, 128]), torch.Size([2, 2, 128]))
"""

from __future__ import annotations

import os
from typing import Any

import torch

from kvcore.errors import KernelArgumentError
from kvcore.ops.checks import check_dtype, check_ids, index_tensor
from kvcore_turboquant.quantizer import (
    codebook_tensors,
    decode_slots,
    encode_slots,
    rotation_matrix,
    slot_layout,
)
from kvcore_turboquant.schemes import TurboQuantConfig, turboquant_config

__all__ = [
    "allocate_kv_cache",
    "cache_view",
    "infer_head_size",
    "turboquant_store",
    "turboquant_store_ref",
    "turboquant_store_triton",
    "turboquant_dequant",
    "turboquant_dequant_ref",
    "turboquant_dequant_triton",
]

_BT = 16  # tokens per Triton program
_CH = 64  # rotated coordinates per tl.dot (rotation tile: next_pow2(D) x 64 fp32)


def allocate_kv_cache(num_blocks: int, block_size: int, num_kv_heads: int, scheme: Any, *,
                      head_size: int, head_size_v: int | None = None,
                      device: Any = None) -> torch.Tensor:
    """A zeroed uint8 cache [num_blocks, block_size, num_kv_heads, slot_bytes]."""
    lay = slot_layout(scheme, head_size, head_size_v)
    return torch.zeros(num_blocks, block_size, num_kv_heads, lay.slot_bytes,
                       dtype=torch.uint8, device=device)


def cache_view(raw: torch.Tensor, spec: Any) -> torch.Tensor:
    """View a planned layer tensor (uint8, ``num_blocks x spec.page_size_bytes`` bytes,
    padding included) as [num_blocks, block_size, num_kv_heads, slot_bytes].

    ``spec`` is a :class:`~kvcore_turboquant.spec.TurboQuantFullAttentionSpec` (or any
    attention spec with a TurboQuant kv_cache_dtype).
    """
    slot = turboquant_config(spec.kv_cache_dtype).slot_bytes(
        spec.head_size, spec.effective_head_size_v)
    page = spec.page_size_bytes
    flat = raw.view(torch.uint8).reshape(-1)
    if flat.numel() % page:
        raise ValueError(f"tensor of {flat.numel()} bytes is not a whole number of "
                         f"{page}-byte pages")
    nb = flat.numel() // page
    return flat.as_strided((nb, spec.block_size, spec.num_kv_heads, slot),
                           (page, spec.num_kv_heads * slot, slot, 1))


def infer_head_size(kv_cache: torch.Tensor, scheme: Any) -> int:
    """The head size D (= Dv), a multiple of 8, whose slot size equals
    ``kv_cache.shape[-1]`` (packed sizes round up, so D = 126, 127, 128 share a 3-bit
    slot; among multiples of 8 the slot size is strictly increasing).  Raises ValueError
    when none matches (then pass ``head_size``)."""
    cfg = turboquant_config(scheme)
    nbytes = kv_cache.shape[-1]
    hits = [d for d in range(8, 4097, 8) if cfg.slot_bytes(d) == nbytes]
    if len(hits) != 1:
        raise ValueError(
            f"cannot infer head_size of {cfg.name} from a {nbytes}-byte slot "
            f"({'no' if not hits else len(hits)} head sizes match); pass head_size")
    return hits[0]


def _err(message: str, field: str, value: Any = None) -> KernelArgumentError:
    return KernelArgumentError(message, field=field, value=value)


def _check_cache(kv_cache: torch.Tensor, cfg: TurboQuantConfig, d: int, dv: int) -> None:
    if not isinstance(kv_cache, torch.Tensor) or kv_cache.dtype != torch.uint8 \
            or kv_cache.dim() != 4:
        raise _err("kv_cache must be uint8 [num_blocks, block_size, num_kv_heads, "
                   f"slot_bytes], got {getattr(kv_cache, 'dtype', type(kv_cache))} "
                   f"{tuple(getattr(kv_cache, 'shape', ()))}", "kv_cache")
    want = cfg.slot_bytes(d, dv)
    if kv_cache.shape[-1] != want or kv_cache.stride(-1) != 1:
        raise _err(f"kv_cache slots must be {want} contiguous bytes for {cfg.name} "
                   f"at head_size {d}/{dv}, got {kv_cache.shape[-1]} "
                   f"(stride {kv_cache.stride(-1)})", "kv_cache", kv_cache.shape[-1])


def _check_slots(kv_cache: torch.Tensor, slots: Any, name: str = "slot_mapping"
                 ) -> torch.Tensor:
    """Slots as an int tensor (a list is converted), in ``[-1, num_blocks x
    block_size)``; checked on the host before any launch (kvcore.ops.checks)."""
    slots = index_tensor(slots, name, kv_cache.device)
    if slots.dim() == 1:
        nb, bs = kv_cache.shape[0], kv_cache.shape[1]
        check_ids([(slots, name, -1, nb * bs, "slot id")],
                  f" (kv_cache has {nb} blocks x block_size {bs})")
    return slots


def _use_triton(impl: str, t: torch.Tensor) -> bool:
    if impl not in ("auto", "torch", "triton"):
        raise ValueError(f"impl must be 'auto', 'torch' or 'triton', got {impl!r}")
    if impl == "auto":
        return t.is_cuda or os.environ.get("TRITON_INTERPRET", "") == "1"
    return impl == "triton"


# ---- store ----------------------------------------------------------------------------
def turboquant_store(key: torch.Tensor, value: torch.Tensor, kv_cache: torch.Tensor,
                     slot_mapping: torch.Tensor, scheme: Any, *, impl: str = "auto") -> None:
    """Quantize K/V of new tokens and write them into their slots (in place).

    Parameters
    ----------
    key: float16/bfloat16/float32 [T, H, D]
    value: same dtype family [T, H, Dv]
    kv_cache: uint8 [num_blocks, block_size, H, slot_bytes]
    slot_mapping: int32/int64 [T]; -1 = padding token, skipped
    scheme: TurboQuant kv_cache_dtype name, QuantScheme or TurboQuantConfig
    impl: "auto" | "torch" | "triton"

    Raises kvcore.errors.KernelArgumentError (a KVCoreError, a ValueError), before any
    launch on both paths, on shape / size mismatches, a slot outside
    ``[-1, num_blocks x block_size)``, a non-integer ``slot_mapping`` (a list of ints is
    converted) or key / value not bf16/fp16/fp32; UnknownKVCacheDtypeError on a
    non-TurboQuant scheme.
    """
    (turboquant_store_triton if _use_triton(impl, key) else turboquant_store_ref)(
        key, value, kv_cache, slot_mapping, scheme)


def _check_store(key, value, kv_cache, slot_mapping, cfg) -> torch.Tensor:
    """All checks of a store, before any launch; returns ``slot_mapping`` as a tensor."""
    for name, t in (("key", key), ("value", value), ("kv_cache", kv_cache)):
        if not isinstance(t, torch.Tensor):
            raise _err(f"{name} must be a torch.Tensor; got {type(t).__name__}", name)
    if key.dim() != 3 or value.dim() != 3 or key.shape[:2] != value.shape[:2]:
        raise _err(f"key [T, H, D] and value [T, H, Dv] expected, got "
                   f"{tuple(key.shape)} and {tuple(value.shape)}", "key", tuple(key.shape))
    check_dtype(key, "key")
    check_dtype(value, "value")
    _check_cache(kv_cache, cfg, key.shape[2], value.shape[2])
    slot_mapping = index_tensor(slot_mapping, "slot_mapping", kv_cache.device)
    if slot_mapping.shape != (key.shape[0],):
        raise _err(f"slot_mapping must be [T={key.shape[0]}], got "
                   f"{tuple(slot_mapping.shape)}", "slot_mapping", tuple(slot_mapping.shape))
    if kv_cache.shape[2] != key.shape[1]:
        raise _err(f"kv_cache has {kv_cache.shape[2]} heads, key has {key.shape[1]}",
                   "kv_cache", kv_cache.shape[2])
    return _check_slots(kv_cache, slot_mapping)


def turboquant_store_ref(key: torch.Tensor, value: torch.Tensor, kv_cache: torch.Tensor,
                         slot_mapping: torch.Tensor, scheme: Any) -> None:
    """Torch reference of :func:`turboquant_store`."""
    cfg = turboquant_config(scheme)
    slot_mapping = _check_store(key, value, kv_cache, slot_mapping, cfg)
    valid = slot_mapping >= 0
    slots = slot_mapping[valid].to(torch.int64)
    if slots.numel() == 0:
        return
    t, h, d = key[valid].shape
    enc = encode_slots(key[valid].reshape(t * h, d), value[valid].reshape(t * h, -1), cfg)
    bs = kv_cache.shape[1]
    kv_cache[slots // bs, slots % bs] = enc.reshape(t, h, -1)


def turboquant_store_triton(key: torch.Tensor, value: torch.Tensor, kv_cache: torch.Tensor,
                            slot_mapping: torch.Tensor, scheme: Any) -> None:
    """Triton version of :func:`turboquant_store` (CUDA, or CPU under TRITON_INTERPRET=1)."""
    import triton

    from kvcore_turboquant._triton_kernels import turboquant_store_kernel

    cfg = turboquant_config(scheme)
    slot_mapping = _check_store(key, value, kv_cache, slot_mapping, cfg)
    t, h, d = key.shape
    dv = value.shape[2]
    if t == 0:
        return
    key = key if key.stride(-1) == 1 else key.contiguous()
    value = value if value.stride(-1) == 1 else value.contiguous()
    dev = key.device
    lay = slot_layout(cfg, d, dv)
    kb = cfg.key_bits if cfg.key_bits != 8 else 2  # tables unused for fp8 keys
    rot = rotation_matrix(d, dev)
    cent, bnd = codebook_tensors(kb, d, dev)
    bd = max(16, triton.next_power_of_2(d))
    bdv = max(16, triton.next_power_of_2(dv))
    grid = (triton.cdiv(t, _BT), h)
    turboquant_store_kernel[grid](
        key, value, kv_cache, slot_mapping.contiguous(), rot, bnd, cent,
        t, key.stride(0), key.stride(1), value.stride(0), value.stride(1),
        kv_cache.stride(0), kv_cache.stride(1), kv_cache.stride(2), kv_cache.shape[1],
        D=d, DV=dv, BD=bd, BDV=bdv, BT=_BT, KB=cfg.key_bits, VB=cfg.value_bits,
        NC=cfg.norm_correction, KC=lay.key_codes, KEY_BYTES=lay.key_bytes,
        VC=lay.value_codes, CH=min(_CH, bd))


# ---- dequantize -----------------------------------------------------------------------
def turboquant_dequant(kv_cache: torch.Tensor, block_table_or_slots: torch.Tensor,
                       scheme: Any, *, head_size: int | None = None,
                       head_size_v: int | None = None,
                       out_dtype: torch.dtype = torch.float32,
                       impl: str = "auto") -> tuple[torch.Tensor, torch.Tensor]:
    """Read K/V back from the cache.

    Parameters
    ----------
    kv_cache: uint8 [num_blocks, block_size, H, slot_bytes]
    block_table_or_slots: int [N] slot indices, or a block table int [R, M] (block ids,
        -1 = none); -1 entries give zeros.  Checked before any launch
        (KernelArgumentError): slots in ``[-1, num_blocks x block_size)``, block ids
        in ``[-1, num_blocks)`` (every column is read).
    scheme: TurboQuant kv_cache_dtype name, QuantScheme or TurboQuantConfig
    head_size, head_size_v: D and Dv (default: inferred from the slot size with Dv = D)
    out_dtype: dtype of the returned tensors

    Returns
    -------
    (key, value): [N, H, D] and [N, H, Dv] for slots; [R, M x block_size, H, D] and
    [R, M x block_size, H, Dv] for a block table.
    """
    cfg = turboquant_config(scheme)
    d = head_size if head_size is not None else infer_head_size(kv_cache, cfg)
    dv = d if head_size_v is None else head_size_v
    _check_cache(kv_cache, cfg, d, dv)
    idx = _check_slots(kv_cache, block_table_or_slots, "block_table_or_slots")
    bs = kv_cache.shape[1]
    if idx.dim() == 2:
        # every column is read: each block id in [-1, num_blocks)
        check_ids([(idx, "block_table_or_slots", -1, kv_cache.shape[0], "block id")],
                  f" (kv_cache has {kv_cache.shape[0]} blocks)")
        r, m = idx.shape
        offs = torch.arange(bs, device=idx.device, dtype=torch.int64)
        blk = idx.to(torch.int64).unsqueeze(-1)
        slots = torch.where(blk >= 0, blk * bs + offs, torch.full_like(blk, -1))
        fn = turboquant_dequant_triton if _use_triton(impl, kv_cache) \
            else turboquant_dequant_ref
        k, v = fn(kv_cache, slots.reshape(-1), cfg, d, dv, out_dtype, _checked=True)
        return (k.reshape(r, m * bs, *k.shape[1:]), v.reshape(r, m * bs, *v.shape[1:]))
    if idx.dim() != 1:
        raise _err(f"expected slots [N] or a block table [R, M], got "
                   f"{tuple(idx.shape)}", "block_table_or_slots", tuple(idx.shape))
    fn = turboquant_dequant_triton if _use_triton(impl, kv_cache) else turboquant_dequant_ref
    return fn(kv_cache, idx, cfg, d, dv, out_dtype, _checked=True)


def turboquant_dequant_ref(kv_cache: torch.Tensor, slots: torch.Tensor, scheme: Any,
                           head_size: int, head_size_v: int,
                           out_dtype: torch.dtype = torch.float32, *,
                           _checked: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """Torch reference: slots int [N] -> (key [N, H, D], value [N, H, Dv])."""
    cfg = turboquant_config(scheme)
    if not _checked:  # turboquant_dequant checked them already
        _check_cache(kv_cache, cfg, head_size, head_size_v)
        slots = _check_slots(kv_cache, slots, "slots")
    n = slots.shape[0]
    h = kv_cache.shape[2]
    bs = kv_cache.shape[1]
    key = torch.zeros(n, h, head_size, dtype=out_dtype, device=kv_cache.device)
    value = torch.zeros(n, h, head_size_v, dtype=out_dtype, device=kv_cache.device)
    valid = slots >= 0
    s = slots[valid].to(torch.int64)
    if s.numel():
        raw = kv_cache[s // bs, s % bs].reshape(s.numel() * h, -1)
        k, v = decode_slots(raw, cfg, head_size, head_size_v)
        key[valid] = k.reshape(-1, h, head_size).to(out_dtype)
        value[valid] = v.reshape(-1, h, head_size_v).to(out_dtype)
    return key, value


def turboquant_dequant_triton(kv_cache: torch.Tensor, slots: torch.Tensor, scheme: Any,
                              head_size: int, head_size_v: int,
                              out_dtype: torch.dtype = torch.float32, *,
                              _checked: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """Triton version of :func:`turboquant_dequant_ref`."""
    import triton

    from kvcore_turboquant._triton_kernels import turboquant_dequant_kernel

    cfg = turboquant_config(scheme)
    if not _checked:
        _check_cache(kv_cache, cfg, head_size, head_size_v)
        slots = _check_slots(kv_cache, slots, "slots")
    n = slots.shape[0]
    h = kv_cache.shape[2]
    dev = kv_cache.device
    d, dv = head_size, head_size_v
    key = torch.empty(n, h, d, dtype=out_dtype, device=dev)
    value = torch.empty(n, h, dv, dtype=out_dtype, device=dev)
    if n == 0:
        return key, value
    lay = slot_layout(cfg, d, dv)
    kb = cfg.key_bits if cfg.key_bits != 8 else 2
    rot = rotation_matrix(d, dev)
    cent, _ = codebook_tensors(kb, d, dev)
    bd = max(16, triton.next_power_of_2(d))
    bdv = max(16, triton.next_power_of_2(dv))
    grid = (triton.cdiv(n, _BT), h)
    turboquant_dequant_kernel[grid](
        kv_cache, slots.contiguous(), rot, cent, key, value,
        n, kv_cache.stride(0), kv_cache.stride(1), kv_cache.stride(2), kv_cache.shape[1],
        key.stride(0), key.stride(1), value.stride(0), value.stride(1),
        D=d, DV=dv, BD=bd, BDV=bdv, BT=_BT, KB=cfg.key_bits, VB=cfg.value_bits,
        KC=lay.key_codes, KEY_BYTES=lay.key_bytes, VC=lay.value_codes, CH=min(_CH, bd))
    return key, value
