"""``kvcore simulate --no-enable-chunked-prefill`` (vLLM's flag): whole prompts only, and
vLLM 0.32's default budget ``max(max_model_len, default)`` (EngineArgs
``_set_default_max_num_seqs_and_batched_tokens_args``; ``SchedulerConfig.
verify_max_model_len`` refuses a smaller explicit one).  The engine's schedule without
chunked prefill is checked step by step against vLLM's Scheduler in
integrations/vllm/tests/test_tester4_nochunk_vs_vllm.py."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from kvcore_cli_support import assert_clean_error, run_cli, run_json

import kvcore
from kvcore.runtime import KVCacheManager
from kvcore.sim.engine import SimRequest, run_engine
from kvcore.sim.metrics import serving_metrics
from kvcore.sim.timing import ConstantTimeModel
from kvcore.sim.workload import random_dataset

BASE = ["simulate", "llama-3.1-8b", "--dataset-name", "random", "--num-prompts", "24",
        "--random-input-len", "600", "--random-output-len", "8", "--kv-cache-memory",
        "4GiB", "--max-num-seqs", "16"]


def test_off_raises_the_default_budget_to_max_model_len(capsys: Any) -> None:
    on = run_json(capsys, [*BASE, "--max-model-len", "4096"])
    off = run_json(capsys, [*BASE, "--max-model-len", "4096",
                            "--no-enable-chunked-prefill"])
    assert on["enable_chunked_prefill"] is True and off["enable_chunked_prefill"] is False
    assert on["max_num_batched_tokens"] == 2048  # vLLM's default off a large GPU
    assert off["max_num_batched_tokens"] == 4096  # max(4096, 2048)
    big = run_json(capsys, [*BASE, "--max-model-len", "16384",
                            "--no-enable-chunked-prefill"])
    assert big["max_num_batched_tokens"] == 16384  # max(16384, 2048)
    small = run_json(capsys, [*BASE, "--max-model-len", "1024",
                              "--no-enable-chunked-prefill"])
    assert small["max_num_batched_tokens"] == 2048  # max(1024, 2048)


@pytest.mark.parametrize("mnbt", [1024, 2048])
def test_off_equals_the_engine_without_chunked_prefill(capsys: Any, mnbt: int) -> None:
    """The CLI's figures are run_engine(enable_chunked_prefill=False)'s on the same
    plan and workload (the placeholder time model: 10 ms a step)."""
    got = run_json(capsys, [*BASE, "--max-model-len", str(mnbt), "--max-num-batched-tokens",
                            str(mnbt), "--no-enable-chunked-prefill"])
    cfg = kvcore.plan_model("llama-3.1-8b", kv_cache_memory_bytes=4 << 30,
                            max_model_len=mnbt, max_num_batched_tokens=mnbt)
    mgr = KVCacheManager(cfg, max_model_len=mnbt, max_num_batched_tokens=mnbt)
    reqs = [SimRequest(t) for t in random_dataset(24, 600, 8, seed=0)]
    res = run_engine(mgr, reqs, ConstantTimeModel(0.01), max_num_seqs=16,
                     max_num_batched_tokens=mnbt, max_model_len=mnbt,
                     enable_chunked_prefill=False)
    want = serving_metrics(res)
    assert got["steps"] == res.steps
    for k in ("duration", "mean_ttft_ms", "mean_tpot_ms", "output_throughput"):
        assert got[k] == pytest.approx(want[k], rel=1e-9), k


def test_a_budget_below_max_model_len_is_refused(capsys: Any) -> None:
    rc, _, err = run_cli(capsys, [*BASE, "--max-model-len", "4096",
                                  "--max-num-batched-tokens", "2048",
                                  "--no-enable-chunked-prefill"])
    assert_clean_error(rc, err, "max-num-batched-tokens")


def test_the_replay_refuses_it(capsys: Any) -> None:
    trace = Path(__file__).parent / "data" / "mooncake_conversation_trace.jsonl.gz"
    rc, _, err = run_cli(capsys, ["simulate", "llama-3.1-8b", "--trace", str(trace),
                                  "--limit", "5", "--scheduler", "replay",
                                  "--no-enable-chunked-prefill"])
    assert_clean_error(rc, err, "chunked")
