#!/usr/bin/env python3
"""Seeded driver for the runtime invariant (issue 13): random scheduler-like call
sequences over many plans, every call checked against the reference model of
``tests/runtime/invariant.py``.

    python3 benchmarks/invariant_driver.py [--ops 500000] [--seed 0] [--plans a,b]
        [--worlds-per-plan 4] [--show 20] [--json]

Each plan gets ``--ops / #plans`` calls, split over ``--worlds-per-plan`` fresh
managers (seeds ``seed, seed + 1, ...``), so pools start empty several times.  A
"call" is one runtime call (get_computed_blocks, allocate_slots, free,
reset_prefix_cache); after each the invariant is checked for every live request and
every layer, plus the pool's consistency.  Lookahead is 0 on a request's first
allocation and ``num_speculative_tokens`` afterwards; decode steps verify 0..S drafts,
a random number of them accepted; a quarter of the admissions ask
``full_sequence_must_fit``.  Prints the calls, plans, failed allocations (pool full),
hit tokens, refused requests (an encoder input over the planned limit must raise
RequestError and change nothing) and violations (the first ``--show`` of them, with
plan, seed and call number); exit status 1 when there is any violation.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests" / "runtime"))

from invariant import World  # noqa: E402
from invariant_plans import available_plans  # noqa: E402

from kvcore.errors import KVCoreError  # noqa: E402


def run_plan(case, ops: int, seed: int, worlds: int) -> dict:
    done = 0
    out = {"plan": case.name, "ops": 0, "violations": [], "failed_allocs": 0,
           "hit_tokens": 0, "refused": 0, "errors": []}
    for w in range(worlds):
        budget = (ops - done) // (worlds - w)
        cfg, kw = case.build()
        kw = dict(kw)
        mml = kw.pop("max_model_len", None) or cfg.max_model_len or 128
        world = World(cfg, max_model_len=mml, name=case.name, seed=seed + w, **kw)
        try:
            world.run(budget)
        except KVCoreError as e:  # a runtime error ends this world
            out["errors"].append(f"seed {seed + w} op {world.ops}: "
                                 f"{type(e).__name__}: {e}")
        done += world.ops
        out["ops"] += world.ops
        out["failed_allocs"] += world.failed_allocs
        out["hit_tokens"] += world.hits
        out["refused"] += world.refused
        out["violations"] += [dict(seed=seed + w, text=str(v)) for v in world.violations]
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--ops", type=int, default=500_000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--plans", default="", help="comma-separated plan names (default all)")
    ap.add_argument("--worlds-per-plan", type=int, default=4)
    ap.add_argument("--show", type=int, default=20, help="violations to print")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    plans = available_plans([p for p in args.plans.split(",") if p] or None)
    if not plans:
        print("invariant_driver: no plan selected (or its plugin is not installed)")
        return 2
    t0 = time.perf_counter()
    per_plan = max(1, args.ops // len(plans))
    results = [run_plan(p, per_plan, args.seed, max(1, args.worlds_per_plan))
               for p in plans]
    wall = time.perf_counter() - t0
    total_ops = sum(r["ops"] for r in results)
    total_v = sum(len(r["violations"]) for r in results)
    total_e = sum(len(r["errors"]) for r in results)
    summary = {"ops": total_ops, "plans": len(plans), "violations": total_v,
               "errors": total_e, "seconds": round(wall, 1), "seed": args.seed,
               "per_plan": [{k: (len(v) if k in ("violations", "errors") else v)
                             for k, v in r.items()} for r in results]}
    if args.json:
        summary["first_violations"] = [v for r in results for v in r["violations"]
                                       ][:args.show]
        print(json.dumps(summary))
    else:
        print(f"{'plan':<28} {'calls':>8} {'no fit':>7} {'hit tok':>8} {'refused':>8} "
              f"{'viol':>6}")
        for r in results:
            print(f"{r['plan']:<28} {r['ops']:>8} {r['failed_allocs']:>7} "
                  f"{r['hit_tokens']:>8} {r['refused']:>8} "
                  f"{len(r['violations']) + len(r['errors']):>6}")
        print(f"calls: {total_ops:,}   plans: {len(plans)}   violations: {total_v}   "
              f"runtime errors: {total_e}   ({wall:.1f} s, seed {args.seed})")
        kinds = Counter()
        for r in results:
            for v in r["violations"]:
                kinds[(r["plan"], v["text"].split(": ", 1)[1].split(":")[0])] += 1
        shown = 0
        for r in results:
            for e in r["errors"]:
                if shown < args.show:
                    print(f"  ERROR [{r['plan']}] {e}")
                    shown += 1
            for v in r["violations"]:
                if shown < args.show:
                    print(f"  seed {v['seed']}: {v['text']}")
                    shown += 1
    return 1 if total_v or total_e else 0


if __name__ == "__main__":
    sys.exit(main())
