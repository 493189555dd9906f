"""tester T10: a custom plan judge's answers are checked, a raising judge or sweep
callback is named, and sweep axes are ordered sequences of numbers (numpy too).

The rule: each judge value is a number of seconds >= 0 (inf: the candidate serves no
request; numpy numbers are numbers), else a ConfigError (field ``judge``) naming the
judge, the candidate and the value; an exception from the judge or from sweep's
``on_row`` (SystemExit too) is a ConfigError naming it.  Valid answers keep their
meaning: equal times everywhere leave vLLM's layout (README: a layout not faster than
vLLM's does not win).  Generated: the bad value and its position, exception types.
"""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import kvcore
from kvcore import FullAttentionSpec, SlidingWindowSpec
from kvcore.errors import ConfigError

SETTINGS = settings(max_examples=40, deadline=None, derandomize=True)
COMMON = dict(block_size=16, num_kv_heads=8, head_size=64, dtype="bfloat16")
# README's example: vLLM's layout has 2 groups
LAYERS = {f"model.layers.{i}.self_attn": (SlidingWindowSpec(sliding_window=128, **COMMON)
                                          if i % 2 == 0 else FullAttentionSpec(**COMMON))
          for i in range(24)}
KW = dict(kv_cache_memory_bytes=40 * 2 ** 30, max_model_len=8192)
BAD = [-1.0, -1e-9, math.nan, "1", None, True, [1.0], -math.inf]
ERRORS = [ZeroDivisionError("division by zero"), TypeError("t"), SystemExit(0),
          KeyError("k"), RuntimeError("r")]


def judge_with(bad, at):
    def bad_judge(cands, workload):
        out = [1.0] * len(cands)
        out[at % len(cands)] = bad
        return out
    return bad_judge


@SETTINGS
@given(st.sampled_from(BAD), st.integers(0, 7))
def test_bad_judge_values_are_refused_naming_the_judge(bad, at):
    with pytest.raises(ConfigError) as e:
        kvcore.plan(LAYERS, judge=judge_with(bad, at), **KW)
    assert e.value.extra.get("field") == "judge" and "bad_judge" in str(e.value)


@SETTINGS
@given(st.sampled_from(ERRORS))
def test_a_raising_judge_is_named(exc):
    def raising_judge(cands, workload):
        raise exc

    with pytest.raises(ConfigError) as e:
        kvcore.plan(LAYERS, judge=raising_judge, **KW)
    assert e.value.extra.get("field") == "judge" and "raising_judge" in str(e.value)
    assert type(exc).__name__ in str(e.value)


def test_none_is_not_a_list_of_times():
    with pytest.raises(ConfigError) as e:
        kvcore.plan(LAYERS, judge=lambda c, w: None, **KW)
    assert e.value.extra.get("field") == "judge"


@SETTINGS
@given(st.sampled_from([0.0, 1.0, 3.5, math.inf]), st.sampled_from(["float", "float32",
                                                                     "int"]))
def test_equal_times_keep_vllms_layout(t, kind):
    """Every candidate equally fast: vLLM's 2-group layout stays (the tester's 6-group
    win came from -1.0, now refused).  inf everywhere: no layout serves a request."""
    if kind == "float32":
        np = pytest.importorskip("numpy")
        t = np.float32(t)
    elif kind == "int":
        if math.isinf(t):
            return
        t = int(t)
    c = kvcore.plan(LAYERS, judge=lambda cands, w: [t] * len(cands), **KW)
    if not math.isinf(float(t)):
        assert len(c.kv_cache_groups) == 2


@settings(max_examples=6, deadline=None, derandomize=True)
@given(st.sampled_from(ERRORS))
def test_a_raising_on_row_is_named(exc):
    def on_row(row):
        raise exc

    with pytest.raises(ConfigError) as e:
        kvcore.sweep("llama-3.1-8b", gpu=["H100", "L4"], tensor_parallel_size=[1, 2],
                     on_row=on_row, progress=False)
    assert e.value.extra.get("field") == "on_row" and "on_row" in str(e.value)
    assert type(exc).__name__ in str(e.value)


def test_sweep_axes_take_ranges_and_numpy():
    np = pytest.importorskip("numpy")

    def rows(tp):
        return [{k: v for k, v in r.items() if k != "plan"}
                for r in kvcore.sweep("llama-3.1-8b", gpu="H100", tensor_parallel_size=tp,
                                      progress=False)]

    want = rows([1, 2])
    assert rows(range(1, 3)) == want
    assert rows(np.array([1, 2])) == want
    assert rows([np.int64(1), np.int32(2)]) == want
    assert rows((1, 2)) == want
