"""State-copy argument checks (tester T18 / T19): block ids outside [-1, num_blocks),
a destination written twice or read by another copy, bad shifts and non-integer ids are
refused before any copy on both paths with a KernelArgumentError naming the argument;
the state (the first half of a larger buffer) and the other half ("another layer") stay
untouched.  In-range copies give what a per-copy loop here computes (the oracle)."""

import importlib.util

import pytest

torch = pytest.importorskip("torch")

from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402
from kvcore_mamba.kernels import copy_state_blocks_ref, copy_state_blocks_triton  # noqa: E402

from kvcore.errors import KernelArgumentError  # noqa: E402

NB, LEN, W = 8, 5, 16
HAS_TRITON = importlib.util.find_spec("triton") is not None
FNS = [pytest.param(copy_state_blocks_ref, id="ref"),
       pytest.param(copy_state_blocks_triton, id="triton", marks=pytest.mark.skipif(
           not HAS_TRITON, reason="triton is not installed"))]


def halves():
    buf = torch.arange(2 * NB * LEN * W, dtype=torch.float32).reshape(2 * NB, LEN, W)
    buf[NB:] = 7.0
    return buf, buf[:NB]


@pytest.mark.parametrize("fn", FNS)
@settings(max_examples=12, deadline=None)
@given(data=st.data())
def test_in_range_copies(fn, data):
    ids = data.draw(st.permutations(range(NB)))
    n = data.draw(st.integers(1, NB // 2 - 1))  # ids[-1] stays free for the self copy
    src, dst = list(ids[:n]), list(ids[n:2 * n])
    shifts = data.draw(st.lists(st.integers(0, LEN - 1), min_size=n, max_size=n))
    if data.draw(st.booleans()):  # a padding copy and a no-op self copy
        src, dst, shifts = src + [-1, ids[-1]], dst + [ids[0], ids[-1]], shifts + [0, 0]
    buf, state = halves()
    want = buf.clone()
    for s, d, k in zip(src, dst, shifts):
        if s >= 0 and d >= 0:
            want[d, :LEN - k] = buf[s, k:]
    fn(state, torch.tensor(src), torch.tensor(dst), torch.tensor(shifts))
    assert torch.equal(buf, want)


@pytest.mark.parametrize("fn", FNS)
@settings(max_examples=15, deadline=None)
@given(bad=st.one_of(st.integers(NB, 3 * NB), st.integers(-40, -2)),
       side=st.sampled_from(["src_block_ids", "dst_block_ids"]), as_list=st.booleans())
def test_out_of_range_ids_refused_nothing_written(fn, bad, side, as_list):
    buf, state = halves()
    before = buf.clone()
    ids = {"src_block_ids": [1, 2], "dst_block_ids": [3, 4]}
    ids[side][1] = bad
    args = {k: v if as_list else torch.tensor(v) for k, v in ids.items()}
    with pytest.raises(KernelArgumentError) as exc:
        fn(state, args["src_block_ids"], args["dst_block_ids"], None)
    assert exc.value.extra["field"] == side
    assert exc.value.extra["value"] == bad and str(bad) in str(exc.value)
    assert exc.value.extra["valid"] == f"[-1, {NB})"
    assert torch.equal(buf, before)


@pytest.mark.parametrize("fn", FNS)
@pytest.mark.parametrize("src,dst,shifts,block", [
    ([1, 2], [3, 3], None, 3),        # one destination written twice
    ([1, 3], [3, 4], None, 3),        # block 3 written by one copy, read by another
    ([2], [2], [1], 2),               # a shifted copy onto itself
])
def test_overlapping_copies_refused(fn, src, dst, shifts, block):
    buf, state = halves()
    before = buf.clone()
    with pytest.raises(KernelArgumentError) as exc:
        fn(state, src, dst, shifts)
    assert exc.value.extra["field"] == "dst_block_ids"
    assert exc.value.extra["value"] == block
    assert torch.equal(buf, before)


@pytest.mark.parametrize("fn", FNS)
@pytest.mark.parametrize("shift", [-1, LEN, LEN + 10])
def test_bad_shift_refused(fn, shift):
    buf, state = halves()
    before = buf.clone()
    with pytest.raises(KernelArgumentError) as exc:
        fn(state, [1], [2], [shift])
    assert exc.value.extra["field"] == "shifts" and exc.value.extra["value"] == shift
    assert torch.equal(buf, before)


@pytest.mark.parametrize("fn", FNS)
def test_float_ids_refused(fn):
    _, state = halves()
    with pytest.raises(KernelArgumentError) as exc:
        fn(state, torch.tensor([1.0]), torch.tensor([2]), None)
    assert exc.value.extra["field"] == "src_block_ids"
