"""Timings of the MLA latent-cache kernels, for the GPU harness (and a CPU smoke run).

``BENCHMARKS`` maps a name to a callable ``fn(device: str = "cuda", tokens: int = ...,
repeats: int = ...) -> dict`` returning ``{"name", "device", "backend", "tokens",
"seconds_per_call", "bytes_moved", "gb_per_s"}``.  ``bytes_moved`` counts the input
latents read plus the cache bytes written (write kernels) or the cache bytes read plus
the bf16 output written (gather kernels).

Run ``python -m kvcore_mla.benchmarks [device]`` to print every result as one JSON line.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable
from typing import Any

__all__ = ["BENCHMARKS", "run"]

_WIDTH = {"auto": 576 * 2, "fp8": 576, "fp8_ds_mla": 656}


def _sync(device: str) -> None:
    import torch

    if device.startswith("cuda"):
        torch.cuda.synchronize()


def _setup(device: str, mode: str, tokens: int, block_size: int = 64) -> tuple:
    import torch

    g = torch.Generator(device="cpu").manual_seed(0)
    kv_c = torch.randn(tokens, 512, generator=g).to(device=device, dtype=torch.bfloat16)
    k_pe = torch.randn(tokens, 64, generator=g).to(device=device, dtype=torch.bfloat16)
    num_blocks = -(-tokens // block_size) + 1
    if mode == "fp8_ds_mla":
        cache = torch.zeros(num_blocks, block_size, 656, dtype=torch.uint8, device=device)
    elif mode == "fp8":
        cache = torch.zeros(num_blocks, block_size, 576, dtype=torch.float8_e4m3fn,
                            device=device)
    else:
        cache = torch.zeros(num_blocks, block_size, 576, dtype=torch.bfloat16, device=device)
    perm = torch.randperm(num_blocks * block_size, generator=g)[:tokens]
    return kv_c, k_pe, cache, perm.to(device), num_blocks


def _time(fn: Callable[[], Any], device: str, repeats: int) -> float:
    fn()  # warm-up (compiles the Triton kernel)
    _sync(device)
    t0 = time.perf_counter()
    for _ in range(repeats):
        fn()
    _sync(device)
    return (time.perf_counter() - t0) / repeats


def _write(mode: str) -> Callable[..., dict]:
    def bench(device: str = "cuda", tokens: int = 16384, repeats: int = 20) -> dict:
        from kvcore_mla import ops

        kv_c, k_pe, cache, slots, _ = _setup(device, mode, tokens)
        scale = 0.05 if mode == "fp8" else None
        sec = _time(lambda: ops.concat_and_cache_mla(kv_c, k_pe, cache, slots, mode, scale),
                    device, repeats)
        moved = tokens * (576 * 2 + _WIDTH[mode])
        return {"name": f"mla_concat_and_cache_{mode}", "device": device,
                "backend": "triton" if ops.use_triton(cache) else "ref", "tokens": tokens,
                "seconds_per_call": sec, "bytes_moved": moved, "gb_per_s": moved / sec / 1e9}
    return bench


def _gather(mode: str) -> Callable[..., dict]:
    def bench(device: str = "cuda", tokens: int = 16384, repeats: int = 20) -> dict:
        import torch

        from kvcore_mla import ops

        kv_c, k_pe, cache, _, num_blocks = _setup(device, mode, tokens)
        scale = 0.05 if mode == "fp8" else None
        slots = torch.arange(tokens, device=device)
        ops.concat_and_cache_mla(kv_c, k_pe, cache, slots, mode, scale)
        bt = torch.arange(num_blocks, device=device, dtype=torch.int32)[None]
        lens = torch.tensor([tokens], device=device)
        sec = _time(lambda: ops.gather_mla_cache(cache, bt, lens, mode, scale), device,
                    repeats)
        moved = tokens * (_WIDTH[mode] + 576 * 2)
        return {"name": f"mla_gather_{mode}", "device": device,
                "backend": "triton" if ops.use_triton(cache) else "ref", "tokens": tokens,
                "seconds_per_call": sec, "bytes_moved": moved, "gb_per_s": moved / sec / 1e9}
    return bench


BENCHMARKS: dict[str, Callable[..., dict]] = {
    f"mla_{kind}_{mode}": (_write if kind == "concat_and_cache" else _gather)(mode)
    for kind in ("concat_and_cache", "gather") for mode in ("auto", "fp8", "fp8_ds_mla")
}


def run(device: str = "cuda", **kwargs: Any) -> list[dict]:
    """Run every benchmark on ``device``; returns the result dicts."""
    return [fn(device, **kwargs) for fn in BENCHMARKS.values()]


if __name__ == "__main__":  # pragma: no cover - a manual tool
    dev = sys.argv[1] if len(sys.argv) > 1 else "cuda"
    small = {} if dev.startswith("cuda") else {"tokens": 256, "repeats": 3}
    for result in run(dev, **small):
        print(json.dumps(result))
