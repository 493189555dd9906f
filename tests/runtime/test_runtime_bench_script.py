"""benchmarks/bench_runtime.py runs, reads the replay parameters from the meta file and
writes results in the conformance format."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

from helpers_runtime import DATA

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
