"""MLA kernel argument checks (tester T18 / T19): out-of-range slots, block ids past the
cache, seq_lens past the table, bad fp8 scales, non-integer index tensors and shape
mismatches are refused before any launch on both backends with a KernelArgumentError
naming the argument; the cache (the first half of a larger buffer) and the buffer's
other half ("another layer") stay untouched.  In-range slots write exactly their slots
(a per-slot loop here is the oracle)."""

import importlib.util

import pytest

torch = pytest.importorskip("torch")

from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402
from kvcore_mla import ops  # noqa: E402

from kvcore.errors import KernelArgumentError, KVCoreError  # noqa: E402

L, R = 512, 64
NB, BS = 6, 4
HAS_TRITON = importlib.util.find_spec("triton") is not None
BACKENDS = ["ref", pytest.param("triton", marks=pytest.mark.skipif(
    not HAS_TRITON, reason="triton is not installed"))]


def halves(mode="auto"):
    width, dt = (656, torch.uint8) if mode == "fp8_ds_mla" else (L + R, torch.bfloat16)
    if mode == "fp8":
        dt = torch.float8_e4m3fn
    buf = torch.zeros(2 * NB, BS, width).to(dt)
    buf.view(torch.uint8)[NB:] = 7
    return buf, buf[:NB]


def raw(t):
    return t.view(torch.uint8).clone()


def latents(t, seed=0):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(t, L, generator=g).to(torch.bfloat16),
            torch.randn(t, R, generator=g).to(torch.bfloat16))


@pytest.mark.parametrize("backend", BACKENDS)
@settings(max_examples=10, deadline=None)
@given(data=st.data())
def test_in_range_slots_write_exactly_their_slots(backend, data):
    n = data.draw(st.integers(1, 6))
    slots = data.draw(st.lists(st.integers(-1, NB * BS - 1), min_size=n, max_size=n))
    seen = set()
    slots = [s if s < 0 or s not in seen and not seen.add(s) else -1 for s in slots]
    kv_c, k_pe = latents(n, data.draw(st.integers(0, 1000)))
    buf, kc = halves()
    want = buf.clone()
    for i, s in enumerate(slots):
        if s >= 0:
            want[s // BS, s % BS] = torch.cat([kv_c[i], k_pe[i]])
    ops.concat_and_cache_mla(kv_c, k_pe, kc, torch.tensor(slots), backend=backend)
    assert torch.equal(buf, want)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("mode", ["auto", "fp8_ds_mla"])
@settings(max_examples=8, deadline=None)
@given(bad=st.one_of(st.integers(NB * BS, NB * BS + 500), st.integers(-500, -2)),
       pos=st.integers(0, 2), as_list=st.booleans())
def test_out_of_range_slot_refused(backend, mode, bad, pos, as_list):
    buf, kc = halves(mode)
    before = raw(buf)
    slots = [0, 1, 2]
    slots[pos] = bad
    kv_c, k_pe = latents(3)
    with pytest.raises(KernelArgumentError) as exc:
        ops.concat_and_cache_mla(kv_c, k_pe, kc, slots if as_list else torch.tensor(slots),
                                 mode, backend=backend)
    assert exc.value.extra["field"] == "slot_mapping"
    assert exc.value.extra["value"] == bad and str(bad) in str(exc.value)
    assert exc.value.extra["valid"] == f"[-1, {NB * BS})"
    assert torch.equal(raw(buf), before)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("bad", [float("nan"), float("inf"), 0.0, -1.0])
def test_fp8_scale_refused(backend, bad):
    buf, kc = halves("fp8")
    before = raw(buf)
    kv_c, k_pe = latents(2)
    with pytest.raises(KernelArgumentError) as exc:
        ops.concat_and_cache_mla(kv_c, k_pe, kc, torch.tensor([0, 1]), "fp8", bad,
                                 backend=backend)
    assert exc.value.extra["field"] == "scale"
    assert torch.equal(raw(buf), before)
    with pytest.raises(KernelArgumentError):
        ops.gather_mla_cache(kc, torch.tensor([[0]]), torch.tensor([2]), "fp8", bad,
                             backend=backend)


@pytest.mark.parametrize("backend", BACKENDS)
@settings(max_examples=8, deadline=None)
@given(bad=st.one_of(st.integers(NB, 3 * NB), st.integers(-50, -2)), col=st.integers(0, 1))
def test_gather_out_of_range_block_refused(backend, bad, col):
    buf, kc = halves()
    table = [[0, 1], [2, 3]]
    table[0][col] = bad
    with pytest.raises(KernelArgumentError) as exc:
        ops.gather_mla_cache(kc, torch.tensor(table), torch.tensor([8, 8]), backend=backend)
    assert exc.value.extra["field"] == "block_table"
    assert exc.value.extra["value"] == bad and exc.value.extra["valid"] == f"[-1, {NB})"


@pytest.mark.parametrize("backend", BACKENDS)
@settings(max_examples=8, deadline=None)
@given(bad=st.one_of(st.integers(2 * BS + 1, 1000), st.integers(-1000, -1)))
def test_gather_seq_lens_past_table_refused(backend, bad):
    _, kc = halves()
    with pytest.raises(KernelArgumentError) as exc:
        ops.gather_mla_cache(kc, torch.tensor([[0, 1], [2, 3]]), torch.tensor([4, bad]),
                             backend=backend)
    assert exc.value.extra["field"] == "seq_lens"
    assert exc.value.extra["value"] == bad and exc.value.extra["valid"] == f"[0, {2 * BS}]"


@pytest.mark.parametrize("backend", BACKENDS)
def test_gather_in_range_ignores_entries_past_length(backend):
    buf, kc = halves()
    kv_c, k_pe = latents(8, 3)
    ops.concat_and_cache_mla(kv_c, k_pe, kc, torch.arange(8), backend="ref")
    # request 1 reads 3 tokens of block 1; its second entry (99) lies past its length
    out = ops.gather_mla_cache(kc, [[0, 1], [1, 99]], [6, 3], backend=backend)
    want = torch.cat([torch.cat([kv_c, k_pe], 1)[:6], torch.cat([kv_c, k_pe], 1)[4:7]])
    assert torch.equal(out, want)


@pytest.mark.parametrize("backend", BACKENDS)
def test_shape_and_dtype_errors_are_kvcore_errors(backend):
    _, kc = halves()
    kv_c, k_pe = latents(3)
    with pytest.raises(KVCoreError) as exc:
        ops.concat_and_cache_mla(kv_c, k_pe[:2], kc, torch.tensor([0, 1, 2]), backend=backend)
    assert exc.value.extra["field"] == "k_pe"
    with pytest.raises(KernelArgumentError) as exc:
        ops.concat_and_cache_mla(kv_c, k_pe, kc, torch.tensor([0.0, 1.0, 2.0]),
                                 backend=backend)
    assert exc.value.extra["field"] == "slot_mapping"
    with pytest.raises(KernelArgumentError) as exc:
        ops.concat_and_cache_mla(kv_c.double(), k_pe, kc, torch.tensor([0, 1, 2]),
                                 backend=backend)
    assert exc.value.extra["field"] == "kv_c"
