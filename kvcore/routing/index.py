"""The residency index: which replica can serve how much of a request's prefix, from
the replicas' KV-cache events, by the rule each replica's own hit lookup uses.

How it works
============
Per replica the index keeps what the replica's block pool keeps for prefix lookups:
one dict per KV-cache group, ``block hash -> number of blocks holding it``
(``BlockStored`` adds one per hash, ``BlockRemoved`` takes one away; a pool may hold
several blocks with one hash, the later ones published when two requests computed the
same prefix at once, and the hash stays findable until the last one is evicted).

A query does not re-implement the hit rules: it runs the **runtime's own hit search**
(:func:`kvcore.runtime.make_coordinator`: the coordinator and one manager per group,
each class from the registry) against those dicts, by handing the managers a pool
whose ``cached[group_id]`` is the replica's dict.  So the answer is, by construction,
what :meth:`kvcore.runtime.KVCacheManager.get_computed_blocks` would return on that
replica: full attention contiguous from the start; a sliding window the
``cdiv(sliding_window - 1, block_size)`` blocks before the hit point; chunked local
attention the current chunk's blocks; a Mamba state at the hit boundary; MLA,
compressed and quantized kinds by their managers; cross attention and kpool tails
neutral; across all groups the hybrid coordinator's fixed point (a multiple of the
lcm of the caching groups' block sizes); EAGLE's dropped alignment unit; per-kind hit
caps (``max_cache_hit_tokens``, e.g. R-SWA's prompt limit).

Plugin kinds
------------
A plugin kind's residency rule is its manager's ``find_longest_cache_hit`` (and
``max_cache_hit_tokens``): the index calls them as the runtime does.  They must read
the prefix cache only through ``self.pool.cached[self.group_id]`` (a mapping from hash
to a truthy value) and ``self.null_block``, as every kvcore manager does.  A kind whose
search needs more than that defines ``residency_find_longest_cache_hit(block_hashes,
max_length, extra_tokens=0)`` on its manager class with the same contract and return
value (a list whose length is the group's hit in blocks); the index calls it instead
of ``find_longest_cache_hit``.

Sequence numbers and staleness
==============================
:meth:`ResidencyIndex.apply` takes one batch of events and, optionally, its sequence
number (vLLM's ``ZmqEventPublisher`` numbers batches 0, 1, 2, ...).  A batch whose
number is below the next expected one raises :class:`~kvcore.errors.KVEventError`
and changes nothing.  A gap (a number above the expected one, or a first batch after
0) marks the replica **stale**: it answers 0 for every query until the index knows
its state again, i.e. until an ``AllBlocksCleared`` event, :meth:`reset_replica`
(the replica is known to be empty) or :meth:`replay` (its events from the start).
A bad event (unknown group, a ``block_size`` other than the group's, the removal of
a hash the replica does not hold, an unknown event type) or a malformed one
(``block_hashes`` not a list, a hash that is neither hex nor an int nor hashable, a
non-int ``block_size``, an object that is not an event, a batch that is not a list)
raises :class:`~kvcore.errors.KVEventError` and marks the replica stale (the batch
may be half applied): an index never answers a hit it cannot vouch for, and no plain
``TypeError`` / ``ValueError`` escapes.  While a replica is
stale its events are still applied, leniently, so nothing but the trust is lost.

Arguments
=========
Every public method checks its arguments: a wrong type or value raises
:class:`~kvcore.errors.ConfigError` (constructor) or
:class:`~kvcore.errors.KVEventError` (events, queries, replicas), naming the
argument in ``extra["field"]``.  An unknown replica in :meth:`state` /
:meth:`snapshot` raises :class:`UnknownReplicaError` (also a ``KeyError``).

Sizes
=====
One indexed block costs one dict slot and its key (the hash object from the event:
33 + 32 bytes for a sha256 ``bytes``); see benchmarks/bench_residency_index.py.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Sequence
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any

from kvcore.errors import ConfigError, KVEventError
from kvcore.routing.events import CLEARED, STORED, decode

__all__ = ["ResidencyIndex", "ReplicaState", "KVEventError", "UnknownReplicaError"]

#: media whose events describe the GPU prefix cache (vLLM's ``MEDIUM_GPU``; None =
#: unspecified, kvcore's events)
GPU_MEDIA = frozenset({None, "GPU"})


@dataclass
class ReplicaState:
    """One replica's view in the index.

    Attributes
    ----------
    cached: per group, ``block hash -> blocks holding it`` (>= 1).
    next_seq: the sequence number the next batch should carry (None: none seen).
    stale: True while the index does not know the replica's state (never trusted).
    stale_reason: why (the gap or the bad event), "" when not stale.
    num_events: events applied.
    num_ignored: events skipped (another medium than the GPU's).
    """

    cached: list[dict[Any, int]]
    next_seq: int | None = None
    stale: bool = False
    stale_reason: str = ""
    num_events: int = 0
    num_ignored: int = 0

    @property
    def num_blocks(self) -> int:
        """Distinct (group, hash) entries held."""
        return sum(len(c) for c in self.cached)


class _Searcher:
    """The runtime's hit search over a shadow pool (module docstring)."""

    def __init__(self, kv_cache_config: Any, *, max_model_len: int, use_eagle: bool,
                 enable_caching: bool, max_num_batched_tokens: int) -> None:
        from kvcore.runtime.block_pool import BlockPool
        from kvcore.runtime.coordinator import make_coordinator

        groups = kv_cache_config.kv_cache_groups
        n = kv_cache_config.num_blocks or (1 << 20)
        self.pool = BlockPool(max(int(n), 1 << 12), enable_caching=True,
                              num_groups=max(1, len(groups)), lazy=True)
        self.coordinator = make_coordinator(
            kv_cache_config, self.pool, max_model_len=max_model_len,
            enable_caching=enable_caching, use_eagle=use_eagle,
            max_num_batched_tokens=max_num_batched_tokens)
        for m in self.coordinator.managers:
            alt = getattr(type(m), "residency_find_longest_cache_hit", None)
            if alt is not None:
                m.find_longest_cache_hit = alt.__get__(m)  # type: ignore[method-assign]
        self.managers = list(self.coordinator.managers)
        from kvcore.runtime.managers import SingleTypeManager

        base = SingleTypeManager.max_cache_hit_tokens
        self.cappers = [m for m in self.managers
                        if type(m).max_cache_hit_tokens is not base]
        self.enable_caching = bool(self.coordinator.caching_managers)
        self.hash_block_size: int = self.coordinator.hash_block_size
        self.block_sizes = [m.block_size for m in self.managers]

    def find(self, block_hashes: Sequence[Any], limit: int) -> int:
        return self.coordinator.find_longest_cache_hit(block_hashes, limit)[1]


class ResidencyIndex:
    """Prefix residency of a fleet of replicas that share one KV-cache layout.

    Parameters
    ----------
    kv_cache_config: the replicas' :class:`~kvcore.kv_cache_config.KVCacheConfig`
        (groups, block sizes, specs); vLLM's through
        ``kvcore_vllm.routing.residency_index_from_vllm``.
    replicas: replica ids (any hashable) known from the start; :meth:`apply` adds
        others on first sight.
    max_model_len: tokens (default: the plan's, else 2**31).
    use_eagle: the replicas run EAGLE (the last hit alignment unit is recomputed).
    enable_caching: the replicas prefix cache (False: every query answers 0).
    hash: the replicas' block hash (``"sha256"``, ``"sha256_128"`` or a callable),
        for :meth:`block_hashes`.
    int_hashes: the events carry 64-bit int hashes (vLLM's
        ``VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES``): query hashes given as bytes are
        converted the same way (low 64 bits of the big-endian value).
    max_num_batched_tokens: the replicas' step budget (windowed kinds' sizing).
    media: event media that describe the prefix cache a hit reads (default GPU and
        unspecified); events of other media (CPU / storage offload tiers) are counted
        in ``num_ignored`` and skipped.
    searcher: internal (the bridge passes vLLM's search).

    Raises :class:`~kvcore.errors.ConfigError` for a config the runtime cannot build
    (the same errors as :class:`~kvcore.runtime.KVCacheManager`).
    """

    def __init__(self, kv_cache_config: Any, *, replicas: Iterable[Hashable] = (),
                 max_model_len: int | None = None, use_eagle: bool = False,
                 enable_caching: bool = True, hash: Any = "sha256",
                 int_hashes: bool = False, max_num_batched_tokens: int = 8192,
                 media: Iterable[str | None] = GPU_MEDIA, searcher: Any = None) -> None:
        groups = getattr(kv_cache_config, "kv_cache_groups", None)
        if groups is None:
            raise ConfigError(f"kv_cache_config: expected a KVCacheConfig, got "
                              f"{type(kv_cache_config).__name__}", field="kv_cache_config")
        if max_model_len is None:
            max_model_len = getattr(kv_cache_config, "max_model_len", 0) or (1 << 31)
        max_model_len = _int_arg("max_model_len", max_model_len, 1)
        max_num_batched_tokens = _int_arg("max_num_batched_tokens",
                                          max_num_batched_tokens, 1)
        for name, v in (("use_eagle", use_eagle), ("enable_caching", enable_caching),
                        ("int_hashes", int_hashes)):
            if not isinstance(v, bool):
                raise ConfigError(f"{name}: expected True or False, got {v!r}",
                                  field=name, value=repr(v))
        from kvcore.runtime.hashing import get_hash_function

        get_hash_function(hash)  # ConfigError naming the known hashes
        media = _iter_arg("media", media, ConfigError)
        for m in media:
            if m is not None and not isinstance(m, str):
                raise ConfigError(f"media: expected medium names (str or None), got "
                                  f"{m!r}", field="media", value=repr(m))
        replicas = _iter_arg("replicas", replicas, ConfigError)
        for r in replicas:
            _replica_arg(r, ConfigError)
        self.kv_cache_config = kv_cache_config
        self.max_model_len = int(max_model_len)
        self.use_eagle = bool(use_eagle)
        self.int_hashes = bool(int_hashes)
        self.hash = hash
        self.media = frozenset(media)
        self._s = searcher if searcher is not None else _Searcher(
            kv_cache_config, max_model_len=self.max_model_len, use_eagle=self.use_eagle,
            enable_caching=enable_caching, max_num_batched_tokens=max_num_batched_tokens)
        #: tokens per request hash (the gcd of the caching groups' block sizes)
        self.hash_block_size: int = self._s.hash_block_size
        #: per group, its block size in tokens (what BlockStored must carry)
        self.block_sizes: tuple[int, ...] = tuple(self._s.block_sizes)
        self.num_groups = len(self.block_sizes)
        self.enable_caching = self._s.enable_caching
        self._replicas: dict[Hashable, ReplicaState] = {}
        self._hasher: Any = None
        self._listeners: list[Any] = []
        for r in replicas:
            self.add_replica(r)

    # ---- replicas ----------------------------------------------------------------
    @property
    def replicas(self) -> list[Hashable]:
        """Replica ids, in the order first seen."""
        return list(self._replicas)

    def add_replica(self, replica: Hashable, *, next_seq: int | None = None) -> ReplicaState:
        """Start indexing ``replica`` as empty (its cache known to be empty; the next
        batch should carry ``next_seq``, None for any).  Returns its state.  Raises
        :class:`~kvcore.errors.KVEventError` for an unhashable replica or a
        ``next_seq`` that is not None or an int >= 0."""
        _replica_arg(replica)
        if next_seq is not None:
            next_seq = _int_arg("next_seq", next_seq, 0, KVEventError)
        st = self._replicas.get(replica)
        if st is None:
            st = self._replicas[replica] = ReplicaState(
                [{} for _ in range(max(1, self.num_groups))], next_seq)
        return st

    def remove_replica(self, replica: Hashable) -> None:
        """Forget a replica (gone from the fleet).  Raises
        :class:`~kvcore.errors.KVEventError` for an unhashable replica."""
        _replica_arg(replica)
        self._replicas.pop(replica, None)

    def state(self, replica: Hashable) -> ReplicaState:
        """The replica's :class:`ReplicaState`; KeyError if unknown (a
        :class:`~kvcore.errors.KVEventError` that is also a ``KeyError``)."""
        return self._known(replica)

    def _known(self, replica: Hashable) -> ReplicaState:
        _replica_arg(replica)
        st = self._replicas.get(replica)
        if st is None:
            raise UnknownReplicaError(
                f"replica {replica!r} is not indexed (known: {len(self._replicas)} "
                f"replica(s))", field="replica", value=repr(replica))
        return st

    def is_stale(self, replica: Hashable) -> bool:
        """True while ``replica`` is not trusted (False for an unknown replica)."""
        _replica_arg(replica)
        st = self._replicas.get(replica)
        return st is not None and st.stale

    def reset_replica(self, replica: Hashable, *, next_seq: int | None = None) -> None:
        """The replica's cache is known to be empty (restarted, or reset with no
        event seen): clear it and trust it again; the next batch should carry
        ``next_seq`` (None for any)."""
        st = self.add_replica(replica, next_seq=next_seq)
        for c in st.cached:
            c.clear()
        st.stale = False
        st.stale_reason = ""
        st.next_seq = next_seq

    def mark_stale(self, replica: Hashable, reason: str) -> None:
        """Stop trusting ``replica`` until it is cleared or replayed."""
        st = self.add_replica(replica)
        reason = str(reason)
        st.stale = True
        st.stale_reason = reason

    # ---- events ------------------------------------------------------------------
    def add_listener(self, fn: Any) -> None:
        """Call ``fn(replica, op, group_id, block_hashes)`` for every event applied
        from now on (``op``: :data:`kvcore.routing.events.STORED`, ``REMOVED`` or
        ``CLEARED``; ``block_hashes`` empty for ``CLEARED``), after the index applied
        it.  Routers use it to retire their own predictions when the events for them
        arrive.  Raises :class:`~kvcore.errors.ConfigError` for a non-callable."""
        if not callable(fn):
            raise ConfigError(f"fn: expected a callable, got {_short(fn)}", field="fn",
                              value=_short(fn))
        if fn not in self._listeners:
            self._listeners.append(fn)

    def apply(self, replica: Hashable, events: Iterable[Any], seq: int | None = None,
              ) -> None:
        """Apply one batch of KV events of ``replica`` (oldest first).

        ``seq``: the batch's sequence number, or None for unnumbered batches (kvcore's
        ``take_events()`` called in order).  Events: kvcore's, vLLM 0.32's or their
        JSON dicts (:mod:`kvcore.routing.events`); ``events`` may also be a batch
        object with an ``events`` list (vLLM's ``KVEventBatch``).

        Raises :class:`~kvcore.errors.KVEventError` (naming the replica, the field
        and the value) for a ``seq`` below the expected one (nothing applied), and
        for a bad event while the replica is trusted (the replica is then stale).
        """
        _replica_arg(replica)
        st = self._replicas.get(replica)
        if st is None:
            st = self.add_replica(replica)
        inner = getattr(events, "events", None)
        if inner is not None and not isinstance(events, (list, tuple)):
            events = inner
        if isinstance(events, (str, bytes, dict)) or not isinstance(events, Iterable):
            e = KVEventError(f"replica {replica!r}: events must be a list of KV-cache "
                             f"events (or a batch with .events), got "
                             f"{type(events).__name__}", replica=replica,
                             field="events", value=_short(events))
            if seq is None or (type(seq) is int and seq >= 0):
                self.mark_stale(replica, str(e))
            raise e
        if seq is not None:
            if type(seq) is not int and not isinstance(seq, bool) \
                    and hasattr(seq, "__index__"):
                seq = seq.__index__()
            if type(seq) is not int or seq < 0:
                raise KVEventError(f"replica {replica!r}: seq must be an int >= 0, got "
                                   f"{seq!r}", replica=replica, field="seq", value=seq)
            exp = st.next_seq
            if exp is not None and seq < exp:
                raise KVEventError(
                    f"replica {replica!r}: batch seq {seq} is below the next expected "
                    f"{exp} (out of order or replayed); nothing applied",
                    replica=replica, field="seq", value=seq, expected=exp)
            if exp is None and seq > 0 and st.num_events == 0 and not st.stale:
                self.mark_stale(replica, f"first batch seen has seq {seq}: batches "
                                         f"0..{seq - 1} were missed")
            elif exp is not None and seq > exp:
                self.mark_stale(replica, f"sequence gap: expected batch {exp}, got {seq} "
                                         f"({seq - exp} batch(es) missed)")
            st.next_seq = seq + 1
        cached = st.cached
        sizes = self.block_sizes
        ngroups = self.num_groups
        media = self.media
        lis = self._listeners
        n = 0
        try:
            for ev in events:
                n += 1
                op, g, bs, hashes, medium = decode(ev)
                if type(hashes) not in _SEQ and op != CLEARED:
                    raise KVEventError(
                        f"replica {replica!r}: block_hashes must be a list of hashes, "
                        f"got {_short(hashes)}", replica=replica, field="block_hashes",
                        value=_short(hashes))
                if medium not in media:
                    st.num_ignored += 1
                    continue
                if op == CLEARED:
                    for gd in cached:
                        gd.clear()
                    if st.stale:
                        st.stale = False
                        st.stale_reason = ""
                    for f in lis:
                        f(replica, CLEARED, None, ())
                    continue
                if g is None and ngroups == 1:
                    g = 0
                if type(g) is not int or not 0 <= g < ngroups:
                    raise KVEventError(
                        f"replica {replica!r}: event group {g!r} is not a group of this "
                        f"config (0..{ngroups - 1})", replica=replica, field="group_id",
                        value=g)
                d = cached[g]
                if op == STORED:
                    if bs != sizes[g]:
                        raise KVEventError(
                            f"replica {replica!r}: BlockStored of group {g} has "
                            f"block_size {bs!r}, the group's is {sizes[g]}",
                            replica=replica, field="block_size", value=bs,
                            expected=sizes[g])
                    get = d.get
                    for h in hashes:
                        d[h] = get(h, 0) + 1
                else:
                    for h in hashes:
                        c = d.get(h)
                        if c is None:
                            if st.stale:
                                continue
                            raise KVEventError(
                                f"replica {replica!r}: BlockRemoved of group {g} names "
                                f"hash {_short(h)}, which the replica does not hold",
                                replica=replica, field="block_hashes", value=_short(h))
                        if c == 1:
                            del d[h]
                        else:
                            d[h] = c - 1
                for f in lis:
                    f(replica, op, g, hashes)
        except (KVEventError, TypeError, ValueError, AttributeError, KeyError,
                IndexError) as exc:
            e = exc if isinstance(exc, KVEventError) else KVEventError(
                f"replica {replica!r}: event {n - 1} of the batch is malformed "
                f"({type(exc).__name__}: {exc})", replica=replica, field="events",
                value=n - 1)
            if not st.stale:
                self.mark_stale(replica, str(e))
                st.num_events += n
                raise e from (None if e is exc else exc)
            st.num_events += n
            return
        st.num_events += n

    def replay(self, log: Iterable[tuple[Hashable, int | None, Iterable[Any]]]) -> None:
        """Rebuild replicas from an event log of ``(replica, seq, events)`` batches,
        each replica's from its first batch on: the replicas in the log are reset
        (empty, trusted) first, then every batch is applied in order.  The result
        equals the index that applied the same batches live (recovery)."""
        log = _iter_arg("log", log, KVEventError)
        for i, b in enumerate(log):
            if not isinstance(b, (list, tuple)) or len(b) != 3:
                raise KVEventError(f"log[{i}]: expected a (replica, seq, events) batch, "
                                   f"got {_short(b)}", field="log", value=i)
        seen: set[Hashable] = set()
        for replica, seq, events in log:
            if replica not in seen:
                seen.add(replica)
                self.reset_replica(replica, next_seq=seq)
            self.apply(replica, events, seq)

    def snapshot(self, replica: Hashable) -> dict[str, Any]:
        """The replica's state as plain data (per group ``{hash: count}``, ``next_seq``,
        ``stale``): two indexes hold the same state iff their snapshots are equal.
        Raises :class:`~kvcore.errors.KVEventError` (also a ``KeyError``) for an
        unknown replica."""
        st = self._known(replica)
        return {"cached": [dict(c) for c in st.cached], "next_seq": st.next_seq,
                "stale": st.stale}

    # ---- queries -----------------------------------------------------------------
    def block_hashes(self, token_ids: Sequence[int], *, lora_name: str | None = None,
                     cache_salt: str | None = None,
                     mm_features: Sequence[tuple[int, int, str]] | None = None,
                     ) -> list[Any]:
        """The request's block hashes at :attr:`hash_block_size`, by kvcore's hashing
        (:class:`kvcore.runtime.BlockHasher`, the replicas' ``hash``); int hashes when
        the index reads int hashes.  Only replicas that hash as kvcore does (kvcore's
        runtime) match; for vLLM pass ``request.block_hashes`` from vLLM's hasher."""
        if self._hasher is None:
            from kvcore.runtime.hashing import BlockHasher

            self._hasher = BlockHasher(self.hash_block_size, self.hash)
        from kvcore.errors import RequestError
        from kvcore.runtime.hashing import Request

        try:  # the runtime's Request checks the token ids, keys and features
            req = Request("routing", token_ids, hash=self._hasher, lora_name=lora_name,
                          cache_salt=cache_salt, mm_features=mm_features or None)
        except RequestError as exc:
            raise KVEventError(f"block_hashes: {exc.message}", **exc.extra) from None
        return self._keys(req.block_hashes)

    def _keys(self, hashes: Sequence[Any]) -> list[Any]:
        if not self.int_hashes:
            return list(hashes)
        mask = (1 << 64) - 1
        return [int.from_bytes(h, "big") & mask if isinstance(h, (bytes, bytearray))
                else h for h in hashes]

    def _limit(self, block_hashes: Sequence[Any], num_tokens: int | None,
               num_prompt_tokens: int | None) -> int:
        if num_tokens is None:
            limit = len(block_hashes) * self.hash_block_size
            num_tokens = limit + 1
        else:
            limit = int(num_tokens) - 1
        if self._s.cappers:
            probe = SimpleNamespace(
                num_prompt_tokens=num_tokens if num_prompt_tokens is None
                else num_prompt_tokens, num_tokens=num_tokens,
                all_token_ids=range(num_tokens), request_id="routing")
            for m in self._s.cappers:
                cap = m.max_cache_hit_tokens(probe)
                if cap is not None and cap < limit:
                    limit = max(cap, 0)
        return min(limit, self.max_model_len)

    def longest_prefix(self, block_hashes: Sequence[Any], num_tokens: int | None = None,
                       *, replicas: Iterable[Hashable] | None = None,
                       num_prompt_tokens: int | None = None) -> dict[Hashable, int]:
        """Per replica, the tokens of the request's prefix it can serve from its
        prefix cache: exactly the hit its manager's ``get_computed_blocks`` would give
        (module docstring); 0 for a stale replica.

        Parameters
        ----------
        block_hashes: the request's hashes at :attr:`hash_block_size` tokens each
            (``request.block_hashes``, or :meth:`block_hashes` from tokens).
        num_tokens: the request's token count (the hit is at most ``num_tokens - 1``,
            the last token being recomputed); None: every hashed token may hit.
        replicas: which replicas (default all).
        num_prompt_tokens: for kinds that cap hits at the prompt (R-SWA); default
            ``num_tokens``.

        Raises :class:`~kvcore.errors.KVEventError` for block hashes that are not a
        list of hashable values, a ``num_tokens`` / ``num_prompt_tokens`` that is not
        an int >= 0, or ``replicas`` that is not an iterable of replica ids.
        """
        if type(block_hashes) not in _SEQ:
            raise KVEventError(f"block_hashes: expected a list of block hashes, got "
                               f"{_short(block_hashes)}", field="block_hashes",
                               value=_short(block_hashes))
        if num_tokens is not None:
            num_tokens = _int_arg("num_tokens", num_tokens, 0, KVEventError)
        if num_prompt_tokens is not None:
            num_prompt_tokens = _int_arg("num_prompt_tokens", num_prompt_tokens, 0,
                                         KVEventError)
        s = self._s
        out: dict[Hashable, int] = {}
        if replicas is None:
            ids: Iterable[Hashable] = self._replicas
        else:
            ids = _iter_arg("replicas", replicas, KVEventError)
            for r in ids:
                _replica_arg(r)
        if not s.enable_caching:
            return dict.fromkeys(ids, 0)
        keys = self._keys(block_hashes) if self.int_hashes else block_hashes
        limit = self._limit(keys, num_tokens, num_prompt_tokens)
        pool = s.pool
        saved = pool.cached
        try:
            for r in ids:
                st = self._replicas.get(r)
                if st is None or st.stale or limit <= 0:
                    out[r] = 0
                    continue
                pool.cached = st.cached
                out[r] = s.find(keys, limit)
        except TypeError as exc:
            bad = next((h for h in block_hashes if getattr(h, "__hash__", None) is None),
                       None)
            raise KVEventError(f"block_hashes: every hash must be hashable (bytes or "
                               f"int), got {_short(bad)}", field="block_hashes",
                               value=_short(bad)) from exc
        finally:
            pool.cached = saved
        return out

    def best(self, block_hashes: Sequence[Any], num_tokens: int | None = None, *,
             replicas: Iterable[Hashable] | None = None) -> tuple[Hashable | None, int]:
        """``(replica, tokens)`` with the longest servable prefix (first seen on
        ties); ``(None, 0)`` with no replicas."""
        hits = self.longest_prefix(block_hashes, num_tokens, replicas=replicas)
        best_r, best_n = None, -1
        for r, n in hits.items():
            if n > best_n:
                best_r, best_n = r, n
        return best_r, max(best_n, 0)


def _short(h: Any) -> str:
    if isinstance(h, (bytes, bytearray)):
        return bytes(h).hex()[:16] + ("..." if len(h) > 8 else "")
    r = repr(h)
    return r if len(r) <= 64 else r[:61] + "..."


_SEQ = (list, tuple)


class UnknownReplicaError(KVEventError, KeyError):
    """A replica the index does not know (also a ``KeyError``, as ``state`` was)."""

    __str__ = ValueError.__str__


def _int_arg(name: str, v: Any, lo: int, err: type = ConfigError) -> int:
    """``v`` as an int >= ``lo`` (numpy ints taken; bool refused), else ``err``."""
    if type(v) is not int and not isinstance(v, bool) and hasattr(v, "__index__"):
        v = v.__index__()
    if type(v) is not int or v < lo:
        raise err(f"{name}: expected an int >= {lo}, got {_short(v)}", field=name,
                  value=_short(v))
    return v


def _iter_arg(name: str, v: Any, err: type) -> list[Any]:
    if isinstance(v, (str, bytes, dict)) or not isinstance(v, Iterable):
        raise err(f"{name}: expected a list, got {_short(v)}", field=name,
                  value=_short(v))
    return list(v)


def _replica_arg(r: Any, err: type = KVEventError) -> None:
    if getattr(r, "__hash__", None) is None:
        raise err(f"replica: expected a hashable id (str or int), got {_short(r)}",
                  field="replica", value=_short(r))
