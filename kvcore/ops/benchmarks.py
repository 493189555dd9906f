"""Benchmarks of the core kernels, in the form ``benchmarks/gpu/run_all.py`` collects.

``BENCHMARKS`` is a list of :class:`Benchmark`: ``name``, ``kind`` (``store``, ``load``,
``copy``; the GPU acceptance check compares the ``store`` ones with the device copy
bandwidth) and ``setup(device, quick) -> (run, bytes_moved)``, which allocates inputs
on ``device`` and returns a closure launching the kernel once plus the bytes one launch
reads and writes in device memory.  Sizes: a Llama-3.1-8B-like layer (8 KV heads of
128 channels, block size 16, bf16 inputs), 16,384 tokens per store / gather (larger
than the L2 cache of current GPUs, so the figures are DRAM bandwidth); ``quick`` uses a
tiny shape for CPU smoke runs.

Bytes counted per kernel:

- store (``reshape_and_cache``): K and V read (bf16) + K and V written (cache element
  size) + per-token-head scales written (4 B per token per head, K and V) + slot_mapping
  read (8 B per token);
- load (``gather_cache``): the cache bytes read (values + scales) + the output written
  (bf16) + block table and seq_lens read;
- copy (``copy_blocks``): each copied page read and written.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

__all__ = ["Benchmark", "BENCHMARKS"]

Run = Callable[[], Any]


@dataclass(frozen=True)
class Benchmark:
    """One timed kernel launch (see the module docstring)."""

    name: str
    setup: Callable[[Any, bool], tuple[Run, int]]
    kind: str = "other"
    description: str = ""


def _shape(quick: bool) -> tuple[int, int, int, int]:
    """(tokens, num_kv_heads, head_size, block_size)."""
    return (64, 2, 32, 16) if quick else (16384, 8, 128, 16)


def _layer(device: Any, kv_dtype: str, tokens: int, heads: int, d: int, bs: int,
           extra_blocks: int = 1) -> Any:
    from kvcore.kv_cache_config import KVCacheConfig, KVCacheGroupSpec, KVCacheTensor
    from kvcore.ops.allocate import allocate_tensors
    from kvcore.specs import FullAttentionSpec

    spec = FullAttentionSpec(block_size=bs, num_kv_heads=heads, head_size=d,
                             kv_cache_dtype=kv_dtype)
    nb = -(-tokens // bs) + extra_blocks
    cfg = KVCacheConfig(num_blocks=nb, kv_cache_groups=[KVCacheGroupSpec(["l"], spec)],
                        kv_cache_tensors=[KVCacheTensor(nb * spec.page_size_bytes, ["l"])])
    return allocate_tensors(cfg, device)["l"], nb


def _prefill_slots(torch: Any, tokens: int, bs: int, nb: int, device: Any) -> Any:
    """Slots of one long prefill: consecutive tokens fill randomly ordered blocks."""
    g = torch.Generator().manual_seed(0)
    blocks = torch.randperm(nb - 1, generator=g)[: -(-tokens // bs)] + 1
    t = torch.arange(tokens)
    return (blocks[t // bs] * bs + t % bs).to(device)


def _scales(layer: Any, kv_dtype: str) -> tuple[Any, Any]:
    if layer.key_scale is not None:
        return layer.key_scale, layer.value_scale
    return (0.05, 0.05) if kv_dtype == "fp8" else (1.0, 1.0)


def _store(kv_dtype: str, decode: bool = False) -> Callable[[Any, bool], tuple[Run, int]]:
    def setup(device: Any, quick: bool) -> tuple[Run, int]:
        import torch

        from kvcore.ops.cache import reshape_and_cache

        tokens, heads, d, bs = _shape(quick)
        if decode:
            tokens = 16 if quick else 256
        layer, nb = _layer(device, kv_dtype, tokens if not decode else tokens * bs,
                           heads, d, bs)
        key = torch.randn(tokens, heads, d, device=device, dtype=torch.bfloat16)
        value = torch.randn(tokens, heads, d, device=device, dtype=torch.bfloat16)
        if decode:  # one token in each of `tokens` requests: one slot per block
            g = torch.Generator().manual_seed(1)
            slots = ((torch.randperm(nb - 1, generator=g)[:tokens] + 1) * bs
                     + torch.randint(0, bs, (tokens,), generator=g)).to(device)
        else:
            slots = _prefill_slots(torch, tokens, bs, nb, device)
        ks, vs = _scales(layer, kv_dtype)
        out_isz = layer.key.element_size()
        moved = tokens * heads * 2 * d * (2 + out_isz) + tokens * 8
        if layer.key_scale is not None:
            moved += tokens * heads * 2 * 4

        def run() -> None:
            reshape_and_cache(key, value, layer.key, layer.value, slots, kv_dtype, ks, vs)

        return run, moved

    return setup


def _gather(kv_dtype: str) -> Callable[[Any, bool], tuple[Run, int]]:
    def setup(device: Any, quick: bool) -> tuple[Run, int]:
        import torch

        from kvcore.ops.cache import gather_cache

        tokens, heads, d, bs = _shape(quick)
        batch = 2 if quick else 8
        per_req = tokens // batch
        layer, nb = _layer(device, kv_dtype, tokens, heads, d, bs, extra_blocks=batch + 1)
        g = torch.Generator().manual_seed(0)
        blocks = torch.randperm(nb - 1, generator=g) + 1
        width = -(-per_req // bs)
        table = blocks[: batch * width].reshape(batch, width).to(torch.int32).to(device)
        seq_lens = torch.full((batch,), per_req, dtype=torch.int32, device=device)
        ks, vs = _scales(layer, kv_dtype)
        cache_isz = layer.key.element_size()
        total = batch * per_req
        moved = total * heads * 2 * d * (cache_isz + 2) + table.numel() * 4 + batch * 4
        if layer.key_scale is not None:
            moved += total * heads * 2 * 4

        def run() -> None:
            gather_cache(layer.key, layer.value, table, seq_lens, kv_dtype, ks, vs,
                         out_dtype=torch.bfloat16, num_tokens=total)

        return run, moved

    return setup


def _copy(device: Any, quick: bool) -> tuple[Run, int]:
    import torch

    from kvcore.ops.cache import copy_blocks

    tokens, heads, d, bs = _shape(quick)
    pairs_n = 4 if quick else 1024
    layer, nb = _layer(device, "auto", 2 * pairs_n * bs, heads, d, bs)
    g = torch.Generator().manual_seed(0)
    ids = torch.randperm(nb - 1, generator=g)[: 2 * pairs_n] + 1
    pairs = ids.reshape(pairs_n, 2).to(device)
    moved = 2 * pairs_n * layer.raw.shape[1]

    def run() -> None:
        copy_blocks([layer.raw], pairs)

    return run, moved


BENCHMARKS: list[Benchmark] = [
    *(Benchmark(f"reshape_and_cache[{dt}]", _store(dt), "store",
                "prefill: 16,384 tokens, 8 KV heads x 128, bf16 in")
      for dt in ("auto", "fp8", "int8_per_token_head", "fp8_per_token_head")),
    Benchmark("reshape_and_cache[auto,decode]", _store("auto", decode=True), "store_small",
              "decode: 256 requests x 1 token (launch-bound; not in the store check)"),
    *(Benchmark(f"gather_cache[{dt}]", _gather(dt), "load",
                "8 requests x 2,048 tokens, bf16 out")
      for dt in ("auto", "fp8", "int8_per_token_head")),
    Benchmark("copy_blocks[raw pages]", _copy, "copy", "1,024 pages of 64 KiB"),
]


def verify(device: Any, quick: bool = False) -> list[tuple[str, bool, str]]:
    """Run each core kernel through Triton and through the torch reference on ``device``
    and compare the bytes: ``[(case, equal, detail)]``.  For a GPU machine, where the
    CPU test suite cannot reach the compiled kernels (it runs them in the interpreter).
    """
    import torch

    from kvcore.ops.cache import copy_blocks, gather_cache, reshape_and_cache

    tokens, heads, d, bs = (24, 2, 16, 8) if quick else (4096, 8, 128, 16)
    out = []
    for kv_dtype in ("auto", "float32", "fp8", "fp8_e5m2", "int8_per_token_head",
                     "fp8_per_token_head"):
        try:
            g = torch.Generator().manual_seed(0)
            in_dtype = torch.float32 if kv_dtype == "float32" else torch.bfloat16
            key = (torch.randn(tokens, heads, d, generator=g) * 4).to(device, in_dtype)
            value = torch.randn(tokens, heads, d, generator=g).to(device, in_dtype)
            res = []
            for impl in ("ref", "triton"):
                layer, nb = _layer(device, kv_dtype, tokens, heads, d, bs, extra_blocks=3)
                slots = _prefill_slots(torch, tokens, bs, nb, device)
                slots[::7] = -1
                ks, vs = _scales(layer, kv_dtype)
                reshape_and_cache(key, value, layer.key, layer.value, slots, kv_dtype, ks,
                                  vs, impl=impl)
                table = (slots[::bs].clamp_min(0) // bs).reshape(1, -1)
                lens = torch.tensor([table.shape[1] * bs], device=device)
                k, v = gather_cache(layer.key, layer.value, table, lens, kv_dtype, ks, vs,
                                    out_dtype=torch.bfloat16, impl=impl)
                copy_blocks([layer.raw], torch.tensor([[1, nb - 1]], device=device),
                            impl=impl)
                res.append((layer.raw.clone(), k, v))
            diffs = [int((a != b).sum()) for a, b in zip(res[0], res[1])]
            ok = all(x == 0 for x in diffs)
            out.append((kv_dtype, ok, f"differing elements (pages, key, value): {diffs}"))
        except Exception as exc:  # report, keep going
            out.append((kv_dtype, False, f"{type(exc).__name__}: {exc}"))
    return out
