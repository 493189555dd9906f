"""Kernel argument checks (tester T18 / T19): out-of-range slot / block ids, seq_lens past
the block table, bad fp8 scales, repeated copy destinations, non-integer index tensors
and wrong K/V dtypes are refused on the host before any launch, on the reference and
the Triton path, with a KernelArgumentError naming the argument, the value and the valid
range; the cache and its neighbour in the same buffer (another layer) are left
untouched.  In-range ids give the results of a per-slot loop written here (the oracle),
on both paths."""

from __future__ import annotations

import importlib.util
import subprocess
import sys

import pytest

torch = pytest.importorskip("torch")

from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from kvcore.errors import KernelArgumentError, KVCoreError  # noqa: E402
from kvcore.ops import (  # noqa: E402
    copy_blocks,
    gather_cache,
    paged_decode_attention_ref,
    reshape_and_cache,
)

needs_triton = pytest.mark.skipif(importlib.util.find_spec("triton") is None,
                                  reason="triton is not installed")
IMPLS = ["ref", pytest.param("triton", marks=needs_triton)]
NB, BS, H, D = 8, 4, 2, 8
NEIGHBOUR = 7.0


def halves(dtype=torch.float32, fill=None):
    """Key / value caches that are the first half of a buffer twice as large (as
    allocate_tensors' per-layer views of one buffer are); the second half holds 7.0,
    "another layer".  Returns (kbuf, vbuf, key_cache, value_cache)."""
    bufs = []
    for j in range(2):
        buf = torch.zeros(2 * NB, BS, H, D)
        buf[NB:] = NEIGHBOUR
        if fill is not None:
            for b in range(NB):
                buf[b] = fill(b, j)
        bufs.append(buf.to(dtype))
    return bufs[0], bufs[1], bufs[0][:NB], bufs[1][:NB]


def assert_refused(exc, field, value):
    err = exc.value
    assert isinstance(err, KVCoreError)
    assert err.extra["field"] == field
    assert err.extra["value"] == value
    assert field in str(err) and str(value) in str(err)
    assert "valid" in err.extra


# ---- reshape_and_cache -----------------------------------------------------------------

@pytest.mark.parametrize("impl", IMPLS)
@settings(max_examples=12, deadline=None)
@given(data=st.data())
def test_in_range_slots_write_exactly_their_slots(impl, data):
    n = data.draw(st.integers(1, 10))
    slots = data.draw(st.lists(st.integers(0, NB * BS - 1), min_size=n, max_size=n,
                               unique=True))
    pads = data.draw(st.lists(st.booleans(), min_size=n, max_size=n))
    slots = [-1 if p else s for s, p in zip(slots, pads)]
    g = torch.Generator().manual_seed(data.draw(st.integers(0, 2**31 - 1)))
    k, v = torch.randn(n, H, D, generator=g), torch.randn(n, H, D, generator=g)
    kbuf, vbuf, kc, vc = halves()
    want_k, want_v = kbuf.clone(), vbuf.clone()
    for i, s in enumerate(slots):  # the oracle: one slot at a time
        if s >= 0:
            want_k[s // BS, s % BS] = k[i]
            want_v[s // BS, s % BS] = v[i]
    reshape_and_cache(k, v, kc, vc, torch.tensor(slots), "float32", impl=impl)
    assert torch.equal(kbuf, want_k) and torch.equal(vbuf, want_v)


@pytest.mark.parametrize("impl", IMPLS)
@settings(max_examples=15, deadline=None)
@given(bad=st.one_of(st.integers(NB * BS, NB * BS + 2000), st.integers(-2000, -2)),
       pos=st.integers(0, 2), as_list=st.booleans())
def test_out_of_range_slot_refused_nothing_written(impl, bad, pos, as_list):
    kbuf, vbuf, kc, vc = halves()
    before = kbuf.clone(), vbuf.clone()
    slots = [0, 1, 2]
    slots[pos] = bad
    k = torch.randn(3, H, D)
    with pytest.raises(KernelArgumentError) as exc:
        reshape_and_cache(k, k.clone(), kc, vc, slots if as_list else torch.tensor(slots),
                          impl=impl)
    assert_refused(exc, "slot_mapping", bad)
    assert exc.value.extra["valid"] == f"[-1, {NB * BS})"
    assert f"at index {pos}" in str(exc.value)
    assert torch.equal(kbuf, before[0]) and torch.equal(vbuf, before[1])


@pytest.mark.parametrize("impl", IMPLS)
def test_slot_mapping_list_equals_tensor(impl):
    k, v = torch.randn(3, H, D), torch.randn(3, H, D)
    _, _, kc1, vc1 = halves()
    _, _, kc2, vc2 = halves()
    reshape_and_cache(k, v, kc1, vc1, [5, -1, 31], impl=impl)
    reshape_and_cache(k, v, kc2, vc2, torch.tensor([5, -1, 31]), impl=impl)
    assert torch.equal(kc1, kc2) and torch.equal(vc1, vc2)
    assert torch.equal(kc1[1, 1], k[0]) and torch.equal(kc1[7, 3], k[2])


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bool])
def test_non_integer_slot_mapping_refused(impl, dtype):
    _, _, kc, vc = halves()
    k = torch.randn(2, H, D)
    with pytest.raises(KernelArgumentError) as exc:
        reshape_and_cache(k, k, kc, vc, torch.tensor([0, 1]).to(dtype), impl=impl)
    assert exc.value.extra["field"] == "slot_mapping"
    assert "int32 or int64" in str(exc.value)


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("kdt,vdt,field", [(torch.float64, torch.float64, "key"),
                                           (torch.float32, torch.float16, "value"),
                                           (torch.int32, torch.int32, "key")])
def test_kv_dtypes_outside_the_documented_ones_refused(impl, kdt, vdt, field):
    kbuf, _, kc, vc = halves()
    before = kbuf.clone()
    k = torch.ones(2, H, D)
    with pytest.raises(KernelArgumentError) as exc:
        reshape_and_cache(k.to(kdt), k.to(vdt), kc, vc, torch.tensor([0, 1]), impl=impl)
    assert exc.value.extra["field"] == field
    assert torch.equal(kbuf, before)


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("bad", [float("nan"), float("inf"), -float("inf"), 0.0, -0.5])
@pytest.mark.parametrize("which", ["k_scale", "v_scale"])
@pytest.mark.parametrize("as_tensor", [False, True])
def test_fp8_scale_not_finite_positive_refused(impl, bad, which, as_tensor):
    kbuf, vbuf, kc, vc = halves(torch.float8_e4m3fn)
    before = kbuf.view(torch.uint8).clone(), vbuf.view(torch.uint8).clone()
    scales = {"k_scale": 0.1, "v_scale": 0.1}
    scales[which] = torch.tensor([bad]) if as_tensor else bad
    k = torch.randn(2, H, D)
    with pytest.raises(KernelArgumentError) as exc:
        reshape_and_cache(k, k, kc, vc, torch.tensor([0, 1]), "fp8", impl=impl, **scales)
    err = exc.value
    assert err.extra["field"] == which and which in str(err)
    assert err.extra["value"] == bad or bad != bad and err.extra["value"] != err.extra["value"]
    assert torch.equal(kbuf.view(torch.uint8), before[0])
    assert torch.equal(vbuf.view(torch.uint8), before[1])
    # gather reads through the same scales: refused there too
    with pytest.raises(KernelArgumentError):
        gather_cache(kc, vc, torch.tensor([[0]]), torch.tensor([2]), "fp8", impl=impl,
                     **scales)


# ---- gather_cache ----------------------------------------------------------------------

def _fill(b, j):
    return float(10 * b + j)


@pytest.mark.parametrize("impl", IMPLS)
@settings(max_examples=10, deadline=None)
@given(data=st.data())
def test_in_range_tables_read_their_blocks(impl, data):
    batch = data.draw(st.integers(1, 3))
    width = data.draw(st.integers(1, 3))
    table = [data.draw(st.lists(st.integers(-1, NB - 1), min_size=width, max_size=width))
             for _ in range(batch)]
    lens = [data.draw(st.integers(0, width * BS)) for _ in range(batch)]
    # entries past a request's length are ignored: put garbage there
    for r, n in zip(table, lens):
        for j in range(-(-n // BS), width):
            r[j] = data.draw(st.sampled_from([NB, 10 * NB, -5]))
    _, _, kc, vc = halves(fill=_fill)
    ko, vo = gather_cache(kc, vc, torch.tensor(table, dtype=torch.int32),
                          torch.tensor(lens, dtype=torch.int32), impl=impl)
    want_k, want_v = [], []
    for r, n in zip(table, lens):  # the oracle: one position at a time
        for p in range(n):
            blk = r[p // BS]
            want_k.append(kc[blk, p % BS] if blk >= 0 else torch.zeros(H, D))
            want_v.append(vc[blk, p % BS] if blk >= 0 else torch.zeros(H, D))
    assert ko.shape == (sum(lens), H, D)
    if want_k:
        assert torch.equal(ko, torch.stack(want_k)) and torch.equal(vo, torch.stack(want_v))


@pytest.mark.parametrize("impl", IMPLS)
@settings(max_examples=12, deadline=None)
@given(bad=st.one_of(st.integers(NB, 2 * NB + 50), st.integers(-100, -2)),
       col=st.integers(0, 1))
def test_out_of_range_block_id_read_refused(impl, bad, col):
    kbuf, vbuf, kc, vc = halves(fill=_fill)
    before = kbuf.clone()
    table = [[1, 2], [3, 4]]
    table[1][col] = bad
    with pytest.raises(KernelArgumentError) as exc:
        gather_cache(kc, vc, torch.tensor(table, dtype=torch.int32),
                     torch.tensor([8, 8], dtype=torch.int32), impl=impl)
    assert_refused(exc, "block_table", bad)
    assert exc.value.extra["valid"] == f"[-1, {NB})"
    assert f"at index [1, {col}]" in str(exc.value)
    assert torch.equal(kbuf, before)


@pytest.mark.parametrize("impl", IMPLS)
@settings(max_examples=12, deadline=None)
@given(bad=st.one_of(st.integers(2 * BS + 1, 10_000), st.integers(-10_000, -1)),
       row=st.integers(0, 1))
def test_seq_lens_past_the_table_refused(impl, bad, row):
    _, _, kc, vc = halves(fill=_fill)
    lens = [8, 8]
    lens[row] = bad
    with pytest.raises(KernelArgumentError) as exc:
        gather_cache(kc, vc, torch.tensor([[1, 2], [3, 4]], dtype=torch.int32),
                     torch.tensor(lens, dtype=torch.int32), impl=impl)
    assert_refused(exc, "seq_lens", bad)
    assert exc.value.extra["valid"] == f"[0, {2 * BS}]"


@pytest.mark.parametrize("impl", IMPLS)
def test_gather_float_table_refused_list_converted(impl):
    _, _, kc, vc = halves(fill=_fill)
    with pytest.raises(KernelArgumentError) as exc:
        gather_cache(kc, vc, torch.tensor([[1.0]]), torch.tensor([2]), impl=impl)
    assert exc.value.extra["field"] == "block_table"
    ko, _ = gather_cache(kc, vc, [[3]], [2], impl=impl)
    assert torch.equal(ko, kc[3, :2])


def test_paged_decode_attention_ref_checks_the_table():
    _, _, kc, vc = halves(fill=_fill)
    q = torch.randn(1, H, D)
    with pytest.raises(KernelArgumentError) as exc:
        paged_decode_attention_ref(q, kc, vc, torch.tensor([[1, NB]]), torch.tensor([6]))
    assert_refused(exc, "block_table", NB)
    with pytest.raises(KernelArgumentError) as exc:
        paged_decode_attention_ref(q, kc, vc, torch.tensor([[1, 2]]), torch.tensor([9]))
    assert_refused(exc, "seq_lens", 9)


# ---- copy_blocks -----------------------------------------------------------------------

@pytest.mark.parametrize("impl", IMPLS)
@settings(max_examples=12, deadline=None)
@given(data=st.data())
def test_in_range_distinct_pairs_copy(impl, data):
    ids = data.draw(st.permutations(range(NB)))
    n = data.draw(st.integers(1, NB // 2))
    pairs = [[ids[i], ids[n + i]] for i in range(n)]  # sources and destinations disjoint
    if data.draw(st.booleans()):
        pairs.append([-1, ids[-1]] if data.draw(st.booleans()) else [ids[0], -1])
    kbuf, _, kc, _ = halves(fill=_fill)
    want = kbuf.clone()
    for s, d in pairs:
        if s >= 0 and d >= 0:
            want[d] = kbuf[s]
    copy_blocks([kc], torch.tensor(pairs), impl=impl)
    assert torch.equal(kbuf, want)


@pytest.mark.parametrize("impl", IMPLS)
@settings(max_examples=15, deadline=None)
@given(bad=st.one_of(st.integers(NB, 3 * NB), st.integers(-50, -2)),
       side=st.sampled_from([0, 1]), as_list=st.booleans())
def test_out_of_range_copy_refused_nothing_written(impl, bad, side, as_list):
    kbuf, vbuf, kc, vc = halves(fill=_fill)
    before = kbuf.clone(), vbuf.clone()
    pairs = [[1, 2], [3, 4]]
    pairs[1][side] = bad
    with pytest.raises(KernelArgumentError) as exc:
        copy_blocks([kc, vc], pairs if as_list else torch.tensor(pairs), impl=impl)
    assert_refused(exc, "src_to_dst", bad)
    assert ("source" if side == 0 else "destination") in str(exc.value)
    assert "pair 1" in str(exc.value)
    assert torch.equal(kbuf, before[0]) and torch.equal(vbuf, before[1])


@pytest.mark.parametrize("impl", IMPLS)
@settings(max_examples=15, deadline=None)
@given(data=st.data())
def test_repeated_or_source_destination_refused(impl, data):
    ids = data.draw(st.permutations(range(NB)))
    pairs = [[ids[0], ids[1]], [ids[2], ids[3]]]
    kind = data.draw(st.sampled_from(["dup", "self", "chain"]))
    if kind == "dup":
        pairs.append([ids[4], ids[1]])
        block = ids[1]
    elif kind == "self":
        pairs.append([ids[5], ids[5]])
        block = ids[5]
    else:
        pairs.append([ids[1], ids[6]])  # block ids[1] written and read
        block = ids[1]
    kbuf, _, kc, _ = halves(fill=_fill)
    before = kbuf.clone()
    with pytest.raises(KernelArgumentError) as exc:
        copy_blocks([kc], torch.tensor(pairs), impl=impl)
    assert_refused(exc, "src_to_dst", block)
    assert torch.equal(kbuf, before)


@pytest.mark.parametrize("impl", IMPLS)
def test_copy_checks_every_cache_before_copying_any(impl):
    kbuf, _, kc, _ = halves(fill=_fill)
    small = torch.zeros(4, BS, H, D)
    before = kbuf.clone(), small.clone()
    with pytest.raises(KernelArgumentError) as exc:
        copy_blocks([kc, small], torch.tensor([[1, 6]]), impl=impl)
    assert_refused(exc, "src_to_dst", 6)
    assert "caches[1]" in str(exc.value)
    assert torch.equal(kbuf, before[0]) and torch.equal(small, before[1])


def test_checks_module_imports_without_torch():
    code = ("import sys; import kvcore.ops.checks, kvcore.errors; "
            "assert 'torch' not in sys.modules, 'torch imported'")
    subprocess.run([sys.executable, "-c", code], check=True)
