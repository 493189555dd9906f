"""Runtime manager of the ``mamba`` kind: block tables of recurrent-state groups.

A block of a state group holds one whole state (every state tensor of the layer at one
point of the sequence).  Block ``i`` of a table stands for the state at the boundary
``(i + 1) * block_size``; it is *published* (entered in the prefix cache under that
block's hash) only when it holds exactly that state.

What a state layer reads and writes in one step
===============================================
A step computes the tokens ``[C, M)``: ``C = num_computed_tokens`` (hits included),
``M = C + num_new_tokens`` (draft tokens included; the lookahead slots are not tokens of
the state layer: draft models have no state layers, so the manager is sized by ``M``,
``excludes_lookahead_tokens``).  ``S = num_speculative_blocks``.

* **reads** the state after ``C`` tokens from the *read block*: the previous step's
  running block, or for a new request the last block of its cache hit (the runner copies
  it into the running block, :func:`kvcore_mamba.kernels.copy_state_blocks`); with
  speculative decoding also the ``S`` speculative blocks that follow it (the state of
  the last accepted token may sit in one; :func:`kvcore_mamba.kernels.checkpoint_states`).
* **writes** the *running block*, table index ``cdiv(M, block_size) - 1`` (never moved
  back: after rejected drafts it may stay one block ahead), the state after ``M`` (the
  state after token ``C + j`` goes to column ``j - 1`` of ``[running block, S
  speculative blocks]``); in ``all`` mode also, for each block boundary ``b`` with
  ``C < b < M`` of a step without drafts, the state at ``b`` into block ``b /
  block_size - 1``, but only where the SSM kernel materialises one: ``b`` and ``b - C``
  multiples of ``mamba_chunk_size`` (every other such position is the null block, -1 in
  :func:`kvcore.runtime.kernel_tables.block_table_ids`, which kernels skip).
* at the start of the step every real block before the read block is freed (nothing
  else): those states are never read again.  The read block is freed at the next step.

A block is published when (1) it holds the state at exactly its boundary: the running
block of a step without drafts that ends on it (``M == (i + 1) * block_size``), or an
``all``-mode boundary block above, and (2) the step that writes it has run, i.e. the
request's ``num_computed_tokens`` has reached the boundary (checked at its next
allocation and at :meth:`MambaManager.free`).  So a request admitted in the same step
never hits a state that is not written yet (vLLM defers such hits with
``cached_blocks_this_step``), and no block is published for a boundary that no chunk
ended on (a 3,026-token prompt in chunks of 1,866 and 1,160 with 2,048-token blocks
publishes nothing: the state at 2,048 was never computed).

Block-table layout per ``mamba_cache_mode`` (semantics of vLLM v1 ``MambaManager`` in
``single_type_kv_cache_manager.py``):

``none``
    ``[running state, S speculative blocks]``: 1 + S blocks for the request's lifetime,
    never cached.  The spec does not participate in prefix caching, so the coordinator
    turns prefix caching off for the whole model (a hit elsewhere could not restore the
    state).

``align``
    The table is indexed by token position; only the read block, the running block and
    the ``S`` speculative blocks after it are real, every other entry is the null block:
    2 + S blocks resident.  A scheduler in align mode ends prefill chunks on block
    boundaries (:meth:`MambaManager.max_prefill_chunk_tokens`,
    :func:`align_prefill_chunk`), so a 2,200-token prompt with 528-token blocks and
    chunks of at most 2,048 tokens leaves checkpoints at 1,584 and 2,112.

``all``
    Like ``align``, plus the boundary blocks a prefill chunk crosses (above), so any
    block-aligned prefix can hit when the spec gives ``mamba_chunk_size`` (block size a
    multiple of it).  Blocks behind the read block are freed each step (they stay
    findable in the prefix cache until evicted).

Cache hits (``align`` / ``all``): a hit of ``L`` tokens needs only the checkpoint of
block ``L / block_size - 1``; the search walks right to left for the last cached block
within ``max_length`` and returns ``[null] * i + [block i]``.  A hit block is shared and
never written.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from kvcore.runtime.block_pool import BlockPool, KVCacheBlock
from kvcore.runtime.managers import SingleTypeManager

__all__ = ["MambaManager", "align_prefill_chunk", "last_checkpoint_position"]


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


def last_checkpoint_position(num_tokens: int, block_size: int,
                             use_eagle: bool = False) -> int:
    """The last block boundary of a ``num_tokens``-token prefill whose state a later
    request can resume from (vLLM ``get_mamba_prefill_checkpoint_position``): a hit
    leaves the last token to recompute, so the boundary at or below ``num_tokens - 1``;
    with EAGLE, which drops the last hit block, one block earlier (at or below
    ``num_tokens``).  0 when there is none."""
    limit = num_tokens if use_eagle else num_tokens - 1
    pos = limit // block_size * block_size
    if use_eagle:
        pos -= block_size
    return max(pos, 0)


def align_prefill_chunk(num_computed_tokens: int, num_new_tokens: int, num_prompt_tokens: int,
                        block_size: int, use_eagle: bool = False, *,
                        states_inside_chunk: bool = False) -> int:
    """Tokens to prefill this step so that the states a state layer caches exist: the
    rule of vLLM 0.32 ``Scheduler._mamba_block_aligned_split`` ("slot p holds the state
    after exactly (p + 1) * block_size tokens; state is written at chunk ends, so chunk
    ends must be block aligned").

    With ``C = num_computed_tokens``, ``E = C + num_new_tokens`` and ``P =
    num_prompt_tokens`` (the tokens to prefill):

    * ``C >= P`` (decode): ``num_new_tokens``, never cut.
    * ``E < P``: ``E`` is floored to a block boundary when one lies above ``C`` (a state
      at a chunk end inside a block is never cached); otherwise the chunk stays as is
      (a block wider than the chunk budget advances sub-block and re-aligns below).
    * A chunk that starts inside a block and crosses the block's end boundary ends on
      it (so the next chunk starts on a boundary).
    * A chunk that crosses :func:`last_checkpoint_position` (``P``, EAGLE) ends on it,
      unless ``states_inside_chunk`` (``all`` mode with a known ``mamba_chunk_size``:
      the kernel writes every crossed boundary of a chunk that starts on a boundary).

    Returns 1 to ``num_new_tokens`` (``num_new_tokens`` when it is < 1).  Examples:
    2,200 tokens, block 528, budget 2,048: 1,584, then 528 (to 2,112), then 88.  EAGLE,
    block 1,600, 2,000 tokens, first chunk from 364: 1,236 (to 1,600), then 400.
    """
    C, n, P, bs = num_computed_tokens, num_new_tokens, num_prompt_tokens, block_size
    if n < 1 or C >= P:
        return n
    end = C + n
    if end < P:
        aligned = end // bs * bs
        if aligned > C:
            end = aligned
    stops = []
    if C % bs:
        stops.append((C // bs + 1) * bs)
    if not states_inside_chunk:
        stops.append(last_checkpoint_position(P, bs, use_eagle))
    inside = [s for s in stops if C < s < end]
    if inside:
        end = min(inside)
    return max(end - C, 1)


class _ReqState:
    """One request's state layout, tied to its table object: a caller that takes the
    table out of ``req_to_blocks`` without :meth:`MambaManager.free` (a deferred free)
    leaves it stale, and a new table for the id starts fresh."""

    __slots__ = ("table", "running", "live_from", "pending", "req")

    def __init__(self, table: list[KVCacheBlock], req: Any) -> None:
        self.table = table
        #: table index of the running state block (S speculative blocks follow it);
        #: None until the first allocation that places one
        self.running: int | None = None
        #: every table entry below this index is the null block
        self.live_from = 0
        #: blocks that will hold exactly their boundary's state once the request's
        #: num_computed_tokens reaches it: table index -> block
        self.pending: dict[int, KVCacheBlock] = {}
        self.req = req


class MambaManager(SingleTypeManager):
    """Block tables of one ``mamba`` group (see the module docstring for what a step
    reads, writes, frees and publishes in each mode).

    Construction as :class:`~kvcore.runtime.managers.SingleTypeManager`; the mode, the
    speculative block count and the SSM chunk come from the group's
    :class:`~kvcore_mamba.spec.MambaSpec`.  Raises :class:`~kvcore.errors.ConfigError`
    when the block size is not a multiple of the spec's ``block_size_alignment``
    (``all`` mode: ``mamba_chunk_size``).
    """

    excludes_lookahead_tokens = True
    #: EAGLE: the state's search never drops a block (vLLM 0.32's MambaManager; its
    #: checkpoints are placed one block back instead, :func:`align_prefill_chunk`)
    eagle_drops_hit_block = False

    def __init__(self, spec: Any, block_pool: BlockPool, group_id: int, **kw: Any) -> None:
        super().__init__(spec, block_pool, group_id, **kw)
        self.mode: str = getattr(spec, "mamba_cache_mode", "none")
        self.num_spec: int = int(getattr(spec, "num_speculative_blocks", 0))
        chunk = getattr(spec, "mamba_chunk_size", None)
        self.chunk_size: int | None = int(chunk) if chunk else None
        align = int(getattr(spec, "block_size_alignment", 1) or 1)
        if self.block_size % align:
            from kvcore.errors import ConfigError

            raise ConfigError(
                f"group {group_id} (mamba, mamba_cache_mode {self.mode!r}): block_size "
                f"{self.block_size} is not a multiple of mamba_chunk_size {align}; the "
                f"SSM kernel has no state at such block boundaries (plan with kvcore, "
                f"which rounds the block size up)", field="block_size",
                value=self.block_size, mamba_chunk_size=align)
        self.skips_blocks = self.mode != "none"  # type: ignore[misc]
        self._st: dict[str, _ReqState] = {}

    # ---- the step --------------------------------------------------------------------
    def _fresh(self, rid: str, table: Sequence[KVCacheBlock] | None) -> _ReqState | None:
        """The request's state when it belongs to ``table`` (else None: stale or none)."""
        st = self._st.get(rid)
        return st if st is not None and st.table is table else None

    def _layout(self, rid: str, table: Sequence[KVCacheBlock] | None) -> tuple[int, bool]:
        """(read block index, whether speculative blocks are in the table)."""
        st = self._st.get(rid)
        if st is not None and st.running is not None and st.table is table:
            return st.running, True
        if table:  # a cache hit only: its last block is the state to resume from
            return len(table) - 1, False
        return -1, False

    def _plan(self, request: Any, num_tokens: int, table: Sequence[KVCacheBlock] | None
              ) -> tuple[int, bool, int, list[int], int]:
        """(read index, has speculative blocks, running index, the ``all``-mode boundary
        indices that get a block, number of new blocks) for a step to ``num_tokens``."""
        rid = request.request_id
        st = self._st.get(rid)
        if st is not None and st.running is not None and st.table is table:
            running, has_spec = st.running, True
        elif table:
            running, has_spec = len(table) - 1, False
        else:
            running, has_spec = -1, False
        bs = self.block_size
        target = (num_tokens + bs - 1) // bs - 1 if num_tokens > 0 else 0
        if target <= running:
            return running, has_spec, running, [], 0
        boundaries: list[int] = []
        c = self.chunk_size
        if c and self.mode == "all":
            # boundaries below the request's known tokens: a step with drafts (which
            # are not in all_token_ids) writes its states into the speculative columns,
            # never into boundary blocks; a longer num_tokens only adds boundaries, so
            # a count for a longer sequence bounds the allocation for a shorter one
            start = int(getattr(request, "num_computed_tokens", 0) or 0)
            if not has_spec and table:  # a new request resumes from its hit
                start = max(start, len(table) * bs)
            known = len(request.all_token_ids)
            boundaries = [j for j in range(running + 1, target)
                          if (j + 1) * bs < known and ((j + 1) * bs) % c == 0
                          and ((j + 1) * bs - start) % c == 0]
        return running, has_spec, target, boundaries, \
            len(boundaries) + 1 + (0 if has_spec else self.num_spec)

    # ---- sizing --------------------------------------------------------------------
    def num_required_blocks(self, request: Any, num_tokens: int) -> int:
        if self.mode == "none":
            return 1 + self.num_spec
        return _cdiv(num_tokens, self.block_size) + self.num_spec

    def get_num_blocks_to_allocate(self, request: Any, num_tokens: int,
                                   new_computed_blocks: Sequence[KVCacheBlock]) -> int:
        if self.mode == "none":
            return super().get_num_blocks_to_allocate(request, num_tokens,
                                                      new_computed_blocks)
        table = self.req_to_blocks.get(request.request_id) or list(new_computed_blocks)
        n = self._plan(request, num_tokens, table)[4]
        for b in new_computed_blocks:
            if b.ref_cnt == 0 and not b.is_null:
                n += 1
        return n

    def allocate_new_blocks(self, request: Any, num_tokens: int) -> list[KVCacheBlock]:
        """Move the running state block to the block of token ``num_tokens - 1`` (the
        main model's tokens; null blocks in between, except the ``all``-mode boundary
        blocks), the speculative blocks after it (reused once allocated); returns the
        newly taken blocks."""
        if self.mode == "none":
            return super().allocate_new_blocks(request, num_tokens)
        rid = request.request_id
        table = self.req_to_blocks.get(rid)
        if table is None:
            table = self.req_to_blocks[rid] = []
            self.num_cached_blocks.setdefault(rid, 0)
        st = self._st.get(rid)
        if st is None or st.table is not table:
            # a new table for this id (first allocation, or a stale state)
            st = self._st[rid] = _ReqState(table, request)
        else:
            st.req = request
        running, has_spec, target, boundaries, n_new = self._plan(request, num_tokens, table)
        new: list[KVCacheBlock] = []
        if n_new:
            spec_blocks = table[running + 1:running + 1 + self.num_spec] if has_spec else []
            del table[running + 1:]
            new = self.pool.get_new_blocks(n_new)
            it = iter(new)
            pending = st.pending
            marks = set(boundaries)
            null = self.null_block
            for j in range(running + 1, target):
                if j in marks:
                    b = next(it)
                    pending[j] = b
                    table.append(b)
                else:
                    table.append(null)
            table.append(next(it))
            table.extend(spec_blocks if has_spec else it)
            st.running = target
        bs = self.block_size
        if num_tokens % bs == 0 and num_tokens // bs - 1 == target \
                and num_tokens <= len(request.all_token_ids) and target < len(table):
            # the step ends on the running block's boundary without drafts
            st.pending[target] = table[target]
        return new

    # ---- freeing states behind the read block ---------------------------------------
    def get_num_skipped_tokens(self, num_computed_tokens: int) -> int:
        """Only the state after the last computed token is needed."""
        return max(num_computed_tokens - 1, 0)

    def _skip_range(self, rid: str) -> tuple[list[KVCacheBlock], int, int]:
        """(table, first index not yet freed, read index): the range to free."""
        table = self.req_to_blocks.get(rid)
        if not table:
            return [], 0, 0
        st = self._st.get(rid)
        if st is None or st.running is None or st.table is not table:
            return table, 0, len(table) - 1
        return table, st.live_from, st.running

    def num_blocks_freed_by_skipping(self, request_id: str, num_computed_tokens: int) -> int:
        if not self.skips_blocks:
            return 0
        table, start, limit = self._skip_range(request_id)
        if limit <= start:
            return 0
        return sum(1 for i in range(start, limit)
                   if not table[i].is_null and table[i].ref_cnt == 1)

    def remove_skipped_blocks(self, request_id: str, num_computed_tokens: int) -> None:
        """Free every real block before the read block (the previous read block and,
        in ``all`` mode, passed boundary blocks), tail first, after publishing those
        whose step has run; unlike the base class it does not stop at a null block
        (align tables are mostly nulls)."""
        if not self.skips_blocks:
            return
        table, start, limit = self._skip_range(request_id)
        if limit <= start:
            return
        self._publish(request_id)
        st = self._fresh(request_id, table)
        pending = st.pending if st is not None else None
        null = self.null_block
        removed = []
        for i in range(limit - 1, start - 1, -1):
            b = table[i]
            if not b.is_null:
                removed.append(b)
                table[i] = null
                if pending:
                    pending.pop(i, None)
        if st is not None:
            st.live_from = limit
        if removed:
            self.pool.free_blocks(removed)

    # ---- prefix caching ------------------------------------------------------------
    def _publish(self, rid: str) -> None:
        """Cache the pending boundary blocks whose step has run (the request's
        ``num_computed_tokens`` reached the boundary) and whose hash is known."""
        st = self._st.get(rid)
        if st is None or not st.pending:
            return
        pending = st.pending
        table = self.req_to_blocks.get(rid)
        if not self.enable_caching or table is None or st.table is not table:
            pending.clear()
            return
        req = st.req
        done = int(getattr(req, "num_computed_tokens", 0) or 0)
        hashes = req.block_hashes
        stride = self.hash_stride
        bs = self.block_size
        for i in sorted(pending):
            if (i + 1) * bs > done or (i + 1) * stride > len(hashes):
                continue
            b = pending.pop(i)
            if i < len(table) and table[i] is b and not b.is_null:
                self.pool.cache_full_blocks(table, hashes, i, i + 1, self.group_id,
                                            stride, req, bs)

    def cache_blocks(self, request: Any, num_tokens: int) -> None:
        """Publish the boundary blocks whose step has run (module docstring); a block
        is never cached at the allocation that will write it."""
        if self.mode == "none" or not self.enable_caching:
            return
        st = self._st.get(request.request_id)
        if st is not None and st.pending:
            st.req = request
            self._publish(request.request_id)

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

    # ---- the chunk cap -----------------------------------------------------------------
    def max_prefill_chunk_tokens(self, request: Any, num_computed_tokens: int,
                                 num_new_tokens: int) -> int:
        """:func:`align_prefill_chunk` for this group (``align`` and ``all`` modes;
        ``none`` caches nothing and never cuts).  The tokens to prefill are the prompt,
        or for a resumed request every token but the last."""
        if self.mode == "none" or not self.enable_caching:
            return num_new_tokens
        prefill_end = max(int(request.num_prompt_tokens), len(request.all_token_ids) - 1)
        return align_prefill_chunk(
            num_computed_tokens, num_new_tokens, prefill_end, self.block_size,
            self.use_eagle,
            states_inside_chunk=self.mode == "all" and self.chunk_size is not None)

    # ---- lifecycle -----------------------------------------------------------------
    def free(self, request_id: str) -> None:
        """Publish the boundary blocks whose step has run, then release the table."""
        self._publish(request_id)
        super().free(request_id)
        self._st.pop(request_id, None)

    def state_block(self, request_id: str) -> KVCacheBlock | None:
        """The block holding the request's running state (None before allocation)."""
        table = self.req_to_blocks.get(request_id)
        if not table:
            return None
        if self.mode == "none":
            return table[0]
        running, _ = self._layout(request_id, table)
        return table[running]

    def state_blocks(self, request_id: str) -> list[KVCacheBlock]:
        """``[running block, S speculative blocks]``: the columns a state kernel writes
        this step (the state after token ``C + j`` into column ``j - 1``); [] before
        allocation."""
        table = self.req_to_blocks.get(request_id)
        if not table:
            return []
        if self.mode == "none":
            return list(table[:1 + self.num_spec])
        running, has_spec = self._layout(request_id, table)
        return list(table[running:running + 1 + (self.num_spec if has_spec else 0)])
