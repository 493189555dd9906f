"""What KV-aware routing gains over round robin, per trace and model: ``kvcore simulate
MODEL --trace T --gpu GPU --replicas N --router R --json`` for each router, one table.

    kvpy benchmarks/bench_fleet_routing.py [--traces-dir DIR] [--limit N] [--replicas N]
        [--models llama-3.1-8b,gpt-oss-20b] [--gpu H100-SXM] [--event-delay S]

Traces: the Mooncake FAST'25 conversation and synthetic traces (prefix hash ids) and
the Azure 2023 code trace (no shared prefixes: routing can only balance load), the
first ``--limit`` requests of each, at their own timestamps.  Step times from the
roofline model on ``--gpu``.  Prints prefix-hit ratio, mean / p99 TTFT, mean TPOT,
duration and busy-time imbalance per router.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import platform
import time

ROUTERS = ("round-robin", "least-loaded", "prefix-aware", "prefix-aware-attention-only")
TRACES = ("mooncake_conversation_trace.jsonl", "mooncake_synthetic_trace.jsonl",
          "azure_llm_inference_2023_code.csv")


def run(argv: list[str]) -> dict:
    from kvcore.cli import main

    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        rc = main(argv)
    if rc != 0:
        raise SystemExit(f"kvcore {' '.join(argv)} exited {rc}: {buf.getvalue()[:300]}")
    return json.loads(buf.getvalue().splitlines()[0])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--traces-dir", default="/work/shared/traces")
    ap.add_argument("--limit", type=int, default=300)
    ap.add_argument("--replicas", type=int, default=4)
    ap.add_argument("--models", default="llama-3.1-8b,gpt-oss-20b")
    ap.add_argument("--gpu", default="H100-SXM")
    ap.add_argument("--event-delay", type=float, default=0.0)
    ap.add_argument("--traces", default=",".join(TRACES))
    ap.add_argument("--kv-cache-memory", default=None,
                    help="KV budget per replica (default: what fits on --gpu)")
    ap.add_argument("--routers", default=",".join(ROUTERS))
    a = ap.parse_args()
    print(f"machine: {platform.machine()}, {os.cpu_count()} CPUs, Python "
          f"{platform.python_version()}")
    print(f"command: kvpy benchmarks/bench_fleet_routing.py --limit {a.limit} --replicas "
          f"{a.replicas} --models {a.models} --gpu {a.gpu} --event-delay {a.event_delay}"
          + (f" --kv-cache-memory {a.kv_cache_memory}" if a.kv_cache_memory else ""))
    hdr = (f"{'trace':<22} {'model':<14} {'router':<28} {'hit %':>6} {'TTFT ms':>8} "
           f"{'p99 TTFT':>9} {'TPOT ms':>8} {'dur s':>7} {'busy max/mean':>13} "
           f"{'pred hit %':>10} {'wall s':>6}")
    print(hdr)
    for trace in a.traces.split(","):
        path = os.path.join(a.traces_dir, trace)
        for model in a.models.split(","):
            for router in a.routers.split(","):
                t0 = time.perf_counter()
                d = run(["simulate", model, "--trace", path, "--limit", str(a.limit),
                         "--gpu", a.gpu, "--replicas", str(a.replicas), "--router",
                         router, "--event-delay", str(a.event_delay), "--json"]
                        + (["--kv-cache-memory", a.kv_cache_memory]
                           if a.kv_cache_memory else []))
                pred = d["router_predicted_hit_ratio"]
                print(f"{trace.split('_')[0] + ':' + trace.split('_')[-2]:<22} "
                      f"{model:<14} {router:<28} {100 * d['prefix_hit_ratio']:6.1f} "
                      f"{d['mean_ttft_ms']:8.0f} {d['p99_ttft_ms']:9.0f} "
                      f"{d['mean_tpot_ms']:8.1f} {d['duration']:7.1f} "
                      f"{d['busy_imbalance']:13.2f} "
                      f"{'' if pred is None else f'{100 * pred:.1f}':>10} "
                      f"{time.perf_counter() - t0:6.1f}", flush=True)


if __name__ == "__main__":
    main()
