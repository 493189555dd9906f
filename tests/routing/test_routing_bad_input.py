"""Bad input to kvcore.routing's public entries is a KVCoreError naming the argument
(house rule, COMMON.md; tester1 finding 11).  A malformed event in ``apply`` marks the
replica stale (module docstring of kvcore.routing.index: "an index never answers a hit
it cannot vouch for") and the replica answers 0 until an ``AllBlocksCleared`` or a
reset.  Ported from tester1's findings, plus generated malformed inputs."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kvcore.errors import ConfigError, KVCoreError, KVEventError
from kvcore.kv_cache_config import KVCacheConfig, KVCacheGroupSpec
from kvcore.routing import ResidencyIndex, event_from_dict, vectors
from kvcore.runtime import KVCacheManager
from kvcore.specs import FullAttentionSpec


def _cfg() -> KVCacheConfig:
    spec = FullAttentionSpec(block_size=4, num_kv_heads=1, head_size=8)
    return KVCacheConfig(num_blocks=40, kv_cache_tensors=(), max_model_len=128,
                         kv_cache_groups=(KVCacheGroupSpec(("l0",), spec),))


def _warm() -> tuple[ResidencyIndex, list[Any]]:
    """An index with replica "a" holding a 20-token prefix (from kvcore's manager)."""
    cfg = _cfg()
    m = KVCacheManager(cfg, enable_events=True, max_model_len=128)
    toks = list(range(1, 22))
    r = m.make_request("r", toks)
    blocks, n = m.get_computed_blocks(r)
    assert m.allocate_slots(r, len(toks) - n, n, blocks) is not None
    r.num_computed_tokens = len(toks)
    m.free(r)
    ix = ResidencyIndex(cfg, replicas=["a"])
    ix.apply("a", m.take_events())
    q = m.make_request("q", toks)
    assert ix.longest_prefix(q.block_hashes, 21) == {"a": 20}
    return ix, list(q.block_hashes)


# ---- tester1's cases ---------------------------------------------------------------
@pytest.mark.parametrize("events", [
    None,
    [{"type": "BlockStored", "block_hashes": [[1, 2]], "block_size": 4}],
    [{"type": "BlockStored", "block_hashes": "abc", "block_size": 4}],
    [{"type": "BlockStored", "block_hashes": 7, "block_size": 4}],
    [{"type": ["BlockStored"], "block_hashes": [1]}],
    [{"type": "BlockStored", "block_hashes": ["zz"], "block_size": 4}],
    [{"type": "BlockStored", "block_hashes": [1], "block_size": "4"}],
    [None],
    [{"type": "BlockRemoved", "block_hashes": [{}]}],
    7,
    "abc",
])
def test_bad_events_raise_kv_event_error_and_mark_stale(events: Any) -> None:
    ix, hashes = _warm()
    with pytest.raises(KVEventError):
        ix.apply("a", events)
    assert ix.is_stale("a")
    assert ix.longest_prefix(hashes, 21) == {"a": 0}
    ix.apply("a", [{"type": "AllBlocksCleared"}])
    assert not ix.is_stale("a")


@pytest.mark.parametrize("query", [None, 5, [[1]], "abc", [{}]])
def test_bad_query_is_a_kv_event_error(query: Any) -> None:
    ix, _ = _warm()
    with pytest.raises(KVEventError) as e:
        ix.longest_prefix(query)
    assert e.value.extra["field"] == "block_hashes"


@pytest.mark.parametrize("kw,field", [
    ({"num_tokens": -1}, "num_tokens"), ({"num_tokens": "5"}, "num_tokens"),
    ({"num_tokens": 2.5}, "num_tokens"), ({"replicas": 5}, "replicas"),
    ({"replicas": [["a"]]}, "replica"), ({"num_prompt_tokens": -3}, "num_prompt_tokens"),
])
def test_bad_query_arguments(kw: dict[str, Any], field: str) -> None:
    ix, hashes = _warm()
    with pytest.raises(KVEventError) as e:
        ix.longest_prefix(hashes, **kw)
    assert e.value.extra["field"] == field


@pytest.mark.parametrize("kw,field", [
    ({"max_model_len": -5}, "max_model_len"), ({"max_model_len": 0}, "max_model_len"),
    ({"max_num_batched_tokens": 0}, "max_num_batched_tokens"),
    ({"replicas": 5}, "replicas"), ({"replicas": "ab"}, "replicas"),
    ({"replicas": [[1]]}, "replica"), ({"hash": "md5"}, None),
    ({"use_eagle": "yes"}, "use_eagle"), ({"media": 3}, "media"),
    ({"int_hashes": 1}, "int_hashes"),
])
def test_bad_constructor_arguments_are_config_errors(kw: dict[str, Any],
                                                     field: str | None) -> None:
    with pytest.raises(ConfigError) as e:
        ResidencyIndex(_cfg(), **kw)
    if field is not None:
        assert e.value.extra["field"] == field
    with pytest.raises(ConfigError):
        ResidencyIndex(None)


def test_other_entries_check_their_arguments() -> None:
    ix, _ = _warm()
    with pytest.raises(KVEventError) as e:
        ix.snapshot("nope")
    assert isinstance(e.value, KeyError)  # state() / snapshot() were KeyError before
    with pytest.raises(KVEventError):
        ix.reset_replica("a", next_seq=-1)
    with pytest.raises(KVEventError):
        ix.reset_replica(["a"])
    with pytest.raises(KVEventError):
        ix.replay([("a", 0)])
    with pytest.raises(KVEventError):
        ix.replay(None)
    with pytest.raises(KVEventError):
        ix.apply("a", [], seq=-1)
    for bad in (None, 5, [], {"type": "Nope"},
                {"type": "BlockStored", "block_hashes": ["00"], "block_size": 4,
                 "token_ids": "x"},
                {"type": "BlockStored", "block_hashes": ["00"], "block_size": 4,
                 "group_id": "g"}):
        with pytest.raises(KVEventError):
            event_from_dict(bad)  # type: ignore[arg-type]
    for src in (None, 5, {"format": "nope"}, "/nonexistent/vector.json",
                {"format": vectors.FORMAT, "version": vectors.VERSION}):
        with pytest.raises(ConfigError):
            vectors.load(src)  # type: ignore[arg-type]
    with pytest.raises(ConfigError):
        vectors.check(vectors.generate("v", _cfg(), seed=1, num_requests=2), index=5)


# ---- generated malformed events and arguments --------------------------------------
_json = st.recursive(st.none() | st.booleans() | st.integers() | st.floats() |
                     st.text(max_size=6),
                     lambda c: st.lists(c, max_size=3) |
                     st.dictionaries(st.text(max_size=4), c, max_size=3), max_leaves=6)
_field = st.one_of(_json, st.sampled_from(["00ff", "zz", "", 4, 0, -1, [b"\x00"],
                                           ["00"], [1, 2], [[1]], None]))
_event = st.one_of(
    _json,
    st.fixed_dictionaries(
        {"type": st.sampled_from(["BlockStored", "BlockRemoved", "AllBlocksCleared",
                                  "X"]) | _json},
        optional={"block_hashes": _field, "block_size": _field, "group_id": _field,
                  "medium": _field, "token_ids": _field}))


@settings(max_examples=150, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow])
@given(events=st.lists(_event, min_size=1, max_size=4) | _json,
       seq=st.none() | st.integers(-2, 3) | _json)
def test_generated_malformed_batches_only_raise_kvcore_errors(events: Any,
                                                              seq: Any) -> None:
    """Whatever the batch, apply() raises nothing but a KVCoreError; after a failed
    apply the replica answers 0 until AllBlocksCleared (or reset_replica); a batch
    that applies never gives a hit longer than the replica's true 20 tokens."""
    ix, hashes = _warm()
    try:
        ix.apply("a", events, seq)
    except KVCoreError:
        failed = True
    else:
        failed = False
    got = ix.longest_prefix(hashes, 21)["a"]
    stale = ix.is_stale("a")
    if failed and stale:
        assert got == 0
        ix.apply("a", [])  # an empty, valid batch does not restore trust
        assert ix.longest_prefix(hashes, 21)["a"] == 0
        ix.reset_replica("a")
        assert not ix.is_stale("a")
    if failed and not stale:
        assert got == 20  # refused before anything was applied (a bad seq)
    assert got <= 20
    for q in (events, seq):
        try:
            ix.longest_prefix(q, 21)
        except KVCoreError:
            pass
        try:
            ix.longest_prefix(hashes, q)
        except KVCoreError:
            pass
        try:
            event_from_dict(q)
        except KVCoreError:
            pass


@settings(max_examples=60, deadline=None, derandomize=True)
@given(kw=st.dictionaries(st.sampled_from(["max_model_len", "max_num_batched_tokens",
                                           "replicas", "hash", "use_eagle",
                                           "enable_caching", "int_hashes", "media"]),
                          _json, max_size=3))
def test_generated_constructor_arguments_only_raise_config_errors(kw: dict[str, Any]
                                                                   ) -> None:
    try:
        ix = ResidencyIndex(_cfg(), **kw)
    except ConfigError:
        return
    assert ix.max_model_len >= 1


def test_listeners_see_every_applied_event() -> None:
    """add_listener: called once per applied event, after the index applied it (the
    prefix-aware router retires its routing history through it)."""
    from kvcore.routing.events import CLEARED, REMOVED, STORED

    ix, hashes = _warm()
    seen: list[tuple[Any, int, Any, tuple[Any, ...]]] = []
    ix.add_listener(lambda r, op, g, hs: seen.append((r, op, g, tuple(hs))))
    ix.apply("a", [{"type": "BlockRemoved", "block_hashes": [hashes[4].hex()],
                    "group_id": 0}])
    assert seen == [("a", REMOVED, 0, (hashes[4],))]
    assert ix.longest_prefix(hashes, 21) == {"a": 16}
    ix.apply("a", [{"type": "BlockStored", "block_hashes": [hashes[4].hex()],
                    "block_size": 4, "group_id": 0}, {"type": "AllBlocksCleared"}])
    assert [s[1] for s in seen[1:]] == [STORED, CLEARED]
    with pytest.raises(ConfigError):
        ix.add_listener(5)
