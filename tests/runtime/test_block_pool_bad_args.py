"""The block pool under bad arguments (tester 14): a block count that is not an int
>= 0, and ``free_blocks`` / ``touch`` given things that are not this pool's blocks,
raise :class:`~kvcore.errors.BlockPoolError` naming the argument with the pool
unchanged; the pool never hands out a block someone holds.

Oracle: a shadow count of holders per block id, kept by this test from the calls that
succeeded (the pool's own counters are what is checked against it)."""

from __future__ import annotations

import random
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kvcore.errors import BlockPoolError
from kvcore.runtime.block_pool import BlockPool

BAD_COUNTS = [-1, -3, 2.0, 0.5, True, False, "2", None, [1], float("nan"), 1 << 80]


@pytest.mark.parametrize("n", BAD_COUNTS)
def test_bad_counts_raise_and_change_nothing(n: Any) -> None:
    pool = BlockPool(10)
    held = pool.get_new_blocks(3)
    before = pool.num_free_blocks
    with pytest.raises(BlockPoolError, match=r"\bn\b|blocks"):
        pool.get_new_blocks(n)
    assert pool.num_free_blocks == before == 10 - 1 - 3
    got = pool.get_new_blocks(before)  # every free block, none of them held
    assert not {b.block_id for b in got} & {b.block_id for b in held}
    assert pool.num_free_blocks == 0


def test_numpy_counts_are_ints() -> None:
    np = pytest.importorskip("numpy")
    pool = BlockPool(10)
    assert len(pool.get_new_blocks(np.int64(4))) == 4 and pool.num_free_blocks == 5


@pytest.mark.parametrize("junk", [[1, 2], [None], ["b"], [1.0], [object()]])
def test_free_and_touch_of_non_blocks_raise_and_change_nothing(junk: list[Any]) -> None:
    pool = BlockPool(10)
    held = pool.get_new_blocks(4)
    for op in (pool.free_blocks, pool.touch):
        with pytest.raises(BlockPoolError, match="not a block of this pool"):
            op([held[0], *junk])  # a real block first: its holder is given back
        assert pool.num_free_blocks == 5 and [b.ref_cnt for b in held] == [1, 1, 1, 1]


@settings(max_examples=200, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), num_blocks=st.integers(2, 40))
def test_random_calls_with_bad_arguments_keep_the_pool_exact(seed: int,
                                                            num_blocks: int) -> None:
    rng = random.Random(seed)
    pool = BlockPool(num_blocks)
    other = BlockPool(num_blocks).get_new_blocks(1)[0]  # another pool's block
    holders: dict[int, int] = {}  # block id -> holders (the shadow)
    held: list[Any] = []  # one entry per holder
    for _ in range(60):
        op = rng.random()
        if op < 0.35:
            n = rng.choice([rng.randrange(0, 4), rng.choice(BAD_COUNTS)])
            try:
                got = pool.get_new_blocks(n)
            except BlockPoolError:
                ok = type(n) is int and n >= 0  # only a shortage may refuse a good n
                assert not ok or n > num_blocks - 1 - len(holders)
            else:
                for b in got:
                    assert holders.get(b.block_id, 0) == 0, "handed out a held block"
                    holders[b.block_id] = 1
                    held.append(b)
        elif op < 0.7 and held:
            k = rng.randrange(len(held))
            batch = [held[k]] + rng.choice([[], [], [3], [None], [other], [held[k]]])
            try:
                pool.free_blocks(batch)
            except BlockPoolError:
                pass  # nothing changed
            else:
                for b in batch:
                    holders[b.block_id] -= 1
                    held.remove(b)
                    if not holders[b.block_id]:
                        del holders[b.block_id]
        elif held:
            b = rng.choice(held)
            batch = [b] + rng.choice([[], [7], [other]])
            try:
                pool.touch(batch)
            except BlockPoolError:
                pass
            else:
                holders[b.block_id] += 1
                held.append(b)
        assert pool.num_free_blocks == num_blocks - 1 - len(holders)
        for bid, c in holders.items():
            assert pool.blocks[bid].ref_cnt == c


def _cache_state(pool: BlockPool) -> Any:
    return ([dict(c) for c in pool.cached], [{h: dict(d) for h, d in g.items()}
                                              for g in pool._dups],
            [(b.block_hash, b.group_id) for b in pool.blocks])


@settings(max_examples=200, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), n=st.integers(1, 8),
       bad=st.sampled_from(["foreign", "freed", "unhashable", "none"]))
def test_cache_full_blocks_failing_mid_range_enters_nothing(seed: int, n: int,
                                                            bad: str) -> None:
    """A bad block or hash anywhere in the range: BlockPoolError, and the blocks before
    it (already entered as the call went) are taken back: the cache, the duplicates
    and every block's hash are as before.  A good range is entered whole."""
    rng = random.Random(seed)
    pool = BlockPool(2 * n + 4)
    pre = pool.get_new_blocks(1)  # a block already cached under the hash of slot 0:
    pool.cache_full_blocks(pre, [b"h0"], 0, 1, 0)  # slot 0 then goes to _dups
    blocks = pool.get_new_blocks(n)
    hashes: list[Any] = [b"h%d" % i for i in range(n)]
    k = rng.randrange(n)
    if bad == "foreign":
        blocks[k] = BlockPool(4).get_new_blocks(1)[0]
    elif bad == "freed":
        pool.free_blocks([blocks[k]])
    elif bad == "unhashable":
        hashes[k] = [1, 2]
    before = _cache_state(pool)
    if bad == "none":
        pool.cache_full_blocks(blocks, hashes, 0, n, 0)
        assert [b.block_hash for b in blocks] == hashes
        assert pool.get_cached_block(b"h0", 0) is pre[0]  # the earliest stays the hit
        return
    with pytest.raises(BlockPoolError):
        pool.cache_full_blocks(blocks, hashes, 0, n, 0)
    assert _cache_state(pool) == before


def test_cache_call_checks_plugin_managers_and_subclassed_pools() -> None:
    """kvcore's own manager types take the unchecked caching call; a plugin's manager
    (another module) and a pool that overrides cache_full_blocks take the checked one."""
    from kvcore.runtime.managers import FullAttentionManager

    class PluginManager(FullAttentionManager):  # defined here: not kvcore's module
        pass

    class EventPool(BlockPool):
        def cache_full_blocks(self, *a: Any, **k: Any) -> None:
            super().cache_full_blocks(*a, **k)

    pool, sub = BlockPool(8), EventPool(8)
    core = object.__new__(FullAttentionManager)
    plugin = object.__new__(PluginManager)
    assert pool.cache_call(core) == pool._cache_range
    assert pool.cache_call(plugin) == pool.cache_full_blocks
    assert sub.cache_call(core) == sub.cache_full_blocks


# ---- tester 17's findings -----------------------------------------------------------------

def test_a_reserved_block_is_never_freed_to_the_queue() -> None:
    pool = BlockPool(3)
    r = pool.reserve_blocks(1)
    with pytest.raises(BlockPoolError, match="reserved"):
        pool.free_blocks(r)
    assert pool.num_held_blocks() == 0 and pool.num_free_blocks == 1
    assert r[0] not in pool.get_new_blocks(1)  # the one free block is the other one
    pool.touch(r)  # a request sharing the sink block holds it, and may let it go
    pool.free_blocks(r)
    assert r[0].ref_cnt == 1


def test_none_is_not_a_block_hash() -> None:
    """None marks an uncached block: a block entered under it would stay findable
    after it is freed and handed out again."""
    pool = BlockPool(4)
    b = pool.get_new_blocks(1)
    before = _cache_state(pool)
    with pytest.raises(BlockPoolError, match="block_hashes"):
        pool.cache_full_blocks(b, [None], 0, 1, 0)
    assert _cache_state(pool) == before


@pytest.mark.parametrize("kw", [dict(request=object(), block_size=1),
                                dict(request=type("R", (), {"all_token_ids": [1, 2]})(),
                                     block_size="x"),
                                dict(request=type("R", (), {"all_token_ids": [1, 2]})(),
                                     block_size=-1)])
def test_event_arguments_are_checked_before_caching(kw: dict[str, Any]) -> None:
    pool = BlockPool(10, enable_events=True)
    b = pool.get_new_blocks(2)
    before = _cache_state(pool)
    with pytest.raises(BlockPoolError):
        pool.cache_full_blocks(b, [b"a", b"b"], 0, 2, 0, **kw)
    assert _cache_state(pool) == before and pool.events == []


def test_numpy_group_ids_are_ints() -> None:
    np = pytest.importorskip("numpy")
    pool = BlockPool(6)
    b = pool.get_new_blocks(1)
    pool.cache_full_blocks(b, [b"a"], 0, 1, np.int64(0))
    assert pool.get_cached_block(b"a", np.int64(0)) is b[0]


def test_tokens_added_outside_the_hasher_are_not_cached_and_nothing_leaks() -> None:
    """A caller that extends all_token_ids in place (no hashes for the new blocks):
    allocate_slots still serves the tokens, caches only the blocks it has hashes for,
    and frees every block (it raised IndexError half-way, keeping 5 blocks)."""
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).parent))
    from helpers_runtime import config, full

    from kvcore.runtime import KVCacheManager

    m = KVCacheManager(config(20, full(4)), max_model_len=64)
    r = m.make_request("e", list(range(12)))
    m.allocate_slots(r, 12)
    r.num_computed_tokens = 12
    r.all_token_ids.extend([7] * 30)
    m.allocate_slots(r, 20)
    assert len(m.get_block_ids(r)[0]) == 8  # 32 tokens in blocks of 4
    m.check_consistency()
    cached = sum(1 for b in m.block_pool.blocks if b.block_hash is not None)
    assert cached == len(r.block_hashes) == 3
    m.free(r)
    assert m.num_free_blocks == 19
