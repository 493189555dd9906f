"""Benchmarks of the MLA latent-cache kernels for ``benchmarks/gpu/run_all.py``.

``BENCHMARKS`` follows the harness's preferred (harness-timed) form: each entry has
``name``, ``kind`` (``store`` for the cache writes, ``load`` for the gathers),
``description`` and ``setup(device, quick) -> (run, bytes_moved)``.

Shapes: 131,072 tokens (``quick``: 256) of one layer, written to random slots of a
64-token-block cache (writes) or read back in order through one request's block table
(gathers).  ``bytes_moved`` per launch: writes read the bf16 latents (576 x 2 B per
token) and write the cache entries (1,152 B auto, 576 B fp8, 656 B fp8_ds_mla); gathers
read the entries and write bf16 ``[T, 576]``.  At full size every buffer is far larger
than the L2 cache (the bf16 latents alone are 151 MB).

``python -m kvcore_mla.benchmarks [device]`` times them without the harness and prints
one JSON line each.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable
from typing import Any

__all__ = ["BENCHMARKS"]

#: cache bytes of one token per kv_cache_dtype
ENTRY_BYTES = {"auto": 576 * 2, "fp8": 576, "fp8_ds_mla": 656}
BF16_LATENT_BYTES = 576 * 2
BLOCK_SIZE = 64
FULL_TOKENS = 131_072
QUICK_TOKENS = 256


def _inputs(device: Any, mode: str, tokens: int) -> tuple:
    import torch

    g = torch.Generator(device="cpu").manual_seed(0)
    kv_c = torch.randn(tokens, 512, generator=g).to(device=device, dtype=torch.bfloat16)
    k_pe = torch.randn(tokens, 64, generator=g).to(device=device, dtype=torch.bfloat16)
    num_blocks = -(-tokens // BLOCK_SIZE)
    if mode == "fp8_ds_mla":
        cache = torch.zeros(num_blocks, BLOCK_SIZE, 656, dtype=torch.uint8, device=device)
    elif mode == "fp8":
        cache = torch.zeros(num_blocks, BLOCK_SIZE, 576, dtype=torch.float8_e4m3fn,
                            device=device)
    else:
        cache = torch.zeros(num_blocks, BLOCK_SIZE, 576, dtype=torch.bfloat16,
                            device=device)
    slots = torch.randperm(num_blocks * BLOCK_SIZE, generator=g)[:tokens].to(device)
    return kv_c, k_pe, cache, slots, num_blocks


def _store(mode: str) -> Callable[[Any, bool], tuple]:
    def setup(device: Any, quick: bool) -> tuple:
        from kvcore_mla import ops

        tokens = QUICK_TOKENS if quick else FULL_TOKENS
        kv_c, k_pe, cache, slots, _ = _inputs(device, mode, tokens)
        scale = 0.05 if mode == "fp8" else None

        def run() -> None:
            ops.concat_and_cache_mla(kv_c, k_pe, cache, slots, mode, scale)

        return run, tokens * (BF16_LATENT_BYTES + ENTRY_BYTES[mode])
    return setup


def _load(mode: str) -> Callable[[Any, bool], tuple]:
    def setup(device: Any, quick: bool) -> tuple:
        import torch

        from kvcore_mla import ops

        tokens = QUICK_TOKENS if quick else FULL_TOKENS
        kv_c, k_pe, cache, _, num_blocks = _inputs(device, mode, tokens)
        scale = 0.05 if mode == "fp8" else None
        ops.concat_and_cache_mla(kv_c, k_pe, cache, torch.arange(tokens, device=device),
                                 mode, scale)
        block_table = torch.arange(num_blocks, device=device, dtype=torch.int32)[None]
        seq_lens = torch.tensor([tokens], device=device)

        def run() -> Any:
            return ops.gather_mla_cache(cache, block_table, seq_lens, mode, scale,
                                        num_tokens=tokens)

        return run, tokens * (ENTRY_BYTES[mode] + BF16_LATENT_BYTES)
    return setup


BENCHMARKS: list[dict[str, Any]] = []
for _mode in ("auto", "fp8", "fp8_ds_mla"):
    BENCHMARKS.append({
        "name": f"mla_concat_and_cache[{_mode}]", "kind": "store", "setup": _store(_mode),
        "description": f"write bf16 latents (512 + 64) into a 64-token-block {_mode} "
                       f"MLA cache at random slots"})
    BENCHMARKS.append({
        "name": f"mla_gather[{_mode}]", "kind": "load", "setup": _load(_mode),
        "description": f"read a {_mode} MLA cache back to bf16 [T, 576] through a block "
                       f"table"})


def _main(device_name: str) -> None:  # pragma: no cover - a manual tool
    import torch

    device = torch.device(device_name)
    quick = device.type != "cuda"
    for entry in BENCHMARKS:
        run, moved = entry["setup"](device, quick)
        run()
        if device.type == "cuda":
            torch.cuda.synchronize()
        reps = 3 if quick else 20
        t0 = time.perf_counter()
        for _ in range(reps):
            run()
        if device.type == "cuda":
            torch.cuda.synchronize()
        sec = (time.perf_counter() - t0) / reps
        print(json.dumps({"name": entry["name"], "seconds_per_call": sec,
                          "bytes_moved": moved, "gb_per_s": moved / sec / 1e9}))


if __name__ == "__main__":  # pragma: no cover
    _main(sys.argv[1] if len(sys.argv) > 1 else "cuda")
