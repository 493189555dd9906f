"""kvcore_vllm.KVCacheManager pickles and deep-copies at any pool size, and a copy
continues exactly as the original does (issue 24, item 4): the same seeded
admissions, decodes and frees on both give the same hits, block ids, usage and KV
events.  The reference is the original manager itself."""

from __future__ import annotations

import copy
import pickle
import random

import kvcore_vllm
import pytest
from kvcore_vllm.harness import Workload, canon_event, make_scheduler

SWA = ("sliding", {"sliding_window": 48})
FULL = ("full", {})


def _manager(layers, num_blocks, **kw):
    s = make_scheduler(Workload.shared_prefixes(0, layers=layers, max_model_len=512,
                                                num_blocks=64))
    bs = s.block_size
    cfg = copy.copy(s.kv_cache_config)  # the groups of a real plan, a pool of num_blocks
    cfg.num_blocks = num_blocks
    return kvcore_vllm.KVCacheManager(cfg, 512, bs, bs,
                                      max_in_flight_tokens=512, log_stats=True,
                                      enable_kv_cache_events=True, **kw), bs


class Loop:
    """A seeded loop of vLLM requests over one manager (the state that is copied)."""

    def __init__(self, mgr, bs, seed):
        from vllm.utils.hashing import sha256
        from vllm.v1.core.kv_cache_utils import get_request_block_hasher, init_none_hash

        init_none_hash(sha256)
        self.mgr = mgr
        self.hasher = get_request_block_hasher(bs, sha256)
        self.rng = random.Random(seed)
        self.live: dict = {}
        self.n = 0
        self.prefixes = [[self.rng.randrange(1, 999) for _ in range(self.rng.randrange(16, 160))]
                         for _ in range(3)]

    def step(self):
        from vllm import SamplingParams
        from vllm.v1.request import Request, RequestStatus

        rng, m = self.rng, self.mgr
        op = rng.random()
        if op < 0.4 or not self.live:
            prompt = list(rng.choice(self.prefixes)) + [rng.randrange(1, 999)
                                                        for _ in range(rng.randrange(1, 60))]
            r = Request(f"q{self.n}", prompt, SamplingParams(max_tokens=8), None,
                        block_hasher=self.hasher)
            self.n += 1
            blocks, hit, _ = m.get_computed_blocks(r)
            new = m.allocate_slots(r, r.num_tokens - hit, num_new_computed_tokens=hit,
                                   new_computed_blocks=blocks)
            if new is None:
                return ("admit", hit, None)
            r.status = RequestStatus.RUNNING
            r.num_computed_tokens = r.num_tokens
            self.live[r.request_id] = r
            return ("admit", hit, new.get_block_ids())
        rid = rng.choice(sorted(self.live))
        r = self.live[rid]
        if op < 0.8:
            r.append_output_token_ids(rng.randrange(1, 999))
            new = m.allocate_slots(r, 1)
            if new is not None:
                r.num_computed_tokens += 1
            return ("decode", rid, None if new is None else new.get_block_ids())
        m.free(self.live.pop(rid))
        return ("free", rid, m.usage)

    def events(self):
        return [canon_event(e) for e in self.mgr.take_events()]


def _pickle_copy(loop: Loop) -> Loop:
    twin = copy.copy(loop)
    twin.mgr = pickle.loads(pickle.dumps(loop.mgr))
    # vLLM's requests carry their block hasher (a closure, which pickle refuses); the
    # requests are the engine's, not the manager's state: the twin gets copies
    twin.live = copy.deepcopy(loop.live)
    twin.rng = copy.deepcopy(loop.rng)
    return twin


COPIES = {"pickle": _pickle_copy, "deepcopy": copy.deepcopy}


@pytest.mark.parametrize("how", sorted(COPIES))
@pytest.mark.parametrize("layers", [[FULL, FULL], [SWA, SWA, FULL]])
@pytest.mark.parametrize("seed", (0, 1))
def test_copy_continues_identically(layers, seed, how):
    mgr, bs = _manager(layers, 1200, check_invariants=seed == 0)
    a = Loop(mgr, bs, seed)
    for _ in range(60):
        a.step()
    a.events()
    b = COPIES[how](a)
    assert b.mgr is not a.mgr and b.mgr.usage == a.mgr.usage
    for i in range(150):
        assert b.step() == a.step(), i
        assert b.events() == a.events(), i
        assert b.mgr.usage == a.mgr.usage


@pytest.mark.parametrize("how", sorted(COPIES))
def test_a_million_blocks_copy(how):
    mgr, bs = _manager([SWA, FULL], 10 ** 6)
    assert mgr.block_pool.num_blocks == 10 ** 6
    a = Loop(mgr, bs, 3)
    for _ in range(30):
        a.step()
    b = COPIES[how](a)
    assert b.mgr.block_pool.free_queue.block_ids()[:5000] == \
        a.mgr.block_pool.free_queue.block_ids()[:5000]
    for _ in range(20):
        assert b.step() == a.step()
