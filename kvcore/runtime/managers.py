"""Per-kind block managers: one instance per KV-cache group.

A manager keeps, for each request, the group's **block table** (``req_to_blocks[rid]``,
a list of :class:`~kvcore.runtime.block_pool.KVCacheBlock`, block ``i`` covering token
positions ``[i * block_size, (i + 1) * block_size)``) and how many of those blocks are
already in the prefix cache (``num_cached_blocks[rid]``).  All blocks come from, and go
back to, the shared :class:`~kvcore.runtime.block_pool.BlockPool`.

The coordinator (:mod:`kvcore.runtime.coordinator`) gets each group's manager class
from the registry (``get_registry().manager_class(group.spec)``), so a plugin kind
gets its own manager by naming it in its ``SpecType``.

How a plugin kind implements its manager
========================================
Subclass :class:`SingleTypeManager` and override only what differs from full
attention:

``num_required_blocks(request, num_tokens) -> int``
    Blocks the request's table must have once it holds ``num_tokens`` tokens.  Default
    ``cdiv(num_tokens, block_size)``.  A kind with **fixed per-request blocks** returns a
    constant: a Mamba state (``none`` mode: 1 block; ``align`` mode: 1 + speculative
    blocks), a ring buffer (``cdiv(ring_len, block_size)``), cross attention
    (``cdiv(request.num_encoder_tokens, block_size)``, ignoring ``num_tokens``).  When
    the table is already longer nothing is allocated.

``allocate_new_blocks(request, num_tokens) -> list[KVCacheBlock]``
    Appends ``num_required_blocks - len(table)`` new blocks (``self.pool.get_new_blocks``)
    and returns them.  Override to place blocks elsewhere than at the end (e.g. a kind
    that writes its state into a rotating slot); keep ``get_num_blocks_to_allocate`` in
    agreement with it: the coordinator checks that count against the free blocks
    *before* any manager changes state (``allocate_slots`` is all-or-nothing).

``get_num_skipped_tokens(num_computed_tokens) -> int`` and ``skips_blocks = True``
(or ``skipped_block_range(request_id, num_computed_tokens) -> (start, end)`` for a kind
that frees blocks in the middle of its table)
    Tokens that no future token attends to (a sliding window: ``num_computed_tokens -
    sliding_window + 1``; a local chunk: the start of the current chunk).  The base class
    then **removes blocks that left the window**: each block wholly before that point is
    freed and replaced by ``self.null_block`` in the table (so block indices keep their
    meaning), tail first.  ``num_blocks_freed_by_skipping`` counts them for the
    all-or-nothing check; override both together if the kind frees blocks by another
    rule (e.g. a Mamba ``align`` mode freeing the previous state block).

``find_longest_cache_hit(block_hashes, max_length, extra_tokens=0) -> list[KVCacheBlock]``
    The cached blocks of the longest prefix of at most ``max_length`` tokens that this
    group can serve, as a block table (null blocks where the kind needs no content, e.g.
    outside a window).  ``block_hashes`` is the request's hash list at the hash block
    size; this group's key for its block ``i`` is ``block_hashes[(i + 1) * hash_stride -
    1]`` (a chained hash covers the whole prefix, so the last sub-block's hash keys a
    bigger block).  ``extra_tokens`` (EAGLE's dropped block) asks a windowed kind to
    also hold the window before ``hit - extra_tokens``.  Full attention walks left to
    right and stops at the first miss; a sliding window walks right to left for
    ``cdiv(window - 1 + extra_tokens, block_size)`` contiguous hits.  The hybrid
    coordinator calls every group's method with shrinking ``max_length`` until all
    agree.

``participates_in_prefix_caching`` / ``limits_prefix_hits``
    Taken from the spec's ``participates_in_prefix_caching`` by default.  A kind that
    does not participate never caches blocks.  If its content is a function of the
    prefix that it cannot restore (a Mamba state in ``none`` mode) keep
    ``limits_prefix_hits = True``: the coordinator then turns prefix caching off for the
    whole model.  If it is independent of the prefix (cross attention: the encoder
    output) set ``limits_prefix_hits = False`` and hits are decided by the other groups.

``max_cache_hit_tokens(request) -> int | None``
    An upper bound on the request's hit, applied before the search (default None).

``max_prefill_chunk_tokens(request, num_computed_tokens, num_new_tokens) -> int``
    The chunk cap: how many of the prefill tokens one step may compute (default all).

``excludes_lookahead_tokens = True``
    The sizing and allocation methods get ``num_computed + num_new_tokens`` without the
    lookahead slots (a Mamba state, which keeps its own speculative blocks).

``cache_blocks(request, num_tokens)`` / ``free(request_id)``
    Enter newly full blocks in the cache / release the table tail first.  Rarely
    overridden.

Construction: ``Manager(spec, block_pool, group_id, *, enable_caching, max_model_len,
hash_block_size, use_eagle=False, max_num_batched_tokens=8192)``; keep this signature.

Block counts follow vLLM v1 ``single_type_kv_cache_manager.py``; the sink reservation
is kvcore's (see :class:`SinkFullAttentionManager`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar

from kvcore.runtime.block_pool import BlockPool, KVCacheBlock

__all__ = [
    "SingleTypeManager",
    "FullAttentionManager",
    "SlidingWindowManager",
    "ChunkedLocalAttentionManager",
    "CrossAttentionManager",
    "SinkFullAttentionManager",
]


class SingleTypeManager:
    """Base manager: the block tables of one KV-cache group (full-attention behaviour).

    Parameters
    ----------
    spec: the group's merged :class:`~kvcore.specs.KVCacheSpec`.
    block_pool: the shared pool.
    group_id: index of the group in ``KVCacheConfig.kv_cache_groups``.
    enable_caching: prefix caching on for the model.
    max_model_len: longest sequence in tokens.
    hash_block_size: tokens per request block hash; must divide ``spec.block_size``.
    use_eagle: speculative decoding that recomputes the last hit block.
    max_num_batched_tokens: tokens of one step (bounds in-flight window tokens).
    """

    #: True when the kind frees blocks that left its attention span
    skips_blocks: ClassVar[bool] = False
    #: a non-caching group still bounds prefix hits (see module docstring)
    limits_prefix_hits: ClassVar[bool] = True
    #: the kind sizes its table by the main model's tokens (``num_computed_tokens +
    #: num_new_tokens``, draft tokens included) and not by the lookahead slots, so
    #: :class:`~kvcore.runtime.manager.KVCacheManager` passes ``num_tokens`` without
    #: ``num_lookahead_tokens`` to its sizing and allocation methods (a recurrent
    #: state: draft models have no state layers and the kind keeps its own speculative
    #: blocks, so a lookahead on one call and none on the next must not move its state)
    excludes_lookahead_tokens: ClassVar[bool] = False
    #: with EAGLE the hit search drops this group's last matched block (every
    #: attention kind; vLLM 0.32's ``eagle_proof_margin`` rule).  False for a recurrent
    #: state, whose search never drops (draft models have no state layers; its
    #: checkpoints already sit one block back): it then takes no margin either
    eagle_drops_hit_block: ClassVar[bool] = True

    def __init__(self, spec: Any, block_pool: BlockPool, group_id: int, *,
                 enable_caching: bool, max_model_len: int, hash_block_size: int,
                 use_eagle: bool = False, max_num_batched_tokens: int = 8192) -> None:
        from kvcore.errors import ConfigError
        from kvcore.runtime.manager import _bool_arg, _int_arg

        where = type(self).__name__
        if not isinstance(block_pool, BlockPool):
            raise ConfigError(f"{where}: block_pool must be a BlockPool, got "
                              f"{type(block_pool).__name__} {repr(block_pool)[:40]}",
                              field="block_pool")
        bs = getattr(spec, "block_size", None)
        if type(bs) is not int or bs < 1:
            raise ConfigError(f"{where}: spec must be a KV-cache spec with an int "
                              f"block_size >= 1 (tokens), got {type(spec).__name__} "
                              f"{repr(spec)[:60]}", field="spec")
        group_id = _int_arg(where, "group_id", group_id, 0, len(block_pool.cached) - 1,
                            err=ConfigError)
        max_model_len = _int_arg(where, "max_model_len", max_model_len, 1, 1 << 40,
                                 err=ConfigError)
        hash_block_size = _int_arg(where, "hash_block_size", hash_block_size, 1, 1 << 40,
                                   err=ConfigError)
        max_num_batched_tokens = _int_arg(where, "max_num_batched_tokens",
                                          max_num_batched_tokens, 1, 1 << 40,
                                          err=ConfigError)
        _bool_arg(where, "enable_caching", enable_caching, err=ConfigError)
        _bool_arg(where, "use_eagle", use_eagle, err=ConfigError)
        self.spec = spec
        self.block_size: int = spec.block_size
        self.pool = block_pool
        self.group_id = group_id
        self.max_model_len = max_model_len
        self.use_eagle = use_eagle
        self.max_num_batched_tokens = max_num_batched_tokens
        self.null_block = block_pool.null_block
        self.participates_in_prefix_caching: bool = bool(
            getattr(spec, "participates_in_prefix_caching", True))
        self.enable_caching = enable_caching and self.participates_in_prefix_caching
        if self.block_size % hash_block_size:
            from kvcore.errors import ConfigError

            raise ConfigError(
                f"group {group_id} block_size {self.block_size} is not a multiple of the "
                f"hash block size {hash_block_size}", field="block_size",
                value=self.block_size)
        self.hash_stride = self.block_size // hash_block_size
        self.req_to_blocks: dict[str, list[KVCacheBlock]] = {}
        self.num_cached_blocks: dict[str, int] = {}
        #: leading table entries already replaced by the null block (skipping kinds)
        self.num_skipped_blocks: dict[str, int] = {}

    # ---- sizing --------------------------------------------------------------------
    def num_required_blocks(self, request: Any, num_tokens: int) -> int:
        """Blocks the table needs to hold ``num_tokens`` tokens."""
        return -(-num_tokens // self.block_size)

    def get_num_blocks_to_allocate(self, request: Any, num_tokens: int,
                                   new_computed_blocks: Sequence[KVCacheBlock]) -> int:
        """Free blocks this group would consume: new blocks, plus hit blocks that must
        leave the free queue (cached-and-free, not null)."""
        held = self.req_to_blocks.get(request.request_id)
        n_have = (len(held) if held else 0) + len(new_computed_blocks)
        n_new = self.num_required_blocks(request, num_tokens) - n_have
        if n_new < 0:
            n_new = 0
        for b in new_computed_blocks:
            if b.ref_cnt == 0 and not b.is_null:
                n_new += 1
        return n_new

    def save_new_computed_blocks(self, request_id: str,
                                 new_computed_blocks: Sequence[KVCacheBlock]) -> None:
        """Append cache-hit blocks to a new request's table (adds a holder to each)."""
        if not new_computed_blocks:
            return
        table = self.req_to_blocks.get(request_id)
        if table:
            from kvcore.errors import RequestError

            raise RequestError(f"request {request_id!r} already holds blocks; cache hits "
                               "are only taken at admission", field="new_computed_blocks")
        self.pool.touch(new_computed_blocks)
        self.req_to_blocks[request_id] = list(new_computed_blocks)
        self.num_cached_blocks[request_id] = len(new_computed_blocks)

    def allocate_new_blocks(self, request: Any, num_tokens: int) -> list[KVCacheBlock]:
        """Grow the table to ``num_required_blocks`` blocks; returns the new ones."""
        rid = request.request_id
        table = self.req_to_blocks.get(rid)
        if table is None:
            table = self.req_to_blocks[rid] = []
            self.num_cached_blocks.setdefault(rid, 0)
        n = self.num_required_blocks(request, num_tokens) - len(table)
        if n <= 0:
            return []
        new = self.pool.get_new_blocks(n)
        table.extend(new)
        return new

    # ---- prefix caching ------------------------------------------------------------
    def cache_blocks(self, request: Any, num_tokens: int) -> None:
        """Cache the table's blocks that are full at ``num_tokens`` tokens."""
        if not self.enable_caching:
            return
        rid = request.request_id
        num_full = num_tokens // self.block_size
        done = self.num_cached_blocks.get(rid, 0)
        if num_full <= done:
            return
        table = self.req_to_blocks[rid]
        if num_full > len(table):
            num_full = len(table)
        hashed = len(request.block_hashes) // self.hash_stride
        if num_full > hashed:  # tokens added outside the hasher: no hash to key them by
            num_full = hashed
        if num_full <= done:
            return
        self.pool.cache_call(self)(table, request.block_hashes, done, num_full,
                                   self.group_id, self.hash_stride, request,
                                   self.block_size)
        self.num_cached_blocks[rid] = num_full

    def block_key(self, block_hashes: Sequence[bytes], i: int) -> bytes:
        """This group's cache key for its block ``i``."""
        return block_hashes[(i + 1) * self.hash_stride - 1]

    def num_hashed_blocks(self, block_hashes: Sequence[bytes]) -> int:
        return len(block_hashes) // self.hash_stride

    def max_cache_hit_tokens(self, request: Any) -> int | None:
        """The most tokens of ``request`` this kind may serve from the prefix cache, or
        None for no limit beyond the usual one.  A kind whose cached content is valid
        only for part of a sequence overrides it (R-SWA: only prompt blocks hold
        prefix-determined K/V, so a resumed request must not hit past its prompt).
        Applied by :meth:`KVCacheManager.get_computed_blocks` before the search."""
        return None

    def max_prefill_chunk_tokens(self, request: Any, num_computed_tokens: int,
                                 num_new_tokens: int) -> int:
        """How many of the ``num_new_tokens`` prefill tokens starting at token
        ``num_computed_tokens`` this kind lets one step compute (1 to
        ``num_new_tokens``; the chunk cap an engine asks for through
        :meth:`KVCacheManager.max_prefill_chunk_tokens`).  Default: all of them.  A kind
        whose kernel writes what it caches only where a chunk ends overrides it (a
        Mamba state in ``align`` mode: a chunk that crosses a block boundary whose
        state will be cached must end on it)."""
        return num_new_tokens

    def find_longest_cache_hit(self, block_hashes: Sequence[bytes], max_length: int,
                               extra_tokens: int = 0) -> list[KVCacheBlock]:
        """Left to right: cached blocks until the first miss, at most
        ``max_length // block_size`` blocks."""
        n = max_length // self.block_size
        stride = self.hash_stride
        hashed = len(block_hashes) // stride
        if hashed < n:
            n = hashed
        get = self.pool.cached[self.group_id].get
        out: list[KVCacheBlock] = []
        if stride == 1:
            for h in block_hashes[:n] if n < len(block_hashes) else block_hashes:
                b = get(h)
                if b is None:
                    break
                out.append(b)
        else:
            for i in range(n):
                b = get(block_hashes[(i + 1) * stride - 1])
                if b is None:
                    break
                out.append(b)
        return out

    # ---- windows -------------------------------------------------------------------
    def get_num_skipped_tokens(self, num_computed_tokens: int) -> int:
        """Leading tokens no future token attends to (0 for full attention)."""
        return 0

    def skipped_block_range(self, request_id: str, num_computed_tokens: int
                            ) -> tuple[int, int]:
        """Table indices ``[start, end)`` whose blocks no future token reads: the blocks
        wholly before the skipped point, from the first one not yet skipped.  A kind
        that frees another range (R-SWA: the gap between prompt and window) overrides
        this alone."""
        n = self.get_num_skipped_tokens(num_computed_tokens) // self.block_size
        return self.num_skipped_blocks.get(request_id, 0), n

    def num_blocks_freed_by_skipping(self, request_id: str, num_computed_tokens: int) -> int:
        """Blocks :meth:`remove_skipped_blocks` would return to the free queue."""
        if not self.skips_blocks:
            return 0
        table = self.req_to_blocks.get(request_id)
        if not table:
            return 0
        start, end = self.skipped_block_range(request_id, num_computed_tokens)
        count = 0
        for i in range(min(end, len(table)) - 1, start - 1, -1):
            b = table[i]
            if b.is_null:
                break
            if b.ref_cnt == 1:
                count += 1
        return count

    def remove_skipped_blocks(self, request_id: str, num_computed_tokens: int) -> None:
        """Free the blocks of :meth:`skipped_block_range`, replacing them with the null
        block (tail first; stops at the first null block, which marks earlier skips)."""
        if not self.skips_blocks:
            return
        table = self.req_to_blocks.get(request_id)
        if not table:
            return
        start, end = self.skipped_block_range(request_id, num_computed_tokens)
        end = min(end, len(table))
        if end <= start:
            return
        removed = []
        null = self.null_block
        for i in range(end - 1, start - 1, -1):
            b = table[i]
            if b.is_null:
                break
            removed.append(b)
            table[i] = null
        self.num_skipped_blocks[request_id] = end
        if removed:
            self.pool.free_blocks(removed)

    # ---- lifecycle -----------------------------------------------------------------
    def free(self, request_id: str) -> None:
        """Release the request's table, last block first."""
        table = self.req_to_blocks.pop(request_id, None)
        self.num_cached_blocks.pop(request_id, None)
        self.num_skipped_blocks.pop(request_id, None)
        if table:
            table.reverse()
            self.pool.free_blocks(table)

    def get_blocks(self, request_id: str) -> list[KVCacheBlock]:
        return self.req_to_blocks.get(request_id, [])

    def running_request_ids(self) -> list[str]:
        return list(self.req_to_blocks)


class FullAttentionManager(SingleTypeManager):
    """Causal attention over all earlier tokens: ``cdiv(num_tokens, block_size)`` blocks;
    hits are the leading cached blocks.  Also serves MLA kinds."""


class SlidingWindowManager(SingleTypeManager):
    """Each token attends to the last ``sliding_window`` tokens.

    Skipped tokens: ``num_computed_tokens - sliding_window + 1``.  A hit of ``L`` tokens
    needs only the ``cdiv(sliding_window - 1, block_size)`` blocks before ``L`` (found
    right to left); earlier positions are null blocks.
    """

    skips_blocks: ClassVar[bool] = True

    def __init__(self, spec: Any, block_pool: BlockPool, group_id: int, **kw: Any) -> None:
        super().__init__(spec, block_pool, group_id, **kw)
        window = getattr(spec, "sliding_window", None)
        if not window:
            from kvcore.errors import ConfigError

            raise ConfigError(f"group {group_id} ({spec.kind}) needs a sliding_window",
                              field="sliding_window", value=window)
        self.sliding_window: int = window

    def get_num_skipped_tokens(self, num_computed_tokens: int) -> int:
        return max(0, num_computed_tokens - self.sliding_window + 1)

    def find_longest_cache_hit(self, block_hashes: Sequence[bytes], max_length: int,
                               extra_tokens: int = 0) -> list[KVCacheBlock]:
        bs = self.block_size
        stride = self.hash_stride
        n = min(max_length // bs, len(block_hashes) // stride)
        needed = -(-(self.sliding_window - 1 + extra_tokens) // bs)
        null = self.null_block
        out = [null] * n
        if needed <= 0:
            return out
        get = self.pool.cached[self.group_id].get
        run = 0
        for i in range(n - 1, -1, -1):
            b = get(block_hashes[(i + 1) * stride - 1])
            if b is None:
                run = 0
                continue
            out[i] = b
            run += 1
            if run >= needed:
                del out[i + needed:]
                return out
        # no window-long run: only a run starting at block 0 is usable
        del out[run:]
        return out


class ChunkedLocalAttentionManager(SingleTypeManager):
    """Attention within fixed chunks of ``attention_chunk_size`` tokens (Llama 4).

    Skipped tokens: the start of the current chunk.  A hit of ``L`` tokens needs only
    the blocks of the chunk holding ``L`` (earlier ones are null blocks)."""

    skips_blocks: ClassVar[bool] = True

    def __init__(self, spec: Any, block_pool: BlockPool, group_id: int, **kw: Any) -> None:
        super().__init__(spec, block_pool, group_id, **kw)
        chunk = getattr(spec, "attention_chunk_size", None)
        if not chunk:
            from kvcore.errors import ConfigError

            raise ConfigError(f"group {group_id} ({spec.kind}) needs an "
                              f"attention_chunk_size", field="attention_chunk_size",
                              value=chunk)
        self.attention_chunk_size: int = chunk

    def get_num_skipped_tokens(self, num_computed_tokens: int) -> int:
        return num_computed_tokens // self.attention_chunk_size * self.attention_chunk_size

    def find_longest_cache_hit(self, block_hashes: Sequence[bytes], max_length: int,
                               extra_tokens: int = 0) -> list[KVCacheBlock]:
        bs = self.block_size
        stride = self.hash_stride
        n = min(max_length // bs, len(block_hashes) // stride)
        chunk = self.attention_chunk_size
        start = min(max_length // chunk * chunk // bs, n)
        out = [self.null_block] * start
        get = self.pool.cached[self.group_id].get
        for i in range(start, n):
            b = get(block_hashes[(i + 1) * stride - 1])
            if b is None:
                break
            out.append(b)
        return out


class CrossAttentionManager(SingleTypeManager):
    """Decoder cross-attention: ``cdiv(request.num_encoder_tokens, block_size)`` blocks
    allocated at admission, sized by *this request's* encoder length (never by a batch
    encoder budget); not prefix cached and neutral to other groups' hits."""

    limits_prefix_hits: ClassVar[bool] = False

    def num_required_blocks(self, request: Any, num_tokens: int) -> int:
        return -(-int(getattr(request, "num_encoder_tokens", 0) or 0) // self.block_size)

    def find_longest_cache_hit(self, block_hashes: Sequence[bytes], max_length: int,
                               extra_tokens: int = 0) -> list[KVCacheBlock]:
        return []


class SinkFullAttentionManager(FullAttentionManager):
    """Full attention plus ``sink_len`` sink tokens shared by every request.

    The sink K/V live in ``cdiv(sink_len, block_size)`` blocks reserved once from the
    pool at construction (``self.sink_blocks``, held for the manager's lifetime); the
    per-request tables are those of full attention.  Kernels read the sink blocks in
    addition to the table."""

    def __init__(self, spec: Any, block_pool: BlockPool, group_id: int, **kw: Any) -> None:
        super().__init__(spec, block_pool, group_id, **kw)
        sink_len = int(getattr(spec, "sink_len", 0))
        n = -(-sink_len // self.block_size)
        if n > block_pool.num_free_blocks:
            from kvcore.errors import NotEnoughMemoryError

            raise NotEnoughMemoryError(
                f"group {group_id} ({spec.kind}): sink_len {sink_len} needs {n} sink "
                f"blocks of block_size {self.block_size}, but the pool has only "
                f"{block_pool.num_free_blocks} free (num_blocks {block_pool.num_blocks}); "
                f"plan with more memory or a shorter sink_len", field="sink_len",
                value=sink_len, sink_blocks=n, num_free_blocks=block_pool.num_free_blocks)
        self.sink_blocks: list[KVCacheBlock] = block_pool.reserve_blocks(n) if n else []
