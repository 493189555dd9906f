"""State-copy kernels: checkpoint a recurrent state from one block into another.

In ``align`` and ``all`` modes a request's running state is copied into the block that
holds the checkpoint of a block boundary (vLLM ``mamba_utils.get_conv_copy_spec`` /
``get_temporal_copy_spec``).  With speculative decoding the conv window of the running
block holds ``d_conv - 1 + num_spec`` rows; after ``a`` accepted tokens the window that
ends at the last accepted token starts ``a - 1`` rows later, so the copy drops the first
``a - 1`` rows (the *shift*), and the SSM state is taken from the block of the ``a``-th
token (the running block is followed by one block per draft token).

Layout: a state tensor is ``[num_blocks, state_len, *inner]`` with any block stride
(``state.stride(0)``, e.g. a padded page) and the rest contiguous.  A copy writes
``state[dst, : state_len - shift] = state[src, shift:]`` and leaves the last ``shift``
rows of ``dst`` as they were.  Copies are bitwise (any dtype, fp8 included).  Entries
with block id -1 are padding and are skipped.  Within one call no copy may write
a block that another copy reads, and ``src != dst`` when ``shift > 0``.

Both paths check their arguments on the host before any copy
(:mod:`kvcore.ops.checks`, :class:`~kvcore.errors.KernelArgumentError` naming the
argument): block ids in ``[-1, num_blocks)``, destinations distinct and not read by
another copy (a ``src == dst`` copy with shift 0 is a no-op and allowed), shifts in
``[0, state_len)``, integer ids (lists of ints are converted).

torch and triton are imported lazily; the module imports without them.
"""

from __future__ import annotations

import math
import os
from typing import Any

__all__ = [
    "copy_state_blocks",
    "copy_state_blocks_ref",
    "copy_state_blocks_triton",
    "checkpoint_states",
    "state_views",
]

_INT_OF_SIZE = {1: "uint8", 2: "int16", 4: "int32", 8: "int64"}


def _err(message: str, field: str, value: Any = None, valid: str = "") -> Any:
    from kvcore.errors import KernelArgumentError

    return KernelArgumentError(message, field=field, value=value, valid=valid)


def _as_index(x: Any, n: int | None, device: Any, name: str) -> Any:
    from kvcore.ops.checks import index_tensor

    t = index_tensor(x, name, device).to(device=device).reshape(-1)
    if n is not None and t.numel() != n:
        raise _err(f"{name} has {t.numel()} entries, expected {n}", name, t.numel(),
                   str(n))
    return t.long()


def _check_state(state: Any) -> None:
    if not hasattr(state, "dim") or state.dim() < 2:
        raise _err(f"state must be [num_blocks, state_len, ...], got shape "
                   f"{tuple(getattr(state, 'shape', ()))}", "state")
    if not state[0].is_contiguous():
        raise _err("state must be contiguous inside a block (any block stride)", "state",
                   tuple(state.stride()))


def _checked_copies(state: Any, src_block_ids: Any, dst_block_ids: Any, shifts: Any,
                    device: Any) -> tuple[Any, Any, Any]:
    """(src, dst, shifts or None) as int64 tensors on ``device``, all checked before any
    copy (see the module docstring)."""
    import torch

    from kvcore.ops.checks import check_copy_pairs

    _check_state(state)
    src = _as_index(src_block_ids, None, device, "src_block_ids")
    n = src.numel()
    dst = _as_index(dst_block_ids, n, device, "dst_block_ids")
    sh = None if shifts is None else _as_index(shifts, n, device, "shifts")
    length = state.shape[1]
    if sh is not None and n and bool(((sh < 0) | (sh >= length)).any()):
        bad = (sh < 0) | (sh >= length)
        v = int(sh[bad][0])
        raise _err(f"shifts: shift {v} is outside [0, state_len={length})", "shifts", v,
                   f"[0, {length})")
    # a src == dst copy with shift 0 (a no-op) is neither a write nor a read of another
    # copy's block: left out of the overlap check (its ids are still range-checked)
    noop = (src == dst) & (src < state.shape[0])
    if sh is not None:
        noop &= sh == 0
    minus = torch.full_like(src, -1)
    check_copy_pairs(torch.where(noop, minus, src), torch.where(noop, minus, dst),
                     state.shape[0], src_name="src_block_ids", dst_name="dst_block_ids",
                     hint=f" (state has {state.shape[0]} blocks)")
    return src, dst, sh


def copy_state_blocks_ref(state: Any, src_block_ids: Any, dst_block_ids: Any,
                          shifts: Any = None) -> None:
    """Torch reference of :func:`copy_state_blocks` (CPU or GPU), in place.

    Parameters
    ----------
    state:
        ``[num_blocks, state_len, *inner]``, any dtype.
    src_block_ids, dst_block_ids:
        ``[num_copies]`` ints in ``[-1, num_blocks)``; -1 skips the copy.
    shifts:
        ``[num_copies]`` ints in ``[0, state_len)``: leading rows of the source dropped
        (``num_accepted_tokens - 1`` for a conv window); None = 0 (a whole-state copy).
    """
    src_t, dst_t, sh_t = _checked_copies(state, src_block_ids, dst_block_ids, shifts, "cpu")
    src, dst = src_t.tolist(), dst_t.tolist()
    sh = [0] * len(src) if sh_t is None else sh_t.tolist()
    length = state.shape[1]
    for s, d, k in zip(src, dst, sh):
        if s < 0 or d < 0:
            continue
        state[d, : length - k] = state[s, k:].clone()


_kernel_cache: dict[str, Any] = {}


def _triton_kernel() -> Any:
    if "copy" in _kernel_cache:
        return _kernel_cache["copy"]
    import triton
    import triton.language as tl

    @triton.jit
    def _copy_state_kernel(state_ptr, src_ptr, dst_ptr, shift_ptr, block_stride,
                           row_elems, state_len, BLOCK: tl.constexpr,
                           HAS_SHIFT: tl.constexpr):
        pid = tl.program_id(0)
        chunk = tl.program_id(1)
        src = tl.load(src_ptr + pid)
        dst = tl.load(dst_ptr + pid)
        if HAS_SHIFT:
            shift = tl.load(shift_ptr + pid)
        else:
            shift = src * 0
        valid = (src >= 0) & (dst >= 0)
        n = tl.where(valid, (state_len - shift) * row_elems, 0)
        offs = chunk * BLOCK + tl.arange(0, BLOCK)
        mask = offs < n
        src_base = src * block_stride + shift * row_elems
        dst_base = dst * block_stride
        vals = tl.load(state_ptr + src_base + offs, mask=mask)
        tl.store(state_ptr + dst_base + offs, vals, mask=mask)

    _kernel_cache["copy"] = _copy_state_kernel
    return _copy_state_kernel


def copy_state_blocks_triton(state: Any, src_block_ids: Any, dst_block_ids: Any,
                             shifts: Any = None, block: int = 1024) -> None:
    """Triton version of :func:`copy_state_blocks_ref` (CUDA, or CPU under
    ``TRITON_INTERPRET=1``).  One program per (copy, ``block`` elements)."""
    import torch
    import triton

    src, dst, sh = _checked_copies(state, src_block_ids, dst_block_ids, shifts,
                                   state.device)
    n = src.numel()
    if n == 0:
        return
    if sh is None:
        sh = src  # unused (HAS_SHIFT=False)
    words = state.view(getattr(torch, _INT_OF_SIZE[state.element_size()]))
    row_elems = math.prod(state.shape[2:])
    total = state.shape[1] * row_elems
    grid = (n, triton.cdiv(total, block))
    _triton_kernel()[grid](words, src, dst, sh, words.stride(0), row_elems, state.shape[1],
                           BLOCK=block, HAS_SHIFT=shifts is not None)


def _use_triton(state: Any) -> bool:
    if os.environ.get("TRITON_INTERPRET") == "1":
        return True
    return bool(getattr(state, "is_cuda", False))


def copy_state_blocks(state: Any, src_block_ids: Any, dst_block_ids: Any,
                      shifts: Any = None) -> None:
    """Copy whole states (or shifted conv windows) between blocks, in place.

    Dispatches to Triton for CUDA tensors or under ``TRITON_INTERPRET=1``, else to the
    torch reference.  See :func:`copy_state_blocks_ref` for the parameters.

    Example
    -------
    >>> conv = torch.zeros(8, 5, 16)       # 8 blocks, window of 3 + 2 draft tokens
    >>> copy_state_blocks(conv, [2], [6], shifts=[1])   # 2 tokens accepted
    """
    if _use_triton(state):
        copy_state_blocks_triton(state, src_block_ids, dst_block_ids, shifts)
    else:
        copy_state_blocks_ref(state, src_block_ids, dst_block_ids, shifts)


def checkpoint_states(conv_states: list[Any], temporal_states: list[Any],
                      running_block_ids: Any, dst_block_ids: Any,
                      num_accepted_tokens: Any = None, spec_block_ids: Any = None) -> None:
    """Checkpoint each request's state into ``dst_block_ids``.

    Parameters
    ----------
    conv_states:
        Conv windows ``[num_blocks, d_conv - 1 + num_spec, conv_dim]`` (one per layer);
        copied from the running block, shifted by ``num_accepted_tokens - 1``.
    temporal_states:
        SSM / recurrent states ``[num_blocks, ...]``; copied whole from the block of the
        last accepted token: ``spec_block_ids[i, num_accepted_tokens[i] - 1]`` (the
        running block is column 0), or the running block without speculation.
    running_block_ids, dst_block_ids:
        ``[num_requests]`` block ids (negative: skip).
    num_accepted_tokens:
        ``[num_requests]`` in ``1 .. 1 + num_spec`` (0 is treated as 1); None = 1.
    spec_block_ids:
        ``[num_requests, 1 + num_spec]`` or None.
    """
    import torch

    run = _as_index(running_block_ids, None, "cpu", "running_block_ids")
    n = run.numel()
    dst = _as_index(dst_block_ids, n, "cpu", "dst_block_ids")
    acc = (torch.ones(n, dtype=torch.int64) if num_accepted_tokens is None
           else _as_index(num_accepted_tokens, n, "cpu", "num_accepted_tokens"))
    shift = (acc - 1).clamp(min=0)
    if spec_block_ids is not None:
        table = _as_index(spec_block_ids, None, "cpu", "spec_block_ids").reshape(n, -1)
        if bool((shift >= table.shape[1]).any()):
            raise _err("num_accepted_tokens exceeds the speculative blocks given",
                       "num_accepted_tokens", int(shift.max()) + 1,
                       f"[1, {table.shape[1]}]")
        tsrc = table.gather(1, shift.view(-1, 1)).view(-1)
        tsrc = torch.where(run < 0, run, tsrc)
    else:
        tsrc = run
    for conv in conv_states:
        has_shift = bool((shift > 0).any())
        copy_state_blocks(conv, run, dst, shift if has_shift else None)
    for temporal in temporal_states:
        copy_state_blocks(temporal, tsrc, dst, None)


def state_views(buffer: Any, spec: Any, num_blocks: int) -> tuple[Any, ...]:
    """Per-state views into one layer's raw KV-cache buffer.

    ``buffer`` is a 1-D uint8 tensor of at least ``num_blocks x spec.page_size_bytes``
    bytes; block b of state i starts at byte ``b x page_size_bytes + sum(state_bytes[:i])``
    (states packed in order inside a page, padding at the end).  Returns one tensor
    ``[num_blocks, *shape]`` of the state's dtype per state.  Raises ValueError when a
    state's offset or the page is not a multiple of its item size.
    """
    import torch

    from kvcore.dtypes import to_torch_dtype

    page = spec.page_size_bytes
    if buffer.dtype != torch.uint8 or buffer.dim() != 1:
        raise ValueError("buffer must be a 1-D uint8 tensor")
    if buffer.numel() < num_blocks * page:
        raise ValueError(f"buffer holds {buffer.numel()} B, needs {num_blocks * page} B")
    views = []
    offset = 0
    for shape, dtype, nbytes in zip(spec.shapes, spec.dtypes, spec.state_bytes):
        td = to_torch_dtype(dtype)
        item = torch.empty((), dtype=td).element_size()
        if offset % item or page % item:
            raise ValueError(f"state of dtype {dtype} at byte {offset} of a {page} B page "
                             f"is not aligned to its item size {item}")
        typed = buffer[: buffer.numel() - buffer.numel() % item].view(td)
        inner = [1] * len(shape)
        for j in range(len(shape) - 2, -1, -1):
            inner[j] = inner[j + 1] * shape[j + 1]
        views.append(typed.as_strided((num_blocks, *shape), (page // item, *inner),
                                      offset // item))
        offset += nbytes
    return tuple(views)
