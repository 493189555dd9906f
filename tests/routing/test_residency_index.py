"""kvcore.routing.ResidencyIndex: the hit it answers per replica equals the one the
replica's own KVCacheManager gives (the reference), on seeded workloads for every kind;
bad events and sequence gaps never produce a hit; replay rebuilds the same index."""

from __future__ import annotations

import math
import random

import pytest

from kvcore.errors import KVCoreError, KVEventError
from kvcore.kv_cache_config import KVCacheConfig, KVCacheGroupSpec
from kvcore.routing import ResidencyIndex, event_from_dict, event_to_dict, vectors
from kvcore.routing.cases import available_cases
from kvcore.runtime import AllBlocksCleared, BlockRemoved, BlockStored, KVCacheManager
from kvcore.specs import FullAttentionSpec, SlidingWindowSpec

CASES = available_cases()


def _full(bs: int = 4) -> FullAttentionSpec:
    return FullAttentionSpec(block_size=bs, num_kv_heads=1, head_size=8)


def _cfg(*specs, blocks: int = 40) -> KVCacheConfig:
    return KVCacheConfig(num_blocks=blocks, kv_cache_tensors=(), max_model_len=128,
                         kv_cache_groups=tuple(KVCacheGroupSpec((f"l{i}",), s)
                                               for i, s in enumerate(specs)))


def _manager_and_index(cfg: KVCacheConfig, **kw):
    m = KVCacheManager(cfg, enable_events=True, **kw)
    return m, ResidencyIndex(cfg, replicas=["a"], **kw)


def _serve(m: KVCacheManager, rid: str, tokens: list[int]) -> None:
    r = m.make_request(rid, tokens)
    blocks, n = m.get_computed_blocks(r)
    assert m.allocate_slots(r, len(tokens) - n, n, blocks) is not None
    r.num_computed_tokens = len(tokens)
    m.free(r)


# ---- agreement with the manager ----------------------------------------------------
@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
@pytest.mark.parametrize("seed", [11, 12])
def test_index_agrees_with_manager_on_every_admission(case, seed):
    """Live differential test: before every admission of a seeded workload the index,
    fed the manager's events so far, answers the manager's own hit (vectors.check
    replays the generated stream; other seeds than the published vectors')."""
    v = vectors.generate(case.name, case.build(), seed=seed, **case.options)
    assert vectors.check(v) == []
    qs = [r for r in v["records"] if r["op"] == "query"]
    assert len(qs) >= 20
    assert any(q["hit"] > 0 for q in qs)  # the workload does exercise hits


def test_several_replicas_each_get_their_own_hit():
    """Two managers with different contents: each replica's answer is its manager's."""
    cfg = _cfg(_full(4), SlidingWindowSpec(block_size=4, num_kv_heads=1, head_size=8,
                                           sliding_window=8))
    rng = random.Random(3)
    mgrs = {r: KVCacheManager(cfg, enable_events=True, max_model_len=128)
            for r in ("a", "b", "c")}
    ix = ResidencyIndex(cfg)
    base = [rng.randrange(1, 99) for _ in range(40)]
    for i, (r, m) in enumerate(mgrs.items()):
        _serve(m, f"{r}0", base[:12 + 12 * i] + [500 + i] * 3)
        ix.apply(r, m.take_events(), 0)
    for n in range(2, 44, 3):
        probe = base[:n] + [7]
        want = {r: m.get_computed_blocks(m.make_request("q", probe))[1]
                for r, m in mgrs.items()}
        got = ix.longest_prefix(ix.block_hashes(probe), len(probe))
        assert got == want
    assert ix.best(ix.block_hashes(base + [1]), 41) == ("c", 36)


def test_attention_group_only_index_is_wrong_on_a_hybrid():
    """What the issue is about (llm-d-router#2362, dynamo#12189): on a full +
    sliding-window hybrid, treating the full-attention group alone as a contiguous
    prefix claims hits the replica cannot serve (the window group's blocks were evicted
    first: it frees blocks that left the window while the request runs), while the
    group-aware index agrees with the manager on every admission."""
    cfg = _cfg(_full(4), SlidingWindowSpec(block_size=4, num_kv_heads=1, head_size=8,
                                           sliding_window=8), blocks=30)
    v = vectors.load(vectors.generate("naive", cfg, seed=0, num_requests=40,
                                      max_prompt=100))
    assert not vectors.check(v)
    held: dict[str, int] = {}
    over = 0
    for rec in v.records:
        if rec["op"] == "events":
            for e in rec["events"]:
                if e["type"] == "AllBlocksCleared":
                    held.clear()
                elif e["group_id"] == 0:
                    for h in e["block_hashes"]:
                        held[h] = held.get(h, 0) + (1 if e["type"] == "BlockStored" else -1)
        else:
            n = 0
            for h in rec["block_hashes"][:(rec["num_tokens"] - 1) // 4]:
                if held.get(h, 0) <= 0:
                    break
                n += 1
            over += n * 4 > rec["hit"]
    assert over > 0


# ---- duplicates, media, hash forms ----------------------------------------------------
def test_duplicate_blocks_keep_a_hash_until_the_last_is_removed():
    """kvcore's and vLLM's pools both keep several blocks under one hash (two requests
    computed the same prefix at once); evicting one leaves the hash findable."""
    cfg = _cfg(_full(4))
    m, ix = _manager_and_index(cfg, max_model_len=128)
    toks = list(range(1, 18))
    r1, r2 = m.make_request("r1", toks), m.make_request("r2", toks)
    h1 = m.get_computed_blocks(r1)
    h2 = m.get_computed_blocks(r2)  # both looked up before either allocated
    assert h1[1] == h2[1] == 0
    m.allocate_slots(r1, 17)
    m.allocate_slots(r2, 17)
    ix.apply("a", m.take_events())
    assert max(ix.state("a").cached[0].values()) == 2
    h = r1.block_hashes[0]
    ix.apply("a", [BlockRemoved((h,), 0)])
    assert ix.longest_prefix(r1.block_hashes, 17)["a"] == 16
    ix.apply("a", [BlockRemoved((h,), 0)])
    assert ix.longest_prefix(r1.block_hashes, 17)["a"] == 0


def test_events_of_other_media_are_ignored():
    cfg = _cfg(_full(4))
    ix = ResidencyIndex(cfg)
    ev = {"type": "BlockStored", "block_hashes": ["ab" * 32], "parent_block_hash": None,
          "token_ids": [1, 2, 3, 4], "block_size": 4, "group_id": 0, "medium": "CPU"}
    ix.apply("a", [ev])
    assert ix.state("a").num_blocks == 0 and ix.state("a").num_ignored == 1
    ix.apply("a", [dict(ev, medium="GPU")])
    assert ix.longest_prefix([bytes.fromhex("ab" * 32)], 5)["a"] == 4


def test_int_hashes_match_bytes_queries():
    """vLLM with VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES publishes the low 64 bits of the
    big-endian hash (vllm/v1/core/kv_cache_utils.py maybe_convert_block_hash)."""
    cfg = _cfg(_full(4))
    m = KVCacheManager(cfg, enable_events=True, max_model_len=128)
    _serve(m, "r", list(range(1, 14)))
    ix = ResidencyIndex(cfg, int_hashes=True)
    conv = [BlockStored(tuple(int.from_bytes(h, "big") & (2**64 - 1)
                              for h in e.block_hashes), None, e.token_ids, e.block_size,
                        e.group_id) for e in m.take_events()]
    ix.apply("a", conv)
    q = m.make_request("q", list(range(1, 14)))
    assert ix.longest_prefix(q.block_hashes, 13)["a"] == m.get_computed_blocks(q)[1] == 12


def test_json_form_round_trips():
    cfg = _cfg(_full(4))
    m = KVCacheManager(cfg, enable_events=True, max_model_len=128)
    _serve(m, "r", list(range(1, 30)))
    m.reset_prefix_cache()
    evs = m.take_events()
    assert any(isinstance(e, AllBlocksCleared) for e in evs)
    assert [event_from_dict(event_to_dict(e)) for e in evs] == evs


# ---- bad events and sequence numbers ----------------------------------------------
def _loaded():
    cfg = _cfg(_full(4), blocks=40)
    m, ix = _manager_and_index(cfg, max_model_len=128)
    toks = list(range(1, 22))
    _serve(m, "r", toks)
    ix.apply("a", m.take_events(), 0)
    q = m.make_request("q", toks)
    assert ix.longest_prefix(q.block_hashes, len(toks))["a"] == 20
    return ix, q


@pytest.mark.parametrize("bad, field", [
    (BlockStored((b"x" * 32,), None, (), 4, 3), "group_id"),
    (BlockStored((b"x" * 32,), None, (), 8, 0), "block_size"),
    (BlockRemoved((b"y" * 32,), 0), "block_hashes"),
    ({"type": "BlockMoved"}, "type"),
    ({"type": "BlockStored", "block_hashes": [], "block_size": 4, "group_id": None,
      "token_ids": []}, None),
])
def test_a_bad_event_raises_and_marks_the_replica_stale(bad, field):
    ix, q = _loaded()
    if field is None:  # group None with one group means group 0: accepted
        ix.apply("a", [bad], 1)
        assert not ix.is_stale("a")
        return
    with pytest.raises(KVEventError) as e:
        ix.apply("a", [bad], 1)
    assert isinstance(e.value, KVCoreError) and e.value.extra["field"] == field
    assert ix.is_stale("a") and ix.state("a").stale_reason
    assert ix.longest_prefix(q.block_hashes, q.num_tokens)["a"] == 0
    # trusted again once the replica's cache is cleared
    ix.apply("a", [AllBlocksCleared()], 2)
    assert not ix.is_stale("a")


def test_sequence_gap_marks_stale_and_out_of_order_is_refused():
    ix, q = _loaded()
    before = ix.snapshot("a")
    with pytest.raises(KVEventError) as e:
        ix.apply("a", [BlockRemoved((q.block_hashes[0],), 0)], 0)  # replayed batch 0
    assert e.value.extra["field"] == "seq"
    assert ix.snapshot("a") == before and not ix.is_stale("a")
    ix.apply("a", [], 5)  # batches 1..4 missed
    assert ix.is_stale("a") and "gap" in ix.state("a").stale_reason
    assert ix.longest_prefix(q.block_hashes, q.num_tokens)["a"] == 0
    # while stale, an unknown removal is no error (the state is unknown anyway)
    ix.apply("a", [BlockRemoved((b"z" * 32,), 0)], 6)
    ix.reset_replica("a", next_seq=7)
    assert not ix.is_stale("a") and ix.state("a").num_blocks == 0


def test_joining_late_is_stale():
    cfg = _cfg(_full(4))
    ix = ResidencyIndex(cfg)
    ix.apply("a", [], 3)
    assert ix.is_stale("a")
    ix.apply("b", [], 0)
    assert not ix.is_stale("b")


# ---- replay --------------------------------------------------------------------------
@pytest.mark.parametrize("case", [c for c in CASES if c.name in (
    "sliding+full", "mamba-align+full", "chunked+full", "full-reset")],
    ids=lambda c: c.name)
def test_replay_of_the_event_log_rebuilds_the_same_index(case):
    cfg = case.build()
    v = vectors.load(vectors.generate(case.name, cfg, seed=4, **case.options))
    log = [("r", rec["seq"], rec["events"]) for rec in v.records if rec["op"] == "events"]
    live = ResidencyIndex(cfg, use_eagle=v.options["use_eagle"])
    for r, seq, evs in log:
        live.apply(r, evs, seq)
    # a second index dies half way, then recovers by replaying the whole log
    rec = ResidencyIndex(cfg, use_eagle=v.options["use_eagle"])
    for r, seq, evs in log[:len(log) // 2]:
        rec.apply(r, evs, seq)
    rec.mark_stale("r", "crashed")
    rec.replay(log)
    assert rec.snapshot("r") == live.snapshot("r")
    assert not rec.is_stale("r")
    assert live.state("r").num_events == sum(len(e) for _, _, e in log)


# ---- the plugin hook -----------------------------------------------------------------
def test_a_manager_can_define_its_own_residency_rule(monkeypatch):
    """``residency_find_longest_cache_hit`` on a manager class replaces its search in
    the index (only there: the manager's own lookup is unchanged)."""
    from kvcore.runtime.managers import FullAttentionManager

    def at_most_one_block(self, block_hashes, max_length, extra_tokens=0):
        return FullAttentionManager.find_longest_cache_hit(
            self, block_hashes, min(max_length, self.block_size), extra_tokens)

    cfg = _cfg(_full(4))
    m = KVCacheManager(cfg, enable_events=True, max_model_len=128)
    toks = list(range(1, 22))
    _serve(m, "r", toks)
    evs = m.take_events()
    q = m.make_request("q", toks)
    assert ResidencyIndex(cfg).longest_prefix(q.block_hashes, 21) == {}
    monkeypatch.setattr(FullAttentionManager, "residency_find_longest_cache_hit",
                        at_most_one_block, raising=False)
    ix = ResidencyIndex(cfg)
    ix.apply("a", evs)
    assert ix.longest_prefix(q.block_hashes, 21) == {"a": 4}
    assert m.get_computed_blocks(q)[1] == 20


def test_event_batches_and_unknown_replicas():
    """A vLLM-style batch object (``.events``) is accepted; an unknown replica and a
    disabled cache answer 0."""
    cfg = _cfg(_full(4))
    m = KVCacheManager(cfg, enable_events=True, max_model_len=128)
    toks = list(range(1, 22))
    _serve(m, "r", toks)

    class Batch:
        def __init__(self, events):
            self.events = events
            self.ts = 0.0

    ix = ResidencyIndex(cfg)
    ix.apply("a", Batch(m.take_events()), 0)
    q = m.make_request("q", toks)
    assert ix.longest_prefix(q.block_hashes, 21, replicas=["a", "zz"]) == {"a": 20,
                                                                          "zz": 0}
    off = ResidencyIndex(cfg, enable_caching=False, replicas=["a"])
    assert off.longest_prefix(q.block_hashes, 21) == {"a": 0}


# ---- generated: batching does not matter, JSON and objects agree ------------------
from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 10_000), cuts=st.lists(st.integers(0, 400), max_size=12))
def test_batch_boundaries_and_event_forms_do_not_change_the_index(seed, cuts):
    """One event stream of kvcore's manager (seeded workload on a full + window model)
    cut into batches anywhere, as objects or as JSON dicts, builds the same index, and
    answers every recorded query with the manager's hit."""
    cfg = _cfg(_full(4), SlidingWindowSpec(block_size=4, num_kv_heads=1, head_size=8,
                                           sliding_window=8), blocks=30)
    v = vectors.load(vectors.generate("h", cfg, seed=seed, num_requests=12,
                                      max_prompt=60, reset_every=4))
    flat = [e for r in v.records if r["op"] == "events" for e in r["events"]]
    bounds = sorted({min(c, len(flat)) for c in cuts} | {0, len(flat)})
    batches = [flat[a:b] for a, b in zip(bounds, bounds[1:])]
    one = ResidencyIndex(cfg)
    one.apply("r", flat, 0)
    many = ResidencyIndex(cfg)
    for i, b in enumerate(batches):
        many.apply("r", [event_from_dict(e) for e in b], i)
    assert many.snapshot("r")["cached"] == one.snapshot("r")["cached"]
    assert not many.is_stale("r")
    assert vectors.check(v) == []


def test_deepseek_v4_many_block_sizes():
    """DeepSeek-V4-Flash as kvcore plans it: groups with block sizes from 4 tokens up
    (compressed MLA, sliding-window MLA, the indexer); a hit is a multiple of the
    plan's hit alignment (the lcm of the block sizes), and the index agrees with the
    manager on every admission of long seeded prompts (prefill in 4,096-token chunks,
    evictions)."""
    pytest.importorskip("kvcore_mla")
    import kvcore

    cfg = kvcore.plan_model("deepseek-v4-flash", max_model_len=16384,
                            num_gpu_blocks_override=200_000, max_num_batched_tokens=4096)
    sizes = {g.spec.block_size for g in cfg.kv_cache_groups}
    assert len(sizes) >= 5 and min(sizes) == 4
    align = cfg.stats.prefix_hit_alignment_tokens
    assert align == math.lcm(*sizes)
    m = KVCacheManager(cfg, enable_events=True, check_invariants=False,
                       max_num_batched_tokens=4096)
    ix = ResidencyIndex(cfg, max_num_batched_tokens=4096)
    assert ix.hash_block_size == 4
    rng = random.Random(0)
    bases = [[rng.randrange(1, 9999) for _ in range(12000)] for _ in range(3)]
    seen = []
    for i in range(10):
        p = rng.choice(bases)[:rng.randrange(5000, 12000)]
        r = m.make_request(f"r{i}", p)
        ix.apply("a", m.take_events(), i)
        blocks, n = m.get_computed_blocks(r)
        seen.append((n, ix.longest_prefix(r.block_hashes, len(p))["a"]))
        c = 0
        while c < len(p) - n:
            k = min(4096, len(p) - n - c)
            got = m.allocate_slots(r, k, n, blocks) if c == 0 else m.allocate_slots(r, k)
            assert got is not None
            c += k
            r.num_computed_tokens = n + c
        m.free(r)
    assert all(a == b for a, b in seen), seen
    assert 0 in {a for a, _ in seen} and any(a > 0 for a, _ in seen)
    assert all(a % align == 0 for a, _ in seen)
