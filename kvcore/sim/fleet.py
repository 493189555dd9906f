"""Fleet simulation: N replicas, each kvcore's KVCacheManager under the clocked
scheduler loop of :mod:`kvcore.sim.engine`, behind a router that sees only what a real
one sees: the replicas' KV events (after ``event_delay_s``) and its own bookkeeping of
the requests it sent (outstanding requests, prefill tokens not yet answered).

The loop
========
One process, one clock.  Each replica keeps its own time: the end of its last step.
Events are taken in time order: a request arrival (sent under ``max_concurrency``
as ``vllm bench serve`` sends them; the router routes it, and the replica sees it, the
API server's share ``request_overhead_s`` after the send, as in
:mod:`kvcore.sim.engine`) or the next step of the replica whose time is
earliest (arrivals first on ties, as :func:`~kvcore.sim.engine.run_engine` releases
arrived requests before a step).  A step is exactly one iteration of ``run_engine``'s
loop (budget, running requests first, recompute preemption, FCFS admission with
vLLM's full-prompt admission gate, chunked prefill, one output token at the end of a
prefill); a fleet of one replica reproduces ``run_engine`` token for token
(tests/sim/test_fleet.py).

What the router sees
--------------------
* KV events: each replica's ``take_events()`` after every step, stamped with the
  step's end time and delivered ``event_delay_s`` later to a
  :class:`kvcore.routing.ResidencyIndex` (one numbered batch per step, as vLLM's
  publisher sends them).  ``view.hits(request)``: per replica, the prefix the index
  says that replica serves (its manager's own rule across every KV-cache group).
* ``view.attention_hits(request)``: the same from an index of the first
  full-attention group alone, contiguous from the start: what routers that index one
  attention group do (llm-d, Dynamo, Ray Serve today).  On a dense model it equals
  ``hits``; on a hybrid it claims blocks the other groups no longer hold.
* ``view.outstanding[k]``: requests sent to replica k and not finished;
  ``view.prefill_backlog[k]``: their prompt tokens not yet answered by a first token
  (the router's estimate: prompt length minus the hit it predicted), both as of the
  routing time.

Routers
=======
A router is an object with ``name``, ``uses_index`` / ``uses_attention_index``
(whether the fleet must feed those indexes) and ``route(request, view) -> replica
index``.  Built in: ``round-robin``, ``least-loaded`` (fewest outstanding requests,
then the smallest prefill backlog), ``prefix-aware`` (the replica with the smallest
prefill backlog after routing: ``backlog + prompt_len - hit``, hit from the
group-aware index) and ``prefix-aware-attention-only`` (the same with the attention
group's hit).  Others plug in through the entry-point group ``kvcore.routers``: the
entry point names a callable ``factory(**options) -> router``.
"""

from __future__ import annotations

import hashlib
import heapq
import itertools
import math
import time
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from kvcore.errors import ConfigError, KVCoreError, shorten
from kvcore.sim.engine import (
    Engine,
    EngineResult,
    SimRequest,
    Slots,
    check_fresh,
    resolve_request_overhead,
)
from kvcore.sim.timing import StepTimeModel
from kvcore.units import check_int, check_name, check_number

__all__ = ["ROUTERS_ENTRY_POINT_GROUP", "FleetView", "FleetResult", "RoundRobinRouter",
           "LeastLoadedRouter", "PrefixAwareRouter", "AttentionOnlyPrefixRouter",
           "load_router", "router_names", "run_fleet", "fleet_metrics"]

ROUTERS_ENTRY_POINT_GROUP = "kvcore.routers"
#: most points kept per replica of the per-step series (thinned by 2 when reached, so
#: a million-request run does not keep tens of millions of floats)
MAX_SAMPLES = 4096
#: the most replicas of a fleet (each built when first routed to, a few MB and ~0.1 s
#: of CPU each; per-replica figures are kept for all)
MAX_REPLICAS = 4096


# ---- routers ---------------------------------------------------------------------------
def _check_route(request: Any, view: Any) -> None:
    """A router's arguments: the request being routed and the fleet's view."""
    if not isinstance(request, SimRequest):
        raise ConfigError(f"route: request must be a SimRequest, got "
                          f"{type(request).__name__}", field="request",
                          value=type(request).__name__)
    if not isinstance(view, FleetView):
        raise ConfigError(f"route: view must be a FleetView (run_fleet passes it), got "
                          f"{type(view).__name__}", field="view", value=type(view).__name__)


class RoundRobinRouter:
    """Replica ``i mod N`` for the i-th request."""

    name = "round-robin"
    uses_index = False
    uses_attention_index = False

    def __init__(self) -> None:
        self._next = 0

    def route(self, request: SimRequest, view: FleetView) -> int:
        _check_route(request, view)
        k = self._next % view.num_replicas
        self._next += 1
        return k


class _LeastRecent:
    """Ties go to the replica chosen longest ago (never chosen first, lowest index
    first), so an idle fleet is used evenly."""

    def __init__(self) -> None:
        self._last: dict[int, int] = {}
        self._n = 0

    def _pick(self, keys: list[tuple[Any, ...]]) -> int:
        last = self._last
        k = min(range(len(keys)), key=lambda k: (*keys[k], last.get(k, -1), k))
        self._n += 1
        last[k] = self._n
        return k


class LeastLoadedRouter(_LeastRecent):
    """Fewest outstanding requests, then the smallest prefill backlog, then the
    replica chosen longest ago."""

    name = "least-loaded"
    uses_index = False
    uses_attention_index = False

    def route(self, request: SimRequest, view: FleetView) -> int:
        _check_route(request, view)
        o, b = view.outstanding, view.prefill_backlog
        return self._pick([(o[k], b[k]) for k in range(view.num_replicas)])


class PrefixAwareRouter(_LeastRecent):
    """The replica whose prefill backlog is smallest once this request's uncached
    tokens join it: ``argmin_k backlog[k] + prompt_len - hit[k]`` (ties: fewer
    outstanding requests, then the replica chosen longest ago).  A cached prefix is
    worth exactly the prefill it saves, so a hot replica keeps a request only while its
    queue is shorter than the recompute.

    ``hit[k]`` is the larger of two estimates:

    * the group-aware residency index (the replicas' KV events, as delivered: up to
      ``event_delay_s`` old);
    * the router's own routing history: a request routed to replica R is assumed to
      make its prefix resident on R once scheduled, for ``pending_ttl_s`` seconds
      after it was routed (default 120 s, the TTL of Dynamo's approximate KV indexer,
      which predicts residency from its routing decisions when no events arrive;
      llm-d's approximate prefix-cache scorer does the same with an LRU of routed
      prefixes).  The history answers only while the events have not caught up: a
      replica's history for a block ends as soon as an event for that block on that
      replica is delivered (its ``BlockStored``: confirmed; a ``BlockRemoved``:
      contradicted; ``AllBlocksCleared`` ends all of the replica's history), through
      :meth:`~kvcore.routing.ResidencyIndex.add_listener`; from then on the index
      alone answers, with the replicas' own hit rule.  So a follow-up turn that arrives
      before the first turn's blocks are visible still goes where that prefix is
      being computed, and a prefix the events show lost is not believed.

    The history assumes a routed prefix resident block by block, which is the hit
    rule of full attention only: by default (``pending_ttl_s=None``) it is on where
    every KV-cache group is full attention or MLA without a window, and off on
    hybrids (a sliding window's or a Mamba state's hit depends on what the replica
    kept, which only its events tell).  ``router_predicted_hit_ratio`` counts the
    hit the router expected (index or history).  When neither estimate finds a hit on
    any replica, the request goes to the replica
    that rendezvous hashing of its first block hash picks (highest ``blake2b(hash,
    replica)``), skipping replicas over the bounded-load cap ``ceil(c * (outstanding +
    1) / N)`` with ``c = load_factor`` (1.25; Mirrokni, Thorup, Zadimoghaddam,
    "Consistent Hashing with Bounded Loads", SODA 2018): requests that share a first
    block land together even before any of them is cached, without piling onto one
    replica.  Deterministic (no Python ``hash``, which is salted per process).

    Options: ``pending_ttl_s`` (seconds >= 0; 0 turns the history off; None: 120 s
    on full-attention layouts, 0 on hybrids),
    ``max_pending_blocks`` (history size in block hashes, oldest dropped first),
    ``load_factor`` (>= 1), ``hash_tie_break`` (False: least-backlog as before),
    ``bounded_load`` (True: the bounded-load cap applies to every choice, a replica
    over it is taken only when all are; it stops a hot prefix piling its requests on
    one replica, at some hits' cost: docs/ROUTING.md measures both; off by default).
    Raises :class:`~kvcore.errors.ConfigError` naming a bad option."""

    name = "prefix-aware"
    uses_index = True
    uses_attention_index = False

    def __init__(self, *, pending_ttl_s: float | None = None,
                 max_pending_blocks: int = 1 << 18, load_factor: float = 1.25,
                 hash_tie_break: bool = True, bounded_load: bool = False) -> None:
        super().__init__()
        for nm, v, lo in (("pending_ttl_s", 0.0 if pending_ttl_s is None
                           else pending_ttl_s, 0.0),
                          ("load_factor", load_factor, 1.0)):
            check_number(v, nm, minimum=lo)
        from kvcore.units import plain_int

        max_pending_blocks = plain_int(max_pending_blocks)  # numpy integers too
        if type(max_pending_blocks) is not int or max_pending_blocks < 0:
            raise ConfigError(f"max_pending_blocks: expected an int >= 0, got "
                              f"{max_pending_blocks!r}", field="max_pending_blocks",
                              value=repr(max_pending_blocks))
        for nm, flag in (("hash_tie_break", hash_tie_break), ("bounded_load", bounded_load)):
            if not isinstance(flag, bool):
                raise ConfigError(f"{nm}: expected True or False, got {flag!r}",
                                  field=nm, value=repr(flag))
        self.bounded_load = bounded_load
        #: None until the first route on an auto default (the layout decides)
        self.pending_ttl_s: float | None = (None if pending_ttl_s is None
                                            else float(pending_ttl_s))
        self.max_pending_blocks = max_pending_blocks
        self.load_factor = float(load_factor)
        self.hash_tie_break = hash_tie_break
        #: block hash -> {replica: time the last request holding it was routed there}
        self._pending: OrderedDict[Any, dict[int, float]] = OrderedDict()
        self._listening = 0

    def _hits(self, request: SimRequest, view: FleetView) -> list[int]:
        return view.hits(request)

    def _index(self, view: FleetView) -> Any:
        """The residency index whose events confirm the history."""
        return view.index

    def _history_hits(self, request: SimRequest, view: FleetView, n: int) -> list[int]:
        """Per replica, the tokens of the prefix the routing history says it holds."""
        out = [0] * n
        if self.pending_ttl_s is None:
            self.pending_ttl_s = DEFAULT_PENDING_TTL_S if _full_attention_only(
                self._index(view)) else 0.0
        if not self.pending_ttl_s or not self._pending:
            return out
        req = request.request
        hashes = req.block_hashes
        bs = _hash_block_size(view)
        limit = len(req.all_token_ids) - 1
        oldest = view.now - self.pending_ttl_s
        pend = self._pending
        live = set(range(n))
        for i, h in enumerate(hashes):
            d = pend.get(h)
            if d is None:
                break
            live = {k for k in live if d.get(k, -math.inf) >= oldest}
            if not live:
                break
            for k in live:
                out[k] = min((i + 1) * bs, limit)
        return out

    def _on_event(self, replica: Any, op: int, group_id: Any, hashes: Any) -> None:
        """An event for ``replica`` arrived: its history for those blocks ends."""
        pend = self._pending
        if not pend:
            return
        if op == _CLEARED:
            for d in pend.values():
                d.pop(replica, None)
            return
        for h in hashes:
            e = pend.get(h)
            if e is not None:
                e.pop(replica, None)

    def _remember(self, request: SimRequest, k: int, view: FleetView) -> None:
        if not self.pending_ttl_s or not self.max_pending_blocks:
            return
        index = self._index(view)
        if index is not None and id(index) != self._listening:
            index.add_listener(self._on_event)
            self._listening = id(index)
        now = view.now
        pend = self._pending
        for h in request.request.block_hashes:
            d = pend.get(h)
            if d is None:
                pend[h] = {k: now}
            else:
                d[k] = now
                pend.move_to_end(h)
        while len(pend) > self.max_pending_blocks:
            pend.popitem(last=False)

    def _by_hash(self, request: SimRequest, view: FleetView) -> int | None:
        hashes = request.request.block_hashes
        if not hashes:
            return None
        h = hashes[0]
        key = bytes(h) if isinstance(h, (bytes, bytearray)) else repr(h).encode()
        n = view.num_replicas
        o = view.outstanding
        cap = math.ceil(self.load_factor * (sum(o) + 1) / n)
        order = sorted(range(n), key=lambda k: hashlib.blake2b(
            key + k.to_bytes(4, "big"), digest_size=8).digest(), reverse=True)
        for k in order:
            if o[k] + 1 <= cap:
                return k
        return None

    def route(self, request: SimRequest, view: FleetView) -> int:
        _check_route(request, view)
        n = view.num_replicas
        seen = self._hits(request, view)
        hist = self._history_hits(request, view, n)
        hits = [max(a, b) for a, b in zip(seen, hist)]
        k: int | None = None
        if self.hash_tie_break and not any(hits):
            k = self._by_hash(request, view)
            if k is not None:
                self._n += 1
                self._last[k] = self._n
        if k is None:
            o, b = view.outstanding, view.prefill_backlog
            p = request.prompt_len
            keys: list[tuple[int, ...]] = [(b[j] + p - hits[j], o[j]) for j in range(n)]
            if self.bounded_load:  # a hot prefix may not pile its requests on one replica
                cap = math.ceil(self.load_factor * (sum(o) + 1) / n)
                keys = [(0, *key) if o[j] + 1 <= cap else (1, *key)
                        for j, key in enumerate(keys)]
            k = self._pick(keys)
        view.predicted_hit = hits[k]
        self._remember(request, k, view)
        return k


#: seconds a routed prefix is assumed resident without events (Dynamo's approximate
#: KV indexer's default TTL)
DEFAULT_PENDING_TTL_S = 120.0


def _full_attention_only(index: Any) -> bool:
    """Every group of the index's layout is full attention or MLA, no window."""
    cfg = getattr(index, "kv_cache_config", None)
    groups = getattr(cfg, "kv_cache_groups", None)
    if not groups:
        return False
    return all(getattr(g.spec, "kind", "") in ("full_attention", "mla_attention")
               and not getattr(g.spec, "sliding_window", None) for g in groups)


_CLEARED = 3  # kvcore.routing.events.CLEARED (not imported: kvcore.routing is lazy here)


def _hash_block_size(view: FleetView) -> int:
    for ix in (view.index, getattr(view._att, "index", None)):
        if ix is not None:
            return int(ix.hash_block_size)
    return 1


class AttentionOnlyPrefixRouter(PrefixAwareRouter):
    """:class:`PrefixAwareRouter` with the hit of the first full-attention group alone
    (contiguous from the start), as routers that index one attention group compute
    it; on hybrids it believes in prefixes the other groups lost.  By default without
    the routing history and the prefix-hash placement (it models an index-only router;
    the options of :class:`PrefixAwareRouter` turn them on)."""

    name = "prefix-aware-attention-only"
    uses_index = False
    uses_attention_index = True

    def __init__(self, *, pending_ttl_s: float = 0.0, max_pending_blocks: int = 1 << 18,
                 load_factor: float = 1.25, hash_tie_break: bool = False,
                 bounded_load: bool = False) -> None:
        # the model of an index-only router of one attention group: no routing
        # history, least-backlog ties (the options turn them on)
        super().__init__(pending_ttl_s=pending_ttl_s,
                         max_pending_blocks=max_pending_blocks, load_factor=load_factor,
                         hash_tie_break=hash_tie_break, bounded_load=bounded_load)

    def _hits(self, request: SimRequest, view: FleetView) -> list[int]:
        return view.attention_hits(request)

    def _index(self, view: FleetView) -> Any:
        return getattr(view._att, "index", None)


_BUILTIN: dict[str, Any] = {r.name: r for r in (
    RoundRobinRouter, LeastLoadedRouter, PrefixAwareRouter, AttentionOnlyPrefixRouter)}


def _entry_points() -> dict[str, Any]:
    try:
        from importlib.metadata import entry_points

        return {ep.name: ep for ep in entry_points(group=ROUTERS_ENTRY_POINT_GROUP)}
    except Exception:  # pragma: no cover - broken metadata
        return {}


#: the request fields a router must leave as they are (the run serves and reports them)
_ROUTED_FIELDS = ("request_id", "prompt_len", "output_len", "arrival", "sent",
                  "trace", "request", "block_hashes", "all_token_ids")


def _routed_fields(r: SimRequest) -> tuple[Any, ...]:
    """The fields of :data:`_ROUTED_FIELDS`, as values cheap to compare (the block
    hashes and prompt tokens by length and identity)."""
    req = r.request
    hashes = getattr(req, "block_hashes", None)
    tokens = getattr(req, "all_token_ids", None)
    return (r.request_id, r.prompt_len, r.output_len, r.arrival, r.sent, id(r.trace),
            id(req), None if hashes is None else (id(hashes), len(hashes)),
            None if tokens is None else (id(tokens), len(tokens)))


def router_names() -> list[str]:
    """Built-in router names, then those registered under ``kvcore.routers``."""
    return list(_BUILTIN) + sorted(set(_entry_points()) - set(_BUILTIN))


def load_router(name: str, **options: Any) -> Any:
    """A fresh router by name (built in, or the ``kvcore.routers`` entry point called
    with ``options``).  Raises ConfigError (field ``router``) for an unknown name,
    listing the known ones, an entry point that fails to load, or options the router
    does not take (naming them)."""
    check_name(name, "router")
    cls = _BUILTIN.get(name)
    if cls is not None:
        try:
            return cls(**options)
        except TypeError as exc:
            import inspect

            takes = [p for p in inspect.signature(cls).parameters]
            raise ConfigError(f"router {name!r}: unknown option(s) "
                              f"{', '.join(sorted(options))}; it takes: "
                              f"{', '.join(takes) or 'none'} ({exc})", field="router",
                              value=name) from None
    ep = _entry_points().get(name)
    if ep is None:
        raise ConfigError(f"unknown router {name!r}; known: {', '.join(router_names())} "
                          f"(others register under the entry-point group "
                          f"{ROUTERS_ENTRY_POINT_GROUP!r})", field="router", value=name)
    try:
        return ep.load()(**options)
    except Exception as exc:
        raise ConfigError(f"router {name!r} ({ep.value}) failed to load: {exc}",
                          field="router", value=name) from exc


# ---- what the router sees ------------------------------------------------------------
class _AttentionIndex:
    """A residency index of one group (events of the others dropped, the group's
    renumbered 0): the single-attention-group view of today's routers."""

    def __init__(self, kv_cache_config: Any, **kw: Any) -> None:
        from kvcore.kv_cache_config import KVCacheConfig
        from kvcore.routing import ResidencyIndex
        from kvcore.routing.events import decode

        groups = kv_cache_config.kv_cache_groups
        gid = next((i for i, g in enumerate(groups)
                    if getattr(g.spec, "kind", "") in ("full_attention", "mla_attention")
                    and not getattr(g.spec, "sliding_window", None)), 0)
        g = groups[gid]
        one = KVCacheConfig(num_blocks=kv_cache_config.num_blocks, kv_cache_tensors=(),
                            kv_cache_groups=(type(g)(g.layer_names, g.spec),),
                            max_model_len=kv_cache_config.max_model_len)
        self.gid = gid
        self.index = ResidencyIndex(one, **kw)
        self._decode = decode

    def apply(self, replica: int, events: Sequence[Any], seq: int) -> None:
        from kvcore.runtime import BlockRemoved, BlockStored

        out: list[Any] = []
        for e in events:
            op, g, _, _, _ = self._decode(e)
            if g is None:
                out.append(e)
            elif g == self.gid:
                out.append(BlockStored(e.block_hashes, e.parent_block_hash, (),
                                       e.block_size, 0) if op == 1
                           else BlockRemoved(e.block_hashes, 0))
        self.index.apply(replica, out, seq)


class FleetView:
    """The router's view at routing time (module docstring).  ``predicted_hit``: a
    prefix-aware router may set the hit it expected on the replica it chose (for the
    ``router_predicted_hit_ratio`` figure)."""

    def __init__(self, n: int, index: Any, attention: Any) -> None:
        check_int(n, "num_replicas", maximum=MAX_REPLICAS)
        self.num_replicas = n
        self.now = 0.0
        self.outstanding = [0] * n
        self.prefill_backlog = [0] * n
        self.index = index
        self._att = attention
        self.predicted_hit: int | None = None

    def hits(self, request: SimRequest) -> list[int]:
        """Per replica, the tokens of ``request``'s prefix it serves (the group-aware
        residency index, from the events delivered so far)."""
        if self.index is None:
            raise ConfigError("this router asked for prefix hits but does not set "
                              "uses_index = True", field="router")
        req = request.request
        got = self.index.longest_prefix(req.block_hashes, len(req.all_token_ids),
                                        replicas=range(self.num_replicas))
        return [got[k] for k in range(self.num_replicas)]

    def attention_hits(self, request: SimRequest) -> list[int]:
        """Per replica, the hit by the first full-attention group alone."""
        if self._att is None:
            raise ConfigError("this router asked for attention-group hits but does not "
                              "set uses_attention_index = True", field="router")
        req = request.request
        got = self._att.index.longest_prefix(req.block_hashes, len(req.all_token_ids),
                                             replicas=range(self.num_replicas))
        return [got[k] for k in range(self.num_replicas)]


# ---- the fleet ---------------------------------------------------------------------------
@dataclass
class FleetResult:
    """A fleet run: every request (input order) with the replica it went to
    (``assignment``), one :class:`~kvcore.sim.engine.EngineResult` per replica
    (``replicas``, their ``requests`` those routed there), busy seconds per replica,
    the router's predicted hit tokens (prefix-aware routers) and the run's settings."""

    requests: list[SimRequest]
    replicas: list[EngineResult]
    assignment: list[int]
    busy_seconds: list[float]
    router: str
    event_delay_s: float
    predicted_hit_tokens: int = 0
    predicted_requests: int = 0
    wall_seconds: float = 0.0
    duration: float = 0.0
    stale_replicas: int = 0
    #: per replica, time-weighted mean and peak KV usage (fractions of usable blocks)
    mean_kv_usage: list[float] = field(default_factory=list)
    peak_kv_usage: list[float] = field(default_factory=list)
    extra: dict[str, Any] = field(default_factory=dict)


def run_fleet(kv_cache_config: Any, requests: Sequence[SimRequest],
              time_model: StepTimeModel, *, replicas: int, router: Any,
              max_num_seqs: int, max_num_batched_tokens: int,
              long_prefill_token_threshold: int = 0, max_model_len: int | None = None,
              max_concurrency: int | None = None, event_delay_s: float = 0.0,
              enable_caching: bool = True, reserve_full_prompt: bool = True,
              manager_kw: dict[str, Any] | None = None, progress: Any = None,
              keep_requests: bool = True, on_done: Any = None,
              request_overhead_s: float | None = None,
              api_server_s: float | None = None,
              engine_kw: dict[str, Any] | None = None,
              api_stream_s: float | None = None) -> FleetResult:
    """Simulate ``replicas`` engines of one plan behind ``router`` (a name or a router
    object) on ``requests`` (module docstring).

    Every replica is a fresh :class:`kvcore.runtime.KVCacheManager` of
    ``kv_cache_config`` with events on (``manager_kw`` passed through).
    ``event_delay_s``: seconds between a step's end and its KV events reaching the
    router (>= 0).  ``progress(n)``: requests finished or rejected so far.
    ``on_done(request, replica)``: called once per request when it finishes or is
    rejected (replica -1: rejected on arrival, before routing).
    ``request_overhead_s``: the API server's share of each request, as
    :func:`~kvcore.sim.engine.run_engine` takes it (None: the time model's); the
    router routes at the client's send, the replica sees the request that much later.
    ``api_server_s``: each replica's API server as a serial stage, s per request
    (:mod:`kvcore.sim.engine`; None: the time model's): after the router.
    ``api_stream_s``: each replica's way back as a serial stage, s per streamed chunk
    (:mod:`kvcore.sim.engine`; None: the time model's); the router's notices (first
    tokens, finishes) come at the engine's step end, the client's slots free when the
    reply is through.
    ``engine_kw``: more keyword arguments of every replica's
    :class:`~kvcore.sim.engine.Engine` (speculative decoding: ``num_speculative_tokens``,
    ``spec_acceptance``, ``num_lookahead_tokens``).

    ``keep_requests=False`` streams: ``requests`` may be any iterable (a generator) in
    arrival order, and no request is kept past ``on_done`` (``FleetResult.requests``,
    ``assignment`` and the replicas' ``requests`` stay empty), so memory is bounded by
    the requests in flight; fold the figures in ``on_done``.

    Raises ConfigError for a count out of range (``replicas`` in 1 ..
    :data:`MAX_REPLICAS`), a negative or non-finite delay, an
    unknown router, or (streaming) a request earlier than the one before it.
    """
    from kvcore.runtime import KVCacheManager
    from kvcore.units import as_int, plain_int

    # numpy integers as the equal plain int, once here (bool etc. refused below, named)
    replicas, max_num_seqs, max_num_batched_tokens, long_prefill_token_threshold, \
        max_model_len, max_concurrency = (
            plain_int(replicas), plain_int(max_num_seqs), plain_int(max_num_batched_tokens),
            plain_int(long_prefill_token_threshold), plain_int(max_model_len),
            plain_int(max_concurrency))
    if isinstance(replicas, bool) or not isinstance(replicas, int) or \
            not 1 <= replicas <= MAX_REPLICAS:
        raise ConfigError(f"replicas must be an integer >= 1 and <= {MAX_REPLICAS:,}, got "
                          f"{replicas!r}", field="replicas", value=replicas)
    from kvcore.units import as_real

    delay = as_real(event_delay_s)  # numpy reals too; bool refused
    if delay is None or not 0 <= delay < math.inf:
        raise ConfigError(f"event_delay_s must be a finite number of seconds >= 0, got "
                          f"{event_delay_s!r}", field="event_delay_s",
                          value=repr(event_delay_s))
    event_delay_s = delay
    for name, v, lo in (("max_num_seqs", max_num_seqs, 1),
                        ("max_num_batched_tokens", max_num_batched_tokens, 1),
                        ("long_prefill_token_threshold", long_prefill_token_threshold, 0)):
        if isinstance(v, bool) or not isinstance(v, int) or v < lo:
            raise ConfigError(f"{name} must be an integer >= {lo}, got {v!r}", field=name,
                              value=v)
    if max_concurrency is not None and (isinstance(max_concurrency, bool) or not
                                        isinstance(max_concurrency, int)
                                        or max_concurrency < 1):
        raise ConfigError(f"max_concurrency must be an integer >= 1, got "
                          f"{max_concurrency!r}", field="max_concurrency",
                          value=max_concurrency)
    over = resolve_request_overhead(time_model, request_overhead_s)
    api = resolve_request_overhead(time_model, api_server_s, "api_server_s")
    stream = resolve_request_overhead(time_model, api_stream_s, "api_stream_s")
    rt = load_router(router) if isinstance(router, str) else router
    if isinstance(rt, type):
        raise ConfigError(f"router {rt.__name__} is a class; pass an instance "
                          f"({rt.__name__}()) or a router name "
                          f"({', '.join(router_names())})", field="router",
                          value=rt.__name__)
    if not callable(getattr(rt, "route", None)):
        raise ConfigError(f"router must be a router name ({', '.join(router_names())}) or "
                          f"an object with route(request, view) -> replica index, got "
                          f"{type(rt).__name__}", field="router", value=type(rt).__name__)
    if requests is None or isinstance(requests, (str, bytes)) or \
            not hasattr(requests, "__iter__"):
        raise ConfigError(f"requests must be an iterable of SimRequest, got "
                          f"{type(requests).__name__}", field="requests",
                          value=type(requests).__name__)
    wall0 = time.perf_counter()
    # only a router that reads an index needs the replicas' KV events
    feed = bool(getattr(rt, "uses_index", False) or getattr(rt, "uses_attention_index",
                                                                False))
    mkw = dict(manager_kw or {})
    mkw.setdefault("max_num_batched_tokens", max_num_batched_tokens)
    ekw = dict(engine_kw or {})
    def build(_k: int) -> Engine:
        mg = KVCacheManager(kv_cache_config, max_model_len=max_model_len,
                            enable_caching=enable_caching, enable_events=feed, **mkw)
        return Engine(mg, time_model, max_num_seqs=max_num_seqs,
                      max_num_batched_tokens=max_num_batched_tokens,
                      long_prefill_token_threshold=long_prefill_token_threshold,
                      max_model_len=mg.max_model_len if mml is None else mml,
                      reserve_full_prompt=reserve_full_prompt, max_samples=MAX_SAMPLES,
                      request_overhead_s=over, api_server_s=api, api_stream_s=stream,
                      **ekw)

    # replicas are built when first routed to (a pool per replica costs MBs and
    # ~0.1 s: a fleet of 1,000 with 8 requests builds 8)
    mml: int | None = None
    first = build(0)
    mml = first.max_model_len
    reps: list[Engine | None] = [first] + [None] * (replicas - 1)
    managers = [first.manager]

    def rep(k: int) -> Engine:
        e = reps[k]
        if e is None:
            e = reps[k] = build(k)
        return e

    seqs = [0] * replicas
    index = att = None
    ikw: dict[str, Any] = dict(max_model_len=mml, enable_caching=enable_caching,
                               max_num_batched_tokens=max_num_batched_tokens,
                               hash=managers[0].hash,
                               use_eagle=bool(mkw.get("use_eagle", False)))
    if getattr(rt, "uses_index", False):
        from kvcore.routing import ResidencyIndex

        index = ResidencyIndex(kv_cache_config, replicas=range(replicas), **ikw)
    if getattr(rt, "uses_attention_index", False):
        att = _AttentionIndex(kv_cache_config, **ikw)
    view = FleetView(replicas, index, att)
    reqs: list[SimRequest] = []
    assignment: list[int] = []
    pos: dict[int, int] = {}
    if keep_requests:
        reqs = list(requests)
        bad = next((r for r in reqs if not isinstance(r, SimRequest)), None)
        if bad is not None:
            raise ConfigError(f"requests must be SimRequest objects (wrap a TraceRequest "
                              f"as SimRequest(trace)), got {type(bad).__name__}",
                              field="requests", value=type(bad).__name__)
        seen: dict[str, int] = {}
        for i, q in enumerate(reqs):
            check_fresh(q, i, seen)
        assignment = [-1] * len(reqs)
        pos = {id(r): i for i, r in enumerate(reqs)}
        order = sorted(range(len(reqs)), key=lambda k: reqs[k].arrival)
        source: Any = iter([reqs[k] for k in order])
    else:
        source = _checked(requests)
    # several replicas: the fleet's clock starts at the first arrival (T0): every
    # replica, slot and notice runs on times relative to it, so the schedule (the order
    # of steps across replicas, slots and arrivals) is the same at t = 0 and at t = 1e12
    # s (a float's step there is 1.2e-4 s); each request's absolute times are restored
    # when it is done (``_unshift``: floats as usual), the results' at the end
    shifted: dict[int, float] = {}
    head: SimRequest | None = next(source, None)
    # (one replica: run_engine's order exactly, its epochs already keep times exact)
    t_base = head.arrival if head is not None and replicas > 1 else 0.0

    def _intake(src: Any) -> Any:
        for r in src:
            shifted[id(r)] = r.arrival
            r.arrival = r.arrival - t_base
            yield r

    source = _intake(itertools.chain([head] if head is not None else [], source))

    def _unshift(r: SimRequest) -> None:
        a = shifted.pop(id(r), None)
        if a is None:
            return
        if r.sent == r.arrival and r.sref is None:
            r.sent = a  # sent at its arrival: exactly
        elif r.sent >= 0:
            r.sent = r.sent + t_base
        r.arrival = a
        if r.sref is not None:
            r.sref = (r.sref[0] + t_base, r.sref[1])
        if r.finish >= 0:
            r.finish = r.finish + t_base

    nxt: SimRequest | None = next(source, None)
    slots: Any = Slots(max_concurrency) if max_concurrency is not None else None
    # notices the router sees at their time: (time, tiebreak, kind, replica, payload)
    notices: list[tuple[float, int, int, int, Any]] = []
    tie = itertools.count()
    EVENTS, FIRST, DONE = 0, 1, 2
    n_done = 0
    pred_tokens = pred_reqs = 0

    def deliver(t: float) -> None:
        while notices and notices[0][0] <= t:
            _, _, kind, k, payload = heapq.heappop(notices)
            if kind == EVENTS:
                seq, evs = payload
                if index is not None:
                    index.apply(k, evs, seq)
                if att is not None:
                    att.apply(k, evs, seq)
            elif kind == FIRST:
                view.prefill_backlog[k] -= payload
            else:
                view.outstanding[k] -= 1

    # replicas with work, by the start of their next step (ties: the lower index, as
    # the one-replica equality with run_engine and a stable order need)
    ready: list[tuple[float, int]] = []
    inf = math.inf
    push, pop = heapq.heappush, heapq.heappop
    while True:
        t_step = ready[0][0] if ready else inf
        t_arr = inf
        if nxt is not None and (slots is None or slots):
            free_at = slots[0] if slots is not None else -inf
            t_arr = nxt.arrival if nxt.arrival > free_at else free_at
        if t_arr == inf and t_step == inf:
            break
        # the router and the replica see a request the API server's share after the
        # client sent it (tokenised: what a prefix-aware router hashes)
        t_route = t_arr + over
        if t_route <= t_step:
            r = nxt
            assert r is not None
            nxt = next(source, None)
            if nxt is not None and nxt.arrival < r.arrival:
                raise ConfigError(f"request {nxt.request_id!r} arrives at {nxt.arrival} s, "
                                  f"before {r.request_id!r} at {r.arrival} s; a streamed "
                                  "fleet run takes requests in arrival order",
                                  field="arrival", value=nxt.arrival)
            if slots is not None:
                slots.send(r)  # r.sent = t_arr, exactly
            else:
                r.sent = t_arr
            if r.prompt_len + r.output_len > mml:
                r.rejected = True
                n_done += 1
                if slots is not None:
                    slots.release_after(r, over)
                _unshift(r)
                if on_done is not None:
                    on_done(r, -1)
                if progress is not None:
                    progress(n_done)
                continue
            r.materialize(managers[0])
            deliver(t_route)
            view.now = t_route
            view.predicted_hit = None
            before = _routed_fields(r)
            try:
                k_raw = rt.route(r, view)
            except KVCoreError:
                raise
            except (Exception, SystemExit) as e:  # a user's router: named
                raise ConfigError(f"router {getattr(rt, 'name', type(rt).__name__)!r} "
                                  f"raised {type(e).__name__} routing request "
                                  f"{shorten(getattr(r, 'request_id', '?'))}: "
                                  f"{shorten(str(e))}", field="router",
                                  value=str(getattr(rt, 'name', type(rt).__name__))) from e
            if _routed_fields(r) != before:
                # a router reads the request; what it rewrote would be served and
                # reported (fresh tester T7): refused, naming the router and the field
                changed = [f for f, x, y in zip(_ROUTED_FIELDS, before, _routed_fields(r))
                           if x != y]
                raise ConfigError(f"router {getattr(rt, 'name', type(rt).__name__)!r} "
                                  f"changed request {shorten(r.request_id)}'s "
                                  f"{', '.join(changed)} while routing it; a router reads "
                                  f"the request and the fleet view, it does not change "
                                  f"them", field="router",
                                  value=str(getattr(rt, 'name', type(rt).__name__)))
            k = k_raw if type(k_raw) is int else as_int(k_raw)  # np.argmin's numpy ints
            if k is None or not 0 <= k < replicas:
                raise ConfigError(f"router {getattr(rt, 'name', rt)!r} chose replica "
                                  f"{k_raw!r}; a replica index is 0..{replicas - 1}",
                                  field="router", value=repr(k_raw))
            if view.predicted_hit is not None:
                pred_tokens += view.predicted_hit
                pred_reqs += 1
            hit_est = view.predicted_hit or 0
            r.route_est = r.prompt_len - hit_est
            view.outstanding[k] += 1
            view.prefill_backlog[k] += r.route_est
            rp = rep(k)
            if keep_requests:
                assignment[pos[id(r)]] = k
                rp.res.requests.append(r)
            idle = not rp.has_work
            rp.arrive(r)
            if idle:
                push(ready, (rp.now, k))
            continue
        t, k = pop(ready)
        rp = rep(k)
        sched, _, finished, rejected, _ = rp.step(slots)
        t = rp.now
        if rp.has_work:
            push(ready, (t, k))
        if feed:
            evs = rp.manager.take_events()
            if evs:
                push(notices, (t + event_delay_s, next(tie), EVENTS, k, (seqs[k], evs)))
                seqs[k] += 1
        for r, _ in sched:  # first tokens answer the router's backlog estimate
            if r.route_est >= 0 and r.num_out:
                push(notices, (t, next(tie), FIRST, k, r.route_est))
                r.route_est = -1
        if finished or rejected:
            for r in finished + rejected:
                if r.route_est >= 0:
                    push(notices, (t, next(tie), FIRST, k, r.route_est))
                    r.route_est = -1
                push(notices, (t, next(tie), DONE, k, None))
                _unshift(r)
                if on_done is not None:
                    on_done(r, k)
            n_done += len(finished) + len(rejected)
            if progress is not None:
                progress(n_done)
    results = [rp.res if rp is not None else EngineResult(requests=[]) for rp in reps]
    for r in reqs:  # any not done (cannot happen when the run completes)
        _unshift(r)
    if t_base:
        for res in results:
            if res.steps or res.duration:
                res.duration = res.duration + t_base
            res.step_end[:] = [t + t_base for t in res.step_end]
    stale = sum(1 for k in range(replicas) if index is not None and index.is_stale(k))
    return FleetResult(
        requests=reqs, replicas=results, assignment=assignment,
        busy_seconds=[rp.busy if rp is not None else 0.0 for rp in reps],
        router=getattr(rt, "name", str(rt)),
        event_delay_s=float(event_delay_s), predicted_hit_tokens=pred_tokens,
        predicted_requests=pred_reqs, wall_seconds=time.perf_counter() - wall0,
        duration=max((r.duration for r in results), default=0.0), stale_replicas=stale,
        mean_kv_usage=[rp.usage_area / rp.now if rp is not None and rp.now > 0 else 0.0
                       for rp in reps],
        peak_kv_usage=[rp.peak_usage if rp is not None else 0.0 for rp in reps])


def _checked(requests: Any) -> Any:
    seen: dict[str, int] = {}
    for i, r in enumerate(requests):
        if not isinstance(r, SimRequest):
            raise ConfigError(f"requests must be SimRequest objects (wrap a TraceRequest "
                              f"as SimRequest(trace)), got {type(r).__name__}",
                              field="requests", value=type(r).__name__)
        check_fresh(r, i, seen)
        yield r


# ---- figures -----------------------------------------------------------------------------
def _imbalance(xs: Sequence[float]) -> tuple[float, float]:
    """(max / mean, coefficient of variation) of per-replica figures (1.0, 0.0 when
    perfectly even; 0s for an idle fleet)."""
    if not xs:
        return 0.0, 0.0
    mu = sum(xs) / len(xs)
    if mu <= 0:
        return 0.0, 0.0
    sd = math.sqrt(sum((x - mu) ** 2 for x in xs) / len(xs))
    return max(xs) / mu, sd / mu


def fleet_metrics(res: FleetResult, *, goodput: dict[str, float] | None = None,
                  percentiles: Sequence[float] = (99.0,)) -> dict[str, Any]:
    """Fleet figures (the names of :func:`kvcore.sim.metrics.serving_metrics` over
    every request: TTFT / TPOT / ITL / E2EL percentiles, throughputs, the fleet's
    prefix-hit ratio) plus the load balance (``requests_per_replica``,
    ``request_imbalance`` = max / mean, ``request_cv``, ``busy_seconds_per_replica``,
    ``busy_imbalance``, ``busy_cv``), ``router_predicted_hit_ratio`` (the hits a
    prefix-aware router expected over the prompt tokens it routed; above the real
    ``prefix_hit_ratio`` when it trusted blocks that were gone) and ``per_replica`` (each
    replica's own figures).

    Raises ConfigError (field ``result``) when ``res`` is not a :class:`FleetResult`."""
    from kvcore.sim.metrics import serving_metrics

    if not all(hasattr(res, a) for a in ("requests", "replicas", "busy_seconds",
                                         "duration", "router")):
        raise ConfigError(f"fleet_metrics: res must be a FleetResult (from run_fleet), got "
                          f"{type(res).__name__}", field="result",
                          value=type(res).__name__)

    merged = EngineResult(requests=res.requests)
    merged.duration = res.duration
    merged.steps = sum(r.steps for r in res.replicas)
    merged.preemptions = sum(r.preemptions for r in res.replicas)
    merged.rejected = sum(1 for r in res.requests if r.rejected)
    merged.prompt_tokens = sum(r.prompt_tokens for r in res.replicas)
    merged.prefix_hit_tokens = sum(r.prefix_hit_tokens for r in res.replicas)
    out = serving_metrics(merged, goodput=goodput, percentiles=percentiles)
    per: list[dict[str, Any]] = []
    for k, r in enumerate(res.replicas):
        m = serving_metrics(r, percentiles=percentiles)
        per.append({"replica": k, "requests": len(r.requests),
                    "busy_seconds": res.busy_seconds[k],
                    **{key: m[key] for key in (
                        "completed", "prefix_hit_ratio", "mean_ttft_ms", "p99_ttft_ms",
                        "mean_tpot_ms", "p99_tpot_ms", "preemptions",
                        "steps") if key in m},
                    "mean_kv_usage": res.mean_kv_usage[k] if res.mean_kv_usage else
                    m["mean_kv_usage"],
                    "peak_kv_usage": res.peak_kv_usage[k] if res.peak_kv_usage else
                    m["peak_kv_usage"]})
    counts = [p["requests"] for p in per]
    ri, rcv = _imbalance(counts)
    bi, bcv = _imbalance(res.busy_seconds)
    out.pop("kv_usage", None)
    out["mean_kv_usage"] = sum(p["mean_kv_usage"] for p in per) / len(per) if per else 0.0
    out["peak_kv_usage"] = max((p["peak_kv_usage"] for p in per), default=0.0)
    routed = sum(r.prompt_len for r in res.requests if not r.rejected)
    out.update({
        "replicas": len(res.replicas),
        "router": res.router,
        "event_delay_s": res.event_delay_s,
        "requests_per_replica": counts,
        "request_imbalance": ri,
        "request_cv": rcv,
        "busy_seconds_per_replica": [round(b, 6) for b in res.busy_seconds],
        "busy_imbalance": bi,
        "busy_cv": bcv,
        "router_predicted_hit_ratio": (res.predicted_hit_tokens / routed
                                       if res.predicted_requests and routed else None),
        "stale_replicas": res.stale_replicas,
        "per_replica": per,
    })
    return out


def plot_fleet(res: FleetResult, path: str, title: str) -> None:
    """KV usage over time per replica, requests and busy time per replica, TTFT CDF
    (matplotlib; ConfigError when the file cannot be written)."""
    from kvcore.sim.command import _pyplot

    plt = _pyplot()
    fig, axes = plt.subplots(2, 2, figsize=(11, 7))
    ax = axes[0][0]
    for k, r in enumerate(res.replicas):
        ax.plot(r.step_end, [100 * u for u in r.step_usage], lw=0.6, label=f"r{k}")
    ax.set_title("KV-cache usage per replica (%)")
    ax.set_xlabel("time (s)")
    ax.set_ylim(0, 100)
    if len(res.replicas) <= 8:
        ax.legend(loc="upper right", fontsize=7)
    n = len(res.replicas)
    axes[0][1].bar(range(n), [len(r.requests) for r in res.replicas])
    axes[0][1].set_title("requests per replica")
    axes[1][0].bar(range(n), res.busy_seconds)
    axes[1][0].set_title("busy seconds per replica")
    for a in (axes[0][1], axes[1][0]):  # replicas are r0, r1, ...: whole ticks only
        a.set_xticks(range(n))
        a.set_xticklabels([f"r{k}" for k in range(n)], fontsize=7 if n <= 16 else 5)
        a.set_xlabel("replica")
    done = [r for r in res.requests if not r.rejected and r.finish >= 0]
    xs = sorted(1000 * r.ttft for r in done)
    ax = axes[1][1]
    if xs:
        ax.plot(xs, [(i + 1) / len(xs) for i in range(len(xs))])
    ax.set_title("TTFT CDF")
    ax.set_xlabel("TTFT (ms)")
    ax.set_ylim(0, 1)
    fig.suptitle(f"{title} ({res.router}, {n} replicas)")
    fig.tight_layout()
    from kvcore.sim.metrics import save_plot

    save_plot(fig, path)
