"""Benchmarks of kvcore-rswa for ``benchmarks/gpu/run_all.py`` (harness-timed form).

``rswa_decode``: :func:`kvcore_rswa.kernels.rswa_decode_attention` for 64 sequences
of prompt 4,096 + 8,192 generated tokens, window 128 (the gap of 8,064 tokens per
sequence holds the null block and is not read), 32 query heads over 8 KV heads of
128 channels, bf16, block 16.  Bytes moved per launch: the visible K and V (4,224
tokens x 8 heads x 256 x 2 B per sequence), the queries and outputs, block tables and
lengths.  ``quick``: a tiny shape for CPU smoke runs.
"""

from __future__ import annotations

from typing import Any

__all__ = ["BENCHMARKS"]


def _setup_decode(device: Any, quick: bool) -> tuple[Any, int]:
    import torch

    from kvcore_rswa.kernels import rswa_decode_attention

    if quick:
        seqs, prompt, gen, window, heads, kv_heads, d, bs = 2, 40, 60, 16, 2, 1, 32, 16
    else:
        seqs, prompt, gen, window, heads, kv_heads, d, bs = 64, 4096, 8192, 128, 32, 8, 128, 16
    seq_len = prompt + gen
    blocks_per_seq = -(-seq_len // bs)
    num_blocks = seqs * blocks_per_seq + 1
    dtype = torch.bfloat16
    kc = torch.randn(num_blocks, bs, kv_heads, d, device=device).to(dtype)
    vc = torch.randn(num_blocks, bs, kv_heads, d, device=device).to(dtype)
    bt = (torch.arange(seqs * blocks_per_seq, device=device, dtype=torch.int32)
          .view(seqs, blocks_per_seq) + 1)
    first, last = -(-prompt // bs), max(prompt, seq_len - 1 - window + 1) // bs
    bt[:, first:last] = 0                                 # the freed gap
    q = torch.randn(seqs, heads, d, device=device).to(dtype)
    sl = torch.full((seqs,), seq_len, device=device, dtype=torch.int32)
    pl = torch.full((seqs,), prompt, device=device, dtype=torch.int32)
    visible = prompt + min(window, gen)
    nbytes = seqs * (visible * kv_heads * 2 * d * 2 + 2 * heads * d * 2
                     + blocks_per_seq * 4 + 8)

    def run() -> Any:
        return rswa_decode_attention(q, kc, vc, bt, sl, pl, window)

    return run, nbytes


BENCHMARKS = [
    {"name": "rswa_decode", "kind": "load", "setup": _setup_decode,
     "description": "R-SWA paged decode attention, prompt 4096 + window 128 visible"},
]
