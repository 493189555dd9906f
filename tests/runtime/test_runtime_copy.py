"""Managers pickle and deep-copy at any pool size, and a copy continues exactly as the
original does (issue 24, item 4).

The free queue is a linked list threaded through the blocks; copying it link by link
recursed once per block (RecursionError at about 900 blocks, where real pools hold
10^4-10^6).  The reference for "continues identically" is the original manager itself:
both run the same seeded continuation and must return the same hits, block ids, None
results, usage and events at every call.
"""

from __future__ import annotations

import copy
import pickle
import random
import threading
from typing import Any

import pytest
from helpers_runtime import config, cross, full, swa

from kvcore.runtime import BlockPool, KVCacheManager

COPIES = {
    "pickle": lambda x: pickle.loads(pickle.dumps(x, protocol=pickle.HIGHEST_PROTOCOL)),
    "deepcopy": copy.deepcopy,
}

LAYOUTS = {
    "full": (full(),),
    "full+swa": (full(), swa(48)),
    "full32+swa16": (full(32), swa(40, 16)),
    "full+cross": (full(), cross()),
}


class Driver:
    """A tiny seeded engine loop over one manager: admit (lookup + allocate), decode
    one token, free, reset the prefix cache.  Every call's outcome is logged."""

    def __init__(self, mgr: KVCacheManager, seed: int, has_cross: bool) -> None:
        self.mgr = mgr
        self.rng = random.Random(seed)
        self.live: dict[str, Any] = {}
        self.next_id = 0
        self.has_cross = has_cross
        self.prefixes = [[self.rng.randrange(50) for _ in range(96)] for _ in range(3)]

    def step(self) -> tuple[Any, ...]:
        rng, mgr = self.rng, self.mgr
        op = rng.random()
        if op < 0.35 or not self.live:
            rid = f"r{self.next_id}"
            self.next_id += 1
            n = rng.randrange(1, 120)
            toks = rng.choice(self.prefixes)[:rng.randrange(0, 96)] + \
                [rng.randrange(50) for _ in range(n)]
            kw = {"num_encoder_tokens": rng.randrange(1, 40),
                  "encoder_id": f"audio-{rng.randrange(3)}"} if self.has_cross else {}
            r = mgr.make_request(rid, toks, **kw)
            hit, k = mgr.get_computed_blocks(r)
            out = mgr.allocate_slots(r, r.num_tokens - k, k, hit)
            if out is None:
                return ("admit", rid, k, None)
            r.num_computed_tokens = r.num_tokens
            r.append_output_token_ids(rng.randrange(50))
            self.live[rid] = r
            return ("admit", rid, k, hit.get_block_ids(), out.get_block_ids())
        rid = rng.choice(sorted(self.live))
        r = self.live[rid]
        if op < 0.8 and r.num_tokens < mgr.max_model_len:
            out = mgr.allocate_slots(r, 1)
            if out is None:
                return ("decode", rid, None)
            r.num_computed_tokens += 1
            r.append_output_token_ids(rng.randrange(50))
            return ("decode", rid, out.get_block_ids(), mgr.get_block_ids(r))
        if op < 0.98:
            mgr.free(self.live.pop(rid))
            return ("free", rid, mgr.num_free_blocks)
        return ("reset", mgr.reset_prefix_cache())

    def snapshot(self) -> tuple[Any, ...]:
        return (self.mgr.usage, self.mgr.num_free_blocks,
                self.mgr.block_pool.free_queue.block_ids(),
                sorted((g, h, b.block_id) for g, c in enumerate(self.mgr.block_pool.cached)
                       for h, b in c.items()),
                [repr(e) for e in self.mgr.take_events()])


def _clone(driver: Driver, how: str) -> Driver:
    """A copy of the whole loop (manager, live requests, generator) in one object graph,
    so the copied requests are the ones the copied manager's tables hold."""
    return COPIES[how](driver)


@pytest.mark.parametrize("how", sorted(COPIES))
@pytest.mark.parametrize("layout", sorted(LAYOUTS))
@pytest.mark.parametrize("seed", range(3))
def test_copy_continues_identically(layout: str, how: str, seed: int) -> None:
    specs = LAYOUTS[layout]
    rng = random.Random(seed)
    # above the old recursion limit (~900 blocks), small enough to evict sometimes
    num_blocks = rng.choice([1200, 2500])
    mgr = KVCacheManager(config(num_blocks, *specs), max_model_len=1024,
                         use_eagle=bool(seed % 2), enable_events=True,
                         check_invariants=bool(seed % 3 == 0))
    a = Driver(mgr, seed, has_cross="cross" in layout)
    for _ in range(rng.randrange(20, 80)):
        a.step()
    a.mgr.take_events()
    b = _clone(a, how)
    assert b.mgr is not a.mgr and b.mgr.block_pool is not a.mgr.block_pool
    assert b.snapshot() == a.snapshot()
    for i in range(120):
        sa, sb = a.step(), b.step()
        assert sb == sa, f"step {i}: the copy returned {sb}, the original {sa}"
        assert b.snapshot() == a.snapshot(), f"step {i}: states differ"
    # the copy's blocks are its own: freeing everything in one leaves the other alone
    held = a.mgr.num_free_blocks
    for r in list(b.live.values()):
        b.mgr.free(r)
    assert a.mgr.num_free_blocks == held


def test_debug_switch_wraps_the_copys_own_methods() -> None:
    mgr = KVCacheManager(config(1500, full(), swa(32)), max_model_len=512,
                         check_invariants=True)
    r = mgr.make_request("a", list(range(100)))
    mgr.allocate_slots(r, 100)
    for how in sorted(COPIES):
        c = COPIES[how](mgr)
        assert c.check_invariants
        for name in ("get_computed_blocks", "allocate_slots", "free",
                     "reset_prefix_cache"):
            assert getattr(c, name).__wrapped__.__self__ is c, name
        # a copy is owned by the thread that first calls it, not the original's
        t = threading.Thread(target=lambda c=c: c.get_computed_blocks(
            c.make_request("b", list(range(50)))))
        t.start()
        t.join()
        assert c._owner_thread is not None and c._owner_thread != mgr._owner_thread


@pytest.mark.parametrize("how", sorted(COPIES))
def test_pool_of_a_million_blocks_round_trips(how: str) -> None:
    """10^6 blocks, all built (not the lazy placeholder), the free queue reordered by
    frees to the front and to the back, some cached: the copy has the same queue, the
    same hash tables and the same ref counts."""
    n = 10 ** 6
    pool = BlockPool(n, lazy=False, num_groups=2)
    rng = random.Random(7)
    taken = pool.get_new_blocks(3000)
    hashes = [rng.randbytes(8) for _ in range(2000)]
    pool.cache_full_blocks(taken, hashes, 0, 1000, 0)
    pool.cache_full_blocks(taken, hashes, 1000, 2000, 1)
    freed = taken[:2500]
    rng.shuffle(freed)
    pool.free_blocks(freed)
    c = COPIES[how](pool)
    assert c.num_free_blocks == pool.num_free_blocks == n - 1 - 500
    assert c.free_queue.block_ids() == pool.free_queue.block_ids()
    for g in range(2):
        assert {h: b.block_id for h, b in c.cached[g].items()} == \
            {h: b.block_id for h, b in pool.cached[g].items()}
    assert [b.ref_cnt for b in c.blocks[:3001]] == [b.ref_cnt for b in pool.blocks[:3001]]
    # the copy keeps working: the next blocks handed out are the same ids
    assert [b.block_id for b in c.get_new_blocks(5000)] == \
        [b.block_id for b in pool.get_new_blocks(5000)]


def test_manager_of_a_million_blocks_round_trips() -> None:
    """A manager on a 10^6-block (lazy) pool after a workload: both copies continue as
    the original does."""
    mgr = KVCacheManager(config(10 ** 6, full(), swa(64)), max_model_len=4096,
                         enable_events=True)
    a = Driver(mgr, 11, has_cross=False)
    for _ in range(60):
        a.step()
    for how in sorted(COPIES):
        b = _clone(a, how)
        # (the free queue's order is compared on steps only: listing it would build
        # all 10^6 block objects of the lazy pool)
        assert (b.mgr.usage, b.mgr.num_free_blocks) == (a.mgr.usage, a.mgr.num_free_blocks)
        for _ in range(20):
            assert b.step() == a.step()
        assert [repr(e) for e in b.mgr.take_events()] == \
            [repr(e) for e in a.mgr.take_events()]
        a = b  # continue from the copy
