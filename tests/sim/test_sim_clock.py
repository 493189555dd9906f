"""The simulated clock's two rules (tester 2's findings 1-4 and 15).

1. **The API server's share** (``request_overhead_s`` of the time model) is one thing on
   every path: the time between the client sending a request and the engine seeing it
   (the way back folded in).  So, as in ``vllm bench serve`` (vllm/benchmarks/serve.py:
   ``benchmark_duration`` is taken after every request returned; ``limited_request_func``
   holds its semaphore until the response is complete; ``calculate_metrics`` computes
   the summary from the same outputs ``--save-detailed`` writes):

   * every request's send + E2EL is within ``duration``;
   * under ``--max-concurrency N`` at most N requests are between their send and their
     reply at any instant (so duration >= sum(E2EL) / N);
   * the summary's means are the means of the per-request lists;
   * a fleet of one replica is the single engine, figure for figure;
   * differential: open loop, a share ``o`` gives the latencies of the run without it
     whose arrivals are ``o`` later, plus ``o``; closed loop at concurrency 1, each
     E2EL grows by ``o`` and the duration by ``n x o``.

2. **Times are exact at any absolute time**: a request alone in the engine gets the
   same latencies at t = 0 and at t = 1e15 s (vLLM takes each latency as a difference
   of perf_counter readings around that request).

Expected values come from those definitions, never from a run's own output; cases are
generated (seeded workloads, hypothesis over arrival offsets up to 1e15 s).
"""

from __future__ import annotations

import glob
import json
import os
import random
from dataclasses import dataclass

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import kvcore
from kvcore.cli import main as cli_main
from kvcore.runtime import KVCacheManager
from kvcore.sim.engine import SimRequest, run_engine
from kvcore.sim.fleet import run_fleet
from kvcore.sim.metrics import serving_metrics
from kvcore.sim.timing import ConstantTimeModel
from kvcore.sim.traces import TraceRequest

MML = 2048
ROUTERS = ["round-robin", "least-loaded", "prefix-aware"]


@dataclass(frozen=True)
class _Over(ConstantTimeModel):
    """A constant step time with an API server share, as the roofline carries one."""

    request_overhead_s: float = 0.02


def _cfg(mnbt: int = 128, num_blocks: int = 300):
    return kvcore.plan_model("llama-3.1-8b", num_gpu_blocks_override=num_blocks,
                             max_model_len=MML, max_num_batched_tokens=mnbt)


def _mgr(cfg, mnbt: int = 128) -> KVCacheManager:
    return KVCacheManager(cfg, max_model_len=MML, max_num_batched_tokens=mnbt)


def _workload(seed: int, n: int = 24, spread: float = 0.5):
    """(id, prompt, output, arrival s, prefix stream) rows, seeded."""
    rng = random.Random(seed)
    return [(f"r{i}", rng.randrange(16, 400), rng.randrange(1, 24),
             round(rng.uniform(0, spread), 4), rng.randrange(3)) for i in range(n)]


def _reqs(rows, shift: float = 0.0) -> list[SimRequest]:
    out = []
    for rid, p, o, a, s in rows:
        t = TraceRequest(rid, 0.0, p, o, 900 + len(rid), segments=[(7000 + s, 0, p)])
        out.append(SimRequest(t, a + shift))
    return out


def _run(rows, tm, *, conc=None, shift=0.0, mnbt=128, **kw):
    reqs = _reqs(rows, shift)
    res = run_engine(_mgr(_cfg(mnbt), mnbt), reqs, tm, max_num_seqs=8,
                     max_num_batched_tokens=mnbt, max_concurrency=conc, **kw)
    return res, reqs


CASES = [(seed, conc, over) for seed in range(4) for conc in (None, 1, 3)
         for over in (0.0, 0.013, 0.2)]


# ---- rule 1 on the Python API, seeded ---------------------------------------------------

@pytest.mark.parametrize("seed,conc,over", CASES)
def test_duration_covers_every_request_and_the_slots_hold_until_the_reply(seed, conc, over):
    tm = _Over(step_s=0.011, token_s=2e-5, request_overhead_s=over)
    res, reqs = _run(_workload(seed), tm, conc=conc)
    done = [r for r in reqs if r.finish >= 0]
    assert len(done) == len(reqs)
    for r in done:
        # send + E2EL is when the client has the reply: within the benchmark
        assert r.sent + r.latency <= res.duration * (1 + 1e-12)
        # the engine saw it `over` after the send, and a step ran before its token
        assert r.ttft >= over + tm.step_s - 1e-12
        assert r.latency == r.token_times[-1] and r.ttft == r.token_times[0]
        assert r.finish == pytest.approx(r.sent + r.latency, rel=1e-12)
    if conc is not None:  # vllm bench serve's semaphore: at most conc outstanding
        events = sorted([(r.sent, 1) for r in done]
                        + [(r.finish, -1) for r in done])  # the reply, absolute
        live = peak = 0
        for _, d in events:  # (a reply and a send at the same instant: reply first)
            live += d
            peak = max(peak, live)
        assert peak <= conc
        assert res.duration * conc >= sum(r.latency for r in done) * (1 - 1e-12)


@pytest.mark.parametrize("seed,conc,over", CASES[::2])
def test_summary_is_the_mean_of_the_per_request_lists(seed, conc, over):
    """vLLM's calculate_metrics: the means over the outputs --save-detailed writes."""
    res, reqs = _run(_workload(seed), _Over(0.007, 1e-5, over), conc=conc)
    m = serving_metrics(res)
    ttfts = [r.ttft for r in reqs]
    e2els = [r.latency for r in reqs]
    assert m["mean_ttft_ms"] == pytest.approx(1000 * sum(ttfts) / len(ttfts), rel=1e-12)
    assert m["mean_e2el_ms"] == pytest.approx(1000 * sum(e2els) / len(e2els), rel=1e-12)
    assert m["duration"] == res.duration


@pytest.mark.parametrize("router", ROUTERS)
@pytest.mark.parametrize("seed,conc,over", CASES[::3])
def test_one_replica_fleet_is_the_engine(seed, conc, over, router):
    tm = _Over(0.009, 3e-5, over)
    rows = _workload(seed)
    ref, a = _run(rows, tm, conc=conc)
    b = _reqs(rows)
    fl = run_fleet(_cfg(), b, tm, replicas=1, router=router, max_num_seqs=8,
                   max_num_batched_tokens=128, max_model_len=MML, max_concurrency=conc)
    for x, y in zip(a, b):
        assert (x.sent, x.token_times, x.num_cached_tokens) == \
            (y.sent, y.token_times, y.num_cached_tokens), x.request_id
    assert fl.duration == ref.duration


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("over", [0.004, 0.05])
def test_open_loop_share_is_a_later_arrival_plus_the_share(seed, over):
    """Differential: the engine sees a request sent at a with a share o exactly when it
    sees one sent at a + o without a share; its latencies are those plus o."""
    rows = _workload(seed, spread=0.3)
    _, with_share = _run(rows, _Over(0.01, 1e-5, over))
    _, later = _run(rows, _Over(0.01, 1e-5, 0.0), shift=over)
    for x, y in zip(with_share, later):
        assert x.ttft == pytest.approx(y.ttft + over, rel=1e-9, abs=1e-12)
        assert x.latency == pytest.approx(y.latency + over, rel=1e-9, abs=1e-12)
        assert x.itl == pytest.approx(y.itl, rel=1e-9, abs=1e-12)


@pytest.mark.parametrize("seed", range(3))
def test_closed_loop_one_slot_adds_the_share_per_request(seed):
    """--max-concurrency 1 with every request at t = 0: request i + 1 is sent when the
    client has reply i, so each E2EL is the engine's alone plus o and the run lasts
    n x o longer."""
    rows = [(rid, p, o, 0.0, s) for rid, p, o, _, s in _workload(seed, n=10)]
    over = 0.025
    res_o, a = _run(rows, _Over(0.01, 1e-5, over), conc=1)
    res_0, b = _run(rows, _Over(0.01, 1e-5, 0.0), conc=1)
    for x, y in zip(a, b):
        assert x.latency == pytest.approx(y.latency + over, rel=1e-9)
    assert res_o.duration == pytest.approx(res_0.duration + len(rows) * over, rel=1e-9)


def test_explicit_share_overrides_the_model_and_is_checked():
    from kvcore.errors import ConfigError

    rows = _workload(0, n=6)
    _, a = _run(rows, _Over(0.01, 0.0, 0.3), request_overhead_s=0.0)
    _, b = _run(rows, ConstantTimeModel(0.01, 0.0))
    assert [r.token_times for r in a] == [r.token_times for r in b]
    for bad in (-1.0, float("inf"), float("nan"), "0.1", True):
        with pytest.raises(ConfigError, match="request_overhead_s"):
            _run(rows, ConstantTimeModel(), request_overhead_s=bad)


# ---- rule 2: exact at any absolute time (hypothesis) -----------------------------------

OFFSETS = st.one_of(st.floats(0, 1e15, allow_nan=False), st.sampled_from([1e15, 2.0**49,
                                                                         1e12 + 0.1]))


@settings(max_examples=25, deadline=None)
@given(OFFSETS, st.integers(0, 3), st.sampled_from([0.0, 0.02]))
def test_a_request_alone_gets_the_unloaded_figures_at_any_time(offset, seed, over):
    """Requests far apart (each alone in the engine) at offset + k x 1e6 s: the same
    token times, to the bit, as each alone at t = 0."""
    # distinct prompts (no prefix hit from a request before: each is alone in every way)
    rows = [(rid, p, o, a, 100 + k) for k, (rid, p, o, a, _) in
            enumerate(_workload(seed, n=4))]
    tm = _Over(0.0123, 3.1e-5, over)
    alone = []
    for row in rows:
        _, (r,) = _run([(*row[:3], 0.0, row[4])], tm)
        alone.append(r.token_times)
    far = [(rid, p, o, offset + k * 1e6 * (1 + offset / 1e9), s)
           for k, (rid, p, o, _, s) in enumerate(rows)]
    res, got = _run(far, tm)
    assert [r.token_times for r in got] == alone
    assert all(r.finish >= r.sent for r in got)
    # and through a fleet (one replica and two)
    for n in (1, 2):
        b = _reqs(far)
        run_fleet(_cfg(), b, tm, replicas=n, router="round-robin", max_num_seqs=8,
                  max_num_batched_tokens=128, max_model_len=MML)
        assert [r.token_times for r in b] == alone


@settings(max_examples=15, deadline=None)
@given(OFFSETS, st.integers(0, 3))
def test_closed_loop_at_any_time_is_the_closed_loop_at_zero(offset, seed):
    """--max-concurrency 1, every request at `offset`: each runs alone, so its token
    times are those of the same run at t = 0."""
    rows = [(rid, p, o, 0.0, s) for rid, p, o, _, s in _workload(seed, n=5)]
    tm = _Over(0.0123, 3.1e-5, 0.02)
    _, ref = _run(rows, tm, conc=1)
    _, got = _run(rows, tm, conc=1, shift=offset)
    assert [r.token_times for r in got] == [r.token_times for r in ref]


# ---- the same rules through kvcore simulate (tester 2's cases) --------------------------

SMALL = ["--gpu", "H100", "--dataset", "random"]
CLI_CASES = [
    ("llama-3.1-8b", [], 16, 256, 16, 0),
    ("llama-3.1-8b", ["--random-range-ratio", "0.5"], 12, 512, 32, 3),
    ("qwen2.5-7b", ["--max-model-len", "8192"], 10, 128, 8, 1),
    ("gpt-oss-20b", ["--max-model-len", "8192"], 8, 300, 12, 5),
    ("mistral-7b-v0.1", ["--max-model-len", "8192"], 6, 1024, 4, 2),
]


def _cli(capsys, argv):
    code = cli_main(argv)
    cap = capsys.readouterr()
    return code, cap.out, cap.err


def _json(capsys, argv):
    code, out, err = _cli(capsys, [*argv, "--json"])
    assert code == 0, err + out
    return json.loads(out)


def _sim_argv(model, extra, n, inp, out, seed):
    return ["simulate", model, *SMALL, "--num-prompts", str(n), "--random-input-len",
            str(inp), "--random-output-len", str(out), "--seed", str(seed), *extra]


@pytest.mark.parametrize("case", CLI_CASES, ids=[c[0] + "-" + str(c[3]) for c in CLI_CASES])
def test_cli_duration_covers_every_request(capsys, case):
    """Every request sent at t = 0 (--request-rate inf): each E2EL <= duration (was:
    duration 0.218 s, mean E2EL 237.9 ms; the 20 ms share was in E2EL only)."""
    fig = _json(capsys, _sim_argv(*case))
    assert fig["completed"] > 0
    assert fig["p99_e2el_ms"] <= 1000 * fig["duration"] * (1 + 1e-9)


@pytest.mark.parametrize("conc,model,inp,out", [(1, "llama-3.1-8b", 256, 16),
                                                (1, "qwen2.5-7b", 128, 32),
                                                (2, "llama-3.1-8b", 512, 8),
                                                (4, "llama-3.1-8b", 256, 16)])
def test_cli_closed_loop_duration_at_least_sum_of_latencies(capsys, conc, model, inp, out):
    n = 12
    fig = _json(capsys, ["simulate", model, *SMALL, "--num-prompts", str(n),
                         "--random-input-len", str(inp), "--random-output-len", str(out),
                         "--max-concurrency", str(conc)])
    assert fig["completed"] == n
    assert fig["duration"] * conc >= n * fig["mean_e2el_ms"] / 1000 * (1 - 1e-9)


@pytest.mark.parametrize("rate", ["20", "inf"])
def test_cli_save_detailed_agrees_with_the_summary(capsys, tmp_path, rate):
    code, _, err = _cli(capsys, ["simulate", "llama-3.1-8b", *SMALL, "--num-prompts", "6",
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


@pytest.mark.parametrize("router", ROUTERS)
@pytest.mark.parametrize("case", CLI_CASES[:3], ids=["llama", "llama-range", "qwen2.5"])
def test_cli_one_replica_fleet_equals_the_single_engine(capsys, router, case):
    argv = _sim_argv(*case)
    single = _json(capsys, argv)
    fleet = _json(capsys, [*argv, "--replicas", "1", "--router", router])
    for k in ("mean_ttft_ms", "median_ttft_ms", "mean_e2el_ms", "mean_tpot_ms",
              "output_throughput", "duration"):
        assert fleet[k] == pytest.approx(single[k], rel=1e-12), k


@pytest.mark.parametrize("rate", ["1e-12", "1e-14", "1e-16"])
def test_cli_latencies_do_not_depend_on_the_absolute_clock(capsys, rate):
    """At a very low --request-rate every request runs alone, as under
    --max-concurrency 1 (was: rate 1e-14 gave median TPOT 0.0 ms)."""
    base = ["simulate", "llama-3.1-8b", *SMALL, "--num-prompts", "16",
            "--random-input-len", "256", "--random-output-len", "16"]
    unloaded = _json(capsys, [*base, "--max-concurrency", "1"])
    slow = _json(capsys, [*base, "--request-rate", rate])
    for k in ("median_ttft_ms", "median_tpot_ms", "mean_itl_ms", "mean_e2el_ms"):
        assert slow[k] == pytest.approx(unloaded[k], rel=1e-12), k


# ---- the token-level loop (kvcore.sim.fastsim: tune --sim fast) keeps both rules -------

def _fast(rows, over, shift=0.0, conc=None):
    from kvcore.sim.fastsim import Workload, run_workload

    w = Workload(1, 1, len(rows), max_concurrency=conc,
                 requests=tuple((p, o, a + shift) for _, p, o, a, _ in rows))
    return run_workload(_Over(0.0123, 3.1e-5, over), _cfg(), w, max_num_seqs=8,
                        max_num_batched_tokens=128)


@settings(max_examples=20, deadline=None)
@given(OFFSETS, st.integers(0, 3))
def test_fastsim_lone_requests_at_any_time(offset, seed):
    spaced = [(rid, p, o, k * 1e3, s) for k, (rid, p, o, _, s) in
              enumerate(_workload(seed, n=4))]
    far = [(rid, p, o, offset + k * 1e6 * (1 + offset / 1e9), s)
           for k, (rid, p, o, _, s) in enumerate(spaced)]
    a, b = _fast(spaced, 0.02), _fast(far, 0.02)
    for k in ("mean_ttft_ms", "median_tpot_ms", "mean_itl_ms", "mean_e2el_ms",
              "p99_ttft_ms"):
        assert b[k] == a[k], k


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("conc", [None, 1, 3])
def test_fastsim_duration_covers_the_share(seed, conc):
    """Same rules as the engine: E2EL within duration; one slot adds n x share."""
    rows = [(rid, p, o, 0.0, s) for rid, p, o, _, s in _workload(seed, n=8)]
    over = 0.03
    with_share, without = _fast(rows, over, conc=conc), _fast(rows, 0.0, conc=conc)
    for k in ("mean_e2el_ms", "median_e2el_ms"):  # (fastsim reports no max)
        assert with_share[k] <= 1000 * with_share["duration"] * (1 + 1e-12)
    assert with_share["mean_ttft_ms"] >= 1000 * over
    if conc is not None:
        assert with_share["duration"] * conc >= \
            len(rows) * with_share["mean_e2el_ms"] / 1000 * (1 - 1e-12)
    if conc == 1:
        assert with_share["duration"] == pytest.approx(without["duration"] + 8 * over,
                                                       rel=1e-9)
