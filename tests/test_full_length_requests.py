"""``max_num_full_length_requests`` (``kvcore plan --json``; a printed line where it
differs from floor(max_concurrency)): requests of max_model_len that kvcore's runtime
holds at once.  vLLM's max_concurrency counts the null block, so floor(max_concurrency)
full-length requests can preempt (tester B, stop 37: 4.00 printed, 3 fit)."""

from __future__ import annotations

import math

from hypothesis import given, settings
from hypothesis import strategies as st

from kvcore import FullAttentionSpec, plan
from kvcore.planning import plan_to_dict
from kvcore.runtime import KVCacheManager


@settings(max_examples=40, deadline=None)
@given(bs=st.sampled_from([4, 8, 16]), mml=st.integers(8, 200), layers=st.integers(1, 3),
       n=st.integers(1, 6), extra=st.integers(0, 63))
def test_that_many_full_length_requests_are_held_and_one_more_is_not(bs, mml, layers, n,
                                                                     extra):
    spec = FullAttentionSpec(block_size=bs, num_kv_heads=1, head_size=8, dtype="float32")
    specs = {f"model.layers.{i}.attn": spec for i in range(layers)}
    blocks = -(-mml // bs)
    page = spec.page_size_bytes * layers
    # n requests, the null block and up to one request less one block more: at
    # extra = blocks - 1, vLLM's figure says n + 1 and n fit
    budget = (n * blocks + 1 + extra % blocks) * page
    config = plan(specs, kv_cache_memory_bytes=budget, max_model_len=mml,
                  max_num_batched_tokens=max(mml, 8))
    out = plan_to_dict(config)
    want = (config.num_blocks - 1) // blocks  # the definition, one group of full layers
    assert out["max_num_full_length_requests"] == want
    assert want <= math.floor(out["max_concurrency"] + 1e-9)
    m = KVCacheManager(config, max_model_len=mml, enable_caching=False)
    for i in range(want):
        r = m.make_request(f"r{i}", [1 + i] * mml)
        assert m.allocate_slots(r, mml) is not None, (i, want, config.num_blocks)
    r = m.make_request("one-more", [99] * mml)
    assert m.allocate_slots(r, mml) is None


def test_the_printed_case():
    """3 full layers, blocks of 16, max_model_len 256, 64 blocks: vLLM's figure 4.00,
    63 usable blocks hold 3 requests of 16 blocks (tester B's c3.json)."""
    spec = FullAttentionSpec(block_size=16, num_kv_heads=8, head_size=256,
                             dtype="bfloat16")
    config = plan({f"model.layers.{i}.attn": spec for i in range(3)},
                  kv_cache_memory_bytes=25_165_824, max_model_len=256)
    out = plan_to_dict(config)
    assert config.num_blocks == 64 and out["max_concurrency"] == 4.0
    assert out["max_num_full_length_requests"] == 3
