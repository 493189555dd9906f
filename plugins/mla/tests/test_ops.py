"""MLA latent-cache kernels: torch reference vs Triton (TRITON_INTERPRET=1, set in
conftest.py), round trips, -1 slots, the fp8_ds_mla record layout."""

import importlib.util

import pytest

torch = pytest.importorskip("torch")

from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402
from kvcore_mla import ops  # noqa: E402

L, R = 512, 64
#: Triton paths skip cleanly without triton (issue 15 item 14); the torch references run
HAS_TRITON = importlib.util.find_spec("triton") is not None
requires_triton = pytest.mark.skipif(not HAS_TRITON, reason="triton is not installed")
BACKENDS = ("ref", "triton") if HAS_TRITON else ("ref",)


def make(t, seed=0, dtype=torch.bfloat16, spread=True):
    g = torch.Generator().manual_seed(seed)
    kv_c = torch.randn(t, L, generator=g)
    if spread:  # tiles of very different magnitudes
        kv_c = kv_c * torch.tensor([1e-3, 1.0, 30.0, 500.0]).repeat_interleave(128)
    k_pe = torch.randn(t, R, generator=g)
    return kv_c.to(dtype), k_pe.to(dtype)


def cache(mode, num_blocks=6, block_size=4):
    if mode == "fp8_ds_mla":
        return torch.zeros(num_blocks, block_size, 656, dtype=torch.uint8)
    if mode == "fp8":
        return torch.zeros(num_blocks, block_size, L + R, dtype=torch.float8_e4m3fn)
    return torch.zeros(num_blocks, block_size, L + R, dtype=torch.bfloat16)


def raw_bytes(c):
    return c.view(torch.uint8) if c.dtype != torch.uint8 else c


@requires_triton
@pytest.mark.parametrize("mode,scale", [("auto", None), ("fp8", 0.05), ("fp8_ds_mla", None)])
def test_triton_matches_reference_bitwise(mode, scale):
    kv_c, k_pe = make(7, seed=1)
    slots = torch.tensor([0, 5, -1, 9, 23, -1, 13])
    a, b = cache(mode), cache(mode)
    ops.concat_and_cache_mla(kv_c, k_pe, a, slots, mode, scale, backend="ref")
    ops.concat_and_cache_mla(kv_c, k_pe, b, slots, mode, scale, backend="triton")
    assert torch.equal(raw_bytes(a), raw_bytes(b))
    bt = torch.tensor([[0, 1, 2], [3, 5, 4]])
    lens = torch.tensor([10, 9])
    ga = ops.gather_mla_cache(a, bt, lens, mode, scale, backend="ref")
    gb = ops.gather_mla_cache(a, bt, lens, mode, scale, backend="triton")
    assert ga.shape == (19, 576) and ga.dtype == torch.bfloat16
    assert torch.equal(ga, gb)


def test_bf16_round_trip_exact_and_padding_untouched():
    kv_c, k_pe = make(5, seed=2)
    c = torch.full((4, 4, L + R), 7.0, dtype=torch.bfloat16)
    slots = torch.tensor([2, -1, 3, 4, 5])
    ops.concat_and_cache_mla(kv_c, k_pe, c, slots, "auto")
    # request of 6 tokens in blocks [0, 1]: positions 2..5 hold tokens 0, 2, 3, 4
    out = ops.gather_mla_cache(c, torch.tensor([[0, 1]]), torch.tensor([6]), "auto")
    x = torch.cat([kv_c, k_pe], -1)
    assert torch.equal(out[2], x[0])
    assert torch.equal(out[3:6], x[2:5])
    # slots 0, 1 (never written) and the -1 token's nowhere: all other slots still 7
    assert bool((out[:2] == 7).all())
    written = torch.zeros(16, dtype=torch.bool)
    written[[2, 3, 4, 5]] = True
    assert bool((c.view(16, -1)[~written] == 7).all())


def test_fp8_ds_mla_round_trip_within_7_percent_per_tile():
    kv_c, k_pe = make(16, seed=3)
    c = cache("fp8_ds_mla", num_blocks=4, block_size=4)
    ops.concat_and_cache_mla(kv_c, k_pe, c, torch.arange(16), "fp8_ds_mla")
    out = ops.gather_mla_cache(c, torch.tensor([[0, 1, 2, 3]]), torch.tensor([16]),
                               "fp8_ds_mla", out_dtype=torch.float32)
    x = kv_c.float().reshape(16, 4, 128)
    err = (out[:, :L].reshape(16, 4, 128) - x).abs().amax(-1)
    rel = err / x.abs().amax(-1)
    assert float(rel.max()) < 0.07
    assert torch.equal(out[:, L:].to(torch.bfloat16), k_pe)  # RoPE part exact (bf16)


def test_fp8_ds_mla_record_layout():
    kv_c = torch.zeros(1, L, dtype=torch.bfloat16)
    kv_c[0, :128] = 448.0   # tile 0: amax 448 -> scale 448 / 448 = 1
    kv_c[0, 128:256] = 1.0  # tile 1: 1 / 448 rounded up to a power of two: 2^-8
    kv_c[0, 256] = 3.0      # tile 2: 3 / 448 -> 2^-7
    k_pe = torch.arange(R, dtype=torch.bfloat16)[None]
    for backend in BACKENDS:
        c = cache("fp8_ds_mla", num_blocks=1, block_size=1)
        ops.concat_and_cache_mla(kv_c, k_pe, c, torch.tensor([0]), "fp8_ds_mla",
                                 backend=backend)
        rec = c[0, 0]
        scales = rec[512:528].clone().view(torch.float32)
        assert scales.tolist()[:3] == [1.0, 2.0 ** -8, 2.0 ** -7], backend
        # e4m3fn bits: 448 = 1.75 x 2^8 -> exponent field 15, mantissa 6 = 0x7E;
        # 256 = 2^8 -> 0x78; 3 / 2^-7 = 384 = 1.5 x 2^8 -> 0x7C; 0 -> 0x00
        assert [rec[0].item(), rec[128].item(), rec[256].item(), rec[257].item()] == \
            [0x7E, 0x78, 0x7C, 0x00], backend
        # an all-zero tile (tile 3) gets the smallest scale and zero values
        assert bool((rec[384:512] == 0).all())
        # bytes 528..655: k_pe in bf16
        assert torch.equal(rec[528:656].clone().view(torch.bfloat16), k_pe[0])


def test_fp8_per_tensor_round_trip():
    kv_c, k_pe = make(4, seed=4, spread=False)
    c = cache("fp8")
    ops.concat_and_cache_mla(kv_c, k_pe, c, torch.tensor([0, 1, 2, 3]), "fp8", 0.01)
    out = ops.gather_mla_cache(c, torch.tensor([[0]]), torch.tensor([4]), "fp8", 0.01,
                               out_dtype=torch.float32)
    x = torch.cat([kv_c, k_pe], -1).float()
    assert float(((out - x).abs() / x.abs().clamp_min(0.04)).max()) < 0.07


def test_aligned_page_stride():
    # a 64-token fp8_ds_mla page (41,984 B) padded to a multiple of 576: 42,048 B
    store = torch.zeros(3, 42048, dtype=torch.uint8)
    c = store.as_strided((3, 64, 656), (42048, 656, 1))
    kv_c, k_pe = make(3, seed=5)
    slots = torch.tensor([0, 64, 191])
    for backend in BACKENDS:
        store.zero_()
        ops.concat_and_cache_mla(kv_c, k_pe, c, slots, "fp8_ds_mla", backend=backend)
        assert bool((store[:, 64 * 656:] == 0).all())  # the alignment padding untouched
        out = ops.gather_mla_cache(c, torch.tensor([[2]]), torch.tensor([64]),
                                   "fp8_ds_mla", backend=backend)
        ref = ops.ds_mla_dequantize_ref(ops.ds_mla_quantize_ref(kv_c[2:], k_pe[2:]))
        assert torch.equal(out[63], ref[0])


def test_bad_inputs():
    kv_c, k_pe = make(2)
    with pytest.raises(ValueError, match="656"):
        ops.concat_and_cache_mla(kv_c, k_pe, cache("auto"), torch.tensor([0, 1]),
                                 "fp8_ds_mla")
    with pytest.raises(ValueError, match="slot_mapping"):
        ops.concat_and_cache_mla(kv_c, k_pe, cache("auto"), torch.tensor([0]), "auto")
    with pytest.raises(Exception, match="fp8_ds_mla"):
        ops.concat_and_cache_mla(kv_c, k_pe, cache("auto"), torch.tensor([0, 1]), "int4")


@requires_triton
@settings(max_examples=8, deadline=None)
@given(t=st.integers(1, 6), seed=st.integers(0, 1000),
       mode=st.sampled_from(["auto", "fp8", "fp8_ds_mla"]))
def test_property_triton_equals_reference(t, seed, mode):
    kv_c, k_pe = make(t, seed=seed)
    g = torch.Generator().manual_seed(seed)
    perm = torch.randperm(24, generator=g)[:t]
    slots = torch.where(torch.rand(t, generator=g) < 0.2, -1, perm)
    a, b = cache(mode), cache(mode)
    ops.concat_and_cache_mla(kv_c, k_pe, a, slots, mode, 0.03, backend="ref")
    ops.concat_and_cache_mla(kv_c, k_pe, b, slots, mode, 0.03, backend="triton")
    assert torch.equal(raw_bytes(a), raw_bytes(b))
