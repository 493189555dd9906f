"""KVCacheManager: the runtime entry point a scheduler calls every step.

::

    from kvcore.runtime import KVCacheManager
    mgr = KVCacheManager(kv_cache_config, max_model_len=8192)
    req = mgr.make_request("r0", prompt_token_ids, max_tokens=128)
    hit_blocks, n = mgr.get_computed_blocks(req)          # n cached prompt tokens
    new = mgr.allocate_slots(req, req.num_tokens - n, num_new_computed_tokens=n,
                             new_computed_blocks=hit_blocks)  # None: does not fit
    req.num_computed_tokens = req.num_tokens               # after the model ran
    req.append_output_token_ids(tok)                       # hashes completed blocks
    mgr.allocate_slots(req, 1)                             # decode
    mgr.free(req)

Semantics follow vLLM v1's ``KVCacheManager`` (``kv_cache_manager.py``); the departures
are listed on the methods.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from kvcore.runtime.block_pool import BlockPool, KVCacheBlock
from kvcore.runtime.coordinator import UnitaryCoordinator, make_coordinator
from kvcore.runtime.hashing import BlockHasher, Request
from kvcore.runtime.managers import SingleTypeManager

__all__ = ["KVCacheManager", "KVCacheBlocks", "PrefixCacheStats"]


class KVCacheBlocks:
    """Blocks per KV-cache group: ``blocks[g]`` is a list of
    :class:`~kvcore.runtime.block_pool.KVCacheBlock` for group ``g``."""

    __slots__ = ("blocks",)

    def __init__(self, blocks: Sequence[list[KVCacheBlock]]) -> None:
        self.blocks = tuple(blocks)

    def get_block_ids(self) -> tuple[list[int], ...]:
        """Block ids per group."""
        return tuple([b.block_id for b in g] for g in self.blocks)

    def __len__(self) -> int:
        return len(self.blocks)

    def __bool__(self) -> bool:
        return any(self.blocks)

    def __repr__(self) -> str:
        return f"KVCacheBlocks({self.get_block_ids()})"


@dataclass
class PrefixCacheStats:
    """Prefix-cache lookups since the last :meth:`KVCacheManager.prefix_cache_stats`.

    requests: lookups; queries: prompt tokens looked up; hits: tokens served from
    the cache; reset: whether the cache was reset in the interval."""

    requests: int = 0
    queries: int = 0
    hits: int = 0
    reset: bool = False

    @property
    def hit_rate(self) -> float:
        return self.hits / self.queries if self.queries else 0.0


class KVCacheManager:
    """Blocks for requests across every KV-cache group, with prefix caching.

    Parameters
    ----------
    kv_cache_config: a planned :class:`~kvcore.kv_cache_config.KVCacheConfig`
        (``num_blocks`` counts the null block 0).
    max_model_len: longest sequence in tokens (slots are never allocated past it).
    enable_caching: prefix caching.
    hash: block hash: ``"sha256"`` (default), ``"sha256_128"`` or a callable
        ``bytes -> bytes`` (:mod:`kvcore.runtime.hashing`).
    use_eagle: EAGLE speculative decoding (the last hit block is recomputed).
    enable_events: record events for :meth:`take_events` (off by default, as in vLLM).
    max_num_batched_tokens: tokens per step (windowed kinds' sizing).

    Raises :class:`~kvcore.errors.ConfigError` when ``num_blocks`` is missing or < 2.
    """

    def __init__(self, kv_cache_config: Any, *, max_model_len: int,
                 enable_caching: bool = True,
                 hash: str | Callable[[bytes], bytes] = "sha256",
                 use_eagle: bool = False, enable_events: bool = False,
                 max_num_batched_tokens: int = 8192) -> None:
        from kvcore.errors import ConfigError

        num_blocks = kv_cache_config.num_blocks
        if num_blocks is None:
            raise ConfigError("kv_cache_config.num_blocks is None (planned without a "
                              "memory budget); the runtime needs a block count",
                              field="num_blocks")
        self.kv_cache_config = kv_cache_config
        self.max_model_len = max_model_len
        self.use_eagle = use_eagle
        self.hash = hash
        groups = kv_cache_config.kv_cache_groups
        self.block_pool = BlockPool(num_blocks, enable_caching=enable_caching,
                                    num_groups=max(1, len(groups)),
                                    enable_events=enable_events)
        self.coordinator = make_coordinator(
            kv_cache_config, self.block_pool, max_model_len=max_model_len,
            enable_caching=enable_caching, use_eagle=use_eagle,
            max_num_batched_tokens=max_num_batched_tokens)
        base_cap = SingleTypeManager.max_cache_hit_tokens
        self._hit_cappers = [m for m in self.coordinator.managers
                             if type(m).max_cache_hit_tokens is not base_cap]
        base_chunk = SingleTypeManager.max_prefill_chunk_tokens
        self._chunk_cappers = [m for m in self.coordinator.managers
                               if type(m).max_prefill_chunk_tokens is not base_chunk]
        self.enable_caching = bool(self.coordinator.caching_managers)
        self.managers: list[SingleTypeManager] = self.coordinator.managers
        self.hash_block_size = self.coordinator.hash_block_size
        self._hasher = BlockHasher(self.hash_block_size, hash)
        self._stats = PrefixCacheStats()
        self._requests: dict[str, Any] = {}
        n = len(self.managers)
        self._empty = KVCacheBlocks([[] for _ in range(n)])
        # fast path: one group with the base sizing rule and no skipping
        m0 = self.managers[0] if n == 1 else None
        self._fast = m0 if (
            m0 is not None and not m0.skips_blocks
            and type(m0).num_required_blocks is SingleTypeManager.num_required_blocks
            and type(m0).allocate_new_blocks is SingleTypeManager.allocate_new_blocks
            and type(m0).cache_blocks is SingleTypeManager.cache_blocks) else None
        self._unitary = isinstance(self.coordinator, UnitaryCoordinator)
        if m0 is not None:  # hot-path attributes, fetched once
            self._f_tables = m0.req_to_blocks
            self._f_ncached = m0.num_cached_blocks
            self._f_bs = m0.block_size
            self._f_caching = m0.enable_caching
            self._f_gid = m0.group_id
        self._pool = self.block_pool
        self._fq = self.block_pool.free_queue
        # running requests of several groups: per manager, which base-class rules hold
        base = SingleTypeManager
        self._plans = [
            (m, m.block_size,
             all(getattr(type(m), f) is getattr(base, f) for f in (
                 "num_required_blocks", "get_num_blocks_to_allocate",
                 "allocate_new_blocks")),
             m.skips_blocks and all(getattr(type(m), f) is getattr(base, f) for f in (
                 "num_blocks_freed_by_skipping", "remove_skipped_blocks",
                 "skipped_block_range")),
             m.enable_caching and type(m).cache_blocks is base.cache_blocks)
            for m in self.managers]
        self._tables0 = self.managers[0].req_to_blocks if n else {}

    # ---- requests ------------------------------------------------------------------
    def make_request(self, request_id: str, prompt_token_ids: Sequence[int],
                     **kw: Any) -> Request:
        """A :class:`Request` hashed with this manager's hash block size and hash."""
        return Request(request_id, prompt_token_ids, hash=self._hasher, **kw)

    # ---- prefix lookup -------------------------------------------------------------
    def get_computed_blocks(self, request: Any) -> tuple[KVCacheBlocks, int]:
        """The longest cached prefix of the request: ``(blocks per group, tokens)``.

        At most ``num_tokens - 1`` tokens hit (the last prompt token is recomputed to
        produce logits).  Counts one lookup in :meth:`prefix_cache_stats`.  Changes no
        block state: pass the blocks to :meth:`allocate_slots`.
        """
        if not self.enable_caching:
            return self._empty, 0
        num_tokens = len(request.all_token_ids)
        limit = num_tokens - 1
        for m in self._hit_cappers:
            cap = m.max_cache_hit_tokens(request)
            if cap is not None and cap < limit:
                limit = max(cap, 0)
        blocks, n = self.coordinator.find_longest_cache_hit(request.block_hashes, limit)
        st = self._stats
        st.requests += 1
        st.queries += num_tokens
        st.hits += n
        return KVCacheBlocks(blocks), n

    def max_prefill_chunk_tokens(self, request: Any, num_new_tokens: int,
                                 num_new_computed_tokens: int = 0) -> int:
        """How many of ``num_new_tokens`` prefill tokens the request may compute this
        step so that every group can keep what it caches (the chunk cap).

        Call it after :meth:`get_computed_blocks` and before :meth:`allocate_slots`,
        with the scheduler's chunk (``num_new_tokens``) and the hit
        (``num_new_computed_tokens``), and schedule the returned number (1 to
        ``num_new_tokens``; ``num_new_tokens`` when no group caps, e.g. without state
        layers).  Each group answers through
        :meth:`SingleTypeManager.max_prefill_chunk_tokens` (a Mamba group in ``align``
        mode ends a chunk on the block boundary whose state is cached, as vLLM's
        ``Scheduler._mamba_block_aligned_split`` does); the answers are applied until
        every group agrees.  Decode steps and requests past their prompt are never cut.
        """
        n = num_new_tokens
        if n <= 0 or not self._chunk_cappers:
            return n
        start = request.num_computed_tokens + num_new_computed_tokens
        while True:
            m_prev = n
            for m in self._chunk_cappers:
                n = max(1, min(n, m.max_prefill_chunk_tokens(request, start, n)))
            if n == m_prev:
                return n

    # ---- allocation ----------------------------------------------------------------
    def allocate_slots(self, request: Any, num_new_tokens: int,
                       num_new_computed_tokens: int = 0,
                       new_computed_blocks: KVCacheBlocks | None = None,
                       num_lookahead_tokens: int = 0,
                       full_sequence_must_fit: bool = False) -> KVCacheBlocks | None:
        """Slots for ``num_new_tokens`` more tokens (plus lookahead) of a request.

        Parameters
        ----------
        num_new_tokens: tokens to compute this step (> 0 unless hits are taken).
        num_new_computed_tokens, new_computed_blocks: a cache hit from
            :meth:`get_computed_blocks`, taken at admission.
        num_lookahead_tokens: speculative slots beyond the new tokens.
        full_sequence_must_fit: also require free blocks for the whole prompt plus
            ``request.max_tokens`` outputs (capped at ``max_model_len``), so the
            request will not be preempted for lack of blocks; only the current slots are
            allocated.

        Returns the newly allocated blocks per group, or None when they do not fit;
        then **no state changed** (blocks that left a window are freed only after the
        check, unlike vLLM).  Full blocks are cached at allocation, before their tokens
        are computed, so a request admitted later in the same step hits them.
        """
        rid = request.request_id
        num_computed = request.num_computed_tokens + num_new_computed_tokens
        need = num_computed + num_new_tokens + num_lookahead_tokens
        if need > self.max_model_len:
            need = self.max_model_len
        if self._fast is not None and not full_sequence_must_fit \
                and not new_computed_blocks:
            table = self._f_tables.get(rid)
            if table is not None:
                # running request, one plain group: the hot decode path
                bs = self._f_bs
                n_new = (need + bs - 1) // bs - len(table)
                if n_new > 0:
                    if n_new > self._fq.num_free_blocks:
                        return None
                    new = self._pool.get_new_blocks(n_new)
                    table.extend(new)
                    result = KVCacheBlocks((new,))
                else:
                    result = self._empty
                if self._f_caching:
                    n_full = num_computed + num_new_tokens
                    num_tokens = len(request.all_token_ids)
                    if n_full > num_tokens:
                        n_full = num_tokens
                    n_full //= bs
                    ncached = self._f_ncached
                    done = ncached[rid]
                    if n_full > done:
                        if n_full > len(table):
                            n_full = len(table)
                        self._pool.cache_full_blocks(table, request.block_hashes, done,
                                                     n_full, self._f_gid, 1, request, bs)
                        ncached[rid] = n_full
                return result
        if not full_sequence_must_fit and not new_computed_blocks \
                and rid in self._tables0 and num_new_tokens > 0:
            return self._allocate_running(request, rid, num_computed, num_new_tokens,
                                          need)
        num_tokens = len(request.all_token_ids)
        return self._allocate_general(request, num_new_tokens, num_computed, num_tokens,
                                      need, new_computed_blocks, full_sequence_must_fit)

    def _allocate_running(self, request: Any, rid: str, num_computed: int,
                          num_new_tokens: int, need: int) -> KVCacheBlocks | None:
        """A running request without new hits (several groups or a plugin manager):
        the general rules, with the calls that cannot change anything left out."""
        plans = self._plans
        counts = []
        skips = []
        total = 0
        freed = 0
        for m, bs, plain_alloc, plain_skip, _ in plans:
            if plain_alloc:
                table = m.req_to_blocks.get(rid)
                n = (need + bs - 1) // bs - (len(table) if table else 0)
                if n < 0:
                    n = 0
            else:
                n = m.get_num_blocks_to_allocate(
                    request, min(num_computed + num_new_tokens, need)
                    if m.excludes_lookahead_tokens else need, ())
            counts.append(n)
            total += n
            skip = False
            if m.skips_blocks:
                if not plain_skip or m.get_num_skipped_tokens(num_computed) // bs \
                        > m.num_skipped_blocks.get(rid, 0):
                    freed += m.num_blocks_freed_by_skipping(rid, num_computed)
                    skip = True
            skips.append(skip)
        if total > self._fq.num_free_blocks + freed:
            return None
        for (m, _, _, _, _), skip in zip(plans, skips):
            if skip:
                m.remove_skipped_blocks(rid, num_computed)
        new_blocks: list[list[KVCacheBlock]] | None = None
        for g, ((m, _, plain_alloc, _, _), n) in enumerate(zip(plans, counts)):
            if n or not plain_alloc:
                new = m.allocate_new_blocks(
                    request, min(num_computed + num_new_tokens, need)
                    if m.excludes_lookahead_tokens else need)
                if new:
                    if new_blocks is None:
                        new_blocks = [[] for _ in plans]
                    new_blocks[g] = new
        if self.enable_caching:
            n_cache = num_computed + num_new_tokens
            num_tokens = len(request.all_token_ids)
            if n_cache > num_tokens:
                n_cache = num_tokens
            for m, bs, _, _, plain_cache in plans:
                if plain_cache:
                    if n_cache // bs > m.num_cached_blocks.get(rid, 0):
                        m.cache_blocks(request, n_cache)
                elif m.enable_caching:
                    m.cache_blocks(request, n_cache)
        if new_blocks is None:
            return self._empty
        return KVCacheBlocks(new_blocks)

    def _allocate_general(self, request: Any, num_new_tokens: int, num_computed: int,
                          num_tokens: int, need: int,
                          new_computed_blocks: KVCacheBlocks | None,
                          full_sequence_must_fit: bool) -> KVCacheBlocks | None:
        rid = request.request_id
        if num_new_tokens <= 0 and not new_computed_blocks:
            raise ValueError(f"allocate_slots({rid!r}): num_new_tokens must be > 0, got "
                             f"{num_new_tokens}")
        managers = self.managers
        hit = new_computed_blocks.blocks if new_computed_blocks else None
        check_len = need
        if full_sequence_must_fit:
            prompt = getattr(request, "num_prompt_tokens", num_tokens)
            full = prompt + int(getattr(request, "max_tokens", 0) or 0)
            if full > self.max_model_len:
                full = self.max_model_len
            if full > check_len:
                check_len = full
        total = 0
        freed = 0
        for g, m in enumerate(managers):
            total += m.get_num_blocks_to_allocate(
                request, min(num_computed + num_new_tokens, need)
                if m.excludes_lookahead_tokens and not full_sequence_must_fit
                else check_len, hit[g] if hit else ())
            if m.skips_blocks:
                freed += m.num_blocks_freed_by_skipping(rid, num_computed)
        if total > self.block_pool.free_queue.num_free_blocks + freed:
            return None
        # every group takes its hits before any group takes new blocks: a hit block of
        # one group may sit in the free queue that another group allocates from
        if hit:
            for g, m in enumerate(managers):
                if hit[g]:
                    m.save_new_computed_blocks(rid, hit[g])
        for m in managers:
            if m.skips_blocks:
                m.remove_skipped_blocks(rid, num_computed)
        new_blocks = [m.allocate_new_blocks(
            request, min(num_computed + num_new_tokens, need)
            if m.excludes_lookahead_tokens else need) for m in managers]
        self._requests[rid] = request
        if self.enable_caching:
            n_cache = num_computed + num_new_tokens
            if n_cache > num_tokens:
                n_cache = num_tokens
            for m in self.coordinator.caching_managers:
                m.cache_blocks(request, n_cache)
        if not any(new_blocks):
            return self._empty
        return KVCacheBlocks(new_blocks)

    def free(self, request: Any) -> None:
        """Release every block of the request (each group's table last block first);
        cached blocks stay findable until evicted."""
        rid = request.request_id if not isinstance(request, str) else request
        for m in self.managers:
            m.free(rid)
        self._requests.pop(rid, None)

    # ---- queries -------------------------------------------------------------------
    @property
    def usage(self) -> float:
        """Fraction of usable blocks held by requests or reservations (0.0 to 1.0)."""
        return self.block_pool.usage

    @property
    def num_free_blocks(self) -> int:
        return self.block_pool.free_queue.num_free_blocks

    def get_block_ids(self, request: Any) -> tuple[list[int], ...]:
        """The request's block table per group (block ids; 0 = null block)."""
        rid = request.request_id if not isinstance(request, str) else request
        return tuple([b.block_id for b in m.get_blocks(rid)] for m in self.managers)

    def prefix_cache_stats(self) -> PrefixCacheStats:
        """Lookups since the previous call (then reset)."""
        st, self._stats = self._stats, PrefixCacheStats()
        return st

    def reset_prefix_cache(self, reset_running_requests: bool = False) -> bool:
        """Forget every cached block hash.

        With requests holding blocks: returns False and changes nothing, unless
        ``reset_running_requests``: then every running request's blocks are freed, its
        ``num_computed_tokens`` set to 0 (the scheduler must allocate it again from
        scratch), and the cache cleared.  Returns True when the cache was cleared.
        """
        if self.block_pool.num_held_blocks() != 0:
            if not reset_running_requests:
                return False
            running = set()
            for m in self.managers:
                running.update(m.running_request_ids())
            for rid in running:
                req = self._requests.get(rid)
                self.free(rid)
                if req is not None:
                    req.num_computed_tokens = 0
        ok = self.block_pool.reset_prefix_cache()
        if ok:
            self._stats.reset = True
        return ok

    def take_events(self) -> list[Any]:
        """Cache events since the last call (BlockStored, BlockRemoved,
        AllBlocksCleared), oldest first; empty unless ``enable_events``."""
        return self.block_pool.take_events()
