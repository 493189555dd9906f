"""The issue's kpool case: full attention (block 64) with a kpool tail (kpool 16, no
speculation).  The plan keeps block 64; two requests sharing a 1,024-token prompt get
the full-attention prefix hit; each request holds exactly one tail block from start
to finish."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kvcore_kpool import KPoolTailSpec

from kvcore.planning import plan
from kvcore.runtime import KVCacheManager
from kvcore.specs import FullAttentionSpec


def hybrid_specs(layers=4, kpool=16, spec_tokens=0):
    out = {}
    for i in range(layers):
        out[f"model.layers.{i}.self_attn"] = FullAttentionSpec(
            block_size=64, num_kv_heads=8, head_size=128)
        out[f"model.layers.{i}.self_attn.indexer.kpool_tail"] = KPoolTailSpec(
            block_size=64, kpool=kpool, num_speculative_tokens=spec_tokens)
    return out


@pytest.fixture(scope="module")
def config():
    return plan(hybrid_specs(), max_model_len=8192, kv_cache_memory_bytes=512 << 20)


def test_plan_keeps_block_64(config):
    kinds = [(g.kind, g.block_size) for g in config.kv_cache_groups]
    assert kinds == [("full_attention", 64), ("kpool_tail", 64)]
    # attention page 64 x 8 x 128 x 2 x 2 B = 262,144 B; the 8,192 B ring is padded to it
    assert {g.page_size_bytes for g in config.kv_cache_groups} == {262_144}
    # one request of 8,192 tokens: 128 attention blocks + 1 ring block
    assert config.stats["blocks_per_request"] == 129


def test_ring_larger_than_attention_page_would_not_lower_block_size():
    # even with speculation (ring 32) the attention block stays 64
    cfg = plan(hybrid_specs(spec_tokens=3), max_model_len=8192,
               kv_cache_memory_bytes=512 << 20)
    assert [g.block_size for g in cfg.kv_cache_groups] == [64, 64]


def run_request(mgr, rid, token_ids, decode_steps, tail_gid, seen_tail):
    req = mgr.make_request(rid, token_ids, max_tokens=decode_steps)
    hit, n = mgr.get_computed_blocks(req)
    assert mgr.allocate_slots(req, len(token_ids) - n, num_new_computed_tokens=n,
                              new_computed_blocks=hit) is not None
    tail = mgr.get_block_ids(req)[tail_gid]
    assert len(tail) == 1 and tail[0] != 0
    seen_tail.append(tail[0])
    req.num_computed_tokens = len(token_ids)
    for i in range(decode_steps):
        req.append_output_token_ids(i)
        assert mgr.allocate_slots(req, 1) is not None
        assert mgr.get_block_ids(req)[tail_gid] == tail, "the tail block changed"
        req.num_computed_tokens += 1
    return req, n


def test_shared_prompt_hits_and_one_tail_block_per_request(config):
    mgr = KVCacheManager(config, max_model_len=8192)
    gids = {g.kind: i for i, g in enumerate(config.kv_cache_groups)}
    tail_gid = gids["kpool_tail"]
    shared = list(range(1, 1025))                       # the 1,024-token prompt
    tails = []
    a, hit_a = run_request(mgr, "a", shared + [5000 + i for i in range(40)], 200,
                           tail_gid, tails)
    b, hit_b = run_request(mgr, "b", shared + [7000 + i for i in range(40)], 200,
                           tail_gid, tails)
    assert hit_a == 0
    assert hit_b == 1024                                # 16 attention blocks of 64
    # the hit blocks are a's blocks
    assert mgr.get_block_ids(b)[gids["full_attention"]][:16] == \
        mgr.get_block_ids(a)[gids["full_attention"]][:16]
    assert tails[0] != tails[1]
    # an identical 1,024-token prompt: the last token is recomputed, so 960 tokens hit
    c = mgr.make_request("c", shared)
    assert mgr.get_computed_blocks(c)[1] == 960
    # held: a's 20 attention blocks (1,064 + 200 tokens), b's 4 own ones (16 shared),
    # and one tail block each
    usable = config.num_blocks - 1
    assert usable - mgr.num_free_blocks == 20 + 4 + 2
    mgr.free(a)
    mgr.free(b)
    assert mgr.get_block_ids(a) == ([], [])
    assert mgr.usage == 0.0


def test_tail_does_not_turn_prefix_caching_off(config):
    mgr = KVCacheManager(config, max_model_len=8192)
    assert mgr.enable_caching
    assert [m.enable_caching for m in mgr.managers] == [True, False]
    assert type(mgr.managers[1]).limits_prefix_hits is False


def test_tail_claimed_even_when_prompt_fully_hits(config):
    # a request's first allocation always claims its ring, hits or not
    mgr = KVCacheManager(config, max_model_len=8192)
    tails = []
    run_request(mgr, "a", list(range(129)), 0, 1, tails)
    run_request(mgr, "b", list(range(129)), 0, 1, tails)
    assert len(set(tails)) == 2


@settings(max_examples=30, deadline=None)
@given(ops=st.lists(st.tuples(st.sampled_from(["admit", "decode", "free"]),
                              st.integers(0, 7), st.integers(1, 300)), max_size=40))
def test_property_one_tail_block_per_live_request(config, ops):
    """Random admissions (prompts sharing prefixes), decode bursts and frees: every
    live request holds exactly one tail block, the same one all its life, no block is
    held by two requests in different roles or by two requests' tails, and when every
    request is freed nothing is held."""
    mgr = KVCacheManager(config, max_model_len=8192)
    attn_gid, tail_gid = 0, 1
    live: dict[str, tuple] = {}
    counter = 0
    for op, k, n in ops:
        if op == "admit":
            prefix = [k % 3] * (64 * (k % 4))                 # shared prefixes
            req = mgr.make_request(f"r{counter}", prefix + [1000 + counter] * n)
            counter += 1
            hit, got = mgr.get_computed_blocks(req)
            assert got % 64 == 0
            if mgr.allocate_slots(req, req.num_tokens - got, num_new_computed_tokens=got,
                                  new_computed_blocks=hit) is None:
                continue
            req.num_computed_tokens = req.num_tokens
            live[req.request_id] = (req, mgr.get_block_ids(req)[tail_gid])
        elif op == "decode" and live:
            rid = sorted(live)[k % len(live)]
            req, tail = live[rid]
            for i in range(n % 70):
                req.append_output_token_ids(i)
                if mgr.allocate_slots(req, 1) is None:
                    break
                req.num_computed_tokens += 1
        elif op == "free" and live:
            rid = sorted(live)[k % len(live)]
            mgr.free(live.pop(rid)[0])
        tails = []
        attn_blocks = set()
        for req, tail in live.values():
            ids = mgr.get_block_ids(req)
            assert len(ids[tail_gid]) == 1 and ids[tail_gid] == tail
            tails.append(tail[0])
            attn_blocks.update(ids[attn_gid])
        assert len(set(tails)) == len(tails)
        assert not set(tails) & attn_blocks
    for req, _ in list(live.values()):
        mgr.free(req)
    assert mgr.usage == 0.0
