"""Property-based stateful tests: random sequences of admit (with cache hits), decode,
free and reset against the invariants of DESIGN.md section 7:

* every block is in exactly one state: free (in the queue, ref_cnt 0) or held
  (ref_cnt > 0, not in the queue); a cached block is either;
* ref counts equal the number of block tables holding the block;
* a newly allocated block was held by no live request;
* a cached block is found by its hash until evicted (the hash tables agree with the
  blocks' own hashes, and a just-freed request's prompt hits in full);
* a failed ``allocate_slots`` (None) changes no state;
* usage returns to 0 when every request is freed.
"""

from __future__ import annotations

from collections import Counter

import hypothesis.strategies as st
from helpers_runtime import config, full, swa
from hypothesis import HealthCheck, settings
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from kvcore.runtime import KVCacheManager
from kvcore.specs import ChunkedLocalAttentionSpec

PREFIXES = [[1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12], [1, 2, 3, 4, 9, 9, 9, 9],
            [5] * 20, []]


def chunked(chunk, block_size=4):
    return ChunkedLocalAttentionSpec(block_size=block_size, num_kv_heads=1, head_size=8,
                                     attention_chunk_size=chunk)


def snapshot(mgr):
    pool = mgr.block_pool
    return (
        pool.free_queue.block_ids(),
        [(b.ref_cnt, b.block_hash, b.group_id) for b in pool.blocks],
        [dict(c) for c in pool.cached],
        [{k: dict(v) for k, v in d.items()} for d in pool._dups],
        [{r: [b.block_id for b in t] for r, t in m.req_to_blocks.items()}
         for m in mgr.managers],
        [dict(m.num_cached_blocks) for m in mgr.managers],
    )


class RuntimeMachine(RuleBasedStateMachine):
    SPECS: tuple = (full(4),)
    NUM_BLOCKS = 24
    EAGLE = False
    EXACT_REHIT = True

    @initialize()
    def setup(self):
        self.mgr = KVCacheManager(config(self.NUM_BLOCKS, *self.SPECS), max_model_len=64,
                                  use_eagle=self.EAGLE)
        self.running: dict[str, object] = {}
        self.counter = 0

    def _held_elsewhere(self, own=None):
        ids = set()
        for m in self.mgr.managers:
            for rid, t in m.req_to_blocks.items():
                if rid == own:
                    continue
                ids.update(b.block_id for b in t if not b.is_null)
        return ids

    @rule(prefix=st.sampled_from(range(len(PREFIXES))),
          tail=st.lists(st.integers(1, 4), min_size=1, max_size=14),
          max_tokens=st.integers(1, 12), must_fit=st.booleans())
    def admit(self, prefix, tail, max_tokens, must_fit):
        self.counter += 1
        req = self.mgr.make_request(f"r{self.counter}", PREFIXES[prefix] + tail,
                                    max_tokens=max_tokens)
        hit, n = self.mgr.get_computed_blocks(req)
        assert n % 4 == 0 and n < req.num_tokens
        before = snapshot(self.mgr)
        held = self._held_elsewhere()
        out = self.mgr.allocate_slots(req, req.num_tokens - n, n, hit,
                                      full_sequence_must_fit=must_fit)
        if out is None:
            assert snapshot(self.mgr) == before
            return
        for group in out.blocks:
            for b in group:
                assert b.block_id not in held and b.ref_cnt == 1 and not b.is_null
        req.num_computed_tokens = req.num_tokens
        req.append_output_token_ids(self.counter % 7 + 1)
        self.running[req.request_id] = req

    @precondition(lambda self: self.running)
    @rule(data=st.data())
    def decode(self, data):
        rid = data.draw(st.sampled_from(sorted(self.running)))
        req = self.running[rid]
        if req.num_tokens >= 64:
            return
        before = snapshot(self.mgr)
        held = self._held_elsewhere(own=rid)
        out = self.mgr.allocate_slots(req, 1)
        if out is None:
            assert snapshot(self.mgr) == before
            return
        for group in out.blocks:
            for b in group:
                assert b.block_id not in held and b.ref_cnt == 1
        req.num_computed_tokens += 1
        req.append_output_token_ids(3)

    @precondition(lambda self: self.running)
    @rule(data=st.data())
    def free(self, data):
        rid = data.draw(st.sampled_from(sorted(self.running)))
        req = self.running.pop(rid)
        self.mgr.free(req)
        again = req.copy(request_id=rid + "-again")
        _, n = self.mgr.get_computed_blocks(again)
        if self.EXACT_REHIT:
            expected = (again.num_tokens - 1) // 4 * 4
            if self.EAGLE and expected:
                expected -= 4
            assert n == expected

    @rule(reset_running=st.booleans())
    def reset(self, reset_running):
        before = snapshot(self.mgr)
        ok = self.mgr.reset_prefix_cache(reset_running_requests=reset_running)
        if self.running and not reset_running:
            assert ok is False
            assert snapshot(self.mgr) == before
            return
        assert ok is True
        for req in self.running.values():
            assert req.num_computed_tokens == 0
        self.running.clear()
        assert self.mgr.usage == 0.0
        assert all(not c for c in self.mgr.block_pool.cached)

    @rule()
    def free_all(self):
        for req in self.running.values():
            self.mgr.free(req)
        self.running.clear()
        assert self.mgr.usage == 0.0
        assert self.mgr.num_free_blocks == self.NUM_BLOCKS - 1

    @invariant()
    def block_states(self):
        if not hasattr(self, "mgr"):
            return
        pool = self.mgr.block_pool
        queued = pool.free_queue.block_ids()
        assert len(queued) == len(set(queued)) == pool.num_free_blocks
        assert 0 not in queued
        qs = set(queued)
        holders = Counter()
        for m in self.mgr.managers:
            for t in m.req_to_blocks.values():
                ids = [b.block_id for b in t if not b.is_null]
                assert len(ids) == len(set(ids))
                holders.update(ids)
        for b in pool.blocks[1:]:
            if b.block_id in qs:
                assert b.ref_cnt == 0
            else:
                assert b.ref_cnt > 0
            assert b.ref_cnt == holders[b.block_id]
        # hash tables agree with the blocks' hashes, both ways
        for g, cache in enumerate(pool.cached):
            for h, b in cache.items():
                assert b.block_hash == h and b.group_id == g
            for h, more in pool._dups[g].items():
                assert h in cache
                for b in more.values():
                    assert b.block_hash == h and b.group_id == g
        for b in pool.blocks[1:]:
            if b.block_hash is not None:
                first = pool.get_cached_block(b.block_hash, b.group_id)
                assert first is b or b.block_id in pool._dups[b.group_id][b.block_hash]
        assert 0.0 <= self.mgr.usage <= 1.0


SETTINGS = settings(max_examples=40, stateful_step_count=25, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow])


class FullMachine(RuntimeMachine):
    pass


class SlidingOnlyMachine(RuntimeMachine):
    SPECS = (swa(8, 4),)
    NUM_BLOCKS = 10
    EXACT_REHIT = False


class FullEagleMachine(RuntimeMachine):
    EAGLE = True


class HybridSlidingMachine(RuntimeMachine):
    SPECS = (full(4), swa(8, 4))
    NUM_BLOCKS = 16
    EXACT_REHIT = False


class HybridBlockSizesMachine(RuntimeMachine):
    SPECS = (full(4), full(8), chunked(8, 4))
    NUM_BLOCKS = 24
    EXACT_REHIT = False


class SlidingEagleMachine(RuntimeMachine):
    SPECS = (full(4), swa(8, 4))
    NUM_BLOCKS = 16
    EAGLE = True
    EXACT_REHIT = False


TestSlidingOnly = SlidingOnlyMachine.TestCase
TestSlidingOnly.settings = SETTINGS
TestFull = FullMachine.TestCase
TestFull.settings = SETTINGS
TestFullEagle = FullEagleMachine.TestCase
TestFullEagle.settings = SETTINGS
TestHybridSliding = HybridSlidingMachine.TestCase
TestHybridSliding.settings = SETTINGS
TestHybridBlockSizes = HybridBlockSizesMachine.TestCase
TestHybridBlockSizes.settings = SETTINGS
TestSlidingEagle = SlidingEagleMachine.TestCase
TestSlidingEagle.settings = SETTINGS
