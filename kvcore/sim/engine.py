"""The clocked scheduler loop: vLLM 0.32's v1 ``Scheduler`` over kvcore's KVCacheManager.

One iteration is one engine step, as in ``Scheduler.schedule()`` then
``Scheduler.update_from_output()`` (``vllm/v1/core/sched/scheduler.py``, FCFS policy,
synchronous scheduling, no KV connector):

* **Budget.** ``token_budget = max_num_batched_tokens``; ``long_prefill_token_threshold``
  caps a prefill chunk while more than one request is eligible (running + waiting).
* **Running requests first**, in admission order: each gets ``num_tokens -
  num_computed_tokens`` new tokens (1 for a decode, the rest of the prompt for a chunked
  prefill), capped by the threshold, the remaining budget and ``max_model_len -
  num_computed_tokens - 1``; ``allocate_slots(request, n)``.  When that fails the last
  running request is preempted (recompute: its blocks are freed, its computed tokens
  reset to 0, it goes to the front of the waiting queue) and the allocation is retried,
  until it fits or the request preempted itself.  If it does not fit the running loop
  stops.
* **Waiting requests** only when nothing was preempted this step, FCFS, while the budget
  lasts and fewer than ``max_num_seqs`` run: prefix lookup (``get_computed_blocks``),
  ``n = num_tokens - hit`` capped by the threshold and the budget (chunked prefill),
  ``allocate_slots(request, n, hit, blocks)``; when it fails the waiting loop stops
  (head-of-line blocking).
* **Mamba hybrids in ``align`` mode**: every prefill chunk (running and waiting) goes
  through :func:`mamba_block_aligned_split`, vLLM's ``_mamba_block_aligned_split``; a
  chunk it refuses (0 tokens) skips a running request and stops the waiting loop.
* **Speculative decoding** (``num_speculative_tokens`` k > 0, a drafter without
  extra drafting slots, e.g. vLLM's ngram): after each step every running request past
  its prefill holds k drafts (``update_draft_token_ids``); a running request asks
  ``num_tokens + drafts - num_computed_tokens`` tokens under the same caps, and the
  drafts its chunk covers are verified after the step: ``spec_acceptance(request_id,
  k-th verification, drafts)`` of them are accepted, the rest rolled back from
  ``num_computed_tokens``, and accepted + 1 tokens appended with the per-token stop
  check; a new decode in the waiting loop is padded to 1 + k tokens as vLLM pads it.
* After the step every scheduled request's computed tokens advance by its ``n``; one
  whose computed tokens reach its token count samples one output token.  A request
  stops at its ``output_len`` output tokens or at ``max_model_len`` tokens
  (``check_stop``) and is freed.

Cases vLLM leaves undefined: a request whose prompt plus output exceeds
``max_model_len`` is **rejected** on arrival (vLLM's API server refuses it); a request
that cannot be admitted with nothing running, or that preempts itself while it runs
alone, can never finish (vLLM would retry it forever) and is rejected too.

**The clock.** ``now`` starts at 0 s.  The client sends a request at its ``arrival``
time (open loop); with ``max_concurrency`` at most that many are outstanding (``vllm
bench serve``'s semaphore: a request is sent at the later of its arrival and the time a
slot frees, i.e. the time the client has the whole reply of an earlier one, and its
latencies count from then).  **The API server's share** (``request_overhead_s``, by
default the time model's attribute of that name, 0 if it has none: HTTP, tokenisation,
the hop to the engine core, and the way back) is the time between the client sending a
request and the engine seeing it: a request joins the waiting queue at ``sent +
request_overhead_s``.  The way back (detokenisation, streaming) is folded into that
share: a constant per request shifts only where the sum falls, and the sum is what every
figure sees (TTFT, E2EL, ``duration``, the closed loop's gaps), so a token reaches the
client at the end of the step that produced it.  **The API server as a serial stage**
(``api_server_s``, by default the time model's attribute of that name, 0 if none): one
request at a time passes it, so the engine sees request ``i`` (in send order) at
``max(sent_i + request_overhead_s, seen_(i-1) + api_server_s)``: a burst of ``N``
reaches the engine over ``(N - 1) x api_server_s``, a request alone is not delayed
beyond ``request_overhead_s`` (its extra wait is ``SimRequest.api_wait``).  **The way
back as a serial stage** (``api_stream_s``, by default the time model's attribute, 0 if
none): the API server streams one chunk per request per step, one after another (vLLM's
OutputProcessor and SSE writes in one event loop; the benchmark client parses them in
one too), so a step ending at ``t`` in which ``k`` requests emit tokens reaches the
client at ``d = max(d_prev, t) + k x api_stream_s``: its tokens' times, the finishes
(and the closed loop's freed slots) and the duration are ``d`` (with 0, ``t``: the
tokens reach the client at the end of their step).  Each step advances ``now`` by
``time_model.step_time(describe_batch(kv_cache_config, scheduled))``.  With nothing
waiting or running the clock jumps to the next request the engine will see.

Times are exact whatever their size: the clock is an ``epoch`` (an arrival or send
time, a float taken as given) plus a small offset (``clock``), rebased on the request
the engine next sees whenever it idles, and a request's token times are kept relative
to its ``sent`` (offsets of the same clock).  So a request alone in the engine gets the
same latencies, to the bit, at t = 0 s and at t = 1e15 s (where a float's step is
0.125 s); absolute times (``finish``, ``step_end``, ``duration``) are floats as usual.
"""

from __future__ import annotations

import heapq
import math
import numbers
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from kvcore.errors import ConfigError, shorten
from kvcore.serving import check_scheduler_limits  # noqa: F401 - the neutral home
from kvcore.sim.replay import check_manager, check_trace_request
from kvcore.sim.timing import (
    ConstantTimeModel,
    RooflineTimeModel,
    ScheduledRequest,
    StepTimeModel,
    describe_batch,
)
from kvcore.units import check_int, check_items, check_name, check_number

# (mamba_block_aligned_split, mamba_checkpoint_position and mamba_checkpoint_valid are
# vLLM 0.32's private Scheduler helpers, mirrored for the loop and its tests: not API)
__all__ = ["SimRequest", "EngineResult", "Engine", "StepRecord", "run_engine",
           "check_scheduler_limits", "check_some_served", "resolve_request_overhead"]

_PURE_MODELS = (RooflineTimeModel, ConstantTimeModel)
_MEMO_MAX = 1 << 18

#: on_step(step, [(request_id, num_new_tokens)], [preempted ids], [finished ids])
StepHook = Callable[[int, list[tuple[str, int]], list[str], list[str]], None]
#: spec_acceptance(request_id, verification index of that request (0, 1, ...),
#: drafts verified) -> drafts accepted (0 to drafts verified)
SpecAcceptance = Callable[[str, int, int], int]


class SimRequest:
    """One request in a clocked simulation and what happened to it (times in seconds).

    trace: the :class:`~kvcore.sim.traces.TraceRequest` (prompt, output length).
    arrival: when the client has the request ready, s.
    sent: when the client sent it (``arrival``, or later under ``max_concurrency``), s;
    the engine sees it ``request_overhead_s`` later.
    token_times: when each output token reached the client (the end of the step that
    produced it), **seconds after** ``sent`` (so ``token_times[0]`` is the TTFT and
    ``token_times[-1]`` the E2EL).
    bundled: indices ``i`` of the tokens that reached the client in the same streamed
    chunk as token ``i - 1`` (speculative decoding: a step's accepted + 1 tokens are one
    delta); empty without speculative decoding.
    finish: time of the last output token, s (absolute; -1 while unfinished).
    num_cached_tokens: prefix-cache hit of its first admission, tokens (-1: never).
    """

    __slots__ = ("trace", "request_id", "request", "outputs", "prompt_len", "output_len",
                 "arrival", "sent", "token_times", "finish", "num_cached_tokens",
                 "preemptions", "rejected", "num_out", "route_est", "t0", "sref",
                 "junction", "spec", "sched_spec", "n_verify", "prefill_chunk", "bundled",
                 "api_wait")

    def __init__(self, trace: Any, arrival: float | None = None) -> None:
        check_trace_request(trace)
        if arrival is not None:
            arrival = check_number(arrival, "arrival", minimum=0.0)
        self.trace = trace
        self.request_id: str = trace.request_id
        self.request: Any = None
        self.outputs: list[int] | None = None
        self.prompt_len: int = trace.prompt_len
        self.output_len: int = max(1, trace.output_len)
        self.arrival: float = trace.arrival_ms / 1000.0 if arrival is None else arrival
        self.sent: float = -1.0
        self.token_times: list[float] = []
        self.finish: float = -1.0
        self.num_cached_tokens = -1
        self.preemptions = 0
        self.rejected = False
        self.num_out = 0
        #: a fleet router's estimate of its prefill tokens, until its first token (-1)
        self.route_est = -1
        #: ``sent`` as an offset of its engine's clock (set by Engine.add_request)
        self.t0 = 0.0
        #: ``sent`` exactly, as (epoch, offset) of the clock that freed its slot (None:
        #: ``(sent, 0)``, an arrival)
        self.sref: tuple[float, float] | None = None
        #: vLLM's ``Request.shared_prefix_boundary`` from its last prefix lookup, tokens
        self.junction = 0
        #: speculative decoding: draft tokens held (``len(spec_token_ids)``), drafts
        #: scheduled this step, verifications so far, and vLLM's ``is_prefill_chunk``
        self.spec = 0
        self.sched_spec = 0
        self.n_verify = 0
        self.prefill_chunk = False
        self.bundled: list[int] = []
        #: seconds it waited for the API server's serial stage beyond
        #: ``request_overhead_s`` (module docstring; 0 without ``api_server_s``)
        self.api_wait = 0.0

    def materialize(self, manager: Any) -> None:
        t = self.trace
        self.request = manager.make_request(t.request_id, t.prompt_token_ids(),
                                            max_tokens=self.output_len)
        outs = t.output_token_ids()
        if len(outs) < self.output_len:
            outs += [1] * (self.output_len - len(outs))
        self.outputs = outs

    @property
    def ttft(self) -> float:
        """Time to first token from ``sent``, s (vLLM's ``ttft``)."""
        return self.token_times[0]

    @property
    def latency(self) -> float:
        """End-to-end latency from ``sent``, s (vLLM's ``latency``)."""
        return self.token_times[-1]

    @property
    def itl(self) -> list[float]:
        """Gaps between consecutive streamed chunks, s (vLLM's ``itl``): one entry per
        chunk after the first, as ``vllm bench serve`` appends them
        (``vllm/benchmarks/lib/endpoint_request_func.py``, one ``output.itl.append``
        per SSE chunk; ``serve.py`` ``calculate_metrics``: "multiple output tokens may
        be bundled together").  vLLM streams one delta per engine step (stream_interval
        1), so without speculative decoding that is one gap per token; with it the
        accepted + 1 tokens of a step are one chunk (``bundled``)."""
        tt = self.token_times
        if not self.bundled:
            return [b - a for a, b in zip(tt, tt[1:])]
        same = set(self.bundled)
        return [tt[i] - tt[i - 1] for i in range(1, len(tt)) if i not in same]


def check_fresh(r: SimRequest, i: int, seen: dict[str, int]) -> None:
    """``requests[i]`` has not run yet and its id is not one of ``seen`` (id -> index,
    updated).  A SimRequest carries its run's state (sent, token times, its runtime
    request), so one reused in a second run made the engine stop with a bare
    RuntimeError, and one id twice a misleading cache-hit error (fresh tester, T7).
    Raises ConfigError naming the index and the id."""
    rid = r.request_id
    if r.sent >= 0 or r.request is not None or r.token_times or r.finish >= 0:
        raise ConfigError(f"requests[{i}]: SimRequest {rid!r} has already run (a "
                          "SimRequest holds its run's state); build new ones for each "
                          "run: [SimRequest(t) for t in traces]", field="requests",
                          value=i)
    j = seen.setdefault(rid, i)
    if j != i:
        raise ConfigError(f"requests[{i}]: request id {rid!r} is also requests[{j}]; "
                          "request ids must be unique in a run (vllm bench serve numbers "
                          "its requests)", field="requests", value=i)


def _check_sim_request(r: Any) -> None:
    if not isinstance(r, SimRequest):
        raise ConfigError(f"r must be a SimRequest (wrap a TraceRequest as "
                          f"SimRequest(trace)), got {type(r).__name__} {shorten(r)}",
                          field="r", value=shorten(r))


@dataclass
class EngineResult:
    """What a clocked run produced.

    requests: every :class:`SimRequest`, in input order.  ``duration``: time of the last
    finish (or the last step), s.  Per step (parallel lists): ``step_end`` (s),
    ``step_usage`` (fraction of usable blocks held after the step), ``step_running``,
    ``step_waiting`` (requests after the step), ``step_tokens`` (scheduled tokens).
    """

    requests: list[SimRequest]
    steps: int = 0
    duration: float = 0.0
    preemptions: int = 0
    rejected: int = 0
    prompt_tokens: int = 0
    prefix_hit_tokens: int = 0
    wall_seconds: float = 0.0
    step_end: list[float] = field(default_factory=list)
    step_usage: list[float] = field(default_factory=list)
    step_running: list[int] = field(default_factory=list)
    step_waiting: list[int] = field(default_factory=list)
    step_tokens: list[int] = field(default_factory=list)

    @property
    def prefix_hit_ratio(self) -> float:
        """Hit tokens over prompt tokens of first admissions (a fraction)."""
        return self.prefix_hit_tokens / self.prompt_tokens if self.prompt_tokens else 0.0


def _check_int(name: str, value: Any, low: int) -> int:
    from kvcore.units import as_int

    number = as_int(value)  # numpy integers too, as a plain int
    if number is None or number < low:
        raise ConfigError(f"{name} must be an integer >= {low}, got {value!r}",
                          field=name, value=repr(value))
    return number


def resolve_request_overhead(time_model: Any, request_overhead_s: float | None = None,
                             name: str = "request_overhead_s") -> float:
    """The API server's share of a request, s (module docstring): ``request_overhead_s``
    when given, else the time model's attribute ``name`` (0 without one; ``name``
    ``api_server_s``: the serial stage's time per request).

    Raises ConfigError (field ``name``) unless it is a finite number >= 0."""
    check_name(name, "name")
    v = getattr(time_model, name, 0.0) if request_overhead_s is None \
        else request_overhead_s
    if v is None:
        v = 0.0
    return check_number(v, name, minimum=0.0)


def check_some_served(requests: Sequence[Any], *, max_model_len: int,
                      num_blocks: int | None = None, block_size: int | None = None
                      ) -> None:
    """Refuse a run in which requests were given and every one was rejected: its
    figures (all 0) answer nothing.  The message names the limit that rejected them:
    ``max_model_len`` when every request's prompt plus output exceeds it (vLLM's API
    server refuses those), else ``num_blocks`` (the KV cache cannot hold one request).

    requests: the run's :class:`SimRequest` objects (``rejected`` set by the run; the
    ``max_model_len`` case is found before a run too, from the lengths alone).
    Any object with int ``prompt_len`` / ``output_len`` and bool ``rejected`` serves.
    Raises ConfigError (field ``max_model_len`` or ``num_blocks``; ``requests[i]`` for
    an item without those attributes)."""
    reqs = check_items(requests, object, "requests")
    for i, r in enumerate(reqs):
        for name, kind in (("prompt_len", int), ("output_len", int), ("rejected", bool)):
            v = getattr(r, name, None)
            if not isinstance(v, kind) or (kind is int and isinstance(v, bool)):
                raise ConfigError(f"requests[{i}].{name} must be {kind.__name__} (a "
                                  f"SimRequest's), got {v!r}",
                                  field=f"requests[{i}].{name}", value=repr(v))
    check_int(max_model_len, "max_model_len", maximum=1 << 62)
    if not reqs:
        return
    if all(r.prompt_len + r.output_len > max_model_len for r in reqs):
        pass  # rejected on arrival whatever the run does: say so before running it
    elif not all(r.rejected for r in reqs):
        return
    shortest = min(r.prompt_len + r.output_len for r in reqs)
    if shortest > max_model_len:
        raise ConfigError(f"no request can be served: max_model_len is {max_model_len} "
                          f"tokens and the shortest request needs {shortest} (prompt + "
                          f"output); raise --max-model-len to >= {shortest} or shorten "
                          f"the prompts", field="max_model_len", value=max_model_len)
    cap = f" ({num_blocks} blocks of {block_size} tokens)" if num_blocks and block_size \
        else (f" ({num_blocks} blocks)" if num_blocks else "")
    raise ConfigError(f"no request can be served: the KV cache{cap} cannot hold one "
                      f"request (the shortest needs {shortest} tokens); raise num_blocks "
                      f"(--num-blocks / the KV budget) or shorten the prompts",
                      field="num_blocks", value=num_blocks)


class Slots:
    """``max_concurrency`` slots as a min-heap of the times they free (a slot freed by
    a rejection's error reply may free after a later finish; a fleet's replicas
    finish out of time order): ``popleft()`` takes the earliest as ``(t, epoch,
    offset)``, ``append(t, epoch, offset)`` frees one at ``t`` (``epoch + offset`` of
    the clock that freed it, kept exactly: module docstring), ``slots[0]`` is the
    earliest ``t``."""

    def __init__(self, n: int) -> None:
        inf = float("-inf")
        self._h: list[tuple[float, float, float]] = [(inf, inf, 0.0)] * n

    def __bool__(self) -> bool:
        return bool(self._h)

    def __len__(self) -> int:
        return len(self._h)

    def __getitem__(self, i: int) -> float:
        if i != 0:
            raise IndexError("Slots: only slots[0], the earliest, is readable")
        return self._h[0][0]

    def append(self, t: float, epoch: float | None = None, offset: float = 0.0) -> None:
        heapq.heappush(self._h, (t, t, 0.0) if epoch is None else (t, epoch, offset))

    def popleft(self) -> tuple[float, float, float]:
        return heapq.heappop(self._h)

    def send(self, r: SimRequest) -> None:
        """Take the earliest slot for ``r``: it is sent at the later of its arrival and
        the time the slot frees (``r.sent``, with ``r.sref`` exact)."""
        t, epoch, offset = heapq.heappop(self._h)
        if r.arrival > t:
            r.sent, r.sref = r.arrival, None
        else:
            r.sent, r.sref = t, (epoch, offset)

    def release_after(self, r: SimRequest, delay: float) -> None:
        """Free a slot ``delay`` after ``r``'s send (a rejection's error reply)."""
        sr = r.sref
        if sr is None:
            self.append(r.sent + delay, r.sent, delay)
        else:
            self.append(r.sent + delay, sr[0], sr[1] + delay)


class StepRecord(NamedTuple):
    """What one :meth:`Engine.step` did: ``scheduled`` ``(request, num_new_tokens)`` in
    schedule order, the ``preempted``, ``finished`` and ``rejected`` requests (a
    rejection here: a request that can never be admitted), ``dt`` the step's time, s."""

    scheduled: list[tuple[SimRequest, int]]
    preempted: list[SimRequest]
    finished: list[SimRequest]
    rejected: list[SimRequest]
    dt: float


class Engine:
    """One replica's scheduler (the loop of the module docstring), one step at a time.

    The caller sends requests (:meth:`send`, with ``sent`` set: the engine sees each
    ``request_overhead_s`` later; :meth:`add_request` hands one to the waiting queue at
    once) and calls :meth:`step` while :attr:`has_work`; ``now`` is the end of the last
    step, s (the caller may move it forward to an arrival while the engine is idle: a
    rebase of the clock, module docstring).  :func:`run_engine` and
    :func:`kvcore.sim.fleet.run_fleet` are loops over it.

    manager: a fresh :class:`kvcore.runtime.KVCacheManager`; time_model: any object with
    ``step_time(batch) -> seconds``; the counts as :func:`run_engine` takes them.
    max_samples: keep the per-step series (``EngineResult.step_*``) to at most that many
    points, halving them (every other point) when reached (None: every step); the
    exact time-weighted usage is then :attr:`usage_area` / :attr:`now` and its peak
    :attr:`peak_usage`.  request_overhead_s: the API server's share of every request,
    s (module docstring; None: the time model's ``request_overhead_s``, 0 without one);
    api_server_s: the API server's serial stage, s per request (None: the time
    model's ``api_server_s``, 0 without one).
    Raises ConfigError for a count out of range or an overhead that is not a finite
    number >= 0 (naming it).
    """

    def __init__(self, manager: Any, time_model: StepTimeModel, *, max_num_seqs: int,
                 max_num_batched_tokens: int, long_prefill_token_threshold: int = 0,
                 max_model_len: int | None = None, num_lookahead_tokens: int = 0,
                 kv_cache_config: Any = None, record_steps: bool = True,
                 keep_requests: bool = False, reserve_full_prompt: bool = True,
                 result: EngineResult | None = None, max_samples: int | None = None,
                 num_speculative_tokens: int = 0,
                 spec_acceptance: SpecAcceptance | None = None,
                 request_overhead_s: float | None = None,
                 api_server_s: float | None = None,
                 enable_chunked_prefill: bool = True,
                 api_stream_s: float | None = None) -> None:
        check_manager(manager)
        _check_int("max_num_seqs", max_num_seqs, 1)
        if not isinstance(enable_chunked_prefill, bool):
            raise ConfigError(f"enable_chunked_prefill must be True or False, got "
                              f"{enable_chunked_prefill!r}", field="enable_chunked_prefill",
                              value=repr(enable_chunked_prefill))
        _check_int("num_speculative_tokens", num_speculative_tokens, 0)
        if num_speculative_tokens and not callable(spec_acceptance):
            raise ConfigError("num_speculative_tokens > 0 needs spec_acceptance(request_id"
                              ", verification, num_drafts) -> accepted drafts, got "
                              f"{spec_acceptance!r}", field="spec_acceptance",
                              value=repr(spec_acceptance))
        _check_int("max_num_batched_tokens", max_num_batched_tokens, 1)
        _check_int("long_prefill_token_threshold", long_prefill_token_threshold, 0)
        _check_int("num_lookahead_tokens", num_lookahead_tokens, 0)
        if max_model_len is not None:
            _check_int("max_model_len", max_model_len, 1)
        check_scheduler_limits(max_num_seqs, max_num_batched_tokens,
                               manager.max_model_len if max_model_len is None
                               else max_model_len, long_prefill_token_threshold)
        mml_ = manager.max_model_len if max_model_len is None else max_model_len
        if not enable_chunked_prefill and max_num_batched_tokens < mml_:
            # vLLM 0.32 SchedulerConfig.verify_max_model_len
            raise ConfigError(f"max_num_batched_tokens ({max_num_batched_tokens}) is smaller "
                              f"than max_model_len ({mml_}) with chunked prefill disabled; "
                              "vLLM refuses it: raise max_num_batched_tokens to at least "
                              "max_model_len", field="max_num_batched_tokens",
                              value=max_num_batched_tokens)
        #: vLLM's ``--enable-chunked-prefill``: off, a waiting prompt that does not fit
        #: the step's budget whole stops the admissions (``Scheduler.schedule``)
        self.chunked = enable_chunked_prefill
        if not callable(getattr(time_model, "step_time", None)):
            raise ConfigError(f"time_model must have a step_time(batch) -> seconds method, "
                              f"got {type(time_model).__name__}", field="time_model",
                              value=type(time_model).__name__)
        self.manager = manager
        from kvcore.sim.timing import guarded_step_time

        # a user's model that raises is named (ConfigError field time_model)
        self.step_time = guarded_step_time(time_model)
        #: seconds between a request's send and the engine seeing it (module docstring)
        self.request_overhead_s = resolve_request_overhead(time_model, request_overhead_s)
        #: the API server's serial time per request, s (module docstring)
        self.api_server_s = resolve_request_overhead(time_model, api_server_s,
                                                     "api_server_s")
        #: the earliest time the serial stage hands over the next request, as (epoch,
        #: offset) s (None: never used)
        self._api_next: tuple[float, float] | None = None
        #: the way back's serial time per streamed chunk, s (module docstring)
        self.api_stream_s = resolve_request_overhead(time_model, api_stream_s,
                                                     "api_stream_s")
        #: when the way back has handed the last step's chunks over, as (epoch, offset)
        #: s (None: never used)
        self._out_next: tuple[float, float] | None = None
        self.kvcfg = manager.kv_cache_config if kv_cache_config is None \
            else kv_cache_config
        self.max_num_seqs = max_num_seqs
        self.max_num_batched_tokens = max_num_batched_tokens
        #: batches in flight per step (pipeline parallelism: vLLM keeps one batch per
        #: stage in flight, max_concurrent_batches = pp, vllm/v1/engine/core.py
        #: step_with_batch_queue); a step of the time model is one round of them, so the
        #: round's token budget is that many batches' (each request at most one batch's)
        bif = getattr(time_model, "batches_in_flight", 1)
        from kvcore.units import as_int

        bif_int = as_int(bif)  # numpy integers too
        self.batches_in_flight = bif_int if bif_int is not None and bif_int >= 1 else 1
        self.long_prefill_token_threshold = long_prefill_token_threshold
        self.max_model_len: int = manager.max_model_len if max_model_len is None \
            else max_model_len
        self.lookahead = num_lookahead_tokens
        self.num_spec = num_speculative_tokens
        self.spec_acceptance = spec_acceptance
        # chunk caps: vLLM 0.32's Scheduler cuts prefill chunks only for Mamba hybrids
        # in ``align`` mode, with its own rule (``_split``: ``_mamba_block_aligned_split``,
        # which takes the place of kvcore's caps there); otherwise kvcore's per-kind
        # caps (``max_prefill_chunk_tokens``: Mamba ``all`` mode, which vLLM 0.32 does
        # not have)
        self.capped = bool(getattr(manager, "_chunk_cappers", True))
        self._split, self._junction_from = _mamba_split_plan(
            manager, max_num_batched_tokens, long_prefill_token_threshold)
        self.fq = manager.block_pool.free_queue
        self.usable = max(1, manager.block_pool.num_usable_blocks)
        self.gate = _admission_plan(manager, max_num_batched_tokens, self.max_model_len) \
            if reserve_full_prompt else None
        self.record_steps = record_steps
        #: per-step series kept to at most this many points (halved when reached)
        self.max_samples = max_samples
        self._stride = 1
        self._k = 0
        #: time integral of the KV usage (fraction x s) and its peak: exact, whatever
        #: the thinning of the series
        self.usage_area = 0.0
        self.peak_usage = 0.0
        self.keep_requests = keep_requests
        self.res = EngineResult(requests=[]) if result is None else result
        self.waiting: deque[SimRequest] = deque()
        self.running: list[SimRequest] = []
        #: sent, not yet seen by the engine (in send order)
        self.transit: deque[SimRequest] = deque()
        #: the clock: ``now = epoch + clock`` (module docstring)
        self.epoch = 0.0
        self.clock = 0.0
        self.busy = 0.0
        self._decode_srs: dict[int, ScheduledRequest] = {}
        # step times of small decode-only batches, by their context lengths, for the
        # built-in time models (pure functions of the batch: the cache is exact)
        self._memo: dict[Any, float] | None = {} if type(time_model) in _PURE_MODELS \
            else None

    @property
    def now(self) -> float:
        """The end of the last step (or the time the clock was moved to), s."""
        return self.epoch + self.clock

    @now.setter
    def now(self, t: float) -> None:
        """Move the clock to ``t`` (s, absolute).  Raises ConfigError (field ``now``)
        unless ``t`` is a finite number >= the current time: a clock only moves forward
        (token times, TTFTs and latencies are offsets of it)."""
        cur = self.epoch + self.clock
        if isinstance(t, bool) or not isinstance(t, (int, float)) or not math.isfinite(t) \
                or t < cur:
            raise ConfigError(f"now {t!r}: must be a finite time >= the current one "
                              f"({cur!r} s)", field="now", value=repr(t))
        if self.waiting or self.running:  # requests hold offsets of this epoch: keep it
            self.clock = t - self.epoch
        else:  # idle: a rebase (exact times from here, module docstring)
            self.epoch = t
            self.clock = 0.0

    @property
    def has_work(self) -> bool:
        """Whether a request waits, runs or is on its way (a step would do something)."""
        return bool(self.waiting or self.running or self.transit)

    @property
    def next_event_time(self) -> float:
        """When this engine's next step starts, s (``inf`` with nothing to do): now,
        or, idle, when it sees the next request on its way."""
        if self.waiting or self.running:
            return self.now
        if self.transit:
            r = self.transit[0]
            return max(self.now, r.sent + self.request_overhead_s + r.api_wait)
        return float("inf")

    def _api_stage(self, r: SimRequest) -> float:
        """Pass ``r`` through the API server's serial stage (module docstring): sets and
        returns ``r.api_wait``, its wait beyond ``request_overhead_s``, s."""
        api = self.api_server_s
        if not api:
            return 0.0
        # times as (epoch, offset), as the clock keeps them: exact at any size
        sr = r.sref
        e, o = (r.sent, 0.0) if sr is None else sr
        o += self.request_overhead_s
        nxt = self._api_next
        wait = 0.0
        if nxt is not None:
            wait = (nxt[0] - e) + (nxt[1] - o)
            if wait < 0.0:
                wait = 0.0
        r.api_wait = wait
        self._api_next = (e, o + wait + api)
        return wait

    def _to_transit(self, r: SimRequest) -> None:
        tr = self.transit
        if tr and r.sent < tr[-1].sent:  # a slot freed early (a rejection's reply)
            i = len(tr)
            while i and tr[i - 1].sent > r.sent:
                i -= 1
            tr.insert(i, r)
        else:
            tr.append(r)

    def send(self, r: SimRequest) -> None:
        """The client sent ``r`` at ``r.sent`` (>= the sends before it): the engine
        sees it ``request_overhead_s`` (plus its wait for the API server's serial
        stage) later, at the first step from then."""
        _check_sim_request(r)
        wait = self._api_stage(r)
        if self.request_overhead_s or wait or self.transit:
            # behind requests still on their way, in order (they may have passed the
            # serial stage already, and are delivered at the next step's start)
            self._to_transit(r)
        else:
            self._arrive(r)

    def arrive(self, r: SimRequest) -> None:
        """``r`` reaches this engine's API server at ``r.sent + request_overhead_s``,
        which the caller has reached (a fleet routes then); the engine sees it now,
        or, with the serial stage busy (``api_server_s``), after its wait."""
        _check_sim_request(r)
        if self._api_stage(r) or self.transit:
            self._to_transit(r)
        else:
            self._arrive(r)

    def _arrive(self, r: SimRequest) -> None:
        """The engine sees ``r`` now: at ``r.sent + request_overhead_s + r.api_wait``,
        which the caller has reached.  Idle and behind that time, the clock is first
        rebased on ``r.sent`` (exact times, module docstring); busy, ``r`` joins the
        waiting queue for the next step."""
        over = self.request_overhead_s + r.api_wait
        if not (self.waiting or self.running) and self._sent_off(r) + over > self.clock:
            sr = r.sref
            if sr is None:
                self.epoch, self.clock = r.sent, over
            else:
                self.epoch, self.clock = sr[0], sr[1] + over
        self.add_request(r)

    def _sent_off(self, r: SimRequest) -> float:
        """``r.sent`` as an offset of this engine's clock (exact on its own epoch)."""
        sr = r.sref
        if sr is None:
            return r.sent - self.epoch
        return (sr[0] - self.epoch) + sr[1]

    def _deliver(self) -> None:
        """Move the requests the engine has seen by now from transit to waiting (the
        first one rebasing an idle clock: :meth:`arrive`)."""
        tr = self.transit
        over = self.request_overhead_s
        if not (self.waiting or self.running):
            self._arrive(tr.popleft())
        clock = self.clock
        off = self._sent_off
        while tr and off(tr[0]) + over + tr[0].api_wait <= clock:
            self.add_request(tr.popleft())

    def add_request(self, r: SimRequest) -> None:
        """Queue ``r`` (already released: ``r.sent`` set) behind the waiting requests
        now, materializing its runtime Request on this engine's manager if needed."""
        _check_sim_request(r)
        if r.request is None:
            r.materialize(self.manager)
        r.t0 = self._sent_off(r)
        self.waiting.append(r)

    def result(self) -> EngineResult:
        """The :class:`EngineResult` accumulated so far (the same object each call)."""
        return self.res

    def step(self, slots: Any = None) -> StepRecord:
        """One engine step at :attr:`now` (Scheduler.schedule, the step time,
        update_from_output); ``slots``: the ``max_concurrency`` slots a finished or
        rejected request frees (its time appended), or None.

        Raises ConfigError for a step time that is not a finite number >= 0.
        """
        if self.transit:
            self._deliver()
        manager = self.manager
        res = self.res
        alloc = manager.allocate_slots
        free = manager.free
        chunk_cap = manager.max_prefill_chunk_tokens
        capped = self.capped
        num_spec = self.num_spec
        prefill_scheduled = False
        split = self._split
        junction_from = self._junction_from
        mml = self.max_model_len
        lookahead = self.lookahead
        running = self.running
        waiting = self.waiting
        keep_requests = self.keep_requests
        per_req = self.max_num_batched_tokens
        chunked = self.chunked
        mnbt = per_req * self.batches_in_flight  # the round's budget (one batch: per_req)
        res.steps += 1
        step = res.steps
        token_budget = mnbt
        lpt = self.long_prefill_token_threshold if len(running) + len(waiting) > 1 else 0
        sched: list[tuple[SimRequest, int]] = []
        batch_reqs: list[ScheduledRequest] = []
        preempted: list[SimRequest] = []
        rejected: list[SimRequest] = []
        lone: SimRequest | None = None
        SR = ScheduledRequest
        decode_srs = self._decode_srs
        n_prefill = 0
        i = 0
        while i < len(running) and token_budget > 0:
            r = running[i]
            req = r.request
            nc = req.num_computed_tokens
            num_tokens = len(req.all_token_ids)
            n = num_tokens - nc
            if num_spec:
                n += r.spec  # vLLM's num_tokens_with_spec
            if n == 1 and nc >= r.prompt_len:
                # a decode: one token (never capped: num_tokens < max_model_len while
                # it runs, and the budget is > 0)
                prefill = False
            else:
                if 0 < lpt < n:
                    n = lpt
                if n > token_budget:
                    n = token_budget
                if n > per_req:
                    n = per_req
                if n > mml - nc - 1:
                    n = mml - nc - 1
                # (a decode with drafts is no prefill)
                prefill = nc + 1 < num_tokens or nc < r.prompt_len
                if split is not None:
                    n = split(nc, n, r.prompt_len, num_tokens, r.junction)
                elif capped and n > 0:
                    n = chunk_cap(req, n)
                if n <= 0:
                    i += 1
                    continue
            while True:
                out = alloc(req, n) if not lookahead else alloc(
                    req, n, num_lookahead_tokens=lookahead)
                if out is not None:
                    break
                victim = running.pop()
                free(victim.request)
                victim.request.num_computed_tokens = 0
                victim.preemptions += 1
                victim.spec = 0
                res.preemptions += 1
                preempted.append(victim)
                waiting.appendleft(victim)
                if victim is r:
                    if not running:
                        lone = r
                    break
            if out is None:
                break
            sched.append((r, n))
            if num_spec:
                prefill_scheduled |= r.prefill_chunk
                r.prefill_chunk = nc + n < num_tokens
                s_ = n + nc - num_tokens  # drafts scheduled (vLLM's spec_token_ids cut)
                r.sched_spec = (s_ if s_ < r.spec else r.spec) if s_ > 0 else 0
                r.spec = 0
            if prefill:
                batch_reqs.append(SR(n, nc, True))
                n_prefill += 1
            elif n != 1:  # a decode verifying drafts computes 1 + drafts tokens
                batch_reqs.append(SR(n, nc, False))
                n_prefill += 1  # (not a 1-token decode: kept out of the memo below)
            else:  # decodes share one frozen ScheduledRequest per context length
                sr = decode_srs.get(nc)
                if sr is None:
                    sr = decode_srs[nc] = SR(1, nc, False)
                batch_reqs.append(sr)
            token_budget -= n
            i += 1
        if not preempted:
            running_sched = bool(sched)  # vLLM's scheduled_running_reqs
            lookup = manager.get_computed_blocks
            gate = self.gate
            fq = self.fq
            max_num_seqs = self.max_num_seqs
            while token_budget > 0 and waiting and len(running) < max_num_seqs:
                r = waiting[0]
                req = r.request
                hit, nloc = lookup(req)
                num_tokens = len(req.all_token_ids)
                n = num_tokens - nloc
                pad = False
                if num_spec and n == 1 and not prefill_scheduled and (running_sched or nloc) \
                        and nloc + 1 + num_spec + 1 <= mml:
                    # vLLM pads a new decode to the uniform speculative size
                    if 1 + num_spec > token_budget:
                        break
                    n = 1 + num_spec
                    pad = True
                if 0 < lpt < n:
                    n = lpt
                if not chunked and n > min(token_budget, per_req):
                    break  # chunked prefill off: no partial prompt (vLLM 0.32)
                if n > token_budget:
                    n = token_budget
                if n > per_req:
                    n = per_req
                if split is not None:
                    if junction_from is not None:
                        r.junction = _junction(junction_from, req, num_tokens, nloc)
                    n = split(nloc, n, r.prompt_len, num_tokens, r.junction)
                    if pad and n and n != 1 + num_spec:
                        n, pad = 1, False  # vLLM drops the padding, not shortens it
                elif capped:
                    n = chunk_cap(req, n, nloc)
                if n <= 0:
                    break
                if gate is not None and _admission_blocks(
                        gate, req, min(num_tokens, mml), hit.blocks, nloc) \
                        > fq.num_free_blocks:
                    out = None
                else:
                    out = alloc(req, n, nloc, hit) if not lookahead else alloc(
                        req, n, nloc, hit, num_lookahead_tokens=lookahead)
                if out is None:
                    if not running:  # nothing will ever free blocks for it
                        waiting.popleft()
                        _reject(r, res, slots, self, keep_requests)
                        rejected.append(r)
                        continue
                    break
                waiting.popleft()
                running.append(r)
                req.num_computed_tokens = nloc
                if r.num_cached_tokens < 0:
                    r.num_cached_tokens = nloc
                    res.prompt_tokens += r.prompt_len
                    res.prefix_hit_tokens += nloc
                sched.append((r, n))
                if num_spec:
                    r.prefill_chunk = nloc + n < num_tokens
                    r.sched_spec = num_spec if pad else 0
                batch_reqs.append(SR(n, nloc, True))
                n_prefill += 1
                token_budget -= n
        elif lone is not None:
            # it preempted itself while running alone: it needs more than the pool
            waiting.remove(lone)
            _reject(lone, res, slots, self, keep_requests)
            rejected.append(lone)
        # run the step
        memo = self._memo
        if memo is not None and not n_prefill and len(batch_reqs) <= 2:
            key: Any = tuple([sr.num_computed_tokens for sr in batch_reqs]) \
                if len(batch_reqs) != 1 else batch_reqs[0].num_computed_tokens
            dt = memo.get(key, -1.0)
            if dt < 0.0:
                dt = self.step_time(describe_batch(self.kvcfg, batch_reqs))
                if len(memo) >= _MEMO_MAX:
                    memo.clear()
                memo[key] = dt
        else:
            dt = self.step_time(describe_batch(self.kvcfg, batch_reqs))
        if type(dt) is not float:  # off the fast path: ints and numpy reals are numbers
            from kvcore.units import as_real

            real = as_real(dt)  # bool refused
            if real is None:
                raise ConfigError(f"step_time returned {dt!r} s for step {step}; a step "
                                  "time must be a finite number >= 0", field="step_time",
                                  value=repr(dt))
            dt = real
        if not (dt >= 0.0) or dt == float("inf"):
            raise ConfigError(f"step_time returned {dt!r} s for step {step}; a step time "
                              "must be a finite number >= 0", field="step_time", value=dt)
        clock = self.clock = self.clock + dt
        now = self.epoch + clock
        self.busy += dt
        # the way back (``api_stream_s``): the step's chunks reach the client at ``tclock``
        tclock = clock
        if self.api_stream_s:
            k = 0
            for r, n in sched:
                if r.request.num_computed_tokens + n >= r.prompt_len + r.num_out:
                    k += 1
            if k:
                nxt = self._out_next
                if nxt is not None:
                    prev = (nxt[0] - self.epoch) + nxt[1]
                    if prev > tclock:
                        tclock = prev
                tclock += self.api_stream_s * k
                self._out_next = (self.epoch, tclock)
        tnow = now if tclock == clock else self.epoch + tclock
        # update_from_output
        finished: list[SimRequest] = []
        for r, n in sched:
            req = r.request
            nc = req.num_computed_tokens = req.num_computed_tokens + n
            num_out = r.num_out
            if nc >= r.prompt_len + num_out:  # (the request's token count)
                s_ = r.sched_spec if num_spec else 0
                if s_:  # verify the drafts: the rejected ones are rolled back
                    r.sched_spec = 0
                    acc = self.spec_acceptance(r.request_id, r.n_verify, s_)  # type: ignore[misc]
                    if isinstance(acc, bool) or not isinstance(acc, numbers.Integral) \
                            or not 0 <= int(acc) <= s_:
                        raise ConfigError(
                            f"spec_acceptance returned {acc!r} for request "
                            f"{r.request_id!r} (verification {r.n_verify}); it must be "
                            f"an integer in [0, {s_}] (the drafts verified)",
                            field="spec_acceptance", value=repr(acc))
                    acc = int(acc)
                    r.n_verify += 1
                    req.num_computed_tokens = nc - (s_ - acc)
                    ntok = acc + 1
                else:
                    ntok = 1
                first = True
                while True:  # append the tokens, vLLM's check_stop after each
                    req.append_output_token_ids(r.outputs[num_out])  # type: ignore[index]
                    if not first:  # streamed in the same delta as the one before
                        r.bundled.append(num_out)
                    first = False
                    r.num_out = num_out = num_out + 1
                    r.token_times.append(tclock - r.t0)
                    if num_out >= r.output_len or r.prompt_len + num_out >= mml:
                        free(req)
                        r.finish = tnow
                        finished.append(r)
                        if slots is not None:
                            slots.append(tnow, self.epoch, tclock)
                        if not keep_requests:
                            r.request = r.outputs = None
                        break
                    ntok -= 1
                    if not ntok:
                        break
        if finished:
            fin = set(map(id, finished))
            running = self.running = [r for r in running if id(r) not in fin]
            res.duration = tnow
        if num_spec:  # the drafter proposes for every running request past its prefill
            for r in running:
                r.spec = 0 if r.prefill_chunk else num_spec
        if self.record_steps:
            use = 1.0 - self.fq.num_free_blocks / self.usable
            if self.max_samples is None:
                res.step_end.append(now)
                res.step_usage.append(use)
                res.step_running.append(len(running))
                res.step_waiting.append(len(waiting))
                res.step_tokens.append(mnbt - token_budget)
            else:
                self.usage_area += dt * use
                if use > self.peak_usage:
                    self.peak_usage = use
                self._k += 1
                if self._k >= self._stride:  # a thinned series
                    self._k = 0
                    res.step_end.append(now)
                    res.step_usage.append(use)
                    res.step_running.append(len(running))
                    res.step_waiting.append(len(waiting))
                    res.step_tokens.append(mnbt - token_budget)
                    if len(res.step_end) >= self.max_samples:
                        for series in (res.step_end, res.step_usage, res.step_running,
                                       res.step_waiting, res.step_tokens):
                            del series[::2]
                        self._stride *= 2
        return StepRecord(sched, preempted, finished, rejected, dt)


def run_engine(manager: Any, requests: Sequence[SimRequest], time_model: StepTimeModel,
               *, max_num_seqs: int, max_num_batched_tokens: int,
               long_prefill_token_threshold: int = 0, max_model_len: int | None = None,
               max_concurrency: int | None = None, num_lookahead_tokens: int = 0,
               kv_cache_config: Any = None, on_step: StepHook | None = None,
               progress: Callable[[int], None] | None = None,
               record_steps: bool = True, keep_requests: bool = False,
               max_steps: int | None = None, reserve_full_prompt: bool = True,
               num_speculative_tokens: int = 0,
               spec_acceptance: SpecAcceptance | None = None,
               request_overhead_s: float | None = None,
               api_server_s: float | None = None,
               enable_chunked_prefill: bool = True,
               api_stream_s: float | None = None) -> EngineResult:
    """Run the loop of the module docstring over ``requests`` to completion: an
    :class:`Engine` fed the requests as they arrive.

    manager: a :class:`kvcore.runtime.KVCacheManager` (fresh).  time_model: any object
    with ``step_time(batch) -> seconds``.  kv_cache_config: the plan passed to
    :func:`~kvcore.sim.timing.describe_batch` (default ``manager.kv_cache_config``).
    on_step: called after each step with the scheduled ``(request_id, tokens)`` in
    schedule order, the preempted and the finished request ids.  progress(n): requests
    finished or rejected so far, after each step that changed it.  A finished request
    drops its runtime Request and output ids unless ``keep_requests``.
    max_steps: stop after that many steps (None: run to completion).
    reserve_full_prompt: vLLM's ``scheduler_reserve_full_isl`` (default on in 0.32): a
    waiting request is admitted only if the blocks for its whole current token
    sequence fit (windowed groups capped at their admission limit), not only its
    first chunk (:func:`_admission_blocks`).
    request_overhead_s: seconds between the client sending a request and the engine
    seeing it (the way back folded in; module docstring); None: the time model's
    ``request_overhead_s`` (0 without one), as every kvcore path uses it.
    api_server_s: the API server's serial stage, s per request (module docstring);
    None: the time model's ``api_server_s`` (0 without one).
    enable_chunked_prefill: vLLM's flag; False: a waiting prompt is scheduled whole or
    not at all, and ``max_num_batched_tokens`` must hold ``max_model_len``.
    api_stream_s: the way back's serial stage, s per streamed chunk (module docstring);
    None: the time model's ``api_stream_s`` (0 without one).

    Raises ConfigError for a count out of range (naming it), requests that are not
    SimRequests, a time model without ``step_time``, settings vLLM refuses
    (:func:`check_scheduler_limits`) or a step time that is not a finite number >= 0.
    """
    if max_concurrency is not None:
        _check_int("max_concurrency", max_concurrency, 1)
    if max_steps is not None:
        _check_int("max_steps", max_steps, 0)
    if isinstance(requests, (str, bytes)) or not hasattr(requests, "__iter__"):
        raise ConfigError(f"requests must be a sequence of SimRequest, got "
                          f"{type(requests).__name__}", field="requests",
                          value=type(requests).__name__)
    requests = list(requests)
    bad = next((r for r in requests if not isinstance(r, SimRequest)), None)
    if bad is not None:
        raise ConfigError(f"requests must be SimRequest objects (wrap a TraceRequest as "
                          f"SimRequest(trace)), got {type(bad).__name__}",
                          field="requests", value=type(bad).__name__)
    seen: dict[str, int] = {}
    for i, r in enumerate(requests):
        check_fresh(r, i, seen)
    pc = time.perf_counter
    wall0 = pc()
    res = EngineResult(requests=list(requests))
    eng = Engine(manager, time_model, max_num_seqs=max_num_seqs,
                 max_num_batched_tokens=max_num_batched_tokens,
                 long_prefill_token_threshold=long_prefill_token_threshold,
                 max_model_len=max_model_len, num_lookahead_tokens=num_lookahead_tokens,
                 kv_cache_config=kv_cache_config, record_steps=record_steps,
                 keep_requests=keep_requests, reserve_full_prompt=reserve_full_prompt,
                 result=res, num_speculative_tokens=num_speculative_tokens,
                 spec_acceptance=spec_acceptance, request_overhead_s=request_overhead_s,
                 api_server_s=api_server_s, enable_chunked_prefill=enable_chunked_prefill,
                 api_stream_s=api_stream_s)
    over = eng.request_overhead_s
    mml = eng.max_model_len
    order = sorted(range(len(res.requests)), key=lambda k: res.requests[k].arrival)
    pending: deque[SimRequest] = deque(res.requests[k] for k in order)
    slots: Slots | None = Slots(max_concurrency) if max_concurrency is not None else None
    send = eng.send
    step = eng.step
    n_done = 0
    idle_steps = 0
    while True:
        # 1. release the requests that have arrived (under the concurrency cap)
        released = False
        now = eng.now
        while pending:
            r = pending[0]
            if r.arrival > now:
                break
            if slots is not None:
                if not slots or slots[0] > now:
                    # no slot free by now (a rejection's reply frees its slot later):
                    # another may free sooner, in a step still to run
                    break
                slots.send(r)
            else:
                r.sent = r.arrival
            pending.popleft()
            if r.prompt_len + r.output_len > mml:
                # the API server refuses it: the client has the error after its share
                r.rejected = True
                res.rejected += 1
                n_done += 1
                released = True
                if slots is not None:
                    slots.release_after(r, over)
                continue
            send(r)
        if released and progress is not None:
            progress(n_done)
        if not eng.has_work:
            if not pending:
                break
            if slots is not None and not slots:  # pragma: no cover - cannot happen
                raise RuntimeError("engine: no free concurrency slot with nothing running")
            t = pending[0].arrival
            if slots is not None and slots[0] > t:
                t = slots[0]  # idle until a rejection's reply frees a slot
            if t > now:
                eng.now = t
            continue
        if max_steps is not None and res.steps >= max_steps:
            break
        # 2.-4. one step
        sched, preempted, finished, rejected, _ = step(slots)
        if sched or preempted or rejected:
            idle_steps = 0
        else:
            idle_steps += 1
            if idle_steps > 1 and not (pending and pending[0].arrival > eng.now):
                raise RuntimeError(  # pragma: no cover - a scheduler bug, not input
                    f"engine: step {res.steps} scheduled nothing with "
                    f"{len(eng.running)} running and {len(eng.waiting)} waiting; nothing "
                    "would ever change")
        if finished or rejected:
            n_done += len(finished) + len(rejected)
            if progress is not None:
                progress(n_done)
        if on_step is not None:
            on_step(res.steps, [(r.request_id, n) for r, n in sched],
                    [r.request_id for r in preempted], [r.request_id for r in finished])
    now = eng.now
    if res.duration < now and not any(r.finish >= 0 for r in res.requests):
        res.duration = now
    res.wall_seconds = pc() - wall0
    return res


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


def mamba_checkpoint_position(num_tokens: int, block_size: int, use_eagle: bool) -> int:
    """The last block boundary (tokens) whose Mamba state a resend of a
    ``num_tokens``-token prefill can resume from: vLLM 0.32
    ``get_mamba_prefill_checkpoint_position`` (``vllm/v1/kv_cache_interface.py``).
    Without EAGLE one token is left to recompute (the boundary at or below
    ``num_tokens - 1``); with EAGLE one block further back (at or below ``num_tokens``
    minus a block).  0 when there is none."""
    limit = num_tokens if use_eagle else num_tokens - 1
    pos = limit // block_size * block_size
    if use_eagle:
        pos -= block_size
    return pos if pos > 0 else 0


def mamba_checkpoint_valid(query_start: int, query_end: int, checkpoint_position: int,
                           hash_block_size: int, mamba_block_size: int,
                           checkpoint_alignment: int | None) -> bool:
    """Whether the attention backend can export the Mamba state at
    ``checkpoint_position`` from inside the query ``[query_start, query_end)``
    (tokens): vLLM 0.32 ``is_mamba_prefill_checkpoint_valid``
    (``vllm/v1/kv_cache_interface.py``); always False without an alignment."""
    if checkpoint_alignment is None:
        return False
    initial_state_col = (query_start - 1) // mamba_block_size
    checkpoint_col = _cdiv(query_end, mamba_block_size) - 2
    return (query_start % hash_block_size == 0
            and checkpoint_col > initial_state_col
            and query_start + hash_block_size <= checkpoint_position
            and query_start < checkpoint_position < query_end
            and (checkpoint_position - query_start) % checkpoint_alignment == 0)


def mamba_block_aligned_split(num_computed_tokens: int, num_new_tokens: int,
                              num_prompt_tokens: int, num_tokens: int, *,
                              block_size: int, max_prefill_tokens: int,
                              scheduler_block_size: int | None = None,
                              hash_block_size: int | None = None,
                              use_eagle: bool = False, partial_cache_hit: bool = False,
                              has_prefill_checkpoint_blocks: bool = False,
                              checkpoint_alignment: int | None = None,
                              shared_prefix_boundary: int = 0,
                              shared_prefix_checkpoint: bool = False) -> int:
    """Clip a prefill chunk so it ends where a Mamba state must be cached: vLLM 0.32
    ``Scheduler._mamba_block_aligned_split`` (``vllm/v1/core/sched/scheduler.py``),
    applied by its scheduler to every running and waiting request when the model has
    Mamba layers and ``mamba_cache_mode == "align"`` (and only then).

    num_computed_tokens: where the chunk starts (the request's computed tokens plus a
    new request's prefix hit), tokens.  num_new_tokens: the chunk after the budget and
    ``long_prefill_token_threshold`` caps, tokens.  num_prompt_tokens / num_tokens:
    the request's prompt and all its tokens (a resumed request replays its outputs).
    block_size: ``cache_config.block_size`` (the Mamba block), tokens.
    max_prefill_tokens: ``max_num_scheduled_tokens``, capped by the *configured*
    ``long_prefill_token_threshold`` when it is > 0 (even in a step where the
    threshold is off because one request is eligible), tokens.
    scheduler_block_size / hash_block_size: the Scheduler's ``block_size`` (lcm of the
    group block sizes) and ``hash_block_size`` (default ``block_size``), tokens.
    use_eagle: vLLM's ``use_eagle_block_drop``.  partial_cache_hit: vLLM's
    ``mamba_partial_cache_hit`` (hash blocks finer than the scheduler block and
    partial hash hits on).  has_prefill_checkpoint_blocks / checkpoint_alignment:
    ``num_prefill_checkpoint_blocks > 0`` on every Mamba group and its
    ``prefill_checkpoint_alignment`` (the backend exports the prompt's checkpoint from
    inside the last chunk).  shared_prefix_boundary: the request's
    ``shared_prefix_boundary`` (tokens; what ``get_computed_blocks`` returned at its
    last lookup: the longest single-group hit when it exceeds the hit every group
    serves, else 0).  shared_prefix_checkpoint: vLLM's
    ``mamba_shared_prefix_checkpoint``.

    Returns the tokens to schedule, 0 to ``num_new_tokens``: 0 when no block-aligned
    chunk fits (the running loop then skips the request, the waiting loop stops).
    Examples, a 100-token prompt, block 16, ``max_prefill_tokens`` 32: from 0 with 40
    tokens of budget, 32 (the chunk end floored to a block boundary); with 10, 0 (the
    floor is not above the start, and a whole block fits a chunk: wait for more
    budget); from 90 with 32, 6 (to the boundary 96, the last checkpoint); from 32
    with 32 and a shared-prefix boundary at 48, 16.  Block 544 wider than the 256-token
    chunks of a 1,000-token prompt: 256 from 0 (sub-block), then 32 from 512 (to the
    boundary 544).
    """
    start = num_computed_tokens
    prefill_end = max(num_prompt_tokens, num_tokens - 1)
    if start >= prefill_end:
        return num_new_tokens
    sched_bs = block_size if scheduler_block_size is None else scheduler_block_size
    hash_bs = sched_bs if hash_block_size is None else hash_block_size
    ckpt_bs = hash_bs if partial_cache_hit else sched_bs
    last_cache_position = mamba_checkpoint_position(num_tokens, block_size, use_eagle)
    end = start + num_new_tokens
    checkpoint_position = mamba_checkpoint_position(prefill_end, ckpt_bs, use_eagle)
    internal = (has_prefill_checkpoint_blocks and end >= prefill_end
                and mamba_checkpoint_valid(start, end, checkpoint_position, hash_bs,
                                           block_size, checkpoint_alignment))
    if internal:
        last_cache_position = 0
    if end < prefill_end:
        aligned_end = end // block_size * block_size
        if aligned_end > start or block_size <= max_prefill_tokens:
            end = aligned_end
    next_block_boundary = (start // block_size + 1) * block_size
    tail_boundary = mamba_checkpoint_position(num_prompt_tokens, hash_bs, use_eagle) \
        if partial_cache_hit and not internal else 0
    junction = shared_prefix_boundary
    block_floored = start + (junction - start) // block_size * block_size
    junction_stop = junction if shared_prefix_checkpoint \
        and junction <= num_prompt_tokens else block_floored
    stops = (
        next_block_boundary if start % block_size != 0 and not internal else 0,
        last_cache_position,
        tail_boundary if last_cache_position < tail_boundary < num_prompt_tokens else 0,
        junction_stop if start < junction < end else 0,
    )
    end = min((s for s in stops if start < s < end), default=end)
    return end - start if end > start else 0


def _mamba_split_plan(manager: Any, max_num_batched_tokens: int,
                      long_prefill_token_threshold: int) -> tuple[Any, Any]:
    """``(split, junction_from)`` for a manager: ``split(start, num_new_tokens,
    num_prompt_tokens, num_tokens, shared_prefix_boundary) -> tokens`` when vLLM's
    Scheduler would call ``_mamba_block_aligned_split`` (a Mamba group in ``align``
    mode: ``need_mamba_block_aligned_split``), else None; ``junction_from``: the
    downward-closed (full-attention) group whose hit gives ``shared_prefix_boundary``
    (vLLM's ``KVCacheManager.get_computed_blocks``), or None.

    Settings as vLLM 0.32's Scheduler derives them: ``block_size`` is the Mamba group's
    (``cache_config.block_size``: in ``align`` mode the Mamba block follows the
    attention block), the scheduler block size the lcm of the group block sizes
    (``resolve_kv_cache_block_sizes``), the hash block size kvcore's.  Not modelled,
    because kvcore's runtime has no such hits or specs: partial hash hits
    (``mamba_partial_cache_hit``, a ``prefix_match_unit`` below the block size),
    prefill checkpoint blocks (``num_prefill_checkpoint_blocks``) and the opt-in
    shared-prefix checkpoint; each is off, as in vLLM by default."""
    import math
    from functools import partial

    managers = list(getattr(manager, "managers", ()))
    mamba = [m for m in managers if getattr(m.spec, "kind", "") == "mamba"]
    if not mamba or getattr(mamba[0].spec, "mamba_cache_mode", "none") != "align":
        return None, None
    bs = int(mamba[0].block_size)
    sched_bs = math.lcm(*(int(m.block_size) for m in managers))
    max_prefill = max_num_batched_tokens
    if long_prefill_token_threshold > 0:
        max_prefill = min(max_prefill, long_prefill_token_threshold)
    fn = partial(mamba_block_aligned_split, block_size=bs, max_prefill_tokens=max_prefill,
                 scheduler_block_size=sched_bs,
                 hash_block_size=int(getattr(manager, "hash_block_size", sched_bs)),
                 use_eagle=bool(getattr(manager, "use_eagle", False)))

    def split(start: int, n: int, num_prompt: int, num_tokens: int, junction: int
              ) -> int:
        return fn(start, n, num_prompt, num_tokens, shared_prefix_boundary=junction)

    full = None
    coord = getattr(manager, "coordinator", None)
    if getattr(manager, "enable_caching", False) and coord is not None:
        from kvcore.runtime.managers import SingleTypeManager

        base = SingleTypeManager.find_longest_cache_hit
        caching = list(getattr(coord, "caching_managers", ()))
        if len(caching) > 1:  # one group: nothing can lag it (vLLM returns 0)
            full = next((m for m in caching if not m.skips_blocks
                         and type(m).find_longest_cache_hit is base), None)
            if full is not None:
                full = (full, int(getattr(coord, "alignment", full.block_size)))
    return split, full


def _junction(full: tuple[Any, int], request: Any, num_tokens: int, hit: int) -> int:
    """vLLM's ``shared_prefix_boundary`` of a lookup that hit ``hit`` tokens: the
    full-attention group's own hit within ``num_tokens - 1`` (rounded down to the
    alignment) when it is longer than the hit every group serves, else 0
    (``HybridKVCacheCoordinator.find_longest_cache_hit``'s uncached common prefix)."""
    m, align = full
    limit = num_tokens - 1
    n = len(m.find_longest_cache_hit(request.block_hashes, limit, 0)) * m.block_size
    n = min(n, limit) // align * align
    return n if n > hit else 0


def _admission_plan(manager: Any, max_num_batched_tokens: int, max_model_len: int
                    ) -> list[tuple[Any, int, int | None, str]]:
    """Per group ``(manager, block_size, admission cap in blocks or None, kind)``.

    Caps are vLLM 0.32's ``max_admission_blocks_per_request`` with
    ``max_in_flight_tokens = max_num_batched_tokens`` (synchronous scheduling;
    ``vllm/v1/kv_cache_interface.py``): a sliding window holds at most
    ``cdiv(min(window - 1 + in_flight, max_model_len), block_size) + 1`` blocks, a
    chunked-local layer ``cdiv(min(chunk + in_flight, max_model_len), block_size)``;
    other kinds have no cap.
    """
    plan: list[tuple[Any, int, int | None, str]] = []
    for m in manager.managers:
        spec = m.spec
        bs = m.block_size
        cap: int | None = None
        if m.skips_blocks:
            w = getattr(spec, "sliding_window", None)
            c = getattr(spec, "attention_chunk_size", None)
            if isinstance(w, int) and w > 0:
                cap = _cdiv(min(w - 1 + max_num_batched_tokens, max_model_len), bs) + 1
            elif isinstance(c, int) and c > 0:
                cap = _cdiv(min(c + max_num_batched_tokens, max_model_len), bs)
        plan.append((m, bs, cap, getattr(spec, "kind", "")))
    return plan


def _admission_blocks(plan: list[tuple[Any, int, int | None, str]], request: Any,
                      num_tokens: int, hits: Any, num_computed: int) -> int:
    """Blocks a waiting request (holding none) needs for ``num_tokens`` tokens with its
    prefix hit ``hits`` (per group) of ``num_computed`` tokens: vLLM 0.32's
    ``get_num_blocks_to_allocate(..., apply_admission_cap=True)`` (new blocks for the
    part past the skipped and hit blocks, capped per group, plus hit blocks that leave
    the free queue)."""
    total = 0
    for g, (m, bs, cap, kind) in enumerate(plan):
        hit = hits[g] if hits else ()
        if kind == "cross_attention":
            continue
        if kind == "mamba":
            total += m.get_num_blocks_to_allocate(request, num_tokens, hit)
            continue
        required = _cdiv(num_tokens, bs)
        if cap is not None and cap < required:
            required = cap
        skipped = m.get_num_skipped_tokens(num_computed) // bs if m.skips_blocks else 0
        total += max(required - max(skipped, len(hit)), 0)
        for b in hit[skipped:] if skipped else hit:
            if b.ref_cnt == 0 and not b.is_null:
                total += 1
    return total


def _reject(r: SimRequest, res: EngineResult, slots: Any, eng: Engine,
            keep_requests: bool) -> None:
    r.rejected = True
    res.rejected += 1
    if r.request is not None and not keep_requests:
        r.request = r.outputs = None
    if slots is not None:
        slots.append(eng.now, eng.epoch, eng.clock)
