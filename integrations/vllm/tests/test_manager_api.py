"""The manager surface the Scheduler reaches outside its main loop (deferred frees,
connector paths, stats, reset), driven directly: vLLM's KVCacheManager and
kvcore_vllm.KVCacheManager built from one vLLM KVCacheConfig get the same seeded calls,
and every return value (block ids, hit lengths, usage, stats, events) must agree."""

from __future__ import annotations

import random

import kvcore_vllm
import pytest
from kvcore_vllm.harness import Workload, canon_event, make_scheduler


def _pair(layers, num_blocks):
    from vllm.v1.core.kv_cache_manager import KVCacheManager as VllmManager

    s = make_scheduler(Workload.shared_prefixes(0, layers=layers, max_model_len=512,
                                                num_blocks=num_blocks))
    cfg = s.kv_cache_config
    bs = s.block_size
    kw = dict(kv_cache_config=cfg, max_model_len=512, scheduler_block_size=bs,
              hash_block_size=bs, max_in_flight_tokens=512, enable_caching=True,
              log_stats=True, enable_kv_cache_events=True)
    return VllmManager(**kw), kvcore_vllm.KVCacheManager(**kw), bs


def _ids(blocks):
    return None if blocks is None else blocks.get_block_ids()


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("layers", [[("full", {})] * 2,
                                    [("sliding", {"sliding_window": 48})] * 2
                                    + [("full", {})]])
def test_direct_calls_agree(layers, seed):
    from vllm import SamplingParams
    from vllm.utils.hashing import sha256
    from vllm.v1.core.kv_cache_utils import get_request_block_hasher, init_none_hash
    from vllm.v1.request import Request, RequestStatus

    init_none_hash(sha256)
    ref, got, bs = _pair(layers, num_blocks=48)
    rng = random.Random(seed)
    hasher = get_request_block_hasher(bs, sha256)
    prefixes = [[rng.randrange(1, 999) for _ in range(rng.randrange(16, 120))]
                for _ in range(3)]
    live: dict[str, tuple] = {}
    deferred: list[tuple] = []
    n = 0
    for _ in range(300):
        op = rng.random()
        if op < 0.35 or not live:  # admit a request
            prompt = list(rng.choice(prefixes)) + [rng.randrange(1, 999)
                                                   for _ in range(rng.randrange(1, 60))]
            pair = []
            for _m in (ref, got):
                r = Request(f"q{n}", list(prompt), SamplingParams(max_tokens=8), None,
                            block_hasher=hasher)
                pair.append(r)
            n += 1
            res = []
            for m, r in zip((ref, got), pair):
                blocks, hit, spb = m.get_computed_blocks(r)
                new = m.allocate_slots(r, r.num_tokens - hit, num_new_computed_tokens=hit,
                                       new_computed_blocks=blocks,
                                       full_sequence_must_fit=True)
                if new is not None:
                    m.record_prefix_cache_stats(r, hit)
                    r.num_computed_tokens = hit
                    r.status = RequestStatus.RUNNING
                res.append((hit, spb, _ids(new), _ids(m.get_blocks(r.request_id))))
            assert res[0] == res[1]
            if res[0][2] is not None:
                for r in pair:
                    r.num_computed_tokens = r.num_tokens
                live[pair[0].request_id] = tuple(pair)
        elif op < 0.6:  # decode one token
            rid = rng.choice(sorted(live))
            tok = rng.randrange(1, 999)
            res = []
            for m, r in zip((ref, got), live[rid]):
                r.append_output_token_ids(tok)
                new = m.allocate_slots(r, 1)
                if new is not None:
                    r.num_computed_tokens += 1
                res.append(_ids(new))
            assert res[0] == res[1]
        elif op < 0.75:  # finish: free now or defer (pop, later free reversed)
            rid = rng.choice(sorted(live))
            pair = live.pop(rid)
            if rng.random() < 0.5:
                for m, r in zip((ref, got), pair):
                    m.free(r)
            else:
                popped = [m.pop_blocks_for_free(r) for m, r in zip((ref, got), pair)]
                assert [b.block_id for b in popped[0]] == [b.block_id for b in popped[1]]
                deferred.append(tuple(popped))
        elif op < 0.85 and deferred:  # a deferred free lands
            pr, pg = deferred.pop(0)
            ref.block_pool.free_blocks(reversed(pr))
            got.block_pool.free_blocks(reversed(pg))
        elif op < 0.9:  # connector-path queries
            rid = rng.choice(sorted(live))
            a, b = live[rid]
            k = rng.randrange(0, a.num_computed_tokens + 1)
            assert ref.get_block_ids_for_computed_tokens(rid, k) == \
                got.get_block_ids_for_computed_tokens(rid, k)
            assert ref.estimate_cached_tokens(a) == got.estimate_cached_tokens(b)
            ref.remove_skipped_blocks(rid, a.num_computed_tokens, a.num_prompt_tokens)
            got.remove_skipped_blocks(rid, b.num_computed_tokens, b.num_prompt_tokens)
            assert ref.get_block_ids(rid) == got.get_block_ids(rid)
        elif op < 0.95:  # evict some cached blocks by id
            ids = {rng.randrange(1, ref.kv_cache_config.num_blocks) for _ in range(3)}
            ref.evict_blocks(ids)
            got.evict_blocks(ids)
        else:
            assert ref.reset_prefix_cache() == got.reset_prefix_cache()
        assert ref.usage == got.usage
        assert [canon_event(e) for e in ref.take_events()] == \
            [canon_event(e) for e in got.take_events()]
    sr, sg = ref.make_prefix_cache_stats(), got.make_prefix_cache_stats()
    assert (sr.requests, sr.queries, sr.hits, sr.reset) == \
        (sg.requests, sg.queries, sg.hits, sg.reset)
    assert sr.requests > 0 and sr.hits > 0
