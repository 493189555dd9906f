"""Findings of the second fresh-eyes adversarial tester (issue 21 surfaces), one test per
finding, each asserting the behaviour vLLM 0.32 (or physics) requires.  Every test
here FAILS on the branch it was written on (tester2 @ 7dfbb4d); see
/work/wt/TESTER2_FINDINGS.md for the commands, what happened and the guessed causes.
Findings 5, 6, 7, 9, 10, 11, 14 and 17 are fixed and their tests moved (branch
fixtune5): tests/sim/test_sim_modes.py (5, 6, 7), tests/sim/test_sim_bench_flags.py
(9, 17), tests/sim/test_tune.py (10, 11), tests/sim/test_plan_sim_judge.py (14).

Expected values come from vLLM 0.32's code (paths relative to
site-packages/vllm/ of /work/main/.venv-vllm) and from the definitions of the figures,
never from kvcore's own output.  Cases are generated (parametrised over models,
lengths, seeds, loads) and kept small (a few seconds of CPU each).
"""

from __future__ import annotations

import glob
import json
import os

import pytest

from kvcore.cli import main as cli_main

SMALL = ["--gpu", "H100", "--dataset", "random"]


def _run(capsys, argv):
    code = cli_main(argv)
    cap = capsys.readouterr()
    return code, cap.out, cap.err


def _json(capsys, argv):
    code, out, err = _run(capsys, [*argv, "--json"])
    assert code == 0, err + out
    return json.loads(out)


# Generated workloads: (model, extra flags, prompts, input len, output len, seed)
CASES = [
    ("llama-3.1-8b", [], 16, 256, 16, 0),
    ("llama-3.1-8b", ["--random-range-ratio", "0.5"], 12, 512, 32, 3),
    ("qwen2.5-7b", ["--max-model-len", "8192"], 10, 128, 8, 1),
    ("gpt-oss-20b", ["--max-model-len", "8192"], 8, 300, 12, 5),
    ("mistral-7b-v0.1", ["--max-model-len", "8192"], 6, 1024, 4, 2),
]


def _sim_argv(model, extra, n, inp, out, seed):
    return ["simulate", model, *SMALL, "--num-prompts", str(n), "--random-input-len",
            str(inp), "--random-output-len", str(out), "--seed", str(seed), *extra]


# ---- 1 ------------------------------------------------------------------------------

@pytest.mark.parametrize("case", CASES, ids=[c[0] + "-" + str(c[3]) for c in CASES])
def test_f1_duration_covers_every_request(capsys, case):
    """vllm/benchmarks/serve.py: ``benchmark_duration = time.perf_counter() -
    benchmark_start_time`` is taken after every request returned, so with every
    request sent at t = 0 (--request-rate inf, the default) each E2EL is <= duration,
    hence mean_e2el_ms and p99_e2el_ms <= 1000 x duration.  kvcore adds
    request_overhead_s (20 ms) to TTFT / E2EL but not to duration: duration 0.218 s
    with mean E2EL 237.9 ms for 16 x 256/16 on Llama-3.1-8B, and every throughput is
    divided by the too-short duration."""
    fig = _json(capsys, _sim_argv(*case))
    assert fig["completed"] > 0
    assert fig["p99_e2el_ms"] <= 1000 * fig["duration"] * (1 + 1e-9), \
        (fig["p99_e2el_ms"], fig["duration"])


# ---- 2 ------------------------------------------------------------------------------

@pytest.mark.parametrize("conc,model,inp,out", [(1, "llama-3.1-8b", 256, 16),
                                                (1, "qwen2.5-7b", 128, 32),
                                                (2, "llama-3.1-8b", 512, 8),
                                                (4, "llama-3.1-8b", 256, 16)])
def test_f2_closed_loop_duration_at_least_sum_of_latencies(capsys, conc, model, inp, out):
    """Closed loop (vllm bench serve --max-concurrency N, serve.py ``limited_request_func``
    holds a semaphore of N until the request's response is complete): at most N requests
    are outstanding, so duration >= sum(E2EL) / N.  kvcore releases the slot when the
    engine finishes, 20 ms (request_overhead_s) before the client would see the reply:
    --max-concurrency 1, 16 x 256/16: duration 2.314 s < 16 x 164.6 ms = 2.634 s, so
    output_throughput is overstated by 14 %."""
    n = 12
    fig = _json(capsys, ["simulate", model, *SMALL, "--num-prompts", str(n),
                         "--random-input-len", str(inp), "--random-output-len", str(out),
                         "--max-concurrency", str(conc)])
    assert fig["completed"] == n
    assert fig["duration"] * conc >= n * fig["mean_e2el_ms"] / 1000 * (1 - 1e-9), \
        (fig["duration"], fig["mean_e2el_ms"])


# ---- 3 ------------------------------------------------------------------------------

@pytest.mark.parametrize("rate", ["20", "inf"])
def test_f3_save_detailed_agrees_with_the_summary(capsys, tmp_path, rate):
    """vllm/benchmarks/serve.py: ``mean_ttft_ms = np.mean(ttfts) * 1000`` and
    ``mean_e2el_ms = np.mean(e2els) * 1000`` over the same outputs whose ``ttft`` /
    ``latency`` --save-detailed writes as ``ttfts`` / ``latencies``.  kvcore's detailed
    lists leave out the 20 ms request overhead the summary includes (mean_ttft_ms 33.0
    vs mean(ttfts) 13.0 ms)."""
    code, _, err = _run(capsys, ["simulate", "llama-3.1-8b", *SMALL, "--num-prompts", "6",
                                 "--random-input-len", "256", "--random-output-len", "16",
                                 "--random-range-ratio", "0.5", "--request-rate", rate,
                                 "--save-result", "--save-detailed", "--result-dir",
                                 str(tmp_path)])
    assert code == 0, err
    (path,) = glob.glob(os.path.join(str(tmp_path), "*.json"))
    with open(path) as f:
        d = json.load(f)
    ok = [i for i, n in enumerate(d["output_lens"]) if n]
    assert d["mean_ttft_ms"] == pytest.approx(
        1000 * sum(d["ttfts"][i] for i in ok) / len(ok), rel=1e-6)
    assert d["mean_e2el_ms"] == pytest.approx(
        1000 * sum(d["latencies"][i] for i in ok) / len(ok), rel=1e-6)


# ---- 4 ------------------------------------------------------------------------------

@pytest.mark.parametrize("router", ["round-robin", "least-loaded", "prefix-aware"])
@pytest.mark.parametrize("case", CASES[:3], ids=["llama", "llama-range", "qwen2.5"])
def test_f4_one_replica_fleet_equals_the_single_engine(capsys, router, case):
    """A fleet of one replica behind any router is the single engine: the same
    requests reach the same scheduler and step-time model.  kvcore's fleet path
    (kvcore/sim/fleet.py fleet_metrics -> serving_metrics without request_overhead_s)
    drops the 20 ms request overhead: --replicas 1 gives mean_ttft_ms 74.46 where the
    plain run gives 94.46."""
    argv = _sim_argv(*case)
    single = _json(capsys, argv)
    fleet = _json(capsys, [*argv, "--replicas", "1", "--router", router])
    for k in ("mean_ttft_ms", "median_ttft_ms", "mean_e2el_ms", "mean_tpot_ms",
              "output_throughput", "duration"):
        assert fleet[k] == pytest.approx(single[k], rel=1e-6), k


# ---- 8 ------------------------------------------------------------------------------

@pytest.mark.parametrize("new,computed", [(-100, 0), (-1, 50), (1, -10), (0, -1)])
def test_f8_scheduled_request_refuses_negative_tokens(new, computed):
    """House rule: bad input gets a KVCoreError naming the field.  A ScheduledRequest
    with negative num_new_tokens / num_computed_tokens is accepted by describe_batch and
    step_time returns a duration -- for qwen3-30b-a3b 1.52 ms, shorter than the empty
    step's 2.72 ms (negative bytes and FLOPs)."""
    import kvcore
    from kvcore.errors import KVCoreError
    from kvcore.sim.timing import ScheduledRequest, describe_batch, roofline_for

    kvc = kvcore.plan_model("qwen3-30b-a3b", kv_cache_memory_bytes=20 << 30,
                            max_model_len=32768)
    m = roofline_for("qwen3-30b-a3b", kvc, gpu="H100")
    field = "num_new_tokens" if new < 0 else "num_computed_tokens"
    with pytest.raises(KVCoreError, match=field):
        m.step_time(describe_batch(kvc, [ScheduledRequest(new, computed, True)]))


# ---- 12 -----------------------------------------------------------------------------

@pytest.mark.parametrize("gpu", [["--gpu", "H100"], ["--gpu", "A100-80GB"], []])
def test_f12_time_model_roofline_by_name(capsys, gpu):
    """``kvcore simulate --time-model NAME``: the error for an unknown name lists
    "known: constant, roofline", but ``--time-model roofline`` itself crashes with a
    traceback (TypeError: roofline_for() missing 1 required positional argument:
    'model_config'; kvcore/sim/command.py make_time_model -> timing.load_time_model
    calls the factory with no options), with or without --gpu.  With --gpu it must
    run (it is the default model there); without a GPU it must be one line, exit 2,
    naming --gpu."""
    argv = ["simulate", "llama-3.1-8b", "--dataset", "random", "--num-prompts", "4",
            "--random-input-len", "64", "--random-output-len", "4", "--max-model-len",
            "4096", *gpu]
    if not gpu:
        argv += ["--kv-cache-memory", "20GiB"]
    try:
        code, out, err = _run(capsys, [*argv, "--time-model", "roofline", "--json"])
    except TypeError as exc:  # the crash escapes main()
        pytest.fail(f"traceback: {exc!r}")
    if gpu:
        assert code == 0, err
        named, default = json.loads(out), _json(capsys, argv)
        for k in ("mean_ttft_ms", "mean_tpot_ms", "duration"):
            assert named[k] == pytest.approx(default[k], rel=1e-9), k
    else:
        assert code == 2 and "gpu" in (err + out)


def test_f12b_load_time_model_errors_are_config_errors():
    """The Python side of 12: load_time_model's docstring promises ConfigError; a
    missing or unknown option escapes as TypeError instead."""
    from kvcore.errors import KVCoreError
    from kvcore.sim.timing import load_time_model

    for name, kw in (("roofline", {}), ("constant", {"bogus": 1}),
                     ("roofline", {"model_config": "llama-3.1-8b"})):
        with pytest.raises(KVCoreError):
            load_time_model(name, **kw)


# ---- 13 -----------------------------------------------------------------------------

def test_f13_moe_prefill_that_reads_every_expert_matches_the_measurement(capsys):
    """tenstorrent/tt-inference-server#340 (Qwen3-30B-A3B, 1 x A100, vLLM benchmark_serving,
    random 128/128, concurrency 1; the row ``qwen3-30b-a3b-a100-80gb-128-128-c1`` of
    tests/data/sim_accuracy/measurements.json, split "fit", its TTFT not excluded):
    mean TTFT 35.7 ms.  A 128-token prefill routed top-8 of 128 experts touches
    128 x (1 - (120/128)**128) ~ all 128 experts of every layer, so the measurement says
    the ~57 GB of experts stream in < 36 ms (>= 1.6 TB/s, ~80 % of the A100's 2.04
    TB/s).  kvcore simulates 118.3 ms (+231 %, shown in docs/SIM_ACCURACY.md's own
    table): moe_memory 0.5 x memory 0.6 makes touched experts stream at 30 % of the
    bandwidth.  Fitted on batch-1 decodes (8 experts a layer), it charges any step
    that touches many experts ~3x: decode of 32 requests on H100 costs 55 ms a step,
    more than dense Gemma-3-27B's 37 ms with ~the same weight bytes and 8x the FLOPs.
    Goal of issue 21 for TTFT: within 25 %."""
    fig = _json(capsys, ["simulate", "qwen3-30b-a3b", "--gpu", "A100-80GB", "--dataset",
                         "random", "--num-prompts", "8", "--random-input-len", "128",
                         "--random-output-len", "128", "--max-concurrency", "1",
                         "--max-model-len", "40960"])
    assert fig["mean_ttft_ms"] == pytest.approx(35.7, rel=0.25)
    assert fig["mean_tpot_ms"] == pytest.approx(9.6, rel=0.15)  # holds today: 9.47


# ---- 15 -----------------------------------------------------------------------------

@pytest.mark.parametrize("rate", ["1e-12", "1e-14", "1e-16"])
def test_f15_latencies_do_not_depend_on_the_absolute_clock(capsys, rate):
    """At a very low --request-rate every request runs alone, exactly as under
    --max-concurrency 1: TTFT and TPOT must be those of the unloaded run (vLLM measures
    each as a difference of perf_counter readings taken around that request).  kvcore
    keeps absolute times in floats: arrivals ~16 / rate seconds lose the step times'
    low bits -- rate 1e-12: median TPOT 9.40 ms vs 9.005 unloaded; 1e-14: median TPOT
    0.0 ms and TTFT 20.0 ms (only the request overhead); 1e-16: TPOT 0.0, ITL 0.0,
    E2EL 20.0 ms.  (Tester 1's MemoryError at 1e-9 is fixed; this is the figures.)"""
    base = ["simulate", "llama-3.1-8b", *SMALL, "--num-prompts", "16",
            "--random-input-len", "256", "--random-output-len", "16"]
    unloaded = _json(capsys, [*base, "--max-concurrency", "1"])
    slow = _json(capsys, [*base, "--request-rate", rate])
    for k in ("median_ttft_ms", "median_tpot_ms", "mean_itl_ms", "mean_e2el_ms"):
        assert slow[k] == pytest.approx(unloaded[k], rel=1e-3), k


# ---- 16 -----------------------------------------------------------------------------

def _fleet_cases():
    import kvcore
    from kvcore.sim import backends, fleet
    from kvcore.sim.engine import SimRequest
    from kvcore.sim.timing import ConstantTimeModel
    from kvcore.sim.workload import random_dataset

    kvc = kvcore.plan_model("llama-3.1-8b", kv_cache_memory_bytes=4 << 30,
                            max_model_len=4096)
    reqs = [SimRequest(t, 0.0) for t in random_dataset(num_prompts=4, input_len=64,
                                                       output_len=4)]
    kw = {"replicas": 2, "max_num_seqs": 8, "max_num_batched_tokens": 2048}
    tm = ConstantTimeModel()
    return {
        "run_fleet router=object()": lambda: fleet.run_fleet(kvc, reqs, tm,
                                                             router=object(), **kw),
        "run_fleet requests=None": lambda: fleet.run_fleet(kvc, None, tm,
                                                           router="round-robin", **kw),
        "load_router unknown option": lambda: fleet.load_router("round-robin", bogus=1),
        "fleet_metrics(None)": lambda: fleet.fleet_metrics(None),
        "run_tasks fn=None": lambda: backends.run_tasks(None, [1, 2], backend="serial"),
        "run_tasks tasks=None": lambda: backends.run_tasks(abs, None, backend="serial"),
        "run_tasks unpicklable fn, local": lambda: backends.run_tasks(
            lambda x: x, [1, 2, 3], backend="local", workers=2),
    }


@pytest.mark.parametrize("case", list(_fleet_cases()))
def test_f16_fleet_and_backends_api_bad_input_is_a_kvcore_error(case):
    """House rule (COMMON.md): bad input gets a KVCoreError naming the field.
    kvcore.sim.fleet / kvcore.sim.backends let it escape as Python errors:
    run_fleet(router=object()) AttributeError 'route'; run_fleet(requests=None)
    TypeError; load_router("round-robin", bogus=1) TypeError; fleet_metrics(None)
    AttributeError (serving_metrics(None) was fixed after tester 1, its fleet twin was
    not); run_tasks(None, ...) / run_tasks(abs, None) TypeError; run_tasks(lambda,
    backend="local") "Can't pickle local object" (the process pool needs a picklable
    module-level function: say so, naming fn)."""
    from kvcore.errors import KVCoreError

    with pytest.raises(KVCoreError):
        _fleet_cases()[case]()


