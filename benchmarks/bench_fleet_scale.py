"""A fleet at scale: ``--requests`` requests (default 1,000,000) over ``--replicas``
(default 16) through :func:`kvcore.sim.fleet.run_fleet`, streamed (requests generated
as they arrive, each folded into arrays when it finishes), reporting wall time,
requests per wall second and peak RSS.

    kvpy benchmarks/bench_fleet_scale.py [--requests N] [--replicas 16]
        [--router prefix-aware] [--traces azure_llm_inference_2023_conv.csv,...]
        [--load 1.0] [--model llama-3.1-8b] [--gpu H100] [--profile]

The trace is synthetic, built here (no file is written): the shared traces are tiled,
``P`` tiles of a trace overlap at any time (tile ``j`` is the trace rotated by
``(j mod P) * duration / P`` within the ``j // P``-th trace duration), each with its
own token streams (Azure: a fresh unique stream per request; Mooncake: its hash ids
moved to a block of ids of its own, so tiles share prefixes within, never across,
tiles).  Requests of the chosen traces are merged in arrival order and the first
``--requests`` taken (split evenly over the traces).  ``--load``
scales the offered rate: ``P = load x replicas``, so the fleet is offered ``P`` times
each trace's own rate (at 1.0 each replica sees what the whole original trace
offered).  Step times: the roofline model on ``--gpu``.
"""

from __future__ import annotations

import argparse
import heapq
import math
import os
import platform
import resource
import sys
import time
from array import array
from collections.abc import Iterator
from typing import Any

TRACES = ("azure_llm_inference_2023_conv.csv", "azure_llm_inference_2023_code.csv",
          "mooncake_conversation_trace.jsonl")


def tiled(path: str, n: int, tiles_per_duration: float, tag: int) -> Iterator[Any]:
    """The first ``n`` requests of ``path`` tiled (module docstring), arrival order."""
    from kvcore.sim.traces import TraceRequest, read_trace

    base = read_trace(path)
    t0 = base[0].arrival_ms
    dur = max(1.0, base[-1].arrival_ms - t0) * (1 + 1 / max(1, len(base)))
    per = max(1, round(tiles_per_duration))
    shift = dur / per
    tiles = math.ceil(n / len(base)) + per + 1

    def tile(j: int) -> Iterator[Any]:
        # tile j is the trace rotated by (j mod per) x shift within cycle j // per, so
        # `per` tiles overlap from time 0 on (no ramp-up)
        off = (j % per) * shift
        start = (j // per) * dur
        rel = [r.arrival_ms - t0 + off for r in base]
        cut = next((i for i, x in enumerate(rel) if x >= dur), len(base))
        for i in [*range(cut, len(base)), *range(cut)]:
            r = base[i]
            t = rel[i] - dur if i >= cut else rel[i]
            segs = [(s + (j + 1) * (1 << 22) + (tag << 28) if s < (1 << 30) else
                     s + j * len(base) * 4 + tag * (1 << 27), a, c)
                    for s, a, c in r.segments]
            yield TraceRequest(f"t{tag}-{j}-{i}", start + t, r.prompt_len, r.output_len,
                               r.output_stream, segs)

    k = 0
    for r in heapq.merge(*(tile(j) for j in range(tiles)), key=lambda x: x.arrival_ms):
        if k >= n:
            return
        k += 1
        yield r


class Folded:
    """Per-request figures in arrays (8 bytes a figure), not objects."""

    def __init__(self) -> None:
        self.ttft = array("d")
        self.tpot = array("d")
        self.e2el = array("d")
        self.out = 0
        self.prompt = 0
        self.hit = 0
        self.rejected = 0
        self.first_sent = math.inf
        self.last_finish = 0.0

    def __call__(self, r: Any, k: int) -> None:
        if r.rejected or r.finish < 0:
            self.rejected += 1
            return
        tt = r.token_times
        ttft = tt[0]  # token times count from the send
        lat = tt[-1]
        self.ttft.append(ttft)
        self.e2el.append(lat)
        if len(tt) > 1:
            self.tpot.append((lat - ttft) / (len(tt) - 1))
        self.out += len(tt)
        self.prompt += r.prompt_len
        self.hit += max(0, r.num_cached_tokens)
        if r.sent < self.first_sent:
            self.first_sent = r.sent
        if r.finish > self.last_finish:
            self.last_finish = r.finish


def _pct(xs: array, p: float) -> float:
    if not xs:
        return 0.0
    s = sorted(xs)
    return s[min(len(s) - 1, int(p / 100 * len(s)))]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--requests", type=int, default=1_000_000)
    ap.add_argument("--replicas", type=int, default=16)
    ap.add_argument("--router", default="prefix-aware")
    ap.add_argument("--traces", default=",".join(TRACES))
    ap.add_argument("--traces-dir", default="/work/shared/traces")
    ap.add_argument("--load", type=float, default=1.0)
    ap.add_argument("--model", default="llama-3.1-8b")
    ap.add_argument("--gpu", default="H100")
    ap.add_argument("--kv-cache-memory", type=float, default=40.0, help="GiB per replica")
    ap.add_argument("--max-model-len", type=int, default=32768)
    ap.add_argument("--max-num-seqs", type=int, default=256)
    ap.add_argument("--max-num-batched-tokens", type=int, default=8192)
    ap.add_argument("--profile", action="store_true", help="cProfile, top 25 by tottime")
    a = ap.parse_args()

    import kvcore
    from kvcore.sim import timing
    from kvcore.sim.engine import SimRequest
    from kvcore.sim.fleet import run_fleet

    names = a.traces.split(",")
    share = [a.requests // len(names) + (1 if i < a.requests % len(names) else 0)
             for i in range(len(names))]
    tiles_per_dur = a.load * a.replicas
    streams = [tiled(os.path.join(a.traces_dir, t), n, tiles_per_dur, i)
               for i, (t, n) in enumerate(zip(names, share))]
    merged = heapq.merge(*streams, key=lambda x: x.arrival_ms)
    cfg = kvcore.plan_model(a.model, kv_cache_memory_bytes=int(a.kv_cache_memory * 2**30),
                            max_model_len=a.max_model_len,
                            max_num_batched_tokens=a.max_num_batched_tokens)
    tm = timing.roofline_for(a.model, cfg, gpu=a.gpu)
    fold = Folded()
    done = [0]
    t_start = time.perf_counter()

    def progress(n: int) -> None:
        if n >= done[0] + 100_000:
            done[0] = n - n % 100_000
            print(f"  {n:>9,} done, {time.perf_counter() - t_start:8.1f} s wall, peak RSS "
                  f"{resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20:.2f} GiB",
                  file=sys.stderr, flush=True)

    print(f"machine: {platform.machine()}, {os.cpu_count()} CPUs, load "
          f"{os.getloadavg()[0]:.1f}, Python {platform.python_version()}")
    print("command: kvpy benchmarks/bench_fleet_scale.py " + " ".join(sys.argv[1:]))
    run = lambda: run_fleet(  # noqa: E731
        cfg, (SimRequest(r) for r in merged), tm, replicas=a.replicas, router=a.router,
        max_num_seqs=a.max_num_seqs, max_num_batched_tokens=a.max_num_batched_tokens,
        max_model_len=a.max_model_len, keep_requests=False, on_done=fold,
        progress=progress)
    w0, c0 = time.perf_counter(), time.process_time()
    if a.profile:
        import cProfile
        import pstats

        pr = cProfile.Profile()
        res = pr.runcall(run)
        pstats.Stats(pr).sort_stats("tottime").print_stats(25)
    else:
        res = run()
    wall, cpu = time.perf_counter() - w0, time.process_time() - c0
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20
    n = len(fold.ttft) + fold.rejected
    steps = sum(r.steps for r in res.replicas)
    dur = fold.last_finish - min(fold.first_sent, fold.last_finish)
    print(f"{a.requests:,} requests ({', '.join(names)}; load {a.load}) over {a.replicas} "
          f"replicas, router {a.router}, {a.model} on {a.gpu}")
    print(f"  finished {n:,} ({fold.rejected} rejected), {steps:,} engine steps, "
          f"simulated {dur:,.0f} s")
    print(f"  wall {wall:,.1f} s, CPU {cpu:,.1f} s: {n / wall:,.0f} requests per wall s, "
          f"{n / cpu:,.0f} per CPU s; peak RSS {rss:.2f} GiB")
    print(f"  prefix hit ratio {fold.hit / max(1, fold.prompt):.3f}, mean TTFT "
          f"{1000 * sum(fold.ttft) / max(1, len(fold.ttft)):.1f} ms, p99 TTFT "
          f"{1000 * _pct(fold.ttft, 99):.1f} ms, mean TPOT "
          f"{1000 * sum(fold.tpot) / max(1, len(fold.tpot)):.2f} ms, output "
          f"{fold.out / max(dur, 1e-9):,.0f} tok/s")


if __name__ == "__main__":
    main()
