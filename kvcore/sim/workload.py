"""Arrivals and datasets as ``vllm bench serve`` makes them.

* :func:`random_dataset`: ``--dataset random`` (vLLM 0.32
  ``vllm/benchmarks/datasets/datasets.py`` ``RandomDataset.sample`` with
  ``get_sampling_params`` of ``datasets/utils.py``): with ``rng =
  numpy.random.default_rng(seed)``, input lengths ``rng.integers(floor(L_in * (1 - r)),
  ceil(L_in * (1 + r)) + 1, n)``, then output lengths the same way from ``L_out`` (low
  at least 1), then vocabulary offsets; every prompt is ``prefix_len`` shared tokens
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
  seconds; ``burstiness = inf`` gives even gaps ``1 / rate``.
* :func:`with_arrivals`: the requests with those arrival times (trace timestamps are
  replaced).
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from kvcore.errors import ConfigError
from kvcore.sim.traces import TraceRequest

__all__ = ["random_dataset", "arrival_times", "with_arrivals", "RANDOM_PREFIX_STREAM",
           "RANDOM_STREAM_BASE"]

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


def _int(name: str, value: Any, low: int, high: int | None = None) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < low or \
            (high is not None and value > high):
        top = f" and <= {high:,}" if high is not None else ""
        raise ConfigError(f"{name} must be an integer >= {low}{top}, got {value!r}",
                          field=name, value=value)
    return value


def random_dataset(num_prompts: int, input_len: int = 1024, output_len: int = 128,
                   prefix_len: int = 0, range_ratio: float = 0.0, seed: int = 0
                   ) -> list[TraceRequest]:
    """``num_prompts`` requests of vLLM's random dataset (module docstring), ids
    ``"0"``, ``"1"``, ... (vLLM's ``request_id_prefix + str(i)``), all arriving at 0.

    Lengths in tokens; ``range_ratio`` in [0, 1).  Raises ConfigError naming the
    field for a count below its minimum (or ``num_prompts`` above
    :data:`MAX_NUM_PROMPTS`) or a ratio out of range, and when the shortest
    possible prompt (``prefix_len + floor(input_len * (1 - range_ratio))``) is empty
    (vLLM's check).
    """
    _int("num_prompts", num_prompts, 1, MAX_NUM_PROMPTS)
    _int("random_input_len", input_len, 0)
    _int("random_output_len", output_len, 0)
    _int("random_prefix_len", prefix_len, 0)
    _int("seed", seed, 0)
    if isinstance(range_ratio, bool) or not isinstance(range_ratio, (int, float)) \
            or not 0.0 <= float(range_ratio) < 1.0:
        raise ConfigError(f"random_range_ratio must be a number in [0, 1), got "
                          f"{range_ratio!r}", field="random_range_ratio", value=range_ratio)
    r = float(range_ratio)
    in_low = math.floor(input_len * (1 - r))
    in_high = math.ceil(input_len * (1 + r))
    out_low = max(math.floor(output_len * (1 - r)), 1)
    out_high = max(math.ceil(output_len * (1 + r)), 1)
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


def arrival_times(n: int, request_rate: float = math.inf, burstiness: float = 1.0,
                  seed: int = 0) -> list[float]:
    """Send times of ``n`` requests, seconds from the start (module docstring).

    Raises ConfigError for ``request_rate`` or ``burstiness`` not > 0 (NaN included).
    """
    _int("num_prompts", n, 0, MAX_NUM_PROMPTS)
    for name, v in (("request_rate", request_rate), ("burstiness", burstiness)):
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not v > 0:
            raise ConfigError(f"{name} must be a number > 0 (inf allowed), got {v!r}",
                              field=name, value=v)
    if n == 0:
        return []
    if math.isinf(request_rate):
        return [0.0] * n
    if math.isinf(burstiness):
        delays = [1.0 / request_rate] * n
    else:
        theta = 1.0 / (request_rate * burstiness)
        np = _np()
        if np is not None:
            delays = np.random.RandomState(seed).gamma(shape=burstiness, scale=theta,
                                                      size=n).tolist()
        else:  # pragma: no cover - numpy is optional
            prng = random.Random(seed)
            delays = [prng.gammavariate(burstiness, theta) for _ in range(n)]
    t = 0.0
    cum: list[float] = []
    for d in delays:
        t += d
        cum.append(t)
    if cum[-1] != 0:
        f = (n / request_rate) / cum[-1]
        cum = [c * f for c in cum]
    return cum


def with_arrivals(requests: Sequence[TraceRequest], times: Sequence[float]
                  ) -> list[TraceRequest]:
    """Copies of ``requests`` arriving at ``times`` (seconds)."""
    return [replace(r, arrival_ms=t * 1000.0) for r, t in zip(requests, times)]
