"""tester T13: a plugin kv_cache_dtype's key_bytes and value_bytes are checked one by one.

The rule: each of K's and V's bytes per token and head is an int >= 0 (numpy ints taken,
bool not) within 2**24; otherwise planning refuses it with a ConfigError naming the
dtype -- never a page of a negative K (a smaller page and more blocks, exit 0) nor an
implausible figure reported by format_bytes without the plugin.  Valid halves plan the
page the rule gives: block_size x num_kv_heads x (K + V).  Generated: the two halves.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import kvcore
from kvcore import FullAttentionSpec, QuantScheme, hookimpl, plugins
from kvcore.errors import KVCoreError

HALVES: dict = {"k": 8, "v": 8}


class _Plugin:
    @hookimpl
    def kvcore_kv_cache_dtypes(self):
        return [QuantScheme(name="t13_q", mode="custom",
                            key_bytes=lambda h, d: HALVES["k"],
                            value_bytes=lambda h, d: HALVES["v"])]


@pytest.fixture(scope="module", autouse=True)
def _registered():
    name = plugins.register(_Plugin(), name="t13-q-plugin")
    yield
    plugins.unregister(name)


def _plan():
    s = FullAttentionSpec(block_size=16, num_kv_heads=8, head_size=128,
                          kv_cache_dtype="t13_q")
    return s, kvcore.plan({"l": s}, max_model_len=4096, kv_cache_memory_bytes=2 ** 30)


GOOD = st.integers(0, 4096)
BAD = st.one_of(st.integers(max_value=-1), st.integers(min_value=(1 << 24) + 1),
                st.booleans())


@settings(max_examples=50, deadline=None, derandomize=True)
@given(GOOD, GOOD)
def test_valid_halves_give_the_rule_page(k, v):
    if k + v == 0:
        return  # no bytes at all: the page check's own refusal
    HALVES.update(k=k, v=v)
    spec, cfg = _plan()
    assert spec.page_size_bytes >= 16 * 8 * (k + v)
    assert spec.real_page_size_bytes == 16 * 8 * (k + v)


@settings(max_examples=50, deadline=None, derandomize=True)
@given(st.sampled_from(["k", "v"]), BAD, GOOD)
def test_a_bad_half_is_refused_naming_the_dtype(which, bad, other):
    HALVES.update(k=other, v=other)
    HALVES[which] = bad
    with pytest.raises(KVCoreError) as e:
        _plan()
    assert "t13_q" in str(e.value)
    HALVES.update(k=8, v=8)
