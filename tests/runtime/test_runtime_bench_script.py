"""benchmarks/bench_runtime.py runs, reads the replay parameters from the meta file and
writes results in the conformance format."""

from __future__ import annotations

import importlib.util
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from helpers_runtime import DATA
from kvcore_watchdog import run_watched

ROOT = Path(__file__).parents[2]


def test_bench_runtime_json_and_results(tmp_path):
    workload = tmp_path / "w.jsonl"
    lines = (DATA / "workload-seed0.jsonl").read_text().splitlines()[:120]
    workload.write_text("\n".join(lines) + "\n")
    shutil.copy(DATA / "workload-seed0.jsonl.meta.json", str(workload) + ".meta.json")
    results = tmp_path / "r.jsonl"
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "bench_runtime.py"),
                           "--workload", str(workload), "--results", str(results),
                           "--json"], capture_output=True, text=True, check=True)
    out = json.loads(proc.stdout)
    assert out["requests"] == 120
    assert out["requests_per_s"] > 0 and out["allocate_slots_calls_per_s"] > 0
    rows = [json.loads(line) for line in results.read_text().splitlines()]
    assert [r["id"] for r in rows] == [json.loads(x)["id"] for x in lines]
    assert set(rows[0]) == {"id", "num_cached_tokens", "admit_step", "finish_step"}
    assert sum(r["num_cached_tokens"] for r in rows) == out["prefix_hit_tokens"]
    # 120 requests fit the 19,999-block pool: nothing is evicted, and the first 64 are
    # admitted in step 1 exactly as in the full replay
    expected = [json.loads(x) for x in
                (DATA / "vllm-results-seed0.jsonl").read_text().splitlines()[:64]]
    assert rows[:64] == expected


def _small(tmp_path, n):
    workload = tmp_path / "w.jsonl"
    lines = (DATA / "workload-seed0.jsonl").read_text().splitlines()[:n]
    workload.write_text("\n".join(lines) + "\n")
    shutil.copy(DATA / "workload-seed0.jsonl.meta.json", str(workload) + ".meta.json")
    return workload


@pytest.mark.skipif(importlib.util.find_spec("kvcore_mamba") is None,
                    reason="the full+mamba layout needs kvcore-mamba (core-only venv)")
def test_bench_runtime_hybrid_layouts(tmp_path):
    workload = _small(tmp_path, 60)
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "bench_runtime.py"),
                           "--workload", str(workload), "--layout", "all", "--json"],
                          capture_output=True, text=True, check=True)
    runs = json.loads(proc.stdout)["runs"]
    assert [r["layout"] for r in runs] == ["full", "full+sliding", "full+mamba"]
    full, swa, mamba = runs
    assert all(r["requests"] == 60 and r["allocate_slots_calls"] > 0 for r in runs)
    # a sliding window of 1,024 tokens can only shorten a hit; align-mode Mamba keeps
    # states only where a step ends on a block boundary (whole prompts here: none)
    assert swa["prefix_hit_tokens"] <= full["prefix_hit_tokens"]
    assert mamba["prefix_hit_tokens"] <= full["prefix_hit_tokens"]


VLLM_PY = ROOT / ".vllm-ref" / "venv" / "bin" / "python"


@pytest.mark.skipif(not VLLM_PY.exists(), reason="vLLM reference venv not set up")
def test_bench_runtime_side_by_side_with_vllm(tmp_path):
    """vLLM 0.32's own manager on the same replay: the per-request hits agree (the
    conformance claim), and both figures are reported."""
    workload = _small(tmp_path, 40)
    proc = run_watched([sys.executable, str(ROOT / "benchmarks" / "bench_runtime.py"),
                           "--workload", str(workload), "--layout", "full,full+sliding",
                           "--vllm", "--json"], capture_output=True, text=True,
                          check=True)
    runs = json.loads(proc.stdout)["runs"]
    assert [(r["engine"], r["layout"]) for r in runs] == [
        ("kvcore", "full"), ("kvcore", "full+sliding"), ("vllm", "full"),
        ("vllm", "full+sliding")]
    assert all(r["hits_equal_other_engine"] for r in runs)
    assert runs[0]["prefix_hit_tokens"] == runs[2]["prefix_hit_tokens"]
    assert runs[0]["speedup_vs_vllm"] > 0
