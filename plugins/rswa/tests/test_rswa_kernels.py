"""R-SWA decode attention: Triton (interpreter) == torch reference == dense attention
over exactly the visible positions; garbage (NaN) in the null block and in freed gap
blocks never reaches the output."""

from __future__ import annotations

import importlib.util
import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from kvcore_rswa.kernels import (
    rswa_decode_attention,
    rswa_decode_attention_ref,
    rswa_decode_attention_triton,
    rswa_visible_slots,
)

#: Triton paths skip cleanly without triton (issue 15 item 14); the torch references run
HAS_TRITON = importlib.util.find_spec("triton") is not None
requires_triton = pytest.mark.skipif(not HAS_TRITON, reason="triton is not installed")


def dense_attention(q, k, v, positions, scale):
    """Plain attention of one query [H, D] over k/v [T, Hkv, D] at ``positions``."""
    group = q.shape[0] // k.shape[1]
    kk = k[positions].float().repeat_interleave(group, 1)
    vv = v[positions].float().repeat_interleave(group, 1)
    s = torch.einsum("hd,nhd->hn", q.float(), kk) * scale
    return torch.einsum("hn,nhd->hd", torch.softmax(s, -1), vv)


def build(seq_lens, prompt_lens, window, block, heads, kv_heads, d, dv, seed,
          dtype=torch.float32):
    """Paged caches holding each sequence's K/V, gap blocks mapped to the null block
    (0, filled with NaN) and their physical blocks also poisoned."""
    g = torch.Generator().manual_seed(seed)
    max_blocks = max(-(-s // block) for s in seq_lens)
    n = len(seq_lens)
    num_blocks = 1 + n * max_blocks
    kc = torch.full((num_blocks, block, kv_heads, d), float("nan"), dtype=dtype)
    vc = torch.full((num_blocks, block, kv_heads, dv), float("nan"), dtype=dtype)
    perm = (torch.randperm(num_blocks - 1, generator=g) + 1).view(n, max_blocks)
    bt = perm.to(torch.int32).clone()
    dense = []
    for s, (L, P) in enumerate(zip(seq_lens, prompt_lens)):
        k = torch.randn(L, kv_heads, d, generator=g).to(dtype)
        v = torch.randn(L, kv_heads, dv, generator=g).to(dtype)
        dense.append((k, v))
        for pos in range(L):
            kc[bt[s, pos // block], pos % block] = k[pos]
            vc[bt[s, pos // block], pos % block] = v[pos]
        q = L - 1
        first = -(-P // block)
        last = max(P, q - window + 1) // block
        for i in range(first, max(first, last)):   # freed: poison, null in the table
            kc[bt[s, i]] = float("nan")
            vc[bt[s, i]] = float("nan")
            bt[s, i] = 0
    query = torch.randn(n, heads, d, generator=g).to(dtype)
    return query, kc, vc, bt, dense


CASES = [
    # seq_lens, prompt_lens, window, block, heads, kv_heads, d, dv
    ([300, 35, 17], [40, 20, 17], 32, 16, 4, 2, 32, 16),
    ([129, 64], [1, 63], 8, 8, 2, 2, 16, 16),
    ([200], [100], 1, 16, 8, 1, 64, 64),        # window 1: prompt + the token itself
    ([50], [10], 1000, 4, 2, 1, 8, 8),          # window longer than the output
]


@requires_triton
@pytest.mark.parametrize("case", CASES)
def test_triton_equals_reference_equals_dense(case):
    seq_lens, prompt_lens, window, block, heads, kv_heads, d, dv = case
    query, kc, vc, bt, dense = build(seq_lens, prompt_lens, window, block, heads,
                                     kv_heads, d, dv, seed=len(seq_lens) + window)
    sl, pl = torch.tensor(seq_lens), torch.tensor(prompt_lens)
    out_t = rswa_decode_attention_triton(query, kc, vc, bt, sl, pl, window)
    out_r = rswa_decode_attention_ref(query, kc, vc, bt, sl, pl, window)
    assert not torch.isnan(out_t).any() and not torch.isnan(out_r).any()
    torch.testing.assert_close(out_t, out_r, atol=2e-5, rtol=2e-5)
    scale = 1 / math.sqrt(d)
    for s, (L, P) in enumerate(zip(seq_lens, prompt_lens)):
        q = L - 1
        positions = [k for k in range(L) if k < P or q - k < window]
        want = dense_attention(query[s], *dense[s], positions, scale)
        torch.testing.assert_close(out_r[s].float(), want, atol=2e-5, rtol=2e-5)


@requires_triton  # the dispatcher runs Triton under TRITON_INTERPRET=1
def test_padding_row_and_dispatcher():
    query, kc, vc, bt, _ = build([40, 40], [10, 10], 8, 16, 2, 1, 16, 16, seed=3)
    sl, pl = torch.tensor([40, 0]), torch.tensor([10, 0])
    out = rswa_decode_attention(query, kc, vc, bt, sl, pl, 8)   # interpreter: Triton
    assert torch.equal(out[1], torch.zeros_like(out[1]))
    torch.testing.assert_close(out, rswa_decode_attention_ref(query, kc, vc, bt, sl, pl, 8),
                               atol=2e-5, rtol=2e-5)


@requires_triton
def test_half_precision():
    query, kc, vc, bt, _ = build([90], [30], 16, 16, 4, 2, 32, 32, seed=5,
                                 dtype=torch.float16)
    sl, pl = torch.tensor([90]), torch.tensor([30])
    out_t = rswa_decode_attention_triton(query, kc, vc, bt, sl, pl, 16)
    out_r = rswa_decode_attention_ref(query, kc, vc, bt, sl, pl, 16)
    assert out_t.dtype == torch.float16
    torch.testing.assert_close(out_t, out_r, atol=2e-3, rtol=2e-3)


def test_visible_slots_positions():
    bt = torch.arange(1, 11, dtype=torch.int32)
    pos, bids, offs = rswa_visible_slots(bt, seq_len=100, prompt_len=20, rswa_window=5,
                                         block_size=16)
    assert pos.tolist() == list(range(20)) + [95, 96, 97, 98, 99]
    # 95 = block 5 (id 6) offset 15; 96..99 = block 6 (id 7) offsets 0..3
    assert bids.tolist() == [1] * 16 + [2] * 4 + [6] + [7] * 4
    assert offs.tolist() == list(range(16)) + [0, 1, 2, 3] + [15, 0, 1, 2, 3]


def test_bad_shapes_raise():
    query, kc, vc, bt, _ = build([40], [10], 8, 16, 4, 2, 16, 16, seed=1)
    with pytest.raises(ValueError, match="num_kv_heads"):
        rswa_decode_attention_ref(query[:, :3], kc, vc, bt, torch.tensor([40]),
                                  torch.tensor([10]), 8)
    with pytest.raises(ValueError, match="rswa_window"):
        rswa_decode_attention_ref(query, kc, vc, bt, torch.tensor([40]),
                                  torch.tensor([10]), 0)


@requires_triton
@settings(max_examples=8, deadline=None)
@given(prompt=st.integers(1, 60), gen=st.integers(1, 90), window=st.integers(1, 40),
       block=st.sampled_from([4, 8, 16]), seed=st.integers(0, 1000))
def test_property_triton_matches_reference(prompt, gen, window, block, seed):
    L = prompt + gen
    query, kc, vc, bt, _ = build([L], [prompt], window, block, 2, 1, 16, 16, seed=seed)
    sl, pl = torch.tensor([L]), torch.tensor([prompt])
    out_t = rswa_decode_attention_triton(query, kc, vc, bt, sl, pl, window)
    out_r = rswa_decode_attention_ref(query, kc, vc, bt, sl, pl, window)
    torch.testing.assert_close(out_t, out_r, atol=2e-5, rtol=2e-5)


@requires_triton  # the dispatcher runs Triton under TRITON_INTERPRET=1
def test_benchmark_entries_run_quick_on_cpu():
    from kvcore_rswa.benchmarks import BENCHMARKS

    for entry in BENCHMARKS:
        run, nbytes = entry["setup"](torch.device("cpu"), True)
        out = run()
        assert nbytes > 0 and not torch.isnan(out).any()
