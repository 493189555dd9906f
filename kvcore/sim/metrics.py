"""Serving figures of a clocked run, named and defined as ``vllm bench serve
--save-result`` names them (vLLM 0.32 ``vllm/benchmarks/serve.py``,
``calculate_metrics`` and ``benchmark``).

Per completed request (one that was not rejected): ``ttft`` = first token time - send
time; ``latency`` (E2EL) = last token time - send time; ``tpot`` = (latency - ttft) /
(output_len - 1) for output_len > 1 (requests of one token have no TPOT, and count as
TPOT 0 for goodput); ``itl`` = every gap between consecutive streamed chunks (one per
token, or one per engine step under speculative decoding, ``SimRequest.itl``).  Mean,
median, std (population, numpy's default) and percentiles (numpy's linear
interpolation) in milliseconds; an empty list counts as ``[0]`` (vLLM's ``np.mean(x or
0)``).  ``duration`` is the benchmark duration (time of the last finish, s);
throughputs divide by it.  The API server's share of each request
(``request_overhead_s`` of the time model) is in the run itself (the engine sees a
request that long after its send, :mod:`kvcore.sim.engine`), so every figure here, the
per-request lists of ``--save-detailed`` and a fleet's figures include it alike.  ``request_goodput``: completed requests meeting every SLO of
``--goodput`` (``ttft``, ``tpot``, ``e2el`` in ms, value >= latency) per second, None
without ``--goodput``.  ``max_output_tokens_per_s`` / ``max_concurrent_requests``: the
busiest one-second bucket from the first send, as vLLM buckets them.

kvcore adds: ``failed`` (rejected: prompt plus output past ``max_model_len`` or larger
than the KV cache), ``preemptions``, ``steps``, ``prefix_hit_ratio`` (hit tokens over
prompt tokens of first admissions), ``mean_kv_usage`` (time-weighted over steps) and
``peak_kv_usage`` (fractions of usable blocks), ``kv_usage`` (up to 200 ``[t_s,
usage]`` samples).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import Any

from kvcore.errors import ConfigError, shorten
from kvcore.units import check_int, check_items, check_number

__all__ = ["GOODPUT_METRICS", "parse_goodput", "check_goodput", "check_percentiles",
           "serving_metrics", "client_queue_metrics",
           "format_summary",
           "mean", "median", "std", "percentile"]

#: SLO names ``--goodput`` accepts (vLLM's VALID_NAMES)
GOODPUT_METRICS = ("ttft", "tpot", "e2el")


def _values(xs: Any, fn: str) -> Sequence[float]:
    """``xs`` as a sequence of numbers (ConfigError naming ``xs`` otherwise)."""
    from collections.abc import Mapping

    if isinstance(xs, (list, tuple)):
        seq = xs
    elif isinstance(xs, (str, bytes, bytearray, Mapping)) or not isinstance(xs, Iterable):
        raise ConfigError(f"{fn}: xs = {shorten(xs)} must be a sequence of numbers",
                          field="xs", value=shorten(xs))
    else:
        seq = list(xs)
    return seq


def _numeric(fn: str, xs: Any, compute: Any) -> float:
    try:
        return float(compute())
    except (TypeError, OverflowError):
        bad = next((x for x in xs if isinstance(x, bool) or not isinstance(
            x, (int, float))), None)
        raise ConfigError(f"{fn}: xs must hold numbers, got {shorten(bad)} "
                          f"({type(bad).__name__})" if bad is not None else
                          f"{fn}: xs holds a number too large for a float",
                          field="xs", value=shorten(bad)) from None


def mean(xs: Sequence[float]) -> float:
    """numpy.mean(xs or 0).  Raises ConfigError (field ``xs``) unless ``xs`` is a
    sequence of numbers."""
    seq = _values(xs, "mean")
    return _numeric("mean", seq, lambda: sum(seq) / len(seq) if seq else 0.0)


def std(xs: Sequence[float]) -> float:
    """numpy.std(xs or 0) (population standard deviation).  Raises ConfigError (field
    ``xs``) unless ``xs`` is a sequence of numbers."""
    seq = _values(xs, "std")
    if not seq:
        return 0.0
    m = mean(seq)
    return _numeric("std", seq, lambda: math.sqrt(sum((x - m) ** 2 for x in seq)
                                                  / len(seq)))


def percentile(xs: Sequence[float], p: float, *, presorted: bool = False) -> float:
    """numpy.percentile(xs or 0, p) (linear interpolation between closest ranks).

    Raises ConfigError (field ``percentile``) for p outside [0, 100] (numpy raises
    ValueError "Percentiles must be in the range [0, 100]")."""
    from kvcore.units import as_real

    real = as_real(p)  # numpy reals too; bool refused
    if real is None or not 0 <= real <= 100:
        raise ConfigError(f"percentile {shorten(p)}: must be a number in [0, 100]",
                          field="percentile", value=shorten(p))
    p = real
    if not isinstance(presorted, bool):
        raise ConfigError(f"percentile: presorted = {shorten(presorted)} must be True or "
                          f"False", field="presorted", value=shorten(presorted))
    seq = _values(xs, "percentile")
    if not seq:
        return 0.0

    def compute() -> float:
        s = seq if presorted else sorted(seq)
        k = (len(s) - 1) * p / 100.0
        lo = math.floor(k)
        hi = min(lo + 1, len(s) - 1)
        return s[lo] + (s[hi] - s[lo]) * (k - lo)

    return _numeric("percentile", seq, compute)


def median(xs: Sequence[float]) -> float:
    """numpy.median(xs or 0)."""
    return percentile(xs, 50.0)


def parse_goodput(pairs: Iterable[str] | None) -> dict[str, float]:
    """``--goodput ttft:MS tpot:MS e2el:MS`` as vLLM parses it (``parse_goodput`` and
    ``check_goodput_args``): ``{name: milliseconds}``.

    One string is read as whitespace-separated pairs (``"ttft:100 tpot:50"``).
    Raises ConfigError (field ``goodput``) for a pair that is not ``KEY:VALUE`` with a
    number, an unknown name or a negative (or NaN) value.
    """
    from collections.abc import Mapping

    out: dict[str, float] = {}
    if isinstance(pairs, str):
        pairs = pairs.split()
    if pairs is not None and (isinstance(pairs, (bytes, bytearray, Mapping))
                              or not isinstance(pairs, Iterable)):
        raise ConfigError(f"--goodput {shorten(pairs)}: give a list of KEY:VALUE strings "
                          f"(e.g. ['ttft:200', 'tpot:50']), the key one of "
                          f"{', '.join(GOODPUT_METRICS)}", field="goodput",
                          value=shorten(pairs))
    for pair in pairs or ():
        parts = str(pair).split(":")
        try:
            if len(parts) != 2:
                raise ValueError
            value = float(parts[1])
        except ValueError:
            raise ConfigError(f"--goodput {pair!r}: give service level objectives as "
                              f"KEY:VALUE pairs, the key one of {', '.join(GOODPUT_METRICS)}"
                              f" and the value a number of milliseconds (e.g. ttft:200)",
                              field="goodput", value=pair) from None
        name = parts[0]
        if name not in GOODPUT_METRICS:
            raise ConfigError(f"--goodput {pair!r}: unknown metric {name!r}; the service "
                              f"level objective name must be one of "
                              f"{', '.join(GOODPUT_METRICS)}", field="goodput", value=pair)
        if not value >= 0:
            raise ConfigError(f"--goodput {pair!r}: the value must be a number of "
                              f"milliseconds >= 0, got {parts[1]!r}", field="goodput",
                              value=pair)
        out[name] = value
    return out


def _show(value: Any) -> str:
    """A value for a message: a string quoted (``'99'``, not ``99``), cut when long."""
    return shorten(repr(value)) if isinstance(value, str) else shorten(value)


def check_goodput(goodput: Any) -> dict[str, float]:
    """``goodput`` as :func:`serving_metrics` takes it: None or ``{}`` (no SLO), or a
    dict ``{name: milliseconds}`` with names among vLLM's ``VALID_NAMES``
    (:data:`GOODPUT_METRICS`: ttft, tpot, e2el) and values numbers >= 0 (vLLM's
    ``check_goodput_args``; NaN refused, inf: no limit).  Raises ConfigError (field
    ``goodput``) naming the key or value and what is valid; a list of ``"KEY:MS"``
    strings (the CLI's form) is refused with the way to read it
    (:func:`parse_goodput`)."""
    if goodput is None:
        return {}
    if not isinstance(goodput, dict):
        hint = (f"; parse_goodput({_show(goodput)}) reads the CLI's KEY:MS pairs"
                if isinstance(goodput, (str, list, tuple)) else "")
        raise ConfigError(f"goodput must be a dict {{name: milliseconds}} with names "
                          f"among {', '.join(GOODPUT_METRICS)} (vLLM's), got "
                          f"{_show(goodput)}{hint}", field="goodput",
                          value=shorten(goodput))
    out: dict[str, float] = {}
    for name, value in goodput.items():
        if name not in GOODPUT_METRICS:
            raise ConfigError(f"goodput: unknown metric {_show(name)}; the service "
                              f"level objective name must be one of "
                              f"{', '.join(GOODPUT_METRICS)} (vLLM's VALID_NAMES)",
                              field="goodput", value=shorten(name))
        if isinstance(value, bool) or not isinstance(value, (int, float)) or \
                not value >= 0:
            raise ConfigError(f"goodput[{name!r}]: the value must be a number of "
                              f"milliseconds >= 0, got {_show(value)}",
                              field="goodput", value=shorten(value))
        out[name] = float(value)
    return out


def check_percentiles(percentiles: Any) -> list[float]:
    """``percentiles`` as :func:`serving_metrics` takes it: a non-empty list or tuple
    of numbers in [0, 100] (``--metric-percentiles`` read: ``[99.0]``).  Raises
    ConfigError (field ``percentiles``) for a string (``"99"`` would be read per
    character), another type, an empty list or a value out of range."""
    if isinstance(percentiles, (str, bytes)) or \
            not isinstance(percentiles, (list, tuple)) or not percentiles:
        raise ConfigError(f"percentiles must be a non-empty list of numbers in [0, 100] "
                          f"(e.g. [50, 90, 99]), got {_show(percentiles)}",
                          field="percentiles", value=shorten(percentiles))
    from kvcore.units import as_real

    for p in percentiles:
        real = as_real(p)  # numpy reals too; bool refused
        if real is None or not 0 <= real <= 100:
            raise ConfigError(f"percentiles: each must be a number in [0, 100], got "
                              f"{_show(p)} (in {_show(percentiles)})",
                              field="percentiles", value=shorten(p))
    return [float(p) for p in percentiles]


def _stats(prefix: str, xs: list[float], percentiles: Sequence[float]
           ) -> dict[str, float]:
    s = sorted(xs)
    out = {f"mean_{prefix}_ms": mean(xs) * 1000, f"median_{prefix}_ms":
           percentile(s, 50.0, presorted=True) * 1000, f"std_{prefix}_ms": std(xs) * 1000}
    for p in percentiles:
        word = str(int(p)) if int(p) == p else str(p)
        out[f"p{word}_{prefix}_ms"] = percentile(s, p, presorted=True) * 1000
    return out


def client_queue_metrics(requests: Sequence[Any], *, max_concurrency: int | None,
                         request_rate: float | None = math.inf,
                         percentiles: Sequence[float] = (99.0,),
                         selected: Sequence[str] | None = None) -> dict[str, float]:
    """vLLM 0.32's client-side queue figures (benchmarks/serve.py:975-985, 1318-1327,
    1398-1410): under ``max_concurrency`` each request's ``client_queue_time`` is
    ``start_time - request_arrival_time``, the wait for the client's semaphore (here
    ``sent - arrival``, s); ``e2el_including_client_queue`` is ``latency +
    client_queue_time`` and exists only with a finite ``request_rate`` (``None``: a
    trace's own arrivals, finite).  Over the finished requests, as
    ``{mean,median,std,pNN}_{metric}_ms`` (ms), each metric only when it is in
    ``selected`` (vLLM's ``process_one_metric``; ``None``: neither, as vLLM's default
    ``ttft,tpot,itl``).  Without ``max_concurrency``: ``{}`` (vLLM reports neither)."""
    percentiles = check_percentiles(percentiles)
    if selected is not None and (isinstance(selected, (str, bytes)) or not isinstance(
            selected, (list, tuple, set, frozenset)) or not all(
            isinstance(m, str) for m in selected)):
        raise ConfigError(f"selected must be a list of metric names (e.g. "
                          f"['client_queue_time']), got {_show(selected)}",
                          field="selected", value=shorten(selected))
    if max_concurrency is None or not selected:
        return {}
    done = [r for r in requests if not r.rejected and r.finish >= 0]
    queue = [max(0.0, r.sent - r.arrival) for r in done]
    out: dict[str, float] = {}
    if "client_queue_time" in selected:
        out.update(_stats("client_queue_time", queue, percentiles))
    if "e2el_including_client_queue" in selected and (
            request_rate is None or not math.isinf(request_rate)):
        out.update(_stats("e2el_including_client_queue",
                          [r.latency + q for r, q in zip(done, queue)], percentiles))
    return out


def serving_metrics(result: Any, *, goodput: dict[str, float] | None = None,
                    percentiles: Sequence[float] = (99.0,)) -> dict[str, Any]:
    """The figures of the module docstring for an
    :class:`~kvcore.sim.engine.EngineResult` (times in s, latencies in ms, throughputs
    per s, usage as fractions), from each request's ``token_times`` (seconds after its
    send: the API server's share already in them).

    Raises ConfigError (field ``result``) when ``result`` is not an EngineResult-like
    object (``requests``, ``duration``, ``step_end``, ``step_usage``), and for a bad
    ``goodput`` (:func:`check_goodput`: an unknown key names it and lists ttft, tpot,
    e2el) or ``percentiles`` (:func:`check_percentiles`)."""
    goodput = check_goodput(goodput)
    percentiles = check_percentiles(percentiles)
    if not all(hasattr(result, a) for a in ("requests", "duration", "step_end",
                                              "step_usage", "steps")):
        raise ConfigError(f"serving_metrics: result must be an EngineResult (from "
                          f"run_engine), got {type(result).__name__}", field="result",
                          value=type(result).__name__)
    done = [r for r in result.requests if not r.rejected and r.finish >= 0]
    failed = sum(1 for r in result.requests if r.rejected)
    dur = result.duration
    if done and not dur > 0:
        # requests completed in no time: every throughput would read 0 (or divide by 0)
        raise ConfigError(f"serving_metrics: {len(done)} requests completed in a run of "
                          f"duration {dur!r} s: the step-time model's steps take no time "
                          f"(e.g. ConstantTimeModel(0.0)); give steps a duration > 0 "
                          f"(step_s or token_s)", field="duration", value=repr(dur))
    ttfts: list[float] = []
    e2els: list[float] = []
    tpots: list[float] = []
    all_tpots: list[float] = []
    itls: list[float] = []
    total_in = total_out = 0
    for r in done:
        tt = r.token_times
        n = len(tt)
        ttft = tt[0]
        lat = tt[-1]
        tpot = 0.0
        if n > 1:
            tpot = (lat - ttft) / (n - 1)
            tpots.append(tpot)
            itls.extend(r.itl)  # per streamed chunk (SimRequest.itl)
        all_tpots.append(tpot)
        ttfts.append(ttft)
        e2els.append(lat)
        total_in += r.prompt_len
        total_out += n
    good = None
    if goodput:
        slo = [(vals, goodput[k] / 1000.0) for k, vals in
               (("ttft", ttfts), ("tpot", all_tpots), ("e2el", e2els)) if k in goodput]
        n_good = sum(1 for i in range(len(done)) if all(s >= v[i] for v, s in slo))
        good = n_good / dur if dur > 0 else 0.0
    per_s = (lambda x: x / dur) if dur > 0 else (lambda x: 0.0)
    out: dict[str, Any] = {
        "duration": dur,
        "completed": len(done),
        "failed": failed,
        "total_input_tokens": total_in,
        "total_output_tokens": total_out,
        "request_throughput": per_s(len(done)),
        "request_goodput": good,
        "output_throughput": per_s(total_out),
        "total_token_throughput": per_s(total_in + total_out),
    }
    out.update(_peaks(done))
    out.update(_stats("ttft", ttfts, percentiles))
    out.update(_stats("tpot", tpots, percentiles))
    out.update(_stats("itl", itls, percentiles))
    out.update(_stats("e2el", e2els, percentiles))
    ends, use = result.step_end, result.step_usage
    mean_use = 0.0
    if ends:
        prev = 0.0
        acc = 0.0
        for t, u in zip(ends, use):
            acc += (t - prev) * u
            prev = t
        mean_use = acc / ends[-1] if ends[-1] > 0 else mean(use)
    stride = max(1, len(ends) // 200)
    out.update({
        "steps": result.steps,
        "preemptions": result.preemptions,
        "prefix_hit_ratio": result.prefix_hit_ratio,
        "mean_kv_usage": mean_use,
        "peak_kv_usage": max(use) if use else 0.0,
        "kv_usage": [[round(ends[i], 6), round(use[i], 6)]
                     for i in range(0, len(ends), stride)],
    })
    return out


def _peaks(done: Sequence[Any]) -> dict[str, Any]:
    """vLLM's max_output_tokens_per_s and max_concurrent_requests (one-second buckets
    from the earliest send).  Only the seconds that hold an event are kept (a dict, not
    one slot per second of the run), so a run spanning 1e15 s costs what its events
    cost."""
    if not done:
        return {"max_output_tokens_per_s": 0.0, "max_concurrent_requests": 0}
    t0 = min(r.sent for r in done)
    tok: dict[int, int] = {}
    conc: dict[int, int] = {}
    for r in done:
        s0 = r.sent - t0
        for t in r.token_times:
            b = int(s0 + t)
            if b >= 0:
                tok[b] = tok.get(b, 0) + 1
        a, z = int(s0), int(s0 + r.token_times[-1])
        conc[a] = conc.get(a, 0) + 1
        conc[z + 1] = conc.get(z + 1, 0) - 1
    run = best = 0
    for k in sorted(conc):
        run += conc[k]
        best = max(best, run)
    return {"max_output_tokens_per_s": float(max(tok.values(), default=0)),
            "max_concurrent_requests": best}


#: the figures :func:`format_summary` prints unconditionally
_SUMMARY_KEYS = (
    'completed', 'duration', 'failed', 'max_concurrent_requests',
    'max_output_tokens_per_s', 'mean_kv_usage', 'output_throughput', 'peak_kv_usage',
    'preemptions', 'prefix_hit_ratio', 'request_throughput', 'steps',
    'total_input_tokens', 'total_output_tokens', 'total_token_throughput')


def format_summary(fig: dict[str, Any], *, max_concurrency: int | None = None,
                   request_rate: float = math.inf, extra: Sequence[tuple[str, str]] = ()
                   ) -> str:
    """The text block ``vllm bench serve`` prints ("Serving Benchmark Result"), the
    same labels and formats, then kvcore's lines.

    fig: :func:`serving_metrics`'s dict; extra: ``(label, value)`` lines.  Raises
    ConfigError naming ``fig``, ``extra``, ``max_concurrency`` or ``request_rate`` for
    values of another kind."""
    from collections.abc import Mapping

    if not isinstance(fig, Mapping):
        raise ConfigError(f"format_summary: fig must be serving_metrics()'s dict, got "
                          f"{type(fig).__name__} {shorten(fig)}", field="fig",
                          value=shorten(fig))
    missing = [k for k in _SUMMARY_KEYS if k not in fig]
    if missing:
        raise ConfigError(f"format_summary: fig lacks {', '.join(missing)} (give "
                          f"serving_metrics()'s dict)", field="fig", value=missing[0])
    extra = check_items(extra, tuple, "extra")
    if any(len(e) != 2 for e in extra):
        raise ConfigError("format_summary: extra must hold (label, value) pairs",
                          field="extra", value=shorten(extra))
    if max_concurrency is not None:
        check_int(max_concurrency, "max_concurrency")
    check_number(request_rate, "request_rate", minimum=0.0, allow_inf=True,
                 exclusive_minimum=True)
    lines = ["{s:{c}^{n}}".format(s=" Serving Benchmark Result ", n=50, c="=")]

    def row(label: str, value: Any, fmt: str = "{:<10}") -> None:
        lines.append(f"{label:<40} " + fmt.format(value))

    f2 = "{:<10.2f}"
    row("Successful requests:", fig["completed"])
    row("Failed requests:", fig["failed"])
    if max_concurrency is not None:
        row("Maximum request concurrency:", max_concurrency)
    if not math.isinf(request_rate):
        row("Request rate configured (RPS):", request_rate, f2)
    row("Benchmark duration (s):", fig["duration"], f2)
    row("Total input tokens:", fig["total_input_tokens"])
    row("Total generated tokens:", fig["total_output_tokens"])
    row("Request throughput (req/s):", fig["request_throughput"], f2)
    if fig.get("request_goodput") is not None:
        row("Request goodput (req/s):", fig["request_goodput"], f2)
    row("Output token throughput (tok/s):", fig["output_throughput"], f2)
    row("Peak output token throughput (tok/s):", fig["max_output_tokens_per_s"], f2)
    row("Peak concurrent requests:", fig["max_concurrent_requests"], f2)
    row("Total token throughput (tok/s):", fig["total_token_throughput"], f2)
    for key, name, header in (("ttft", "TTFT", "Time to First Token"),
                              ("tpot", "TPOT", "Time per Output Token (excl. 1st token)"),
                              ("itl", "ITL", "Inter-token Latency"),
                              ("e2el", "E2EL", "End-to-end Latency"),
                              ("client_queue_time", "Client Queue Time",
                               "Client-side Queueing"),
                              ("e2el_including_client_queue", "E2EL incl. Client Queue",
                               "Queue-inclusive End-to-end Latency")):
        if f"mean_{key}_ms" not in fig:  # not among --percentile-metrics (vLLM's)
            continue
        lines.append("{s:{c}^{n}}".format(s=header, n=50, c="-"))
        row(f"Mean {name} (ms):", fig[f"mean_{key}_ms"], f2)
        row(f"Median {name} (ms):", fig[f"median_{key}_ms"], f2)
        for k, v in fig.items():
            if k.startswith("p") and k.endswith(f"_{key}_ms") and k[1].isdigit():
                row(f"P{k[1:-len(key) - 4]} {name} (ms):", v, f2)
    if fig.get("spec_decode_acceptance_rate") is not None:
        # vllm bench serve's block (serve.py: printed when draft tokens were counted)
        lines.append("{s:{c}^{n}}".format(s="Speculative Decoding", n=50, c="-"))
        row("Acceptance rate (%):", fig["spec_decode_acceptance_rate"], f2)
        row("Acceptance length:", fig["spec_decode_acceptance_length"], f2)
        row("Drafts:", fig["spec_decode_num_drafts"])
        row("Draft tokens:", fig["spec_decode_draft_tokens"])
        row("Accepted tokens:", fig["spec_decode_accepted_tokens"])
        per_pos = fig.get("spec_decode_per_position_acceptance_rates") or []
        if per_pos:
            lines.append("Per-position acceptance (%):")
            for i, rate in enumerate(per_pos):
                row(f"  Position {i}:", rate * 100, f2)
    lines.append("{s:{c}^{n}}".format(s=" kvcore ", n=50, c="-"))
    row("Steps:", fig["steps"])
    row("Preemptions:", fig["preemptions"])
    row("Prefix-hit ratio (%):", 100 * fig["prefix_hit_ratio"], f2)
    row("Mean KV-cache usage (%):", 100 * fig["mean_kv_usage"], f2)
    row("Peak KV-cache usage (%):", 100 * fig["peak_kv_usage"], f2)
    for label, value in extra:
        row(label, value)
    lines.append("=" * 50)
    return "\n".join(lines)


def save_plot(fig: Any, path: str) -> None:
    """Write a matplotlib figure to ``path`` (PNG, 100 dpi) and close it; the one save
    of every ``--plot`` of ``kvcore simulate`` (replay, clocked, fleet).

    Raises ConfigError naming ``--plot`` when the file cannot be written."""
    import matplotlib.pyplot as plt

    try:
        fig.savefig(path, dpi=100)
    except (OSError, ValueError) as exc:
        raise ConfigError(f"--plot {path}: cannot write the plot ({exc})", field="plot",
                          value=path) from exc
    finally:
        plt.close(fig)
