"""tester T9: a plugin's runtime manager that raises or answers garbage is named, and an
allocation it breaks part-way is undone.

The rule: every call into a group manager that fails -- an exception of any type
(SystemExit too) or a block count that is not an int >= 0 -- is a PluginError naming
the group, the kind, the manager class and the plugin; allocate_slots stays
all-or-nothing (the pool's usage and the request's tables are what they were before
the call, and the manager keeps working); a manager whose free() keeps the request's
table is named instead of leaking its blocks.  Generated: the failing method, the
exception, and the step (first allocation or a later decode) at which it fails.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import kvcore
from kvcore import FullAttentionSpec, KVCacheManager, SpecType, hookimpl, plugins
from kvcore.errors import PluginError
from kvcore.runtime.managers import FullAttentionManager

FAIL: dict = {"method": None, "exc": None}


def _maybe(method, ok):
    if FAIL["method"] == method:
        exc = FAIL["exc"]
        if exc is None:
            return None  # a garbage answer
        raise exc
    return ok()


class M(FullAttentionManager):
    def allocate_new_blocks(self, request, num_tokens):
        if FAIL["method"] == "allocate_then_raise":
            # takes its blocks from the pool and appends them, then fails
            super().allocate_new_blocks(request, num_tokens)
            raise FAIL["exc"] or RuntimeError("after taking blocks")
        return _maybe("allocate_new_blocks",
                      lambda: super(M, self).allocate_new_blocks(request, num_tokens))

    def cache_blocks(self, request, n):
        return _maybe("cache_blocks", lambda: super(M, self).cache_blocks(request, n))

    def get_num_blocks_to_allocate(self, *a):
        return _maybe("get_num_blocks_to_allocate",
                      lambda: super(M, self).get_num_blocks_to_allocate(*a))

    def find_longest_cache_hit(self, *a):
        return _maybe("find_longest_cache_hit",
                      lambda: super(M, self).find_longest_cache_hit(*a))

    def free(self, rid):
        if FAIL["method"] == "free_keeps":
            return None
        return _maybe("free", lambda: super(M, self).free(rid))


@dataclass(frozen=True, kw_only=True)
class S(FullAttentionSpec):
    kind: ClassVar[str] = "t9_mine"


class _Plugin:
    @hookimpl
    def kvcore_spec_types(self):
        return [SpecType(S, "t9_mine", M)]


@pytest.fixture(scope="module", autouse=True)
def _registered():
    name = plugins.register(_Plugin(), name="t9-mine-plugin")
    yield
    plugins.unregister(name)


def _cfg():
    return kvcore.plan({"a": FullAttentionSpec(block_size=4, num_kv_heads=1, head_size=8),
                        "b": S(block_size=4, num_kv_heads=1, head_size=16)},
                       max_model_len=64, num_gpu_blocks_override=40)


def _state(mgr):
    return (mgr.usage, [sorted((k, [b.block_id for b in v]) for k, v in
                               m.req_to_blocks.items()) for m in mgr.managers])


def _named(e):
    msg = str(e)
    return "t9_mine" in msg and "t9-mine-plugin" in msg and " M" in msg


ERRORS = [ZeroDivisionError("z"), IndexError("i"), TypeError("t"), SystemExit(0), None]
ALLOC = ["allocate_new_blocks", "cache_blocks", "get_num_blocks_to_allocate",
         "allocate_then_raise"]


@settings(max_examples=60, deadline=None, derandomize=True)
@given(st.sampled_from(ALLOC), st.sampled_from(ERRORS), st.integers(0, 3))
def test_a_failing_allocation_is_named_and_undone(method, exc, step):
    if exc is None and method != "get_num_blocks_to_allocate":
        exc = RuntimeError("r")  # None is a garbage count only where a count is due
    FAIL.update(method=None, exc=None)
    mgr = KVCacheManager(_cfg(), max_model_len=64)
    other = mgr.make_request("o", [50, 51, 52, 53, 54], max_tokens=4)
    mgr.allocate_slots(other, 5, 0)
    r = mgr.make_request("x", list(range(1, 15)), max_tokens=8)
    hb, n = mgr.get_computed_blocks(r)
    if step:  # fail on a later step of a running request (a decode)
        mgr.allocate_slots(r, 14 - n, n, hb)
        r.num_computed_tokens = 14
        for i in range(step - 1):
            r.all_token_ids.append(100 + i)
            mgr.allocate_slots(r, 1)
            r.num_computed_tokens += 1
        r.all_token_ids.append(99)
    before = _state(mgr)
    FAIL.update(method=method, exc=exc)
    with pytest.raises(PluginError) as e:
        if step:
            mgr.allocate_slots(r, 1)
        else:
            mgr.allocate_slots(r, 14 - n, n, hb)
    field = "allocate_new_blocks" if method == "allocate_then_raise" else method
    assert _named(e.value) and e.value.extra.get("field") == field
    FAIL.update(method=None, exc=None)
    assert _state(mgr) == before  # all or nothing
    mgr.free(r)
    mgr.free(other)
    assert mgr.usage == 0.0  # nothing leaked; the manager still serves
    again = mgr.make_request("y", [7, 8, 9, 10, 11], max_tokens=2)
    assert mgr.allocate_slots(again, 5, 0) is not None


@settings(max_examples=20, deadline=None, derandomize=True)
@given(st.sampled_from(ERRORS))
def test_a_failing_search_is_named(exc):
    FAIL.update(method=None, exc=None)
    mgr = KVCacheManager(_cfg(), max_model_len=64)
    r = mgr.make_request("x", list(range(1, 15)), max_tokens=4)
    FAIL.update(method="find_longest_cache_hit", exc=exc)
    with pytest.raises(PluginError) as e:
        mgr.get_computed_blocks(r)
    assert "t9_mine" in str(e.value) and "find_longest_cache_hit" in str(e.value)
    FAIL.update(method=None, exc=None)


@pytest.mark.parametrize("method,exc", [("free", ZeroDivisionError("f")),
                                        ("free", SystemExit(0)), ("free_keeps", None)])
def test_a_failing_or_leaking_free_is_named(method, exc):
    FAIL.update(method=None, exc=None)
    mgr = KVCacheManager(_cfg(), max_model_len=64)
    r = mgr.make_request("x", list(range(1, 15)), max_tokens=4)
    hb, n = mgr.get_computed_blocks(r)
    mgr.allocate_slots(r, 14 - n, n, hb)
    FAIL.update(method=method, exc=exc)
    with pytest.raises(PluginError) as e:
        mgr.free(r)
    assert _named(e.value) and e.value.extra.get("field") == "free"
    FAIL.update(method=None, exc=None)
