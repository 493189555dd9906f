"""TurboQuant kernel argument checks (tester T18 / T19): slots outside
[-1, num_blocks x block_size), block ids outside [-1, num_blocks), non-integer index
tensors and K/V of the wrong dtype are refused before any launch on both paths with a
KernelArgumentError naming the argument; the cache (the first half of a larger buffer)
and the other half ("another layer") stay untouched.  In-range stores equal the torch
reference writing into a cache of its own (the oracle), on both paths."""

from __future__ import annotations

import importlib.util

import pytest

torch = pytest.importorskip("torch")

from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402
from kvcore_turboquant.kernels import (  # noqa: E402
    allocate_kv_cache,
    turboquant_dequant,
    turboquant_store,
)

from kvcore.errors import KernelArgumentError  # noqa: E402

SCHEME, D, H, NB, BS = "turboquant_k2v8", 64, 2, 4, 16
HAS_TRITON = importlib.util.find_spec("triton") is not None
IMPLS = ["torch", pytest.param("triton", marks=pytest.mark.skipif(
    not HAS_TRITON, reason="triton is not installed"))]


def halves():
    buf = allocate_kv_cache(2 * NB, BS, H, SCHEME, head_size=D, head_size_v=D)
    buf[NB:] = 7
    return buf, buf[:NB]


def kv(t, seed=0):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(t, H, D, generator=g).to(torch.bfloat16),
            torch.randn(t, H, D, generator=g).to(torch.bfloat16))


@pytest.mark.parametrize("impl", IMPLS)
@settings(max_examples=6, deadline=None)
@given(data=st.data())
def test_in_range_store_equals_reference(impl, data):
    n = data.draw(st.integers(1, 6))
    slots = data.draw(st.lists(st.integers(0, NB * BS - 1), min_size=n, max_size=n,
                               unique=True))
    if data.draw(st.booleans()):
        slots[0] = -1
    k, v = kv(n, data.draw(st.integers(0, 1000)))
    buf, cache = halves()
    want = allocate_kv_cache(NB, BS, H, SCHEME, head_size=D, head_size_v=D)
    turboquant_store(k, v, want, torch.tensor(slots), SCHEME, impl="torch")
    turboquant_store(k, v, cache, torch.tensor(slots), SCHEME, impl=impl)
    assert torch.equal(cache, want)
    assert bool((buf[NB:] == 7).all())


@pytest.mark.parametrize("impl", IMPLS)
@settings(max_examples=10, deadline=None)
@given(bad=st.one_of(st.integers(NB * BS, NB * BS + 500), st.integers(-500, -2)),
       pos=st.integers(0, 2), as_list=st.booleans())
def test_out_of_range_store_refused(impl, bad, pos, as_list):
    buf, cache = halves()
    before = buf.clone()
    slots = [0, 1, 2]
    slots[pos] = bad
    k, v = kv(3)
    with pytest.raises(KernelArgumentError) as exc:
        turboquant_store(k, v, cache, slots if as_list else torch.tensor(slots), SCHEME,
                         impl=impl)
    assert exc.value.extra["field"] == "slot_mapping"
    assert exc.value.extra["value"] == bad and str(bad) in str(exc.value)
    assert exc.value.extra["valid"] == f"[-1, {NB * BS})"
    assert torch.equal(buf, before)


@pytest.mark.parametrize("impl", IMPLS)
@settings(max_examples=10, deadline=None)
@given(bad=st.one_of(st.integers(NB * BS, NB * BS + 500), st.integers(-500, -2)))
def test_out_of_range_dequant_slot_refused(impl, bad):
    _, cache = halves()
    with pytest.raises(KernelArgumentError) as exc:
        turboquant_dequant(cache, torch.tensor([0, bad]), SCHEME, head_size=D, impl=impl)
    assert exc.value.extra["field"] == "block_table_or_slots"
    assert exc.value.extra["value"] == bad


@pytest.mark.parametrize("impl", IMPLS)
@settings(max_examples=10, deadline=None)
@given(bad=st.one_of(st.integers(NB, 3 * NB), st.integers(-50, -2)))
def test_out_of_range_dequant_block_refused(impl, bad):
    _, cache = halves()
    with pytest.raises(KernelArgumentError) as exc:
        turboquant_dequant(cache, torch.tensor([[0, bad]]), SCHEME, head_size=D, impl=impl)
    assert exc.value.extra["field"] == "block_table_or_slots"
    assert exc.value.extra["value"] == bad and exc.value.extra["valid"] == f"[-1, {NB})"


@pytest.mark.parametrize("impl", IMPLS)
def test_dtypes_refused(impl):
    buf, cache = halves()
    before = buf.clone()
    k, v = kv(2)
    with pytest.raises(KernelArgumentError) as exc:
        turboquant_store(k, v, cache, torch.tensor([0.0, 1.0]), SCHEME, impl=impl)
    assert exc.value.extra["field"] == "slot_mapping"
    with pytest.raises(KernelArgumentError) as exc:
        turboquant_store(k.double(), v, cache, torch.tensor([0, 1]), SCHEME, impl=impl)
    assert exc.value.extra["field"] == "key"
    assert torch.equal(buf, before)
