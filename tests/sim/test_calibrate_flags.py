"""kvcore calibrate's serve flags (``--gpu-memory-utilization``, ``--block-size``), the
``replayed as`` echo, the rate check of a result, and the GPU-name hint of the
clocked commands.

Expected values: vLLM 0.32's ``vllm serve`` defaults (EngineArgs: 8,192 batched tokens
and 1,024 sequences on a >= 70 GiB GPU that is not an A100, 2,048 and 256 below;
``--gpu-memory-utilization`` 0.9), vllm bench serve's arrival process (gaps from a
Gamma of shape ``--burstiness`` and mean 1 / rate) drawn here with numpy directly, and
the real result files of tests/data/bench_results/do-solutions-phase0.
"""

from __future__ import annotations

import json
import math
import warnings
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kvcore.cli import main as cli
from kvcore.errors import ConfigError
from kvcore.sim.calibrate import bench_result_row, read_bench_result

DATA = Path(__file__).resolve().parents[1] / "data"
DO = DATA / "bench_results" / "do-solutions-phase0"
LLAMA70_FP8 = str(DATA / "sim_accuracy" / "configs" / "llama-3.1-70b-instruct-fp8.derived.json")
DO_FLAGS = ["--gpu", "H200", "--kv-cache-dtype", "fp8", "--max-model-len", "131072",
            "--max-num-batched-tokens", "8192", "--dataset-name", "sharegpt",
            "--engine", "vllm==0.14.1"]


def _one_line(capsys: Any, argv: list[str], *needles: str) -> str:
    assert cli(argv) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    assert "kvcore bug" not in err, err
    for n in needles:
        assert n in err, (n, err)
    return err


def _small_run(tmp_path: Path, **over: Any) -> Path:
    """A short result of llama-3.1-8b (16 requests, 128 in / 32 out, concurrency 4)."""
    res = {"completed": 16, "total_input_tokens": 16 * 128, "total_output_tokens": 16 * 32,
           "request_rate": "inf", "max_concurrency": 4, "burstiness": 1.0,
           "output_throughput": 480.0, "median_ttft_ms": 40.0, "median_tpot_ms": 7.0}
    res.update(over)
    p = tmp_path / "run.json"
    p.write_text(json.dumps(res))
    return p


# ---- --gpu-memory-utilization reaches the GPU budget ------------------------------------

def test_gpu_memory_utilization_reaches_the_plan(capsys):
    # Llama-3.1-70B in FP8 is ~70 GB of weights: at 0.9 of an H200's 140.4 GiB it plans
    # (the DO run served it); at 0.4 (56 GiB) the weights alone do not fit, as vLLM
    # would fail to start
    base = ["calibrate", LLAMA70_FP8, str(DO / "rate-1.0.json"), *DO_FLAGS, "--rounds", "1",
            "--terms", "request_overhead_s"]
    _one_line(capsys, [*base, "--gpu-memory-utilization", "0.4"], "does not plan",
              "--gpu-memory-utilization")
    assert cli([*base, "--gpu-memory-utilization", "0.9"]) == 0
    out = capsys.readouterr().out
    assert "--gpu-memory-utilization 0.9 --engine vllm==0.14.1" in out


@pytest.mark.parametrize("value", ["0", "1.5", "-0.2", "nan", "inf", "x", ""])
def test_bad_gpu_memory_utilization_is_one_line(capsys, value, tmp_path):
    _one_line(capsys, ["calibrate", "llama-3.1-8b", str(_small_run(tmp_path)), "--gpu",
                       "H100", "--gpu-memory-utilization", value], "gpu-memory-utilization")


@settings(max_examples=40, deadline=None)
@given(st.one_of(st.none(), st.booleans(), st.integers(-3, 3), st.floats(allow_nan=True),
                 st.text(max_size=3)))
def test_api_gpu_memory_utilization_is_checked(value):
    res = read_bench_result(DO / "rate-1.0.json")
    ok = (value is None or (isinstance(value, (int, float)) and not isinstance(value, bool)
                            and 0 < value <= 1))
    kw = dict(model=LLAMA70_FP8, gpu="H200", kv_cache_dtype="fp8", max_model_len=131072)
    if ok:
        row = bench_result_row(res, gpu_memory_utilization=value, **kw)
        assert row.get("gpu_memory_utilization") == value
    else:
        with pytest.raises(ConfigError) as e:
            bench_result_row(res, gpu_memory_utilization=value, **kw)
        assert e.value.extra["field"] == "gpu_memory_utilization"


def test_kv_cache_memory_makes_the_utilization_unused(tmp_path, capsys):
    assert cli(["calibrate", "llama-3.1-8b", str(_small_run(tmp_path)), "--gpu", "H100",
                "--kv-cache-memory", "20GiB", "--gpu-memory-utilization", "0.5",
                "--rounds", "1", "--terms", "request_overhead_s"]) == 0
    out, err = capsys.readouterr()
    assert "--gpu-memory-utilization is unused with --kv-cache-memory" in err
    assert "--kv-cache-memory 20GiB" in out and "--gpu-memory-utilization" not in out


# ---- --block-size -----------------------------------------------------------------------

@pytest.mark.parametrize("block_size", [16, 32, 64])
def test_block_size_reaches_the_plan(block_size, tmp_path, monkeypatch):
    from kvcore.sim import accuracy

    res = read_bench_result(_small_run(tmp_path))
    row = bench_result_row(res, model="llama-3.1-8b", gpu="H100", max_model_len=8192,
                           block_size=block_size)
    assert row["block_size"] == block_size
    plans: list[Any] = []
    real = accuracy._plan

    def spy(*args: Any) -> Any:
        plans.append(real(*args))
        return plans[-1]

    monkeypatch.setattr(accuracy, "_plan", spy)
    accuracy.simulate_row(row, sim="fast")
    assert plans and all(g.spec.block_size == block_size
                         for kv in plans for g in kv.kv_cache_groups)


@pytest.mark.parametrize("value, why", [("0", "block_size"), ("24", "block_size"),
                                        ("-16", "block_size"), ("x", "block_size")])
def test_bad_block_size_is_one_line(capsys, tmp_path, value, why):
    # 24: vLLM 0.32's attention kernels take multiples of 16 (get_supported_kernel_block_sizes)
    _one_line(capsys, ["calibrate", "llama-3.1-8b", str(_small_run(tmp_path)), "--gpu",
                       "H100", "--block-size", value, "--rounds", "1"], why)


# ---- the replayed flags, vLLM's defaults resolved ---------------------------------------

@pytest.mark.parametrize("gpu, mnbt, mns", [("H100", 8192, 1024), ("H200", 8192, 1024),
                                            ("L4", 2048, 256), ("A100-80GB", 2048, 256)])
def test_replayed_as_resolves_vllms_defaults(tmp_path, capsys, gpu, mnbt, mns):
    assert cli(["calibrate", "llama-3.1-8b", str(_small_run(tmp_path)), "--gpu", gpu,
                "--max-model-len", "4096", "--rounds", "1", "--terms",
                "request_overhead_s"]) == 0
    out = capsys.readouterr().out
    line = next(ln for ln in out.splitlines() if "replayed as:" in ln)
    assert f"--max-num-batched-tokens {mnbt} --max-num-seqs {mns}" in line, line
    assert "--gpu-memory-utilization 0.9" in line and "--max-model-len 4096" in line
    assert "--enable-prefix-caching" in line


def test_replayed_as_is_in_json_and_names_the_catalog_gpu(tmp_path, capsys):
    # --gpu H100 is the SXM part in the catalog (kvcore gpus): the summary says so
    assert cli(["calibrate", "llama-3.1-8b", str(_small_run(tmp_path)), "--gpu", "H100",
                "--max-model-len", "4096", "--block-size", "32", "--no-enable-chunked-prefill",
                "--rounds", "1", "--terms", "request_overhead_s"]) == 0
    out = capsys.readouterr().out
    assert "on H100-SXM (TP 1)" in out
    # without chunked prefill vLLM 0.32 raises the batch to hold a whole prompt
    assert "--max-num-batched-tokens 8192" in out and "--block-size 32" in out
    assert "--no-enable-chunked-prefill" in out
    assert cli(["calibrate", "llama-3.1-8b", str(_small_run(tmp_path)), "--gpu", "L4",
                "--max-model-len", "4096", "--no-enable-chunked-prefill", "--json",
                "--rounds", "1", "--terms", "request_overhead_s"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert "--max-num-batched-tokens 4096" in doc["replayed_as"]  # max(2048, 4096)


# ---- a result's rate against its throughput ---------------------------------------------

def _rate_warnings(res: dict[str, Any]) -> list[str]:
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        bench_result_row(res, model="llama-3.1-8b", gpu="H100", name="r")
    return [str(x.message) for x in w if "request_throughput" in str(x.message)]


def test_real_results_do_not_warn():
    for rate in ("0.5", "1.0", "2.0", "3.0"):
        assert _rate_warnings(read_bench_result(DO / f"rate-{rate}.json")) == []


def test_a_rate_that_cannot_have_made_the_run_warns():
    # the rate-3.0 run completed 2.75 requests/s: a file saying rate 1.0 is not that run
    res = read_bench_result(DO / "rate-3.0.json")
    got = _rate_warnings({**res, "request_rate": 1.0})
    assert len(got) == 1 and "request_rate 1 req/s" in got[0]


@settings(max_examples=60, deadline=None)
@given(n=st.integers(2, 3000), rate=st.floats(0.05, 500),
       burst=st.sampled_from([0.25, 0.5, 1.0, 2.0, 4.0, math.inf]),
       seed=st.integers(0, 2**32 - 1), rescaled=st.booleans())
def test_no_false_alarm_on_vllms_own_arrivals(n, rate, burst, seed, rescaled):
    # what vllm bench serve does, drawn independently: gaps Gamma(burst, 1 / (rate *
    # burst)); recent versions rescale the sends to end at n / rate; the engine takes at
    # least 1 ms after the last send
    np = pytest.importorskip("numpy")
    if math.isinf(burst):
        sends = np.arange(n) / rate
    else:
        gaps = np.random.RandomState(seed).gamma(burst, 1 / (rate * burst), size=n)
        sends = np.concatenate([[0.0], np.cumsum(gaps[:-1])])
        if rescaled:
            sends = np.cumsum(gaps) * (n / rate) / gaps.sum()
    duration = float(sends[-1]) + 1e-3
    res = {"completed": n, "total_input_tokens": n * 64, "total_output_tokens": n * 8,
           "request_rate": rate, "burstiness": "inf" if math.isinf(burst) else burst,
           "request_throughput": n / duration, "output_throughput": 1.0}
    assert _rate_warnings(res) == []


@settings(max_examples=40, deadline=None)
@given(n=st.integers(100, 5000), rate=st.floats(0.1, 100), factor=st.floats(2.2, 50))
def test_a_throughput_far_above_the_rate_warns(n, rate, factor):
    # Poisson with b (n - 1) >= 99: the 4-sigma bound is below 1.8 x the rate
    res = {"completed": n, "total_input_tokens": n * 64, "total_output_tokens": n * 8,
           "request_rate": rate, "request_throughput": rate * factor,
           "output_throughput": 1.0}
    assert len(_rate_warnings(res)) == 1


# ---- the GPU hint: --gpu-memory only where the command has it -------------------------

@pytest.mark.parametrize("argv, has_hint", [
    (["plan", "llama-3.1-8b", "--gpu", "H900"], True),
    (["simulate", "llama-3.1-8b", "--gpu", "H900", "--dataset", "random",
      "--num-prompts", "2"], False),
    (["tune", "llama-3.1-8b", "--gpu", "H900", "--dataset", "random", "--num-prompts",
      "2"], False),
    (["calibrate", "llama-3.1-8b", str(DO / "rate-1.0.json"), "--gpu", "H900"], False),
])
def test_unknown_gpu_offers_only_flags_the_command_has(capsys, argv, has_hint):
    err = _one_line(capsys, argv, "unknown GPU 'H900'", "H100-SXM")
    assert ("--gpu-memory" in err) == has_hint, err
