"""The accuracy harness's length models (v12_protocol.md): ShareGPT rows replayed with
ShareGPT's output-length shape instead of every request at the mean.

Expected values: vLLM's ShareGPT filter (``is_valid_sequence`` in
vllm/benchmarks/datasets.py: prompt and output at least 4 tokens, prompt + output at
most 2,048), the lognormal's own quantiles, and the source run's percentiles
(DO-Solutions/gtc-2026-doks rate-1.0.json: output p50 ~147, p95 ~574 tokens).
"""

from __future__ import annotations

import math
import statistics
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kvcore.errors import ConfigError
from kvcore.sim import accuracy

DATA = Path(__file__).resolve().parents[1] / "data" / "sim_accuracy"


@settings(max_examples=60, deadline=None)
@given(n=st.integers(1, 400), mean_out=st.integers(1, 3000), isl=st.integers(1, 3000),
       seed=st.integers(0, 2**16))
def test_lengths_obey_vllms_filter_and_hit_the_mean(n, mean_out, isl, seed):
    out = accuracy.sharegpt_output_lengths(n, mean_out, isl, seed)
    high = max(4, 2048 - isl)
    assert len(out) == n and all(isinstance(x, int) for x in out)
    assert all(4 <= x <= high for x in out)
    target = min(max(mean_out, 4), high)
    # the mean is the row's (to the integers' granularity: a step of the scale moves
    # the mean by at most one request's rounding, 1 / n ... high / n near the cap)
    if all(x == high for x in out):
        assert target >= statistics.fmean(out) - 1e-9 or n == 1
    else:
        assert abs(statistics.fmean(out) - target) <= max(1.0, high / n)
    assert out == accuracy.sharegpt_output_lengths(n, mean_out, isl, seed)


def test_the_shape_is_the_source_runs():
    # 300 prompts at the source run's means (207 in, 197 out): its p50 147 and p95 574
    # within the sampling error of 300 draws (here 154 and 508 would be typical)
    out = sorted(accuracy.sharegpt_output_lengths(300, 197, 207))
    p50, p95 = statistics.median(out), out[int(0.95 * 300) - 1]
    assert 120 <= p50 <= 175 and 430 <= p95 <= 700
    # a long tail: the longest request several times the mean (the run's duration at
    # saturation is set by it), none at the mean alone
    assert out[-1] > 4 * 197 and out.count(197) < 10


def test_a_large_draw_is_lognormal_with_the_sigma():
    # without clipping (a mean far from both bounds) the log-lengths' spread is sigma
    out = accuracy.sharegpt_output_lengths(20000, 100, 10)
    logs = [math.log(x) for x in out]
    sd = statistics.pstdev(logs)
    assert abs(sd - accuracy.SHAREGPT_OUTPUT_SIGMA) < 0.05
    # median / mean of a lognormal: exp(-sigma^2 / 2)
    ratio = statistics.median(out) / statistics.fmean(out)
    assert abs(ratio - math.exp(-accuracy.SHAREGPT_OUTPUT_SIGMA ** 2 / 2)) < 0.03


@pytest.mark.parametrize("kw, field", [
    ({"num_prompts": 0}, "num_prompts"), ({"num_prompts": 2.5}, "num_prompts"),
    ({"mean_output_len": -1}, "output_len"), ({"mean_output_len": True}, "output_len"),
    ({"input_len": 0}, "input_len"), ({"sigma": 0}, "sigma"),
    ({"sigma": float("nan")}, "sigma"), ({"sigma": float("inf")}, "sigma"),
    ({"sigma": "0.8"}, "sigma")])
def test_bad_arguments_name_the_field(kw, field):
    args = {"num_prompts": 10, "mean_output_len": 100, "input_len": 100, **kw}
    with pytest.raises(ConfigError) as e:
        accuracy.sharegpt_output_lengths(**args)
    assert e.value.extra["field"] == field


@pytest.mark.parametrize("text, want", [
    ("sharegpt (approximated by its mean lengths)", True),
    ("ShareGPT (ShareGPT_V3_unfiltered_cleaned_split.json), 200 prompts", True),
    ("random 1024 / 128", False), ("", False)])
def test_which_rows_are_sharegpt(text, want):
    assert accuracy.is_sharegpt_row({"dataset": text}) is want


def _row(**kw):
    row = {"id": "t", "config": "llama-3.1-8b", "gpu": "H100", "input_len": 200,
           "output_len": 200, "num_prompts": 64, "request_rate": "inf",
           "dataset": "sharegpt (test)", "measured": {"output_throughput": 1.0},
           "split": "holdout"}
    row.update(kw)
    return row


def test_lengths_act_on_sharegpt_rows_only(monkeypatch):
    monkeypatch.setenv("KVCORE_CHECK_INVARIANTS", "0")
    sg = _row()
    rnd = _row(dataset="random 200 / 200")
    a = accuracy.simulate_row(sg, sim="fast", lengths="mean")
    g = accuracy.simulate_row(sg, sim="fast", lengths="sharegpt")
    assert accuracy.simulate_row(sg, sim="fast") == g  # the default since v12
    # the same tokens, but a long-tailed batch drains slower: all at once, the run
    # lasts until its longest request ends
    assert g["output_throughput"] < 0.9 * a["output_throughput"]
    assert accuracy.simulate_row(rnd, sim="fast", lengths="sharegpt") == \
        accuracy.simulate_row(rnd, sim="fast", lengths="mean")


def test_the_engine_and_the_fast_loop_agree_on_drawn_lengths(monkeypatch):
    monkeypatch.setenv("KVCORE_CHECK_INVARIANTS", "0")
    row = _row(num_prompts=40, request_rate=4.0)
    e = accuracy.simulate_row(row, sim="engine", lengths="sharegpt")
    f = accuracy.simulate_row(row, sim="fast", lengths="sharegpt")
    for m in accuracy.METRICS:
        assert e[m] == pytest.approx(f[m], rel=0.02), m


@pytest.mark.parametrize("bad", ["Mean", "", None, 1, "distribution"])
def test_an_unknown_length_model_names_the_field(bad):
    with pytest.raises(ConfigError) as e:
        accuracy.simulate_row(_row(), sim="fast", lengths=bad)
    assert e.value.extra["field"] == "lengths"


def test_cli_lengths_flag(capsys):
    assert accuracy.main(["--lengths", "median"]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "--lengths" in err
