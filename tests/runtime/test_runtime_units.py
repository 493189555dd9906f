"""Unit tests of the block pool, hashing, per-kind managers and registry dispatch."""

from __future__ import annotations

import hashlib
import subprocess
import sys
from dataclasses import dataclass
from typing import ClassVar

import pytest
from helpers_runtime import config, full, swa

from kvcore import hookimpl
from kvcore.errors import ConfigError
from kvcore.registry import SpecType
from kvcore.runtime import (
    BlockPool,
    BlockRemoved,
    BlockStored,
    HybridCoordinator,
    KVCacheManager,
    NoPrefixCacheCoordinator,
    Request,
    SingleTypeManager,
    SinkFullAttentionManager,
    UnitaryCoordinator,
)
from kvcore.runtime.hashing import ROOT_HASH, hash_block_tokens
from kvcore.specs import ChunkedLocalAttentionSpec, KVCacheSpec, SinkFullAttentionSpec


# ---- free queue / pool -------------------------------------------------------------
def test_free_queue_order_and_o1_removal():
    pool = BlockPool(8)
    q = pool.free_queue
    assert q.block_ids() == [1, 2, 3, 4, 5, 6, 7]
    q.remove(pool.blocks[4])
    assert q.block_ids() == [1, 2, 3, 5, 6, 7] and q.num_free_blocks == 6
    q.appendleft(pool.blocks[4])
    q.append(q.popleft())
    assert q.block_ids() == [1, 2, 3, 5, 6, 7, 4]
    with pytest.raises(ValueError):
        q.remove(pool.blocks[0])
    with pytest.raises(ValueError):
        q.popleft_n(8)


def test_pool_rejects_too_few_blocks():
    with pytest.raises(ConfigError, match="num_blocks"):
        BlockPool(1)


def test_duplicate_hashes_earliest_wins_and_successor_takes_over():
    pool = BlockPool(6)
    a, b = pool.get_new_blocks(2)
    h = [b"h" * 32]
    pool.cache_full_blocks([a], h, 0, 1, 0)
    pool.cache_full_blocks([b], h, 0, 1, 0)
    assert pool.get_cached_block(h[0], 0) is a
    pool.free_blocks([a])  # a to the back
    pool.free_blocks([b])
    taken = pool.get_new_blocks(3)  # 3, 4, 5 then a would be next
    assert a not in taken
    pool.get_new_blocks(1)  # evicts a
    assert pool.get_cached_block(h[0], 0) is b


# ---- hashing -------------------------------------------------------------------------
def test_hash_is_chained_and_deterministic_across_processes():
    toks = list(range(16))
    h0 = hash_block_tokens(lambda d: hashlib.sha256(d).digest(), ROOT_HASH, toks)
    req = Request("r", toks + list(range(100, 116)), block_size=16)
    assert req.block_hashes[0] == h0
    assert req.block_hashes[1] == hash_block_tokens(
        lambda d: hashlib.sha256(d).digest(), h0, list(range(100, 116)))
    code = ("from kvcore.runtime import Request;"
            "print(Request('r', list(range(32)), block_size=16).block_hashes[1].hex())")
    a = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       env={"PYTHONHASHSEED": "1"}).stdout
    b = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       env={"PYTHONHASHSEED": "2"}).stdout
    assert a == b and len(a.strip()) == 64


def test_hashes_extend_incrementally_as_outputs_arrive():
    req = Request("r", list(range(10)), block_size=4)
    assert len(req.block_hashes) == 2
    req.append_output_token_ids([1])
    assert len(req.block_hashes) == 2
    req.append_output_token_ids(2)
    assert len(req.block_hashes) == 3
    ref = Request("s", list(range(10)) + [1, 2], block_size=4)
    assert ref.block_hashes == req.block_hashes


def test_unknown_hash_name_lists_known():
    with pytest.raises(ConfigError, match="sha256"):
        Request("r", [1], hash="md5")


# ---- coordinators and managers ------------------------------------------------------
def test_coordinator_kinds():
    assert isinstance(KVCacheManager(config(10, full()), max_model_len=64).coordinator,
                      UnitaryCoordinator)
    assert isinstance(KVCacheManager(config(10, full(), swa(32)), max_model_len=64)
                      .coordinator, HybridCoordinator)
    assert isinstance(KVCacheManager(config(10, full()), max_model_len=64,
                                     enable_caching=False).coordinator,
                      NoPrefixCacheCoordinator)


def test_sliding_window_frees_blocks_that_left_the_window():
    mgr = KVCacheManager(config(40, swa(8, 4)), max_model_len=128)
    req = mgr.make_request("r", list(range(1, 21)))  # 20 tokens: 5 blocks
    mgr.allocate_slots(req, 20)
    req.num_computed_tokens = 20
    req.append_output_token_ids(1)
    mgr.allocate_slots(req, 1)
    # tokens < 20 - 8 + 1 = 13 are skipped: blocks 0..2 (tokens 0..11) freed
    assert mgr.get_block_ids(req)[0][:3] == [0, 0, 0]
    assert 0 not in mgr.get_block_ids(req)[0][3:]
    assert mgr.block_pool.num_free_blocks == 39 - 3


def test_sliding_window_hit_needs_only_the_window():
    mgr = KVCacheManager(config(60, swa(8, 4)), max_model_len=128)
    prompt = list(range(1, 41))
    a = mgr.make_request("a", prompt)
    mgr.allocate_slots(a, 40)
    a.num_computed_tokens = 40
    mgr.free(a)
    # evict the first blocks' content: new blocks come from the queue front (unhashed
    # first, then least recently freed = a's *last* blocks are freed first...)
    b = mgr.make_request("b", prompt)
    hit, n = mgr.get_computed_blocks(b)
    assert n == 36  # (40 - 1) // 4 = 9 blocks
    ids = hit.get_block_ids()[0]
    need = -(-(8 - 1) // 4)  # 2 blocks before the hit end
    assert ids[:9 - need] == [0] * (9 - need) and 0 not in ids[9 - need:]


def test_chunked_local_attention_skips_and_hits():
    spec = ChunkedLocalAttentionSpec(block_size=4, num_kv_heads=1, head_size=8,
                                     attention_chunk_size=8)
    mgr = KVCacheManager(config(40, spec), max_model_len=128)
    prompt = list(range(1, 22))  # 21 tokens
    a = mgr.make_request("a", prompt)
    mgr.allocate_slots(a, 21)
    a.num_computed_tokens = 21
    a.append_output_token_ids(5)
    mgr.allocate_slots(a, 1)
    # current chunk starts at 16: blocks 0..3 are skipped
    assert mgr.get_block_ids(a)[0][:4] == [0, 0, 0, 0]
    mgr.free(a)
    hit, n = mgr.get_computed_blocks(mgr.make_request("b", prompt))
    assert n == 20  # blocks 0..3 null (before chunk 16), block 4 cached
    assert hit.get_block_ids()[0][:4] == [0, 0, 0, 0]


def test_hybrid_hits_of_one_group_are_taken_before_any_group_allocates():
    """A hit block of group 1 at the free-queue front must not be handed to group 0."""
    mgr = KVCacheManager(config(16, full(4), swa(8, 4)), max_model_len=64,
                         use_eagle=True)
    p = [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 1, 1]
    r1 = mgr.make_request("r1", p)
    mgr.allocate_slots(r1, 14)
    r1.num_computed_tokens = 14
    for _ in range(2):
        r1.append_output_token_ids(3)
        mgr.allocate_slots(r1, 1)
        r1.num_computed_tokens += 1
    r2 = mgr.make_request("r2", [1, 2, 3, 4, 9, 9, 9, 9, 1])
    mgr.allocate_slots(r2, 9)
    mgr.free(r1)
    r3 = mgr.make_request("r3", p[:12] + [1])
    hit, n = mgr.get_computed_blocks(r3)
    assert n == 8
    new = mgr.allocate_slots(r3, 13 - n, n, hit)
    hit_ids = {b.block_id for g in hit.blocks for b in g if not b.is_null}
    new_ids = {b.block_id for g in new.blocks for b in g}
    assert not hit_ids & new_ids
    assert all(b.ref_cnt == 1 for g in new.blocks for b in g)


def test_failed_allocation_does_not_free_window_blocks():
    """allocate_slots is all-or-nothing even when blocks left the window."""
    mgr = KVCacheManager(config(24, full(4), swa(8, 4)), max_model_len=256)
    a = mgr.make_request("a", list(range(1, 41)))  # 10 + 10 blocks of 23
    assert mgr.allocate_slots(a, 40) is not None
    a.num_computed_tokens = 40
    a.append_output_token_ids(1)
    free_before = mgr.num_free_blocks
    table_before = mgr.get_block_ids(a)
    assert mgr.allocate_slots(a, 1, num_lookahead_tokens=60) is None
    assert mgr.num_free_blocks == free_before
    assert mgr.get_block_ids(a) == table_before
    # without the lookahead it fits: 8 window blocks freed, 2 new ones taken
    assert mgr.allocate_slots(a, 1) is not None
    assert mgr.get_block_ids(a)[1][:8] == [0] * 8


def test_full_sequence_must_fit_reserves_room_for_outputs():
    mgr = KVCacheManager(config(11, full(16)), max_model_len=1024)  # 10 usable
    r = mgr.make_request("r", list(range(100)), max_tokens=100)  # 200 tokens: 13 blocks
    assert mgr.allocate_slots(r, 100, full_sequence_must_fit=True) is None
    assert mgr.usage == 0.0
    assert mgr.allocate_slots(r, 100) is not None  # 7 blocks


def test_sink_blocks_are_reserved_once_and_survive_reset():
    spec = SinkFullAttentionSpec(block_size=16, num_kv_heads=1, head_size=8, sink_len=20)
    mgr = KVCacheManager(config(12, spec), max_model_len=256)
    m = mgr.managers[0]
    assert isinstance(m, SinkFullAttentionManager)
    assert len(m.sink_blocks) == 2  # cdiv(20, 16)
    assert mgr.num_free_blocks == 9
    assert mgr.reset_prefix_cache() is True
    assert all(b.ref_cnt == 1 for b in m.sink_blocks)


def test_events_stored_and_removed():
    mgr = KVCacheManager(config(4, full(4)), max_model_len=64, enable_events=True)
    a = mgr.make_request("a", list(range(1, 9)))  # 2 full blocks
    mgr.allocate_slots(a, 8)
    ev = mgr.take_events()
    assert len(ev) == 1 and isinstance(ev[0], BlockStored)
    assert ev[0].block_hashes == tuple(a.block_hashes) and ev[0].parent_block_hash is None
    assert ev[0].token_ids == tuple(range(1, 9)) and ev[0].block_size == 4
    mgr.free(a)
    b = mgr.make_request("b", list(range(50, 58)))
    mgr.allocate_slots(b, 8)
    removed = [e for e in mgr.take_events() if isinstance(e, BlockRemoved)]
    assert sum(len(e.block_hashes) for e in removed) == 1  # one free unused block first


def test_prefix_cache_stats_count_lookups_and_reset():
    mgr = KVCacheManager(config(20, full(4)), max_model_len=64)
    a = mgr.make_request("a", list(range(1, 10)))
    mgr.allocate_slots(a, 9)
    mgr.free(a)
    mgr.get_computed_blocks(mgr.make_request("b", list(range(1, 10))))
    st = mgr.prefix_cache_stats()
    assert (st.requests, st.queries, st.hits) == (1, 9, 8)
    assert mgr.prefix_cache_stats().requests == 0


# ---- registry dispatch: a plugin kind gets its own manager -------------------------
@dataclass(frozen=True, kw_only=True)
class RingSpec(KVCacheSpec):
    kind: ClassVar[str] = "test_ring"
    participates_in_prefix_caching: ClassVar[bool] = False
    ring_len: int = 32

    @property
    def real_page_size_bytes(self) -> int:
        return 64 * self.block_size

    def max_num_blocks_per_req(self, ctx, max_len=None):
        return -(-self.ring_len // self.block_size)


class RingManager(SingleTypeManager):
    """Fixed per-request blocks: a ring buffer of ring_len tokens."""

    limits_prefix_hits: ClassVar[bool] = False

    def num_required_blocks(self, request, num_tokens):
        return -(-self.spec.ring_len // self.block_size)


class _RingPlugin:
    @hookimpl
    def kvcore_spec_types(self):
        return [SpecType(RingSpec, "test_ring", RingManager)]


@pytest.fixture
def ring_kind():
    from kvcore import plugins

    name = plugins.register(_RingPlugin(), name="test-ring", distribution="kvcore-tests")
    try:
        yield
    finally:
        plugins.unregister(name)


def test_plugin_kind_gets_its_registered_manager(ring_kind):
    mgr = KVCacheManager(config(40, full(16), RingSpec(block_size=16, ring_len=40)),
                         max_model_len=512)
    assert type(mgr.managers[1]) is RingManager
    r = mgr.make_request("r", list(range(100)))
    mgr.allocate_slots(r, 100)
    assert [len(t) for t in mgr.get_block_ids(r)] == [7, 3]
    # neutral to hits: the full-attention group still prefix caches
    r.num_computed_tokens = 100
    mgr.free(r)
    assert mgr.get_computed_blocks(mgr.make_request("s", list(range(100))))[1] == 96


# ---- lazy pool: same behaviour as a fully built one ---------------------------------
from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.booleans(), st.integers(1, 6), st.booleans(),
                          st.integers(0, 50)), max_size=40))
def test_lazy_pool_matches_eager_pool(ops):
    pools = [BlockPool(25, lazy=False), BlockPool(25, lazy=True)]
    held: list[list[list]] = [[], []]
    for alloc, n, cached, pick in ops:
        if alloc:
            if n > pools[0].num_free_blocks:
                continue
            for k in range(2):
                held[k].append(pools[k].get_new_blocks(n))
        elif held[0]:
            i = pick % len(held[0])
            for k in range(2):
                blocks = held[k].pop(i)
                if cached:
                    pools[k].cache_full_blocks(
                        blocks, [bytes([b.block_id]) * 8 for b in blocks], 0,
                        len(blocks), 0)
                pools[k].free_blocks(blocks[::-1])
        assert ([[b.block_id for b in g] for g in held[0]]
                == [[b.block_id for b in g] for g in held[1]])
        assert pools[0].num_free_blocks == pools[1].num_free_blocks
    assert pools[0].free_queue.block_ids() == pools[1].free_queue.block_ids()
    assert len(pools[1].blocks) == 25


def test_caching_off_never_hits_and_frees_to_the_front():
    mgr = KVCacheManager(config(10, full(4)), max_model_len=64, enable_caching=False)
    a = mgr.make_request("a", list(range(1, 13)))
    mgr.allocate_slots(a, 12)
    a.num_computed_tokens = 12
    mgr.free(a)
    assert mgr.get_computed_blocks(mgr.make_request("b", list(range(1, 13))))[1] == 0
    assert all(b.block_hash is None for b in mgr.block_pool.blocks)
    # freed last block first, each to the front: the first block is reused first
    assert mgr.block_pool.free_queue.block_ids()[:3] == [1, 2, 3]


def test_allocate_zero_new_tokens_is_an_error():
    mgr = KVCacheManager(config(10, full(4)), max_model_len=64)
    with pytest.raises(ValueError, match="num_new_tokens"):
        mgr.allocate_slots(mgr.make_request("a", [1, 2]), 0)


def test_slots_never_exceed_max_model_len():
    mgr = KVCacheManager(config(40, full(4)), max_model_len=10)
    r = mgr.make_request("a", list(range(1, 9)))
    mgr.allocate_slots(r, 8, num_lookahead_tokens=20)
    assert len(mgr.get_block_ids(r)[0]) == 3  # cdiv(10, 4), not cdiv(28, 4)
