"""Arrivals and datasets as ``vllm bench serve`` makes them.

* :func:`random_dataset`: ``--dataset random`` (vLLM 0.32
  ``vllm/benchmarks/datasets/datasets.py`` ``RandomDataset.sample`` with
  ``get_sampling_params`` of ``datasets/utils.py``): with ``rng =
  numpy.random.default_rng(seed)``, input lengths ``rng.integers(floor(L_in * (1 - r)),
  ceil(L_in * (1 + r)) + 1, n)``, then output lengths the same way from ``L_out`` (low
  at least 1), then vocabulary offsets; ``r`` is one ratio for both, or vLLM's dict
  ``{"input": r_in, "output": r_out}`` (``_resolve_range_ratios``; the CLI's
  ``--random-range-ratio`` takes a float or that JSON, :func:`parse_range_ratio`); every prompt is ``prefix_len`` shared tokens
  followed by its own ``input_len`` tokens (prompt length ``prefix_len + input_len``).
  kvcore has no tokenizer: it counts no special tokens (vLLM subtracts the tokenizer's
  ``num_special_tokens_to_add()``, 1 for Llama's BOS, from ``L_in``), and the token ids
  are kvcore's synthetic ones (:mod:`kvcore.sim.tokens`): the prefix is shared, the rest
  unique, which is what the prefix cache sees of vLLM's prompts.  With numpy the lengths
  equal vLLM's for the same ``--seed``; without it they come from :mod:`random`
  (same distribution, other values).
* :func:`arrival_times`: ``--request-rate`` / ``--burstiness`` (``serve.py``
  ``get_request``): ``rate = inf`` sends everything at t = 0; otherwise the gaps are
  ``gamma(shape=burstiness, scale=1 / (rate * burstiness))`` drawn from numpy's global
  generator seeded with ``--seed`` (``np.random.seed(seed)`` in ``serve.py``), the first
  request included, accumulated and rescaled so the last arrival is at ``n / rate``
  seconds; ``burstiness = inf`` gives even gaps ``1 / rate``.  With a ramp-up
  (``--ramp-up-strategy linear|exponential --ramp-up-start-rps A --ramp-up-end-rps B``,
  ``serve.py`` ``_get_current_request_rate``) request ``i`` of ``n`` draws its gap at
  ``A + (B - A) * i / max(n - 1, 1)`` (linear) or ``A * (B / A) ** (i / max(n - 1, 1))``
  (exponential) requests per second, and the times are not rescaled
  (:func:`check_ramp_up` is vLLM's validation).
* :func:`with_arrivals`: the requests with those arrival times (trace timestamps are
  replaced).
"""

from __future__ import annotations

import math
import numbers
import random
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from kvcore.errors import ConfigError, shorten
from kvcore.sim.traces import TraceRequest
from kvcore.units import as_int, as_real, bound, check_items, check_number, plain_int

__all__ = ["random_dataset", "arrival_times", "with_arrivals", "parse_range_ratio",
           "resolve_range_ratios", "check_ramp_up", "RAMP_UP_STRATEGIES",
           "RANDOM_PREFIX_STREAM", "RANDOM_STREAM_BASE", "MAX_SEED"]

#: ``vllm bench serve --ramp-up-strategy`` choices (benchmarks/serve.py)
RAMP_UP_STRATEGIES = ("linear", "exponential")

#: token streams of the random dataset (apart from every trace reader's streams)
RANDOM_PREFIX_STREAM = 5 << 29
RANDOM_STREAM_BASE = (5 << 29) + 1
_OUTPUT_BASE = 7 << 29


def _np() -> Any:
    try:
        import numpy
    except ImportError:  # pragma: no cover - numpy is optional
        return None
    return numpy


#: the most requests a workload may hold: the engine runs ~300 requests per CPU second,
#: so 10^6 is about an hour (ROUTING.md's scale run); more is refused, not left to run
#: (or allocate) for days
MAX_NUM_PROMPTS = 1_000_000

#: the largest ``seed``: vLLM's ``vllm bench serve`` seeds numpy's global generator with
#: ``--seed`` (``np.random.seed(args.seed)``, benchmarks/serve.py), which takes
#: [0, 2**32 - 1] only, and kvcore's arrivals draw from ``RandomState(seed)`` alike
MAX_SEED = 2**32 - 1


def _seed(seed: Any) -> int:
    """``seed`` as a plain int (numpy integers too; bool refused)."""
    number = as_int(seed)
    if number is None or not 0 <= number <= MAX_SEED:
        raise ConfigError(f"seed must be an integer in [0, 2**32 - 1] (numpy's "
                          f"RandomState range, as vLLM's np.random.seed(--seed)), got "
                          f"{seed!r}", field="seed", value=seed)
    return number


def _int(name: str, value: Any, low: int, high: int | None = None) -> int:
    """``value`` as a plain int in [low, high] (numpy integers too; bool refused)."""
    number = as_int(value)
    if number is None or number < low or (high is not None and number > high):
        top = f" and <= {high:,}" if high is not None else ""
        raise ConfigError(f"{name} must be an integer >= {low}{top}, got {value!r}",
                          field=name, value=value)
    return number


RangeRatio = float | dict[str, float]


def _ratio(name: str, v: Any, given: Any) -> float:
    # vLLM reads each ratio with float() (benchmarks/datasets/utils.py
    # _resolve_range_ratios): numeric strings such as "0.3" are accepted as well
    try:
        f = float(v)
    except (TypeError, ValueError, OverflowError):
        f = math.nan
    if not 0.0 <= f < 1.0:
        raise ConfigError(f"random_range_ratio: {name} must be a number in [0, 1), got "
                          f"{v!r} (in {given!r})", field="random_range_ratio",
                          value=repr(given))
    return f


def range_ratio_bounds(length: int, ratio: float) -> tuple[int, int]:
    """``(floor(length x (1 - ratio)), ceil(length x (1 + ratio)))``, tokens: the
    inclusive range vLLM's random dataset draws a length from
    (``RandomDataset.get_sampling_params``@0.32)."""
    return math.floor(length * (1 - ratio)), math.ceil(length * (1 + ratio))


def resolve_range_ratios(range_ratio: Any) -> tuple[float, float]:
    """``(input_ratio, output_ratio)`` of a range ratio: one number for both, or vLLM's
    dict ``{"input": r_in, "output": r_out}`` (vllm/benchmarks/datasets/utils.py
    ``_resolve_range_ratios``: both keys required, other keys ignored, each value read
    with ``float()`` so numeric strings count), each in [0, 1)
    (``get_sampling_params``).  Raises ConfigError (field ``random_range_ratio``)."""
    if isinstance(range_ratio, dict):
        missing = {"input", "output"} - set(range_ratio)
        if missing:
            raise ConfigError(f"random_range_ratio: a dict must contain the keys 'input' "
                              f"and 'output' (vLLM's), got {sorted(map(str, range_ratio))}",
                              field="random_range_ratio", value=repr(range_ratio))
        return (_ratio("input", range_ratio["input"], range_ratio),
                _ratio("output", range_ratio["output"], range_ratio))
    r = _ratio("the ratio", range_ratio, range_ratio)
    return r, r


def parse_range_ratio(text: str) -> RangeRatio:
    """``--random-range-ratio TEXT`` as vLLM 0.32 parses it
    (vllm/benchmarks/datasets/datasets.py ``_parse_range_ratio``): a float (``"0.3"``)
    or a JSON dict (``'{"input": 0.3, "output": 0.5}'``), checked by
    :func:`resolve_range_ratios`.  Raises ConfigError (field ``random_range_ratio``)
    naming the text and what is valid."""
    import json

    value: Any
    if isinstance(text, dict) or (isinstance(text, (int, float))
                                  and not isinstance(text, bool)):
        r_in, r_out = resolve_range_ratios(text)  # already read: checked as it is
        return {"input": r_in, "output": r_out} if isinstance(text, dict) else r_in
    if not isinstance(text, str):
        raise ConfigError(f"random_range_ratio must be a number in [0, 1), a dict "
                          f"{{'input': r, 'output': r}} or the flag's text, got "
                          f"{type(text).__name__} {shorten(text)}",
                          field="random_range_ratio", value=shorten(text))
    try:
        value = float(text)
    except ValueError:
        try:
            value = json.loads(text)
        except (ValueError, RecursionError):  # nested too deeply: no dict either
            value = None
        if not isinstance(value, dict):
            raise ConfigError(f"random_range_ratio must be a number in [0, 1) or a JSON "
                              f"dict like '{{\"input\": 0.3, \"output\": 0.5}}', got "
                              f"{text!r}", field="random_range_ratio", value=text) from None
    r_in, r_out = resolve_range_ratios(value)
    if isinstance(value, dict):  # vLLM's float() reading; extra keys play no part
        return {"input": r_in, "output": r_out}
    return value  # type: ignore[no-any-return]


def random_dataset(num_prompts: int, input_len: int = 1024, output_len: int = 128,
                   prefix_len: int = 0, range_ratio: RangeRatio = 0.0, seed: int = 0
                   ) -> list[TraceRequest]:
    """``num_prompts`` requests of vLLM's random dataset (module docstring), ids
    ``"0"``, ``"1"``, ... (vLLM's ``request_id_prefix + str(i)``), all arriving at 0.

    Lengths in tokens; ``range_ratio`` in [0, 1), or ``{"input": r_in, "output":
    r_out}`` (:func:`resolve_range_ratios`).  Raises ConfigError naming the field for
    a count below its minimum (or ``num_prompts`` above :data:`MAX_NUM_PROMPTS`) or a
    ratio out of range, and when the shortest possible prompt (``prefix_len +
    floor(input_len * (1 - r_in))``) is empty (vLLM's check).
    """
    num_prompts = _int("num_prompts", num_prompts, 1, MAX_NUM_PROMPTS)
    # the CLI's bounds (length_arg: kvcore.units.bound, 2**32 tokens), so numpy's
    # generator never meets a bound past int64 and no 2**62-token prompt is made
    input_len = _int("random_input_len", input_len, 0, bound("random_input_len"))
    output_len = _int("random_output_len", output_len, 0, bound("random_output_len"))
    prefix_len = _int("random_prefix_len", prefix_len, 0, bound("random_prefix_len"))
    seed = _seed(seed)
    r, r_out = resolve_range_ratios(range_ratio)
    in_low, in_high = range_ratio_bounds(input_len, r)
    out_low, out_high = (max(b, 1) for b in range_ratio_bounds(output_len, r_out))
    if prefix_len + in_low < 1:
        raise ConfigError(
            f"random_input_len {input_len} with random_range_ratio {r} and "
            f"random_prefix_len {prefix_len} can give an empty prompt; the shortest "
            f"prompt (prefix + floor(input_len * (1 - ratio))) must be >= 1 token",
            field="random_input_len", value=input_len)
    np = _np()
    if np is not None:
        rng = np.random.default_rng(seed)
        ins = rng.integers(in_low, in_high + 1, size=num_prompts).tolist()
        outs = rng.integers(out_low, out_high + 1, size=num_prompts).tolist()
    else:  # pragma: no cover - numpy is optional
        prng = random.Random(seed)
        ins = [prng.randint(in_low, in_high) for _ in range(num_prompts)]
        outs = [prng.randint(out_low, out_high) for _ in range(num_prompts)]
    out: list[TraceRequest] = []
    for i in range(num_prompts):
        segs = [(RANDOM_PREFIX_STREAM, 0, prefix_len)] if prefix_len else []
        if ins[i]:
            segs.append((RANDOM_STREAM_BASE + i, 0, int(ins[i])))
        out.append(TraceRequest(request_id=str(i), arrival_ms=0.0,
                                prompt_len=prefix_len + int(ins[i]),
                                output_len=int(outs[i]), output_stream=_OUTPUT_BASE + i,
                                segments=segs))
    return out


def check_ramp_up(strategy: str | None, start_rps: Any, end_rps: Any,
                  request_rate: float = math.inf) -> None:
    """vLLM 0.32's checks of the ramp-up flags (vllm/benchmarks/serve.py ``main``,
    "Validate ramp-up arguments"; the rates are ``type=int`` there): with a strategy
    (``linear`` | ``exponential``), no ``--request-rate`` (it must stay inf), both
    rates given, integers >= 0, start <= end, and start > 0 for ``exponential``;
    without one, no rates.  Raises ConfigError naming the field."""
    if strategy is None:
        for name, v in (("ramp_up_start_rps", start_rps), ("ramp_up_end_rps", end_rps)):
            if v is not None:
                raise ConfigError(f"--{name.replace('_', '-')} {v}: needs "
                                  f"--ramp-up-strategy linear|exponential", field=name,
                                  value=v)
        return
    if strategy not in RAMP_UP_STRATEGIES:
        raise ConfigError(f"ramp_up_strategy {strategy!r}: valid: "
                          f"{', '.join(RAMP_UP_STRATEGIES)}", field="ramp_up_strategy",
                          value=strategy)
    if request_rate is not None and not math.isinf(request_rate):
        raise ConfigError(f"--request-rate {request_rate:g}: with --ramp-up-strategy the "
                          f"rate is set by --ramp-up-start-rps / --ramp-up-end-rps; drop "
                          f"--request-rate (vLLM refuses both)", field="request_rate",
                          value=request_rate)
    for name, v in (("ramp_up_start_rps", start_rps), ("ramp_up_end_rps", end_rps)):
        if v is None:
            raise ConfigError(f"--ramp-up-strategy {strategy}: give both "
                              f"--ramp-up-start-rps and --ramp-up-end-rps", field=name)
        number = as_int(v)  # numpy integers too; bool refused
        if number is None or not 0 <= number <= bound(name):
            raise ConfigError(f"{name} must be an integer in [0, {bound(name):,}] (requests "
                              f"per second), got {shorten(v)}", field=name, value=shorten(v))
    if start_rps > end_rps:
        raise ConfigError(f"ramp_up_start_rps {start_rps} > ramp_up_end_rps {end_rps}: the "
                          f"start must not exceed the end", field="ramp_up_start_rps",
                          value=start_rps)
    if strategy == "exponential" and start_rps == 0:
        raise ConfigError("ramp_up_start_rps 0: an exponential ramp-up needs a start "
                          "rate > 0", field="ramp_up_start_rps", value=0)
    if end_rps == 0:  # every rate 0: vLLM's get_request asserts rate > 0
        raise ConfigError("ramp_up_end_rps 0: every request rate would be 0 (vLLM's "
                          "get_request asserts a rate > 0)", field="ramp_up_end_rps",
                          value=0)


def _ramp_rate(strategy: str, start: float, end: float, i: int, n: int) -> float:
    progress = i / max(n - 1, 1)
    if strategy == "linear":
        return start + (end - start) * progress
    return start * (end / start) ** progress


def _check_gap_scale(rates: Sequence[float], burstiness: float, n: int) -> None:
    """Each flag can be valid and their product not: the gaps are gamma draws of scale
    ``1 / (rate x burstiness)`` (vLLM's theta), so that product must be a finite
    number > 0 whose inverse is finite, and the run's span ``n / rate`` finite
    (tester A, stop 37: ``--request-rate 1e-200 --burstiness 1e-200`` divided by 0, and
    ``--burstiness 1e308`` sent every request at once).  Raises ConfigError naming
    ``burstiness`` (or ``request_rate``)."""
    b = 1.0 if math.isinf(burstiness) else burstiness
    for r in (min(rates), max(rates)):
        prod = r * b
        if not (1e-300 <= prod <= 1e300) or n / r > 1e300:
            raise ConfigError(
                f"request rate {r:g} with burstiness {burstiness:g}: the arrival gaps' "
                f"scale 1 / (rate x burstiness) is {1.0 / prod if prod else math.inf:g} s "
                f"(out of floating-point range); give values whose product lies in "
                f"[1e-300, 1e300] (burstiness inf for evenly spaced arrivals)",
                field="burstiness" if not math.isinf(burstiness) else "request_rate",
                value=burstiness if not math.isinf(burstiness) else r)


def arrival_times(n: int, request_rate: float = math.inf, burstiness: float = 1.0,
                  seed: int = 0, *, ramp_up_strategy: str | None = None,
                  ramp_up_start_rps: int | None = None,
                  ramp_up_end_rps: int | None = None) -> list[float]:
    """Send times of ``n`` requests, seconds from the start (module docstring; with
    ``ramp_up_strategy`` the rate of each gap follows the ramp and ``request_rate``
    must be inf).

    Raises ConfigError for ``request_rate`` or ``burstiness`` not > 0 (NaN included),
    a ``seed`` that is not an integer in [0, 2**32 - 1] (:data:`MAX_SEED`), and for
    ramp-up settings vLLM refuses (:func:`check_ramp_up`); a linear ramp-up
    from 0 whose first gap would have rate 0 is refused as vLLM's ``get_request``
    asserts.
    """
    n = _int("num_prompts", n, 0, MAX_NUM_PROMPTS)
    seed = _seed(seed)
    reals = []
    for name, v in (("request_rate", request_rate), ("burstiness", burstiness)):
        real = as_real(v)  # numpy numbers too, as a plain float; bool refused
        if real is None or not real > 0 or (as_int(v) is not None and real > 1 << 60):
            raise ConfigError(f"{name} must be a number > 0 (inf allowed), got "
                              f"{shorten(v)}", field=name, value=shorten(v))
        reals.append(real)
    request_rate, burstiness = reals
    ramp_up_start_rps, ramp_up_end_rps = plain_int(ramp_up_start_rps), plain_int(
        ramp_up_end_rps)
    check_ramp_up(ramp_up_strategy, ramp_up_start_rps, ramp_up_end_rps, request_rate)
    if n == 0:
        return []
    if ramp_up_strategy is not None:
        assert ramp_up_start_rps is not None and ramp_up_end_rps is not None
        rates = [_ramp_rate(ramp_up_strategy, ramp_up_start_rps, ramp_up_end_rps, i, n)
                 for i in range(n)]
        if rates[0] <= 0:
            raise ConfigError("ramp_up_start_rps 0: the first request's rate is 0 (vLLM's "
                              "get_request asserts a rate > 0); start at 1 or more",
                              field="ramp_up_start_rps", value=ramp_up_start_rps)
    else:
        if math.isinf(request_rate):
            return [0.0] * n
        rates = [float(request_rate)] * n
    _check_gap_scale(rates, burstiness, n)
    if math.isinf(burstiness):
        delays = [1.0 / r for r in rates]
    else:
        np = _np()
        if np is not None:
            # serve.py draws one np.random.gamma per request from the global generator
            # seeded with --seed: RandomState(seed) gives the same stream for random,
            # burstgpt and sharegpt (their samplers leave numpy's global stream alone);
            # prefix_repetition draws its prompt tokens from it first (tokenizer-
            # dependent), so there this is another draw of the same process
            # (kvcore.sim.command.prefix_repetition_arrivals_note)
            rs = np.random.RandomState(seed)
            if ramp_up_strategy is None:
                delays = rs.gamma(shape=burstiness, scale=1.0 / (rates[0] * burstiness),
                                  size=n).tolist()
            else:
                delays = [float(rs.gamma(shape=burstiness, scale=1.0 / (r * burstiness)))
                          for r in rates]
        elif burstiness > 1e6:  # pragma: no cover - numpy is optional
            # gamma of shape > 1e6: a coefficient of variation under 1e-3, so the gaps
            # are even; random.gammavariate never returns past shape ~9e307 (its
            # sqrt(2 shape - 1) overflows and every draw is rejected: a hang)
            delays = [1.0 / r for r in rates]
        else:  # pragma: no cover - numpy is optional
            prng = random.Random(seed)
            delays = [prng.gammavariate(burstiness, 1.0 / (r * burstiness)) for r in rates]
    t = 0.0
    cum: list[float] = []
    for d in delays:
        t += d
        cum.append(t)
    if ramp_up_strategy is None and cum[-1] != 0:
        f = (n / request_rate) / cum[-1]
        cum = [c * f for c in cum]
    return cum


def with_arrivals(requests: Sequence[TraceRequest], times: Sequence[float]
                  ) -> list[TraceRequest]:
    """Copies of ``requests`` arriving at ``times`` (seconds).  Raises ConfigError
    (field ``times``) when the two lengths differ (no request is silently dropped) or
    a time is not a finite number >= 0."""
    requests = check_items(requests, TraceRequest, "requests")
    times = check_items(times, numbers.Real, "times")
    if len(requests) != len(times):
        raise ConfigError(f"with_arrivals: {len(times)} times for {len(requests)} "
                          f"requests; give one time per request", field="times",
                          value=len(times))
    times = [check_number(t, f"times[{i}]", minimum=0.0, where="with_arrivals (seconds)")
             for i, t in enumerate(times)]
    return [replace(r, arrival_ms=t * 1000.0) for r, t in zip(requests, times)]
