"""vLLM 0.32's Mamba ``align``-mode block-table rules on kvcore's block pool.

kvcore's own Mamba manager (kvcore-mamba) publishes a state block only after the step
that writes it has run; vLLM 0.32 enters it in the prefix cache when it is allocated
and keeps a same-step hit on it out of that step (``cached_blocks_this_step``: the
allocation reports "does not fit", the request waits one step).  Both are safe, but
they schedule differently, so the drop-in manager follows vLLM here (as it follows
vLLM's block order): :class:`VllmMambaAlignManager` keeps the table layout of vLLM's
``MambaManager`` in ``align`` mode (``single_type_kv_cache_manager.py``): the table is
indexed by token position, only the state read this step, the running state and the
speculative blocks are real blocks, the rest null; the block of two steps ago is freed
when its step has been processed.

Covered: ``align`` mode with ``hash_block_size == block_size`` and no prefill
checkpoint blocks (``num_prefill_checkpoint_blocks == 0``); with
``num_speculative_blocks`` (speculative blocks are relocated as vLLM does).  Partial
(sub-block) hits and their copy-on-write are not (the bridge refuses those configs).
Blocks come from, and go back to, kvcore's :class:`~kvcore.runtime.BlockPool` (its
always-on checks apply); the whole-state check of ``check_invariants`` walks these
tables like any kvcore manager's.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from kvcore.runtime.block_pool import BlockPool, KVCacheBlock

__all__ = ["VllmMambaAlignManager"]


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


class VllmMambaAlignManager:
    """One Mamba group in ``align`` mode, vLLM 0.32's rules (module docstring).

    Parameters: ``spec`` (kvcore ``MambaSpec``), ``pool``, ``group_id``,
    ``enable_caching``, ``use_eagle`` (drop the EAGLE checkpoint block).
    """

    #: searched after full attention and re-searched each round (not downward closed)
    skips_blocks = True
    hash_stride = 1

    def __init__(self, spec: Any, pool: BlockPool, group_id: int, *, enable_caching: bool,
                 use_eagle: bool = False) -> None:
        self.spec = spec
        self.block_size: int = spec.block_size
        self.pool: Any = pool  # kvcore_vllm.manager.VllmOrderBlockPool
        self.group_id = group_id
        self.enable_caching = enable_caching
        self.participates_in_prefix_caching = True
        self.null_block = pool.null_block
        self.num_speculative_blocks: int = int(spec.num_speculative_blocks or 0)
        self.use_eagle = use_eagle
        self.req_to_blocks: dict[str, list[KVCacheBlock]] = {}
        self.num_cached_blocks: dict[str, int] = {}
        self.num_skipped_blocks: dict[str, int] = {}
        self.cached_this_step: set[bytes] = set()
        self.last_state_block_idx: dict[str, int] = {}
        self._retired: dict[str, int] = {}
        self._allocated: set[str] = set()

    # ---- sizing ----------------------------------------------------------------------
    def get_num_skipped_tokens(self, num_computed_tokens: int) -> int:
        """Only the state after the last computed token is needed."""
        return num_computed_tokens - 1

    def count(self, rid: str, num_tokens_main_model: int,
              hits: Sequence[KVCacheBlock]) -> int:
        """Free blocks an allocation up to ``num_tokens_main_model`` tokens takes (vLLM
        ``MambaManager.get_num_blocks_to_allocate``, align mode); a hit on a state
        cached this step counts as "does not fit" (``num_blocks + 1``)."""
        if hits and hits[-1].block_hash is not None \
                and hits[-1].block_hash in self.cached_this_step:
            return self.pool.num_blocks + 1
        table = self.req_to_blocks.get(rid) or ()
        required = _cdiv(num_tokens_main_model, self.block_size) + \
            self.num_speculative_blocks
        n_new = required - len(hits) - len(table)
        if n_new > 0:
            cap = 1 if rid in self._allocated else 1 + self.num_speculative_blocks
            n_new = min(n_new, cap)
        return n_new + sum(1 for b in hits if b.ref_cnt == 0 and not b.is_null)

    def save_new_computed_blocks(self, rid: str, hits: Sequence[KVCacheBlock]) -> None:
        """Adopt a hit ``[null] * i + [state]`` (vLLM ``add_local_computed_blocks``:
        the skipped positions are the nulls, only the state block is touched)."""
        if not hits:
            return
        self.pool.touch(hits)
        self.req_to_blocks[rid] = list(hits)
        self.num_cached_blocks[rid] = len(hits)

    def allocate(self, rid: str, num_tokens_main_model: int) -> list[KVCacheBlock]:
        """vLLM ``MambaManager.allocate_new_blocks`` (align): null up to the running
        position, one new running block (plus speculative blocks the first time);
        returns the table entries added (nulls included, as vLLM does)."""
        table = self.req_to_blocks.setdefault(rid, [])
        self.num_cached_blocks.setdefault(rid, 0)
        S = self.num_speculative_blocks
        required = _cdiv(num_tokens_main_model, self.block_size) + S
        if required <= len(table):
            self._allocated.add(rid)
            return []
        prev = len(table)
        allocated = rid in self._allocated
        if allocated:
            self.last_state_block_idx[rid] = prev - 1 - S
        elif prev > 0:
            self.last_state_block_idx[rid] = prev - 1
        n_skipped = required - S - 1
        if prev < n_skipped:
            table.extend([self.null_block] * (n_skipped - prev))
        if allocated:
            for idx in range(prev - S, prev):
                if idx < n_skipped:
                    table.append(table[idx])  # relocate the speculative block
                    table[idx] = self.null_block
                else:
                    break
        n_new = max(required - len(table), 0)
        new = self.pool.get_new_blocks(n_new) if n_new else []
        out = table[prev:]
        table.extend(new)
        self._allocated.add(rid)
        out.extend(new)
        return out

    # ---- freeing -----------------------------------------------------------------------
    def remove_skipped_blocks(self, rid: str, processed: int) -> None:
        """Free the states no later step reads: blocks before the processed position
        (from the first not yet retired; nulls skipped), then the state block of two
        steps ago once its step is processed."""
        table = self.req_to_blocks.get(rid)
        if table is None:
            return
        skipped = processed - 1
        if skipped > 0:
            last = min(skipped // self.block_size, len(table))
            first = self._retired.get(rid, 0)
            if first < last:
                freed = []
                for i in range(last - 1, first - 1, -1):
                    if table[i].is_null:
                        continue
                    freed.append(table[i])
                    table[i] = self.null_block
                if freed:
                    self.pool.free_blocks(freed)
                self._retired[rid] = last
        idx = self.last_state_block_idx.get(rid)
        if idx is not None and idx < _cdiv(processed, self.block_size) - 1:
            b = table[idx]
            if not b.is_null:
                self.pool.free_blocks([b])
                table[idx] = self.null_block

    def forget(self, rid: str) -> None:
        self.num_cached_blocks.pop(rid, None)
        self.num_skipped_blocks.pop(rid, None)
        self.last_state_block_idx.pop(rid, None)
        self._retired.pop(rid, None)
        self._allocated.discard(rid)

    def free(self, rid: str) -> None:
        table = self.req_to_blocks.pop(rid, None)
        self.forget(rid)
        if table:
            table.reverse()
            self.pool.free_blocks(table)

    def get_blocks(self, rid: str) -> list[KVCacheBlock]:
        return self.req_to_blocks.get(rid, [])

    def running_request_ids(self) -> list[str]:
        return list(self.req_to_blocks)

    # ---- prefix caching ------------------------------------------------------------------
    def max_cache_hit_tokens(self, request: Any) -> int | None:
        return None

    def find_longest_cache_hit(self, block_hashes: Sequence[bytes], max_length: int,
                               extra_tokens: int = 0) -> list[KVCacheBlock]:
        """Right to left: the last cached state within ``max_length`` tokens, as
        ``[null] * i + [state]``."""
        get = self.pool.cached[self.group_id].get
        for i in range(min(max_length // self.block_size, len(block_hashes)) - 1, -1, -1):
            b = get(block_hashes[i])
            if b is not None:
                return [self.null_block] * i + [b]
        return []

    def after_caching(self, request: Any, before: int, num_tokens: int) -> None:
        """vLLM's bookkeeping after ``cache_blocks``: states cached now cannot serve a
        hit in this step; the prompt's last reusable boundary state is registered
        under its hash if it is not yet (``_cache_partial_tail_block``)."""
        rid = request.request_id
        table = self.req_to_blocks.get(rid) or []
        after = self.num_cached_blocks.get(rid, 0)
        for i in range(before, min(after, len(table))):
            b = table[i]
            if not b.is_null and b.block_hash is not None:
                self.cached_this_step.add(b.block_hash)
        bs = self.block_size
        if num_tokens <= 0 or num_tokens % bs:
            return
        limit = request.num_prompt_tokens if self.use_eagle else \
            request.num_prompt_tokens - 1
        boundary = limit // bs * bs - (bs if self.use_eagle else 0)
        if num_tokens != max(boundary, 0):
            return
        idx = num_tokens // bs - 1
        if idx >= len(table) or table[idx].is_null:
            return
        b = table[idx]
        h = request.block_hashes[idx]
        if b.block_hash is None:
            self.pool.cache_masked(table, request.block_hashes, idx, idx + 1,
                                   self.group_id, 1, request, bs, None)
        self.cached_this_step.add(h)

    def new_step_starts(self) -> None:
        self.cached_this_step.clear()
