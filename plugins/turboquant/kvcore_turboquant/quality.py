"""Attention quality of TurboQuant K/V: cosine similarity of attention outputs.

``python -m kvcore_turboquant.quality [--schemes ...] [--head-size 128] [--seq-len 1024]
[--num-kv-heads 8] [--gqa 4] [--num-queries 16] [--seed 0] [--json]``

Random inputs (q, k, v ~ N(0, 1), bf16-rounded): the reference output is softmax(q k^T /
sqrt(D)) v computed in float32 from the bf16 K and V; the TurboQuant output uses K and V
stored and dequantized by the scheme (torch reference kernels).  Reports, per scheme,
the cosine similarity between the two outputs per (query, head): mean and minimum, and
the bytes per token per KV head against bf16.  Prints a markdown table (the README's).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence

__all__ = ["attention_cosine", "main", "PRESET_ORDER"]

PRESET_ORDER = ("turboquant_k8v4", "turboquant_4bit_nc", "turboquant_k3v4_nc",
                "turboquant_3bit_nc")


def attention_cosine(scheme: str, *, head_size: int = 128, seq_len: int = 1024,
                     num_kv_heads: int = 8, gqa: int = 4, num_queries: int = 16,
                     seed: int = 0) -> dict:
    """Cosine similarity of attention outputs (dequantized K/V vs bf16 K/V).

    Returns ``{"scheme", "bytes_per_token_head", "compression", "cos_mean", "cos_min"}``
    (compression = bf16 bytes / scheme bytes per token per head).
    """
    import torch

    from kvcore_turboquant.kernels import (
        allocate_kv_cache,
        turboquant_dequant_ref,
        turboquant_store_ref,
    )
    from kvcore_turboquant.schemes import turboquant_config

    cfg = turboquant_config(scheme)
    g = torch.Generator().manual_seed(seed)
    d, h, t = head_size, num_kv_heads, seq_len
    q = torch.randn(num_queries, h * gqa, d, generator=g).bfloat16().float()
    k = torch.randn(t, h, d, generator=g).bfloat16()
    v = torch.randn(t, h, d, generator=g).bfloat16()
    bs = 16
    cache = allocate_kv_cache(-(-t // bs), bs, h, cfg, head_size=d)
    slots = torch.arange(t)
    turboquant_store_ref(k, v, cache, slots, cfg)
    kq, vq = turboquant_dequant_ref(cache, slots, cfg, d, d)

    def attend(kk, vv):
        kk = kk.float().repeat_interleave(gqa, dim=1)  # [t, Hq, d]
        vv = vv.float().repeat_interleave(gqa, dim=1)
        logits = torch.einsum("qhd,thd->hqt", q, kk) / d ** 0.5
        return torch.einsum("hqt,thd->qhd", logits.softmax(-1), vv)

    ref, out = attend(k, v), attend(kq, vq)
    cos = torch.nn.functional.cosine_similarity(ref, out, dim=-1)
    nbytes = cfg.slot_bytes(d)
    return {"scheme": scheme, "general_name": cfg.name, "bytes_per_token_head": nbytes,
            "compression": 4 * d / nbytes, "cos_mean": float(cos.mean()),
            "cos_min": float(cos.min())}


def markdown(rows: list[dict], head_size: int) -> str:
    lines = [f"| kv_cache_dtype | bytes/token/head (D={head_size}) | vs bf16 | "
             "cos mean | cos min |", "|---|---:|---:|---:|---:|"]
    for r in rows:
        lines.append(f"| `{r['scheme']}` | {r['bytes_per_token_head']} | "
                     f"{r['compression']:.2f}x | {r['cos_mean']:.5f} | {r['cos_min']:.5f} |")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m kvcore_turboquant.quality",
                                description=__doc__.split("\n\n")[0])
    p.add_argument("--schemes", nargs="+", default=list(PRESET_ORDER))
    p.add_argument("--head-size", type=int, default=128)
    p.add_argument("--seq-len", type=int, default=1024)
    p.add_argument("--num-kv-heads", type=int, default=8)
    p.add_argument("--gqa", type=int, default=4, help="query heads per KV head")
    p.add_argument("--num-queries", type=int, default=16)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", action="store_true")
    a = p.parse_args(argv)
    rows = [attention_cosine(s, head_size=a.head_size, seq_len=a.seq_len,
                             num_kv_heads=a.num_kv_heads, gqa=a.gqa,
                             num_queries=a.num_queries, seed=a.seed) for s in a.schemes]
    if a.json:
        print(json.dumps({"settings": vars(a), "results": rows}))
    else:
        print(markdown(rows, a.head_size))
    return 0


if __name__ == "__main__":
    sys.exit(main())
