"""v14's candidate H (tests/data/sim_accuracy/v14_protocol.md): the accuracy harness
replays the length distribution a row states instead of its means.

Expected values come from the definitions the protocol fixes: a run without
``--ignore-eos`` stops each request at its EOS or at the requested maximum (a
geometric length with one per-token hazard, truncated: lengths in [1, max], the run's
mean); vLLM 0.32's random dataset draws lengths uniformly on [floor(len x (1 - r)),
ceil(len x (1 + r))] (``RandomDataset.get_sampling_params``); a stated clipped normal
stays inside its clip.
"""

from __future__ import annotations

import math
import statistics

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kvcore.errors import ConfigError
from kvcore.sim import accuracy


@settings(max_examples=80, deadline=None)
@given(n=st.integers(1, 300), cap=st.integers(2, 4096), frac=st.floats(0.05, 0.999),
       seed=st.integers(0, 2**16))
def test_eos_lengths_are_capped_and_hit_the_runs_mean(n, cap, frac, seed):
    mean = max(1, int(cap * frac))
    out = accuracy.eos_output_lengths(n, mean, cap, seed)
    assert len(out) == n and all(type(x) is int and 1 <= x <= cap for x in out)
    if mean >= cap:
        assert out == [cap] * n
        return
    # a hazard step moves at most one request by at most ``cap`` tokens: the mean is
    # the run's to that granularity (and to one token where n is large)
    assert abs(statistics.fmean(out) - mean) <= max(1.0, cap / n)


def test_eos_lengths_are_a_truncated_geometric():
    # the requested 128 with a mean of 100 (the v9c rows): a constant hazard h with
    # (1 - (1 - h)^128) / h = 100 gives h ~ 0.0049, so P(reach 128) = (1 - h)^127 ~ 0.54
    out = accuracy.eos_output_lengths(20_000, 100, 128, 0)
    h = 0.0
    lo, hi = 1e-9, 0.5
    for _ in range(100):
        h = (lo + hi) / 2
        lo, hi = (h, hi) if (1 - (1 - h) ** 128) / h > 100 else (lo, h)
    reach = sum(x == 128 for x in out) / len(out)
    assert reach == pytest.approx((1 - h) ** 127, abs=0.02)
    # below the cap the lengths fall geometrically: P(L = 1) ~ h
    assert sum(x == 1 for x in out) / len(out) == pytest.approx(h, abs=0.003)
    assert accuracy.eos_output_lengths(50, 100, 128, 3) == accuracy.eos_output_lengths(
        50, 100, 128, 3)


@pytest.mark.parametrize("args", [(0, 10, 20), (5, 0, 20), (5, 10, 0), (5, True, 20),
                                  (5, 10.5, 20)])
def test_eos_lengths_bad_arguments_name_the_field(args):
    with pytest.raises(ConfigError):
        accuracy.eos_output_lengths(*args)


def _row(**kw):
    row = {"id": "r", "config": "llama-3.1-8b", "gpu": "H100-SXM", "input_len": 1000,
           "output_len": 200, "num_prompts": 400}
    row.update(kw)
    return row


@settings(max_examples=60, deadline=None)
@given(isl=st.integers(1, 8000), osl=st.integers(1, 2000), r=st.floats(0.01, 0.99))
def test_range_ratio_lengths_are_vllms_uniform_bounds(isl, osl, r):
    ins, outs = accuracy.stated_lengths(_row(input_len=isl, output_len=osl,
                                             random_range_ratio=r))
    for lens, n in ((ins, isl), (outs, osl)):
        low = max(1, math.floor(n * (1 - r)))
        high = max(low, math.ceil(n * (1 + r)))
        assert lens is not None and len(lens) == 400
        assert all(low <= x <= high for x in lens)


def test_clipped_normal_stays_in_its_clip_and_rows_without_keys_are_unchanged():
    ins, outs = accuracy.stated_lengths(_row(
        input_len=2048, input_len_sd=1024, input_len_min=10, input_len_max=4096,
        output_len=256, output_len_sd=128, output_len_min=10, output_len_max=512))
    assert ins is not None and outs is not None
    assert min(ins) >= 10 and max(ins) <= 4096 and min(outs) >= 10 and max(outs) <= 512
    # a clipped normal: both clips are reached at 2 sd / 1 sd from the mean, and the
    # sample's spread is near the stated sd
    assert 700 < statistics.pstdev(ins) < 1100 and 90 < statistics.pstdev(outs) < 140
    # the output's max is the normal's clip here, not an EOS cap
    assert any(x < 128 for x in outs)
    assert accuracy.stated_lengths(_row()) == (None, None)
    # an output_len_max at or below the mean states no early stop
    assert accuracy.stated_lengths(_row(output_len_max=200)) == (None, None)


@pytest.mark.parametrize("key,value", [("output_len_max", 0), ("output_len_max", 2.5),
                                       ("random_range_ratio", 1.0),
                                       ("random_range_ratio", -0.1),
                                       ("random_range_ratio", True),
                                       ("input_len_sd", 0), ("output_len_sd", math.nan),
                                       ("ignore_eos", "yes")])
def test_bad_stated_keys_name_the_key(key, value):
    with pytest.raises(ConfigError) as e:
        accuracy._check_row(_row(**{key: value}))
    assert key in str(e.value)


def test_the_stated_model_is_a_harness_option_not_the_default():
    # v14_protocol.md: H becomes the replay only by its rule; until then the default is
    # v12's G
    assert "stated" in accuracy.LENGTH_MODELS
    assert accuracy.DEFAULT_LENGTHS == "sharegpt"
