"""The replay loop: a minimal continuous-batching scheduler driving a KVCacheManager.

Scheduling model (the loop of the runtime conformance workload, README of
``tests/runtime/data``, extended with rejection and preemption):

* **Arrival order, closed loop.** Every request is waiting from the start, in trace
  order; timestamps only order the trace (they do not delay admission).  Each *step*
  is one model forward pass.
* **Concurrency cap.** At most ``max_running`` requests run at once (``max_num_seqs``).
* Each step: (1) every running request, in admission order, gets a slot for the token
  it sampled last step (``allocate_slots(r, 1)``); (2) waiting requests are admitted
  first come first served while fewer than ``max_running`` run: prefix lookup
  (``get_computed_blocks``), then ``allocate_slots(r, num_tokens - hit, hit, blocks,
  full_sequence_must_fit=True)``; the whole uncached prompt is computed in this step
  (no chunked prefill, no token budget); (3) every scheduled request's tokens count as
  computed and it samples one output token (a request produces its first output token
  in its admission step); one with ``output_len`` tokens is freed.
* **Head-of-line blocking.** If the head of the queue does not fit, admission stops
  for this step.  If it does not fit with nothing running (it can never fit), or its
  prompt plus output exceeds ``max_model_len``, it is **rejected** (dropped, counted).
* **Preemption (recompute).** If a running request's decode slot does not fit, the most
  recently admitted running request is preempted: its blocks are freed, its
  ``num_computed_tokens`` reset to 0, and it goes back to the front of the queue; it is
  re-admitted later with a fresh prefix lookup over prompt plus generated tokens
  (vLLM's policy).  This repeats until the slot fits or the request itself is preempted.

Hits (``num_cached_tokens``) are those of a request's *first* admission.  With the
conformance workload's numbers nothing is rejected or preempted, and the loop is
exactly the one whose per-request results ``vllm-results-seed0.jsonl`` records.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from kvcore.errors import ConfigError, shorten
from kvcore.sim.traces import TraceRequest
from kvcore.units import MAX_TOKENS, check_int, check_items

__all__ = ["Job", "ReplayResult", "check_trace_request", "check_manager", "prepare_jobs",
           "replay", "MANAGER_METHODS"]


def check_trace_request(trace: Any) -> None:
    """A trace request the simulators can serve: ``prompt_len >= 1`` token and
    ``output_len >= 0`` tokens (0 is served as 1, vLLM's clamp).

    Raises ConfigError naming the request and the field (``trace`` when it is not a
    :class:`~kvcore.sim.traces.TraceRequest`)."""
    if not isinstance(trace, TraceRequest):
        raise ConfigError(f"trace must be a TraceRequest (kvcore.sim.TraceRequest, or "
                          f"read_trace's rows), got {type(trace).__name__} "
                          f"{shorten(trace)}", field="trace", value=shorten(trace))
    if trace.prompt_len < 1 or trace.output_len < 0:
        raise ConfigError(
            f"request {trace.request_id!r}: prompt_len must be >= 1 and output_len "
            f">= 0, got prompt_len {trace.prompt_len}, output_len {trace.output_len}",
            field="prompt_len" if trace.prompt_len < 1 else "output_len",
            value=trace.prompt_len if trace.prompt_len < 1 else trace.output_len)


class Job:
    """One trace request during a replay (its runtime Request, outputs, results)."""

    __slots__ = ("trace", "request", "outputs", "output_len", "num_out", "admit_step",
                 "finish_step", "num_cached_tokens", "preemptions", "rejected", "done")

    def __init__(self, trace: TraceRequest) -> None:
        check_trace_request(trace)
        self.trace = trace
        self.request: Any = None
        self.outputs: list[int] | None = None
        self.output_len = max(1, trace.output_len)
        self.num_out = 0
        self.admit_step = -1
        self.finish_step = -1
        self.num_cached_tokens = -1
        self.preemptions = 0
        self.rejected = False
        self.done = False

    def materialize(self, manager: Any) -> None:
        """Build the runtime Request (hashes the prompt) and the output token ids."""
        t = self.trace
        self.request = manager.make_request(t.request_id, t.prompt_token_ids(),
                                            max_tokens=self.output_len)
        self.outputs = t.output_token_ids()
        if len(self.outputs) < self.output_len:
            self.outputs += [1] * (self.output_len - len(self.outputs))


#: what the simulators call on a manager (kvcore.runtime.KVCacheManager has them all)
MANAGER_METHODS = ("make_request", "get_computed_blocks", "allocate_slots", "free")


def check_manager(manager: Any, field: str = "manager") -> Any:
    """``manager`` if it has the :class:`kvcore.runtime.KVCacheManager` methods the
    simulators call (:data:`MANAGER_METHODS`) and a ``block_pool``.  Raises ConfigError
    naming ``field`` otherwise."""
    missing = [m for m in MANAGER_METHODS if not callable(getattr(manager, m, None))]
    if missing or getattr(manager, "block_pool", None) is None:
        raise ConfigError(f"{field} must be a KVCacheManager (kvcore.runtime), got "
                          f"{type(manager).__name__} {shorten(manager)} (it lacks "
                          f"{', '.join(missing) or 'block_pool'})", field=field,
                          value=shorten(manager))
    return manager


def prepare_jobs(manager: Any, traces: Sequence[TraceRequest]) -> list[Job]:
    """Jobs with their Requests built up front (prompt hashing outside any timing).
    Raises ConfigError for a ``manager`` that is not a KVCacheManager and for
    ``traces`` that are not TraceRequest objects (naming the first bad one)."""
    check_manager(manager)
    jobs = [Job(t) for t in check_items(traces, TraceRequest, "traces")]
    for j in jobs:
        j.materialize(manager)
    return jobs


@dataclass
class ReplayResult:
    """Totals of a replay; times in seconds, usage as a fraction of usable blocks."""

    jobs: list[Job]
    steps: int = 0
    requests: int = 0
    prompt_tokens: int = 0
    prefix_hit_tokens: int = 0
    peak_usage: float = 0.0
    rejected: int = 0
    preempted: int = 0
    allocate_slots_calls: int = 0
    allocate_slots_seconds: float = 0.0
    manager_calls: int = 0
    manager_seconds: float = 0.0
    wall_seconds: float = 0.0
    #: (step, usage, cumulative prefix-hit ratio) samples for plots
    samples: list[tuple[int, float, float]] = field(default_factory=list)

    @property
    def prefix_hit_ratio(self) -> float:
        return self.prefix_hit_tokens / self.prompt_tokens if self.prompt_tokens else 0.0

    def results(self) -> list[dict[str, Any]]:
        """Per request, in trace order: id, num_cached_tokens, admit_step, finish_step
        (the conformance results format; -1 for a rejected request)."""
        return [{"id": j.trace.request_id, "num_cached_tokens": j.num_cached_tokens,
                 "admit_step": j.admit_step, "finish_step": j.finish_step}
                for j in self.jobs]


def replay(manager: Any, jobs: Sequence[Job], *, max_running: int,
           max_model_len: int | None = None, time_calls: bool = False,
           progress: Callable[[int], None] | None = None, sample_every: int = 0,
           keep_requests: bool = False) -> ReplayResult:
    """Run the scheduling model above over ``jobs`` (built by :func:`prepare_jobs`, or
    bare :class:`Job` objects materialized on admission).

    ``time_calls`` times each manager call (``perf_counter`` around it);
    ``progress(n)`` is called with the number of requests finished or rejected so far
    after each step that changed it; ``sample_every`` > 0 records a usage sample every
    that many steps.  A finished job drops its Request and outputs unless
    ``keep_requests``.

    Raises ConfigError for a ``manager`` that is not a KVCacheManager, ``jobs`` that
    are not Job objects, a ``max_running`` / ``max_model_len`` that is not an int >= 1,
    a ``sample_every`` that is not an int >= 0, flags that are not bools and a
    ``progress`` that is not callable.
    """
    check_manager(manager)
    jobs = check_items(jobs, Job, "jobs", hint="build them with prepare_jobs")
    check_int(max_running, "max_running")
    if max_model_len is not None:
        check_int(max_model_len, "max_model_len", maximum=MAX_TOKENS)
    check_int(sample_every, "sample_every", minimum=0)
    for nm, flag in (("time_calls", time_calls), ("keep_requests", keep_requests)):
        if not isinstance(flag, bool):
            raise ConfigError(f"{nm} must be True or False, got {shorten(flag)}",
                              field=nm, value=shorten(flag))
    if progress is not None and not callable(progress):
        raise ConfigError(f"progress must be a callable or None, got {shorten(progress)}",
                          field="progress", value=shorten(progress))
    pc = time.perf_counter
    alloc = manager.allocate_slots
    lookup = manager.get_computed_blocks
    free = manager.free
    pool = manager.block_pool
    usable = pool.num_usable_blocks
    fq = pool.free_queue
    mml = manager.max_model_len if max_model_len is None else max_model_len
    res = ReplayResult(jobs=list(jobs))
    waiting: deque[Job] = deque(jobs)
    running: list[Job] = []
    step = 0
    t_alloc = 0.0
    n_alloc = 0
    t_other = 0.0
    n_other = 0
    n_done = 0
    peak_free = fq.num_free_blocks
    wall0 = pc()
    while waiting or running:
        step += 1
        sched: list[tuple[Job, int]] = []
        # 1. decode slots
        i = 0
        while i < len(running):
            j = running[i]
            if time_calls:
                t0 = pc()
                out = alloc(j.request, 1)
                t_alloc += pc() - t0
            else:
                out = alloc(j.request, 1)
            n_alloc += 1
            if out is None:
                victim = running.pop()
                if time_calls:
                    t0 = pc()
                    free(victim.request)
                    t_other += pc() - t0
                else:
                    free(victim.request)
                n_other += 1
                victim.request.num_computed_tokens = 0
                victim.preemptions += 1
                res.preempted += 1
                waiting.appendleft(victim)
                continue
            sched.append((j, 1))
            i += 1
        # 2. admission, first come first served
        while waiting and len(running) < max_running:
            j = waiting[0]
            t = j.trace
            if j.request is None:
                if t.prompt_len + j.output_len > mml:
                    waiting.popleft()
                    j.rejected = True
                    res.rejected += 1
                    n_done += 1
                    continue
                j.materialize(manager)
            req = j.request
            if time_calls:
                t0 = pc()
                hit, n = lookup(req)
                t1 = pc()
                out = alloc(req, len(req.all_token_ids) - n, n, hit,
                            full_sequence_must_fit=True)
                t2 = pc()
                t_other += t1 - t0
                t_alloc += t2 - t1
            else:
                hit, n = lookup(req)
                out = alloc(req, len(req.all_token_ids) - n, n, hit,
                            full_sequence_must_fit=True)
            n_other += 1
            n_alloc += 1
            if out is None:
                if running:
                    break
                waiting.popleft()  # does not fit even alone
                j.rejected = True
                res.rejected += 1
                n_done += 1
                continue
            req.num_computed_tokens = n
            if j.admit_step < 0:
                j.admit_step = step
                j.num_cached_tokens = n
                res.requests += 1
                res.prompt_tokens += t.prompt_len
                res.prefix_hit_tokens += n
            waiting.popleft()
            running.append(j)
            sched.append((j, len(req.all_token_ids) - n))
        if fq.num_free_blocks < peak_free:
            peak_free = fq.num_free_blocks
        # 3. run the model
        finished = False
        for j, nt in sched:
            req = j.request
            req.num_computed_tokens += nt
            req.append_output_token_ids(j.outputs[j.num_out])  # type: ignore[index]
            j.num_out += 1
            if j.num_out >= j.output_len:
                if time_calls:
                    t0 = pc()
                    free(req)
                    t_other += pc() - t0
                else:
                    free(req)
                n_other += 1
                j.finish_step = step
                j.done = True
                if not keep_requests:  # a long trace would otherwise hold every token
                    j.request = j.outputs = None
                finished = True
                n_done += 1
        if finished:
            running = [j for j in running if not j.done]
            if progress is not None:
                progress(n_done)
        elif progress is not None and res.rejected:
            progress(n_done)
        if sample_every and step % sample_every == 0:
            ratio = res.prefix_hit_tokens / res.prompt_tokens if res.prompt_tokens else 0.0
            res.samples.append((step, 1.0 - fq.num_free_blocks / usable, ratio))
    res.wall_seconds = pc() - wall0
    res.steps = step
    res.peak_usage = 1.0 - peak_free / usable
    res.allocate_slots_calls = n_alloc
    res.allocate_slots_seconds = t_alloc
    res.manager_calls = n_alloc + n_other
    res.manager_seconds = t_alloc + t_other
    return res
