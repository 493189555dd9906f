"""Benchmarks of kvcore-kpool for ``benchmarks/gpu/run_all.py`` (harness-timed form).

``kpool_tail_write``: 16,384 tokens (one per request: a decode step of 16,384
requests) write a 128-channel bf16 key and gate into their ring blocks (kpool 16,
ring 16).  Bytes: keys and gates read and written (4 x 128 x 2 B per token) plus
positions and block ids (16 B per token).
``kpool_compress``: 16,384 completed pools (kpool 16) compressed to fp8 with a
power-of-two scale.  Bytes: each pool's keys and gates read once (2 x 16 x 128 x 2 B;
the kernel's second pass re-reads them from cache), 128 B of fp8 and a 4 B scale
written, 24 B of indices read.
``quick``: tiny shapes for CPU smoke runs.
"""

from __future__ import annotations

from typing import Any

__all__ = ["BENCHMARKS"]


def _setup_write(device: Any, quick: bool) -> tuple[Any, int]:
    import torch

    from kvcore_kpool.kernels import kpool_tail_write

    n, ring, d = (8, 16, 128) if quick else (16384, 16, 128)
    kr = torch.zeros(n + 1, ring, 1, d, device=device, dtype=torch.bfloat16)
    gr = torch.zeros_like(kr)
    keys = torch.randn(n, 1, d, device=device).to(torch.bfloat16)
    gates = torch.randn(n, 1, d, device=device).to(torch.bfloat16)
    pos = torch.randint(0, 100_000, (n,), device=device)
    blk = torch.arange(1, n + 1, device=device)

    def run() -> Any:
        return kpool_tail_write(keys, gates, pos, blk, kr, gr)

    return run, n * (4 * d * 2 + 16)


def _setup_compress(device: Any, quick: bool) -> tuple[Any, int]:
    import torch

    from kvcore_kpool.kernels import kpool_compress

    n, kpool, d = (4, 16, 128) if quick else (16384, 16, 128)
    kr = torch.randn(n, kpool, 1, d, device=device).to(torch.bfloat16)
    gr = torch.randn(n, kpool, 1, d, device=device).to(torch.bfloat16)
    blk = torch.arange(n, device=device)
    starts = torch.zeros(n, dtype=torch.long, device=device)
    slots = torch.arange(n, device=device)
    out = torch.zeros(n, 1, d, device=device, dtype=torch.float8_e4m3fn)
    sc = torch.zeros(n, 1, device=device)

    def run() -> Any:
        return kpool_compress(kr, gr, blk, starts, slots, out, sc, kpool)

    return run, n * (2 * kpool * d * 2 + d + 4 + 24)


BENCHMARKS = [
    {"name": "kpool_tail_write", "kind": "store", "setup": _setup_write,
     "description": "raw key + gate of 16,384 tokens into their ring blocks"},
    {"name": "kpool_compress", "kind": "other", "setup": _setup_compress,
     "description": "16,384 pools of 16: softmax pooling, Hadamard-128, fp8 + pow2 scale"},
]
