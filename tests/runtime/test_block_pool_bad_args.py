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
