"""kvcore.sim.fastsim (``kvcore tune --fast``, ``python -m kvcore.sim.accuracy --fast``)
sends the traffic ``vllm bench serve`` sends and times it as vLLM does (third tester's
findings 1, 2 and 11, issue 21).

The rules, from vLLM 0.32's ``vllm/benchmarks/serve.py`` (paths relative to
site-packages/vllm/ of /work/main/.venv-vllm):

* ``get_request`` (serve.py:455-498): one ``np.random.gamma(shape=burstiness,
  scale=1 / (rate * burstiness))`` delay per request from numpy's global generator,
  seeded once with ``--seed`` (serve.py:2013); request 0 goes after the first delay; the
  cumulative delays are rescaled so the last send is at ``num_prompts / rate``;
  ``--burstiness inf`` gives constant gaps of ``1 / rate`` (serve.py:470-474).
* ``benchmark_duration`` runs from the benchmark's start (before the first delay is
  slept) to the last reply.
* Under ``--max-concurrency`` a request is sent at its arrival or, every slot taken,
  when a reply frees one (the semaphore), whatever the engine is doing then.

Expected values are vLLM's arithmetic written out, or kvcore.sim.engine (vLLM's
Scheduler over kvcore's KVCacheManager, checked against vLLM in
integrations/vllm/tests) on the same generated workloads: with a KV cache that never
preempts and no shared prefix both loops schedule the same steps, so the figures agree
to rounding (rel 1e-9, the tolerance of test_sim_engine's differential check).
"""

from __future__ import annotations

import math
from typing import Any

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from kvcore_sim_support import ServedTimeModel, small_plan

import kvcore
from kvcore.cli import main as cli_main
from kvcore.errors import KVCoreError
from kvcore.runtime import KVCacheManager
from kvcore.sim.engine import SimRequest, run_engine
from kvcore.sim.fastsim import Workload, run_workload
from kvcore.sim.metrics import serving_metrics
from kvcore.sim.timing import ConstantTimeModel
from kvcore.sim.workload import arrival_times, random_dataset, with_arrivals

np = pytest.importorskip("numpy")

SMALL = ["--gpu", "H100", "--dataset", "random"]


def _vllm_arrivals(n: int, rate: float, burst: float, seed: int) -> list[float]:
    """serve.py get_request's send times, written out (np.random.seed(seed) once)."""
    if math.isinf(burst):
        delays = [1.0 / rate] * n
    else:
        np.random.seed(seed)
        theta = 1.0 / (rate * burst)
        delays = [float(np.random.gamma(shape=burst, scale=theta)) for _ in range(n)]
    cum = list(np.cumsum(delays))
    return [float(c) * (n / rate) / float(cum[-1]) for c in cum]


# finding 1 ----------------------------------------------------------------------------
@pytest.mark.parametrize("fast", [True, False])
@pytest.mark.parametrize("rate", ["2", "50"])
def test_tune_takes_burstiness_inf(capsys: Any, fast: bool, rate: str) -> None:
    """vLLM's get_request (serve.py:470-474) takes burstiness inf (constant gaps of
    1 / rate), as kvcore simulate does; `kvcore tune --fast --burstiness inf` raised a
    raw ValueError from random.gammavariate (tester3 finding 1)."""
    argv = ["tune", "llama-3.1-8b", *SMALL, "--num-prompts", "6", "--random-input-len",
            "64", "--random-output-len", "4", "--max-model-len", "2048",
            "--max-num-seqs", "16", "--max-num-batched-tokens", "2048",
            "--request-rate", rate, "--burstiness", "inf", "--backend", "serial",
            "--json"]
    if fast:
        argv.append("--fast")
    code = cli_main(argv)
    err = capsys.readouterr().err
    assert code == 0, err[-400:]


# finding 2 ----------------------------------------------------------------------------
@settings(max_examples=40, deadline=None)
@given(st.integers(0, 2**31 - 1), st.integers(1, 60),
       st.sampled_from([0.1, 2.0, 3.0, 10.0, 123.4]),
       st.sampled_from([0.25, 0.5, 1.0, 4.0, math.inf]))
def test_fastsim_arrivals_are_vllms(seed: int, n: int, rate: float, burst: float) -> None:
    """fastsim.Workload.arrival_times are serve.py's get_request send times (request 0
    after the first gap, numpy's stream of --seed, the rescale to n / rate, burstiness
    inf: constant gaps) and the engine path's (kvcore.sim.workload.arrival_times)."""
    w = Workload(input_len=16, output_len=4, num_prompts=n, request_rate=rate,
                 burstiness=burst, seed=seed)
    got = w.arrival_times()
    assert got == pytest.approx(_vllm_arrivals(n, rate, burst, seed), rel=1e-9)
    assert got == arrival_times(n, rate, burst, seed)
    assert got[-1] == pytest.approx(n / rate, rel=1e-12)  # vLLM's rescale
    assert got[0] > 0  # request 0 waits its gap


@pytest.mark.parametrize("strategy,start,end", [("linear", 1, 10), ("exponential", 2, 50),
                                                ("linear", 3, 3)])
@pytest.mark.parametrize("burst", [1.0, math.inf])
def test_fastsim_ramp_up_is_the_engine_paths(strategy: str, start: int, end: int,
                                             burst: float) -> None:
    """With --ramp-up-strategy fastsim sends what the engine path sends."""
    w = Workload(16, 4, 9, burstiness=burst, seed=3, ramp_up_strategy=strategy,
                 ramp_up_start_rps=start, ramp_up_end_rps=end)
    assert w.arrival_times() == arrival_times(
        9, math.inf, burst, 3, ramp_up_strategy=strategy, ramp_up_start_rps=start,
        ramp_up_end_rps=end)


@pytest.mark.parametrize("kw,field", [
    (dict(request_rate=2.0, ramp_up_strategy="linear", ramp_up_start_rps=1,
          ramp_up_end_rps=5), "request_rate"),
    (dict(ramp_up_strategy="sideways", ramp_up_start_rps=1, ramp_up_end_rps=5),
     "ramp_up_strategy"),
    (dict(ramp_up_start_rps=1), "ramp_up_start_rps"),
    (dict(burstiness=math.nan), "burstiness"),
])
def test_fastsim_bad_ramp_up_names_the_field(kw: dict[str, Any], field: str) -> None:
    with pytest.raises(KVCoreError) as e:
        Workload(16, 4, 5, **kw)
    assert e.value.extra["field"] == field


# finding 11 ---------------------------------------------------------------------------
@pytest.mark.parametrize("first", [0.5, 1.0, 30.0])
def test_fastsim_duration_from_the_benchmark_start(first: float) -> None:
    """vLLM's benchmark_duration runs from the benchmark's start to the last reply
    (tester3 finding 11: fastsim subtracted the first send): two requests sent at
    `first` and `first` + 1 s, 4 steps of 10 ms each, alone: duration first + 1.04 s."""
    kv = kvcore.plan_model("llama-3.1-8b", num_gpu_blocks_override=400,
                           max_model_len=2048, max_num_batched_tokens=256)
    w = Workload(16, 4, 2, requests=((16, 4, first), (16, 4, first + 1.0)))
    fig = run_workload(ConstantTimeModel(0.01), kv, w, max_num_seqs=8,
                       max_num_batched_tokens=256)
    assert fig["duration"] == pytest.approx(first + 1.04, rel=1e-6)
    assert fig["output_throughput"] == pytest.approx(8 / (first + 1.04), rel=1e-6)


_cfg = small_plan


# the differential check (findings 2 + 11 + the semaphore's send times) -----------------
@settings(max_examples=25, deadline=None)
@given(st.integers(0, 10**6), st.integers(1, 24), st.integers(16, 400),
       st.integers(1, 16), st.sampled_from([None, 1, 3, 8]),
       st.sampled_from(["rate", "inf", "linear", "exponential"]),
       st.sampled_from([0.5, 1.0, 4.0, math.inf]),
       st.sampled_from([0.5, 4.0, 25.0, 200.0]), st.sampled_from([0.0, 0.013]),
       st.sampled_from([0.0, 0.004, 0.03]), st.sampled_from([0.0, 2e-4, 0.003]))
@example(seed=0, n=8, isl=293, osl=1, conc=None, mode="rate", burst=1.0, rate=200.0,
         share=0.0, api=0.004, stream=0.0)  # CI found it: a request that waited no
# longer jumped the ones the serial stage had passed but the engine had not yet taken in
def test_fastsim_figures_are_the_engines(seed: int, n: int, isl: int, osl: int,
                                         conc: int | None, mode: str, burst: float,
                                         rate: float, share: float, api: float,
                                         stream: float) -> None:
    """Generated rate-driven workloads (Poisson / gamma / constant gaps, ramp-ups, all
    at once; with and without --max-concurrency, an API server share, its serial
    stage and the way back's, ``api_stream_s``): fastsim's arrivals equal the engine
    path's and its figures equal the engine's (no preemption, no shared prefix: the
    same steps) to rel 1e-9."""
    tm = ServedTimeModel(0.01, 2e-5, share, api, stream)
    ramp: dict[str, Any] = {}
    r = math.inf
    if mode == "rate":
        r = rate
    elif mode != "inf":
        ramp = dict(ramp_up_strategy=mode, ramp_up_start_rps=1 + seed % 5,
                    ramp_up_end_rps=6 + seed % 40)
    w = Workload(isl, osl, n, max_concurrency=conc, request_rate=r, burstiness=burst,
                 seed=seed, **ramp)
    times = arrival_times(n, r, burst, seed, **ramp)
    assert w.arrival_times() == times
    cfg = _cfg()
    ref = run_workload(tm, cfg, w, max_num_seqs=64, max_num_batched_tokens=512,
                       kv_capacity_tokens=(cfg.num_blocks - 1) * 16)
    mgr = KVCacheManager(cfg, max_model_len=4096, max_num_batched_tokens=512,
                         check_invariants=False)
    reqs = with_arrivals(random_dataset(n, isl, osl, seed=seed), times)
    res = run_engine(mgr, [SimRequest(t) for t in reqs], tm, max_num_seqs=64,
                     max_num_batched_tokens=512, max_concurrency=conc)
    got = serving_metrics(res)
    assert res.preemptions == ref["preemptions"] == 0
    assert res.steps == ref["steps"]
    assert got["duration"] >= max(times)  # from the benchmark start
    for k in ("duration", "output_throughput", "request_throughput", "mean_ttft_ms",
              "median_ttft_ms", "p99_ttft_ms", "mean_tpot_ms", "p99_tpot_ms",
              "mean_itl_ms", "median_itl_ms", "mean_e2el_ms", "median_e2el_ms"):
        assert ref[k] == pytest.approx(got[k], rel=1e-9, abs=1e-9), k
