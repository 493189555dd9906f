"""A small clocked serving loop for the step-time model's accuracy harness and the tuner.

This is *not* the vLLM-faithful scheduler (that is :mod:`kvcore.sim.engine`); it is
a token-level loop, without a block manager, that follows the same rules closely
enough for steady-state figures, and runs fast enough to fit coefficients and to
search configurations:

* **Arrivals** as ``vllm bench serve`` sends them, the very send times of
  :func:`kvcore.sim.workload.arrival_times` (the engine path's): every request at once
  (``request_rate=inf``) or Poisson / gamma arrivals of ``request_rate`` per second
  with vLLM's ``burstiness`` (gamma shape; inf: constant gaps), a ramp-up, numpy's
  stream of ``--seed`` and vLLM's rescale to ``num_prompts / request_rate``; at most
  ``max_concurrency`` requests in flight (the client's semaphore: a request is sent
  when a slot frees, and its TTFT counts from then).
* **Duration** from the benchmark's start (time 0, before the first send's delay) to
  the last reply, as vLLM's ``benchmark_duration`` and :mod:`kvcore.sim.engine`.
* **Each step** (vLLM v1 ``Scheduler.schedule``): running requests first, in admission
  order, each taking 1 token (decode) or its next prefill chunk, within
  ``max_num_batched_tokens``; then waiting requests first come first served while
  fewer than ``max_num_seqs`` run and budget is left (chunked prefill: a prompt may
  be split over steps).  A prefix hit (``random_prefix_len`` shared tokens, with
  prefix caching, after the first request computed them) skips those tokens.
* **KV capacity** in blocks of the whole pool (``kv_capacity_blocks``, the usable
  blocks of ``kv_cache_config``): a request of ``n`` tokens holds, in every group, the
  blocks its spec says a request of ``n`` tokens needs at decode
  (``max_num_blocks_per_req`` of a :class:`~kvcore.specs.PlanContext` with one batched
  token), summed over the groups, so a hybrid's sliding-window groups hold their
  window and a full-attention group its whole context, as the block pool they share;
  or, the older form, in tokens (``kv_capacity_tokens``, one group).  A request that
  would not fit waits; a running decode that does not fit preempts the newest running
  request (recompute), as vLLM does.
* **max_model_len** (given): a request whose prompt plus output exceeds it is rejected
  on arrival (vLLM's API server answers HTTP 400; ``vllm bench serve`` counts it
  ``failed``): it is not served, not in any figure but ``failed``, and its client slot
  frees after ``request_overhead_s``, as in :mod:`kvcore.sim.engine`.
* The step's duration is ``time_model.step_time(describe_batch(kv_cache_config,
  scheduled))``; its tokens appear at the end of the step; the request's first token
  comes with the step that finishes its prompt.  ``request_overhead_s`` of the model
  (the API server's share: HTTP, tokenisation, the hop to the engine and back, if it
  has one) is the time between a request's send and the engine seeing it, as in
  :mod:`kvcore.sim.engine`: it is in every TTFT and end-to-end latency, in the
  duration, and a closed-loop slot stays taken until the client has the reply.
  ``api_stream_s`` of the model (the way back as a serial stage, as in the engine): a
  step's tokens reach the client at ``d = max(d_prev, step end) + api_stream_s x k``
  for its ``k`` emitting requests; token times, finishes, freed slots and the duration
  are ``d``.

Figures are named as ``vllm bench serve --save-result`` names them.
"""

from __future__ import annotations

import bisect
import math
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from kvcore.errors import ConfigError, shorten
from kvcore.sim.timing import ScheduledRequest, StepTimeModel, describe_batch
from kvcore.units import as_int, check_int

# (percentile and summarize are the loop's own helpers: summarize takes its private
# request records; kvcore.sim.metrics has the public percentile)
__all__ = ["Workload", "run_workload"]


@dataclass(frozen=True)
class Workload:
    """A ``vllm bench serve --dataset random`` run.

    input_len, output_len: tokens per request (``--random-input-len`` /
        ``--random-output-len`` with ``--random-range-ratio 0`` and ``--ignore-eos``).
    num_prompts: requests.
    max_concurrency: the client's cap on requests in flight (None: no cap).
    request_rate: requests per second (``inf``: all at once).
    burstiness: gamma shape of the inter-arrival times (1 = Poisson).
    prefix_len: ``--random-prefix-len`` tokens shared by every prompt (before the
        ``input_len`` random ones).
    seed: of the arrival process (``--seed``).
    ramp_up_strategy, ramp_up_start_rps, ramp_up_end_rps: ``--ramp-up-strategy``
        (``linear`` / ``exponential``, with ``request_rate`` inf) and its rates.
    requests: per-request ``(prompt_len, output_len, arrival_s)`` (a trace); when
        given it replaces ``input_len`` / ``output_len`` / ``num_prompts`` and the
        rate (arrivals are the trace's, still capped by ``max_concurrency``).
    """

    input_len: int
    output_len: int
    num_prompts: int
    max_concurrency: int | None = None
    request_rate: float = math.inf
    burstiness: float = 1.0
    prefix_len: int = 0
    seed: int = 0
    requests: tuple[tuple[int, int, float], ...] = ()
    ramp_up_strategy: str | None = None
    ramp_up_start_rps: int | None = None
    ramp_up_end_rps: int | None = None

    @classmethod
    def from_trace(cls, traces: Sequence[Any], *, max_concurrency: int | None = None,
                   time_scale: float = 1.0) -> Workload:
        """A workload of trace requests (:class:`kvcore.sim.traces.TraceRequest`:
        ``prompt_len``, ``output_len``, ``arrival_ms``); ``time_scale`` stretches the
        arrivals (0.5: twice the rate)."""
        if not traces:
            raise ConfigError("the trace has no requests", field="trace", value=0)
        reqs = tuple((int(t.prompt_len), max(1, int(t.output_len)),
                      float(t.arrival_ms) / 1000.0 * time_scale) for t in traces)
        return cls(max(1, reqs[0][0]), reqs[0][1], len(reqs),
                   max_concurrency=max_concurrency, requests=reqs)

    def __post_init__(self) -> None:
        from kvcore.units import plain_int

        for name in ("input_len", "output_len", "num_prompts", "max_concurrency",
                     "prefix_len", "seed", "ramp_up_start_rps", "ramp_up_end_rps"):
            # numpy integers stored as the equal plain int (bool stays, refused below)
            object.__setattr__(self, name, plain_int(getattr(self, name)))
        for name in ("input_len", "output_len", "num_prompts"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ConfigError(f"{name} must be a positive int, got {v!r}",
                                  field=name, value=v)
        if self.max_concurrency is not None and (
                isinstance(self.max_concurrency, bool)
                or not isinstance(self.max_concurrency, int) or self.max_concurrency < 1):
            raise ConfigError(f"max_concurrency must be a positive int or None, got "
                              f"{self.max_concurrency!r}", field="max_concurrency",
                              value=self.max_concurrency)
        if not (self.request_rate > 0):
            raise ConfigError(f"request_rate must be > 0 (inf: all at once), got "
                              f"{self.request_rate!r}", field="request_rate",
                              value=self.request_rate)
        if not (self.burstiness > 0):
            raise ConfigError(f"burstiness must be > 0 (inf: constant gaps), got "
                              f"{self.burstiness!r}", field="burstiness",
                              value=self.burstiness)
        if not self.requests:
            from kvcore.sim.workload import check_ramp_up

            check_ramp_up(self.ramp_up_strategy, self.ramp_up_start_rps,
                          self.ramp_up_end_rps, self.request_rate)

    def arrival_times(self) -> list[float]:
        """Send times before the concurrency cap (seconds from the benchmark start), as
        vLLM's ``get_request`` (``benchmarks/serve.py``) draws them: exactly
        :func:`kvcore.sim.workload.arrival_times` (the engine path's), so ``tune --fast``
        and the accuracy harness send the traffic ``kvcore simulate`` and vLLM send:
        request 0 after the first gamma(shape=burstiness, scale=1/(rate*burstiness))
        gap, numpy's RandomState(seed) stream, the cumulative delays rescaled so the
        last send is at ``num_prompts / request_rate``; burstiness inf: constant gaps
        of 1 / rate; a ramp-up: one rate per gap.  A trace's own arrivals otherwise.

        Raises ConfigError for ramp-up settings vLLM refuses."""
        if self.requests:
            return [a for _, _, a in self.requests]
        from kvcore.sim.workload import arrival_times

        return arrival_times(self.num_prompts, self.request_rate, self.burstiness,
                             self.seed, ramp_up_strategy=self.ramp_up_strategy,
                             ramp_up_start_rps=self.ramp_up_start_rps,
                             ramp_up_end_rps=self.ramp_up_end_rps)


@dataclass
class _Req:
    """A request of the loop; its times (s) are offsets of the loop's clock, which is
    rebased only while no request is in flight (differences are exact)."""

    idx: int
    prompt: int
    output: int
    sent: float = -1.0
    seen: float = -1.0  # when the engine sees it (sent + request_overhead_s)
    computed: int = 0
    generated: int = 0
    first_token: float = -1.0
    token_times: list[float] = field(default_factory=list)
    done: float = -1.0
    preempted: int = 0
    held: int = 0  # KV held: blocks of the pool (or tokens, with kv_capacity_tokens)
    rejected: bool = False


def percentile(values: Sequence[float], q: float) -> float:
    """The ``q``-th percentile (0-100) with linear interpolation (numpy's default)."""
    if not values:
        return 0.0
    xs = sorted(values)
    pos = (len(xs) - 1) * q / 100.0
    lo = math.floor(pos)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


def _mean(xs: Sequence[float]) -> float:
    return sum(xs) / len(xs) if xs else 0.0


def summarize(reqs: Sequence[_Req], duration: float, overhead: float = 0.0,
              goodput: dict[str, float] | None = None) -> dict[str, Any]:
    """``vllm bench serve`` figures of finished requests (times in ms); ``overhead``
    (s) is added to each TTFT and E2EL (0 from :func:`run_workload`, whose times
    already hold the model's ``request_overhead_s``)."""
    done = [r for r in reqs if r.done >= 0]
    ttft = [1000 * (r.first_token - r.sent + overhead) for r in done]
    tpot = [1000 * (r.done - r.first_token) / (r.output - 1) for r in done if r.output > 1]
    itl: list[float] = []
    for r in done:
        itl.extend(1000 * (b - a) for a, b in zip(r.token_times, r.token_times[1:]))
    e2el = [1000 * (r.done - r.sent + overhead) for r in done]
    out_tokens = sum(r.output for r in done)
    in_tokens = sum(r.prompt for r in done)
    d = duration if duration > 0 else 1e-9
    fig: dict[str, Any] = {
        "completed": len(done),
        "duration": duration,
        "total_input_tokens": in_tokens,
        "total_output_tokens": out_tokens,
        "request_throughput": len(done) / d,
        "output_throughput": out_tokens / d,
        "total_token_throughput": (in_tokens + out_tokens) / d,
        "mean_ttft_ms": _mean(ttft), "median_ttft_ms": percentile(ttft, 50),
        "p99_ttft_ms": percentile(ttft, 99),
        "mean_tpot_ms": _mean(tpot), "median_tpot_ms": percentile(tpot, 50),
        "p99_tpot_ms": percentile(tpot, 99),
        "mean_itl_ms": _mean(itl), "median_itl_ms": percentile(itl, 50),
        "p99_itl_ms": percentile(itl, 99),
        "mean_e2el_ms": _mean(e2el), "median_e2el_ms": percentile(e2el, 50),
        "preemptions": sum(r.preempted for r in reqs),
        "failed": sum(1 for r in reqs if r.rejected),
    }
    if goodput:
        good = 0
        for r, a, b in zip(done, ttft, e2el):
            t = 1000 * (r.done - r.first_token) / (r.output - 1) if r.output > 1 else 0.0
            if a <= goodput.get("ttft", math.inf) and t <= goodput.get("tpot", math.inf) \
                    and b <= goodput.get("e2el", math.inf):
                good += 1
        fig["request_goodput"] = good / d
    return fig


def _tokens(n: int, chunk: int = 1) -> int:
    return n


def _blocks_held(kv_cache_config: Any, ctx: Any) -> Any:
    """``(n, chunk) -> blocks`` a request of ``n`` tokens holds in the whole pool after a
    step that computed ``chunk`` of them: each group's ``spec.max_num_blocks_per_req``
    with ``max_num_batched_tokens = chunk`` (a sliding window or a local chunk holds the
    chunk's tokens too while it is computed), summed; 0 for 0 tokens; memoised.  A spec
    that raises or answers other than an int >= 0 is a ConfigError naming the group's
    kind."""
    from kvcore.specs import PlanContext

    groups = getattr(kv_cache_config, "kv_cache_groups", None)
    if not groups:
        raise ConfigError("kv_capacity_blocks needs a kv_cache_config with groups",
                          field="kv_cache_config", value=shorten(kv_cache_config))
    if ctx is None:
        ctx = PlanContext(max_model_len=max(1, int(kv_cache_config.max_model_len or 1)))
    elif not isinstance(ctx, PlanContext):
        raise ConfigError(f"plan_context must be a kvcore.specs.PlanContext, got "
                          f"{type(ctx).__name__}", field="plan_context",
                          value=shorten(ctx))
    base = dict(ctx.__dict__)
    ctxs: dict[int, Any] = {}
    # equal group specs count once, times their number (a 5 : 1 model: two specs)
    counts: dict[Any, int] = {}
    for g in groups:
        counts[g.spec] = counts.get(g.spec, 0) + 1
    kinds = list(counts.items())
    memo: dict[tuple[int, int], int] = {}

    def held(n: int, chunk: int = 1) -> int:
        if n <= 0:
            return 0
        got = memo.get((n, chunk))
        if got is None:
            ctx = ctxs.get(chunk)
            if ctx is None:
                ctx = ctxs[chunk] = PlanContext(**{**base, "max_num_batched_tokens": chunk})
            total = 0
            for spec, count in kinds:
                try:
                    b = spec.max_num_blocks_per_req(ctx, n)
                except Exception as exc:  # a plugin's spec: name it
                    raise ConfigError(f"{spec.kind}.max_num_blocks_per_req(ctx, {n}) raised "
                                      f"{type(exc).__name__}: {exc}",
                                      field="max_num_blocks_per_req",
                                      value=spec.kind) from None
                if isinstance(b, bool) or not isinstance(b, int) or b < 0:
                    raise ConfigError(f"{spec.kind}.max_num_blocks_per_req(ctx, {n}) "
                                      f"returned {shorten(b)}: must be an int >= 0",
                                      field="max_num_blocks_per_req", value=spec.kind)
                total += count * b
            got = memo[(n, chunk)] = total
        return got
    return held


def run_workload(time_model: StepTimeModel, kv_cache_config: Any, workload: Workload, *,
                 max_num_seqs: int = 256, max_num_batched_tokens: int = 8192,
                 kv_capacity_tokens: int | None = None, enable_prefix_caching: bool = True,
                 goodput: dict[str, float] | None = None, enable_chunked_prefill: bool = True,
                 max_steps: int = 10_000_000, kv_capacity_blocks: int | None = None,
                 max_model_len: int | None = None,
                 plan_context: Any = None, reserve_full_prompt: bool = True
                 ) -> dict[str, Any]:
    """Run ``workload`` through the loop of the module docstring; returns the figures
    (see :func:`summarize`) plus ``steps``.

    kv_capacity_blocks: usable blocks of the pool (``num_blocks - 1``: not the null
        block), shared by every group of ``kv_cache_config``; a request's blocks are
        each group spec's ``max_num_blocks_per_req(plan_context, tokens)`` summed.
        ``plan_context``: the :class:`~kvcore.specs.PlanContext` they read (default
        ``kv_cache_config.max_model_len``, everything else PlanContext's defaults; its
        ``max_num_batched_tokens`` is taken as 1: the decode figure).  Exclusive with
        ``kv_capacity_tokens`` (tokens of one group: the older form).
    max_model_len: requests longer (prompt + output) are rejected on arrival (None: no
        limit).
    reserve_full_prompt: vLLM 0.32's ``scheduler_reserve_full_isl`` (default on, as
        :func:`kvcore.sim.engine.run_engine`): a waiting request is admitted only when
        the KV cache can hold its whole prompt (the admission cap of its specs), not
        only its first chunk.

    Raises ConfigError for a non-positive ``max_num_seqs`` / ``max_num_batched_tokens``
    or a request that can never fit the KV capacity, both capacities given, and for
    arguments of another kind (a ``workload`` that is not a :class:`Workload`, a
    ``time_model`` without ``step_time``, flags that are not bools), naming the
    argument.
    """
    from kvcore.sim.metrics import check_goodput

    # numpy integers as the equal plain int; bool, floats and text refused (named)
    max_num_seqs = check_int(max_num_seqs, "max_num_seqs")
    max_num_batched_tokens = check_int(max_num_batched_tokens, "max_num_batched_tokens")
    if not isinstance(workload, Workload):
        raise ConfigError(f"workload must be a kvcore.sim.fastsim.Workload, got "
                          f"{type(workload).__name__} {shorten(workload)}",
                          field="workload", value=shorten(workload))
    if not callable(getattr(time_model, "step_time", None)):
        raise ConfigError(f"time_model must have a step_time(batch) -> seconds method, "
                          f"got {type(time_model).__name__}", field="time_model",
                          value=type(time_model).__name__)
    if kv_capacity_tokens is not None:
        kv_capacity_tokens = check_int(kv_capacity_tokens, "kv_capacity_tokens", minimum=0)
    if kv_capacity_blocks is not None:
        kv_capacity_blocks = check_int(kv_capacity_blocks, "kv_capacity_blocks", minimum=0)
        if kv_capacity_tokens is not None:
            raise ConfigError("give kv_capacity_blocks or kv_capacity_tokens, not both",
                              field="kv_capacity_blocks", value=kv_capacity_blocks)
    if max_model_len is not None:
        max_model_len = check_int(max_model_len, "max_model_len", minimum=1, maximum=1 << 62)
    if not isinstance(reserve_full_prompt, bool):
        raise ConfigError(f"reserve_full_prompt must be True or False, got "
                          f"{shorten(reserve_full_prompt)}", field="reserve_full_prompt",
                          value=shorten(reserve_full_prompt))
    if not isinstance(enable_prefix_caching, bool):
        raise ConfigError(f"enable_prefix_caching must be True or False, got "
                          f"{shorten(enable_prefix_caching)}", field="enable_prefix_caching",
                          value=shorten(enable_prefix_caching))
    if goodput is not None:
        goodput = check_goodput(goodput)
    max_steps = check_int(max_steps, "max_steps", maximum=1 << 62)
    w = workload
    cap: float = kv_capacity_tokens if kv_capacity_tokens is not None else math.inf
    need = _tokens
    if kv_capacity_blocks is not None:
        cap = kv_capacity_blocks
        need = _blocks_held(kv_cache_config, plan_context)
    mml = max_model_len if max_model_len is not None else math.inf
    if w.requests:
        reqs = [_Req(i, p, o) for i, (p, o, _) in enumerate(w.requests)]
    else:
        reqs = [_Req(i, w.prefix_len + w.input_len, w.output_len)
                for i in range(w.num_prompts)]
    served = [r for r in reqs if r.prompt + r.output <= mml]
    big = max(served or reqs, key=lambda r: r.prompt + r.output)
    if served and need(big.prompt + big.output) > cap:
        what = (f"{kv_capacity_blocks} blocks" if kv_capacity_blocks is not None
                else f"{kv_capacity_tokens} tokens")
        raise ConfigError(f"a request of {big.prompt} + {big.output} tokens does not fit "
                          f"the KV cache of {what}", field="kv_cache",
                          value=kv_capacity_blocks if kv_capacity_blocks is not None
                          else kv_capacity_tokens)
    from kvcore.sim.engine import resolve_request_overhead

    if not isinstance(enable_chunked_prefill, bool):
        raise ConfigError(f"enable_chunked_prefill must be True or False, got "
                          f"{enable_chunked_prefill!r}", field="enable_chunked_prefill",
                          value=repr(enable_chunked_prefill))
    overhead = resolve_request_overhead(time_model)
    # the API server's serial stage (kvcore.sim.engine's module docstring): the engine
    # sees a request at max(sent + overhead, the previous one's + api)
    api = resolve_request_overhead(time_model, None, "api_server_s")
    # the way back's serial stage (the engine's): a step's chunks reach the client at
    # out_next = max(out_next, step end) + stream x chunks
    stream = resolve_request_overhead(time_model, None, "api_stream_s")
    out_next = -math.inf
    longest = max(r.prompt for r in reqs)
    if not enable_chunked_prefill and longest > max_num_batched_tokens:
        raise ConfigError(f"max_num_batched_tokens ({max_num_batched_tokens}) is smaller "
                          f"than a {longest}-token prompt with chunked prefill disabled;"
                          " vLLM refuses a budget below max_model_len: raise "
                          "max_num_batched_tokens", field="max_num_batched_tokens",
                          value=max_num_batched_tokens)
    api_next = -math.inf
    # pipeline parallelism: a step is a round of that many batches (as the engine)
    bif = getattr(time_model, "batches_in_flight", 1)
    bif = as_int(bif) or 1  # numpy integers too
    bif = bif if bif >= 1 else 1
    arrivals = w.arrival_times()
    limit = w.max_concurrency or len(reqs)
    order = sorted(range(len(reqs)), key=lambda i: arrivals[i])
    pending = deque(order)  # not yet sent
    transit: deque[_Req] = deque()  # sent, not yet seen by the engine
    waiting: deque[_Req] = deque()
    running: list[_Req] = []
    in_flight = 0
    # when each free slot of the client's semaphore was freed (offsets of the clock,
    # oldest first; -inf: free from the start): a request is sent at its arrival or,
    # all slots taken then, when one frees (vLLM's get_request + semaphore), even when
    # that falls inside an engine step (the engine sees it at the step's end)
    freed: deque[float] = deque([-math.inf] * min(limit, len(reqs)))
    used = 0  # KV held (blocks of the pool, or tokens: see need)
    prefix_cached = False
    # the clock: base + now, base rebased on the next arrival whenever nothing is in
    # flight, so every request's times are offsets of one small clock (exact latencies
    # at any absolute time, as kvcore.sim.engine)
    base = 0.0
    now = 0.0
    steps = 0
    from kvcore.sim.timing import guarded_step_time

    step_time = guarded_step_time(time_model)  # a user's model that raises is named
    decodes: dict[int, ScheduledRequest] = {}
    n_done = 0
    while n_done < len(reqs):
        while pending and in_flight < limit and arrivals[pending[0]] - base <= now:
            r = reqs[pending.popleft()]
            r.sent = max(arrivals[r.idx] - base, freed.popleft())
            if r.prompt + r.output > mml:
                # the API server refuses it: the client has the error after its share
                # of the way (the engine's rule), and its slot is free again then
                r.rejected = True
                n_done += 1
                bisect.insort(freed, r.sent + overhead)
                continue
            r.seen = r.sent + overhead
            if api:
                if api_next > r.seen:
                    r.seen = api_next
                api_next = r.seen + api
            transit.append(r)
            in_flight += 1
        while transit and transit[0].seen <= now:
            waiting.append(transit.popleft())
        if n_done >= len(reqs):
            break  # the last requests were rejected on arrival
        if not running and not waiting:
            if not transit:  # nothing in flight: rebase on the next arrival
                a = arrivals[pending[0]]
                if a - base > now and out_next <= a - base:
                    api_next -= a - base
                    out_next -= a - base
                    base, now = a, 0.0
                    freed = deque([-math.inf] * len(freed))  # all before the arrival
                elif a - base > now:  # replies still on their way back: no rebase
                    now = a - base
                continue
            nxt = transit[0].seen
            if pending and in_flight < limit:
                nxt = min(nxt, arrivals[pending[0]] - base)
            now = max(now, nxt)
            continue
        budget = max_num_batched_tokens * bif
        sched: list[tuple[_Req, int]] = []
        preempted_now = False
        i = 0
        while i < len(running) and budget > 0:
            r = running[i]
            n = min(r.prompt + r.generated - r.computed, budget, max_num_batched_tokens)
            new = need(r.computed + n, n)
            while used - r.held + new > cap and running[-1] is not r:
                victim = running.pop()  # preempt the newest (recompute)
                used -= victim.held
                victim.held = victim.computed = 0
                victim.preempted += 1
                preempted_now = True
                waiting.appendleft(victim)
            if used - r.held + new > cap:  # r itself is the newest: preempt it
                running.pop()
                used -= r.held
                r.held = r.computed = 0
                r.preempted += 1
                preempted_now = True
                waiting.appendleft(r)
                break
            used += new - r.held
            r.held = new
            sched.append((r, n))
            budget -= n
            i += 1
        # vLLM's Scheduler admits waiting requests only in a step that preempted none
        # (``if not preempted_reqs``): a preempted request is not taken back at once
        while not preempted_now and waiting and len(running) < max_num_seqs and \
                budget > 0:
            r = waiting[0]
            hit = 0
            if enable_prefix_caching and prefix_cached and r.computed == 0 and w.prefix_len:
                hit = (w.prefix_len // 16) * 16
            total = r.prompt + r.generated
            if not enable_chunked_prefill and total - hit > min(budget,
                                                                 max_num_batched_tokens):
                break  # chunked prefill off: whole prompts only (as the engine)
            n = min(total - hit, budget, max_num_batched_tokens)
            new = need(hit + n, n)
            if used + new > cap or (reserve_full_prompt and used + need(
                    total, max_num_batched_tokens) > cap):
                break
            waiting.popleft()
            r.computed = hit
            used += new
            r.held = new
            running.append(r)
            sched.append((r, n))
            budget -= n
        if not sched:  # nothing fits: wait for arrivals (cannot happen with a valid cap)
            if transit or pending:
                now = max(now, transit[0].seen if transit else arrivals[pending[0]] - base)
                continue
            raise ConfigError("the KV cache cannot hold any waiting request",
                              field="kv_cache", value=kv_capacity_tokens)
        srs = []
        for r, n in sched:
            if n == 1 and r.generated:  # a decode: one frozen object per context length
                sr = decodes.get(r.computed)
                if sr is None:
                    sr = decodes[r.computed] = ScheduledRequest(1, r.computed, False)
            else:
                sr = ScheduledRequest(n, r.computed, True)
            srs.append(sr)
        batch = describe_batch(kv_cache_config, srs)
        now += step_time(batch)
        steps += 1
        if steps > max_steps:
            raise ConfigError(f"simulation exceeded {max_steps} steps", field="max_steps",
                              value=max_steps)
        finished = False
        tnow = now
        if stream:
            k = sum(1 for r, n in sched if r.computed + n >= r.prompt + r.generated)
            if k:
                tnow = out_next = max(out_next, now) + stream * k
        for r, n in sched:
            r.computed += n
            if r.computed < r.prompt + r.generated:
                continue  # a chunk of a prompt (or of a recompute): no token yet
            if r.first_token < 0:
                r.first_token = tnow
            r.generated += 1
            r.token_times.append(tnow)
            if r.generated >= r.output:
                r.done = tnow
                used -= r.held
                r.held = 0
                finished = True
                n_done += 1
                in_flight -= 1
                freed.append(tnow)
        if w.prefix_len and not prefix_cached:
            prefix_cached = any(r.computed >= w.prefix_len for r, _ in sched)
        if finished:
            running = [r for r in running if r.done < 0]
    # vLLM's benchmark_duration runs from the benchmark's start (serve.py: get_request
    # sleeps each delay from start_ts), so it holds the wait before the first send, as
    # kvcore.sim.engine's does
    fig = summarize(reqs, base + max(now, out_next), 0.0, goodput)
    fig["steps"] = steps
    return fig
