"""A request id belongs to one request object while it holds blocks (fresh tester,
finding T1): two live requests made with one id shared block tables silently, the
second computing on blocks the first held, and after ``free`` of one the other kept a
table of blocks the pool handed out again.

Rule (the brief's): the pool never hands out a block that someone else holds, and no
layer reads a block it does not hold.  kvcore's tables are keyed by request id (as
vLLM's ``req_to_blocks``); vLLM's engine makes ids unique before its scheduler, while
kvcore's public ``make_request`` takes any id, so ``allocate_slots`` refuses a second
object under a live id, with no state changed.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kvcore import FullAttentionSpec, KVCacheManager, SlidingWindowSpec, plan
from kvcore.errors import RequestError


def _manager(hybrid: bool, caching: bool) -> KVCacheManager:
    layers = {"l0": FullAttentionSpec(block_size=16, num_kv_heads=8, head_size=128)}
    if hybrid:
        layers["l1"] = SlidingWindowSpec(block_size=16, num_kv_heads=8, head_size=128,
                                         sliding_window=32)
    config = plan(layers, max_model_len=512, num_gpu_blocks_override=64)
    return KVCacheManager(config, max_model_len=512, enable_caching=caching,
                          check_invariants=True)


def _tables(m: KVCacheManager, rid: str):
    return m.get_block_ids(rid)


@settings(max_examples=60, deadline=None)
@given(hybrid=st.booleans(), caching=st.booleans(), first=st.integers(1, 200),
       second=st.integers(1, 200), same_prompt=st.booleans(), steps=st.integers(0, 5))
def test_a_second_object_under_a_live_id_is_refused_with_no_state_changed(
        hybrid, caching, first, second, same_prompt, steps):
    m = _manager(hybrid, caching)
    a = m.make_request("x", list(range(first + 8)))
    assert m.allocate_slots(a, first) is not None
    a.num_computed_tokens = first
    for _ in range(steps):  # a few decode steps of the owner
        a.append_output_token_ids(7)
        if m.allocate_slots(a, 1) is None:
            break
        a.num_computed_tokens += 1
    before = _tables(m, "x")
    free_before = m.block_pool.num_free_blocks
    prompt = list(range(first + 8)) if same_prompt else list(range(1000, 1000 + second))
    b = m.make_request("x", prompt)
    with pytest.raises(RequestError) as e:
        m.allocate_slots(b, min(second, len(prompt)))
    assert "request_id" in str(e.value) and "'x'" in str(e.value)
    assert _tables(m, "x") == before
    assert m.block_pool.num_free_blocks == free_before
    # the owner goes on; once it is freed the id is free for a new object
    m.free(a)
    c = m.make_request("x", prompt)
    assert m.allocate_slots(c, min(second, len(prompt))) is not None


def test_the_testers_case_no_longer_shares_block_one():
    config = plan({"l0": FullAttentionSpec(block_size=16, num_kv_heads=8, head_size=128)},
                  max_model_len=304, num_gpu_blocks_override=20)
    m = KVCacheManager(config, max_model_len=304, check_invariants=True)
    a = m.make_request("x", list(range(50)))
    b = m.make_request("x", list(range(500, 550)))
    m.allocate_slots(a, 16)
    a.num_computed_tokens = 16
    with pytest.raises(RequestError):
        m.allocate_slots(b, 34)
    assert len(m.get_block_ids("x")[0]) == 1


@pytest.mark.parametrize("hybrid", [False, True])
def test_an_id_whose_tables_an_engine_took_out_is_free_again(hybrid):
    """A deferred free (an engine pops the tables out of ``req_to_blocks`` and frees the
    blocks itself, as kvcore-vllm's ``pop_blocks_for_free``): the id holds no blocks,
    so a new object under it is admitted (plugins/mamba's test_runtime_safety found
    the first version of the rule refusing it)."""
    m = _manager(hybrid, True)
    a = m.make_request("A", list(range(40)))
    assert m.allocate_slots(a, 40) is not None
    popped = [mg.req_to_blocks.pop("A") for mg in m.managers]
    for mg in m.managers:
        mg.num_cached_blocks.pop("A", None)
    for table in popped:
        m.block_pool.free_blocks(list(reversed(table)))
    b = m.make_request("A", list(range(100, 120)))
    assert m.allocate_slots(b, 20) is not None
    c = m.make_request("A", list(range(200, 220)))
    with pytest.raises(RequestError):  # b holds blocks now
        m.allocate_slots(c, 20)


@settings(max_examples=40, deadline=None)
@given(bs=st.sampled_from([1, 2, 4, 8, 32, 64]), hybrid=st.booleans(),
       shared=st.integers(1, 64))
def test_a_request_hashed_at_another_block_size_is_refused(bs, hybrid, shared):
    """Fresh tester T10: a Request hashed at block_size 8 sharing 8 tokens with a cached
    16-token block got a 16-token hit (positions 8-15 of another prompt).  A hit maps
    whole blocks of the manager's hash block size, so a request hashed otherwise is
    refused (RequestError naming block_size) before any lookup or allocation."""
    from kvcore import Request

    m = _manager(hybrid, True)
    assert m.hash_block_size == 16
    a = m.make_request("a", list(range(100, 164)))
    assert m.allocate_slots(a, 64) is not None
    a.num_computed_tokens = 64
    m.free(a)
    d = Request("d", list(range(100, 100 + shared)) + [7] * 64, block_size=bs)
    with pytest.raises(RequestError) as e:
        m.get_computed_blocks(d)
    assert e.value.extra.get("field") == "block_size"
    free = m.block_pool.num_free_blocks
    with pytest.raises(RequestError):
        m.allocate_slots(d, 10)
    assert m.block_pool.num_free_blocks == free and not m.get_block_ids("d")[0]
    # the manager's own request of that prompt hits at most what it shares, whole blocks
    ok = m.make_request("ok", list(range(100, 100 + shared)) + [7] * 64)
    _, hit = m.get_computed_blocks(ok)
    assert hit == (shared // 16) * 16
