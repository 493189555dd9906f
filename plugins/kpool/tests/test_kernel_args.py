"""k-pool kernel argument checks (tester T18): ring block ids outside [-1, num_blocks),
out slots outside [-1, num_slots), negative positions / pool starts (the Triton
kernel's C-style remainder would make them negative slots), non-integer index tensors
and shapes that do not match are refused before any launch on both paths with a
KernelArgumentError naming the argument; the ring (the first half of a larger buffer)
and the other half ("another layer") stay untouched.  In-range writes land exactly at
``[block, position % ring]`` (a per-token loop here is the oracle)."""

from __future__ import annotations

import importlib.util

import pytest

torch = pytest.importorskip("torch")

from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402
from kvcore_kpool.kernels import (  # noqa: E402
    kpool_compress_ref,
    kpool_compress_triton,
    kpool_tail_write_ref,
    kpool_tail_write_triton,
)

from kvcore.errors import KernelArgumentError  # noqa: E402

NB, RING, H, D = 4, 8, 1, 128
HAS_TRITON = importlib.util.find_spec("triton") is not None
skip_no_triton = pytest.mark.skipif(not HAS_TRITON, reason="triton is not installed")
WRITES = [pytest.param(kpool_tail_write_ref, id="ref"),
          pytest.param(kpool_tail_write_triton, id="triton", marks=skip_no_triton)]
COMPRESSES = [pytest.param(kpool_compress_ref, id="ref"),
              pytest.param(kpool_compress_triton, id="triton", marks=skip_no_triton)]


def rings():
    bufs = []
    for _ in range(2):
        b = torch.zeros(2 * NB, RING, H, D)
        b[NB:] = 7.0
        bufs.append(b)
    return bufs[0], bufs[1], bufs[0][:NB], bufs[1][:NB]


@pytest.mark.parametrize("fn", WRITES)
@settings(max_examples=10, deadline=None)
@given(data=st.data())
def test_in_range_tail_write(fn, data):
    n = data.draw(st.integers(1, 5))
    cells = data.draw(st.lists(st.tuples(st.integers(0, NB - 1), st.integers(0, 40)),
                               min_size=n, max_size=n,
                               unique_by=lambda c: (c[0], c[1] % RING)))
    blk = [b if data.draw(st.booleans()) else -1 for b, _ in cells]
    pos = [p for _, p in cells]
    keys = torch.randn(n, H, D)
    kb, gb, kr, gr = rings()
    want_k, want_g = kb.clone(), gb.clone()
    for i, (b, p) in enumerate(zip(blk, pos)):
        if b >= 0:
            want_k[b, p % RING] = keys[i]
            want_g[b, p % RING] = -keys[i]
    fn(keys, -keys, torch.tensor(pos), torch.tensor(blk), kr, gr)
    assert torch.equal(kb, want_k) and torch.equal(gb, want_g)


@pytest.mark.parametrize("fn", WRITES)
@settings(max_examples=12, deadline=None)
@given(bad=st.one_of(st.integers(NB, 3 * NB), st.integers(-50, -2)), as_list=st.booleans())
def test_out_of_range_ring_block_refused(fn, bad, as_list):
    kb, gb, kr, gr = rings()
    before = kb.clone(), gb.clone()
    blk = [0, bad]
    with pytest.raises(KernelArgumentError) as exc:
        fn(torch.ones(2, H, D), torch.ones(2, H, D), torch.tensor([0, 1]),
           blk if as_list else torch.tensor(blk), kr, gr)
    assert exc.value.extra["field"] == "ring_block_ids"
    assert exc.value.extra["value"] == bad and exc.value.extra["valid"] == f"[-1, {NB})"
    assert torch.equal(kb, before[0]) and torch.equal(gb, before[1])


@pytest.mark.parametrize("fn", WRITES)
@settings(max_examples=8, deadline=None)
@given(bad=st.integers(-1000, -1))
def test_negative_position_refused(fn, bad):
    kb, gb, kr, gr = rings()
    before = kb.clone()
    with pytest.raises(KernelArgumentError) as exc:
        fn(torch.ones(1, H, D), torch.ones(1, H, D), torch.tensor([bad]),
           torch.tensor([1]), kr, gr)
    assert exc.value.extra["field"] == "positions" and exc.value.extra["value"] == bad
    assert torch.equal(kb, before)


@pytest.mark.parametrize("fn", WRITES)
def test_tail_write_shapes_and_dtypes(fn):
    _, _, kr, gr = rings()
    with pytest.raises(KernelArgumentError) as exc:
        fn(torch.ones(2, H, D), torch.ones(2, H, D), torch.tensor([0, 1]),
           torch.tensor([0.0, 1.0]), kr, gr)
    assert exc.value.extra["field"] == "ring_block_ids"
    with pytest.raises(KernelArgumentError) as exc:
        fn(torch.ones(2, H, D // 2), torch.ones(2, H, D // 2), torch.tensor([0, 1]),
           torch.tensor([0, 1]), kr, gr)
    assert exc.value.extra["field"] == "keys"


def _compress_args():
    kb, gb, kr, gr = rings()
    kr.normal_()
    gr.normal_()
    out_buf = torch.zeros(2 * 4, H, D, dtype=torch.float8_e4m3fn)
    out_buf.view(torch.uint8)[4:] = 7
    scale_buf = torch.zeros(2 * 4, H)
    scale_buf[4:] = 7.0
    return kb, kr, gr, out_buf, out_buf[:4], scale_buf, scale_buf[:4]


@pytest.mark.parametrize("fn", COMPRESSES)
@pytest.mark.parametrize("field,ids,starts,slots,bad", [
    ("ring_block_ids", [1, NB], [0, 0], [0, 1], NB),
    ("ring_block_ids", [1, -3], [0, 0], [0, 1], -3),
    ("out_slots", [1, 2], [0, 0], [0, 4], 4),
    ("out_slots", [1, 2], [0, 0], [-2, 1], -2),
    ("pool_starts", [1, 2], [0, -4], [0, 1], -4),
])
def test_compress_out_of_range_refused(fn, field, ids, starts, slots, bad):
    kb, kr, gr, out_buf, out, scale_buf, scale = _compress_args()
    before = out_buf.view(torch.uint8).clone(), scale_buf.clone(), kb.clone()
    with pytest.raises(KernelArgumentError) as exc:
        fn(kr, gr, torch.tensor(ids), torch.tensor(starts), torch.tensor(slots), out,
           scale, 4)
    assert exc.value.extra["field"] == field and exc.value.extra["value"] == bad
    assert torch.equal(out_buf.view(torch.uint8), before[0])
    assert torch.equal(scale_buf, before[1]) and torch.equal(kb, before[2])


@pytest.mark.parametrize("fn", COMPRESSES)
def test_compress_in_range_writes_only_its_slots(fn):
    kb, kr, gr, out_buf, out, scale_buf, scale = _compress_args()
    want = torch.zeros(4, H, D, dtype=torch.float8_e4m3fn), torch.zeros(4, H)
    kpool_compress_ref(kr, gr, torch.tensor([1, -1, 3]), torch.tensor([0, 0, 4]),
                       torch.tensor([2, 0, 3]), want[0], want[1], 4)
    fn(kr, gr, torch.tensor([1, -1, 3]), torch.tensor([0, 0, 4]), torch.tensor([2, 0, 3]),
       out, scale, 4)
    assert torch.equal(out.view(torch.uint8), want[0].view(torch.uint8))
    assert torch.equal(scale, want[1])
    assert bool((out_buf.view(torch.uint8)[4:] == 7).all()) and bool((scale_buf[4:] == 7).all())
