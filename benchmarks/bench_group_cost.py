#!/usr/bin/env python3
"""CPU cost of KV-cache groups: vLLM 0.32's Scheduler (vLLM's own KVCacheManager) and
kvcore_vllm's KVCacheManager, per scheduled request and step, against the number of
groups (issue 22, item 1(d); the coefficients ``kvcore.serving`` uses).

    .venv-vllm/bin/python benchmarks/bench_group_cost.py [--groups 1 4 16 32] \\
        [--requests 120] [--repeat 2]

Layouts: G - 1 sliding-window layers with distinct windows (64, 128, ... tokens: vLLM
gives each its own group) plus one full-attention layer, so vLLM's planner makes G
groups of one layer.  Workload: ``kvcore_vllm.harness.Workload.shared_prefixes``
(seed 0, max_num_seqs 16, max_num_batched_tokens 512, plenty of blocks).  For each
manager: wall seconds of the whole scheduler loop (``schedule()`` +
``update_from_output()``, no model) and seconds inside the manager's methods, divided
by the scheduled (request, step) pairs; then a least-squares line ``a + b x G`` in
microseconds.  Prints figures only.
"""

from __future__ import annotations

import argparse
import os
import statistics

os.environ.setdefault("VLLM_LOGGING_LEVEL", "ERROR")


def layers(g: int) -> list:
    return [("sliding", {"sliding_window": 64 * (i + 1)}) for i in range(g - 1)] + \
        [("full", {})]


def fit(xs: list[int], ys: list[float]) -> tuple[float, float]:
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    b = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / \
        max(1e-12, sum((x - mx) ** 2 for x in xs))
    return my - b * mx, b


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--groups", type=int, nargs="+", default=[1, 4, 16, 32])
    ap.add_argument("--requests", type=int, default=120)
    ap.add_argument("--repeat", type=int, default=2)
    args = ap.parse_args()
    from kvcore_vllm.harness import Workload, run

    print(f"{'groups':>6} {'req-steps':>9} {'vLLM sched us':>14} {'vLLM mgr us':>12} "
          f"{'kvcore mgr us':>14}   (per scheduled request and step)")
    rows = []
    for g in args.groups:
        w = Workload.shared_prefixes(0, n=args.requests, layers=layers(g),
                                     max_num_seqs=16, max_num_batched_tokens=512,
                                     num_blocks=20000, events=False, log_stats=False)
        counted = run(w, "vllm", max_steps=100000, record=True)
        pairs = sum(len(s["num_scheduled_tokens"]) for s in counted["steps"])
        best: dict[str, tuple[float, float]] = {}
        for mgr in ("vllm", "kvcore"):
            walls, inside = [], []
            for _ in range(args.repeat):
                r = run(w, mgr, max_steps=100000, record=False)
                walls.append(r["wall_s"])
                inside.append(r["manager_s"] or 0.0)
            best[mgr] = (min(walls) / pairs * 1e6, min(inside) / pairs * 1e6)
        rows.append((g, best["vllm"][0], best["vllm"][1], best["kvcore"][1]))
        print(f"{g:>6} {pairs:>9} {best['vllm'][0]:>14.2f} {best['vllm'][1]:>12.2f} "
              f"{best['kvcore'][1]:>14.2f}")
    xs = [r[0] for r in rows]
    for i, name in ((1, "vLLM scheduler loop"), (2, "vLLM KVCacheManager"),
                    (3, "kvcore_vllm KVCacheManager")):
        a, b = fit(xs, [r[i] for r in rows])
        print(f"fit {name}: {a:.2f} + {b:.2f} x groups  us per request-step")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
