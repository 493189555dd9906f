"""Hand-built workloads (``kvcore.serving.RequestClass`` / ``Workload``, public and
what ``kvcore.plan(workload=...)`` takes) are checked where they are made (fresh
tester, T2): an empty workload or a count of 0 raised ZeroDivisionError in the planner,
a str length TypeError, a tuple for a class AttributeError, and a negative count, a
max_num_seqs of 0 or a shared prefix longer than its prompt planned with an infinite or
negative serving time, exit 0.

Rule: a clear ConfigError naming the field; a workload that constructs plans to finite,
non-negative serving figures.
"""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import kvcore
from kvcore import FullAttentionSpec, SlidingWindowSpec
from kvcore.errors import ConfigError
from kvcore.serving import RequestClass, Workload

try:  # numpy ints are ints (numbers.Integral); the core-only venv has no numpy
    import numpy as np

    NUMPY = [st.just(np.int64(64)), st.just(np.int32(-1))]
except ImportError:
    NUMPY = []
ANY = st.one_of(st.integers(-10, 10**5), st.floats(allow_nan=True), st.none(),
                st.text(max_size=3), st.booleans(), st.just(10**20), *NUMPY)


def _valid_len(v, minimum, maximum=10**12):
    return (not isinstance(v, (bool, float, str)) and v is not None
            and minimum <= int(v) <= maximum)


@settings(max_examples=300, deadline=None)
@given(p=ANY, o=ANY, s=ANY, c=ANY)
def test_request_class_takes_valid_ints_and_names_the_field_otherwise(p, o, s, c):
    try:
        r = RequestClass(p, o, s, c)
    except ConfigError as e:
        order = [("prompt_len", _valid_len(p, 1)), ("output_len", _valid_len(o, 1)),
                 ("shared_prefix_len", _valid_len(s, 0) and (not _valid_len(p, 1) or int(s) <= int(p))),
                 ("count", _valid_len(c, 1))]
        bad = [n for n, ok in order if not ok]
        assert bad, f"refused a valid class: {e}"
        # the first bad field, in the order the fields are checked
        assert e.extra.get("field") == bad[0], (e.extra, bad, str(e))
        return
    assert all(type(x) is int for x in (r.prompt_len, r.output_len,
                                         r.shared_prefix_len, r.count))
    assert r.prompt_len >= 1 and r.output_len >= 1 and r.count >= 1
    assert 0 <= r.shared_prefix_len <= r.prompt_len


@pytest.mark.parametrize("kw", [dict(requests=()), dict(requests=[]),
                                dict(requests=((100, 5, 0, 1),)),
                                dict(requests=None), dict(requests="abc"),
                                dict(requests=(RequestClass(100, 5),), max_num_seqs=0),
                                dict(requests=(RequestClass(100, 5),), max_num_seqs=-1),
                                dict(requests=(RequestClass(100, 5),), max_num_seqs=2.5),
                                dict(requests=(RequestClass(100, 5),), source=3)])
def test_bad_workloads_name_the_field(kw):
    with pytest.raises(ConfigError) as e:
        Workload(**kw)
    assert e.value.extra.get("field") in kw


LAYERS = {f"model.layers.{i}.self_attn":
          (SlidingWindowSpec(block_size=16, num_kv_heads=8, head_size=64,
                             sliding_window=128) if i % 2 == 0 else
           FullAttentionSpec(block_size=16, num_kv_heads=8, head_size=64))
          for i in range(8)}


@settings(max_examples=25, deadline=None)
@given(classes=st.lists(st.tuples(st.integers(1, 6000), st.integers(1, 2000),
                                  st.floats(0, 1), st.integers(1, 50)),
                        min_size=1, max_size=4),
       max_num_seqs=st.integers(1, 512), as_list=st.booleans())
def test_a_hand_built_workload_plans_to_finite_figures(classes, max_num_seqs, as_list):
    reqs = [RequestClass(p, o, int(p * f), c) for p, o, f, c in classes]
    w = Workload(reqs if as_list else tuple(reqs), max_num_seqs=max_num_seqs)
    assert isinstance(w.requests, tuple)
    try:
        cfg = kvcore.plan(LAYERS, kv_cache_memory_bytes=4 * 2**30, max_model_len=8192,
                          workload=w)
    except ConfigError as e:  # only: no request fits max_model_len (vLLM rejects them)
        assert e.extra.get("field") == "max_model_len"
        assert all(p + o > 8192 for p, o, _, _ in classes)
        return
    st_ = cfg.stats
    figs = [st_.serving] + [r.figures for r in [st_.vllm_layout, *(st_.pareto_front or [])]
                            if r is not None]
    figs = [f for f in figs if f is not None]
    assert figs, "a plan with a workload reports its serving figures"
    for f in figs:
        assert math.isfinite(f.time_s) and f.time_s >= 0, f
