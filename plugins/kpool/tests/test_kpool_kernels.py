"""k-pool tail write and pool compression: Triton (interpreter) vs the torch reference,
hand-computed values, and a streaming run through a ring sized by the formula."""

from __future__ import annotations

import importlib.util
import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from kvcore_kpool import kpool_ring_size
from kvcore_kpool.kernels import (
    hadamard_matrix,
    kpool_compress,
    kpool_compress_ref,
    kpool_compress_triton,
    kpool_pool_slot,
    kpool_tail_write,
    kpool_tail_write_ref,
    kpool_tail_write_triton,
    pow2_scale,
)

FP8 = torch.float8_e4m3fn

#: Triton paths skip cleanly without triton (issue 15 item 14); the torch references run
HAS_TRITON = importlib.util.find_spec("triton") is not None
requires_triton = pytest.mark.skipif(not HAS_TRITON, reason="triton is not installed")
TAIL_WRITES = (kpool_tail_write_ref,) + ((kpool_tail_write_triton,) if HAS_TRITON else ())
COMPRESSES = (kpool_compress_ref,) + ((kpool_compress_triton,) if HAS_TRITON else ())


def test_hadamard_is_orthonormal_sylvester():
    h = hadamard_matrix(128)
    torch.testing.assert_close(h @ h, torch.eye(128), atol=1e-6, rtol=0)
    assert torch.equal(h, h.T)
    assert torch.all(h[0] == 1 / math.sqrt(128))
    # Sylvester order: row 1 alternates signs
    assert torch.equal(torch.sign(h[1, :4]), torch.tensor([1.0, -1.0, 1.0, -1.0]))


def test_pow2_scale_by_hand():
    amax = torch.tensor([448.0, 449.0, 56.0, 1.0, 0.0, 447.0])
    # 448/448 = 1 -> 2^0; 449/448 > 1 -> 2; 56/448 = 1/8 -> 2^-3; 1/448 -> 2^-8
    # (1/448 in (2^-9, 2^-8]); 0 -> 1; 447/448 -> 1
    assert pow2_scale(amax).tolist() == [1.0, 2.0, 0.125, 2.0 ** -8, 1.0, 1.0]


def test_tail_write_slots_and_padding():
    ring = torch.zeros(3, 8, 1, 4)
    gring = torch.zeros(3, 8, 1, 4)
    keys = torch.arange(40, dtype=torch.float32).view(10, 1, 4)
    gates = -keys
    pos = torch.tensor([0, 1, 7, 8, 9, 15, 16, 3, 3, 3])
    blk = torch.tensor([1, 1, 1, 1, 1, 1, 1, 2, -1, -1])
    for fn in TAIL_WRITES:
        kr, gr = ring.clone(), gring.clone()
        fn(keys, gates, pos, blk, kr, gr)
        # token 6 (pos 16) overwrote slot 0 last; pos 9 -> slot 1; pos 15 -> slot 7
        assert kr[1, 0, 0].tolist() == keys[6, 0].tolist()
        assert kr[1, 1, 0].tolist() == keys[4, 0].tolist()
        assert kr[1, 7, 0].tolist() == keys[5, 0].tolist()
        assert kr[2, 3, 0].tolist() == keys[7, 0].tolist()
        assert torch.equal(gr, -kr)
        assert torch.count_nonzero(kr[0]) == 0          # padding tokens wrote nothing


@requires_triton
def test_tail_write_triton_equals_reference_bf16():
    g = torch.Generator().manual_seed(0)
    keys, gates = torch.randn(30, 2, 128, generator=g), torch.randn(30, 2, 128, generator=g)
    pos = torch.randint(0, 1000, (30,), generator=g)
    blk = torch.randint(-1, 5, (30,), generator=g)
    # distinct (block, slot) pairs so the write order does not matter
    seen, keep = set(), []
    for i in range(30):
        key = (int(blk[i]), int(pos[i]) % 32)
        keep.append(key not in seen or blk[i] < 0)
        seen.add(key)
    keep = torch.tensor(keep)
    keys, gates, pos, blk = keys[keep], gates[keep], pos[keep], blk[keep]
    a = [torch.zeros(5, 32, 2, 128, dtype=torch.bfloat16) for _ in range(2)]
    b = [x.clone() for x in a]
    kpool_tail_write_ref(keys, gates, pos, blk, *a)
    kpool_tail_write(keys, gates, pos, blk, *b)           # interpreter: Triton
    assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])


def test_compress_constant_key_by_hand():
    # every token has key c * e_0 -> pooled = c * e_0 whatever the gates (the softmax
    # weights sum to 1); the Hadamard transform spreads it: y = c / sqrt(128) = 48 on
    # every channel.  amax 48 -> scale 2^ceil(log2(48 / 448)) = 2^-3 -> q = 384, an
    # e4m3 value (1.5 x 2^8) 32 away from its neighbours, so float error cannot move it.
    c = math.sqrt(128) * 48
    kr = torch.zeros(2, 16, 1, 128)
    kr[1, :, 0, 0] = c
    gr = torch.randn(2, 16, 1, 128)
    for fn in COMPRESSES:
        out = torch.zeros(4, 1, 128, dtype=FP8)
        sc = torch.zeros(4, 1)
        fn(kr, gr, torch.tensor([1]), torch.tensor([32]), torch.tensor([2]), out, sc, 16)
        assert sc[2, 0].item() == 0.125
        assert torch.all(out[2].float() == 384.0)
        assert torch.count_nonzero(out[[0, 1, 3]].float()) == 0


def test_compress_equal_gates_is_the_mean():
    g = torch.Generator().manual_seed(1)
    kr = torch.randn(1, 16, 1, 128, generator=g)
    gr = torch.full((1, 16, 1, 128), 0.3)
    out = torch.zeros(1, 1, 128, dtype=FP8)
    sc = torch.zeros(1, 1)
    kpool_compress_ref(kr, gr, torch.tensor([0]), torch.tensor([4]), torch.tensor([0]),
                       out, sc, 4)                      # pool = ring slots 4..7
    y = kr[0, 4:8, 0].mean(0) @ hadamard_matrix(128)
    deq = out[0, 0].float() * sc[0, 0]
    # e4m3 keeps 3 mantissa bits: relative error <= 2^-4, plus subnormal steps
    err = (deq - y).abs()
    assert torch.all(err <= y.abs() * 2 ** -4 + sc[0, 0] * 2 ** -10)
    # inverse transform (H is its own inverse) recovers the mean of the keys
    torch.testing.assert_close(deq @ hadamard_matrix(128), kr[0, 4:8, 0].mean(0),
                               atol=float(sc[0, 0]) * 8, rtol=0.07)


def fp8_ulp(x):
    """One e4m3 step at |x| (subnormal step 2^-9 below 2^-6)."""
    e = torch.floor(torch.log2(x.abs().clamp(min=2 ** -6)))
    return 2.0 ** (e - 3)


@requires_triton
@settings(max_examples=6, deadline=None)
@given(kpool=st.sampled_from([2, 4, 16]), heads=st.integers(1, 2),
       d=st.sampled_from([128, 256]), seed=st.integers(0, 10_000))
def test_compress_triton_matches_reference(kpool, heads, d, seed):
    g = torch.Generator().manual_seed(seed)
    ring = kpool * 2
    kr = (torch.randn(3, ring, heads, d, generator=g) * 4).to(torch.bfloat16)
    gr = (torch.randn(3, ring, heads, d, generator=g) * 2).to(torch.bfloat16)
    blk = torch.tensor([2, 1, -1, 2])
    starts = torch.tensor([0, 3 * kpool, 0, kpool])
    slots = torch.tensor([0, 3, 1, -1])
    outs = []
    for fn in COMPRESSES:
        out = torch.zeros(5, heads, d, dtype=FP8)
        sc = torch.zeros(5, heads)
        fn(kr, gr, blk, starts, slots, out, sc, kpool)
        outs.append((out.float(), sc))
    (a, sa), (b, sb) = outs
    assert torch.equal(sa, sb)
    # equal except where float summation order moves a value across a rounding
    # boundary: then one e4m3 step apart
    assert torch.all((a - b).abs() <= fp8_ulp(a))
    assert (a != b).float().mean() < 0.02
    assert torch.count_nonzero(a[[1, 2, 4]]) == 0       # padding / skipped slots


@requires_triton  # the dispatcher runs Triton under TRITON_INTERPRET=1
@pytest.mark.parametrize("kpool,spec_tokens", [(4, 0), (4, 3), (16, 1), (2, 5)])
def test_streaming_through_the_formula_ring(kpool, spec_tokens):
    """Tokens arrive 1 + num_speculative_tokens per step; after each step every pool
    completed by it is compressed from the ring.  A ring of kpool_ring_size slots
    never loses a token before its pool is compressed: the pooled cache equals pooling
    computed from the full key history."""
    ring = kpool_ring_size(kpool, spec_tokens)
    block_size = max(64, ring)
    g = torch.Generator().manual_seed(kpool * 10 + spec_tokens)
    T = 2 * block_size            # a multiple of kpool
    keys = torch.randn(T, 1, 128, generator=g)
    gates = torch.randn(T, 1, 128, generator=g)
    kr = torch.zeros(2, ring, 1, 128)
    gr = torch.zeros(2, ring, 1, 128)
    block_table = torch.tensor([3, 1, 4, 0, 2])          # pooled-cache block table
    per_block = block_size // kpool
    out = torch.zeros(5 * per_block, 1, 128, dtype=FP8)
    sc = torch.zeros(5 * per_block, 1)
    step = 1 + spec_tokens
    pos = 0
    while pos < T:
        n = min(step, T - pos)
        idx = torch.arange(pos, pos + n)
        kpool_tail_write(keys[idx], gates[idx], idx, torch.full((n,), 1), kr, gr)
        done = [s for s in range(0, pos + n - kpool + 1, kpool) if s + kpool > pos]
        if done:
            kpool_compress(kr, gr, torch.full((len(done),), 1), torch.tensor(done),
                           torch.tensor([kpool_pool_slot(block_table, s, block_size, kpool)
                                         for s in done]), out, sc, kpool)
        pos += n
    want_out = torch.zeros_like(out)
    want_sc = torch.zeros_like(sc)
    full_k = keys.view(1, T, 1, 128)
    full_g = gates.view(1, T, 1, 128)
    starts = list(range(0, T - kpool + 1, kpool))
    kpool_compress_ref(   # one "ring" as long as the whole history: no wrap-around
        full_k, full_g, torch.zeros(len(starts), dtype=torch.long), torch.tensor(starts),
        torch.tensor([kpool_pool_slot(block_table, s, block_size, kpool) for s in starts]),
        want_out, want_sc, kpool)
    assert len(starts) == T // kpool and torch.count_nonzero(want_sc) == len(starts)
    assert torch.equal(sc, want_sc)
    a, b = out.float(), want_out.float()
    assert torch.all((a - b).abs() <= fp8_ulp(b))


def test_a_ring_below_the_formula_loses_tokens():
    # control: kpool 4 with 3 speculative tokens needs 8 slots; with 4, a step of 4
    # tokens that completes a pool overwrites slots of the pool before it is compressed
    kpool, ring = 4, 4
    keys = torch.arange(8, dtype=torch.float32).view(8, 1, 1).expand(8, 1, 128).clone()
    kr = torch.zeros(1, ring, 1, 128)
    gr = torch.zeros(1, ring, 1, 128)
    # positions 2..5 written in one step: pool 0..3 completes, but 4 and 5 overwrote
    # slots 0 and 1 (positions 0 and 1) first
    kpool_tail_write_ref(keys[:2], keys[:2], torch.arange(2), torch.zeros(2, dtype=torch.long),
                         kr, gr)
    kpool_tail_write_ref(keys[2:6], keys[2:6], torch.arange(2, 6),
                         torch.zeros(4, dtype=torch.long), kr, gr)
    assert kr[0, :, 0, 0].tolist() != [0.0, 1.0, 2.0, 3.0]
    assert kpool_ring_size(kpool, 3) == 8


def test_bad_inputs():
    kr = torch.zeros(1, 16, 1, 64)
    out = torch.zeros(1, 1, 64, dtype=FP8)
    with pytest.raises(ValueError, match="128"):
        kpool_compress_ref(kr, kr, torch.tensor([0]), torch.tensor([0]), torch.tensor([0]),
                           out, torch.zeros(1, 1), 16)
    kr = torch.zeros(1, 16, 1, 128)
    with pytest.raises(ValueError, match="divide"):
        kpool_compress_ref(kr, kr, torch.tensor([0]), torch.tensor([0]), torch.tensor([0]),
                           torch.zeros(1, 1, 128, dtype=FP8), torch.zeros(1, 1), 5)
    with pytest.raises(ValueError, match="float8"):
        kpool_compress_ref(kr, kr, torch.tensor([0]), torch.tensor([0]), torch.tensor([0]),
                           torch.zeros(1, 1, 128), torch.zeros(1, 1), 16)
    with pytest.raises(ValueError, match="multiples"):
        kpool_pool_slot(torch.tensor([1]), 3, 64, 16)


@requires_triton  # the dispatcher runs Triton under TRITON_INTERPRET=1
def test_benchmark_entries_run_quick_on_cpu():
    from kvcore_kpool.benchmarks import BENCHMARKS

    assert [e["name"] for e in BENCHMARKS] == ["kpool_tail_write", "kpool_compress"]
    for entry in BENCHMARKS:
        run, nbytes = entry["setup"](torch.device("cpu"), True)
        run()
        assert nbytes > 0
