#!/usr/bin/env python3
"""Replay a runtime workload and time the KV-cache manager.

    python3 benchmarks/bench_runtime.py --workload tests/runtime/data/workload-seed0.jsonl \
        [--results OUT.jsonl] [--json] [--repeat N] [--hash sha256]

The workload is the format of ``tests/runtime/data`` (kvcore JSONL with prefix
descriptions); the replay parameters (block_size, num_blocks, max_model_len,
max_running) come from ``FILE.meta.json`` beside it.  The loop is
:func:`kvcore.sim.replay.replay` (one full-attention group, prefix caching on).

Timing, as for vLLM 0.32's reference figures (220,000 allocate_slots calls/s, 1,086
requests/s): token ids and prompt hashes are built before the clock starts; the replay's
wall time covers everything else (lookups, allocation, output-token hashing, frees);
``allocate_slots`` time is summed from ``perf_counter`` around each call.  With
``--repeat N`` the best of N fresh replays is reported.  ``--results`` writes one line
per request (id, num_cached_tokens, admit_step, finish_step), as in the workload's
results file.

Measured (kvcore 0.1.0, CPython 3.11.7, 2-core AMD EPYC VM shared with other jobs, load
average about 2; ``--repeat 5``, best run; the results file is byte-identical to
``vllm-results-seed0.jsonl``)::

    $ python3 benchmarks/bench_runtime.py --workload tests/runtime/data/workload-seed0.jsonl --repeat 5
    2000 requests, 5127 steps, 860096 of 4579394 prompt tokens hit (18.78 %)
    requests/s (wall):                4,844
    allocate_slots calls/s:       1,496,270 (318477 calls, 0.213 s)

(vLLM 0.32's manager: 1,086 requests/s and about 220,000 allocate_slots calls/s on
this workload.)  Under heavy load from other jobs (load average 6 to 7) the same
command gave 1,300 to 2,500 requests/s and 360,000 to 830,000 calls/s.
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
from pathlib import Path

from kvcore.kv_cache_config import KVCacheConfig, KVCacheGroupSpec
from kvcore.runtime import KVCacheManager
from kvcore.sim.replay import ReplayResult, prepare_jobs, replay
from kvcore.sim.traces import read_kvcore_jsonl
from kvcore.specs import FullAttentionSpec


def load_meta(workload: Path) -> dict:
    meta_path = Path(str(workload) + ".meta.json")
    if not meta_path.is_file():
        raise SystemExit(f"bench_runtime: {meta_path} not found (replay parameters)")
    return json.loads(meta_path.read_text())["replay"]


def run_once(workload: Path, meta: dict, hash_name: str) -> ReplayResult:
    spec = FullAttentionSpec(block_size=meta["block_size"], num_kv_heads=1, head_size=64)
    cfg = KVCacheConfig(num_blocks=meta["num_blocks"], kv_cache_tensors=(),
                        kv_cache_groups=(KVCacheGroupSpec(("layer.0",), spec),))
    mgr = KVCacheManager(cfg, max_model_len=meta["max_model_len"], hash=hash_name)
    jobs = prepare_jobs(mgr, read_kvcore_jsonl(workload))
    res = replay(mgr, jobs, max_running=meta["max_running"], time_calls=True)
    if mgr.usage != 0.0:
        raise SystemExit("bench_runtime: blocks still held after the replay")
    return res


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--workload", required=True, type=Path)
    ap.add_argument("--results", type=Path, help="write per-request results (JSONL)")
    ap.add_argument("--json", action="store_true", help="print one JSON object")
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--hash", default=None, help="block hash (default: meta's, sha256)")
    args = ap.parse_args(argv)
    meta = load_meta(args.workload)
    hash_name = args.hash or meta.get("hash", "sha256")
    best: ReplayResult | None = None
    for _ in range(max(1, args.repeat)):
        res = run_once(args.workload, meta, hash_name)
        if best is None or res.wall_seconds < best.wall_seconds:
            best = res
    assert best is not None
    n = len(best.jobs)
    out = {
        "workload": str(args.workload),
        "requests": n,
        "steps": best.steps,
        "prefix_hit_tokens": best.prefix_hit_tokens,
        "prompt_tokens": best.prompt_tokens,
        "allocate_slots_calls": best.allocate_slots_calls,
        "allocate_slots_seconds": round(best.allocate_slots_seconds, 6),
        "wall_seconds": round(best.wall_seconds, 6),
        "requests_per_s": round(n / best.wall_seconds, 1),
        "allocate_slots_calls_per_s": round(best.allocate_slots_calls
                                            / best.allocate_slots_seconds, 1),
        "hash": hash_name,
        "python": platform.python_version(),
        "machine": platform.processor() or platform.machine(),
    }
    if args.results:
        with args.results.open("w") as f:
            for row in best.results():
                f.write(json.dumps(row) + "\n")
    if args.json:
        print(json.dumps(out))
    else:
        print(f"{n} requests, {best.steps} steps, {best.prefix_hit_tokens} of "
              f"{best.prompt_tokens} prompt tokens hit "
              f"({100 * best.prefix_hit_tokens / max(1, best.prompt_tokens):.2f} %)")
        print(f"requests/s (wall):         {out['requests_per_s']:>12,.0f}")
        print(f"allocate_slots calls/s:    {out['allocate_slots_calls_per_s']:>12,.0f} "
              f"({best.allocate_slots_calls} calls, {best.allocate_slots_seconds:.3f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
