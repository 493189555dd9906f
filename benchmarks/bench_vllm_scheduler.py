#!/usr/bin/env python3
"""vLLM 0.32's real Scheduler with vLLM's KVCacheManager vs kvcore_vllm.KVCacheManager.

Same seeded workload for both (kvcore_vllm.harness: shared prefixes, a pool small
enough to preempt, chunked prefill), one run side by side; prints scheduler steps per
second (schedule() + update_from_output(), no model) and the seconds spent inside the
KV-cache manager's methods.  Needs vLLM 0.32 (e.g. the CI venv)::

    .venv-vllm/bin/python benchmarks/bench_vllm_scheduler.py [--requests 400] [--repeat 3]

Prints figures only; asserts nothing (the equivalence is tested in
integrations/vllm/tests).
"""

from __future__ import annotations

import argparse
import os
import statistics

os.environ.setdefault("VLLM_LOGGING_LEVEL", "ERROR")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--requests", type=int, default=1000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()

    from kvcore_vllm.harness import Workload, run

    cases = {
        "full attention, 2 layers": dict(layers=[("full", {})] * 2),
        "gemma-like 5 sliding : 1 full": dict(
            layers=[("sliding", {"sliding_window": 64})] * 5 + [("full", {})]),
        "mamba align 3 : 1 full": dict(layers=[("mamba", {})] * 3 + [("full", {})]),
    }
    print(f"{'workload':<32} {'manager':<8} {'steps':>6} {'steps/s':>9} "
          f"{'in manager s':>13} {'manager %':>10}")
    for name, kw in cases.items():
        w = Workload.shared_prefixes(args.seed, n=args.requests, max_model_len=512,
                                     num_blocks=300, max_num_batched_tokens=512,
                                     max_num_seqs=64, **kw)
        for mgr in ("vllm", "kvcore"):
            walls, inside, steps = [], [], 0
            for _ in range(args.repeat):
                r = run(w, mgr, record=False)
                walls.append(r["wall_s"])
                inside.append(r["manager_s"])
                steps = r["num_steps"]
            wall = statistics.median(walls)
            ins = statistics.median(inside)
            print(f"{name:<32} {mgr:<8} {steps:>6} {steps / wall:>9.1f} {ins:>13.3f} "
                  f"{100 * ins / wall:>9.1f}%")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
