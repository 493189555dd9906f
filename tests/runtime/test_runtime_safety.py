"""Issue 13 (runtime safety), the core-runtime cases: each test is the issue's example
plus generated cases of the same kind.

* item 2: a packed group frees and looks up by the LARGEST window among its layers;
* item 7: a pool too small for the sink blocks is a NotEnoughMemoryError, never a raw
  ValueError;
* item 8: a ref count never goes below 0 (duplicate / foreign blocks in a free raise,
  naming the block id, and change nothing);
* item 9: a plugin manager that frees forged blocks or returns another table's blocks
  is stopped with an error naming its kind; the debug switch checks everything;
* item 10: an encoder input longer than the planned max_num_encoder_input_tokens is
  refused;
* item 12: one scheduler thread owns a manager (documented; the debug switch raises on
  a second thread).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import ClassVar

import hypothesis.strategies as st
import pytest
from helpers_runtime import config, full
from hypothesis import given, settings

from kvcore import hookimpl, plugins
from kvcore.errors import BlockPoolError, KVCoreError, NotEnoughMemoryError, RequestError
from kvcore.kv_cache_config import KVCacheConfig, KVCacheGroupSpec
from kvcore.planning import plan
from kvcore.registry import SpecType
from kvcore.runtime import KVCacheManager
from kvcore.runtime.block_pool import BlockPool, KVCacheBlock
from kvcore.runtime.managers import SingleTypeManager
from kvcore.specs import (
    CrossAttentionSpec,
    FullAttentionSpec,
    SinkFullAttentionSpec,
    SlidingWindowSpec,
)

SMALL = settings(max_examples=40, deadline=None)


def _swa(window, block_size=16):
    return SlidingWindowSpec(block_size=block_size, num_kv_heads=1, head_size=64,
                             sliding_window=window)


def packed_config(windows, num_blocks, block_size=16):
    """One packed group of sliding layers; ``spec`` is the FIRST layer's (as the
    planner's packed groups record it), the windows live in ``layer_specs``."""
    specs = [_swa(w, block_size) for w in windows]
    group = KVCacheGroupSpec(tuple(f"l{i}" for i in range(len(specs))), specs[0],
                             layer_specs=tuple(specs))
    return KVCacheConfig(num_blocks=num_blocks, kv_cache_tensors=(),
                         kv_cache_groups=(group,))


def prefill(mgr, req, hit=None, n_hit=0):
    out = mgr.allocate_slots(req, req.num_tokens - n_hit, n_hit, hit)
    assert out is not None
    req.num_computed_tokens = req.num_tokens
    return out


# ---- item 2: a group frees and looks up by its largest window ----------------------
def test_issue_example_packed_windows_512_and_8192():
    windows = [512, 8192] * 4
    mgr = KVCacheManager(packed_config(windows, 4000), max_model_len=16384)
    a = mgr.make_request("A", list(range(1, 1002)))
    prefill(mgr, a)
    a.append_output_token_ids(5)
    assert mgr.allocate_slots(a, 1) is not None
    table = mgr.get_block_ids(a)[0]
    # the 8,192-window layers still read every one of the 1,002 positions
    assert 0 not in table[:-(-1002 // 16)]
    b = mgr.make_request("B", list(range(1, 601)))
    hit, n = mgr.get_computed_blocks(b)
    assert n == 592  # (600 - 1) // 16 blocks
    assert all(not blk.is_null for blk in hit.blocks[0])


@SMALL
@given(windows=st.lists(st.sampled_from([8, 16, 40, 64, 100, 256]), min_size=2,
                        max_size=5),
       prompt=st.integers(2, 300), decodes=st.integers(0, 40))
def test_packed_group_keeps_every_block_its_largest_window_reads(windows, prompt,
                                                                  decodes):
    bs = 8
    mgr = KVCacheManager(packed_config(windows, 200, bs), max_model_len=512)
    req = mgr.make_request("r", [7 + (i % 5) for i in range(prompt)])
    prefill(mgr, req)
    for _ in range(decodes):
        req.append_output_token_ids(3)
        assert mgr.allocate_slots(req, 1) is not None
        req.num_computed_tokens += 1
    # the next query sits at num_computed_tokens - 1 .. : every layer reads
    # [q - window + 1, q]; the widest reads from q - max(windows) + 1
    q = req.num_computed_tokens - 1
    first = max(0, q - max(windows) + 1)
    table = mgr.get_block_ids(req)[0]
    assert all(b != 0 for b in table[first // bs:]), (table, first)
    # a lookup of the same prefix: the hit holds the widest window before its end
    mgr.free(req)
    again = mgr.make_request("again", list(req.all_token_ids))
    hit, n = mgr.get_computed_blocks(again)
    if n:
        lo = max(0, n - max(windows) + 1) // bs  # positions n - window + 1 .. n - 1
        assert all(not b.is_null for b in hit.blocks[0][lo:])


# ---- item 7: sink blocks that do not fit --------------------------------------------
@pytest.mark.parametrize(("sink_len", "num_blocks"), [(100000, 1220), (64, 4), (17, 2)])
def test_sink_blocks_that_do_not_fit_raise_not_enough_memory(sink_len, num_blocks):
    spec = SinkFullAttentionSpec(block_size=16, num_kv_heads=1, head_size=64,
                                 sink_len=sink_len)
    with pytest.raises(NotEnoughMemoryError, match=f"sink_len {sink_len}"):
        KVCacheManager(config(num_blocks, spec), max_model_len=512)


def test_manager_defaults_max_model_len_to_the_plan():
    cfg = plan({"l0": FullAttentionSpec(block_size=16, num_kv_heads=1, head_size=64)},
               max_model_len=256, num_gpu_blocks_override=40)
    assert KVCacheManager(cfg).max_model_len == 256


# ---- item 8: ref counts never go below 0 ---------------------------------------------
def _pool_state(pool):
    return (pool.free_queue.block_ids(), [b.ref_cnt for b in pool.blocks],
            pool.num_free_blocks)


def test_issue_example_duplicate_in_one_free():
    pool = BlockPool(8)
    x, y = pool.get_new_blocks(2)
    pool.touch([y])  # y held twice: [y, y] is fine
    pool.free_blocks([y, y])
    assert y.ref_cnt == 0
    before = _pool_state(pool)
    with pytest.raises(BlockPoolError, match=f"block {x.block_id}") as e:
        pool.free_blocks([x, x])  # held once, listed twice
    assert e.value.extra["block_id"] == x.block_id
    assert _pool_state(pool) == before and x.ref_cnt == 1


@SMALL
@given(ops=st.lists(st.tuples(st.sampled_from(["get", "touch", "free"]),
                              st.lists(st.integers(0, 9), max_size=4)), max_size=30))
def test_ref_counts_follow_a_reference_count_model(ops):
    """A reference model of holders: a free is accepted iff every listed block is a
    pool block held at least as often as it is listed; else nothing changes."""
    pool = BlockPool(10)
    held: dict[int, int] = {}
    for op, ids in ops:
        if op == "get":
            n = len(ids)
            if n <= pool.num_free_blocks:
                for b in pool.get_new_blocks(n):
                    assert held.get(b.block_id, 0) == 0  # never a held block
                    held[b.block_id] = 1
            continue
        blocks = [pool.blocks[i] if i < len(pool.blocks) else KVCacheBlock(i) for i in ids]
        if op == "touch":
            blocks = [b for b in blocks if held.get(b.block_id, 0) > 0]  # cache hits
            pool.touch(blocks)
            for b in blocks:
                held[b.block_id] += 1
            continue
        # the null block is skipped; any other block must be held as often as listed
        ok = all(b.block_id == 0 or held.get(b.block_id, 0) >= ids.count(b.block_id)
                 for b in blocks)
        before = _pool_state(pool)
        if ok:
            pool.free_blocks(blocks)
            for b in blocks:
                if b.block_id:
                    held[b.block_id] -= 1
        else:
            with pytest.raises(BlockPoolError):
                pool.free_blocks(blocks)
            assert _pool_state(pool) == before
        for b in pool.blocks[1:]:
            assert b.ref_cnt == held.get(b.block_id, 0) >= 0
        assert pool.num_free_blocks == 9 - sum(1 for v in held.values() if v > 0)


def test_foreign_block_in_free_or_touch_raises():
    pool, other = BlockPool(8), BlockPool(8)
    (theirs,) = other.get_new_blocks(1)
    before = _pool_state(pool)
    for fn in (pool.free_blocks, pool.touch):
        with pytest.raises(BlockPoolError, match=f"block {theirs.block_id}"):
            fn([theirs])
        with pytest.raises(BlockPoolError, match="block 3"):
            fn([KVCacheBlock(3)])
        with pytest.raises(BlockPoolError, match="block 0"):  # another pool's null
            fn([other.null_block])
    mine = pool.get_new_blocks(2)
    before = _pool_state(pool)
    with pytest.raises(BlockPoolError):  # after two good blocks: nothing freed
        pool.free_blocks([mine[1], pool.null_block, mine[0], other.null_block])
    assert _pool_state(pool) == before


def test_cache_hit_after_rejected_double_free_is_never_handed_out():
    mgr = KVCacheManager(config(9, full(4)), max_model_len=64)
    a = mgr.make_request("A", list(range(1, 10)))
    prefill(mgr, a)
    blk = mgr.managers[0].req_to_blocks["A"][0]
    with pytest.raises(BlockPoolError):
        mgr.block_pool.free_blocks([blk, blk])
    b = mgr.make_request("B", list(range(1, 10)))
    hit, n = mgr.get_computed_blocks(b)
    assert n == 8
    prefill(mgr, b, hit, n)
    assert mgr.num_free_blocks == 4  # 8 usable; A holds 3, B 2 shared + 1
    c = mgr.make_request("C", list(range(100, 116)))
    out = mgr.allocate_slots(c, 16)  # every free block
    assert out is not None and blk not in out.blocks[0]
    mgr.check_consistency()


# ---- item 9: plugin managers cannot corrupt the pool -------------------------------
@dataclass(frozen=True, kw_only=True)
class _ForgingSpec(FullAttentionSpec):
    kind: ClassVar[str] = "test_forging"


@dataclass(frozen=True, kw_only=True)
class _StealingSpec(FullAttentionSpec):
    kind: ClassVar[str] = "test_stealing"


@dataclass(frozen=True, kw_only=True)
class _LeakySpec(FullAttentionSpec):
    kind: ClassVar[str] = "test_leaky"


class ForgingManager(SingleTypeManager):
    """Frees fresh block objects with the ids of its table (forged)."""

    def free(self, request_id):
        table = self.req_to_blocks.pop(request_id, [])
        self.num_cached_blocks.pop(request_id, None)
        self.pool.free_blocks([KVCacheBlock(b.block_id) for b in table])


class StealingManager(SingleTypeManager):
    """Serves a new request from another request's table instead of the pool."""

    def allocate_new_blocks(self, request, num_tokens):
        rid = request.request_id
        table = self.req_to_blocks.setdefault(rid, [])
        self.num_cached_blocks.setdefault(rid, 0)
        n = self.num_required_blocks(request, num_tokens) - len(table)
        victims = [b for r, t in self.req_to_blocks.items() if r != rid for b in t]
        if n <= 0:
            return []
        new = victims[:n] if len(victims) >= n else self.pool.get_new_blocks(n)
        table.extend(new)
        return new


class LeakyManager(SingleTypeManager):
    """Drops a holder of another request's block when freeing (caught only by the
    debug switch's whole-state check)."""

    def free(self, request_id):
        others = [t for r, t in self.req_to_blocks.items() if r != request_id]
        super().free(request_id)
        if others and others[0]:
            others[0][0].ref_cnt -= 1


class _BadPlugin:
    @hookimpl
    def kvcore_spec_types(self):
        return [SpecType(_ForgingSpec, "test_forging", ForgingManager),
                SpecType(_StealingSpec, "test_stealing", StealingManager),
                SpecType(_LeakySpec, "test_leaky", LeakyManager)]


@pytest.fixture
def bad_kinds():
    name = plugins.register(_BadPlugin(), name="test-bad-managers",
                            distribution="kvcore-tests")
    try:
        yield
    finally:
        plugins.unregister(name)


def _bad(cls, n=8, **kw):
    spec = cls(block_size=4, num_kv_heads=1, head_size=8)
    return KVCacheManager(config(n, full(4), spec), max_model_len=64, **kw)


def _admit(mgr, rid, n=8):
    r = mgr.make_request(rid, [hash(rid) % 97 + i for i in range(n)])
    return r, mgr.allocate_slots(r, n)


def test_forged_blocks_in_a_plugin_free_raise_naming_the_kind(bad_kinds):
    mgr = _bad(_ForgingSpec, 16)
    a, _ = _admit(mgr, "A")
    with pytest.raises(BlockPoolError, match="test_forging") as e:
        mgr.free(a)
    assert e.value.extra["kind"] == "test_forging"
    assert 0.0 <= mgr.usage <= 1.0


def test_stolen_blocks_returned_by_a_plugin_raise_naming_the_kind(bad_kinds):
    mgr = _bad(_StealingSpec, 16)
    _admit(mgr, "A")
    with pytest.raises(BlockPoolError, match="test_stealing.*took 0 from the pool"):
        _admit(mgr, "B")


@pytest.mark.parametrize("switch", ["argument", "environment"])
def test_debug_switch_catches_a_ref_count_another_manager_broke(bad_kinds, monkeypatch,
                                                                switch):
    if switch == "argument":
        mgr = _bad(_LeakySpec, 16, check_invariants=True)
    else:
        monkeypatch.setenv("KVCORE_CHECK_INVARIANTS", "1")
        mgr = _bad(_LeakySpec, 16)
    assert mgr.check_invariants
    a, _ = _admit(mgr, "A")
    _admit(mgr, "B")
    with pytest.raises(BlockPoolError, match="ref_cnt"):
        mgr.free(a)


def test_debug_switch_off_costs_nothing_and_check_is_callable(monkeypatch):
    monkeypatch.delenv("KVCORE_CHECK_INVARIANTS", raising=False)
    mgr = KVCacheManager(config(9, full(4)), max_model_len=64, check_invariants=False)
    assert not mgr.check_invariants
    assert "allocate_slots" not in vars(mgr)  # the plain bound method: no wrapper
    _admit(mgr, "A")
    mgr.check_consistency()
    mgr.managers[0].req_to_blocks["A"][0].ref_cnt += 1
    with pytest.raises(BlockPoolError, match="ref_cnt 2 but 1 holder"):
        mgr.check_consistency()


# ---- item 10: cross attention beyond the planned encoder length ---------------------
def _whisper_like(max_enc):
    layers = {"dec.self": FullAttentionSpec(block_size=32, num_kv_heads=1, head_size=64),
              "dec.cross": CrossAttentionSpec(block_size=32, num_kv_heads=1,
                                              head_size=64)}
    return plan(layers, max_model_len=448, max_num_encoder_input_tokens=max_enc,
                num_gpu_blocks_override=400)


def test_issue_example_encoder_3000_against_1500():
    mgr = KVCacheManager(_whisper_like(1500), max_model_len=448)
    r = mgr.make_request("A", [1, 2, 3], num_encoder_tokens=3000)
    free = mgr.num_free_blocks
    with pytest.raises(RequestError, match="num_encoder_tokens 3000.*1500"):
        mgr.allocate_slots(r, 3)
    assert mgr.num_free_blocks == free and mgr.get_block_ids(r) == ([], [])


@SMALL
@given(limit=st.integers(1, 3000), enc=st.integers(0, 6000))
def test_encoder_length_is_refused_exactly_above_the_planned_limit(limit, enc):
    mgr = KVCacheManager(_whisper_like(limit), max_model_len=448)
    r = mgr.make_request("A", [1, 2, 3], num_encoder_tokens=enc)
    if enc > limit:
        with pytest.raises(RequestError):
            mgr.allocate_slots(r, 3)
    else:
        out = mgr.allocate_slots(r, 3)
        assert out is not None
        assert len(mgr.get_block_ids(r)[1]) == -(-enc // 32)


def test_explicit_encoder_limit_overrides_the_plan():
    mgr = KVCacheManager(_whisper_like(1500), max_model_len=448,
                         max_num_encoder_input_tokens=3000)
    r = mgr.make_request("A", [1, 2, 3], num_encoder_tokens=3000)
    assert mgr.allocate_slots(r, 3) is not None


# ---- item 12: one scheduler thread owns a manager ----------------------------------
def test_thread_ownership_is_documented():
    doc = KVCacheManager.__doc__ or ""
    assert "not thread-safe" in doc and "One scheduler thread owns" in doc


def test_debug_switch_refuses_a_second_thread():
    mgr = KVCacheManager(config(9, full(4)), max_model_len=64, check_invariants=True)
    _admit(mgr, "A")
    errors = []

    def other():
        try:
            _admit(mgr, "B")
        except KVCoreError as e:
            errors.append(e)

    t = threading.Thread(target=other)
    t.start()
    t.join()
    assert len(errors) == 1 and "not thread-safe" in str(errors[0])
    assert mgr.get_block_ids("B") == ([],)


@dataclass(frozen=True, kw_only=True)
class _FakeHitSpec(FullAttentionSpec):
    kind: ClassVar[str] = "test_fake_hit"


class FakeHitManager(SingleTypeManager):
    """Offers another request's (uncached) blocks as a cache hit."""

    def find_longest_cache_hit(self, block_hashes, max_length, extra_tokens=0):
        others = [b for t in self.req_to_blocks.values() for b in t]
        n = min(len(others), max_length // self.block_size)
        return others[:n]


class _FakeHitPlugin:
    @hookimpl
    def kvcore_spec_types(self):
        return [SpecType(_FakeHitSpec, "test_fake_hit", FakeHitManager)]


def test_debug_switch_refuses_uncached_blocks_offered_as_a_hit():
    name = plugins.register(_FakeHitPlugin(), name="test-fake-hit",
                            distribution="kvcore-tests")
    try:
        spec = _FakeHitSpec(block_size=4, num_kv_heads=1, head_size=8)
        mgr = KVCacheManager(config(16, spec), max_model_len=64, enable_caching=True,
                             check_invariants=True)
        a = mgr.make_request("A", list(range(1, 11)))
        mgr.allocate_slots(a, 10)  # caches its 2 full blocks; the partial one is not
        b = mgr.make_request("B", list(range(50, 63)))
        with pytest.raises(BlockPoolError, match="test_fake_hit.*not a block cached"):
            mgr.get_computed_blocks(b)  # A's blocks, another prefix
        c = mgr.make_request("C", list(range(1, 14)))
        with pytest.raises(BlockPoolError, match=r"table\[2\]"):
            mgr.get_computed_blocks(c)  # A's prefix, but its third block is not cached
    finally:
        plugins.unregister(name)
