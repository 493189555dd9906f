"""What KV-aware routing gains over round robin, per trace and model: ``kvcore simulate
MODEL --trace T --gpu GPU --replicas N --router R --json`` for each router, one table.

    kvpy benchmarks/bench_fleet_routing.py [--traces-dir DIR] [--limit N] [--replicas N]
        [--models llama-3.1-8b,gpt-oss-20b] [--gpu H100-SXM] [--event-delay S]

Traces: the Mooncake FAST'25 conversation and synthetic traces (prefix hash ids) and
the Azure 2023 code trace (no shared prefixes: routing can only balance load), the
first ``--limit`` requests of each, at their own timestamps.  Step times from the
roofline model on ``--gpu``.  Prints prefix-hit ratio, mean / p99 TTFT, mean TPOT,
duration and busy-time imbalance per router.

``--mamba`` (on by default; ``--no-mamba`` skips it) adds a Mamba hybrid: Qwen3-Next-80B
(Gated DeltaNet + full attention, TP 4) in ``--mamba-cache-mode align`` on vLLM's random
dataset with one shared 4,000-token prefix.  In align mode a state exists only at a
block boundary where a step ended, so most of the prefix the attention group holds
cannot be served: the attention-only router predicts hits the replicas do not give
(``pred hit %`` above ``hit %``) and piles the prefix's requests on one replica.
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
    ap.add_argument("--mamba", action=argparse.BooleanOptionalAction, default=True)
    ap.add_argument("--mamba-prompts", type=int, default=160)
    a = ap.parse_args()
    print(f"machine: {platform.machine()}, {os.cpu_count()} CPUs, Python "
          f"{platform.python_version()}")
    print(f"command: kvpy benchmarks/bench_fleet_routing.py --limit {a.limit} --replicas "
          f"{a.replicas} --models {a.models} --gpu {a.gpu} --event-delay {a.event_delay}")
    hdr = (f"{'trace':<22} {'model':<14} {'router':<28} {'hit %':>6} {'TTFT ms':>8} "
           f"{'p99 TTFT':>9} {'TPOT ms':>8} {'dur s':>7} {'busy max/mean':>13} "
           f"{'pred hit %':>10} {'wall s':>6}")
    print(hdr)
    for trace in a.traces.split(","):
        path = os.path.join(a.traces_dir, trace)
        for model in a.models.split(","):
            for router in ROUTERS:
                t0 = time.perf_counter()
                d = run(["simulate", model, "--trace", path, "--limit", str(a.limit),
                         "--gpu", a.gpu, "--replicas", str(a.replicas), "--router",
                         router, "--event-delay", str(a.event_delay), "--json"])
                pred = d["router_predicted_hit_ratio"]
                print(f"{trace.split('_')[0] + ':' + trace.split('_')[-2]:<22} "
                      f"{model:<14} {router:<28} {100 * d['prefix_hit_ratio']:6.1f} "
                      f"{d['mean_ttft_ms']:8.0f} {d['p99_ttft_ms']:9.0f} "
                      f"{d['mean_tpot_ms']:8.1f} {d['duration']:7.1f} "
                      f"{d['busy_imbalance']:13.2f} "
                      f"{'' if pred is None else f'{100 * pred:.1f}':>10} "
                      f"{time.perf_counter() - t0:6.1f}", flush=True)

    if a.mamba:
        mamba(a)


MAMBA_MODEL = "qwen3-next-80b-a3b-thinking"


def mamba(a: argparse.Namespace) -> None:
    """The Mamba-align scenario of the module docstring, one sweep."""
    argv = ["simulate", MAMBA_MODEL, "--dataset", "random", "--random-prefix-len", "4000",
            "--random-input-len", "300", "--random-output-len", "64", "--num-prompts",
            str(a.mamba_prompts), "--request-rate", "16", "--gpu", "H100", "--tp", "4",
            "--replicas", str(a.replicas), "--router", ",".join(
                ("round-robin", "prefix-aware", "prefix-aware-attention-only")),
            "--event-delay", str(a.event_delay), "--backend", "serial", "--json"]
    # vLLM 0.32 runs align with prefix caching on and none with it off (MambaModelConfig)
    for mode, flags in (("align", ["--mamba-cache-mode", "align"]),
                        ("none", ["--no-prefix-caching"])):
        t0 = time.perf_counter()
        rows = run([*argv, *flags])["sweep"]
        for d in rows:
            pred = d["router_predicted_hit_ratio"]
            print(f"{'random-prefix4000':<22} {'qwen3-next:' + mode:<16} {d['router']:<28} "
                  f"{100 * d['prefix_hit_ratio']:6.1f} {d['mean_ttft_ms']:8.0f} "
                  f"{d['p99_ttft_ms']:9.0f} {d['mean_tpot_ms']:8.1f} {d['duration']:7.1f} "
                  f"{d['busy_imbalance']:13.2f} "
                  f"{'' if pred is None else f'{100 * pred:.1f}':>10} "
                  f"{(time.perf_counter() - t0) / len(rows):6.1f}", flush=True)


if __name__ == "__main__":
    main()
