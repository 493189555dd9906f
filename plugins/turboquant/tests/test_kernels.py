"""Store / dequantize kernels: the Triton kernels (run by the interpreter, see
conftest.py) against the torch reference, byte for byte; slot mapping, padding, block
tables and padded pages."""

from __future__ import annotations

import importlib.util

import pytest
import torch
from kvcore_turboquant.kernels import (
    allocate_kv_cache,
    cache_view,
    infer_head_size,
    turboquant_dequant,
    turboquant_store,
)
from kvcore_turboquant.quantizer import decode_slots, encode_slots, slot_layout
from kvcore_turboquant.spec import TurboQuantFullAttentionSpec

PRESETS = ["turboquant_k8v4", "turboquant_4bit_nc", "turboquant_k3v4_nc",
           "turboquant_3bit_nc"]
BLOCK = 16
#: Triton paths skip cleanly without triton (issue 15 item 14); the torch references run
HAS_TRITON = importlib.util.find_spec("triton") is not None
requires_triton = pytest.mark.skipif(not HAS_TRITON, reason="triton is not installed")


def _inputs(t, h, d, dv, seed):
    g = torch.Generator().manual_seed(seed)
    k = (torch.randn(t, h, d, generator=g) * 2).to(torch.bfloat16)
    v = torch.randn(t, h, dv, generator=g).to(torch.bfloat16)
    slots = torch.randperm(4 * BLOCK, generator=g)[:t]
    slots[1] = -1  # a padding token
    return k, v, slots


@requires_triton
@pytest.mark.parametrize("scheme,d,dv", [(s, 128, 128) for s in PRESETS] + [
    ("turboquant_4bit_nc", 96, 96), ("turboquant_k8v4", 96, 96),
    ("turboquant_k2v8", 64, 64), ("turboquant_k3v2", 192, 128),
    ("turboquant_3bit_nc", 256, 256), ("turboquant_k2v3_nc", 40, 24)])
def test_triton_matches_reference_bytes(scheme, d, dv):
    k, v, slots = _inputs(12, 2, d, dv, seed=d + dv)
    ref = allocate_kv_cache(4, BLOCK, 2, scheme, head_size=d, head_size_v=dv)
    tri = ref.clone()
    turboquant_store(k, v, ref, slots, scheme, impl="torch")
    turboquant_store(k, v, tri, slots, scheme, impl="triton")
    # identical codes, norms, scales and zero points -- and here also fp8 payloads,
    # because the kernel encodes fp8 with integer arithmetic (see _triton_kernels.py)
    assert torch.equal(ref, tri)
    # the padding token wrote nothing: exactly the 11 valid slots are non-zero
    written = ref.reshape(-1, 2, ref.shape[-1]).ne(0).any(-1).any(-1)
    assert written.sum() == 11
    keys_r, vals_r = turboquant_dequant(ref, slots, scheme, head_size=d, head_size_v=dv,
                                        impl="torch")
    keys_t, vals_t = turboquant_dequant(ref, slots, scheme, head_size=d, head_size_v=dv,
                                        impl="triton")
    assert torch.equal(vals_r, vals_t)
    assert torch.allclose(keys_r, keys_t, atol=1e-5, rtol=1e-5)
    # padding slot reads back as zeros, the others as the reference decode of its bytes
    assert keys_t[1].eq(0).all() and vals_t[1].eq(0).all()
    ok = slots >= 0
    kd, vd = decode_slots(encode_slots(k[ok].reshape(-1, d), v[ok].reshape(-1, dv),
                                       scheme), scheme, d, dv)
    assert torch.allclose(keys_t[ok].reshape(-1, d), kd, atol=1e-5)
    assert torch.equal(vals_t[ok].reshape(-1, dv), vd)


def test_round_trip_error_is_small():
    # relative K error ~ the 4-bit Lloyd-Max MSE 0.0095 (plus bf16 input rounding);
    # V error <= half a step of (max - min) / 15
    k, v, slots = _inputs(16, 2, 128, 128, seed=7)
    cache = allocate_kv_cache(4, BLOCK, 2, "turboquant_4bit_nc", head_size=128)
    turboquant_store(k, v, cache, slots, "turboquant_4bit_nc")
    kh, vh = turboquant_dequant(cache, slots, "turboquant_4bit_nc")
    ok = slots >= 0
    rel = ((kh[ok] - k[ok].float()) ** 2).sum(-1) / (k[ok].float() ** 2).sum(-1)
    assert rel.mean() < 0.013
    vf = v[ok].float()
    step = (vf.amax(-1) - vf.amin(-1)) / 15
    assert ((vh[ok] - vf).abs() <= step.unsqueeze(-1) / 2 * 1.01 + 1e-3).all()


def test_block_table_dequant():
    scheme = "turboquant_3bit_nc"
    k, v, _ = _inputs(2 * BLOCK, 1, 128, 128, seed=3)
    cache = allocate_kv_cache(4, BLOCK, 1, scheme, head_size=128)
    # request 0 in blocks 2 then 0; slots 2*16 .. 2*16+15, then 0..15
    slots = torch.cat([torch.arange(32, 48), torch.arange(0, 16)])
    turboquant_store(k, v, cache, slots, scheme)
    table = torch.tensor([[2, 0], [3, -1]])
    kb, vb = turboquant_dequant(cache, table, scheme)
    assert kb.shape == (2, 32, 1, 128) and vb.shape == (2, 32, 1, 128)
    ks, vs = turboquant_dequant(cache, slots, scheme)
    assert torch.equal(kb[0], ks) and torch.equal(vb[0], vs)
    assert kb[1, 16:].eq(0).all()  # block id -1


@requires_triton
def test_padded_page_view():
    # a planned tensor whose page was padded to 20,000 B (real page 16 x 2 x 134 = 4,288)
    spec = TurboQuantFullAttentionSpec(block_size=BLOCK, num_kv_heads=2, head_size=128,
                                       page_size_padded=20_000)
    raw = torch.zeros(3 * 20_000, dtype=torch.uint8)
    cache = cache_view(raw, spec)
    assert cache.shape == (3, BLOCK, 2, 134) and cache.stride(0) == 20_000
    k, v, slots = _inputs(5, 2, 128, 128, seed=5)
    slots = torch.tensor([0, 17, 33, 47, -1])
    turboquant_store(k, v, cache, slots, spec.kv_cache_dtype, impl="triton")
    ref = torch.zeros_like(raw)
    turboquant_store(k, v, cache_view(ref, spec), slots, spec.kv_cache_dtype, impl="torch")
    assert torch.equal(raw, ref)
    assert raw.reshape(3, 20_000)[:, BLOCK * 2 * 134:].eq(0).all()  # padding untouched
    kh, _ = turboquant_dequant(cache, slots[:4], spec.kv_cache_dtype)
    assert kh.shape == (4, 2, 128)


def test_errors():
    cache = allocate_kv_cache(1, BLOCK, 2, "turboquant_3bit_nc", head_size=128)
    assert infer_head_size(cache, "turboquant_3bit_nc") == 128
    k = torch.zeros(2, 2, 128)
    with pytest.raises(ValueError, match="slots must be 118"):
        turboquant_store(k, k, cache, torch.tensor([0, 1]), "turboquant_k3v4_nc")
    with pytest.raises(ValueError, match="slot_mapping"):
        turboquant_store(k, k, cache, torch.tensor([0]), "turboquant_3bit_nc")
    with pytest.raises(ValueError, match="impl"):
        turboquant_store(k, k, cache, torch.tensor([0, 1]), "turboquant_3bit_nc",
                         impl="cuda")
    assert slot_layout("turboquant_3bit_nc", 128).slot_bytes == cache.shape[-1]
