"""The API server as a serial stage (``api_server_s``) and the MoE compute term
(``moe_compute``): docs/SIM_ACCURACY.md, v6; tests/data/sim_accuracy/v6_protocol.md.

The expected values come from the rule as the protocol states it, computed here by an
independent recurrence: the engine sees request ``i`` (in send order) at
``seen_i = max(sent_i + request_overhead_s, seen_(i-1) + api_server_s)``.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kvcore_sim_support import ServedTimeModel, small_plan

import kvcore
from kvcore.errors import ConfigError
from kvcore.runtime import KVCacheManager
from kvcore.sim.engine import SimRequest, run_engine
from kvcore.sim.fleet import run_fleet
from kvcore.sim.metrics import serving_metrics
from kvcore.sim.timing import (
    DEFAULT_EFFICIENCY,
    Batch,
    ConstantTimeModel,
    Efficiency,
    ScheduledRequest,
    describe_batch,
    roofline_for,
)
from kvcore.sim.workload import random_dataset, with_arrivals

_Served = ServedTimeModel
_cfg = small_plan


def _seen(sent: list[float], over: float, api: float) -> list[float]:
    out: list[float] = []
    for s in sent:
        t = s + over
        if out and out[-1] + api > t:
            t = out[-1] + api
        out.append(t)
    return out


def _run(tm: Any, arrivals: list[float], isl: int = 32, osl: int = 2, **kw: Any) -> Any:
    cfg = _cfg()
    mgr = KVCacheManager(cfg, max_model_len=4096, max_num_batched_tokens=512)
    reqs = with_arrivals(random_dataset(len(arrivals), isl, osl, seed=1), arrivals)
    return run_engine(mgr, [SimRequest(t) for t in reqs], tm, max_num_seqs=256,
                      max_num_batched_tokens=512, keep_requests=True, **kw)


@settings(max_examples=40, deadline=None)
@given(st.lists(st.floats(0, 2, allow_nan=False), min_size=1, max_size=24),
       st.sampled_from([0.0, 0.01, 0.02]), st.floats(1e-4, 0.05))
def test_the_engine_sees_requests_as_the_serial_stage_hands_them_over(
        gaps: list[float], over: float, api: float) -> None:
    """Zero-time steps: each TTFT is exactly the request's wait for the engine,
    ``seen_i - sent_i`` from the recurrence, for generated arrivals."""
    arrivals = []
    t = 0.0
    for g in gaps:
        t += g
        arrivals.append(t)
    res = _run(_Served(0.0, 0.0, over, api), arrivals)
    want = _seen(arrivals, over, api)
    by_arrival = sorted(res.requests, key=lambda r: r.arrival)
    for r, seen in zip(by_arrival, want):
        assert r.sent == r.arrival
        assert r.sent + r.token_times[0] == pytest.approx(seen, abs=1e-9)
        assert r.api_wait == pytest.approx(seen - r.sent - over, abs=1e-9)


@pytest.mark.parametrize("n", [1, 2, 100])
def test_a_burst_reaches_the_engine_over_n_minus_one_services(n: int) -> None:
    """N requests at once, zero-time steps: the last is seen (and answered) at
    ``request_overhead_s + (N - 1) x api_server_s``, the benchmark's duration."""
    res = _run(_Served(0.0, 0.0, 0.02, 0.005), [0.0] * n)
    fig = serving_metrics(res)
    assert fig["duration"] == pytest.approx(0.02 + (n - 1) * 0.005, rel=1e-9)
    assert fig["mean_ttft_ms"] == pytest.approx(1000 * (0.02 + (n - 1) / 2 * 0.005),
                                                rel=1e-9)


def test_a_lone_request_only_waits_its_share() -> None:
    """Requests further apart than api_server_s are not delayed by the stage."""
    res = _run(_Served(0.01, 0.0, 0.02, 0.005), [0.0, 1.0, 2.0], osl=1)
    assert [round(r.token_times[0], 9) for r in res.requests] == [0.03, 0.03, 0.03]
    assert all(r.api_wait == 0.0 for r in res.requests)


def test_zero_reproduces_the_delay_model() -> None:
    """api_server_s = 0 is the v2 model: the same figures as a model without it."""
    a = serving_metrics(_run(ConstantTimeModel(0.01, 1e-5), [0.0] * 20,
                             request_overhead_s=0.02))
    b = serving_metrics(_run(_Served(0.01, 1e-5, 0.02, 0.0), [0.0] * 20))
    assert a == b


@settings(max_examples=15, deadline=None)
@given(st.integers(1, 30), st.sampled_from([None, 2, 8]), st.floats(1e-3, 0.03),
       st.integers(0, 10**6))
def test_a_one_replica_fleet_is_run_engine(n: int, conc: int | None, api: float,
                                           seed: int) -> None:
    """The stage sits in each replica, after the router: one replica's figures equal
    run_engine's (generated bursts, with and without a concurrency cap)."""
    tm = _Served(0.004, 2e-5, 0.01, api)
    cfg = _cfg()
    reqs = random_dataset(n, 64, 8, seed=seed)
    mgr = KVCacheManager(cfg, max_model_len=4096, max_num_batched_tokens=512)
    one = run_engine(mgr, [SimRequest(t) for t in reqs], tm, max_num_seqs=64,
                     max_num_batched_tokens=512, max_concurrency=conc)
    fl = run_fleet(cfg, [SimRequest(t) for t in reqs], tm, replicas=1, router="round-robin",
                   max_num_seqs=64, max_num_batched_tokens=512, max_concurrency=conc,
                   max_model_len=4096, keep_requests=True)
    a, b = serving_metrics(one), serving_metrics(fl.replicas[0])
    for k in ("duration", "mean_ttft_ms", "median_ttft_ms", "mean_tpot_ms", "mean_e2el_ms"):
        assert a[k] == pytest.approx(b[k], rel=1e-9, abs=1e-12), k


@pytest.mark.parametrize("bad", [-0.001, math.nan, math.inf, "1", True])
def test_bad_api_server_s_names_the_field(bad: Any) -> None:
    with pytest.raises(ConfigError, match="api_server_s") as e:
        _run(ConstantTimeModel(0.01), [0.0], api_server_s=bad)
    assert e.value.extra["field"] == "api_server_s"


@settings(max_examples=60, deadline=None)
@given(st.sampled_from([f.name for f in dataclasses.fields(Efficiency)]),
       st.sampled_from([-1.0, math.nan, math.inf, -math.inf, "0.5", None, True]))
def test_efficiency_refuses_a_bad_value_naming_the_field(name: str, bad: Any) -> None:
    with pytest.raises(ConfigError, match=name) as e:
        Efficiency(**{name: bad})
    assert e.value.extra["field"] == name


@pytest.mark.parametrize("name", [f.name for f in dataclasses.fields(Efficiency)
                                  if not f.name.endswith("_s")
                                  and f.name != "moe_memory_tokens"])
def test_an_efficiency_of_zero_is_refused(name: str) -> None:
    """Efficiencies divide: 0 would be a ZeroDivisionError deep in a step."""
    with pytest.raises(ConfigError, match=name):
        Efficiency(**{name: 0.0})


def test_moe_memory_tokens_zero_is_v2s_constant_discount() -> None:
    """moe_memory_tokens 0 is allowed (v2's form); a batch-1 decode (1 token per
    touched expert) is charged v2's discount for any N >= 1, and a large batch less."""
    kv = kvcore.plan_model("qwen3-30b-a3b", kv_cache_memory_bytes=8 << 30,
                           max_model_len=8192, max_num_batched_tokens=8192)
    base = dataclasses.replace(DEFAULT_EFFICIENCY, moe_memory=0.5, moe_memory_tokens=0.0)
    v2 = roofline_for("qwen3-30b-a3b", kv, gpu="H100", efficiency=base)
    one = describe_batch(kv, [ScheduledRequest(1, 100, False)])
    big = describe_batch(kv, [ScheduledRequest(1, 100, False)] * 256)
    for n in (1.0, 2.0, 16.0):
        am = roofline_for("qwen3-30b-a3b", kv, gpu="H100",
                          efficiency=dataclasses.replace(base, moe_memory_tokens=n))
        assert am.breakdown(one).memory_s == pytest.approx(v2.breakdown(one).memory_s,
                                                           rel=1e-12)
        assert am.breakdown(big).memory_s < v2.breakdown(big).memory_s
    with pytest.raises(ConfigError, match="moe_memory_tokens"):
        Efficiency(moe_memory_tokens=-1.0)


def test_moe_compute_slows_only_the_routed_experts_flops() -> None:
    """Qwen3-30B-A3B (48 layers, 128 experts, top-8, hidden 2048, moe_intermediate 768:
    its config.json): the routed experts' FLOPs per token are 2 x 48 x 8 x 3 x 2048 x
    768; at moe_compute m a compute-bound step's compute time grows by those FLOPs x
    (1 / m - 1) / (peak x compute), and a dense model does not change."""
    kv = kvcore.plan_model("qwen3-30b-a3b", kv_cache_memory_bytes=8 << 30,
                           max_model_len=8192, max_num_batched_tokens=8192)
    a = roofline_for("qwen3-30b-a3b", kv, gpu="H100", moe_compute=1.0)
    b = roofline_for("qwen3-30b-a3b", kv, gpu="H100", moe_compute=0.5)
    want = 2 * 48 * 8 * 3 * 2048 * 768
    assert a.expert_flops_per_token == pytest.approx(want, rel=1e-12)
    batch: Batch = describe_batch(kv, [ScheduledRequest(8192, 0, True)])
    da, db = a.breakdown(batch), b.breakdown(batch)
    extra = want * 8192 * (1 / 0.5 - 1) / (a.peak_flops * a.efficiency.compute)
    assert db.compute_s - da.compute_s == pytest.approx(extra, rel=1e-9)
    dense_kv = kvcore.plan_model("llama-3.1-8b", kv_cache_memory_bytes=8 << 30,
                                 max_model_len=8192, max_num_batched_tokens=8192)
    d1 = roofline_for("llama-3.1-8b", dense_kv, gpu="H100", moe_compute=1.0)
    d2 = roofline_for("llama-3.1-8b", dense_kv, gpu="H100", moe_compute=0.5)
    bd = describe_batch(dense_kv, [ScheduledRequest(8192, 0, True)])
    assert d1.expert_flops_per_token == 0.0
    assert d1.step_time(bd) == d2.step_time(bd)



@pytest.mark.parametrize("model, gpu, factor, moves", [
    ("llama-3.1-8b", "H100", "compute_fp8", False),   # bf16 GEMMs
    ("llama-3.1-8b", "H100", "compute_gddr", False),  # an HBM part
    ("llama-3.1-8b", "L40S", "compute_gddr", True),   # a GDDR part
    ("llama-3.1-8b", "L40S", "compute_fp8", False),
    ("llama-3.1-8b", "H100", "compute_hbm3", True),   # HBM3 parts (v11)
    ("llama-3.1-8b", "B200", "compute_hbm3", True),
    ("llama-3.1-8b", "A100-80GB", "compute_hbm3", False),  # HBM2e
    ("llama-3.1-8b", "H100-PCIe", "compute_hbm3", False),  # HBM2e
    ("llama-3.1-8b", "L40S", "compute_hbm3", False)])
def test_compute_factors_apply_where_they_say(model, gpu, factor, moves) -> None:
    """compute_fp8 scales the compute time of fp8 / fp4 GEMMs only, compute_gddr that of
    GDDR parts only, compute_hbm3 that of HBM3 / HBM3e parts only: a compute-bound
    prefill's compute_s is 1 / factor times longer there and the same elsewhere (v9,
    v11 protocols)."""
    kv = kvcore.plan_model(model, kv_cache_memory_bytes=8 << 30, max_model_len=8192,
                           max_num_batched_tokens=8192)
    a = roofline_for(model, kv, gpu=gpu)
    b = roofline_for(model, kv, gpu=gpu, **{factor: 0.5})
    batch = describe_batch(kv, [ScheduledRequest(8192, 0, True)])
    ca, cb = a.breakdown(batch).compute_s, b.breakdown(batch).compute_s
    assert cb == pytest.approx(2 * ca if moves else ca, rel=1e-12)


@pytest.mark.parametrize("compute, factor", [(0.5, 2.0), (0.5, 3.0), (0.8, 1.5), (1.0, 4.0)])
def test_compute_hbm3_is_capped_at_the_peak(compute, factor) -> None:
    """compute x compute_hbm3 above 1 runs at the datasheet peak, no faster: a prefill's
    compute_s is FLOPs / bf16 peak, as with compute 1.0 (v11 protocol)."""
    kv = kvcore.plan_model("llama-3.1-8b", kv_cache_memory_bytes=8 << 30,
                           max_model_len=8192, max_num_batched_tokens=8192)
    capped = roofline_for("llama-3.1-8b", kv, gpu="H100", compute=compute,
                          compute_hbm3=factor)
    peak = roofline_for("llama-3.1-8b", kv, gpu="H100", compute=1.0)
    batch = describe_batch(kv, [ScheduledRequest(8192, 0, True)])
    assert capped.breakdown(batch).compute_s == pytest.approx(
        peak.breakdown(batch).compute_s, rel=1e-12)
    assert peak.breakdown(batch).compute_s == pytest.approx(
        peak.breakdown(batch).flops / 989.4e12, rel=1e-12)  # H100 SXM dense bf16


def test_compute_fp8_applies_to_an_fp8_checkpoint() -> None:
    """An FP8 checkpoint (Llama-3.1-70B-Instruct-FP8, ModelOpt) runs its GEMMs in fp8 on
    H200: compute_fp8 0.5 doubles its prefill compute time; 1.0 is v8's model."""
    from pathlib import Path

    cfg = str(Path(__file__).resolve().parents[1] / "data" / "sim_accuracy" / "configs"
              / "llama-3.1-70b-instruct-fp8.derived.json")
    kv = kvcore.plan_model(cfg, kv_cache_memory_bytes=8 << 30, max_model_len=8192,
                           max_num_batched_tokens=8192)
    a = roofline_for(cfg, kv, gpu="H200")
    assert a.compute_dtype == "fp8"
    b = roofline_for(cfg, kv, gpu="H200", compute_fp8=0.5)
    batch = describe_batch(kv, [ScheduledRequest(8192, 0, True)])
    assert b.breakdown(batch).compute_s == pytest.approx(2 * a.breakdown(batch).compute_s,
                                                         rel=1e-12)
