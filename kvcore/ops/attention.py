"""Reference attention (torch): paged decode through a block table, and dense.

These are oracles for tests and examples, not fast kernels: they compute in float32
and loop over requests.  Masking follows the spec kinds: causal; a sliding window of
``w`` lets query position ``q`` see key positions ``q - w + 1 .. q`` (the token itself
included, as :class:`~kvcore.specs.SlidingWindowSpec` counts it; Mistral / Gemma
``sliding_window``).  Grouped-query attention: query head ``i`` reads KV head
``i // (num_heads // num_kv_heads)``.
"""

from __future__ import annotations

import math
from typing import Any

from kvcore.errors import KVCoreError
from kvcore.ops.cache import _dequantize_ref, _scale_tensors
from kvcore.ops.checks import block_table_and_lens
from kvcore.ops.layout import canonical_kv_cache_dtype

__all__ = ["paged_decode_attention_ref", "dense_attention_ref"]


def _attend(q: Any, k: Any, v: Any, scale: float, mask: Any | None) -> Any:
    """q [Tq, Hq, D], k [Tk, H, D], v [Tk, H, Dv], mask [Tq, Tk] bool -> [Tq, Hq, Dv]."""
    hq, h = q.shape[1], k.shape[1]
    if hq % h:
        raise KVCoreError(f"num_heads {hq} is not a multiple of num_kv_heads {h}",
                          field="query")
    rep = hq // h
    k = k.float().repeat_interleave(rep, dim=1)
    v = v.float().repeat_interleave(rep, dim=1)
    logits = (q.float().transpose(0, 1) @ k.permute(1, 2, 0)) * scale  # [Hq, Tq, Tk]
    if mask is not None:
        logits = logits.masked_fill(~mask[None], float("-inf"))
    probs = logits.softmax(dim=-1)
    return (probs @ v.transpose(0, 1)).transpose(0, 1)  # [Tq, Hq, Dv]


def dense_attention_ref(query: Any, key: Any, value: Any, *, scale: float | None = None,
                        causal: bool = True, sliding_window: int | None = None,
                        q_start: int | None = None) -> Any:
    """Attention of ``query`` over contiguous ``key`` / ``value`` of one sequence.

    Parameters
    ----------
    query : torch.Tensor
        ``[num_q_tokens, num_heads, head_size]``; query ``i`` sits at position
        ``q_start + i``.
    key, value : torch.Tensor
        ``[num_tokens, num_kv_heads, head_size]`` / ``[..., head_size_v]``; key ``j`` at
        position ``j``.
    scale : float, optional
        Logit scale; default ``1 / sqrt(head_size)``.
    causal : bool
        Mask keys after the query position.
    sliding_window : int, optional
        Keep only keys with ``q_pos - k_pos < sliding_window``.
    q_start : int, optional
        Position of the first query; default ``num_tokens - num_q_tokens`` (the queries
        are the last tokens).

    Returns
    -------
    torch.Tensor
        ``[num_q_tokens, num_heads, head_size_v]``, dtype of ``query``.
    """
    import torch

    tq, tk = query.shape[0], key.shape[0]
    start = tk - tq if q_start is None else q_start
    scale = 1.0 / math.sqrt(query.shape[-1]) if scale is None else scale
    q_pos = torch.arange(start, start + tq, device=query.device)[:, None]
    k_pos = torch.arange(tk, device=query.device)[None, :]
    mask = torch.ones(tq, tk, dtype=torch.bool, device=query.device)
    if causal:
        mask &= k_pos <= q_pos
    if sliding_window is not None:
        mask &= (q_pos - k_pos) < sliding_window
    return _attend(query, key, value, scale, mask).to(query.dtype)


def paged_decode_attention_ref(query: Any, key_cache: Any, value_cache: Any,
                               block_table: Any, seq_lens: Any, *,
                               kv_cache_dtype: str = "auto", k_scale: Any = 1.0,
                               v_scale: Any = 1.0, scale: float | None = None,
                               sliding_window: int | None = None) -> Any:
    """Decode attention (one query token per request) over a paged KV cache.

    Query ``b`` is token ``seq_lens[b] - 1`` of request ``b`` and attends to positions
    ``max(0, seq_lens[b] - sliding_window) .. seq_lens[b] - 1``, read through the
    block table (positions outside the window are never read, so their block-table
    entries may be the null block, as the sliding-window manager leaves them).

    Parameters
    ----------
    query : torch.Tensor
        ``[batch, num_heads, head_size]``.
    key_cache, value_cache : torch.Tensor
        ``[num_blocks, block_size, num_kv_heads, head_size(_v)]`` (see
        :mod:`kvcore.ops.cache`).
    block_table : torch.Tensor
        ``[batch, max_blocks_per_req]`` int; a negative id (the null block as
        :func:`kvcore.runtime.kernel_tables.block_tables` maps it) is never read: its
        positions are left out of the softmax (all left out: zeros).
    seq_lens : torch.Tensor
        ``[batch]`` int, tokens of each request including the query token (>= 1).
        Checked first (:mod:`kvcore.ops.checks`, ``KernelArgumentError``): lengths in
        ``[0, max_blocks_per_req x block_size]``, the block ids read in
        ``[-1, num_blocks)``.
    kv_cache_dtype, k_scale, v_scale :
        As for :func:`kvcore.ops.gather_cache` (values are dequantized).
    scale : float, optional
        Logit scale; default ``1 / sqrt(head_size)``.
    sliding_window : int, optional
        Window in tokens (the query token included).

    Returns
    -------
    torch.Tensor
        ``[batch, num_heads, head_size_v]``, dtype of ``query``.
    """
    import torch

    kv_dtype = canonical_kv_cache_dtype(kv_cache_dtype)
    ks, vs = _scale_tensors(k_scale, v_scale, kv_dtype, key_cache)
    scale = 1.0 / math.sqrt(query.shape[-1]) if scale is None else scale
    block_size = key_cache.shape[1]
    # the sliding window reads only its own blocks, but a table entry before the
    # window is the null block (-1) or a live id: both in range
    block_table, seq_lens = block_table_and_lens(block_table, seq_lens, key_cache.device,
                                                 block_size, key_cache.shape[0],
                                                 num_reqs=query.shape[0])
    outs = []
    for b, n in enumerate(seq_lens.tolist()):
        start = 0 if sliding_window is None else max(0, n - sliding_window)
        pos = torch.arange(start, n, device=block_table.device)
        blk = block_table[b].long()[pos // block_size].to(key_cache.device)
        off = (pos % block_size).to(key_cache.device)
        keep = blk >= 0  # a negative id (the null block, padding) is never read
        blk, off = blk[keep], off[keep]
        if blk.numel() == 0:
            outs.append(torch.zeros(query.shape[1], value_cache.shape[3],
                                    dtype=torch.float32, device=query.device))
            continue
        kv = []
        for cache, s in ((key_cache, ks), (value_cache, vs)):
            sc = s if s is None or s.numel() == 1 else s[blk, off]
            kv.append(_dequantize_ref(cache[blk, off], sc, kv_dtype, torch.float32))
        outs.append(_attend(query[b:b + 1], kv[0], kv[1], scale, None)[0])
    return torch.stack(outs).to(query.dtype)
