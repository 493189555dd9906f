"""The way back as a serial stage (``api_stream_s``): tests/data/sim_accuracy/v8_protocol.md.

The rule, as the protocol states it: a step that ends at ``t`` with ``k`` requests
emitting tokens reaches the client at ``d = max(d_prev, t) + api_stream_s x k``; every
token of that step has time ``d``, a closed-loop slot frees at the last token's ``d``,
and the duration ends at the last ``d``.  The expected values are computed here by an
independent recurrence over the steps of the same run without the stage (in open loop
the stage cannot change the schedule: the engine never waits for the client).
"""

from __future__ import annotations

import bisect
import math
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kvcore_sim_support import ServedTimeModel, small_plan

from kvcore.errors import ConfigError
from kvcore.runtime import KVCacheManager
from kvcore.sim.engine import SimRequest, run_engine
from kvcore.sim.fleet import run_fleet
from kvcore.sim.metrics import serving_metrics
from kvcore.sim.timing import DEFAULT_EFFICIENCY, Efficiency, roofline_for
from kvcore.sim.workload import random_dataset, with_arrivals


def _run(tm: Any, arrivals: list[float], isl: int = 48, osl: int = 4, seed: int = 1,
         **kw: Any) -> Any:
    cfg = small_plan()
    mgr = KVCacheManager(cfg, max_model_len=4096, max_num_batched_tokens=512)
    reqs = with_arrivals(random_dataset(len(arrivals), isl, osl, seed=seed), arrivals)
    return run_engine(mgr, [SimRequest(t) for t in reqs], tm, max_num_seqs=256,
                      max_num_batched_tokens=512, keep_requests=True, **kw)


def _delivered(res: Any, c: float) -> dict[str, list[float]]:
    """The protocol's recurrence over the steps of ``res`` (a run without the stage):
    each request's token times (after its send) as the client gets them."""
    ends = res.step_end
    emit: dict[int, list[tuple[Any, int]]] = {}
    for r in res.requests:
        for j, off in enumerate(r.token_times):
            t = r.sent + off
            i = bisect.bisect_left(ends, t - 1e-9)
            assert abs(ends[i] - t) <= 1e-9 * max(1.0, abs(t))
            emit.setdefault(i, []).append((r, j))
    out = {r.request_id: [0.0] * len(r.token_times) for r in res.requests}
    d = -math.inf
    for i in sorted(emit):
        k = len({id(r) for r, _ in emit[i]})
        d = max(d, ends[i]) + c * k
        for r, j in emit[i]:
            out[r.request_id][j] = d - r.sent
    return out


@settings(max_examples=40, deadline=None)
@given(st.lists(st.floats(0, 0.2, allow_nan=False), min_size=1, max_size=24),
       st.integers(1, 400), st.integers(1, 12), st.sampled_from([1e-4, 2e-3, 0.02]),
       st.sampled_from([0.0, 0.01]), st.integers(0, 10**6))
def test_open_loop_token_times_follow_the_recurrence(gaps: list[float], isl: int,
                                                     osl: int, c: float, over: float,
                                                     seed: int) -> None:
    """Generated open-loop arrivals: every token time of the run with the stage is the
    recurrence's over the same run without it; the duration ends at the last ``d``."""
    arrivals, t = [], 0.0
    for g in gaps:
        t += g
        arrivals.append(t)
    base = _run(ServedTimeModel(0.004, 2e-5, over), arrivals, isl, osl, seed)
    want = _delivered(base, c)
    got = _run(ServedTimeModel(0.004, 2e-5, over, 0.0, c), arrivals, isl, osl, seed)
    assert got.steps == base.steps
    last = 0.0
    for r in got.requests:
        assert r.token_times == pytest.approx(want[r.request_id], rel=1e-12, abs=1e-12)
        last = max(last, r.sent + r.token_times[-1])
        assert r.finish == pytest.approx(r.sent + r.token_times[-1], rel=1e-12)
    assert serving_metrics(got)["duration"] == pytest.approx(last, rel=1e-12)


def test_zero_is_the_v7_model() -> None:
    """api_stream_s = 0 gives the figures of a model without the attribute."""
    arr = [0.01 * k for k in range(30)]
    a = serving_metrics(_run(ServedTimeModel(0.01, 1e-5, 0.02), arr))
    b = serving_metrics(_run(ServedTimeModel(0.01, 1e-5, 0.02, 0.0, 0.0), arr))
    assert a == b


@settings(max_examples=25, deadline=None)
@given(st.integers(2, 12), st.integers(1, 6), st.sampled_from([1e-3, 0.01]),
       st.integers(0, 10**6))
def test_a_closed_loop_sends_when_the_reply_is_through(n: int, osl: int, c: float,
                                                       seed: int) -> None:
    """--max-concurrency 1, all at t = 0: request i + 1 is sent when the client has
    request i's last token (its send plus its E2EL), not at the engine's step end."""
    res = _run(ServedTimeModel(0.005, 1e-5, 0.0, 0.0, c), [0.0] * n, osl=osl,
               seed=seed, max_concurrency=1)
    got = sorted(res.requests, key=lambda r: r.sent)
    for a, b in zip(got, got[1:]):
        assert b.sent == pytest.approx(a.sent + a.token_times[-1], rel=1e-12)
    # each request alone: every one of its osl chunks costs c after its step
    for r in got:
        assert r.token_times[0] >= 0.005 + c - 1e-12


@settings(max_examples=25, deadline=None)
@given(st.integers(20, 120), st.integers(2, 40), st.sampled_from([2e-3, 5e-3, 0.02]))
def test_the_way_back_bounds_the_throughput(n: int, osl: int, c: float) -> None:
    """A burst whose steps are faster than its chunks: the client gets at most 1 / c
    chunks (here tokens) per second, and the stage is busy from the first step to the
    end, so the duration is at least n x osl x c."""
    res = _run(ServedTimeModel(1e-4, 0.0, 0.0, 0.0, c), [0.0] * n, isl=16, osl=osl)
    fig = serving_metrics(res)
    assert fig["duration"] >= n * osl * c * (1 - 1e-12)
    assert fig["output_throughput"] <= (1.0 / c) * (1 + 1e-9)


@settings(max_examples=15, deadline=None)
@given(st.integers(1, 30), st.sampled_from([None, 2, 8]), st.floats(1e-4, 0.01),
       st.integers(0, 10**6))
def test_a_one_replica_fleet_is_run_engine(n: int, conc: int | None, c: float,
                                           seed: int) -> None:
    """The stage sits in each replica: one replica's figures equal run_engine's."""
    tm = ServedTimeModel(0.004, 2e-5, 0.01, 0.0, c)
    cfg = small_plan()
    reqs = random_dataset(n, 64, 8, seed=seed)
    mgr = KVCacheManager(cfg, max_model_len=4096, max_num_batched_tokens=512)
    one = run_engine(mgr, [SimRequest(t) for t in reqs], tm, max_num_seqs=64,
                     max_num_batched_tokens=512, max_concurrency=conc)
    fl = run_fleet(cfg, [SimRequest(t) for t in reqs], tm, replicas=1,
                   router="round-robin", max_num_seqs=64, max_num_batched_tokens=512,
                   max_concurrency=conc, max_model_len=4096, keep_requests=True)
    a, b = serving_metrics(one), serving_metrics(fl.replicas[0])
    for k in ("duration", "mean_ttft_ms", "median_ttft_ms", "mean_tpot_ms",
              "mean_e2el_ms", "output_throughput"):
        assert a[k] == pytest.approx(b[k], rel=1e-9, abs=1e-12), k


@settings(max_examples=20, deadline=None)
@given(st.one_of(st.floats(0, 1e15, allow_nan=False), st.sampled_from([1e15, 2.0**49])),
       st.integers(0, 3))
def test_a_request_alone_gets_the_same_times_at_any_time(offset: float,
                                                         seed: int) -> None:
    """Requests 1e6 s apart (each alone, the stage idle again) at ``offset``: the same
    token times, to the bit, as the first at t = 0."""
    tm = ServedTimeModel(0.0123, 3.1e-5, 0.02, 0.0, 7e-4)
    ref = _run(tm, [0.0], isl=100, osl=5, seed=seed)
    got = _run(tm, [offset + k * 1e6 * (1 + offset / 1e9) for k in range(3)], isl=100,
               osl=5, seed=seed)
    one = ref.requests[0].token_times
    for r in got.requests:
        assert len(r.token_times) == len(one)
    assert got.requests[0].token_times == one


@pytest.mark.parametrize("bad", [-1e-6, math.nan, math.inf, "1", True])
def test_a_bad_api_stream_s_names_the_field(bad: Any) -> None:
    """The one check (engine.resolve_request_overhead) on every path that reads it: the
    engine, a fleet, a time model's attribute through the fast loop, and Efficiency."""
    from kvcore.sim.fastsim import Workload, run_workload

    with pytest.raises(ConfigError, match="api_stream_s") as e:
        _run(ServedTimeModel(0.01), [0.0], api_stream_s=bad)
    assert e.value.extra["field"] == "api_stream_s"
    reqs = [SimRequest(t) for t in random_dataset(2, 16, 2, seed=0)]
    with pytest.raises(ConfigError, match="api_stream_s"):
        run_fleet(small_plan(), reqs, ServedTimeModel(0.01), replicas=2,
                  router="round-robin", max_num_seqs=8, max_num_batched_tokens=512,
                  max_model_len=4096, api_stream_s=bad)
    tm = ServedTimeModel(0.01)
    object.__setattr__(tm, "api_stream_s", bad)  # a plugin model with a bad attribute
    with pytest.raises(ConfigError, match="api_stream_s"):
        run_workload(tm, small_plan(), Workload(16, 2, 2), max_num_seqs=8,
                     max_num_batched_tokens=512)
    with pytest.raises(ConfigError, match="api_stream_s"):
        Efficiency(api_stream_s=bad)


def test_the_roofline_carries_the_term() -> None:
    """roofline_for passes Efficiency.api_stream_s to the simulators."""
    import dataclasses

    base = dataclasses.replace(DEFAULT_EFFICIENCY, api_server_s=0.0, api_stream_s=0.0)
    eff = dataclasses.replace(base, api_stream_s=1e-4)
    cfg = small_plan()
    from kvcore.models.config import load_model_config

    tm = roofline_for(load_model_config("llama-3.1-8b"), cfg, gpu="H100",
                      efficiency=eff)
    assert tm.api_stream_s == 1e-4
    assert roofline_for("llama-3.1-8b", cfg, gpu="H100").api_stream_s == \
        DEFAULT_EFFICIENCY.api_stream_s
    a = _run(tm, [0.0] * 16, isl=64, osl=8)
    b = _run(roofline_for(load_model_config("llama-3.1-8b"), cfg, gpu="H100",
                          efficiency=base), [0.0] * 16, isl=64, osl=8)
    fa, fb = serving_metrics(a), serving_metrics(b)
    # 16 prompts of 64 in a 512-token budget: step 1 prefills 8 (8 chunks: 0.8 ms);
    # step 2 decodes those 8 and prefills 7 plus 56 tokens of the 16th (15 chunks: 1.5
    # ms); step 3 finishes the 16th (16 chunks: 1.6 ms).  The stage keeps up with ~8 ms
    # steps, so TTFT grows by (8 x 0.8 + 7 x 1.5 + 1.6) / 16 = 1.15625 ms on average;
    # no backlog builds, so a token is never shifted by more than 1.6 ms and a TPOT
    # (over 7 gaps) moves by at most 1.6 / 7 ms
    assert fa["mean_ttft_ms"] - fb["mean_ttft_ms"] == pytest.approx(1.15625, abs=1e-6)
    assert abs(fa["mean_tpot_ms"] - fb["mean_tpot_ms"]) <= 1.6 / 7 + 1e-9
