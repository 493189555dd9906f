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

import functools
import os
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from kvcore.errors import BlockPoolError, KVCoreError, RequestError
from kvcore.runtime.block_pool import BlockPool, KVCacheBlock
from kvcore.runtime.coordinator import UnitaryCoordinator, make_coordinator
from kvcore.runtime.hashing import BlockHasher, Request
from kvcore.runtime.managers import SingleTypeManager

__all__ = ["KVCacheManager", "KVCacheBlocks", "PrefixCacheStats"]

_BASE_BLOCK_KEY = SingleTypeManager.block_key
_ZERO = 0  # the default count: small ints are one object, so ``x is _ZERO`` means int 0

#: the largest pool (blocks) that ``KVCORE_CHECK_INVARIANTS=1`` checks (``all``: any)
ENV_CHECK_MAX_BLOCKS = 4096


def env_check_invariants(num_blocks: int) -> bool:
    """Whether ``KVCORE_CHECK_INVARIANTS`` turns the debug switch on for a pool of
    ``num_blocks``: ``all`` (any pool), or 1 / true / yes / on (pools of at most
    :data:`ENV_CHECK_MAX_BLOCKS`); 0 / false / no / off / unset: off.  Parsed as
    strictly as kvcore's other switches (:func:`kvcore.plugins.env_flag`): any other
    value is a ConfigError naming the variable and the value (tester T11)."""
    raw = os.environ.get("KVCORE_CHECK_INVARIANTS", "")
    if raw.strip().lower() == "all":
        return True
    from kvcore.plugins import env_flag

    try:
        on = env_flag("KVCORE_CHECK_INVARIANTS")
    except KVCoreError:
        from kvcore.errors import ConfigError
        from kvcore.units import shorten

        raise ConfigError(
            f"environment variable KVCORE_CHECK_INVARIANTS={shorten(raw)} is not a "
            f"switch value; use 1, true, yes, on (pools of at most "
            f"{ENV_CHECK_MAX_BLOCKS:,} blocks), all (any pool) or 0, false, no, off",
            field="KVCORE_CHECK_INVARIANTS", value=shorten(raw)) from None
    return on and num_blocks <= ENV_CHECK_MAX_BLOCKS


def _int_arg(where: str, name: str, value: Any, lo: int = 0, hi: int | None = None,
             err: type | None = None) -> int:
    """``value`` as an int in ``[lo, hi]`` (numpy ints accepted through
    ``operator.index``; bool, float, str refused), else ``err`` (default
    :class:`~kvcore.errors.RequestError`) naming ``name``, the value and the range."""
    import operator

    from kvcore.errors import RequestError

    err = err or RequestError
    ok = not isinstance(value, bool)
    if ok and type(value) is not int:
        try:
            value = operator.index(value)
        except TypeError:
            ok = False
    rng = f">= {lo}" if hi is None else f"in [{lo}, {hi}]"
    if not ok:
        raise err(f"{where}: {name} must be an int {rng}, got {value!r} "
                  f"({type(value).__name__})", field=name, value=repr(value))
    if value < lo or (hi is not None and value > hi):
        raise err(f"{where}: {name} must be an int {rng}, got {value}", field=name,
                  value=value)
    return int(value)


def _bool_arg(where: str, name: str, value: Any, err: type | None = None) -> bool:
    """``value`` if it is a bool (True/False, not merely truthy), else an error."""
    if value is True or value is False:
        return value
    from kvcore.errors import RequestError

    raise (err or RequestError)(f"{where}: {name} must be True or False, got {value!r}",
                                field=name, value=repr(value))


def _kind(m: Any) -> str:
    """The kind of a manager's spec (its plugin), for messages."""
    return str(getattr(m.spec, "kind", type(m.spec).__name__))


def _request_id(where: str, request: Any, *, allow_str: bool = True) -> str:
    """The request id of a request object (or of a str id when ``allow_str``)."""
    rid = request if allow_str and type(request) is str else \
        getattr(request, "request_id", None)
    if type(rid) is not str:
        from kvcore.errors import RequestError

        what = "a request (an object with a str request_id)" + (
            " or a request id (str)" if allow_str else "")
        raise RequestError(f"{where}: request must be {what}, got {request!r}",
                           field="request", value=repr(request))
    return rid


class KVCacheBlocks:
    """Blocks per KV-cache group: ``blocks[g]`` is a list of
    :class:`~kvcore.runtime.block_pool.KVCacheBlock` for group ``g``."""

    __slots__ = ("blocks",)

    def __init__(self, blocks: Sequence[list[KVCacheBlock]]) -> None:
        """``blocks``: one list (or tuple) of blocks per KV-cache group.

        Raises RequestError when ``blocks`` is not a sequence of lists of blocks."""
        t = tuple(blocks) if isinstance(blocks, (list, tuple)) else None
        if t is None or not all(type(g) is list or isinstance(g, (list, tuple)) for g in t):
            raise RequestError(f"KVCacheBlocks: blocks must be one list of blocks per "
                               f"KV-cache group, got {type(blocks).__name__}",
                               field="blocks")
        self.blocks = t

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
    max_model_len: longest sequence in tokens, 1 to the plan's ``max_model_len``
        (default: the plan's); :meth:`allocate_slots` refuses computed + new tokens
        past it (only lookahead slots are capped at it, as in vLLM).
    enable_caching: prefix caching.
    hash: block hash: ``"sha256"`` (default), ``"sha256_128"`` or a callable
        ``bytes -> bytes`` (:mod:`kvcore.runtime.hashing`).
    use_eagle: EAGLE speculative decoding (the last hit block is recomputed).
    enable_events: record events for :meth:`take_events` (off by default, as in vLLM).
    max_num_batched_tokens: tokens per step (windowed kinds' sizing).
    max_num_encoder_input_tokens: the longest encoder input (tokens) a request may
        bring to a cross-attention group; default: the plan's figure
        (``kv_cache_config.stats``), else no limit.  A longer request is refused at
        admission with :class:`~kvcore.errors.RequestError`.
    check_invariants: the debug switch.  When on, every public call is followed by
        :meth:`check_consistency` (every ref count equals the tables holding the block,
        the free queue holds exactly the unheld blocks, no block is in two groups'
        tables, hash tables agree with the blocks) and calls from a thread other than
        the first caller's raise.  It costs O(blocks) per call: for tests and engine
        bring-up, not production.  The cheap checks (a freed block must be a pool
        block that is held; a manager must return blocks it took from the pool) are
        always on.  Default (None): the environment variable
        ``KVCORE_CHECK_INVARIANTS``: ``1`` turns the switch on for pools of at most
        ``ENV_CHECK_MAX_BLOCKS`` (4,096) blocks (a test suite's pools; a long replay on
        a production-size pool would take hours), ``all`` for every pool.

    Errors: :class:`~kvcore.errors.ConfigError` when ``num_blocks`` is missing or < 2,
    ``max_model_len`` is not given and the plan has none, or an argument has the wrong
    type or range (``max_model_len`` not an int in [1, the plan's max_model_len],
    ``max_num_batched_tokens`` < 1, a flag that is not a bool, ...), naming it;
    :class:`~kvcore.errors.NotEnoughMemoryError` when the pool cannot hold the blocks
    a group reserves (sink blocks); :class:`~kvcore.errors.BlockPoolError` (naming the
    block id and the group's kind) when a manager frees or returns blocks it does not
    hold.

    Thread safety: **not thread-safe**.  One scheduler thread owns a manager and makes
    every call on it (as vLLM's scheduler does); calls from several threads at once
    corrupt the free queue.  An engine with several threads must serialise the calls
    (one lock around each), or give each thread its own manager and pool.  The debug
    switch raises on a call from a second thread.
    """

    def __init__(self, kv_cache_config: Any, *, max_model_len: int | None = None,
                 enable_caching: bool = True,
                 hash: str | Callable[[bytes], bytes] = "sha256",
                 use_eagle: bool = False, enable_events: bool = False,
                 max_num_batched_tokens: int = 8192,
                 max_num_encoder_input_tokens: int | None = None,
                 check_invariants: bool | None = None) -> None:
        from kvcore.errors import ConfigError
        from kvcore.kv_cache_config import KVCacheConfig

        if not isinstance(kv_cache_config, KVCacheConfig):
            raise ConfigError(
                f"kv_cache_config: expected a KVCacheConfig (from kvcore.plan or "
                f"kvcore.plan_model), got {type(kv_cache_config).__name__}",
                field="kv_cache_config")
        num_blocks = kv_cache_config.num_blocks
        if num_blocks is None:
            raise ConfigError("kv_cache_config.num_blocks is None (planned without a "
                              "memory budget); the runtime needs a block count",
                              field="num_blocks")
        planned_len = getattr(kv_cache_config, "max_model_len", 0) or None
        if max_model_len is None:
            max_model_len = planned_len
            if max_model_len is None:
                raise ConfigError("max_model_len is not given and the plan has none; "
                                  "pass max_model_len= (tokens)", field="max_model_len")
        # every argument is checked before anything is built (ConfigError naming it)
        where = "KVCacheManager"
        max_model_len = _int_arg(where, "max_model_len", max_model_len, 1, planned_len,
                                 err=ConfigError)
        max_num_batched_tokens = _int_arg(where, "max_num_batched_tokens",
                                          max_num_batched_tokens, 1, err=ConfigError)
        if max_num_encoder_input_tokens is not None:
            max_num_encoder_input_tokens = _int_arg(
                where, "max_num_encoder_input_tokens", max_num_encoder_input_tokens, 0,
                err=ConfigError)
        for name, flag in (("enable_caching", enable_caching), ("use_eagle", use_eagle),
                           ("enable_events", enable_events)):
            _bool_arg(where, name, flag, err=ConfigError)
        if check_invariants is not None:
            _bool_arg(where, "check_invariants", check_invariants, err=ConfigError)
        from kvcore.runtime.hashing import get_hash_function

        get_hash_function(hash)  # ConfigError naming ``hash`` (a name or a callable)
        stats = getattr(kv_cache_config, "stats", None) or {}
        if max_num_encoder_input_tokens is None:
            max_num_encoder_input_tokens = stats.get("max_num_encoder_input_tokens") or None
        #: planned encoder-input limit of cross-attention groups (None: no limit)
        self.max_num_encoder_input_tokens = max_num_encoder_input_tokens
        self.kv_cache_config = kv_cache_config
        self.max_model_len = max_model_len
        self.use_eagle = use_eagle
        self.hash = hash
        groups = kv_cache_config.kv_cache_groups
        if not groups and num_blocks == 1:  # no KV-cache layers: only the null block
            num_blocks = 2                     # (no request ever takes a block)
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
            self._f_cache = self.block_pool.cache_call(m0)
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
        # several groups, every one on the base-class rules (full / sliding / chunked
        # attention, ...): the running path without per-call dispatch
        self._plain = [
            (m, m.block_size, m.req_to_blocks,
             m.get_num_skipped_tokens if m.skips_blocks else None, m.num_skipped_blocks,
             m.enable_caching, m.num_cached_blocks)
            for m in self.managers] if n > 1 and all(
                alloc and (skip or not m.skips_blocks)
                and (cache or not m.enable_caching)
                and not getattr(m, "excludes_lookahead_tokens", False)
                for m, _, alloc, skip, cache in self._plans) else None
        from kvcore.specs import CrossAttentionSpec

        self._has_cross = any(isinstance(m.spec, CrossAttentionSpec)
                              or getattr(m.spec, "kind", "") == "cross_attention"
                              for m in self.managers)
        if check_invariants is None:
            check_invariants = env_check_invariants(num_blocks)
        #: whether the debug switch is on (see the class docstring)
        self.check_invariants = bool(check_invariants)
        self._owner_thread: int | None = None
        if self.check_invariants:
            wrap_checked(self)
            self.check_consistency()

    # ---- pickle / deepcopy ---------------------------------------------------------
    def __getstate__(self) -> dict[str, Any]:
        """The state without the debug switch's wrappers (closures over this object:
        a copy re-wraps its own methods) and with no owner thread (the copy belongs to
        the thread that first calls it).  The block pool flattens its free queue, so
        any pool size pickles and deep-copies (:class:`~kvcore.runtime.BlockPool`)."""
        return checked_state(self)

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        if self.check_invariants:
            wrap_checked(self)

    # ---- requests ------------------------------------------------------------------
    def make_request(self, request_id: str, prompt_token_ids: Sequence[int],
                     **kw: Any) -> Request:
        """A :class:`Request` hashed with this manager's hash block size and hash."""
        return Request(request_id, prompt_token_ids, hash=self._hasher, **kw)

    # ---- prefix lookup -------------------------------------------------------------
    def get_computed_blocks(self, request: Any) -> tuple[KVCacheBlocks, int]:
        """The longest cached prefix of the request: ``(blocks per group, tokens)``.

        At most ``num_tokens - 1`` tokens hit (the last prompt token is recomputed to
        produce logits); none for a request with an encoder input
        (``num_encoder_tokens`` > 0) but no ``encoder_id`` (its decoder K/V depends on
        an encoder input nothing identifies).  Counts one lookup in :meth:`prefix_cache_stats`.  Changes no
        block state: pass the blocks to :meth:`allocate_slots`.  Raises
        :class:`~kvcore.errors.RequestError` when ``request`` is not a request object.
        """
        try:
            num_tokens = len(request.all_token_ids)
            request.block_hashes  # noqa: B018 (must exist)
        except (AttributeError, TypeError):
            raise self._bad_request("get_computed_blocks", request) from None
        _request_id("get_computed_blocks", request, allow_str=False)
        if not self.enable_caching:
            return self._empty, 0
        bs = getattr(request, "_bs", None)
        if bs is not None and bs != self.hash_block_size:
            raise self._wrong_hash_block_size("get_computed_blocks", request.request_id, bs)
        limit = num_tokens - 1
        if getattr(request, "num_encoder_tokens", 0) and \
                getattr(request, "encoder_id", None) is None:
            # an encoder input without an identity: its decoder K/V cannot be told
            # apart from another request's with other audio (kvcore.runtime.hashing)
            limit = 0
        for m in self._hit_cappers:
            cap = m.max_cache_hit_tokens(request)
            if cap is not None and cap < limit:
                limit = max(cap, 0)
        try:
            blocks, n = self.coordinator.find_longest_cache_hit(request.block_hashes, limit)
        except KVCoreError:
            raise
        except (Exception, SystemExit) as e:  # a plugin manager's search: named
            raise self._plugin_failure(e, None, "find_longest_cache_hit") from e
        if n and getattr(getattr(getattr(request, "_hasher", None), "hash_fn", None),
                         "_kvcore_checked", False):
            self._check_hit_blocks_unique(request, blocks)  # a custom hash only
        st = self._stats
        st.requests += 1
        st.queries += num_tokens
        st.hits += n
        return KVCacheBlocks(blocks), n

    def _check_hit_blocks_unique(self, request: Any, blocks: Sequence[Any]) -> None:
        """A custom block hash whose digests repeat along one request's chain (it
        ignores the parent hash, say) makes the hit list one cached block for several
        positions; refused (ConfigError, field ``hash``) before any state changes, as
        the table would give every such position the first one's K/V."""
        for g, group in enumerate(blocks):
            seen: dict[int, int] = {}
            for i, b in enumerate(group):
                if b.is_null:
                    continue
                j = seen.setdefault(b.block_id, i)
                if j != i:
                    from kvcore.errors import ConfigError

                    fn = request._hasher.hash_fn
                    name = getattr(fn, "__name__", type(fn).__name__)
                    raise ConfigError(
                        f"block hash {name!r} gives request {request.request_id!r} the "
                        f"same digest for blocks {j} and {i} of its prompt (group {g}: "
                        f"cached block {b.block_id} for both); a block hash must hash "
                        f"the parent block's hash with the block's tokens so that digests "
                        f"never repeat along a prompt (use 'sha256', or include the "
                        f"whole input in the digest)", field="hash", value=name)

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
        Raises :class:`~kvcore.errors.RequestError` naming a count that is not an int
        >= 0, or a request that is not a request object.
        """
        rid = _request_id("max_prefill_chunk_tokens", request, allow_str=False)
        where = f"max_prefill_chunk_tokens({rid!r})"
        n = num_new_tokens = _int_arg(where, "num_new_tokens", num_new_tokens)
        num_new_computed_tokens = _int_arg(where, "num_new_computed_tokens",
                                           num_new_computed_tokens)
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
        check, unlike vLLM).

        Raises :class:`~kvcore.errors.RequestError` naming the argument, with **no
        state changed**, when: a count is not an int (numpy ints pass) or is negative
        (``request.num_computed_tokens`` too); ``num_new_tokens`` is 0 without a hit to
        adopt (vLLM's rule); computed + new tokens exceed ``max_model_len`` (only the
        lookahead slots are capped at it, as in vLLM); ``full_sequence_must_fit`` is
        not a bool; another request object holds blocks under the same
        ``request_id`` (ids must be unique among running requests; vLLM's engine makes
        them so before its scheduler, kvcore's public ``make_request`` cannot); a cross-attention request's ``num_encoder_tokens`` is not an int
        in [0, ``max_num_encoder_input_tokens``]; or the hit is not a current one of
        this request: ``num_new_computed_tokens`` must equal the hit's length, each
        caching group must give ``num_new_computed_tokens // block_size`` blocks, every real block must still be cached in its group under
        this request's own hash for its table index (not evicted, not another
        prompt's), and the request must hold no blocks and have 0 computed tokens.  Full blocks are cached at allocation, before their tokens
        are computed, so a request admitted later in the same step hits them.
        """
        try:
            rid = request.request_id
            nc = request.num_computed_tokens
        except AttributeError:
            raise self._bad_request("allocate_slots", request) from None
        owner = self._requests.get(rid)
        if owner is not None and owner is not request:
            if any(m.req_to_blocks.get(rid) for m in self.managers):
                raise self._duplicate_id("allocate_slots", rid)
            # the id holds no blocks (an engine took its tables out and freed them
            # itself, as kvcore-vllm's deferred free): the old object is gone
            del self._requests[rid]
        # argument checks before any state changes.  The common call (defaults for the
        # hit, lookahead and full_sequence_must_fit; int counts) is checked with
        # identity and type tests; every other call takes the full checks
        if num_new_computed_tokens is num_lookahead_tokens is _ZERO \
                and new_computed_blocks is None and full_sequence_must_fit is False \
                and type(num_new_tokens) is type(nc) is int \
                and num_new_tokens > 0 and nc >= 0:
            num_computed = nc
            need = nc + num_new_tokens
            if need > self.max_model_len:
                self._check_alloc_args(request, rid, nc, num_new_tokens, 0, None, 0,
                                       False)
            if self._fast is None:  # (one plain group: never cross attention)
                if self._has_cross:
                    self._check_alloc_args(request, rid, nc, num_new_tokens, 0, None, 0,
                                           False)
            else:
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
                        n_full = need // bs
                        ncached = self._f_ncached
                        done = ncached[rid]
                        if n_full > done:  # (capping at num_tokens only lowers it)
                            num_tokens = len(request.all_token_ids)
                            if need > num_tokens:
                                n_full = num_tokens // bs
                            if n_full > len(table):
                                n_full = len(table)
                            hashes = request.block_hashes
                            if n_full > len(hashes):  # tokens added outside the hasher
                                n_full = len(hashes)
                            if n_full > done:
                                self._f_cache(
                                    table, request.block_hashes, done, n_full,
                                    self._f_gid, 1, request, bs)
                                ncached[rid] = n_full
                    return result
        else:
            if type(num_new_tokens) is not int or type(num_new_computed_tokens) is not int \
                    or type(num_lookahead_tokens) is not int or type(nc) is not int:
                num_new_tokens, num_new_computed_tokens, num_lookahead_tokens, nc = \
                    self._alloc_int_args(request, num_new_tokens, num_new_computed_tokens,
                                         num_lookahead_tokens, nc)
            self._check_alloc_args(request, rid, nc, num_new_tokens,
                                   num_new_computed_tokens, new_computed_blocks,
                                   num_lookahead_tokens, full_sequence_must_fit)
            num_computed = nc + num_new_computed_tokens
            need = num_computed + num_new_tokens + num_lookahead_tokens
            if need > self.max_model_len:  # only lookahead slots are capped (vLLM's rule)
                need = self.max_model_len
        if rid not in self._tables0:  # a request's hasher is fixed: check it once
            hbs = getattr(request, "_bs", None)
            if hbs is not None and hbs != self.hash_block_size and self.enable_caching:
                raise self._wrong_hash_block_size("allocate_slots", rid, hbs)
        if not full_sequence_must_fit and not new_computed_blocks \
                and rid in self._tables0 and num_new_tokens > 0:
            if self._plain is not None:
                out = self._allocate_plain(request, rid, num_computed, num_new_tokens,
                                           need)
                if out is not False:
                    return out  # type: ignore[return-value]
            return self._allocate_running(request, rid, num_computed, num_new_tokens,
                                          need)
        num_tokens = len(request.all_token_ids)
        return self._allocate_general(request, num_new_tokens, num_computed, num_tokens,
                                      need, new_computed_blocks, full_sequence_must_fit)

    def _allocate_plain(self, request: Any, rid: str, num_computed: int,
                        num_new_tokens: int, need: int) -> KVCacheBlocks | None | bool:
        """:meth:`_allocate_running` for groups that all follow the base-class rules
        (the same results, fewer calls); False when a group has no table yet."""
        total = 0
        freed = 0
        skipping = None
        for m, bs, tables, skipped, nskip, _, _ in self._plain:  # type: ignore[union-attr]
            table = tables.get(rid)
            if table is None:
                return False
            n = (need + bs - 1) // bs - len(table)
            if n > 0:
                total += n
            if skipped is not None and skipped(num_computed) // bs > nskip.get(rid, 0):
                freed += m.num_blocks_freed_by_skipping(rid, num_computed)
                if skipping is None:
                    skipping = [m]
                else:
                    skipping.append(m)
        pool = self._pool
        if total > self._fq.num_free_blocks + freed:
            return None
        if skipping is not None:
            for m in skipping:
                m.remove_skipped_blocks(rid, num_computed)
        new_blocks: list[list[KVCacheBlock]] | None = None
        if total:
            new_blocks = []
            for _, bs, tables, _, _, _, _ in self._plain:  # type: ignore[union-attr]
                table = tables[rid]
                n = (need + bs - 1) // bs - len(table)
                if n > 0:
                    new = pool.get_new_blocks(n)
                    table.extend(new)
                    new_blocks.append(new)
                else:
                    new_blocks.append([])
        if self.enable_caching:
            n_cache = num_computed + num_new_tokens
            num_tokens = len(request.all_token_ids)
            if n_cache > num_tokens:
                n_cache = num_tokens
            for m, bs, _, _, _, caching, ncached in self._plain:  # type: ignore[union-attr]
                if caching and n_cache // bs > ncached.get(rid, 0):
                    m.cache_blocks(request, n_cache)
        if new_blocks is None:
            return self._empty
        return KVCacheBlocks(new_blocks)

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
                try:
                    n = m.get_num_blocks_to_allocate(
                        request, min(num_computed + num_new_tokens, need)
                        if m.excludes_lookahead_tokens else need, ())
                except KVCoreError:
                    raise
                except (Exception, SystemExit) as e:  # nothing changed yet: named
                    raise self._plugin_failure(e, m, "get_num_blocks_to_allocate") from e
                if type(n) is not int or n < 0:
                    raise self._bad_count(m, "get_num_blocks_to_allocate", n)
            counts.append(n)
            total += n
            skip = False
            if m.skips_blocks:
                if not plain_skip or m.get_num_skipped_tokens(num_computed) // bs \
                        > m.num_skipped_blocks.get(rid, 0):
                    freed += m.num_blocks_freed_by_skipping(rid, num_computed)
                    skip = True
            skips.append(skip)
        fq = self._fq
        if total > fq.num_free_blocks + freed:
            return None
        m = None  # type: ignore[assignment]
        before = -1
        try:
            for (m, _, _, _, _), skip in zip(plans, skips):
                if skip:
                    m.remove_skipped_blocks(rid, num_computed)
            new_blocks: list[list[KVCacheBlock]] | None = None
            for g, ((m, _, plain_alloc, _, _), n) in enumerate(zip(plans, counts)):
                if n or not plain_alloc:
                    before = fq.num_free_blocks
                    new = m.allocate_new_blocks(
                        request, min(num_computed + num_new_tokens, need)
                        if m.excludes_lookahead_tokens else need)
                    if new:
                        if before - fq.num_free_blocks != len(new):
                            raise self._not_from_pool(m, new, before)
                        if new_blocks is None:
                            new_blocks = [[] for _ in plans]
                        new_blocks[g] = new
        except BlockPoolError as e:
            raise self._name_kind(e, m) from None
        except KVCoreError:
            raise
        except (Exception, SystemExit) as e:  # a plugin manager: undone, then named
            self._undo_partial(m, rid, before)
            self._undo_allocation(rid, False, new_blocks or [])
            raise self._plugin_failure(e, m, "allocate_new_blocks") from e
        if self.enable_caching:
            n_cache = num_computed + num_new_tokens
            num_tokens = len(request.all_token_ids)
            if n_cache > num_tokens:
                n_cache = num_tokens
            m = None  # type: ignore[assignment]
            try:
                for m, bs, _, _, plain_cache in plans:
                    if plain_cache:
                        if n_cache // bs > m.num_cached_blocks.get(rid, 0):
                            m.cache_blocks(request, n_cache)
                    elif m.enable_caching:
                        m.cache_blocks(request, n_cache)
            except KVCoreError:
                raise
            except (Exception, SystemExit) as e:
                self._undo_allocation(rid, False, new_blocks or [])
                raise self._plugin_failure(e, m, "cache_blocks") from e
        if new_blocks is None:
            return self._empty
        return KVCacheBlocks(new_blocks)

    def _allocate_general(self, request: Any, num_new_tokens: int, num_computed: int,
                          num_tokens: int, need: int,
                          new_computed_blocks: KVCacheBlocks | None,
                          full_sequence_must_fit: bool) -> KVCacheBlocks | None:
        rid = request.request_id
        if type(rid) is not str:
            _request_id("allocate_slots", request, allow_str=False)
        if num_new_tokens <= 0 and not new_computed_blocks:
            from kvcore.errors import RequestError

            raise RequestError(f"allocate_slots({rid!r}): num_new_tokens must be > 0, "
                               f"got {num_new_tokens}", field="num_new_tokens",
                               value=num_new_tokens)
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
        m = None  # type: ignore[assignment]
        try:
            for g, m in enumerate(managers):
                k = m.get_num_blocks_to_allocate(
                    request, min(num_computed + num_new_tokens, need)
                    if m.excludes_lookahead_tokens and not full_sequence_must_fit
                    else check_len, hit[g] if hit else ())
                if type(k) is not int or k < 0:
                    raise self._bad_count(m, "get_num_blocks_to_allocate", k)
                total += k
                if m.skips_blocks:
                    freed += m.num_blocks_freed_by_skipping(rid, num_computed)
        except KVCoreError:
            raise
        except (Exception, SystemExit) as e:  # nothing changed yet: named
            raise self._plugin_failure(e, m, "get_num_blocks_to_allocate") from e
        fq = self.block_pool.free_queue
        if total > fq.num_free_blocks + freed:
            return None
        fresh = all(rid not in mg.req_to_blocks for mg in managers)
        new_blocks: list[list[KVCacheBlock]] = []
        m = None  # type: ignore[assignment]
        before = -1
        try:
            # every group takes its hits before any group takes new blocks: a hit block
            # of one group may sit in the free queue that another group allocates from
            if hit:
                for g, m in enumerate(managers):
                    if hit[g]:
                        m.save_new_computed_blocks(rid, hit[g])
            for m in managers:
                if m.skips_blocks:
                    m.remove_skipped_blocks(rid, num_computed)
            for m in managers:
                before = fq.num_free_blocks
                new = m.allocate_new_blocks(
                    request, min(num_computed + num_new_tokens, need)
                    if m.excludes_lookahead_tokens else need)
                if before - fq.num_free_blocks != len(new):
                    raise self._not_from_pool(m, new, before)
                new_blocks.append(new)
        except BlockPoolError as e:
            raise self._name_kind(e, m) from None
        except KVCoreError:
            raise
        except (Exception, SystemExit) as e:  # a plugin manager: undone, then named
            if not fresh:
                self._undo_partial(m, rid, before)
            self._undo_allocation(rid, fresh, new_blocks)
            raise self._plugin_failure(e, m, "allocate_new_blocks") from e
        self._requests[rid] = request
        if self.enable_caching:
            n_cache = num_computed + num_new_tokens
            if n_cache > num_tokens:
                n_cache = num_tokens
            m = None  # type: ignore[assignment]
            try:
                for m in self.coordinator.caching_managers:
                    m.cache_blocks(request, n_cache)
            except KVCoreError:
                raise
            except (Exception, SystemExit) as e:
                self._requests.pop(rid, None)
                self._undo_allocation(rid, fresh, new_blocks)
                raise self._plugin_failure(e, m, "cache_blocks") from e
        if not any(new_blocks):
            return self._empty
        return KVCacheBlocks(new_blocks)

    @staticmethod
    def _bad_request(where: str, request: Any) -> Exception:
        from kvcore.errors import RequestError

        return RequestError(
            f"{where}: request must be a request object (request_id, all_token_ids, "
            f"num_computed_tokens, block_hashes; see KVCacheManager.make_request), got "
            f"{request!r}", field="request", value=repr(request))

    def _alloc_int_args(self, request: Any, num_new_tokens: Any,
                        num_new_computed_tokens: Any, num_lookahead_tokens: Any,
                        nc: Any) -> tuple[int, int, int, int]:
        """The counts of :meth:`allocate_slots` as ints (numpy ints accepted), or
        RequestError naming the first that is not an int (or a non-str request id)."""
        rid = _request_id("allocate_slots", request, allow_str=False)
        where = f"allocate_slots({rid!r})"
        return (_int_arg(where, "num_new_tokens", num_new_tokens, -(1 << 62)),
                _int_arg(where, "num_new_computed_tokens", num_new_computed_tokens,
                         -(1 << 62)),
                _int_arg(where, "num_lookahead_tokens", num_lookahead_tokens, -(1 << 62)),
                _int_arg(where, "request.num_computed_tokens", nc, -(1 << 62)))

    def _check_alloc_args(self, request: Any, rid: str, nc: int, num_new_tokens: int,
                          num_new_computed_tokens: int,
                          new_computed_blocks: Any, num_lookahead_tokens: int,
                          full_sequence_must_fit: Any) -> None:
        """The value checks of :meth:`allocate_slots` (see its docstring); returns when
        the call is valid, raises RequestError / BlockPoolError otherwise."""
        from kvcore.errors import RequestError

        where = f"allocate_slots({rid!r})"
        if full_sequence_must_fit is not True and full_sequence_must_fit is not False:
            _bool_arg(where, "full_sequence_must_fit", full_sequence_must_fit)
        if nc < 0 or num_new_tokens < 0 or num_new_computed_tokens < 0 \
                or num_lookahead_tokens < 0:
            for name, v in (("request.num_computed_tokens", nc),
                            ("num_new_tokens", num_new_tokens),
                            ("num_new_computed_tokens", num_new_computed_tokens),
                            ("num_lookahead_tokens", num_lookahead_tokens)):
                if v < 0:
                    raise RequestError(f"{where}: {name} must be >= 0, got {v}",
                                       field=name, value=v)
        if num_new_tokens == 0 and num_new_computed_tokens == 0:
            raise RequestError(f"{where}: num_new_tokens must be > 0 when there are no "
                               f"computed tokens to adopt (num_new_computed_tokens 0), "
                               f"got 0", field="num_new_tokens", value=0)
        total = nc + num_new_computed_tokens + num_new_tokens
        if total > self.max_model_len:
            raise RequestError(
                f"{where}: request.num_computed_tokens {nc} + num_new_computed_tokens "
                f"{num_new_computed_tokens} + num_new_tokens {num_new_tokens} = {total} "
                f"tokens exceeds max_model_len {self.max_model_len} (only lookahead "
                f"slots are capped at max_model_len); the scheduler must stop or refuse "
                f"the request", field="num_new_tokens", value=num_new_tokens,
                limit=self.max_model_len)
        if self._has_cross:
            enc = getattr(request, "num_encoder_tokens", 0)
            enc = _int_arg(where, "request.num_encoder_tokens", 0 if enc is None else enc)
            lim = self.max_num_encoder_input_tokens
            if lim is not None and enc > lim:  # checked on every call: the field may
                raise RequestError(               # change after admission
                    f"request {rid!r}: num_encoder_tokens {enc} exceeds the planned "
                    f"max_num_encoder_input_tokens {lim} (cross-attention blocks are "
                    f"sized for at most that many encoder tokens); refuse or truncate "
                    f"the request, or plan with a larger max_num_encoder_input_tokens",
                    field="num_encoder_tokens", value=enc, limit=lim)
        if new_computed_blocks is not None and not isinstance(new_computed_blocks,
                                                              KVCacheBlocks):
            raise RequestError(f"{where}: new_computed_blocks must be None or the "
                               f"KVCacheBlocks from get_computed_blocks, got "
                               f"{type(new_computed_blocks).__name__}",
                               field="new_computed_blocks",
                               value=repr(new_computed_blocks)[:80])
        if num_new_computed_tokens or new_computed_blocks:
            self._check_hit_args(request, rid, nc, num_new_computed_tokens,
                                 new_computed_blocks)

    def _check_hit_args(self, request: Any, rid: str, nc: int, n: int,
                        hit: KVCacheBlocks | None) -> None:
        """A hit passed to :meth:`allocate_slots` must be a current hit of this request:
        O(hit blocks)."""
        from kvcore.errors import RequestError

        def bad(msg: str, **extra: Any) -> RequestError:
            return RequestError(f"allocate_slots({rid!r}): new_computed_blocks / "
                                f"num_new_computed_tokens"
                                f": {msg}; pass the (blocks, n) that "
                                f"get_computed_blocks(request) returned in this step",
                                field="new_computed_blocks", **extra)

        if nc != 0 or (rid in self._tables0 if len(self.managers) == 1 else
                       any(rid in m.req_to_blocks for m in self.managers)):
            raise bad(f"cache hits are taken only at admission, but the request has "
                      f"{nc} computed tokens or already holds blocks",
                      value=n)
        if not self.enable_caching:
            raise bad(f"prefix caching is off, so there is no hit to adopt "
                      f"(num_new_computed_tokens {n})", value=n)
        blocks = hit.blocks if hit is not None else None
        if blocks is None or len(blocks) != len(self.managers):
            raise bad(f"num_new_computed_tokens {n} needs hit blocks for each of the "
                      f"{len(self.managers)} group(s), got "
                      f"{None if blocks is None else len(blocks)}", value=n)
        pool = self.block_pool
        pool_blocks = pool.blocks
        single = len(self.managers) == 1
        hashes = request.block_hashes
        num_tokens = len(request.all_token_ids)
        if n > num_tokens:
            raise bad(f"num_new_computed_tokens {n} exceeds the request's {num_tokens} "
                      f"tokens", value=n)
        for g, m in enumerate(self.managers):
            got = blocks[g]
            if not m.enable_caching:
                if got:
                    raise bad(f"group {g} (kind {_kind(m)!r}) does not prefix cache but got "
                              f"{len(got)} hit block(s)", value=n, group_id=g)
                continue
            bs = m.block_size
            if n % bs or len(got) != n // bs:
                raise bad(f"num_new_computed_tokens {n} does not match group {g} (kind "
                          f"{_kind(m)!r}, block_size {bs}): {len(got)} hit block(s) cover "
                          f"{len(got) * bs} tokens", value=n, group_id=g)
            if not got:
                continue
            if type(m).block_key is _BASE_BLOCK_KEY:  # every block real: list compares
                st = m.hash_stride
                k = len(got)
                try:
                    if [b.block_hash for b in got] == (
                            hashes[st - 1::st] if st > 1 else hashes)[:k] and (
                            single or (  # one group: pool.touch refuses foreign blocks
                                [pool_blocks[b.block_id] for b in got] == got
                                and [b.group_id for b in got].count(g) == k)):
                        continue
                except (AttributeError, IndexError, TypeError):
                    pass  # the loop below names the block
            have = m.num_hashed_blocks(hashes)
            for i, b in enumerate(got):
                if b is pool.null_block:
                    continue
                if i >= have or not pool.is_pool_block(b) or b.group_id != g \
                        or b.block_hash is None or b.block_hash != m.block_key(hashes, i):
                    raise bad(f"group {g} (kind {_kind(m)!r}): hit block "
                              f"{getattr(b, 'block_id', b)!r} at table[{i}] is no longer "
                              f"cached under this request's hash there (evicted and "
                              f"reused, or another prompt's block)",
                              value=n, group_id=g, block_id=getattr(b, "block_id", None))

    def free(self, request: Any) -> None:
        """Release every block of the request (each group's table last block first);
        cached blocks stay findable until evicted.

        ``request``: a request object or its id (str).  An id that holds no blocks
        (never allocated, or already freed) is a no-op, as in vLLM
        (``req_to_blocks.pop(request_id, [])``): a scheduler frees finished and
        aborted requests without tracking whether they were ever scheduled.  Raises
        :class:`~kvcore.errors.RequestError` for anything else (None, an int, ...)."""
        rid = _request_id("free", request)
        m: Any = None
        try:
            for m in self.managers:
                m.free(rid)
        except BlockPoolError as e:
            raise self._name_kind(e, m) from None
        except KVCoreError:
            raise
        except (Exception, SystemExit) as e:  # a plugin manager's free: named
            raise self._plugin_failure(e, m, "free") from e
        for m in self.managers:  # a manager whose free() kept the request leaks blocks
            if rid in m.req_to_blocks:
                raise self._plugin_failure(None, m, "free")
        self._requests.pop(rid, None)

    # ---- checks --------------------------------------------------------------------
    def _wrong_hash_block_size(self, where: str, rid: Any, bs: int) -> RequestError:
        """A request hashed at another block size than this manager's: its hashes name
        other token spans, so a hit would map blocks of another prompt (fresh tester,
        T10) and caching under them would poison the prefix cache."""
        return RequestError(f"{where}({rid!r}): the request was hashed with block_size "
                            f"{bs}, this manager hashes with {self.hash_block_size} "
                            "(KVCacheManager.hash_block_size); make requests with "
                            "KVCacheManager.make_request, or pass block_size="
                            f"{self.hash_block_size}", field="block_size", value=bs)

    @staticmethod
    def _duplicate_id(where: str, rid: Any) -> RequestError:
        """Another live request object holds blocks under ``rid``: its blocks would be
        read and written by both (the tables are keyed by request id)."""
        return RequestError(f"{where}({rid!r}): request_id {rid!r} already holds blocks "
                            "through another request object; request ids must be "
                            "unique among running requests (free the other first, or "
                            "give this one its own id)", field="request_id",
                            value=repr(rid))

    @staticmethod
    def _who(m: Any) -> str:
        """``group G (kind 'k', Class, from dist (plugin 'p'))`` for a group manager."""
        kind = getattr(getattr(m, "spec", None), "kind", None)
        where = ""
        try:
            from kvcore.registry import get_registry

            st = get_registry().spec_type(m.spec)
            where = f", from {st.distribution} (plugin {st.plugin!r})"
        except Exception:  # an unregistered spec: the class says enough
            where = ""
        return f"group {getattr(m, 'group_id', '?')} (kind {kind!r}, {type(m).__name__}" \
            f"{where})"

    def _plugin_failure(self, e: BaseException | None, m: Any, method: str) -> Exception:
        """A group manager's method that raised (``e``) or, for ``free`` with ``e``
        None, kept the request's blocks: a PluginError naming the group, kind, class
        and plugin (``m`` None: the caching groups' kinds)."""
        from kvcore.errors import PluginError
        from kvcore.units import shorten

        if m is None:
            who = "a group's manager (" + ", ".join(
                f"group {x.group_id}: {getattr(x.spec, 'kind', '?')!r} {type(x).__name__}"
                for x in self.managers) + ")"
            kind = None
        else:
            who = self._who(m)
            kind = getattr(getattr(m, "spec", None), "kind", None)
        if e is None:
            return PluginError(f"{who}: free() returned but the request still holds its "
                               f"blocks there (they would never return to the pool); a "
                               f"manager's free must drop the request's table",
                               field=method, kind=kind,
                               group_id=getattr(m, "group_id", None))
        return PluginError(f"{who}: {method} raised {type(e).__name__}: "
                           f"{shorten(str(e))}", field=method, kind=kind,
                           group_id=getattr(m, "group_id", None))

    def _bad_count(self, m: Any, method: str, value: Any) -> Exception:
        from kvcore.errors import PluginError
        from kvcore.units import shorten

        return PluginError(f"{self._who(m)}: {method} returned {shorten(value)}; it must "
                           f"be an int >= 0 (blocks)", field=method,
                           kind=getattr(getattr(m, "spec", None), "kind", None),
                           value=shorten(value))

    def _undo_partial(self, m: Any, rid: str, before: int) -> None:
        """The failing manager's own part: the blocks it took from the pool before it
        raised (free count ``before`` its call, -1: it was not reached) are the last
        entries it appended to the request's table; they are taken out and freed when
        they are exactly that (fresh blocks held once), so nothing is lost."""
        if m is None or before < 0:
            return
        taken = before - self._fq.num_free_blocks
        table = m.req_to_blocks.get(rid)
        if taken <= 0 or not table or len(table) < taken:
            return
        tail = table[-taken:]
        if all(b.ref_cnt == 1 and not b.is_null for b in tail):
            del table[-taken:]
            self.block_pool.free_blocks(list(reversed(tail)))

    def _undo_allocation(self, rid: str, fresh: bool,
                         new_blocks: Sequence[Sequence[KVCacheBlock]]) -> None:
        """Undo a part-way allocation (a group's manager raised): a request that held
        no blocks before is released in every group; a running one gives back the new
        blocks the groups before the failing one appended to their tables."""
        pool = self.block_pool
        if fresh:
            for mg in self.managers:
                try:
                    mg.free(rid)
                except Exception:  # the failing plugin's own free: the base rule
                    SingleTypeManager.free(mg, rid)
                if rid in mg.req_to_blocks:
                    SingleTypeManager.free(mg, rid)
            return
        for mg, new in zip(self.managers, new_blocks):
            table = mg.req_to_blocks.get(rid)
            if not new or not table or len(table) < len(new):
                continue
            if all(a is b for a, b in zip(table[-len(new):], new)):
                del table[-len(new):]
                pool.free_blocks(list(reversed(new)))

    @staticmethod
    def _name_kind(e: BlockPoolError, m: Any) -> BlockPoolError:
        """The pool's error with the manager's group and kind (the plugin) named."""
        if m is None or "kind" in e.extra:
            return e
        kind = getattr(m.spec, "kind", type(m.spec).__name__)
        return BlockPoolError(f"group {m.group_id} (kind {kind!r}, {type(m).__name__}): "
                              f"{e.message}", **{**e.extra, "kind": kind,
                                                 "group_id": m.group_id})

    def _not_from_pool(self, m: Any, new: Sequence[Any], before: int) -> BlockPoolError:
        kind = getattr(m.spec, "kind", type(m.spec).__name__)
        taken = before - self._fq.num_free_blocks
        ids = [getattr(b, "block_id", None) for b in new]
        return BlockPoolError(
            f"group {m.group_id} (kind {kind!r}, {type(m).__name__}): allocate_new_blocks "
            f"returned {len(new)} block(s) {ids[:8]} but took {taken} from the pool: a "
            f"manager must return exactly the blocks it took with pool.get_new_blocks "
            f"(never forged blocks or another table's)", kind=kind, group_id=m.group_id,
            block_id=ids[0] if ids else None)

    def _checked(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        """``fn`` followed by :meth:`check_consistency`, from the owner thread only."""
        return owner_checked(self, fn)

    def _check_hit(self, request: Any, hit: KVCacheBlocks) -> None:
        """Debug: every real block of a cache hit is a pool block cached in its group
        under this request's own hash for that table index (a manager must not offer
        uncached, foreign or other prefixes' blocks as hits)."""
        pool = self.block_pool
        hashes = request.block_hashes
        for g, blocks in enumerate(hit.blocks):
            m = self.managers[g]
            for i, b in enumerate(blocks):
                if b.is_null and b is pool.null_block:
                    continue
                if not pool.is_pool_block(b) or b.block_hash is None or b.group_id != g \
                        or b.block_hash != m.block_key(hashes, i):
                    kind = getattr(m.spec, "kind", type(m.spec).__name__)
                    raise BlockPoolError(
                        f"check_invariants: group {g} (kind {kind!r}, {type(m).__name__}):"
                        f" find_longest_cache_hit offered block "
                        f"{getattr(b, 'block_id', b)!r} as table[{i}], which is not a "
                        f"block cached in this group under this request's hash",
                        block_id=getattr(b, "block_id", None), kind=kind,
                        group_id=g)

    def check_consistency(self) -> None:
        """Check the whole block state (O(blocks + table entries)); raises
        :class:`~kvcore.errors.BlockPoolError` naming the block id and the group's kind
        at the first fault.  Checked: every table entry is a block of this pool; no
        non-null block appears twice in one table or in two groups' tables; every
        block's ``ref_cnt`` equals the tables holding it (plus its reservation); the
        free queue holds exactly the unheld blocks, once each, never the null block;
        every cached hash points at a block carrying that hash.  Run after every call
        when ``check_invariants`` is on; callable any time."""
        pool = self.block_pool

        def fail(msg: str, bid: Any, m: Any = None) -> BlockPoolError:
            extra: dict[str, Any] = {"block_id": bid}
            if m is not None:
                kind = getattr(m.spec, "kind", type(m.spec).__name__)
                msg = f"group {m.group_id} (kind {kind!r}, {type(m).__name__}): {msg}"
                extra.update(kind=kind, group_id=m.group_id)
            return BlockPoolError(f"check_invariants: {msg}", **extra)

        holders: dict[int, int] = {}
        owner: dict[int, Any] = {}
        for m in self.managers:
            for rid, table in m.req_to_blocks.items():
                seen: set[int] = set()
                for b in table:
                    if not pool.is_pool_block(b):
                        raise fail(f"request {rid!r} holds block "
                                   f"{getattr(b, 'block_id', b)!r}, not a pool block",
                                   getattr(b, "block_id", None), m)
                    if b.is_null:
                        continue
                    bid = b.block_id
                    if bid in seen:
                        raise fail(f"request {rid!r} lists block {bid} twice", bid, m)
                    seen.add(bid)
                    o = owner.setdefault(bid, m)
                    if o is not m:
                        raise fail(f"block {bid} is in tables of groups {o.group_id} "
                                   f"and {m.group_id} at once", bid, m)
                    holders[bid] = holders.get(bid, 0) + 1
        for b in pool.reserved_blocks:
            holders[b.block_id] = holders.get(b.block_id, 0) + 1
        queued: set[int] = set()
        n_queue = 0
        for b in pool.free_queue:
            n_queue += 1
            if b.is_null or b.block_id in queued or not pool.is_pool_block(b):
                raise fail(f"free queue holds block {b.block_id} wrongly (null, twice or "
                           f"foreign)", b.block_id, owner.get(b.block_id))
            queued.add(b.block_id)
        if n_queue != pool.free_queue.num_free_blocks:
            raise fail(f"free queue has {n_queue} blocks but counts "
                       f"{pool.free_queue.num_free_blocks}", None)
        for b in pool.blocks[1:]:
            want = holders.get(b.block_id, 0)
            if b.ref_cnt != want:
                raise fail(f"block {b.block_id} has ref_cnt {b.ref_cnt} but {want} "
                           f"holder(s)", b.block_id, owner.get(b.block_id))
            if (b.ref_cnt == 0) != (b.block_id in queued):
                raise fail(f"block {b.block_id} (ref_cnt {b.ref_cnt}) is "
                           f"{'in' if b.block_id in queued else 'not in'} the free queue",
                           b.block_id, owner.get(b.block_id))
        for g, cache in enumerate(pool.cached):
            for h, b in cache.items():
                if b.block_hash != h or b.group_id != g:
                    raise fail(f"prefix cache of group {g} maps a hash to block "
                               f"{b.block_id}, which carries another", b.block_id)

    # ---- queries -------------------------------------------------------------------
    @property
    def usage(self) -> float:
        """Fraction of usable blocks held by requests or reservations (0.0 to 1.0)."""
        return self.block_pool.usage

    @property
    def num_free_blocks(self) -> int:
        return self.block_pool.free_queue.num_free_blocks

    def get_block_ids(self, request: Any) -> tuple[list[int], ...]:
        """The request's block table per group (block ids; 0 = null block); empty
        tables for an id that holds no blocks.  ``request``: a request object or its id
        (str); RequestError otherwise."""
        rid = _request_id("get_block_ids", request)
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
        ``reset_running_requests`` must be a bool (RequestError otherwise: a truthy
        string would free every running request).
        """
        _bool_arg("reset_prefix_cache", "reset_running_requests", reset_running_requests)
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


#: the methods the debug switch wraps (:func:`wrap_checked`)
CHECKED_METHODS = ("get_computed_blocks", "allocate_slots", "free", "reset_prefix_cache")


def wrap_checked(mgr: Any) -> None:
    """Put the debug switch's wrapper (:func:`owner_checked`) around each of
    :data:`CHECKED_METHODS` of ``mgr`` (instance attributes)."""
    for name in CHECKED_METHODS:
        setattr(mgr, name, owner_checked(mgr, getattr(type(mgr), name).__get__(mgr)))


def checked_state(mgr: Any) -> dict[str, Any]:
    """``mgr.__dict__`` without the wrappers of :func:`wrap_checked` and with no owner
    thread: what a manager pickles or deep-copies (the copy wraps its own methods)."""
    state = dict(mgr.__dict__)
    for name in CHECKED_METHODS:
        state.pop(name, None)
    if "_owner_thread" in state:
        state["_owner_thread"] = None
    return state


def owner_checked(mgr: Any, fn: Callable[..., Any]) -> Callable[..., Any]:
    """The debug switch's wrapper of a manager method: ``fn`` runs only on the thread
    that made the first call (else :class:`~kvcore.errors.KVCoreError`, field
    ``thread``), a lookup's hit is checked (``mgr._check_hit``) and the whole state after
    it (``mgr.check_consistency()``).  ``mgr`` has ``_owner_thread`` (None until the
    first call); kvcore's and kvcore-vllm's managers share it."""

    @functools.wraps(fn)
    def call(*args: Any, **kw: Any) -> Any:
        me = threading.get_ident()
        if mgr._owner_thread is None:
            mgr._owner_thread = me
        elif me != mgr._owner_thread:
            from kvcore.errors import KVCoreError

            raise KVCoreError(
                f"KVCacheManager.{fn.__name__} called from thread {me}, but thread "
                f"{mgr._owner_thread} owns this manager: it is not thread-safe (one "
                f"scheduler thread makes every call)", field="thread", value=me)
        out = fn(*args, **kw)
        if fn.__name__ == "get_computed_blocks":
            mgr._check_hit(args[0] if args else kw["request"], out[0])
        mgr.check_consistency()
        return out

    return call
