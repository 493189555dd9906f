"""``vllm bench serve`` flags kvcore simulate takes as vLLM 0.32 defines them (tester 2's
findings 9 and 17): ``--percentile-metrics``, the ramp-up flags and the JSON form of
``--random-range-ratio``.  Paths relative to site-packages/vllm/ of
/work/main/.venv-vllm; the differential checks against vLLM's own functions are in
integrations/vllm/tests/test_sim_workload_vs_vllm.py."""

from __future__ import annotations

import glob
import itertools
import json
import math
import os
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kvcore_cli_support import run_cli as _run  # noqa: E402
from kvcore_cli_support import run_json as _json
from kvcore_cli_support import run_json as _t3_json

from kvcore.cli import main as cli_main
from kvcore.errors import ConfigError
from kvcore.sim.workload import (
    arrival_times,
    check_ramp_up,
    parse_range_ratio,
    random_dataset,
)

SMALL = ["--gpu", "H100", "--dataset", "random"]
BASE = ["simulate", "llama-3.1-8b", *SMALL, "--num-prompts", "6", "--random-input-len",
        "64", "--random-output-len", "8"]
METRICS = ("ttft", "tpot", "itl", "e2el")


def _one_line_error(code: int, out: str, err: str, word: str) -> None:
    assert code == 2, out[:300]
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert word in lines[0] or word.replace("_", "-") in lines[0], err


# ---- 9: --percentile-metrics ----------------------------------------------------------

def test_f9_percentile_metrics_flag_as_vllm(capsys: Any) -> None:
    """(Tester 2, finding 9.)  vllm/benchmarks/serve.py:1800 ``--percentile-metrics``
    was refused ("unrecognized arguments")."""
    fig = _json(capsys, [*BASE, "--percentile-metrics", "ttft,e2el", "--metric-percentiles",
                         "50,90"])
    assert "p90_ttft_ms" in fig and "p90_e2el_ms" in fig


SUBSETS = [c for n in range(1, 5) for c in itertools.combinations(METRICS, n)]


@pytest.fixture(scope="module")
def everything() -> dict[str, Any]:
    import io
    from contextlib import redirect_stdout

    buf = io.StringIO()
    with redirect_stdout(buf):
        assert cli_main([*BASE, "--metric-percentiles", "25,50,99.9", "--json"]) == 0
    return json.loads(buf.getvalue())  # type: ignore[no-any-return]


@pytest.mark.parametrize("subset", SUBSETS, ids=[",".join(s) for s in SUBSETS])
def test_selected_metrics_only_as_process_one_metric(capsys: Any, everything: Any,
                                                     subset: tuple[str, ...]) -> None:
    """serve.py ``process_one_metric`` returns at once for a metric not in
    ``selected_percentile_metrics``: only the selected metrics get ``mean_`` /
    ``median_`` / ``std_`` / ``pNN_`` keys (p99.9 spelled ``p99.9``), with the values
    the run has anyway."""
    fig = _json(capsys, [*BASE, "--metric-percentiles", "25,50,99.9",
                         "--percentile-metrics", ",".join(subset)])
    for m in METRICS:
        keys = [f"mean_{m}_ms", f"median_{m}_ms", f"std_{m}_ms", f"p25_{m}_ms",
                f"p50_{m}_ms", f"p99.9_{m}_ms"]
        for k in keys:
            assert (k in fig) == (m in subset), k
            if m in subset:
                assert fig[k] == pytest.approx(everything[k], rel=1e-12), k
    for k in ("output_throughput", "duration", "completed", "request_throughput"):
        assert fig[k] == everything[k]


def test_text_summary_prints_only_the_selected_blocks(capsys: Any) -> None:
    code, out, _ = _run(capsys, [*BASE, "--percentile-metrics", "tpot"])
    assert code == 0
    assert "Mean TPOT (ms):" in out and "Time to First Token" not in out
    assert "Mean E2EL" not in out and "Mean ITL" not in out


@pytest.mark.parametrize("bad", ["ttft,foo", "", "TTFT", "client_queue", "ttft,,tpot",
                                 "e2el_including_queue"])
def test_bad_percentile_metrics_one_line(capsys: Any, bad: str) -> None:
    _one_line_error(*_run(capsys, [*BASE, "--percentile-metrics", bad]),
                    "percentile_metrics")


def _semaphore_starts(latencies: list[float], c: int) -> list[float]:
    """vLLM's client at --request-rate inf: every request arrives at 0 and waits for one
    of ``c`` semaphore slots, FIFO (serve.py limited_request_func), so request i >= c
    starts when the earliest running request finishes."""
    import heapq

    running: list[float] = []
    starts = []
    for lat in latencies:
        start = heapq.heappop(running) if len(running) >= c else 0.0
        starts.append(start)
        heapq.heappush(running, start + lat)
    return starts


@settings(max_examples=8, deadline=None)
@given(st.integers(2, 14), st.integers(1, 4), st.integers(0, 999))
def test_client_queue_time_is_the_semaphore_wait(n: int, c: int, seed: int) -> None:
    """--percentile-metrics client_queue_time / e2el_including_client_queue and
    --save-detailed queue_times as vLLM 0.32 defines them (serve.py:975-985,
    1296, 1318-1327): queue = start_time - arrival under --max-concurrency; e2el incl.
    queue = latency + queue (finite --request-rate only).  Expected starts follow the
    semaphore from the simulated latencies (tester 3, finding 7)."""
    import contextlib
    import io
    import tempfile

    from kvcore.sim.metrics import mean, percentile

    argv = ["simulate", "llama-3.1-8b", *SMALL, "--num-prompts", str(n),
            "--random-input-len", "48", "--random-output-len", "3", "--seed", str(seed),
            "--max-concurrency", str(c), "--percentile-metrics",
            "client_queue_time,e2el_including_client_queue,e2el", "--save-result",
            "--save-detailed", "--json"]
    with tempfile.TemporaryDirectory() as tmp:
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            assert cli_main([*argv, "--result-dir", tmp]) == 0
        d = json.loads(out.getvalue())
        saved = json.loads(Path(next(Path(tmp).glob("*.json"))).read_text())
    q = saved["queue_times"]
    exp = _semaphore_starts(saved["latencies"], c)
    assert q == pytest.approx(exp, abs=1e-6)
    assert sum(1 for x in q if x > 0) == max(0, n - c)
    assert d["mean_client_queue_time_ms"] == pytest.approx(1000 * mean(q))
    assert d["p99_client_queue_time_ms"] == pytest.approx(1000 * percentile(q, 99))
    # request rate inf: vLLM reports no e2el_including_client_queue (serve.py:1323)
    assert "mean_e2el_including_client_queue_ms" not in d
    assert "mean_e2el_ms" in d


def test_client_queue_metrics_need_max_concurrency_and_a_finite_rate(capsys: Any) -> None:
    """Without --max-concurrency vLLM reports neither (queue_times is None,
    serve.py:1318-1320); with it and a finite rate, e2el incl. queue = e2el + queue."""
    sel = ["--percentile-metrics", "e2el,client_queue_time,e2el_including_client_queue"]
    code, out, err = _run(capsys, [*BASE, *sel, "--json"])
    assert code == 0, err
    d = json.loads(out)
    assert not any("client_queue" in k for k in d)
    code, out, err = _run(capsys, [*BASE, *sel, "--max-concurrency", "2",
                                   "--request-rate", "50", "--json"])
    d = json.loads(out)
    assert d["mean_e2el_including_client_queue_ms"] == pytest.approx(
        d["mean_e2el_ms"] + d["mean_client_queue_time_ms"])
    code, out, err = _run(capsys, [*BASE, "--max-concurrency", "2", "--json"])
    assert not any("client_queue" in k for k in json.loads(out))  # not by default


# ---- 9: ramp-up -------------------------------------------------------------------------

def _vllm_rate(strategy: str, start: int, end: int, i: int, n: int) -> float:
    """serve.py ``_get_current_request_rate``, transcribed."""
    progress = i / max(n - 1, 1)
    if strategy == "linear":
        return start + (end - start) * progress
    return start * ((end / start) ** progress)


@settings(max_examples=60, deadline=None)
@given(st.sampled_from(["linear", "exponential"]), st.integers(1, 200),
       st.integers(0, 300), st.integers(1, 120), st.integers(0, 2**31))
def test_ramp_up_even_gaps_are_one_over_the_current_rate(strategy: str, start: int,
                                                         extra: int, n: int, seed: int
                                                         ) -> None:
    """With ``--burstiness inf`` serve.py's ``get_request`` waits ``1 / rate_i`` before
    request i, rate_i from ``_get_current_request_rate``, and (ramp-up set) does not
    rescale the cumulative delays."""
    end = start + extra
    t = arrival_times(n, math.inf, math.inf, seed, ramp_up_strategy=strategy,
                      ramp_up_start_rps=start, ramp_up_end_rps=end)
    acc, want = 0.0, []
    for i in range(n):
        acc += 1.0 / _vllm_rate(strategy, start, end, i, n)
        want.append(acc)
    assert t == pytest.approx(want, rel=1e-12)


@settings(max_examples=30, deadline=None)
@given(st.sampled_from(["linear", "exponential"]), st.integers(1, 50),
       st.integers(0, 100), st.integers(2, 80), st.integers(0, 2**31),
       st.floats(0.1, 8.0))
def test_ramp_up_gamma_gaps_follow_the_rate(strategy: str, start: int, extra: int, n: int,
                                            seed: int, burstiness: float) -> None:
    """Random gaps: numpy's global generator seeded with --seed draws one
    ``gamma(burstiness, 1 / (rate_i * burstiness))`` per request (serve.py), in order."""
    np = pytest.importorskip("numpy")
    end = start + extra
    t = arrival_times(n, math.inf, burstiness, seed, ramp_up_strategy=strategy,
                      ramp_up_start_rps=start, ramp_up_end_rps=end)
    np.random.seed(seed)
    acc, want = 0.0, []
    for i in range(n):
        acc += np.random.gamma(shape=burstiness,
                               scale=1.0 / (_vllm_rate(strategy, start, end, i, n)
                                            * burstiness))
        want.append(acc)
    assert t == pytest.approx(want, rel=1e-12)
    assert all(b >= a for a, b in zip(t, t[1:]))


# serve.py main's "Validate ramp-up arguments" (each a ValueError there)
RAMP_BAD = [
    (["--ramp-up-strategy", "linear", "--ramp-up-start-rps", "1", "--ramp-up-end-rps", "5",
      "--request-rate", "3"], "request_rate"),
    (["--ramp-up-strategy", "linear", "--ramp-up-start-rps", "1"], "ramp_up_end_rps"),
    (["--ramp-up-strategy", "linear", "--ramp-up-end-rps", "4"], "ramp_up_start_rps"),
    (["--ramp-up-strategy", "linear", "--ramp-up-start-rps", "-1", "--ramp-up-end-rps",
      "4"], "ramp_up_start_rps"),
    (["--ramp-up-strategy", "linear", "--ramp-up-start-rps", "9", "--ramp-up-end-rps",
      "4"], "ramp_up_start_rps"),
    (["--ramp-up-strategy", "exponential", "--ramp-up-start-rps", "0",
      "--ramp-up-end-rps", "4"], "ramp_up_start_rps"),
    # get_request asserts every rate > 0: a linear ramp from 0 fails at request 0
    (["--ramp-up-strategy", "linear", "--ramp-up-start-rps", "0", "--ramp-up-end-rps",
      "4"], "ramp_up_start_rps"),
    (["--ramp-up-strategy", "quadratic", "--ramp-up-start-rps", "1", "--ramp-up-end-rps",
      "4"], "ramp-up-strategy"),
    (["--ramp-up-start-rps", "1", "--ramp-up-end-rps", "4"], "ramp_up_start_rps"),
    (["--ramp-up-strategy", "linear", "--ramp-up-start-rps", "1.5", "--ramp-up-end-rps",
      "4"], "ramp_up_start_rps"),
]


@pytest.mark.parametrize("flags,field", RAMP_BAD)
def test_ramp_up_refused_as_vllm(capsys: Any, flags: list[str], field: str) -> None:
    _one_line_error(*_run(capsys, [*BASE, *flags]), field)


def test_ramp_up_run_reports_and_names_its_file_as_vllm(capsys: Any, tmp_path: Path
                                                        ) -> None:
    """serve.py: ``result_json`` gains ``ramp_up_strategy`` / ``ramp_up_start_rps`` /
    ``ramp_up_end_rps``; the file is ``{label}-ramp-up-{strategy}-{start}qps-{end}qps
    [-concurrency{N}]-{model}-{date}.json``."""
    code, _, err = _run(capsys, [*BASE, "--ramp-up-strategy", "exponential",
                                 "--ramp-up-start-rps", "2", "--ramp-up-end-rps", "40",
                                 "--max-concurrency", "3", "--save-result", "--result-dir",
                                 str(tmp_path), "--label", "L"])
    assert code == 0, err
    (path,) = glob.glob(os.path.join(str(tmp_path), "*.json"))
    assert os.path.basename(path).startswith(
        "L-ramp-up-exponential-2qps-40qps-concurrency3-llama-3.1-8b-")
    with open(path) as f:
        d = json.load(f)
    assert (d["ramp_up_strategy"], d["ramp_up_start_rps"], d["ramp_up_end_rps"]) == \
        ("exponential", 2, 40)
    assert d["completed"] == 6


def test_ramp_up_check_api() -> None:
    check_ramp_up(None, None, None)
    check_ramp_up("linear", 0, 0 + 1)
    with pytest.raises(ConfigError) as e:
        check_ramp_up("exponential", 3, 2)
    assert e.value.extra["field"] == "ramp_up_start_rps"


# ---- 17: --random-range-ratio as vLLM's JSON dict ---------------------------------------

@pytest.mark.parametrize("rin,rout,seed", [(0.3, 0.5, 0), (0.0, 0.9, 1), (0.6, 0.0, 2)])
def test_f17_range_ratio_as_vllm_json_dict(capsys: Any, tmp_path: Path, rin: float,
                                           rout: float, seed: int) -> None:
    """(Tester 2, finding 17.)  vLLM 0.32 ``--random-range-ratio`` takes a float or a
    JSON dict ``'{"input": 0.3, "output": 0.5}'`` (benchmarks/datasets/datasets.py
    ``_parse_range_ratio``; utils.py ``_resolve_range_ratios`` /
    ``get_sampling_params``); kvcore refused the dict."""
    inp, out, n = 256, 100, 40
    ratio = json.dumps({"input": rin, "output": rout})
    code, _, err = _run(capsys, ["simulate", "llama-3.1-8b", *SMALL, "--num-prompts", str(n),
                                 "--random-input-len", str(inp), "--random-output-len",
                                 str(out), "--random-range-ratio", ratio, "--seed",
                                 str(seed), "--save-result", "--save-detailed",
                                 "--result-dir", str(tmp_path)])
    assert code == 0, err
    (path,) = glob.glob(os.path.join(str(tmp_path), "*.json"))
    with open(path) as f:
        d = json.load(f)
    lo_o, hi_o = max(1, math.floor(out * (1 - rout))), math.ceil(out * (1 + rout))
    assert all(lo_o <= x <= hi_o for x in d["output_lens"])
    assert all(math.floor(inp * (1 - rin)) - 1 <= x <= math.ceil(inp * (1 + rin)) + 1
               for x in d["input_lens"])
    if rout != rin:  # independent ratios: some length leaves the other ratio's band
        wider, narrower = (rout, rin) if rout > rin else (rin, rout)
        lens, base = (d["output_lens"], out) if rout > rin else (d["input_lens"], inp)
        band = (math.floor(base * (1 - narrower)), math.ceil(base * (1 + narrower)))
        assert any(not band[0] <= x <= band[1] for x in lens), (wider, lens)


@settings(max_examples=50, deadline=None)
@given(st.integers(1, 3000), st.integers(0, 500), st.floats(0, 0.99), st.floats(0, 0.99),
       st.integers(0, 2**31), st.integers(1, 50), st.integers(0, 64))
def test_dict_lengths_are_numpys_draws_with_each_ratio(i: int, o: int, r_in: float,
                                                       r_out: float, seed: int, n: int,
                                                       prefix: int) -> None:
    """get_sampling_params (utils.py), transcribed: inputs ``rng.integers(floor(i (1 -
    r_in)), ceil(i (1 + r_in)) + 1, n)``, then outputs with r_out and low >= 1."""
    np = pytest.importorskip("numpy")
    if prefix + math.floor(i * (1 - r_in)) < 1:
        with pytest.raises(ConfigError):
            random_dataset(n, i, o, prefix, {"input": r_in, "output": r_out}, seed)
        return
    rng = np.random.default_rng(seed)
    ins = rng.integers(math.floor(i * (1 - r_in)), math.ceil(i * (1 + r_in)) + 1, size=n)
    outs = rng.integers(max(1, math.floor(o * (1 - r_out))),
                        max(1, math.ceil(o * (1 + r_out))) + 1, size=n)
    got = random_dataset(n, i, o, prefix, parse_range_ratio(
        json.dumps({"input": r_in, "output": r_out})), seed)
    assert [g.prompt_len - prefix for g in got] == ins.tolist()
    assert [g.output_len for g in got] == outs.tolist()
    if r_in == r_out:  # the dict with equal ratios is the float
        same = random_dataset(n, i, o, prefix, r_in, seed)
        assert [g.prompt_len for g in same] == [g.prompt_len for g in got]


@pytest.mark.parametrize("bad", ['{"input": 0.3}', '{"input": 0.3, "output": 1.0}',
                                 '{"input": -0.1, "output": 0.2}', '[0.1, 0.2]', "abc",
                                 "1.0", '{"input": "x", "output": 0.2}',
                                 '{"input": null, "output": 0.2}', '{"input": "nan", "output": 0.2}',
                                 '{"input": [0.1], "output": 0.2}', "nan"])
def test_bad_range_ratio_one_line(capsys: Any, bad: str) -> None:
    _one_line_error(*_run(capsys, [*BASE, "--random-range-ratio", bad]),
                    "random_range_ratio")
    with pytest.raises(ConfigError) as e:
        parse_range_ratio(bad)
    assert e.value.extra["field"] == "random_range_ratio"


@settings(max_examples=40, deadline=None)
@given(st.floats(0, 0.9), st.floats(0, 0.99), st.booleans(), st.booleans(),
       st.dictionaries(st.text(min_size=1, max_size=5).filter(
           lambda k: k not in ("input", "output")), st.integers(), max_size=2))
def test_dict_ratio_read_with_float_as_vllm(r_in: float, r_out: float, s_in: bool,
                                            s_out: bool, extra: dict[str, int]) -> None:
    """vLLM reads the dict with ``float(rr["input"]), float(rr["output"])``
    (benchmarks/datasets/utils.py _resolve_range_ratios): numeric strings are the numbers
    and keys besides input / output are ignored (tester 3, finding 8)."""
    given = {**extra, "input": repr(r_in) if s_in else r_in,
             "output": repr(r_out) if s_out else r_out}
    assert parse_range_ratio(json.dumps(given)) == {"input": r_in, "output": r_out}
    assert random_dataset(5, 64, 8, 0, given, 3) == random_dataset(
        5, 64, 8, 0, {"input": r_in, "output": r_out}, 3)


def test_tune_takes_the_dict_and_ramp_up(capsys: Any) -> None:
    """The same flags on kvcore tune (its workload is drawn as simulate draws it)."""
    argv = ["tune", "llama-3.1-8b", *SMALL, "--num-prompts", "8", "--random-input-len",
            "64", "--random-output-len", "8", "--max-model-len", "2048", "--tp", "1",
            "--max-num-seqs", "16", "--max-num-batched-tokens", "2048", "--kv-cache-dtype",
            "auto", "--backend", "serial", "--json"]
    for extra in (["--random-range-ratio", '{"input": 0.5, "output": 0.0}'],
                  ["--ramp-up-strategy", "linear", "--ramp-up-start-rps", "2",
                   "--ramp-up-end-rps", "30"]):
        code, out, err = _run(capsys, [*argv, *extra])
        assert code == 0, err + out
        assert json.loads(out)["best"]["figures"]["request_throughput"] > 0
    code, out, err = _run(capsys, [*argv, "--random-range-ratio", '{"input": 2}'])
    assert code == 2 and "random_range_ratio" in err + out


def test_percentile_metrics_on_fleets_and_sweeps(capsys: Any) -> None:
    """The fleet path (--replicas) reports the same selection, and a sweep's table
    shows "-" for the metrics left out."""
    fleet = _json(capsys, [*BASE, "--replicas", "2", "--percentile-metrics", "e2el",
                           "--metric-percentiles", "90"])
    assert "p90_e2el_ms" in fleet and "mean_ttft_ms" not in fleet
    code, out, err = _run(capsys, [*BASE, "--replicas", "1,2", "--percentile-metrics",
                                   "e2el", "--backend", "serial"])
    assert code == 0, err
    rows = out.strip().splitlines()[1:]
    assert len(rows) == 2 and all(" - " in r for r in rows)


# ---- moved from tests/test_tester3_findings.py (tester 3's findings, fixed) -----------


T3_BASE = ["simulate", "llama-3.1-8b", "--gpu", "H100", "--dataset", "random",
           "--num-prompts", "8", "--random-input-len", "64", "--random-output-len", "4"]


# 7 ---------------------------------------------------------------------------------
@pytest.mark.parametrize("metrics", ["ttft,client_queue_time",
                                     "e2el,e2el_including_client_queue",
                                     "client_queue_time"])
def test_f7_percentile_metrics_client_queue(capsys: Any, metrics: str) -> None:
    """vLLM 0.32's --percentile-metrics allows "client_queue_time" and
    "e2el_including_client_queue" (benchmarks/serve.py:1800-1808) and, under
    --max-concurrency, reports mean/median/std/p99_client_queue_time_ms: the wait for
    the client's semaphore (output.start_time - request_arrival_time, serve.py:984,
    1319-1327, 1398-1410).  kvcore refuses them ('kvcore simulates no client-side
    queue'), though its engine models that very semaphore (SimRequest.sent vs the
    arrival).  A vLLM command line with them cannot be replayed."""
    d = _t3_json(capsys, [*T3_BASE, "--max-concurrency", "2", "--request-rate", "1000",
                       "--percentile-metrics", metrics])
    for m in metrics.split(","):
        assert f"mean_{m}_ms" in d
    if "client_queue_time" in metrics.split(","):
        # 8 requests, 2 slots: 6 of them wait for a slot, so the mean wait is > 0
        assert d["mean_client_queue_time_ms"] > 0


def test_f7b_save_detailed_has_queue_times(capsys: Any, tmp_path: Path) -> None:
    """vLLM's --save-detailed result carries "queue_times" (serve.py:1296) beside
    start_times / ttfts / latencies; kvcore's detailed result has start_times but no
    queue_times."""
    _t3_json(capsys, [*T3_BASE, "--max-concurrency", "2", "--save-result", "--save-detailed",
                   "--result-dir", str(tmp_path)])
    saved = json.loads(next(tmp_path.glob("*.json")).read_text())
    assert "queue_times" in saved and len(saved["queue_times"]) == 8
    assert sum(1 for q in saved["queue_times"] if q > 0) == 6


# 8 ---------------------------------------------------------------------------------
@pytest.mark.parametrize("ratio", ['{"input": "0.3", "output": 0.5}',
                                   '{"input": 0.3, "output": "0.25"}',
                                   '{"input": 0.3, "output": 0.5, "note": "x"}'])
def test_f8_range_ratio_dict_as_vllm_reads_it(capsys: Any, ratio: str) -> None:
    """vLLM reads the dict form with float(range_ratio["input"]) /
    float(range_ratio["output"]) (benchmarks/datasets/utils.py:27-29): numeric strings
    and extra keys are accepted.  kvcore refuses them ('input must be a number in
    [0, 1), got '0.3'' / 'must have exactly the keys')."""
    d = _t3_json(capsys, [*T3_BASE, "--random-range-ratio", ratio])
    assert d["completed"] == 8
