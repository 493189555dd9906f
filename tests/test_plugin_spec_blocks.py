"""tester T8: a plugin spec's max_num_blocks_per_req / max_memory_usage_bytes answers
are checked like its page size.

The rule: an int >= 0 within its bound (2**40 blocks; numpy integers are ints) is a
count of blocks; anything else -- a negative count, a float, None, text, an
implausible 10**20, an exception the method raises (SystemExit too) -- is a
ConfigError naming the method, the kind, the plugin and the value, never a bare
TypeError / IndexError nor a plan whose concurrency a negative count inflated.
Generated: the value the plugin returns (or raises).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import kvcore
from kvcore import FullAttentionSpec, KVCacheSpec, SpecType, hookimpl, plugins
from kvcore.errors import ConfigError
from kvcore.grouping import spec_blocks_per_req
from kvcore.specs import PlanContext

ANSWER: list = [1]


@dataclass(frozen=True, kw_only=True)
class AnswerSpec(KVCacheSpec):
    kind: ClassVar[str] = "t8_answer"

    @property
    def real_page_size_bytes(self):
        return 4096

    def max_num_blocks_per_req(self, ctx, max_len=None):
        v = ANSWER[0]
        if isinstance(v, BaseException):
            raise v
        return v

    def max_memory_usage_bytes(self, ctx, max_len=None):
        v = ANSWER[0]
        if isinstance(v, BaseException):
            raise v
        return v * 4096 if type(v) is int else v


class _Plugin:
    @hookimpl
    def kvcore_spec_types(self):
        return [SpecType(AnswerSpec, "t8_answer",
                         "kvcore.runtime.managers:FullAttentionManager")]


@pytest.fixture(scope="module", autouse=True)
def _registered():
    name = plugins.register(_Plugin(), name="t8-answer-plugin")
    yield
    plugins.unregister(name)


def _plan():
    return kvcore.plan({"a": FullAttentionSpec(block_size=16, num_kv_heads=8, head_size=128),
                        "b": AnswerSpec(block_size=16)},
                       max_model_len=4096, kv_cache_memory_bytes=2 ** 30)


BAD = st.one_of(st.integers(max_value=-1), st.integers(min_value=2 ** 40 + 1),
                st.floats(allow_nan=True), st.none(), st.text(max_size=3), st.booleans(),
                st.sampled_from([IndexError("x"), ZeroDivisionError("z"), SystemExit(0),
                                 TypeError("t")]))


@settings(max_examples=60, deadline=None, derandomize=True)
@given(BAD)
def test_a_bad_answer_is_named(value):
    ANSWER[0] = value
    with pytest.raises(ConfigError) as e:
        _plan()
    msg = str(e.value)
    assert e.value.extra.get("field") == "max_num_blocks_per_req"
    assert "t8_answer" in msg and "t8-answer-plugin" in msg


@settings(max_examples=40, deadline=None, derandomize=True)
@given(st.integers(0, 2 ** 40), st.sampled_from(["int", "int64", "uint64"]),
       st.sampled_from(["max_num_blocks_per_req", "max_memory_usage_bytes"]))
def test_a_good_answer_is_the_count(value, kind, what):
    if kind != "int":
        np = pytest.importorskip("numpy")
        value = getattr(np, kind)(value)
    ANSWER[0] = value
    ctx = PlanContext(max_model_len=4096)
    got = spec_blocks_per_req(AnswerSpec(block_size=16), ctx, 4096, what)
    want = int(value) if what == "max_num_blocks_per_req" else int(value) * 4096 \
        if kind == "int" else value
    assert got == want and type(got) is int


def test_a_negative_count_no_longer_inflates_concurrency():
    ANSWER[0] = 4096 // 16  # the full-attention group's own blocks per request
    good = _plan()
    ANSWER[0] = -3
    with pytest.raises(ConfigError):
        _plan()
    assert good.max_concurrency > 0
