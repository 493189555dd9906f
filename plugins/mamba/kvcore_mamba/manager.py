"""Runtime manager of the ``mamba`` kind: block tables of recurrent-state groups.

A block of a state group holds one whole state (every state tensor of the layer at one
point of the sequence).  Block-table layout per ``mamba_cache_mode`` (``S`` =
``num_speculative_blocks``; semantics of vLLM v1 ``MambaManager`` in
``single_type_kv_cache_manager.py``):

``none``
    ``[running state, S speculative blocks]``: 1 + S blocks for the request's lifetime,
    never cached.  The spec does not participate in prefix caching, so the coordinator
    turns prefix caching off for the whole model (a hit elsewhere could not restore the
    state).

``align``
    The table is indexed by token position (block ``i`` covers tokens
    ``[i * block_size, (i + 1) * block_size)``).  Only the block of the *running*
    position ``cdiv(n, block_size) - 1`` holds a real block (the state after ``n``
    tokens), followed by ``S`` speculative blocks; every other position is the null
    block, except the previous running block, which the current step reads its initial
    state from and which is freed at the next step.  So 2 + S blocks are resident.  When
    a step ends on a block boundary the running block is full and holds the state *at
    that boundary*: it is cached under that block's hash, a checkpoint.  A scheduler in
    align mode ends prefill chunks on block boundaries (see
    :func:`align_prefill_chunk`), so a 2,200-token prompt with 528-token blocks and
    chunks of at most 2,048 tokens leaves checkpoints at 1,584 and 2,112.

``all``
    Like ``align``, but every position from the running one back to the previous step's
    holds a real block: a prefill chunk writes the state at every block boundary it
    crosses (kernels with intermediate-state output), so any block-aligned prefix can
    hit.  Blocks behind the running one are freed each step (they stay findable in the
    prefix cache until evicted).

Speculative decoding: the scheduler passes ``num_lookahead_tokens =
num_speculative_blocks`` (as vLLM does); the running block is the block of the last
real token and the lookahead slots' states go to the speculative blocks.  After
verification the runner moves the accepted state into the running block with
:func:`kvcore_mamba.kernels.checkpoint_states` (conv window shifted by the accepted
tokens).  In ``align`` mode a block is cached only by a step that ends exactly on the
running block's boundary, so a cached block always holds its boundary's state and is
never written again.

Cache hits (``align`` / ``all``): a hit of ``L`` tokens needs only the checkpoint of
block ``L / block_size - 1``; the search walks right to left for the last cached block
within ``max_length`` and returns ``[null] * i + [block i]``.  In ``align`` mode a hit is
therefore only where a checkpoint exists.  A hit block is shared and never written: the
model runner copies it into the request's next running block
(:func:`kvcore_mamba.kernels.copy_state_blocks`) before computing.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from kvcore.runtime.block_pool import BlockPool, KVCacheBlock
from kvcore.runtime.managers import SingleTypeManager

__all__ = ["MambaManager", "align_prefill_chunk"]


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


def align_prefill_chunk(num_computed_tokens: int, num_new_tokens: int, num_prompt_tokens: int,
                        block_size: int, use_eagle: bool = False) -> int:
    """Tokens to prefill this step in ``align`` mode, so the step ends on a block
    boundary (vLLM ``Scheduler._mamba_block_aligned_split``).

    ``last`` = the last block boundary inside the prompt (one block earlier with EAGLE,
    which recomputes the last hit block).  A chunk ending before ``last`` is cut down to a
    whole number of blocks; a chunk crossing ``last`` ends at it (so its state is kept);
    the tokens after ``last`` are prefilled as they come.  Example: 2,200 tokens, block
    528, budget 2,048: 1,584, then 528 (to 2,112), then 88.
    """
    last = num_prompt_tokens - num_prompt_tokens % block_size
    if use_eagle:
        last = max(last - block_size, 0)
    end = num_computed_tokens + num_new_tokens
    if end < last:
        aligned = num_new_tokens // block_size * block_size
        return aligned if aligned > 0 else num_new_tokens
    if num_computed_tokens < last < end:
        return last - num_computed_tokens
    return num_new_tokens


class MambaManager(SingleTypeManager):
    """Block tables of one ``mamba`` group (see the module docstring for each mode).

    Construction as :class:`~kvcore.runtime.managers.SingleTypeManager`; the mode and
    the speculative block count come from the group's
    :class:`~kvcore_mamba.spec.MambaSpec`.
    """

    def __init__(self, spec: Any, block_pool: BlockPool, group_id: int, **kw: Any) -> None:
        super().__init__(spec, block_pool, group_id, **kw)
        self.mode: str = getattr(spec, "mamba_cache_mode", "none")
        self.num_spec: int = int(getattr(spec, "num_speculative_blocks", 0))
        self.skips_blocks = self.mode != "none"  # type: ignore[misc]
        #: table index of each request's running state block (its S speculative
        #: blocks follow it); absent before the first allocation
        self._running: dict[str, int] = {}
        #: every table entry below this index is the null block
        self._live_from: dict[str, int] = {}

    # ---- sizing --------------------------------------------------------------------
    def num_required_blocks(self, request: Any, num_tokens: int) -> int:
        if self.mode == "none":
            return 1 + self.num_spec
        return _cdiv(num_tokens, self.block_size) + self.num_spec

    def _layout(self, rid: str, table: Sequence[KVCacheBlock] | None) -> tuple[int, bool]:
        """(running index, whether speculative blocks are in the table)."""
        if rid in self._running:
            return self._running[rid], True
        if table:  # a cache hit only: its last block is the state to resume from
            return len(table) - 1, False
        return -1, False

    def _target(self, num_tokens: int) -> int:
        """Table index of the running state block for ``num_tokens`` slots: the block of
        the last real token; with speculative decoding the last ``num_speculative_blocks``
        slots are the lookahead (vLLM passes ``num_lookahead_tokens =
        num_speculative_tokens``) and their states go to the speculative blocks."""
        return _cdiv(max(num_tokens - self.num_spec, 1), self.block_size) - 1

    def _num_new(self, running: int, has_spec: bool, target: int) -> int:
        if target <= running:
            return 0
        positions = 1 if self.mode == "align" else target - running
        return positions + (0 if has_spec else self.num_spec)

    def get_num_blocks_to_allocate(self, request: Any, num_tokens: int,
                                   new_computed_blocks: Sequence[KVCacheBlock]) -> int:
        if self.mode == "none":
            return super().get_num_blocks_to_allocate(request, num_tokens,
                                                      new_computed_blocks)
        rid = request.request_id
        table = self.req_to_blocks.get(rid) or list(new_computed_blocks)
        running, has_spec = self._layout(rid, table)
        n = self._num_new(running, has_spec, self._target(num_tokens))
        for b in new_computed_blocks:
            if b.ref_cnt == 0 and not b.is_null:
                n += 1
        return n

    def allocate_new_blocks(self, request: Any, num_tokens: int) -> list[KVCacheBlock]:
        """Move the running state block to the block of position ``num_tokens - 1``
        (``align``: nulls in between; ``all``: new blocks in between), the speculative
        blocks after it (reused once allocated); returns the newly taken blocks."""
        if self.mode == "none":
            return super().allocate_new_blocks(request, num_tokens)
        rid = request.request_id
        table = self.req_to_blocks.get(rid)
        if table is None:
            table = self.req_to_blocks[rid] = []
            self.num_cached_blocks.setdefault(rid, 0)
        running, has_spec = self._layout(rid, table)
        target = self._target(num_tokens)
        n_new = self._num_new(running, has_spec, target)
        if n_new == 0:
            return []
        spec_blocks = table[running + 1:running + 1 + self.num_spec] if has_spec else []
        del table[running + 1:]
        new = self.pool.get_new_blocks(n_new)
        positions = new[:n_new - (0 if has_spec else self.num_spec)]
        if self.mode == "align":
            table.extend([self.null_block] * (target - running - 1))
        table.extend(positions)
        table.extend(spec_blocks if has_spec else new[len(positions):])
        self._running[rid] = target
        return new

    # ---- freeing states behind the running one -------------------------------------
    def get_num_skipped_tokens(self, num_computed_tokens: int) -> int:
        """Only the state after the last computed token is needed."""
        return max(num_computed_tokens - 1, 0)

    def _skip_range(self, rid: str, num_computed_tokens: int) -> tuple[list[KVCacheBlock],
                                                                        int, int]:
        table = self.req_to_blocks.get(rid) or []
        limit = min(self.get_num_skipped_tokens(num_computed_tokens) // self.block_size,
                    len(table))
        return table, self._live_from.get(rid, 0), limit

    def num_blocks_freed_by_skipping(self, request_id: str, num_computed_tokens: int) -> int:
        if not self.skips_blocks:
            return 0
        table, start, limit = self._skip_range(request_id, num_computed_tokens)
        return sum(1 for i in range(start, limit)
                   if not table[i].is_null and table[i].ref_cnt == 1)

    def remove_skipped_blocks(self, request_id: str, num_computed_tokens: int) -> None:
        """Free every real block before the block of the last computed token (the
        previous running state and, in ``all`` mode, passed checkpoints), tail first;
        unlike the base class it does not stop at a null block (align tables are mostly
        nulls)."""
        if not self.skips_blocks:
            return
        table, start, limit = self._skip_range(request_id, num_computed_tokens)
        if limit <= start:
            return
        null = self.null_block
        removed = []
        for i in range(limit - 1, start - 1, -1):
            b = table[i]
            if not b.is_null:
                removed.append(b)
                table[i] = null
        self._live_from[request_id] = limit
        if removed:
            self.pool.free_blocks(removed)

    # ---- prefix caching ------------------------------------------------------------
    def cache_blocks(self, request: Any, num_tokens: int) -> None:
        """``all``: every full block (each holds its boundary's state).  ``align``: only
        the running block, and only when this step ends exactly on its boundary (then it
        holds that boundary's state); other positions are null or hold a state past
        their boundary."""
        if self.mode != "align" or not self.enable_caching:
            super().cache_blocks(request, num_tokens)
            return
        rid = request.request_id
        table = self.req_to_blocks.get(rid)
        running = self._running.get(rid)
        num_full = num_tokens // self.block_size
        if table and running is not None and num_tokens % self.block_size == 0 \
                and running == num_full - 1 and num_full > self.num_cached_blocks.get(rid, 0):
            self.pool.cache_full_blocks(table, request.block_hashes, running, num_full,
                                        self.group_id, self.hash_stride, request,
                                        self.block_size)
        if num_full > self.num_cached_blocks.get(rid, 0):
            self.num_cached_blocks[rid] = min(num_full, len(table or ()))

    def find_longest_cache_hit(self, block_hashes: Sequence[bytes], max_length: int,
                               extra_tokens: int = 0) -> list[KVCacheBlock]:
        """Right to left: the last block within ``max_length`` tokens whose state is
        cached, as ``[null] * i + [block i]``; [] when none (or in ``none`` mode)."""
        if self.mode == "none":
            return []
        stride = self.hash_stride
        n = min(max_length // self.block_size, len(block_hashes) // stride)
        get = self.pool.cached[self.group_id].get
        for i in range(n - 1, -1, -1):
            b = get(block_hashes[(i + 1) * stride - 1])
            if b is not None:
                return [self.null_block] * i + [b]
        return []

    # ---- lifecycle -----------------------------------------------------------------
    def free(self, request_id: str) -> None:
        super().free(request_id)
        self._running.pop(request_id, None)
        self._live_from.pop(request_id, None)

    def state_block(self, request_id: str) -> KVCacheBlock | None:
        """The block holding the request's running state (None before allocation)."""
        table = self.req_to_blocks.get(request_id)
        if not table:
            return None
        if self.mode == "none":
            return table[0]
        running, _ = self._layout(request_id, table)
        return table[running]
