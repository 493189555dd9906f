"""A small clocked serving loop for the step-time model's accuracy harness and the tuner.

This is *not* the vLLM-faithful scheduler (that is :mod:`kvcore.sim.engine`); it is
a token-level loop, without a block manager, that follows the same rules closely
enough for steady-state figures, and runs fast enough to fit coefficients and to
search configurations:

* **Arrivals** as ``vllm bench serve`` sends them: every request at once
  (``request_rate=inf``) or Poisson / gamma arrivals of ``request_rate`` per second
  with vLLM's ``burstiness`` (gamma shape; intervals of mean ``1 / request_rate``);
  at most ``max_concurrency`` requests in flight (the client's semaphore: a request is
  sent when a slot frees, and its TTFT counts from then).
* **Each step** (vLLM v1 ``Scheduler.schedule``): running requests first, in admission
  order, each taking 1 token (decode) or its next prefill chunk, within
  ``max_num_batched_tokens``; then waiting requests first come first served while
  fewer than ``max_num_seqs`` run and budget is left (chunked prefill: a prompt may
  be split over steps).  A prefix hit (``random_prefix_len`` shared tokens, with
  prefix caching, after the first request computed them) skips those tokens.
* **KV capacity** in tokens (``kv_capacity_tokens``, e.g. usable blocks x block size
  of the attention group): a request that would not fit waits; a running decode
  that does not fit preempts the newest running request (recompute), as vLLM does.
* The step's duration is ``time_model.step_time(describe_batch(kv_cache_config,
  scheduled))``; its tokens appear at the end of the step; the request's first token
  comes with the step that finishes its prompt.  ``request_overhead_s`` of the model
  (the API server's tokenisation and transport, if it has one) is the time between the
  client sending a request and the engine seeing it: it is inside every TTFT and
  end-to-end latency, inside the run's duration, and a closed loop's next request is
  sent only when the previous one is back (the engine idles meanwhile at concurrency 1).

Figures are named as ``vllm bench serve --save-result`` names them.
"""

from __future__ import annotations

import math
import random
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from kvcore.errors import ConfigError
from kvcore.sim.timing import ScheduledRequest, StepTimeModel, describe_batch

__all__ = ["Workload", "run_workload", "percentile", "summarize"]


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
    seed: of the arrival process.
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
        for name in ("input_len", "output_len", "num_prompts"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ConfigError(f"{name} must be a positive int, got {v!r}",
                                  field=name, value=v)
        if self.max_concurrency is not None and (
                not isinstance(self.max_concurrency, int) or self.max_concurrency < 1):
            raise ConfigError(f"max_concurrency must be a positive int or None, got "
                              f"{self.max_concurrency!r}", field="max_concurrency",
                              value=self.max_concurrency)
        if not (self.request_rate > 0):
            raise ConfigError(f"request_rate must be > 0 (inf: all at once), got "
                              f"{self.request_rate!r}", field="request_rate",
                              value=self.request_rate)
        if not (self.burstiness > 0):
            raise ConfigError(f"burstiness must be > 0, got {self.burstiness!r}",
                              field="burstiness", value=self.burstiness)

    def arrival_times(self) -> list[float]:
        """Send times before the concurrency cap (seconds), as vLLM's
        ``get_request`` draws them: gamma(shape=burstiness, scale=1/(rate*burstiness))."""
        if self.requests:
            return [a for _, _, a in self.requests]
        if math.isinf(self.request_rate):
            return [0.0] * self.num_prompts
        rng = random.Random(self.seed)
        theta = 1.0 / (self.request_rate * self.burstiness)
        t = 0.0
        out = []
        for _ in range(self.num_prompts):
            out.append(t)
            t += rng.gammavariate(self.burstiness, theta)
        return out


@dataclass
class _Req:
    idx: int
    prompt: int
    output: int
    sent: float = -1.0
    computed: int = 0
    generated: int = 0
    first_token: float = -1.0
    token_times: list[float] = field(default_factory=list)
    done: float = -1.0
    preempted: int = 0


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
    """``vllm bench serve`` figures of finished requests (times in ms)."""
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


def run_workload(time_model: StepTimeModel, kv_cache_config: Any, workload: Workload, *,
                 max_num_seqs: int = 256, max_num_batched_tokens: int = 8192,
                 kv_capacity_tokens: int | None = None, enable_prefix_caching: bool = True,
                 goodput: dict[str, float] | None = None,
                 max_steps: int = 10_000_000) -> dict[str, Any]:
    """Run ``workload`` through the loop of the module docstring; returns the figures
    (see :func:`summarize`) plus ``steps``.

    Raises ConfigError for a non-positive ``max_num_seqs`` / ``max_num_batched_tokens``
    or a request that can never fit ``kv_capacity_tokens``.
    """
    for name, v in (("max_num_seqs", max_num_seqs),
                    ("max_num_batched_tokens", max_num_batched_tokens)):
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise ConfigError(f"{name} must be a positive int, got {v!r}", field=name,
                              value=v)
    w = workload
    cap = kv_capacity_tokens if kv_capacity_tokens is not None else math.inf
    if w.requests:
        reqs = [_Req(i, p, o) for i, (p, o, _) in enumerate(w.requests)]
    else:
        reqs = [_Req(i, w.prefix_len + w.input_len, w.output_len)
                for i in range(w.num_prompts)]
    big = max(reqs, key=lambda r: r.prompt + r.output)
    if big.prompt + big.output > cap:
        raise ConfigError(f"a request of {big.prompt} + {big.output} tokens does not fit "
                          f"the KV cache of {kv_capacity_tokens} tokens", field="kv_cache",
                          value=kv_capacity_tokens)
    overhead = float(getattr(time_model, "request_overhead_s", 0.0) or 0.0)
    arrivals = w.arrival_times()
    limit = w.max_concurrency or len(reqs)
    order = sorted(range(len(reqs)), key=lambda i: arrivals[i])
    pending = deque(order)  # not yet sent
    transit: deque[tuple[float, _Req]] = deque()  # sent, not yet seen by the engine
    waiting: deque[_Req] = deque()
    running: list[_Req] = []
    in_flight = 0
    used = 0  # KV tokens held
    prefix_cached = False
    now = 0.0
    steps = 0
    step_time = time_model.step_time
    n_done = 0
    while n_done < len(reqs):
        while pending and in_flight < limit and arrivals[pending[0]] <= now:
            r = reqs[pending.popleft()]
            r.sent = max(arrivals[r.idx], now)
            transit.append((r.sent + overhead, r))  # FIFO: sent times never decrease
            in_flight += 1
        while transit and transit[0][0] <= now:
            waiting.append(transit.popleft()[1])
        if not running and not waiting:
            nxt = [transit[0][0]] if transit else []
            if pending and in_flight < limit:
                nxt.append(arrivals[pending[0]])
            now = max(now, min(nxt))
            continue
        budget = max_num_batched_tokens
        sched: list[tuple[_Req, int]] = []
        i = 0
        while i < len(running) and budget > 0:
            r = running[i]
            n = min(r.prompt + r.generated - r.computed, budget)
            while used + n > cap and running[-1] is not r:
                victim = running.pop()  # preempt the newest (recompute)
                used -= victim.computed
                victim.computed = 0
                victim.preempted += 1
                waiting.appendleft(victim)
            if used + n > cap:  # r itself is the newest: preempt it
                running.pop()
                used -= r.computed
                r.computed = 0
                r.preempted += 1
                waiting.appendleft(r)
                break
            used += n
            sched.append((r, n))
            budget -= n
            i += 1
        while waiting and len(running) < max_num_seqs and budget > 0:
            r = waiting[0]
            hit = 0
            if enable_prefix_caching and prefix_cached and r.computed == 0 and w.prefix_len:
                hit = (w.prefix_len // 16) * 16
            total = r.prompt + r.generated
            n = min(total - hit, budget)
            if used + hit + n > cap:
                break
            waiting.popleft()
            r.computed = hit
            used += hit + n
            running.append(r)
            sched.append((r, n))
            budget -= n
        if not sched:  # nothing fits: wait for arrivals (cannot happen with a valid cap)
            if transit:
                now = max(now, transit[0][0])
                continue
            if pending:
                now = max(now, arrivals[pending[0]])
                continue
            raise ConfigError("the KV cache cannot hold any waiting request",
                              field="kv_cache", value=kv_capacity_tokens)
        batch = describe_batch(kv_cache_config, [
            ScheduledRequest(n, r.computed, n > 1 or r.generated == 0) for r, n in sched])
        now += step_time(batch)
        steps += 1
        if steps > max_steps:
            raise ConfigError(f"simulation exceeded {max_steps} steps", field="max_steps",
                              value=max_steps)
        finished = False
        for r, n in sched:
            r.computed += n
            if r.computed < r.prompt + r.generated:
                continue  # a chunk of a prompt (or of a recompute): no token yet
            if r.first_token < 0:
                r.first_token = now
            r.generated += 1
            r.token_times.append(now)
            if r.generated >= r.output:
                r.done = now
                used -= r.computed
                finished = True
                n_done += 1
                in_flight -= 1
        if w.prefix_len and not prefix_cached:
            prefix_cached = any(r.computed >= w.prefix_len for r, _ in sched)
        if finished:
            running = [r for r in running if r.done < 0]
    first = min(r.sent for r in reqs)
    fig = summarize(reqs, now - first, 0.0, goodput)  # the overhead is in the times
    fig["steps"] = steps
    return fig
