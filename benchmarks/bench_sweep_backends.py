"""Sweep throughput per backend and worker count (issue 21 item 6).

Runs the same ``kvcore tune``-style sweep (one simulation per task: Llama-3.1-8B on
H100, ``--dataset random`` 1024/128, ``--max-concurrency 64``) on the serial backend,
the local process pool and Ray with 1 and 2 workers, and prints wall seconds, tasks per
second and the speed-up over one worker; every backend's results are checked equal to
the serial ones.

    python benchmarks/bench_sweep_backends.py [--tasks 16] [--prompts 300] [--no-ray]

The machine it was written on has 2 cores shared with other jobs: expect noisy figures.
"""

from __future__ import annotations

import argparse
import os
import platform
import time

from kvcore.sim.backends import run_tasks
from kvcore.sim.tune import candidates, simulate_once


def _configs(n: int, prompts: int) -> list[dict]:
    wl = {"input_len": 1024, "output_len": 128, "num_prompts": prompts,
          "max_concurrency": 64, "request_rate": float("inf"), "burstiness": 1.0,
          "prefix_len": 0, "seed": 0}
    mnbt = [512, 1024, 2048, 4096, 8192, 16384, 32768, 65536]
    mns = [32, 64, 128, 256]
    out = candidates("llama-3.1-8b", "H100-SXM", tp=[1], max_num_batched_tokens=mnbt,
                     max_num_seqs=mns, block_size=[None], kv_cache_dtype=["auto"],
                     prefix_caching=[True], mamba_cache_mode=["none"], workload=wl,
                     goodput={"ttft": 500.0, "tpot": 50.0}, max_model_len=8192)
    return out[:n]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--tasks", type=int, default=16)
    ap.add_argument("--prompts", type=int, default=300)
    ap.add_argument("--no-ray", action="store_true")
    args = ap.parse_args()
    configs = _configs(args.tasks, args.prompts)
    print(f"# {len(configs)} simulations of {args.prompts} requests; {platform.node()}, "
          f"{os.cpu_count()} CPUs, python {platform.python_version()}")
    t0 = time.perf_counter()
    ref = run_tasks(simulate_once, configs, backend="serial", progress=False)
    base = time.perf_counter() - t0
    print(f"{'backend':<8} {'workers':>7} {'wall s':>8} {'tasks/s':>8} {'speed-up':>8}")
    print(f"{'serial':<8} {1:>7} {base:8.2f} {len(configs) / base:8.2f} {1.0:8.2f}")
    backends = ["local"] + ([] if args.no_ray else ["ray"])
    for backend in backends:
        if backend == "ray":
            try:
                import ray  # noqa: F401
            except ImportError:
                print("ray: not installed (pip install 'kvcore[ray]')")
                continue
        one = None
        for workers in (1, 2):
            if backend == "ray":
                import ray

                ray.init(num_cpus=workers, include_dashboard=False, log_to_driver=False)
            t0 = time.perf_counter()
            got = run_tasks(simulate_once, configs, backend=backend, workers=workers,
                            progress=False)
            wall = time.perf_counter() - t0
            if backend == "ray":
                ray.shutdown()
            assert got == ref, f"{backend} x{workers} differs from serial"
            one = one or wall
            print(f"{backend:<8} {workers:>7} {wall:8.2f} {len(configs) / wall:8.2f} "
                  f"{one / wall:8.2f}")


if __name__ == "__main__":
    main()
