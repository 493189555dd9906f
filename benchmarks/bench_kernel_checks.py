"""Cost of the host-side kernel argument checks (kvcore.ops.checks, tester T18 / T19).

Prints, per device (CPU; CUDA when present) and size, the median time of each check
alone and of the call it guards (the check included) (``reshape_and_cache`` / ``gather_cache`` /
``copy_blocks``; on CPU the torch reference, on CUDA the Triton kernel), in
microseconds, and the check's share of the call.  On a GPU each check costs one
device-to-host transfer (a sync).  A figure, not a test: the machine's load changes it.

    python benchmarks/bench_kernel_checks.py
    python benchmarks/bench_kernel_checks.py --repeats 50 --device cpu
"""

# ruff: noqa: B023  (each lambda is called before the loop variable changes)
from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable


def median_us(fn: Callable[[], object], repeats: int, sync: Callable[[], None]) -> float:
    fn()
    sync()
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        sync()
        times.append(time.perf_counter() - t0)
    return statistics.median(times) * 1e6


def main() -> None:
    import torch

    from kvcore.ops import copy_blocks, gather_cache, reshape_and_cache
    from kvcore.ops.checks import check_block_table, check_copy_pairs, check_ids

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=20)
    ap.add_argument("--device", choices=["cpu", "cuda", "all"], default="all")
    args = ap.parse_args()
    devices = ["cpu", "cuda"] if args.device == "all" else [args.device]
    if "cuda" in devices and not torch.cuda.is_available():
        devices.remove("cuda")
    print(f"{'device':6} {'call':18} {'size':>16} {'check us':>10} {'call us':>10} "
          f"{'share':>6}")
    for dev in devices:
        sync = torch.cuda.synchronize if dev == "cuda" else (lambda: None)
        impl = "triton" if dev == "cuda" else "ref"
        heads, d, bs = 8, 128, 16
        for tokens in (16, 512, 8192):
            nb = max(64, 4 * tokens // bs)
            kc = torch.zeros(nb, bs, heads, d, dtype=torch.bfloat16, device=dev)
            vc = torch.zeros_like(kc)
            k = torch.randn(tokens, heads, d, device=dev).to(torch.bfloat16)
            slots = torch.randperm(nb * bs, device=dev)[:tokens]
            c = median_us(lambda: check_ids([(slots, "slot_mapping", -1, nb * bs, "slot")]),
                          args.repeats, sync)
            f = median_us(lambda: reshape_and_cache(k, k, kc, vc, slots, impl=impl),
                          args.repeats, sync)
            print(f"{dev:6} {'reshape_and_cache':18} {f'{tokens} tokens':>16} {c:10.1f} "
                  f"{f:10.1f} {c / f:6.1%}")
        for batch, cols in ((8, 64), (64, 256)):
            nb = batch * cols
            kc = torch.zeros(nb, bs, heads, d, dtype=torch.bfloat16, device=dev)
            vc = torch.zeros_like(kc)
            table = torch.arange(nb, device=dev, dtype=torch.int32).view(batch, cols)
            lens = torch.full((batch,), cols * bs // 4, dtype=torch.int32, device=dev)
            c = median_us(lambda: check_block_table(table, lens, bs, nb), args.repeats, sync)
            f = median_us(lambda: gather_cache(kc, vc, table, lens,
                                               num_tokens=batch * cols * bs // 4, impl=impl),
                          args.repeats, sync)
            print(f"{dev:6} {'gather_cache':18} {f'{batch}x{cols} table':>16} {c:10.1f} "
                  f"{f:10.1f} {c / f:6.1%}")
        for pairs in (4, 256):
            nb = 4 * pairs
            kc = torch.zeros(nb, bs, heads, d, dtype=torch.bfloat16, device=dev)
            perm = torch.randperm(nb, device=dev)
            p = torch.stack((perm[:pairs], perm[pairs:2 * pairs]), 1)
            c = median_us(lambda: check_copy_pairs(p[:, 0], p[:, 1], nb), args.repeats, sync)
            f = median_us(lambda: copy_blocks([kc], p, impl=impl), args.repeats, sync)
            print(f"{dev:6} {'copy_blocks':18} {f'{pairs} pairs':>16} {c:10.1f} {f:10.1f} "
                  f"{c / f:6.1%}")


if __name__ == "__main__":
    main()
