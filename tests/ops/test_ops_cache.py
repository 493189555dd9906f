"""reshape_and_cache / gather_cache / copy_blocks: hand-computed values for the torch
references, and the Triton kernels (interpreted) equal to the references byte for byte."""

from __future__ import annotations

import importlib.util
import zlib

import pytest

torch = pytest.importorskip("torch")

from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from kvcore.errors import KVCoreError  # noqa: E402
from kvcore.ops import (  # noqa: E402
    copy_blocks,
    copy_blocks_ref,
    gather_cache,
    gather_cache_ref,
    reshape_and_cache,
    reshape_and_cache_ref,
)

needs_triton = pytest.mark.skipif(importlib.util.find_spec("triton") is None,
                                  reason="triton is not installed")

CACHE_DTYPES = {
    "auto": torch.bfloat16,
    "float32": torch.float32,
    "float16": torch.float16,
    "fp8": torch.float8_e4m3fn,
    "fp8_e5m2": torch.float8_e5m2,
    "int8_per_token_head": torch.int8,
    "fp8_per_token_head": torch.float8_e4m3fn,
}


def make_caches(kv_dtype, num_blocks, block_size, heads, d, dv, head_major=False,
                blocks=None):
    """Strided caches: head-major planes, or K and V interleaved per token-head row with
    8 channels of padding (``blocks`` gets the tensors copy_blocks must copy)."""
    dt = CACHE_DTYPES[kv_dtype]
    blocks = [] if blocks is None else blocks
    if head_major:
        kc = torch.zeros(num_blocks, heads, block_size, d, dtype=dt).transpose(1, 2)
        vc = torch.zeros(num_blocks, heads, block_size, dv, dtype=dt).transpose(1, 2)
        blocks += [kc, vc]
    else:
        page = torch.zeros(num_blocks, block_size, heads, d + dv + 8, dtype=dt)
        kc, vc = page[..., :d], page[..., d:d + dv]
        blocks.append(page)
    if "per_token_head" in kv_dtype:
        ks = torch.zeros(num_blocks, block_size, heads)
        vs = torch.zeros(num_blocks, block_size, heads)
        blocks += [ks, vs]
    else:
        ks, vs = 0.05, torch.tensor([0.02])
    return kc, vc, ks, vs


# ---- references against hand-computed values -----------------------------------------

def test_ref_float_write_skips_padding_slots():
    kc = torch.zeros(3, 4, 1, 2)
    vc = torch.zeros(3, 4, 1, 2)
    key = torch.tensor([[[1.0, 2.0]], [[3.0, 4.0]], [[5.0, 6.0]]])
    value = -key
    # slot 6 = block 1, offset 2; slot 9 = block 2, offset 1; -1 skipped
    reshape_and_cache_ref(key, value, kc, vc, torch.tensor([6, -1, 9]), "auto")
    assert kc[1, 2, 0].tolist() == [1.0, 2.0]
    assert kc[2, 1, 0].tolist() == [5.0, 6.0]
    assert vc[2, 1, 0].tolist() == [-5.0, -6.0]
    assert int((kc != 0).sum()) == 4  # nothing else written


def test_ref_fp8_per_tensor_by_hand():
    kc = torch.zeros(1, 2, 1, 2, dtype=torch.float8_e4m3fn)
    vc = torch.zeros_like(kc)
    key = torch.tensor([[[1.0, 1000.0]], [[-0.75, 3.0]]])
    reshape_and_cache_ref(key, key, kc, vc, torch.tensor([0, 1]), "fp8", 0.5, 1.0)
    # x / 0.5: 2.0 exact; 2000 saturates at e4m3's largest finite value 448
    assert kc[0, 0, 0].float().tolist() == [2.0, 448.0]
    assert kc[0, 1, 0].float().tolist() == [-1.5, 6.0]
    assert vc[0, 1, 0].float().tolist() == [-0.75, 3.0]


def test_ref_int8_per_token_head_by_hand():
    kc = torch.zeros(1, 1, 2, 4, dtype=torch.int8)
    vc = torch.zeros_like(kc)
    ks = torch.zeros(1, 1, 2)
    vs = torch.zeros(1, 1, 2)
    key = torch.tensor([[[1.0, -2.0, 0.5, 4.0], [0.0, 0.0, 0.0, 0.0]]])
    reshape_and_cache_ref(key, key, kc, vc, torch.tensor([0]), "int8_per_token_head",
                          ks, vs)
    # scale = 4 / 127; x * 127 / 4 = 31.75, -63.5 (half to even: -64), 15.875, 127
    assert kc[0, 0, 0].tolist() == [32, -64, 16, 127]
    assert ks[0, 0, 0].item() == pytest.approx(4 / 127, rel=1e-7)
    # an all-zero head stores zeros and scale 0 (dequantizes to exact zeros)
    assert kc[0, 0, 1].tolist() == [0, 0, 0, 0] and ks[0, 0, 1].item() == 0.0
    k, _ = gather_cache_ref(kc, vc, torch.tensor([[0]]), torch.tensor([1]),
                            "int8_per_token_head", ks, vs)
    assert k[0, 1].tolist() == [0.0, 0.0, 0.0, 0.0]
    assert k[0, 0].tolist() == pytest.approx([32 * 4 / 127, -64 * 4 / 127,
                                              16 * 4 / 127, 4.0], rel=1e-6)


def test_ref_fp8_per_token_head_by_hand():
    kc = torch.zeros(1, 1, 1, 4, dtype=torch.float8_e4m3fn)
    ks = torch.zeros(1, 1, 1)
    key = torch.tensor([[[2.0, -1.0, 0.25, 0.0]]])
    reshape_and_cache_ref(key, key, kc, kc.clone(), torch.tensor([0]),
                          "fp8_per_token_head", ks, ks.clone())
    # scale = 2 / 448; x / scale = 448, -224, 56, 0: all exact in e4m3
    assert kc[0, 0, 0].float().tolist() == [448.0, -224.0, 56.0, 0.0]
    assert ks.item() == pytest.approx(2 / 448, rel=1e-7)


@settings(max_examples=30, deadline=None)
@given(seed=st.integers(0, 2**31 - 1), kv_dtype=st.sampled_from(
    ["int8_per_token_head", "fp8_per_token_head"]), magnitude=st.sampled_from(
    [1e-3, 1.0, 300.0]))
def test_per_token_head_roundtrip_error_bound(seed, kv_dtype, magnitude):
    g = torch.Generator().manual_seed(seed)
    key = torch.randn(6, 3, 16, generator=g) * magnitude
    kc, vc, ks, vs = make_caches(kv_dtype, 2, 4, 3, 16, 16)
    reshape_and_cache_ref(key, key, kc, vc, torch.arange(6), kv_dtype, ks, vs)
    out, _ = gather_cache_ref(kc, vc, torch.tensor([[0, 1]]), torch.tensor([6]),
                              kv_dtype, ks, vs)
    scale = key.abs().amax(-1, keepdim=True) / (127 if kv_dtype.startswith("int8") else 448)
    err = (out - key).abs()
    if kv_dtype.startswith("int8"):
        bound = scale / 2 * (1 + 1e-5)  # round to nearest step of size `scale`
    else:
        # e4m3: 3 mantissa bits -> half a step is 2**-4 of the value; subnormal step
        # 2**-9 (times the scale)
        bound = key.abs() * 2.0**-4 + scale * 2.0**-10 + 1e-12
    assert bool((err <= bound).all())


def test_gather_reads_back_through_block_table():
    kc = torch.zeros(5, 4, 2, 3)
    vc = torch.zeros(5, 4, 2, 5)
    key = torch.randn(9, 2, 3)
    value = torch.randn(9, 2, 5)
    # request 0: 6 tokens in blocks [3, 1]; request 1: 3 tokens in block [4]
    slots = torch.tensor([12, 13, 14, 15, 4, 5, 16, 17, 18])
    reshape_and_cache_ref(key, value, kc, vc, slots, "auto")
    table = torch.tensor([[3, 1], [4, 0]], dtype=torch.int32)
    k, v = gather_cache_ref(kc, vc, table, torch.tensor([6, 3]), "auto")
    assert torch.equal(k, key) and torch.equal(v, value)


def test_copy_blocks_ref_by_hand():
    cache = torch.arange(4 * 2 * 3, dtype=torch.float32).reshape(4, 2, 3)
    before = cache.clone()
    copy_blocks_ref([cache], torch.tensor([[1, 3], [0, 2]]))
    assert torch.equal(cache[3], before[1]) and torch.equal(cache[2], before[0])
    assert torch.equal(cache[:2], before[:2])


# ---- Triton (interpreter) == reference ---------------------------------------------------

@needs_triton
@pytest.mark.parametrize("kv_dtype", list(CACHE_DTYPES))
@pytest.mark.parametrize("head_major", [False, True])
def test_triton_store_gather_copy_equal_reference(kv_dtype, head_major):
    # a seed fixed across processes (str hashes are salted per process by PYTHONHASHSEED,
    # so hash() gave every run other inputs)
    torch.manual_seed(zlib.crc32(f"{kv_dtype}-{head_major}".encode()) % 1000)
    heads, d, dv, nb, bs, t = 3, 20, 12, 6, 4, 11
    in_dtype = torch.float32 if kv_dtype == "float32" else (
        torch.float16 if kv_dtype == "float16" else torch.bfloat16)
    key = (torch.randn(t, heads, d) * 3).to(in_dtype)
    value = (torch.randn(t, heads, dv) * 3).to(in_dtype)
    key[2, 1] = 0.0  # an all-zero head
    slots = torch.randperm(nb * bs)[:t].to(torch.int32)
    slots[4] = -1
    results = []
    for impl in ("ref", "triton"):
        blocks = []
        kc, vc, ks, vs = make_caches(kv_dtype, nb, bs, heads, d, dv, head_major, blocks)
        reshape_and_cache(key, value, kc, vc, slots, kv_dtype, ks, vs, impl=impl)
        table = torch.tensor([[5, 1, 2], [0, 3, 4]])
        got_k, got_v = gather_cache(kc, vc, table, torch.tensor([10, 9]), kv_dtype, ks,
                                    vs, impl=impl)
        copy_blocks(blocks, [[1, 0], [5, 3]], impl=impl)
        # 1-byte caches compared by value (decoded to float32), not by byte: TRITON_INTERPRET's
        # fp8 emulation stores a negative value that rounds to zero as +0 (0x00) where
        # torch's cast keeps the sign (0x80, -0); both decode to 0 (seed 511 of 0..1000)
        results.append([kc.float() if kc.element_size() == 1 else kc,
                        vc.float() if vc.element_size() == 1 else vc,
                        got_k, got_v] + ([ks, vs] if torch.is_tensor(ks) and ks.dim() == 3
                                         else []))
    for r, tr in zip(*results):
        assert torch.equal(r, tr)


@needs_triton
def test_triton_gather_out_dtype_and_num_tokens():
    kc, vc, ks, vs = make_caches("int8_per_token_head", 4, 4, 2, 8, 8)
    key = torch.randn(7, 2, 8)
    reshape_and_cache(key, key, kc, vc, torch.arange(7), "int8_per_token_head", ks, vs)
    table = torch.tensor([[0, 1]])
    k, v = gather_cache(kc, vc, table, torch.tensor([7]), "int8_per_token_head", ks, vs,
                        out_dtype=torch.bfloat16, num_tokens=7, impl="triton")
    kr, _ = gather_cache_ref(kc, vc, table, torch.tensor([7]), "int8_per_token_head", ks,
                             vs, out_dtype=torch.bfloat16)
    assert k.dtype == torch.bfloat16 and k.shape == (7, 2, 8) and torch.equal(k, kr)


@needs_triton
def test_triton_copy_blocks_on_raw_bytes_and_empty_mapping():
    raw = torch.randint(0, 255, (5, 37), dtype=torch.uint8)  # odd page: byte copies
    before = raw.clone()
    copy_blocks([raw], torch.tensor([[4, 0]]), impl="triton")
    assert torch.equal(raw[0], before[4]) and torch.equal(raw[1:], before[1:])
    copy_blocks([raw], torch.zeros(0, 2, dtype=torch.long), impl="triton")
    assert torch.equal(raw[0], before[4])


# ---- errors -------------------------------------------------------------------------

def test_shape_and_dtype_errors_name_the_argument():
    kc = torch.zeros(2, 4, 2, 8)
    key = torch.zeros(3, 2, 8)
    with pytest.raises(KVCoreError, match="slot_mapping"):
        reshape_and_cache(key, key, kc, kc, torch.zeros(2, dtype=torch.long), "auto")
    with pytest.raises(KVCoreError, match="heads"):
        reshape_and_cache(torch.zeros(3, 4, 8), torch.zeros(3, 4, 8), kc, kc,
                          torch.zeros(3, dtype=torch.long), "auto")
    with pytest.raises(KVCoreError, match="does not store kv_cache_dtype 'fp8'"):
        reshape_and_cache(key, key, kc, kc, torch.zeros(3, dtype=torch.long), "fp8")
    with pytest.raises(KVCoreError, match="k_scale must be the float32 scale plane"):
        ic = torch.zeros(2, 4, 2, 8, dtype=torch.int8)
        reshape_and_cache(key, key, ic, ic, torch.zeros(3, dtype=torch.long),
                          "int8_per_token_head", 1.0, 1.0)
    with pytest.raises(KVCoreError, match="nvfp4"):
        reshape_and_cache(key, key, kc, kc, torch.zeros(3, dtype=torch.long), "nvfp4")
    with pytest.raises(KVCoreError, match="impl"):
        reshape_and_cache(key, key, kc, kc, torch.zeros(3, dtype=torch.long), "auto",
                          impl="cuda")
    with pytest.raises(KVCoreError, match="src_to_dst"):
        copy_blocks([kc], torch.tensor([1, 2, 3]))


@needs_triton
def test_triton_fp32_input_into_bf16_cache_rounds_to_nearest_even():
    # 1 + 2**-8 + 2**-9 is above the midpoint of bf16 neighbours 1 and 1 + 2**-7:
    # round to nearest gives 1 + 2**-7 (truncation would give 1)
    x = torch.full((1, 1, 4), 1 + 2**-8 + 2**-9, dtype=torch.float32)
    for impl in ("ref", "triton"):
        kc = torch.zeros(1, 1, 1, 4, dtype=torch.bfloat16)
        reshape_and_cache(x, x, kc, kc.clone(), torch.tensor([0]), "bfloat16", impl=impl)
        assert kc.float().flatten().tolist() == [1 + 2**-7] * 4


@needs_triton
@settings(max_examples=8, deadline=None)
@given(seed=st.integers(0, 2**31 - 1), heads=st.integers(1, 5),
       d=st.sampled_from([4, 12, 64]), dv=st.sampled_from([4, 16]),
       bs=st.sampled_from([1, 2, 8]), tokens=st.integers(0, 9),
       kv_dtype=st.sampled_from(list(CACHE_DTYPES)))
def test_triton_equals_reference_random_shapes(seed, heads, d, dv, bs, tokens, kv_dtype):
    g = torch.Generator().manual_seed(seed)
    nb = -(-max(tokens, 1) // bs) + 2
    in_dtype = torch.float32 if kv_dtype == "float32" else (
        torch.float16 if kv_dtype == "float16" else torch.bfloat16)
    key = (torch.randn(tokens, heads, d, generator=g) * 5).to(in_dtype)
    value = torch.randn(tokens, heads, dv, generator=g).to(in_dtype)
    slots = torch.randperm(nb * bs, generator=g)[:tokens]
    if tokens:
        slots[torch.rand(tokens, generator=g) < 0.2] = -1
    lens = torch.tensor([min(tokens, nb * bs // 2), 1])
    table = torch.randperm(nb, generator=g).reshape(1, nb).repeat(2, 1)
    out = []
    for impl in ("ref", "triton"):
        kc, vc, ks, vs = make_caches(kv_dtype, nb, bs, heads, d, dv)
        reshape_and_cache(key, value, kc, vc, slots, kv_dtype, ks, vs, impl=impl)
        k, v = gather_cache(kc, vc, table, lens, kv_dtype, ks, vs, impl=impl)
        out.append((kc.float(), vc.float(), k, v))
    for a, b in zip(*out):
        assert torch.equal(a.nan_to_num(), b.nan_to_num())
