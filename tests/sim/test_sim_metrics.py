"""The serving figures against vLLM 0.32's definitions (``vllm/benchmarks/serve.py``
``calculate_metrics``): hand-computed cases, and the statistics against numpy, which is
what vLLM computes them with."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kvcore.errors import ConfigError
from kvcore.sim.engine import EngineResult, SimRequest
from kvcore.sim.metrics import (
    format_summary,
    mean,
    median,
    parse_goodput,
    percentile,
    serving_metrics,
    std,
)
from kvcore.sim.traces import TraceRequest


def _req(rid: str, prompt: int, sent: float, times: list[float]) -> SimRequest:
    r = SimRequest(TraceRequest(rid, 0.0, prompt, len(times), 0))
    r.sent = sent  # times: absolute here; the engine keeps them from the send
    r.token_times = [t - sent for t in times]
    r.finish = times[-1]
    return r


def _result(*reqs: SimRequest, rejected: int = 0) -> EngineResult:
    extra = []
    for k in range(rejected):
        x = SimRequest(TraceRequest(f"x{k}", 0.0, 10, 5, 0))
        x.rejected = True
        extra.append(x)
    res = EngineResult(requests=[*reqs, *extra], rejected=rejected)
    res.duration = max(r.finish for r in reqs)
    res.step_end = [0.5, 1.0]
    res.step_usage = [0.2, 0.6]
    return res


def test_hand_computed_case() -> None:
    # a: sent 0, tokens at 0.1, 0.3, 0.6 -> ttft 0.1, e2el 0.6, tpot (0.6-0.1)/2 = 0.25,
    #    itl [0.2, 0.3];  b: sent 0.2, one token at 0.5 -> ttft 0.3, e2el 0.3, no tpot
    a = _req("a", 100, 0.0, [0.1, 0.3, 0.6])
    b = _req("b", 50, 0.2, [0.5])
    m = serving_metrics(_result(a, b, rejected=1))
    assert m["completed"] == 2 and m["failed"] == 1
    assert m["duration"] == pytest.approx(0.6)
    assert m["total_input_tokens"] == 150 and m["total_output_tokens"] == 4
    assert m["request_throughput"] == pytest.approx(2 / 0.6)
    assert m["output_throughput"] == pytest.approx(4 / 0.6)
    assert m["total_token_throughput"] == pytest.approx(154 / 0.6)
    assert m["mean_ttft_ms"] == pytest.approx(200)
    assert m["median_ttft_ms"] == pytest.approx(200)
    assert m["std_ttft_ms"] == pytest.approx(100)
    assert m["p99_ttft_ms"] == pytest.approx(298)  # 100 + 0.99 * (300 - 100)
    assert m["mean_tpot_ms"] == pytest.approx(250) and m["p99_tpot_ms"] == pytest.approx(250)
    assert m["mean_itl_ms"] == pytest.approx(250) and m["median_itl_ms"] == pytest.approx(250)
    assert m["p99_itl_ms"] == pytest.approx(299)  # 200 + 0.99 * 100
    assert m["mean_e2el_ms"] == pytest.approx(450) and m["median_e2el_ms"] == pytest.approx(450)
    assert m["request_goodput"] is None
    # time-weighted usage: 0.5 s at 0.2 then 0.5 s at 0.6
    assert m["mean_kv_usage"] == pytest.approx(0.4) and m["peak_kv_usage"] == 0.6


def test_goodput_counts_requests_meeting_every_slo() -> None:
    a = _req("a", 100, 0.0, [0.1, 0.3, 0.6])   # ttft 100 ms, tpot 250 ms, e2el 600 ms
    b = _req("b", 50, 0.2, [0.5])              # ttft 300 ms, tpot 0 (one token), e2el 300
    res = _result(a, b)
    assert serving_metrics(res, goodput={"ttft": 150})["request_goodput"] == \
        pytest.approx(1 / 0.6)
    # b's TPOT counts as 0 for goodput (vLLM's all_tpots)
    assert serving_metrics(res, goodput={"ttft": 400, "tpot": 200})["request_goodput"] == \
        pytest.approx(1 / 0.6)
    assert serving_metrics(res, goodput={"e2el": 600})["request_goodput"] == \
        pytest.approx(2 / 0.6)  # the SLO is inclusive (slo >= value)
    assert serving_metrics(res, goodput={"e2el": 100})["request_goodput"] == 0.0


def test_empty_lists_count_as_zero() -> None:
    m = serving_metrics(_result(_req("a", 10, 0.0, [0.2])))
    assert m["mean_tpot_ms"] == m["p99_itl_ms"] == m["std_itl_ms"] == 0.0  # np.mean(0)


def test_peak_buckets_as_vllm() -> None:
    # tokens at 0.1, 0.3, 0.6 (bucket 0) and 1.5 (bucket 1): peak 3 tokens a second;
    # a active in seconds 0..0, b in 0..1 -> peak concurrency 2 (second 0)
    a = _req("a", 1, 0.0, [0.1, 0.3, 0.6])
    b = _req("b", 1, 0.2, [1.5])
    m = serving_metrics(_result(a, b))
    assert m["max_output_tokens_per_s"] == 3.0 and m["max_concurrent_requests"] == 2


@settings(max_examples=60, deadline=None)
@given(st.lists(st.floats(0, 1e4, allow_nan=False), max_size=40),
       st.sampled_from([0.0, 1.0, 25.0, 50.0, 90.0, 99.0, 99.9, 100.0]))
def test_statistics_equal_numpy(xs: list[float], p: float) -> None:
    np = pytest.importorskip("numpy")
    ref = xs or 0
    assert mean(xs) == pytest.approx(float(np.mean(ref)), rel=1e-9, abs=1e-9)
    assert std(xs) == pytest.approx(float(np.std(ref)), rel=1e-7, abs=1e-7)
    assert median(xs) == pytest.approx(float(np.median(ref)), rel=1e-9, abs=1e-9)
    assert percentile(xs, p) == pytest.approx(float(np.percentile(ref, p)), rel=1e-9,
                                              abs=1e-9)


def test_parse_goodput_as_vllm() -> None:
    assert parse_goodput(["ttft:200", "tpot:50.5", "e2el:0"]) == \
        {"ttft": 200.0, "tpot": 50.5, "e2el": 0.0}
    assert parse_goodput(None) == {}
    for bad in ("ttft", "ttft:", "ttft:abc", "itl:5", "ttft:-1", "ttft:nan", "a:b:c"):
        with pytest.raises(ConfigError) as e:
            parse_goodput([bad])
        assert e.value.extra["field"] == "goodput"


def test_summary_block_has_vllms_lines() -> None:
    m = serving_metrics(_result(_req("a", 100, 0.0, [0.1, 0.3, 0.6])), goodput={"ttft": 1})
    text = format_summary(m, max_concurrency=8, request_rate=2.0)
    lines = text.splitlines()
    assert lines[0] == "============ Serving Benchmark Result ============"
    assert "Successful requests:                     1         " in lines
    assert any(x.startswith("Maximum request concurrency:") for x in lines)
    assert any(x.startswith("Request rate configured (RPS):           2.00") for x in lines)
    assert any(x.startswith("Request goodput (req/s):") for x in lines)
    for name in ("TTFT", "TPOT", "ITL", "E2EL"):
        assert any(x.startswith(f"P99 {name} (ms):") for x in lines), name
    assert not any("Request rate" in x for x in format_summary(m).splitlines())
    assert math.isclose(float(lines[5].split()[-1]), 0.6, abs_tol=0.005)  # duration
