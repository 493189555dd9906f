"""R-SWA decode argument checks (tester T18 / T19): a block id a sequence reads outside
[-1, num_blocks), a seq_len past its block table, non-integer index tensors and a query
of the wrong dtype are refused before any launch on both paths with a
KernelArgumentError naming the argument (the Triton kernel would read another layer's
pages: the cache here is the first half of a buffer whose other half holds 7.0, and
such a read would change the output).  In-range tables give dense attention over the
visible positions (the oracle)."""

from __future__ import annotations

import importlib.util
import math

import pytest

torch = pytest.importorskip("torch")

from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402
from kvcore_rswa.kernels import (  # noqa: E402
    rswa_decode_attention_ref,
    rswa_decode_attention_triton,
)

from kvcore.errors import KernelArgumentError  # noqa: E402

NB, BS, H, D, WIDTH = 8, 4, 2, 8, 3
HAS_TRITON = importlib.util.find_spec("triton") is not None
FNS = [pytest.param(rswa_decode_attention_ref, id="ref"),
       pytest.param(rswa_decode_attention_triton, id="triton", marks=pytest.mark.skipif(
           not HAS_TRITON, reason="triton is not installed"))]


def halves(seed=0):
    g = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(2):
        buf = torch.randn(2 * NB, BS, 1, D, generator=g)
        buf[NB:] = 7.0
        out.append(buf[:NB])
    return out


@pytest.mark.parametrize("fn", FNS)
@settings(max_examples=10, deadline=None)
@given(data=st.data())
def test_in_range_tables_equal_dense_attention(fn, data):
    n = data.draw(st.integers(1, 2))
    ids = data.draw(st.permutations(range(NB)))
    table = [list(ids[WIDTH * i:WIDTH * i + WIDTH]) if i < 2 else [0] * WIDTH
             for i in range(n)]
    lens = [data.draw(st.integers(1, WIDTH * BS)) for _ in range(n)]
    prompts = [data.draw(st.integers(0, ln)) for ln in lens]
    window = data.draw(st.integers(1, 6))
    kc, vc = halves(data.draw(st.integers(0, 100)))
    q = torch.randn(n, H, D)
    out = fn(q, kc, vc, torch.tensor(table, dtype=torch.int32), torch.tensor(lens),
             torch.tensor(prompts), window)
    for s in range(n):
        qpos = lens[s] - 1
        vis = [p for p in range(lens[s]) if p < prompts[s] or qpos - p < window]
        k = torch.stack([kc[table[s][p // BS], p % BS, 0] for p in vis])
        v = torch.stack([vc[table[s][p // BS], p % BS, 0] for p in vis])
        sc = (q[s] @ k.T) / math.sqrt(D)
        want = torch.softmax(sc, -1) @ v
        assert torch.allclose(out[s], want, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("fn", FNS)
@settings(max_examples=10, deadline=None)
@given(bad=st.one_of(st.integers(NB, 3 * NB), st.integers(-50, -2)),
       col=st.integers(0, WIDTH - 1), as_list=st.booleans())
def test_out_of_range_block_refused(fn, bad, col, as_list):
    kc, vc = halves()
    table = [[1, 2, 3]]
    table[0][col] = bad
    with pytest.raises(KernelArgumentError) as exc:
        fn(torch.randn(1, H, D), kc, vc, table if as_list else torch.tensor(table),
           torch.tensor([WIDTH * BS]), torch.tensor([2]), 2)
    assert exc.value.extra["field"] == "block_tables"
    assert exc.value.extra["value"] == bad and exc.value.extra["valid"] == f"[-1, {NB})"


@pytest.mark.parametrize("fn", FNS)
@settings(max_examples=10, deadline=None)
@given(bad=st.one_of(st.integers(WIDTH * BS + 1, 1000), st.integers(-1000, -1)))
def test_seq_len_past_table_refused(fn, bad):
    kc, vc = halves()
    with pytest.raises(KernelArgumentError) as exc:
        fn(torch.randn(1, H, D), kc, vc, torch.tensor([[1, 2, 3]]), torch.tensor([bad]),
           torch.tensor([2]), 2)
    assert exc.value.extra["field"] == "seq_lens"
    assert exc.value.extra["value"] == bad
    assert exc.value.extra["valid"] == f"[0, {WIDTH * BS}]"


@pytest.mark.parametrize("fn", FNS)
def test_dtypes_refused(fn):
    kc, vc = halves()
    with pytest.raises(KernelArgumentError) as exc:
        fn(torch.randn(1, H, D), kc, vc, torch.tensor([[1.0, 2.0]]), torch.tensor([5]),
           torch.tensor([2]), 2)
    assert exc.value.extra["field"] == "block_tables"
    with pytest.raises(KernelArgumentError) as exc:
        fn(torch.randn(1, H, D).double(), kc, vc, torch.tensor([[1, 2]]),
           torch.tensor([5]), torch.tensor([2]), 2)
    assert exc.value.extra["field"] == "query"
