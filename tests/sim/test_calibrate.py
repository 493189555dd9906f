"""kvcore calibrate: the roofline clock fitted to vllm bench serve result files.

Expected values come from the result files (real ones: DO-Solutions/gtc-2026-doks's
vLLM 0.14.1 runs, tests/data/bench_results/do-solutions-phase0/SOURCE.md), from the
GPUs' datasheets (memory types) or from a known truth the results were generated with.
"""

from __future__ import annotations

import dataclasses
import json
import math
import random
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kvcore.cli import main as cli
from kvcore.errors import ConfigError
from kvcore.sim.calibrate import (
    CALIBRATION_GRID,
    bench_result_row,
    calibrate,
    load_efficiency,
    memory_term,
    read_bench_result,
    save_efficiency,
)
from kvcore.sim.timing import DEFAULT_EFFICIENCY, Efficiency

DO = Path(__file__).resolve().parents[1] / "data" / "bench_results" / "do-solutions-phase0"
LLAMA70_FP8 = str(Path(__file__).resolve().parents[1] / "data" / "sim_accuracy" / "configs"
                  / "llama-3.1-70b-instruct-fp8.derived.json")
#: the DO run's serve settings (its report.md)
DO_RUN = dict(model=LLAMA70_FP8, gpu="H200", kv_cache_dtype="fp8",
              max_model_len=131072, max_num_batched_tokens=8192,
              kv_cache_memory_gib=53.15, engine="vllm==0.14.1", dataset="sharegpt")


@pytest.mark.parametrize("gpu, term", [("H100", "memory_hbm3"), ("H200", "memory_hbm3"),
                                       ("A100-80GB", "memory"), ("L40S", "memory_gddr"),
                                       ("RTX-4090", "memory_gddr")])
def test_memory_term_is_the_gpus_memory_type(gpu, term):
    # datasheets: H100 SXM HBM3, H200 HBM3e, A100 HBM2e, L40S GDDR6, RTX 4090 GDDR6X
    assert memory_term(gpu) == term


def test_reads_a_real_vllm_result_file():
    res = read_bench_result(DO / "rate-1.0.json")
    row = bench_result_row(res, name="rate-1.0", **DO_RUN)
    # the file: 300 completed, 62,238 input and 59,105 output tokens, rate 1.0, no cap
    assert row["num_prompts"] == 300
    assert row["input_len"] == round(62238 / 300) == 207
    assert row["output_len"] == round(59105 / 300) == 197
    assert row["request_rate"] == 1.0 and row["max_concurrency"] is None
    assert "burstiness" not in row  # 1.0: vLLM's Poisson default
    assert row["measured"] == {"output_throughput": 194.3612005242148,
                               "ttft_ms": 56.49456050014123, "tpot_ms": 20.3782253333301}
    mean = bench_result_row(res, name="m", statistic="mean", **DO_RUN)
    assert mean["measured"]["ttft_ms"] == 56.646921779993136


def _generate(truth_file: Path, tmp: Path, runs: list[tuple[int, int]]) -> list[Path]:
    """vllm bench serve-format results of kvcore simulate under a known truth."""
    out = []
    for conc, isl in runs:
        name = f"c{conc}-i{isl}.json"
        rc = cli(["simulate", "llama-3.1-8b", "--gpu", "H100", "--dataset", "random",
                  "--random-input-len", str(isl), "--random-output-len", "48",
                  "--num-prompts", "24", "--max-concurrency", str(conc),
                  "--max-model-len", "4096", "--efficiency", str(truth_file),
                  "--save-result", "--result-dir", str(tmp), "--result-filename", name])
        assert rc == 0
        out.append(tmp / name)
    return out


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_recovers_the_truth_results_were_made_with(tmp_path, seed, capsys):
    rnd = random.Random(seed)
    truth = dataclasses.replace(
        DEFAULT_EFFICIENCY,
        request_overhead_s=rnd.choice(CALIBRATION_GRID["request_overhead_s"][:25]),
        memory_hbm3=rnd.choice(CALIBRATION_GRID["memory_hbm3"][4:]),
        compute=rnd.choice(CALIBRATION_GRID["compute"][2:]))
    save_efficiency(truth, tmp_path / "truth.json")
    files = _generate(tmp_path / "truth.json", tmp_path, [(1, 256), (16, 2048)])
    rows = [bench_result_row(read_bench_result(f), model="llama-3.1-8b", gpu="H100",
                             name=f.name, max_model_len=4096) for f in files]
    eff, before, after = calibrate(rows)
    assert after <= before
    from kvcore.sim.accuracy import evaluate

    for r in evaluate(rows, eff, sim="fast"):
        for m in ("output_throughput", "ttft_ms", "tpot_ms"):
            assert abs(r[m]["error"]) < 0.01, (seed, r["id"], m, r[m])
    # the TTFT floor is identified: at concurrency 1 it adds to every TTFT
    assert abs(eff.request_overhead_s - truth.request_overhead_s) <= 3e-3


def test_efficiency_file_moves_simulate_by_the_overhead(tmp_path, capsys):
    """At concurrency 1 the request overhead adds to every TTFT: a file with 0 s gives
    TTFTs exactly DEFAULT_EFFICIENCY.request_overhead_s (20 ms) shorter."""
    save_efficiency(dataclasses.replace(DEFAULT_EFFICIENCY, request_overhead_s=0.0),
                    tmp_path / "e.json")
    args = ["simulate", "llama-3.1-8b", "--gpu", "H100", "--dataset", "random",
            "--random-input-len", "128", "--random-output-len", "16", "--num-prompts", "6",
            "--max-concurrency", "1", "--max-model-len", "4096", "--json"]
    assert cli(args) == 0
    base = json.loads(capsys.readouterr().out)
    assert cli([*args, "--efficiency", str(tmp_path / "e.json")]) == 0
    cal = json.loads(capsys.readouterr().out)
    assert base["median_ttft_ms"] - cal["median_ttft_ms"] == pytest.approx(
        DEFAULT_EFFICIENCY.request_overhead_s * 1000, abs=1e-6)
    assert cal["median_tpot_ms"] == pytest.approx(base["median_tpot_ms"], rel=1e-9)


def test_efficiency_reaches_tune_candidates(tmp_path):
    from kvcore.sim.tune import simulate_once

    cand = {"model": "llama-3.1-8b", "gpu": "H100", "max_num_seqs": 64,
            "max_num_batched_tokens": 8192, "max_model_len": 4096, "sim": "fast",
            "workload": {"input_len": 128, "output_len": 16, "num_prompts": 6,
                         "max_concurrency": 1}}
    base = simulate_once(cand)["figures"]
    eff = dataclasses.asdict(dataclasses.replace(DEFAULT_EFFICIENCY, request_overhead_s=0))
    cal = simulate_once({**cand, "efficiency": eff})["figures"]
    assert base["median_ttft_ms"] - cal["median_ttft_ms"] == pytest.approx(20.0, abs=1e-6)
    bad = simulate_once({**cand, "efficiency": {"cmpute": 0.5}})
    assert "efficiency" in bad["error"] and "cmpute" in bad["error"]


def _one_line(capsys: Any, argv: list[str], *needles: str) -> None:
    assert cli(argv) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    assert "kvcore bug" not in err, err
    for n in needles:
        assert n in err, (n, err)


# ---- bad input ---------------------------------------------------------------------------

_GOOD = json.loads((DO / "rate-2.0.json").read_text())

#: per field, whether a value is valid (the oracle of the generated cases)
_VALID = {
    "completed": lambda v: isinstance(v, int) and not isinstance(v, bool) and 1 <= v,
    "total_input_tokens": None,  # >= completed, integral: checked below
    "total_output_tokens": None,
    "request_rate": lambda v: v == "inf" or (isinstance(v, (int, float)) and not
                                             isinstance(v, bool) and v > 0),
    "burstiness": lambda v: v is None or (isinstance(v, str) and v.strip().lower() in (
        "inf", "infinity")) or (
        isinstance(v, (int, float)) and not isinstance(v, bool) and v > 0 and v == v),
    "max_concurrency": lambda v: v is None or (isinstance(v, int) and not isinstance(v, bool)
                                               and v >= 1),
    "median_ttft_ms": lambda v: v is None or (isinstance(v, (int, float)) and not
                                              isinstance(v, bool) and math.isfinite(v)
                                              and v >= 0),
}
_VALUES = st.one_of(st.none(), st.booleans(), st.integers(-5, 400),
                    st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=4),
                    st.just("inf"), st.lists(st.integers(), max_size=2),
                    st.sampled_from([10**400, -(10**30), 1 << 62, 1.0, 300.0, 1e300]))


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(field=st.sampled_from(sorted(_VALID)), value=_VALUES)
def test_bad_result_fields_are_named(field, value):
    res = {**_GOOD, field: value}
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) >= 1 << 62:
        ok = False  # no finite float: refused, never an OverflowError
    elif field in ("total_input_tokens", "total_output_tokens"):
        ok = isinstance(value, int) and not isinstance(value, bool) and value >= 300
    elif field == "request_rate" and isinstance(value, float) and math.isinf(value):
        ok = value > 0
    elif field == "request_rate" and isinstance(value, float) and math.isnan(value):
        ok = False
    elif field == "request_rate" and isinstance(value, float):
        ok = value > 0
    elif field == "request_rate" and isinstance(value, str):
        ok = value.strip().lower() in ("inf", "infinity")  # vLLM writes "inf"
    else:
        ok = _VALID[field](value)
    if field == "completed" and ok and value > 62238:
        ok = False  # then the token totals are below one per request
    try:
        row = bench_result_row(res, model="llama-3.1-8b", gpu="H100", name="r.json")
    except ConfigError as exc:
        assert not ok, (field, value, exc)
        assert "r.json" in str(exc) or field in str(exc)
        assert exc.extra["field"] in (field, "total_input_tokens", "total_output_tokens",
                             "request_rate")
        return
    assert ok, (field, value, row)
    if field == "max_concurrency":
        assert row["max_concurrency"] == value
    if field == "median_ttft_ms":
        assert ("ttft_ms" in row["measured"]) == bool(value)


@pytest.mark.parametrize("text, why", [
    ("[]", "not the object"), ("{", "not valid JSON"), ("", "not valid JSON"),
    ('{"completed": 3}', "total_input_tokens"),
    (json.dumps({**_GOOD, "ramp_up_strategy": "linear"}), "ramp-up"),
    (json.dumps({k: v for k, v in _GOOD.items() if not k.endswith(("_ms", "throughput"))}),
     "quotes none of"),
])
def test_cli_bad_result_is_one_line_exit_2(tmp_path, capsys, text, why):
    f = tmp_path / "r.json"
    f.write_text(text)
    _one_line(capsys, ["calibrate", "llama-3.1-8b", str(f), "--gpu", "H100"], why)


@pytest.mark.parametrize("argv, why", [
    (["--terms", "memry"], "not a calibrated term"),
    (["--terms", ","], "non-empty"),
    (["--gpu", "H1000"], "H1000"),
    (["--kv-cache-memory", "-1GiB"], "kv_cache_memory"),
    (["--engine", "vllm==0.0.1"], "0.0.1"),
])
def test_cli_bad_flags_are_one_line_exit_2(capsys, argv, why):
    _one_line(capsys, ["calibrate", LLAMA70_FP8, str(DO / "rate-2.0.json"), "--gpu",
                       "H100", *argv], why)


def test_missing_and_directory_results(tmp_path, capsys):
    for path in (tmp_path / "nope.json", tmp_path):
        assert cli(["calibrate", "llama-3.1-8b", str(path), "--gpu", "H100"]) == 2
        err = capsys.readouterr().err
        assert str(path) in err and "Traceback" not in err


@settings(max_examples=40, deadline=None)
@given(st.fixed_dictionaries({
    "compute": st.sampled_from(CALIBRATION_GRID["compute"]),
    "memory_hbm3": st.sampled_from(CALIBRATION_GRID["memory_hbm3"]),
    "request_overhead_s": st.sampled_from(CALIBRATION_GRID["request_overhead_s"])}))
def test_efficiency_file_round_trip(tmp_path_factory, fields):
    eff = dataclasses.replace(DEFAULT_EFFICIENCY, **fields)
    p = tmp_path_factory.mktemp("e") / "e.json"
    save_efficiency(eff, p, note="x")
    assert load_efficiency(p) == eff
    p.write_text(json.dumps(fields))  # a plain object of fields: the rest default
    assert load_efficiency(p) == eff


@pytest.mark.parametrize("doc, field", [
    ({"cmpute": 0.5}, "cmpute"), ({"compute": 2}, "compute"), ({"compute": True}, "compute"),
    ({"request_overhead_s": -1}, "request_overhead_s"),
    ({"format": "other/9", "efficiency": {}}, "format"), ([0.5], "efficiency"),
    ({"format": "kvcore-efficiency/1", "efficiency": [1]}, "efficiency"),
])
def test_bad_efficiency_files_name_the_field(tmp_path, doc, field):
    p = tmp_path / "e.json"
    p.write_text(json.dumps(doc))
    with pytest.raises(ConfigError) as e:
        load_efficiency(p)
    assert field in str(e.value) and "e.json" in str(e.value)


def test_calibrate_arguments_are_checked():
    row = bench_result_row(_GOOD, model="llama-3.1-8b", gpu="H100")
    for kw, field in (({"terms": []}, "terms"), ({"terms": "memory"}, "terms"),
                      ({"terms": ["compute_fp8"]}, "terms"), ({"rounds": 0}, "rounds"),
                      ({"sim": "slow"}, "sim"), ({"start": {}}, "start")):
        with pytest.raises(ConfigError) as e:
            calibrate([row], **kw)
        assert e.value.extra["field"] == field
    with pytest.raises(ConfigError):
        calibrate([])
    for kw in ({"statistic": "p99"}, {"dataset": "sonnet"}):
        with pytest.raises(ConfigError):
            bench_result_row(_GOOD, model="llama-3.1-8b", gpu="H100", **kw)


def test_simulate_efficiency_needs_the_roofline(tmp_path, capsys):
    save_efficiency(DEFAULT_EFFICIENCY, tmp_path / "e.json")
    base = ["simulate", "llama-3.1-8b", "--dataset", "random", "--num-prompts", "4",
            "--efficiency", str(tmp_path / "e.json")]
    for extra in ([], ["--gpu", "H100", "--time-model", "constant"]):
        assert cli([*base, *extra]) == 2
        assert "--efficiency" in capsys.readouterr().err


def test_real_sweep_calibrated_on_one_rate_predicts_the_others():
    """DO-Solutions' vLLM 0.14.1 sweep on an H200: calibrated on its rate-1.0 run, the
    rate-2.0 and rate-3.0 runs' figures within the issue's goals (throughput 15 %, TTFT
    25 %, TPOT 15 %).  The thresholds were fixed before the first calibration ran."""
    from kvcore.sim.accuracy import evaluate

    rows = {r: bench_result_row(read_bench_result(DO / f"rate-{r}.json"), name=r, **DO_RUN)
            for r in ("1.0", "2.0", "3.0")}
    eff, before, after = calibrate([rows["1.0"]])
    assert isinstance(eff, Efficiency) and after <= before
    goal = {"output_throughput": 0.15, "ttft_ms": 0.25, "tpot_ms": 0.15}
    for r in evaluate([rows["2.0"], rows["3.0"]], eff, sim="fast"):
        for m, g in goal.items():
            assert abs(r[m]["error"]) <= g, (r["id"], m, r[m])


def test_burst_runs_and_grid_edges_warn(tmp_path, capsys):
    """A run with every request sent at once is a queue (its TTFT does not pin the
    overhead): a warning; so is a term that ends on its grid's edge."""
    burst = {**_GOOD, "request_rate": "inf", "max_concurrency": None, "completed": 40,
             "total_input_tokens": 40 * 200, "total_output_tokens": 40 * 20,
             "median_ttft_ms": 5000.0}
    f = tmp_path / "burst.json"
    f.write_text(json.dumps(burst))
    assert cli(["calibrate", "llama-3.1-8b", str(f), "--gpu", "H100",
                "--terms", "request_overhead_s"]) == 0
    err = capsys.readouterr().err
    assert "sent at once" in err
    assert "request_overhead_s ended on its grid's edge (0.08)" in err


@pytest.mark.parametrize("sim", ["fast", "engine"])
def test_save_detailed_lengths_replay_the_run_exactly(tmp_path, sim):
    """A --save-detailed result's per-request input and output lengths are replayed as
    the run had them: under the efficiency that made the file, its figures come back."""
    truth = dataclasses.replace(DEFAULT_EFFICIENCY, request_overhead_s=0.007)
    save_efficiency(truth, tmp_path / "t.json")
    assert cli(["simulate", "llama-3.1-8b", "--gpu", "H100", "--dataset", "random",
                "--random-input-len", "600", "--random-output-len", "40",
                "--random-range-ratio", "0.6", "--num-prompts", "30",
                "--max-concurrency", "6", "--max-model-len", "4096", "--efficiency",
                str(tmp_path / "t.json"), "--save-result", "--save-detailed",
                "--result-dir", str(tmp_path), "--result-filename", "d.json"]) == 0
    res = read_bench_result(tmp_path / "d.json")
    row = bench_result_row(res, model="llama-3.1-8b", gpu="H100", max_model_len=4096)
    assert row["input_lens"] == res["input_lens"] and row["output_lens"] == res["output_lens"]
    assert len(set(row["input_lens"])) > 5  # the lengths do vary
    from kvcore.sim.accuracy import simulate_row

    got = simulate_row(row, truth, sim=sim)
    for m in ("output_throughput", "ttft_ms", "tpot_ms"):
        assert got[m] == pytest.approx(row["measured"][m], rel=1e-6), m
    # the mean lengths alone do not: the per-request lengths matter here
    mean_row = {k: v for k, v in row.items() if k not in ("input_lens", "output_lens")}
    assert simulate_row(mean_row, truth, sim=sim)["ttft_ms"] != pytest.approx(
        row["measured"]["ttft_ms"], rel=1e-3)


def test_failed_requests_are_dropped_from_per_request_lengths():
    res = {**_GOOD, "completed": 3, "failed": 1, "total_input_tokens": 31,
           "total_output_tokens": 9, "input_lens": [10, 11, 12, 9],
           "output_lens": [3, 0, 4, 2], "errors": ["", "boom", "", ""]}
    row = bench_result_row(res, model="llama-3.1-8b", gpu="H100")
    assert row["input_lens"] == [10, 12, 9] and row["output_lens"] == [3, 4, 2]
    # lists that do not line up with the completed requests are not used
    with pytest.warns(UserWarning, match="not 3 per-request"):
        odd = bench_result_row({**res, "errors": None}, model="llama-3.1-8b", gpu="H100")
    assert "input_lens" not in odd and "output_lens" not in odd


def test_plan_sim_judge_takes_the_efficiency_file(tmp_path, capsys):
    save_efficiency(DEFAULT_EFFICIENCY, tmp_path / "e.json")
    # the analytic judge has no clock to calibrate
    assert cli(["plan", "llama-3.1-8b", "--gpu", "H100", "--efficiency",
                str(tmp_path / "e.json")]) == 2
    err = capsys.readouterr().err
    assert "--judge sim" in err and len(err.strip().splitlines()) == 1
    from kvcore.plan_serving import sim_judge

    judge = sim_judge("gemma-3-27b-it", gpu="H100", efficiency=DEFAULT_EFFICIENCY)
    assert "--efficiency coefficients" in judge.judged_by
    (tmp_path / "bad.json").write_text('{"compute": 0}')
    assert cli(["plan", "gemma-3-27b-it", "--gpu", "H100", "--judge", "sim",
                "--efficiency", str(tmp_path / "bad.json")]) == 2
    assert "compute" in capsys.readouterr().err


# ---- tester 13's findings ---------------------------------------------------------------

def _write(tmp_path: Path, name: str, obj: Any) -> Path:
    f = tmp_path / name
    f.write_text(obj if isinstance(obj, str) else json.dumps(obj))
    return f


SMALL = {**_GOOD, "completed": 20, "total_input_tokens": 20 * 256,
         "total_output_tokens": 20 * 32, "request_rate": "inf", "max_concurrency": 4,
         "model_id": "meta-llama/Llama-3.1-8B-Instruct"}


def test_t13_1_one_token_outputs_do_not_crash(tmp_path, capsys):
    f = _write(tmp_path, "r.json", {**SMALL, "total_output_tokens": 25})
    assert cli(["calibrate", "llama-3.1-8b", str(f), "--gpu", "H100",
                "--terms", "request_overhead_s"]) == 0


def test_t13_2_9_requests_vllm_would_reject_are_refused(tmp_path, capsys):
    f = _write(tmp_path, "r.json", SMALL)
    _one_line(capsys, ["calibrate", "llama-3.1-8b", str(f), "--gpu", "H100",
                       "--max-model-len", "100", "--sim", "engine"], "max_model_len 100")
    _one_line(capsys, ["calibrate", "llama-3.1-8b", str(f), "--gpu", "H100",
                       "--max-num-batched-tokens", "10"], "max_num_batched_tokens")


@pytest.mark.parametrize("doc", ["[" * 100000 + "]" * 100000, "{" * 5000])
def test_t13_4_deep_json_is_one_line(tmp_path, capsys, doc):
    f = _write(tmp_path, "deep.json", doc)
    _one_line(capsys, ["calibrate", "llama-3.1-8b", str(f), "--gpu", "H100"], "deep.json")
    _one_line(capsys, ["simulate", "llama-3.1-8b", "--gpu", "H100", "--dataset", "random",
                       "--num-prompts", "2", "--efficiency", str(f)], "deep.json")


@pytest.mark.parametrize("field", ["compute", "step_s", "compute_hbm3", "moe_memory_tokens"])
@pytest.mark.parametrize("value", [10**400, 1e-300, 1e300])
def test_t13_3_5_absurd_coefficients_are_refused(tmp_path, capsys, field, value):
    if field.endswith("_s") and value == 1e-300:
        return  # a tiny time is a valid time
    if field == "moe_memory_tokens" and value == 1e-300:
        return
    f = _write(tmp_path, "e.json", {field: value})
    with pytest.raises(ConfigError) as e:
        load_efficiency(f)
    assert e.value.extra["field"] == field


def test_t13_6_api_misuse_is_a_config_error(tmp_path):
    row = bench_result_row(SMALL, model="llama-3.1-8b", gpu="H100")
    bad_calls = [
        lambda: read_bench_result(5), lambda: read_bench_result(None),
        lambda: bench_result_row([1], model="llama-3.1-8b", gpu="H100"),
        lambda: bench_result_row(SMALL, model="llama-3.1-8b", gpu="H100", engine=5),
        lambda: bench_result_row(SMALL, model="llama-3.1-8b", gpu="H100",
                                 kv_cache_memory_gib=float("nan")),
        lambda: bench_result_row(SMALL, model="llama-3.1-8b", gpu="H100",
                                 kv_cache_memory_gib="20"),
        lambda: bench_result_row(SMALL, model=None, gpu="H100"),
        lambda: bench_result_row(SMALL, model="llama-3.1-8b", gpu="H100",
                                 tensor_parallel_size=1.5),
        lambda: calibrate([None]), lambda: calibrate([dict(row, measured={})]),
        lambda: calibrate([row], terms=[[]]), lambda: calibrate([row], log=5),
        lambda: save_efficiency(DEFAULT_EFFICIENCY, None),
        lambda: save_efficiency(DEFAULT_EFFICIENCY, tmp_path / "x", foo=object()),
        lambda: save_efficiency(DEFAULT_EFFICIENCY, tmp_path / "x", loss=float("nan")),
        lambda: save_efficiency(DEFAULT_EFFICIENCY, tmp_path / "x",
                                efficiency={"compute": 2}),
        lambda: load_efficiency(tmp_path / "x", base=None), lambda: load_efficiency(None),
    ]
    for i, call in enumerate(bad_calls):
        with pytest.raises(ConfigError):
            call()
        assert i >= 0


def test_t13_7_a_deployment_that_does_not_plan_is_refused(tmp_path, capsys):
    f = _write(tmp_path, "r.json", {**SMALL, "model_id": "openai/gpt-oss-120b"})
    _one_line(capsys, ["calibrate", "gpt-oss-120b", str(f), "--gpu", "L4"],
              "does not plan")


def test_t13_11_19_27_output_checked_first(tmp_path, capsys):
    f = _write(tmp_path, "r.json", SMALL)
    before = f.read_text()
    _one_line(capsys, ["calibrate", "llama-3.1-8b", str(f), "--gpu", "H100", "-o", str(f)],
              "RESULT files")
    assert f.read_text() == before
    _one_line(capsys, ["calibrate", "llama-3.1-8b", str(f), "--gpu", "H100", "-o", ""],
              "empty")
    _one_line(capsys, ["calibrate", "llama-3.1-8b", str(f), "--gpu", "H100", "-o",
                       str(tmp_path / "no" / "dir.json")], "existing folder")


def test_t13_14_a_memory_term_of_another_gpu_is_refused():
    row = bench_result_row(SMALL, model="llama-3.1-8b", gpu="H100")
    with pytest.raises(ConfigError, match="memory_hbm3"):
        calibrate([row], terms=["memory_gddr"])


def test_t13_15_fifo_does_not_hang(tmp_path, capsys):
    import os

    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    _one_line(capsys, ["calibrate", "llama-3.1-8b", str(fifo), "--gpu", "H100"],
              "not a regular file")
    _one_line(capsys, ["simulate", "llama-3.1-8b", "--gpu", "H100", "--dataset", "random",
                       "--num-prompts", "2", "--efficiency", str(fifo)], "not a regular file")


def test_t13_12_lengths_that_disagree_with_the_totals_are_not_replayed():
    res = {**SMALL, "input_lens": [256] * 20, "output_lens": [1000] * 20}
    with pytest.warns(UserWarning, match="output_lens sum to 20,000"):
        row = bench_result_row(res, model="llama-3.1-8b", gpu="H100")
    assert "output_lens" not in row and row["input_lens"] == [256] * 20
    with pytest.warns(UserWarning, match="not 20 per-request"):
        bench_result_row({**SMALL, "output_lens": [32] * 19}, model="llama-3.1-8b",
                         gpu="H100")


def test_t13_21_all_failed_says_so():
    with pytest.raises(ConfigError, match="no request completed"):
        bench_result_row({**SMALL, "completed": 0, "failed": 20}, model="llama-3.1-8b",
                         gpu="H100")


def test_t13_22_append_result_files_hold_one_run_a_line(tmp_path, capsys):
    from kvcore.sim.calibrate import read_bench_results

    lines = "\n".join(json.dumps({**SMALL, "max_concurrency": c}) for c in (1, 4)) + "\n"
    f = _write(tmp_path, "append.json", lines)
    runs = read_bench_results(f)
    assert [r["max_concurrency"] for r in runs] == [1, 4]
    with pytest.raises(ConfigError, match="2 runs"):
        read_bench_result(f)
    assert cli(["calibrate", "llama-3.1-8b", str(f), "--gpu", "H100", "--terms",
                "request_overhead_s", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert [r["result"] for r in out["runs"]] == [f"{f}#1", f"{f}#2"]


def test_t13_26_nested_fields_without_format_load(tmp_path):
    f = _write(tmp_path, "e.json", {"efficiency": {"compute": 0.7}})
    assert load_efficiency(f).compute == 0.7


def test_t13_25_a_file_of_another_deployment_warns(tmp_path, capsys):
    save_efficiency(DEFAULT_EFFICIENCY, tmp_path / "e.json", gpu="H100",
                    tensor_parallel_size=1)
    args = ["simulate", "llama-3.1-8b", "--dataset", "random", "--num-prompts", "2",
            "--random-input-len", "16", "--random-output-len", "2", "--max-model-len", "256",
            "--efficiency", str(tmp_path / "e.json")]
    assert cli([*args, "--gpu", "H100-SXM"]) == 0
    assert "calibrated on" not in capsys.readouterr().err
    assert cli([*args, "--gpu", "A100-80GB", "--tp", "2"]) == 0
    err = capsys.readouterr().err
    assert "calibrated on H100, used on A100-80GB" in err and "TP 1, used at TP 2" in err


# ---- new-user check (newuser13) ---------------------------------------------------------

def test_nu_output_never_the_model_config(tmp_path, capsys):
    import shutil

    cfg = tmp_path / "cfg.json"
    shutil.copy(LLAMA70_FP8, cfg)
    before = cfg.read_text()
    r = _write(tmp_path, "r.json", SMALL)
    _one_line(capsys, ["calibrate", str(cfg), str(r), "--gpu", "H200", "-o", str(cfg)],
              "MODEL's config")
    assert cfg.read_text() == before


def test_nu_a_result_of_another_model_warns(capsys):
    # the DO file's model_id is Llama-3.1-70B-Instruct-FP8
    assert cli(["calibrate", "llama-3.1-8b", str(DO / "rate-1.0.json"), "--gpu", "H200",
                "--terms", "request_overhead_s", "--json"]) == 0
    assert "is this the same model?" in capsys.readouterr().err


def test_nu_swapped_arguments_and_a_result_as_efficiency(capsys):
    _one_line(capsys, ["calibrate", str(DO / "rate-1.0.json"), "llama-3.1-8b", "--gpu",
                       "H100"], "not a model config", "usage")
    _one_line(capsys, ["simulate", "llama-3.1-8b", "--gpu", "H100", "--dataset", "random",
                       "--num-prompts", "2", "--efficiency", str(DO / "rate-1.0.json")],
              "is a vllm bench serve result", "kvcore calibrate")


def test_nu_missing_file_message_once(tmp_path, capsys):
    assert cli(["simulate", "llama-3.1-8b", "--gpu", "H100", "--dataset", "random",
                "--num-prompts", "2", "--efficiency", str(tmp_path / "nope.json")]) == 2
    err = capsys.readouterr().err
    assert err.count("give a JSON file") == 1 and "no such file" in err


def test_nu_no_median_tpot_warns(tmp_path, capsys):
    res = {k: v for k, v in json.loads((DO / "rate-1.0.json").read_text()).items()
           if k != "median_tpot_ms"}
    f = _write(tmp_path, "r.json", res)
    assert cli(["calibrate", LLAMA70_FP8, str(f), "--gpu", "H200", "--terms",
                "request_overhead_s", "--json"]) == 0
    assert "has no median_tpot_ms" in capsys.readouterr().err


def test_nu_model_of_another_file_warns_in_simulate(tmp_path, capsys):
    save_efficiency(DEFAULT_EFFICIENCY, tmp_path / "e.json", model="qwen3-8b", gpu="H100",
                    tensor_parallel_size=1)
    assert cli(["simulate", "llama-3.1-8b", "--gpu", "H100", "--dataset", "random",
                "--num-prompts", "2", "--random-input-len", "16", "--random-output-len",
                "2", "--max-model-len", "256", "--efficiency", str(tmp_path / "e.json")]) == 0
    assert "calibrated on qwen3-8b, used on llama-3.1-8b" in capsys.readouterr().err
