"""Timings of the TurboQuant store / dequantize kernels, for the GPU harness (and a CPU
smoke run).

``BENCHMARKS`` maps a name to a callable ``fn(device: str = "cuda", tokens: int = ...,
repeats: int = ...) -> dict`` returning ``{"name", "device", "backend", "tokens",
"seconds_per_call", "bytes_moved", "gb_per_s"}`` (the contract of kvcore_mla.benchmarks).
Shapes: 8 KV heads, head size 128, block size 16, bf16 K/V.  ``bytes_moved`` counts the
bf16 K and V read plus the slots written (store), or the slots read plus the bf16 K and
V written (dequantize).

Run ``python -m kvcore_turboquant.benchmarks [device]`` to print one JSON line per result.
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Callable
from typing import Any

__all__ = ["BENCHMARKS", "run"]

PRESETS = ("turboquant_k8v4", "turboquant_4bit_nc", "turboquant_k3v4_nc",
           "turboquant_3bit_nc")
_HEADS, _D, _BLOCK = 8, 128, 16


def _sync(device: str) -> None:
    import torch

    if device.startswith("cuda"):
        torch.cuda.synchronize()


def _time(fn: Callable[[], Any], device: str, repeats: int) -> float:
    fn()  # warm-up (compiles the Triton kernel)
    _sync(device)
    t0 = time.perf_counter()
    for _ in range(repeats):
        fn()
    _sync(device)
    return (time.perf_counter() - t0) / repeats


def _setup(device: str, scheme: str, tokens: int) -> tuple:
    import torch

    from kvcore_turboquant.kernels import allocate_kv_cache

    g = torch.Generator(device="cpu").manual_seed(0)
    k = torch.randn(tokens, _HEADS, _D, generator=g).to(device=device, dtype=torch.bfloat16)
    v = torch.randn(tokens, _HEADS, _D, generator=g).to(device=device, dtype=torch.bfloat16)
    num_blocks = -(-tokens // _BLOCK) + 1
    cache = allocate_kv_cache(num_blocks, _BLOCK, _HEADS, scheme, head_size=_D, device=device)
    slots = torch.randperm(num_blocks * _BLOCK, generator=g)[:tokens].to(device)
    return k, v, cache, slots


def _backend(device: str) -> str:
    interp = os.environ.get("TRITON_INTERPRET", "") == "1"
    return "triton" if device.startswith("cuda") or interp else "torch"


def _result(name: str, device: str, tokens: int, sec: float, moved: int) -> dict:
    return {"name": name, "device": device, "backend": _backend(device), "tokens": tokens,
            "seconds_per_call": sec, "bytes_moved": moved, "gb_per_s": moved / sec / 1e9}


def _store(scheme: str) -> Callable[..., dict]:
    def bench(device: str = "cuda", tokens: int = 16384, repeats: int = 20) -> dict:
        from kvcore_turboquant.kernels import turboquant_store

        k, v, cache, slots = _setup(device, scheme, tokens)
        sec = _time(lambda: turboquant_store(k, v, cache, slots, scheme), device, repeats)
        moved = tokens * _HEADS * (2 * _D * 2 + cache.shape[-1])
        return _result(f"turboquant_store_{scheme}", device, tokens, sec, moved)
    return bench


def _dequant(scheme: str) -> Callable[..., dict]:
    def bench(device: str = "cuda", tokens: int = 16384, repeats: int = 20) -> dict:
        import torch

        from kvcore_turboquant.kernels import turboquant_dequant, turboquant_store

        k, v, cache, slots = _setup(device, scheme, tokens)
        turboquant_store(k, v, cache, slots, scheme)
        sec = _time(lambda: turboquant_dequant(cache, slots, scheme, head_size=_D,
                                               out_dtype=torch.bfloat16), device, repeats)
        moved = tokens * _HEADS * (cache.shape[-1] + 2 * _D * 2)
        return _result(f"turboquant_dequant_{scheme}", device, tokens, sec, moved)
    return bench


BENCHMARKS: dict[str, Callable[..., dict]] = {
    f"turboquant_{kind}_{scheme}": (_store if kind == "store" else _dequant)(scheme)
    for kind in ("store", "dequant") for scheme in PRESETS
}


def run(device: str = "cuda", **kwargs: Any) -> list[dict]:
    """Run every benchmark on ``device``; returns the result dicts."""
    return [fn(device, **kwargs) for fn in BENCHMARKS.values()]


if __name__ == "__main__":  # pragma: no cover - a manual tool
    dev = sys.argv[1] if len(sys.argv) > 1 else "cuda"
    small = {} if dev.startswith("cuda") else {"tokens": 256, "repeats": 3}
    for result in run(dev, **small):
        print(json.dumps(result))
