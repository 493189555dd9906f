"""What the clock costs per simulated step (issue 21: "the clock costs at most 2x the
clockless replay").

For a dense model (Llama-3.1-8B), a hybrid (Nemotron-H 56B: attention + Mamba) and
DeepSeek-V4-Flash (MLA + indexer), with as many KV-cache groups as kvcore's planner
gives them (printed), this times

* the clockless replay (:mod:`kvcore.sim.replay` with kvcore's KVCacheManager) on a
  synthetic trace of 256 requests (1,024-token prompts, 64 outputs, 64 running): wall
  seconds per step;
* the clock: ``describe_batch`` + ``RooflineTimeModel.step_time`` on batches of the
  same shape (63 decodes at contexts 500..4,000 plus a 1,024-token prefill): seconds
  per step;

and prints both and their ratio ``(replay + clock) / replay``.  One process, one core.

    python benchmarks/bench_step_time.py [--requests 256] [--repeat 2000]
"""

from __future__ import annotations

import argparse
import platform
import random
import time

import kvcore
from kvcore.runtime import KVCacheManager
from kvcore.sim.replay import Job, replay
from kvcore.sim.timing import ScheduledRequest, describe_batch, roofline_for
from kvcore.sim.traces import TraceRequest

MODELS = (("llama-3.1-8b", "dense"),
          ("nemotron-h-56b-base-8k", "hybrid: attention + Mamba"),
          ("deepseek-v4-flash.aiconfigurator", "MLA + indexer"))


def _trace(n: int) -> list[TraceRequest]:
    return [TraceRequest(f"r{i}", 0.0, 1024, 64, 10_000 + i, [(i, 0, 1024)])
            for i in range(n)]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--requests", type=int, default=256)
    ap.add_argument("--repeat", type=int, default=2000)
    args = ap.parse_args()
    print(f"# {platform.node()}, python {platform.python_version()}; replay of "
          f"{args.requests} requests (1,024 + 64 tokens, 64 running)")
    print(f"{'model':<34} {'groups':>6} {'replay us/step':>15} {'clock us/step':>14} "
          f"{'ratio':>6}")
    rng = random.Random(0)
    for name, _ in MODELS:
        cfg = kvcore.plan_model(name, kv_cache_memory_bytes=64 << 30, max_model_len=8192,
                                max_num_batched_tokens=8192)
        mgr = KVCacheManager(cfg, max_model_len=8192, enable_caching=True,
                             max_num_batched_tokens=8192)
        jobs = [Job(t) for t in _trace(args.requests)]
        res = replay(mgr, jobs, max_running=64)
        replay_us = res.wall_seconds / res.steps * 1e6
        model = roofline_for(name, cfg, gpu="H200")
        batch = [ScheduledRequest(1, rng.randint(500, 4000), False) for _ in range(63)]
        batch.append(ScheduledRequest(1024, 0, True))
        t0 = time.perf_counter()
        for _ in range(args.repeat):
            model.step_time(describe_batch(cfg, batch))
        clock_us = (time.perf_counter() - t0) / args.repeat * 1e6
        print(f"{name:<34} {len(cfg.kv_cache_groups):>6} {replay_us:15.1f} "
              f"{clock_us:14.1f} {(replay_us + clock_us) / replay_us:6.2f}")


if __name__ == "__main__":
    main()
