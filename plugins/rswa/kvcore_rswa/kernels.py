"""R-SWA paged decode attention: a torch reference and a Triton kernel.

Both compute, for each sequence ``s`` and query head ``h``, the attention of the
sequence's newest token (absolute position ``q = seq_lens[s] - 1``, its own K/V
already written into the cache) over the keys R-SWA lets it see
(:func:`kvcore_rswa.spec.rswa_visible`): every prompt position ``k <
prompt_lens[s]`` and the generated positions ``q - rswa_window < k <= q``.  Keys are
read through the block table: position ``k`` lives in block ``block_tables[s, k //
block_size]`` at offset ``k % block_size``.  Blocks the R-SWA manager freed hold the
null block id in the table; neither kernel reads them (the Triton kernel skips the
gap's blocks entirely and masks its loads, the reference gathers only visible
positions), so garbage in the null block never reaches the output.  A negative id
in the table (the null block as :func:`kvcore.runtime.kernel_tables.block_tables` maps
it, or padding) is never read either: its positions are left out of the softmax.

The dispatcher :func:`rswa_decode_attention` runs Triton on CUDA tensors or under
``TRITON_INTERPRET=1`` and the reference otherwise.  Importing this module imports
torch; Triton is imported on first use.
"""

from __future__ import annotations

import math
import os
from typing import Any

import torch

from kvcore.errors import KernelArgumentError
from kvcore.ops.checks import check_block_table, check_dtype, index_tensor

__all__ = [
    "rswa_decode_attention",
    "rswa_decode_attention_ref",
    "rswa_decode_attention_triton",
    "rswa_visible_slots",
]


def _err(message: str, field: str, value: Any = None) -> KernelArgumentError:
    return KernelArgumentError(message, field=field, value=value)


def _check(query: torch.Tensor, key_cache: torch.Tensor, value_cache: torch.Tensor,
           block_tables: Any, seq_lens: Any, prompt_lens: Any,
           rswa_window: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """All checks, on the host before any launch (kvcore.ops.checks); returns
    ``(block_tables, seq_lens, prompt_lens)`` as int tensors (lists are converted)."""
    for name, t in (("query", query), ("key_cache", key_cache),
                    ("value_cache", value_cache)):
        if not isinstance(t, torch.Tensor):
            raise _err(f"{name} must be a torch.Tensor; got {type(t).__name__}", name)
    if query.dim() != 3 or key_cache.dim() != 4 or value_cache.dim() != 4:
        raise _err(
            f"expected query [num_seqs, num_heads, head_size] and caches [num_blocks, "
            f"block_size, num_kv_heads, head_size], got {tuple(query.shape)}, "
            f"{tuple(key_cache.shape)}, {tuple(value_cache.shape)}", "query",
            tuple(query.shape))
    check_dtype(query, "query")
    num_heads, num_kv_heads = query.shape[1], key_cache.shape[2]
    if num_heads % num_kv_heads:
        raise _err(f"num_heads {num_heads} is not a multiple of num_kv_heads "
                   f"{num_kv_heads}", "query", num_heads)
    if key_cache.shape[:3] != value_cache.shape[:3]:
        raise _err(f"key_cache {tuple(key_cache.shape)} and value_cache "
                   f"{tuple(value_cache.shape)} differ in blocks, tokens or heads",
                   "value_cache", tuple(value_cache.shape))
    if query.shape[2] != key_cache.shape[3]:
        raise _err(f"query head_size {query.shape[2]} != key_cache head_size "
                   f"{key_cache.shape[3]}", "query", query.shape[2])
    block_tables = index_tensor(block_tables, "block_tables", key_cache.device)
    seq_lens = index_tensor(seq_lens, "seq_lens", key_cache.device)
    prompt_lens = index_tensor(prompt_lens, "prompt_lens", key_cache.device)
    n = query.shape[0]
    if block_tables.dim() != 2 or block_tables.shape[0] != n \
            or seq_lens.shape != (n,) or prompt_lens.shape != (n,):
        raise _err("block_tables [num_seqs, max_blocks], seq_lens and prompt_lens must "
                   f"have one row per sequence ({n}); got {tuple(block_tables.shape)}, "
                   f"{tuple(seq_lens.shape)}, {tuple(prompt_lens.shape)}", "block_tables",
                   tuple(block_tables.shape))
    if not isinstance(rswa_window, int) or isinstance(rswa_window, bool) or rswa_window < 1:
        raise _err(f"rswa_window must be a positive int, got {rswa_window!r}",
                   "rswa_window", rswa_window)
    # the gap's entries are the null block (in range); every entry up to the length is
    # checked, as a kernel may read any of them
    check_block_table(block_tables, seq_lens, key_cache.shape[1], key_cache.shape[0],
                      table_name="block_tables")
    return block_tables, seq_lens, prompt_lens


def rswa_visible_slots(block_table: torch.Tensor, seq_len: int, prompt_len: int,
                       rswa_window: int, block_size: int) -> tuple[torch.Tensor, ...]:
    """The positions the newest token of one sequence sees, and where they are stored.

    Parameters
    ----------
    block_table: int tensor ``[max_blocks_per_seq]``.
    seq_len, prompt_len: tokens of the sequence (the query included) and of its prompt.

    Returns
    -------
    ``(positions, block_ids, offsets)``: int64 tensors ``[num_visible]``; positions
    ascending.
    """
    q = seq_len - 1
    pos = torch.arange(seq_len, dtype=torch.int64, device=block_table.device)
    keep = (pos < prompt_len) | (q - pos < rswa_window)
    pos = pos[keep]
    block_ids = block_table.to(torch.int64)[pos // block_size]
    return pos, block_ids, pos % block_size


def rswa_decode_attention_ref(query: torch.Tensor, key_cache: torch.Tensor,
                              value_cache: torch.Tensor, block_tables: torch.Tensor,
                              seq_lens: torch.Tensor, prompt_lens: torch.Tensor,
                              rswa_window: int, scale: float | None = None) -> torch.Tensor:
    """Torch reference of :func:`rswa_decode_attention` (any device; float32 math)."""
    block_tables, seq_lens, prompt_lens = _check(query, key_cache, value_cache, block_tables,
                                                 seq_lens, prompt_lens, rswa_window)
    num_seqs, num_heads, head_size = query.shape
    block_size, num_kv_heads = key_cache.shape[1], key_cache.shape[2]
    group = num_heads // num_kv_heads
    scale = 1.0 / math.sqrt(head_size) if scale is None else scale
    out = torch.zeros(num_seqs, num_heads, value_cache.shape[3], dtype=query.dtype,
                      device=query.device)
    for s in range(num_seqs):
        seq_len, prompt_len = int(seq_lens[s]), int(prompt_lens[s])
        if seq_len <= 0:
            continue
        _, bids, offs = rswa_visible_slots(block_tables[s], seq_len, prompt_len,
                                           rswa_window, block_size)
        keep = bids >= 0  # a negative id (null block, padding) is never read
        bids, offs = bids[keep], offs[keep]
        if bids.numel() == 0:
            continue
        k = key_cache[bids, offs].float()           # [n, num_kv_heads, head_size]
        v = value_cache[bids, offs].float()         # [n, num_kv_heads, head_size_v]
        k = k.repeat_interleave(group, dim=1)       # [n, num_heads, head_size]
        v = v.repeat_interleave(group, dim=1)
        scores = torch.einsum("hd,nhd->hn", query[s].float(), k) * scale
        probs = torch.softmax(scores, dim=-1)
        out[s] = torch.einsum("hn,nhd->hd", probs, v).to(query.dtype)
    return out


def _kernel() -> Any:
    from kvcore_rswa._triton_kernels import _rswa_decode

    return _rswa_decode


def _next_pow2(n: int) -> int:
    return 1 << max(0, (n - 1).bit_length())


def rswa_decode_attention_triton(query: torch.Tensor, key_cache: torch.Tensor,
                                 value_cache: torch.Tensor, block_tables: torch.Tensor,
                                 seq_lens: torch.Tensor, prompt_lens: torch.Tensor,
                                 rswa_window: int,
                                 scale: float | None = None) -> torch.Tensor:
    """Triton version of :func:`rswa_decode_attention` (grid: one program per sequence
    and query head; the last dimension of every tensor must be contiguous)."""
    block_tables, seq_lens, prompt_lens = _check(query, key_cache, value_cache, block_tables,
                                                 seq_lens, prompt_lens, rswa_window)
    num_seqs, num_heads, head_size = query.shape
    _, block_size, num_kv_heads, _ = key_cache.shape
    head_size_v = value_cache.shape[3]
    for name, t in (("query", query), ("key_cache", key_cache),
                    ("value_cache", value_cache), ("block_tables", block_tables)):
        if t.stride(-1) != 1:
            raise _err(f"{name} must be contiguous in its last dimension", name,
                       tuple(t.stride()))
    scale = 1.0 / math.sqrt(head_size) if scale is None else scale
    out = torch.empty(num_seqs, num_heads, head_size_v, dtype=query.dtype,
                      device=query.device)
    if num_seqs == 0:
        return out
    seq_lens = seq_lens.to(torch.int32).contiguous()
    prompt_lens = prompt_lens.to(torch.int32).contiguous()
    _kernel()[(num_seqs, num_heads)](
        query, key_cache, value_cache, block_tables, seq_lens, prompt_lens, out,
        float(scale), int(rswa_window),
        query.stride(0), query.stride(1), key_cache.stride(0), key_cache.stride(1),
        key_cache.stride(2), value_cache.stride(0), value_cache.stride(1),
        value_cache.stride(2), block_tables.stride(0), out.stride(0), out.stride(1),
        GROUP=num_heads // num_kv_heads, BLOCK_SIZE=block_size,
        BLOCK_N=_next_pow2(block_size), HEAD=head_size, HEAD_P=_next_pow2(head_size),
        HEAD_V=head_size_v, HEAD_VP=_next_pow2(head_size_v))
    return out


def rswa_decode_attention(query: torch.Tensor, key_cache: torch.Tensor,
                          value_cache: torch.Tensor, block_tables: torch.Tensor,
                          seq_lens: torch.Tensor, prompt_lens: torch.Tensor,
                          rswa_window: int, scale: float | None = None) -> torch.Tensor:
    """Decode attention of each sequence's newest token under R-SWA visibility.

    Parameters
    ----------
    query: ``[num_seqs, num_heads, head_size]``, float16 / bfloat16 / float32.
    key_cache: ``[num_blocks, block_size, num_kv_heads, head_size]``.
    value_cache: ``[num_blocks, block_size, num_kv_heads, head_size_v]``.
    block_tables: int32 ``[num_seqs, max_blocks_per_seq]``; freed gap blocks may hold
        the null block id (never read).
    seq_lens: int ``[num_seqs]``: tokens of each sequence, the query's own included
        (its K/V already written); 0 marks a padding row (output zeros).
    prompt_lens: int ``[num_seqs]``: prompt tokens of each sequence.
    rswa_window: generated tokens a generated token sees (itself included).
    scale: softmax scale, default ``1 / sqrt(head_size)``.

    Raises
    ------
    kvcore.errors.KernelArgumentError
        (a KVCoreError, a ValueError) before any launch, on both paths: shapes that do
        not match, query not float16/bfloat16/float32, index tensors not int32/int64
        (lists are converted), a ``seq_lens`` entry outside ``[0, max_blocks_per_seq x
        block_size]``, a block id up to a sequence's length outside ``[-1, num_blocks)``.

    Returns
    -------
    ``[num_seqs, num_heads, head_size_v]`` in ``query.dtype``.

    Example
    -------
    >>> import torch
    >>> kc = torch.randn(4, 16, 1, 8); vc = torch.randn(4, 16, 1, 8)
    >>> out = rswa_decode_attention_ref(torch.randn(1, 2, 8), kc, vc,
    ...     torch.tensor([[1, 2, 3]], dtype=torch.int32), torch.tensor([40]),
    ...     torch.tensor([10]), rswa_window=8)
    >>> tuple(out.shape)
    (1, 2, 8)
    """
    if getattr(query, "is_cuda", False) or os.environ.get("TRITON_INTERPRET") == "1":
        return rswa_decode_attention_triton(query, key_cache, value_cache, block_tables,
                                            seq_lens, prompt_lens, rswa_window, scale)
    return rswa_decode_attention_ref(query, key_cache, value_cache, block_tables,
                                     seq_lens, prompt_lens, rswa_window, scale)
