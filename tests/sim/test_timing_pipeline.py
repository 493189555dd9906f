"""Pipeline parallelism in the roofline step time (tester1 finding 7, TESTER1.md).

vLLM v1 keeps ``max_concurrent_batches = pipeline_parallel_size`` batches in flight,
one per stage (vllm/config/vllm.py@0.32; vllm/v1/engine/core.py ``batch_queue``,
``step_with_batch_queue``); each stage holds 1 / pp of the layers.  So at large
concurrency (the KV read dominating the stage's extra weight bytes) a PP round serves
the same tokens no slower than PP 1's step on one GPU, and at one request the
pipeline cannot overlap (a request is in one batch at a time)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kvcore.cli import main
from kvcore.sim.timing import Batch, GroupIO, ScheduledRequest, roofline_for

PER_TOK = 131072 // 32  # Llama-3.1-8B: 128 KiB of bf16 KV per token over 32 layers


def _decode(nreq: int, ctx: int, layers: int = 32) -> Batch:
    reqs = tuple(ScheduledRequest(1, ctx, False) for _ in range(nreq))
    read = nreq * (ctx + 1) * PER_TOK * layers
    g = GroupIO(0, "full_attention", layers, read, nreq * PER_TOK * layers, nreq,
                nreq * (ctx + 1) * layers, 128, 128, 8)
    return Batch(reqs, (g,))


@settings(max_examples=40, deadline=None, derandomize=True)
@given(pp=st.sampled_from([2, 4]), gpu=st.sampled_from(["H100", "A100", "H200"]),
       per_stage=st.integers(16, 64), ctx=st.integers(1024, 16384))
def test_large_concurrency_round_not_slower_than_pp1(pp: int, gpu: str, per_stage: int,
                                                     ctx: int) -> None:
    one = roofline_for("llama-3.1-8b", gpu=gpu)
    many = roofline_for("llama-3.1-8b", gpu=gpu, pipeline_parallel_size=pp)
    b = _decode(per_stage * pp, ctx)
    assert many.batches_in_flight == pp
    assert many.step_time(b) <= one.step_time(b)


@settings(max_examples=20, deadline=None, derandomize=True)
@given(pp=st.sampled_from([2, 4, 8]), ctx=st.integers(16, 32768))
def test_one_request_gets_no_pipelining(pp: int, ctx: int) -> None:
    """One request is in one batch: its token passes pp stages in turn, each reading its
    1 / pp of the layers, so the step is at least PP 1's minus the CPU terms."""
    one = roofline_for("llama-3.1-8b", gpu="H100")
    many = roofline_for("llama-3.1-8b", gpu="H100", pipeline_parallel_size=pp)
    b = _decode(1, ctx)
    br1, brp = one.breakdown(b), many.breakdown(b)
    assert brp.total_s - brp.cpu_s >= (br1.total_s - br1.cpu_s) * 0.999


def test_pp2_is_not_slower_than_one_gpu(capsys: Any) -> None:
    """tester1 #7: Llama-3.1-8B on H100, 1024/128, concurrency 64, 96 prompts: PP 2
    (twice the GPUs, one batch per stage in flight) is not slower than PP 1."""
    figs = {}
    for pp in ("1", "2"):
        rc = main(["simulate", "llama-3.1-8b", "--gpu", "H100", "--dataset", "random",
                   "--random-input-len", "1024", "--random-output-len", "128",
                   "--num-prompts", "96", "--max-concurrency", "64", "--pp", pp, "--json"])
        out = capsys.readouterr()
        assert rc == 0, out.err
        figs[pp] = json.loads(out.out)["output_throughput"]
    assert figs["2"] >= figs["1"], figs


@pytest.mark.parametrize("pp", [1, 2, 4])
def test_batches_in_flight_is_pp(pp: int) -> None:
    assert roofline_for("llama-3.1-8b", gpu="H100",
                        pipeline_parallel_size=pp).batches_in_flight == pp
