"""The roofline step-time model and the GPU peak figures (issue 21 item 1).

Expected values come from vendor datasheets (H100: BF16 1,979 / FP8 3,958 TFLOPS with
sparsity, 3.35 TB/s, NVLink 900 GB/s), the models' published parameter counts
(Llama-3.1-8B: 8.03 B; Qwen3-30B-A3B: 30.5 B total, 3.3 B activated) and hand
calculations of the formulas in :class:`kvcore.sim.timing.RooflineTimeModel`.
"""

from __future__ import annotations

import dataclasses
from types import SimpleNamespace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kvcore.deploy.gpus import GPU_CATALOG, get_gpu
from kvcore.errors import ConfigError
from kvcore.sim.timing import (
    Batch,
    Efficiency,
    GroupIO,
    ScheduledRequest,
    load_time_model,
    roofline_for,
)
from kvcore.specs import FullAttentionSpec


def test_gpu_perf_figures():
    h100 = get_gpu("H100").perf
    assert h100.bf16_flops == pytest.approx(1979e12 / 2, rel=1e-3)
    assert h100.fp8_flops == pytest.approx(3958e12 / 2, rel=1e-3)
    assert h100.hbm_bytes_per_s == 3.35e12
    assert h100.interconnect_bytes_per_s == 900e9
    assert get_gpu("H200").perf.hbm_bytes_per_s == 4.8e12
    assert get_gpu("A100-80GB").perf.fp8_flops is None  # Ampere has no FP8 tensor cores
    assert get_gpu("B200").perf.fp4_flops == 9e15
    for g in GPU_CATALOG:
        assert g.perf is not None and g.perf.source
        assert g.to_dict()["perf"]["hbm_bytes_per_s"] == g.perf.hbm_bytes_per_s


def test_active_parameters():
    m = roofline_for("llama-3.1-8b", gpu="H100")
    embed = 128256 * 4096  # lookup only: no FLOPs
    assert (m.flops_per_token + m.lm_head_flops) / 2 + embed == pytest.approx(8.03e9,
                                                                              rel=0.005)
    q = roofline_for("qwen3-30b-a3b", gpu="H100")
    assert (q.num_experts, q.experts_per_token) == (128, 8)
    embed = 151936 * 2048
    assert (q.flops_per_token + q.lm_head_flops) / 2 + embed == pytest.approx(3.3e9,
                                                                              rel=0.05)


def _batch(tokens_per_req, ctx=0, layers=32, per_tok=131072 // 32):
    reqs = tuple(ScheduledRequest(t, ctx, ctx == 0) for t in tokens_per_req)
    read = sum(t + ctx for t in tokens_per_req) * per_tok * layers
    g = GroupIO(0, "full_attention", layers, read, 0, len(reqs))
    return Batch(reqs, (g,))


def test_decode_is_memory_bound_and_matches_the_formula():
    eff = Efficiency(compute=0.5, memory=0.8, roofline_p=100.0, step_s=0.0,
                     per_request_s=0.0, request_overhead_s=0.0)
    m = roofline_for("llama-3.1-8b", gpu="H100", efficiency=eff)
    b = _batch([1], ctx=1023)
    br = m.breakdown(b)
    assert br.memory_s > 10 * br.compute_s
    expect = (m.dense_weight_bytes + 1024 * 131072) / (3.35e12 * 0.8)
    assert br.total_s == pytest.approx(expect, rel=1e-9)


def test_tp_all_reduce_by_hand():
    eff = Efficiency(allreduce_latency_s=1e-5, step_s=0.0, per_request_s=0.0)
    m = roofline_for("llama-3.1-8b", gpu="H100", tensor_parallel_size=2, efficiency=eff)
    br = m.breakdown(_batch([100]))
    # 2 all-reduces per layer x 32 layers; ring: 2 (tp-1)/tp x bytes over one direction
    one = 2 * (1 / 2) * 100 * 4096 * 2 / 450e9 + 1e-5
    assert br.comm_s == pytest.approx(64 * one, rel=1e-9)
    m1 = roofline_for("llama-3.1-8b", gpu="H100")
    assert m.dense_weight_bytes == pytest.approx(m1.dense_weight_bytes / 2, rel=0.01)


@settings(max_examples=30, deadline=None)
@given(st.integers(1, 5000))
def test_moe_experts_touched(tokens):
    m = roofline_for("qwen3-30b-a3b", gpu="H100",
                     efficiency=Efficiency(moe_memory=1.0))
    br = m.breakdown(_batch([tokens], layers=48))
    expected_distinct = 128 * (1 - (1 - 8 / 128) ** tokens)
    assert br.weight_bytes == pytest.approx(
        m.dense_weight_bytes + m.expert_bytes * expected_distinct / 128, rel=1e-12)
    assert 8 - 1e-9 <= expected_distinct <= 128


def test_more_tokens_never_faster():
    m = roofline_for("llama-3.1-8b", gpu="H100")
    times = [m.step_time(_batch([n])) for n in (1, 16, 256, 4096, 16384)]
    assert times == sorted(times)


def test_fp8_weights_use_the_fp8_peak():
    m = roofline_for("qwen3-32b-fp8-static-kvfp8.aiconfigurator", gpu="H100")
    assert m.peak_flops == get_gpu("H100").perf.fp8_flops
    a = roofline_for("qwen3-32b-fp8-static-kvfp8.aiconfigurator", gpu="A100-80GB")
    assert a.peak_flops == get_gpu("A100-80GB").perf.bf16_flops


def test_load_time_model_and_bad_input():
    m = load_time_model("roofline", model_config="llama-3.1-8b", gpu="H100")
    assert m.step_time(_batch([1], ctx=10)) > 0
    with pytest.raises(ConfigError) as e:
        roofline_for("llama-3.1-8b", gpu="H100", warp_speed=9)
    assert e.value.extra["field"] == "warp_speed"
    with pytest.raises(ConfigError):
        roofline_for("llama-3.1-8b", gpu="TPU-v9")


def test_attention_flops_from_pairs():
    eff = Efficiency(compute=1.0)
    m = roofline_for("llama-3.1-8b", gpu="H100", efficiency=eff)
    spec = FullAttentionSpec(block_size=16, num_kv_heads=8, head_size=128)
    cfg = SimpleNamespace(kv_cache_groups=(SimpleNamespace(
        spec=spec, layer_names=tuple(f"l{i}" for i in range(32))),))
    from kvcore.sim.timing import describe_batch

    b = describe_batch(cfg, [ScheduledRequest(1000, 0, True)])
    flops = m.breakdown(b).flops
    pairs = 1000 * 1001 // 2 * 32
    attn = 2 * pairs * (128 + 128) * 32  # 32 query heads
    assert flops == pytest.approx(m.flops_per_token * 1000 + m.lm_head_flops + attn)
    assert dataclasses.replace(eff).compute == 1.0
