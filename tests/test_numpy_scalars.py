"""numpy scalars are integral / real numbers like any other (F9).

The rule: every integer argument accepts any integral number that is not bool
(``operator.index``: numpy integers included) and stores a plain int; bool is refused.
Generated: each int field of the core spec classes and each int argument of
``plan_model`` is given as a numpy scalar of a drawn dtype holding the same value, and
the result must equal the plain-int one, with plain ints in it.
"""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kvcore.errors import KVCoreError
from kvcore.models.planner import plan_model
from kvcore.specs import (
    ChunkedLocalAttentionSpec,
    FullAttentionSpec,
    SlidingWindowSpec,
)

np = pytest.importorskip("numpy")

SETTINGS = settings(max_examples=40, deadline=None, derandomize=True)
INT_DTYPES = [np.int64, np.int32, np.int16, np.uint16, np.uint32, np.uint64, np.intp]

EXAMPLES = [
    FullAttentionSpec(block_size=16, num_kv_heads=8, head_size=128, dtype="bfloat16"),
    SlidingWindowSpec(block_size=16, num_kv_heads=4, head_size=64, dtype="float16",
                      sliding_window=1024),
    ChunkedLocalAttentionSpec(block_size=32, num_kv_heads=8, head_size=128,
                              dtype="bfloat16", attention_chunk_size=8192),
]


def _int_fields(spec):
    return [f.name for f in dataclasses.fields(spec)
            if type(getattr(spec, f.name)) is int and not f.name.startswith("_")]


CASES = [(spec, name) for spec in EXAMPLES for name in _int_fields(spec)]


@SETTINGS
@given(st.sampled_from(CASES), st.sampled_from(INT_DTYPES))
def test_spec_int_fields_take_numpy_ints(case, dtype):
    spec, name = case
    value = getattr(spec, name)
    if value > np.iinfo(dtype).max:
        return
    made = dataclasses.replace(spec, **{name: dtype(value)})
    assert made == spec
    assert type(getattr(made, name)) is int
    assert type(made.page_size_bytes) is int


@pytest.mark.parametrize("spec,name", CASES[:3])
def test_spec_int_fields_refuse_bool(spec, name):
    with pytest.raises(KVCoreError):
        dataclasses.replace(spec, **{name: True})


GiB = 1 << 30
PLAIN = dict(kv_cache_memory_bytes=20 * GiB, max_model_len=4096, block_size=32,
             tensor_parallel_size=2, pipeline_parallel_size=1, kernel_block_size=16,
             max_num_batched_tokens=2048)


@pytest.fixture(scope="module")
def plain_plan():
    return plan_model("llama-3.1-8b", **PLAIN)


@settings(max_examples=12, deadline=None, derandomize=True)
@given(st.sets(st.sampled_from(sorted(PLAIN)), min_size=1),
       st.sampled_from([np.int64, np.int32, np.uint32, np.uint64]))
def test_plan_model_takes_numpy_ints(plain_plan, names, dtype):
    kw = dict(PLAIN)
    for n in names:
        if kw[n] <= np.iinfo(dtype).max:
            kw[n] = dtype(kw[n])
    cfg = plan_model("llama-3.1-8b", **kw)
    assert cfg.num_blocks == plain_plan.num_blocks and type(cfg.num_blocks) is int
    for g, h in zip(cfg.kv_cache_groups, plain_plan.kv_cache_groups):
        assert g.block_size == h.block_size and type(g.block_size) is int
        assert type(g.page_size_bytes) is int


@pytest.mark.parametrize("name", ["block_size", "tensor_parallel_size"])
def test_plan_model_refuses_bool(name):
    with pytest.raises(KVCoreError):
        plan_model("llama-3.1-8b", **{**PLAIN, name: True})


@settings(max_examples=10, deadline=None, derandomize=True)
@given(st.sampled_from(INT_DTYPES), st.integers(1, 64),
       st.lists(st.integers(0, 4000), min_size=1, max_size=8))
def test_slot_mapping_takes_numpy_block_size(dtype, block_size, positions):
    """runtime slot_mapping: id x block_size + position % block_size (vLLM's slots)."""
    from kvcore.runtime.kernel_tables import slot_mapping

    table = list(range(1, 4000 // block_size + 2))
    got = slot_mapping(table, positions, dtype(block_size))
    want = slot_mapping(table, positions, block_size)
    assert got == want and all(type(x) is int for x in got)


def test_deploy_plan_model_takes_numpy_gpu_memory():
    from kvcore.deploy import plan_model as deploy_plan

    a = deploy_plan("llama-3.1-8b", gpu_memory_bytes=80 * GiB, max_model_len=4096)
    b = deploy_plan("llama-3.1-8b", gpu_memory_bytes=np.int64(80 * GiB),
                    max_model_len=np.int32(4096), tensor_parallel_size=np.int32(1))
    assert b.num_blocks == a.num_blocks and type(b.num_blocks) is int
