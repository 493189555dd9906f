"""Accuracy of the step-time model against published vLLM measurements.

``tests/data/sim_accuracy/measurements.json`` holds the rows (source URL, the quoted
figures, the run's parameters, and a ``split``: ``fit`` or ``holdout``).
:func:`simulate_row` replays a row's workload through the vLLM-faithful engine
(:mod:`kvcore.sim.engine`, or :mod:`kvcore.sim.fastsim` with ``sim="fast"``) with
:func:`kvcore.sim.timing.roofline_for` on the row's model, GPU and TP; :func:`evaluate`
gives the relative error of each figure; :func:`fit` searches the
:class:`~kvcore.sim.timing.Efficiency` terms on the ``fit`` rows only (coordinate
descent over a fixed grid per term, minimising the median absolute log error over the
rows' figures: deterministic).  ``python -m kvcore.sim.accuracy [--fit] [--fast] [--only ID,ID] [--added v3]``
prints the table of docs/SIM_ACCURACY.md (``--fast``: the fastsim loop instead of the
engine; ``--only`` / ``--added``: evaluate only the rows whose id contains a substring /
whose ``added`` note starts with the tag, see :func:`select_rows`).
"""

from __future__ import annotations

import dataclasses
import math
import re
import statistics
import sys
from functools import lru_cache
from pathlib import Path
from typing import Any

from kvcore.errors import KVCoreError, NotEnoughMemoryError
from kvcore.sim.timing import DEFAULT_EFFICIENCY, Efficiency, roofline_for
from kvcore.units import as_int, as_real, plain_int

__all__ = ["load_measurements", "vllm_serve_defaults", "simulate_row", "evaluate",
           "sharegpt_output_lengths", "eos_output_lengths", "stated_lengths",
           "is_sharegpt_row", "LENGTH_MODELS", "DEFAULT_LENGTHS",
           "select_rows", "summary", "fit", "source_family", "METRICS", "V2_EFFICIENCY"]

#: the compared figures: measured key -> simulated key (the simulated statistic follows
#: the row's: mean rows compare means, median rows medians)
METRICS = ("output_throughput", "ttft_ms", "tpot_ms")


def load_measurements(path: str | Path) -> list[dict[str, Any]]:
    """The rows of a measurements file (see the module docstring).

    Raises :class:`kvcore.errors.ConfigError` naming the file when it cannot be read,
    is not JSON, or is not an object whose ``rows`` is a list of objects."""
    from kvcore.errors import ConfigError
    from kvcore.userfiles import read_json

    name = Path(path).name
    # the shared reader: bounded bytes, bad JSON / nesting too deep named
    data = read_json(path, "a measurements file (an object with a 'rows' list)",
                     field=name, value=str(path))
    rows = data.get("rows") if isinstance(data, dict) else None
    if not isinstance(rows, list) or not all(isinstance(r, dict) for r in rows):
        raise ConfigError(f"{name}: has no 'rows' list of row objects; valid: an object "
                          "with a 'rows' list (see docs/SIM_ACCURACY.md)", field="rows",
                          value=str(path))
    return list(rows)


def _row_int(row: dict[str, Any], key: str, default: int | None, minimum: int = 1
             ) -> int | None:
    """``row[key]`` as an int >= ``minimum`` (``default`` when absent or null).  Raises
    ConfigError naming the row and the key otherwise."""
    from kvcore.errors import ConfigError, shorten
    from kvcore.sim.workload import MAX_NUM_PROMPTS
    from kvcore.units import bound

    v = row.get(key)
    if v is None:
        return default
    # at most the field's bound (num_prompts: --num-prompts's; a count of 10**9 was a
    # replay of hours, or a MemoryError)
    top = MAX_NUM_PROMPTS if key == "num_prompts" else bound(key)
    number = as_int(v)  # numpy integers too, as a plain int; bool refused
    if number is None or not minimum <= number <= top:
        raise ConfigError(f"row {row.get('id')!r}: {key} {shorten(v)} must be an integer "
                          f"in [{minimum:,}, {top:,}]", field=key, value=shorten(v))
    return number


def _row_bool(row: dict[str, Any], key: str, default: bool) -> bool:
    """``row[key]`` as a JSON boolean (``default`` when absent).  Raises ConfigError
    naming the row and the key for anything else (the string "false" included)."""
    from kvcore.errors import ConfigError

    v = row.get(key, default)
    if not isinstance(v, bool):
        raise ConfigError(f"row {row.get('id')!r}: {key} {v!r} must be true or false",
                          field=key, value=repr(v))
    return v


def _check_row(row: dict[str, Any]) -> None:
    """The keys :func:`simulate_row` reads, checked (ConfigError naming the key)."""
    from kvcore.errors import ConfigError

    for key in ("config", "gpu"):
        if not isinstance(row.get(key), str) or not row.get(key):
            raise ConfigError(f"row {row.get('id')!r}: {key} {row.get(key)!r} must be a "
                              "name", field=key, value=repr(row.get(key)))
    for key in ("input_len", "output_len", "num_prompts"):
        if row.get(key) is None:
            raise ConfigError(f"row {row.get('id')!r}: {key} is missing", field=key)
        _row_int(row, key, None)
    for key in ("tensor_parallel_size", "pipeline_parallel_size", "max_num_batched_tokens",
                "max_num_seqs", "max_model_len", "max_concurrency", "data_parallel_size",
                "block_size"):
        _row_int(row, key, None)
    gmu = row.get("gpu_memory_utilization")
    if gmu is not None and (isinstance(gmu, bool) or not isinstance(gmu, (int, float))
                            or not 0 < gmu <= 1):
        raise ConfigError(f"row {row.get('id')!r}: gpu_memory_utilization {gmu!r} must be "
                          "a fraction in (0, 1] (vLLM's default 0.9)",
                          field="gpu_memory_utilization", value=repr(gmu))
    excl = row.get("excluded") or {}
    if (_row_int(row, "data_parallel_size", 1) or 1) > 1 and isinstance(excl, dict):
        left = [m for m in (row.get("measured") or {}) if m not in excl]
        if left:
            raise ConfigError(f"row {row.get('id')!r}: data_parallel_size "
                              f"{row['data_parallel_size']} is not replayed (the harness "
                              f"runs one engine); valid: 1, or every measured figure in "
                              f"'excluded' (here not: {', '.join(left)})",
                              field="data_parallel_size",
                              value=repr(row["data_parallel_size"]))
    for key in ("output_len_max", "input_len_min", "input_len_max", "output_len_min"):
        _row_int(row, key, None)
    for key in ("input_len_sd", "output_len_sd"):
        sd = row.get(key)
        if sd is not None and (isinstance(sd, bool) or not isinstance(sd, (int, float))
                               or not 0 < sd < math.inf):
            raise ConfigError(f"row {row.get('id')!r}: {key} {sd!r} must be a number > 0 "
                              "(tokens)", field=key, value=repr(sd))
    rr = row.get("random_range_ratio")
    if rr is not None and (isinstance(rr, bool) or not isinstance(rr, (int, float))
                           or not 0 <= rr < 1):
        raise ConfigError(f"row {row.get('id')!r}: random_range_ratio {rr!r} must be a "
                          "number in [0, 1) (vLLM's --random-range-ratio)",
                          field="random_range_ratio", value=repr(rr))
    for key in ("enable_prefix_caching", "enable_chunked_prefill", "ignore_eos"):
        _row_bool(row, key, True)
    kvd = row.get("kv_cache_dtype", "auto")
    if not isinstance(kvd, str):
        raise ConfigError(f"row {row.get('id')!r}: kv_cache_dtype {kvd!r} must be a name "
                          "such as auto or fp8", field="kv_cache_dtype", value=repr(kvd))
    burst = row.get("burstiness", 1.0)
    if burst != "inf" and (isinstance(burst, bool) or not isinstance(burst, (int, float))
                           or not 0 < burst < math.inf):
        raise ConfigError(f"row {row.get('id')!r}: burstiness {burst!r} must be a number "
                          "> 0 (1: Poisson, vLLM's default) or \"inf\" (even gaps)",
                          field="burstiness", value=repr(burst))
    rate = row.get("request_rate", "inf")
    if rate != "inf" and (isinstance(rate, bool) or not isinstance(rate, (int, float))
                          or not 0 < rate < math.inf):
        raise ConfigError(f"row {row.get('id')!r}: request_rate {rate!r} must be a number "
                          "> 0 or \"inf\"", field="request_rate", value=repr(rate))
    from kvcore.units import MAX_TOKENS

    for key in ("input_lens", "output_lens"):
        lens = row.get(key)
        if lens is not None and (not isinstance(lens, list)
                                 or len(lens) != row["num_prompts"]
                                 or not all((m := as_int(n)) is not None
                                            and 1 <= m <= MAX_TOKENS for n in lens)):
            raise ConfigError(f"row {row.get('id')!r}: {key} must be a list of "
                              f"{row['num_prompts']} integers in [1, {MAX_TOKENS:,}] (one "
                              "per prompt, as "
                              "vllm bench serve --save-detailed writes them)", field=key,
                              value=repr(lens)[:80])
    for m, v in dict(row.get("measured") or {}).items():
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 < v < math.inf:
            raise ConfigError(f"row {row.get('id')!r}: measured {m} {v!r} must be a "
                              "number > 0", field=m, value=repr(v))


def _burstiness(row: dict[str, Any]) -> float:
    """The row's ``burstiness`` (vLLM's ``--burstiness``: 1 Poisson, ``"inf"`` even
    gaps), checked by :func:`_check_row`."""
    b = row.get("burstiness", 1.0)
    return math.inf if b == "inf" else float(b)


#: how a row's lengths are replayed (v12_protocol.md): ``mean`` every request at the
#: row's mean lengths (v1 - v11); ``sharegpt`` ShareGPT rows' outputs drawn from
#: :func:`sharegpt_output_lengths` (other rows as ``mean``); ``stated`` (v14's candidate
#: H, v14_protocol.md) as ``sharegpt``, and a row's stated length distribution where it
#: states one (:func:`stated_lengths`)
LENGTH_MODELS = ("mean", "sharegpt", "stated")

#: the harness's default (v12's candidate G, adopted by its rule: v12_protocol.md)
DEFAULT_LENGTHS = "sharegpt"

#: the lognormal shape of ShareGPT output lengths (v12_protocol.md): ln(p95 / p50) /
#: 1.645 of the output lengths of DO-Solutions/gtc-2026-doks's vLLM 0.14.1 ShareGPT run
#: (dev/vllm/benchmarks/phase0/20260224-185458/rate-1.0.json, 300 prompts, seed 0, no
#: queue: e2el = TTFT + (n - 1) x TPOT gives p50 147, p95 574 tokens)
SHAREGPT_OUTPUT_SIGMA = 0.83


def is_sharegpt_row(row: dict[str, Any]) -> bool:
    """Whether the row's ``dataset`` text names vLLM's ShareGPT dataset (it starts with
    "sharegpt", any case)."""
    return str(row.get("dataset", "")).strip().lower().startswith("sharegpt")


def _counts(*args: tuple[str, Any]) -> list[int]:
    """Each ``(name, value)`` as a plain int >= 1 (numpy integers too; bool refused),
    else ConfigError naming the argument."""
    from kvcore.errors import ConfigError

    out = []
    for name, v in args:
        number = as_int(v)
        if number is None or number < 1:
            raise ConfigError(f"{name} {v!r} must be an integer >= 1", field=name,
                              value=repr(v))
        out.append(number)
    return out


def _seed_arg(seed: Any) -> Any:
    """A seed for :class:`random.Random`: numpy integers as the equal plain int (which
    ``random`` refuses otherwise); bool refused, naming ``seed``."""
    from kvcore.errors import ConfigError

    if isinstance(seed, bool) or (seed is not None and not isinstance(
            seed, (int, float, str, bytes, bytearray)) and as_int(seed) is None):
        raise ConfigError(f"seed {seed!r} must be an integer", field="seed",
                          value=repr(seed))
    return plain_int(seed)


def sharegpt_output_lengths(num_prompts: int, mean_output_len: int, input_len: int,
                            seed: int = 0, sigma: float = SHAREGPT_OUTPUT_SIGMA
                            ) -> list[int]:
    """``num_prompts`` output lengths (tokens) shaped as ShareGPT's: lognormal with
    ``sigma`` (seeded), clipped to vLLM's ShareGPT filter (at least 4 tokens, ``input_len
    + output`` at most 2,048: ``is_valid_sequence`` of vllm/benchmarks/datasets.py), and
    scaled so their mean is ``mean_output_len`` (as close as integers allow; the
    clipped maximum when the mean cannot be reached).

    Raises ConfigError naming the argument for a count below 1 or a sigma not > 0."""
    import random

    from kvcore.errors import ConfigError

    num_prompts, mean_output_len, input_len = _counts(
        ("num_prompts", num_prompts), ("output_len", mean_output_len),
        ("input_len", input_len))
    seed = _seed_arg(seed)
    sigma_real = as_real(sigma)  # numpy numbers too; bool refused
    if sigma_real is None or not 0 < sigma_real < math.inf:
        raise ConfigError(f"sigma {sigma!r} must be a number > 0", field="sigma",
                          value=repr(sigma))
    low, high = 4, max(4, 2048 - input_len)
    target = min(max(mean_output_len, low), high)
    rng = random.Random(seed)
    raw = [rng.lognormvariate(0.0, float(sigma)) for _ in range(num_prompts)]

    def draw(scale: float) -> list[int]:
        return [min(max(round(scale * x), low), high) for x in raw]

    lo, hi = 0.0, float(high) / min(raw) + 1.0  # draw(hi) is all ``high``
    for _ in range(100):  # the mean of draw(scale) grows with scale
        mid = (lo + hi) / 2
        if statistics.fmean(draw(mid)) < target:
            lo = mid
        else:
            hi = mid
    a, b = draw(lo), draw(hi)
    return a if abs(statistics.fmean(a) - target) <= abs(statistics.fmean(b) - target) else b


def eos_output_lengths(num_prompts: int, mean_output_len: int, output_len_max: int,
                       seed: int = 0) -> list[int]:
    """``num_prompts`` output lengths (tokens) of a run without ``--ignore-eos``: each
    request stops at its EOS, drawn with one per-token hazard ``h`` (a geometric length
    on 1, 2, ...), or at ``output_len_max`` (the requested ``--random-output-len``),
    whichever comes first; ``h`` is solved (bisection over fixed seeded uniforms) so the
    lengths' mean is ``mean_output_len`` as closely as integers allow (all
    ``output_len_max`` when the mean is not below it).  v14_protocol.md, candidate H.

    Raises ConfigError naming the argument for a count below 1."""
    import random


    num_prompts, mean_output_len, output_len_max = _counts(
        ("num_prompts", num_prompts), ("output_len", mean_output_len),
        ("output_len_max", output_len_max))
    seed = _seed_arg(seed)
    if mean_output_len >= output_len_max:
        return [output_len_max] * num_prompts
    rng = random.Random(seed)
    logs = [math.log1p(-rng.random()) for _ in range(num_prompts)]  # log(1 - u) < 0

    def draw(h: float) -> list[int]:
        lq = math.log1p(-h)
        return [min(output_len_max, max(1, math.ceil(x / lq))) for x in logs]

    lo, hi = 1e-12, 1.0 - 1e-12  # the mean of draw(h) falls as h grows
    for _ in range(200):
        mid = (lo + hi) / 2
        if statistics.fmean(draw(mid)) > mean_output_len:
            lo = mid
        else:
            hi = mid
    a, b = draw(lo), draw(hi)
    return (a if abs(statistics.fmean(a) - mean_output_len)
            <= abs(statistics.fmean(b) - mean_output_len) else b)


def _clipped_normal(n: int, mean: float, sd: float, low: int, high: int,
                    seed: int) -> list[int]:
    import random

    rng = random.Random(seed)
    return [min(high, max(low, round(rng.gauss(mean, sd)))) for _ in range(n)]


def _range_ratio(n: int, length: int, ratio: float, seed: int) -> list[int]:
    """vLLM's random dataset lengths: uniform integers on [floor(len x (1 - r)),
    ceil(len x (1 + r))] (``RandomDataset``@0.32), at least 1."""
    import random

    from kvcore.sim.workload import range_ratio_bounds

    rng = random.Random(seed)
    low, high = range_ratio_bounds(length, ratio)
    low = max(1, low)
    high = max(low, high)
    return [rng.randint(low, high) for _ in range(n)]


def stated_lengths(row: dict[str, Any]) -> tuple[list[int] | None, list[int] | None]:
    """``(inputs, outputs)``: per-request lengths drawn from the distribution a row
    states (v14_protocol.md, candidate H), None for a side it states nothing about:

    - ``input_len_sd`` / ``output_len_sd`` (with ``*_len_min``, ``*_len_max``): a normal
      around the row's mean length, clipped (seeded: 1 inputs, 0 outputs);
    - else ``random_range_ratio`` r: vLLM's uniform lengths around the mean;
    - outputs, else ``output_len_max`` above the mean ``output_len`` (a run without
      ``--ignore-eos``): :func:`eos_output_lengths`, after the range ratio's draw where
      both are given."""
    n = int(row["num_prompts"])
    isl, osl = int(row["input_len"]), int(row["output_len"])
    inputs: list[int] | None = None
    outputs: list[int] | None = None
    ratio = float(row.get("random_range_ratio") or 0.0)
    if row.get("input_len_sd") is not None:
        inputs = _clipped_normal(n, isl, float(row["input_len_sd"]),
                                 int(row.get("input_len_min", 1)),
                                 int(row.get("input_len_max", 1 << 30)), 1)
    elif ratio > 0:
        inputs = _range_ratio(n, isl, ratio, 1)
    if row.get("output_len_sd") is not None:
        outputs = _clipped_normal(n, osl, float(row["output_len_sd"]),
                                  int(row.get("output_len_min", 1)),
                                  int(row.get("output_len_max", 1 << 30)), 0)
    elif row.get("output_len_max") is not None and int(row["output_len_max"]) > osl:
        outputs = eos_output_lengths(n, osl, int(row["output_len_max"]))
    elif ratio > 0:
        outputs = _range_ratio(n, osl, ratio, 0)
    return inputs, outputs


def vllm_serve_defaults(gpu: Any) -> tuple[int, int]:
    """``(max_num_batched_tokens, max_num_seqs)`` ``vllm serve`` 0.32 picks on ``gpu``
    (``EngineArgs._set_default_max_num_seqs_and_batched_tokens_args``, API server):
    16,384 / 1,024 from 160 GiB of device memory, 8,192 / 1,024 from 70 GiB except A100s,
    else 2,048 / 256."""
    from kvcore.deploy.gpus import GPU, get_gpu

    g = gpu if isinstance(gpu, GPU) else get_gpu(gpu, memory_flag=False)
    mem = g.memory_bytes
    if mem >= 160 << 30:
        return 16384, 1024
    if mem >= 70 << 30 and "a100" not in g.device_name.lower():
        return 8192, 1024
    return 2048, 256


def _config_path(row: dict[str, Any], base: Path | None) -> str:
    name = row["config"]
    if name.endswith(".json") and base is not None:
        return str(base / "configs" / name)
    return str(name)


def engine_of(row: dict[str, Any]) -> str | None:
    """``vllm==X.Y.Z`` from the row's ``engine`` text (``"vLLM v0.11.0 (...)"``), the
    engine profile its GPU budget is planned with (kvcore.deploy.engines); None when the
    text names no version (the default profile, vLLM 0.32)."""
    import re

    # a nightly's or a release candidate's suffix is kept (``0.7.4.dev181``: get_engine
    # plans it as the last release before it, 0.7.3; a bare 0.7.4 was never released)
    m = re.search(r"vLLM v?(\d+\.\d+(?:\.\d+)?(?:\.?(?:dev|rc)\d+)?)",
                  str(row.get("engine", "")))
    return f"vllm=={m.group(1)}" if m else None


@lru_cache(maxsize=64)
def _plan(config: str, gpu: str, tp: int, max_model_len: int, mnbt: int, mns: int,
          kv_gib: float | None = None, engine: str | None = None, pp: int = 1,
          kv_cache_dtype: str = "auto", mamba_cache_mode: str = "none",
          gpu_memory_utilization: float | None = None, block_size: int | None = None
          ) -> Any:
    import kvcore

    extra: dict[str, Any] = {}
    if block_size is not None:  # vllm serve --block-size
        extra["block_size"] = block_size
    if mamba_cache_mode != "none":
        extra["mamba_cache_mode"] = mamba_cache_mode
    if pp != 1:
        extra["pipeline_parallel_size"] = pp
    if kv_cache_dtype != "auto":
        extra["kv_cache_dtype"] = kv_cache_dtype
    if kv_gib is not None:  # the KV budget the run's own log reports, per rank
        return kvcore.plan_model(config, kv_cache_memory_bytes=int(kv_gib * (1 << 30)),
                                 tensor_parallel_size=tp, max_model_len=max_model_len,
                                 max_num_batched_tokens=mnbt, **extra)
    if engine:
        extra["engine"] = engine
    if gpu_memory_utilization is not None:  # vllm serve --gpu-memory-utilization
        extra["gpu_memory_utilization"] = gpu_memory_utilization
    return kvcore.plan_model(config, gpu=gpu, tensor_parallel_size=tp,
                             max_model_len=max_model_len, max_num_batched_tokens=mnbt,
                             max_num_seqs=mns, **extra)


def _engine_figures(model: Any, kv: Any, row: dict[str, Any], mnbt: int, mns: int,
                    mml: int, outputs: list[int] | None = None,
                    inputs: list[int] | None = None) -> dict[str, Any]:
    """Figures of the vLLM-faithful engine (:mod:`kvcore.sim.engine`) for a row; the
    model's ``request_overhead_s`` (the API server's share) is the time between a
    request's send and the engine seeing it, inside every latency and the duration.
    ``outputs``: per-request output lengths (None: the row's ``output_len`` each)."""
    from kvcore.runtime import KVCacheManager
    from kvcore.sim.engine import SimRequest, run_engine
    from kvcore.sim.metrics import serving_metrics
    from kvcore.sim.workload import arrival_times, random_dataset, with_arrivals

    reqs = random_dataset(int(row["num_prompts"]), int(row["input_len"]),
                          int(row["output_len"]), 0, 0.0, 0)
    if outputs is not None:
        reqs = [dataclasses.replace(r, output_len=n) for r, n in zip(reqs, outputs)]
    if inputs is not None:  # each prompt its own length, on its own token stream
        reqs = [dataclasses.replace(r, prompt_len=n, segments=[(r.segments[-1][0], 0, n)])
                for r, n in zip(reqs, inputs)]
    rate = row.get("request_rate", "inf")
    if rate != "inf":
        reqs = with_arrivals(reqs, arrival_times(len(reqs), float(rate),
                                                 _burstiness(row), 0))
    mgr = KVCacheManager(kv, max_model_len=mml,
                         enable_caching=_row_bool(row, "enable_prefix_caching", True),
                         max_num_batched_tokens=mnbt)
    res = run_engine(mgr, [SimRequest(r) for r in reqs], model, max_num_seqs=mns,
                     max_num_batched_tokens=mnbt, max_model_len=mml,
                     max_concurrency=row.get("max_concurrency"), record_steps=False,
                     enable_chunked_prefill=_row_bool(row, "enable_chunked_prefill", True))
    return serving_metrics(res)  # run_engine applies the model's request_overhead_s


#: rows whose GPU plan kvcore refused at the row's max_model_len although vLLM ran
#: them (row id -> what happened), filled by :func:`simulate_row`
_REFUSALS: dict[str, str] = {}


def simulate_row(row: dict[str, Any], efficiency: Efficiency = DEFAULT_EFFICIENCY, *,
                 base: Path | None = None, sim: str = "engine",
                 lengths: str = DEFAULT_LENGTHS) -> dict[str, float]:
    """Simulated ``output_throughput``, ``ttft_ms`` and ``tpot_ms`` of one row (mean or
    median as the row's ``statistic`` says).  ``sim``: ``engine`` (kvcore.sim.engine,
    vLLM's scheduler over kvcore's KVCacheManager) or ``fast`` (kvcore.sim.fastsim).
    ``lengths`` (:data:`LENGTH_MODELS`, default :data:`DEFAULT_LENGTHS`): ``mean``
    replays every request at the row's mean lengths (rounds v1 - v11); ``sharegpt``
    draws a ShareGPT row's output lengths from :func:`sharegpt_output_lengths`
    (v12_protocol.md).  A row with ``output_lens`` (one per prompt: a ``vllm bench
    serve --save-detailed`` result's, :mod:`kvcore.sim.calibrate`) replays those, and
    ``input_lens`` the prompts' likewise.  Raises ConfigError naming the
    row's key for a malformed row, or ``lengths`` for an unknown model."""
    from kvcore.errors import ConfigError
    from kvcore.models.config import load_model_config
    from kvcore.sim.fastsim import Workload, run_workload

    if lengths not in LENGTH_MODELS:
        raise ConfigError(f"lengths {lengths!r} is not a length model; valid: "
                          f"{', '.join(LENGTH_MODELS)}", field="lengths", value=repr(lengths))
    _check_row(row)
    cfg_path = _config_path(row, base)
    gpu = row["gpu"]
    tp = int(row.get("tensor_parallel_size", 1))
    pp = int(row.get("pipeline_parallel_size", 1))
    kvd = str(row.get("kv_cache_dtype", "auto"))
    mnbt, mns = vllm_serve_defaults(gpu)
    mnbt = int(row.get("max_num_batched_tokens", mnbt))
    mns = int(row.get("max_num_seqs", mns))
    isl, osl = int(row["input_len"]), int(row["output_len"])
    mml = int(row.get("max_model_len") or 1 << max(11, math.ceil(math.log2(isl + osl))))
    chunked = _row_bool(row, "enable_chunked_prefill", True)
    if not chunked and "max_num_batched_tokens" not in row:
        # vLLM 0.32 EngineArgs: without chunked prefill the default budget holds a
        # whole max_model_len prompt
        mnbt = max(mnbt, mml)
    from kvcore.sim.modes import check_vllm_chunked_prefill, mamba_layout, resolve_mamba_cache_mode

    # the Mamba cache mode vLLM 0.32 runs: align on a model with Mamba layers and
    # prefix caching on (kvcore.sim.modes); it refuses that without chunked prefill
    mode, _ = resolve_mamba_cache_mode(None, _row_bool(row, "enable_prefix_caching", True),
                                       mamba_layout(cfg_path)[0])
    check_vllm_chunked_prefill(mode, chunked)
    gmu = row.get("gpu_memory_utilization")
    bs = row.get("block_size")
    try:
        kv = _plan(cfg_path, gpu, tp, mml, mnbt, mns, row.get("kv_cache_memory_gib"),
                   engine_of(row), pp, kvd, mode, gmu, bs)
    except KVCoreError as e:
        # the run was published, so vLLM started it: kvcore's fit verdict refused a
        # deployment that runs.  Recorded (``_REFUSALS``, printed by the table) and
        # simulated with the smallest KV budget that holds one request of max_model_len
        # (vLLM had at least that)
        if row.get("kv_cache_memory_gib") is not None or not isinstance(
                e, NotEnoughMemoryError):
            raise
        big = _plan(cfg_path, gpu, tp, mml, mnbt, mns, float(1 << 14), None, pp,
                    kvd, mode, None, bs)  # 16 TiB
        need = big.stats.kv_cache_memory_bytes_for_one_request
        _REFUSALS[row["id"]] = f"{e} (simulated with {need / (1 << 30):.2f} GiB of KV)"
        kv = _plan(cfg_path, gpu, tp, mml, mnbt, mns, need / (1 << 30), None, pp, kvd,
                   mode, None, bs)
    g0 = kv.kv_cache_groups[0].spec
    cap = (kv.num_blocks - 1) * g0.block_size if kv.num_blocks else None
    model = roofline_for(load_model_config(cfg_path), kv, gpu=gpu,
                         tensor_parallel_size=tp, pipeline_parallel_size=pp,
                         kv_cache_dtype=kvd, efficiency=efficiency)
    rate = row.get("request_rate", "inf")
    outputs: list[int] | None = None
    if row.get("output_lens") is not None:  # the run's own, per request
        outputs = [int(n) for n in row["output_lens"]]
    elif lengths in ("sharegpt", "stated") and is_sharegpt_row(row):
        outputs = sharegpt_output_lengths(int(row["num_prompts"]), osl, isl)
    inputs = [int(n) for n in row["input_lens"]] if row.get("input_lens") else None
    if lengths == "stated" and not is_sharegpt_row(row):
        drawn_in, drawn_out = stated_lengths(row)
        inputs = inputs if inputs is not None else drawn_in
        outputs = outputs if outputs is not None else drawn_out
    if sim == "engine":
        fig = _engine_figures(model, kv, row, mnbt, mns, int(kv.max_model_len or mml),
                              outputs, inputs)
    else:
        reqs: tuple[tuple[int, int, float], ...] = ()
        if outputs is not None or inputs is not None:
            from kvcore.sim.workload import arrival_times

            n_req = int(row["num_prompts"])
            times = arrival_times(n_req, math.inf if rate == "inf" else
                                  float(rate), _burstiness(row), 0)
            reqs = tuple(zip(inputs or [isl] * n_req, outputs or [osl] * n_req, times))
        w = Workload(isl, osl, int(row["num_prompts"]),
                     max_concurrency=row.get("max_concurrency"),
                     request_rate=math.inf if rate == "inf" else float(rate),
                     burstiness=_burstiness(row), requests=reqs)
        fig = run_workload(model, kv, w, max_num_seqs=mns, max_num_batched_tokens=mnbt,
                           kv_capacity_tokens=cap,
                           enable_prefix_caching=_row_bool(row, "enable_prefix_caching",
                                                           True),
                           enable_chunked_prefill=chunked)
    stat = "median" if str(row.get("statistic", "")).startswith("median") else "mean"
    return {"output_throughput": fig["output_throughput"],
            "ttft_ms": fig[f"{stat}_ttft_ms"], "tpot_ms": fig[f"{stat}_tpot_ms"]}


def _simulate_one(args: tuple[dict[str, Any], Efficiency, Path | None, str, str]
                  ) -> tuple[dict[str, float], str | None]:
    row, eff, base, sim, lengths = args
    got = simulate_row(row, eff, base=base, sim=sim, lengths=lengths)
    return got, _REFUSALS.get(row["id"])


_POOL: list[Any] = []


def _pool(workers: int) -> Any:
    """A process pool of ``workers`` kept across the fit's evaluations (each worker
    keeps its plans cached)."""
    if _POOL and _POOL[0][0] == workers:
        return _POOL[0][1]
    import concurrent.futures
    import multiprocessing

    for _, old in _POOL:
        old.shutdown()
    _POOL.clear()
    ctx = multiprocessing.get_context("spawn")
    ex = concurrent.futures.ProcessPoolExecutor(max_workers=workers, mp_context=ctx)
    import atexit

    atexit.register(ex.shutdown)  # before the interpreter tears its modules down
    _POOL.append((workers, ex))
    return ex


def evaluate(rows: list[dict[str, Any]], efficiency: Efficiency = DEFAULT_EFFICIENCY, *,
             base: Path | None = None, sim: str = "engine", workers: int = 1,
             lengths: str = DEFAULT_LENGTHS) -> list[dict[str, Any]]:
    """Per row: id, split, and per metric the measured and simulated value and the
    relative error ``simulated / measured - 1`` (metrics the row does not quote are
    left out).  ``workers`` > 1: the rows are replayed in a process pool of that many
    (the same figures: each replay is deterministic).  ``lengths``: as
    :func:`simulate_row`'s."""
    args = [(row, efficiency, base, sim, lengths) for row in rows]
    if workers > 1 and len(rows) > 1:
        done = list(_pool(workers).map(_simulate_one, args, chunksize=1))
        for row, (_, why) in zip(rows, done):
            if why is not None:
                _REFUSALS[row["id"]] = why
        figs = [g for g, _ in done]
    else:
        figs = [simulate_row(row, efficiency, base=base, sim=sim, lengths=lengths)
                for row in rows]
    out = []
    for row, got in zip(rows, figs):
        rec: dict[str, Any] = {"id": row["id"], "split": row["split"]}
        excl = row.get("excluded")
        skip: dict[str, Any] = excl if isinstance(excl, dict) else {}
        for m in METRICS:
            if m in row["measured"] and m not in skip:
                meas = float(row["measured"][m])
                rec[m] = {"measured": meas, "simulated": got[m],
                          "error": got[m] / meas - 1.0}
        supp = {m: float(v) for m, v in row.get("supplementary", {}).items()
                if m in METRICS}
        if supp:  # reported apart, never in summary()
            rec["supplementary"] = {m: {"measured": v, "simulated": got[m],
                                        "error": got[m] / v - 1.0}
                                    for m, v in supp.items()}
        out.append(rec)
    return out


def select_rows(rows: list[dict[str, Any]], only: str | None = None,
                added: str | None = None) -> list[dict[str, Any]]:
    """The rows whose id contains one of the comma-separated substrings ``only`` and
    whose ``added`` note starts with ``added`` (e.g. ``v3``); ``None``: no filter.

    Raises :class:`kvcore.errors.KVCoreError` (ConfigError) when nothing matches."""
    from kvcore.errors import ConfigError

    out = rows
    if only:
        keys = [k for k in only.split(",") if k]
        out = [r for r in out if any(k in r["id"] for k in keys)]
    if added:
        out = [r for r in out if str(r.get("added", "v1")).startswith(added)]
    if not out:
        raise ConfigError(f"--only={only!r} --added={added!r}: no measurement row matches; "
                          "valid: substrings of the ids in measurements.json, and an "
                          "'added' prefix such as v2 or v3")
    return out


def summary(results: list[dict[str, Any]], split: str) -> dict[str, float]:
    """Median absolute relative error per metric over the rows of ``split``."""
    out = {}
    for m in METRICS:
        errs = [abs(r[m]["error"]) for r in results if r["split"] == split and m in r]
        out[m] = statistics.median(errs) if errs else float("nan")
    return out


#: the grid of each fitted term in v5 (tests/data/sim_accuracy/v5_protocol.md)
_GRID_V5: dict[str, tuple[float, ...]] = {
    "memory": (0.5, 0.55, 0.6, 0.65, 0.7, 0.75, 0.8, 0.85, 0.9, 0.95),
    "memory_hbm3": (0.5, 0.55, 0.6, 0.65, 0.7, 0.75, 0.8, 0.85, 0.9, 0.95),
    "memory_gddr": (0.6, 0.7, 0.75, 0.8, 0.85, 0.9, 0.95),
    "compute": (0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9),
    "step_s": (0.0, 0.5e-3, 1e-3, 1.5e-3, 2e-3, 2.5e-3, 3e-3, 4e-3, 5e-3),
    "layer_s": (0.0, 1e-5, 2e-5, 3e-5, 4e-5, 6e-5, 8e-5, 1e-4, 1.5e-4),
    "moe_layer_s": (0.0, 2e-5, 5e-5, 1e-4, 1.5e-4, 2e-4, 3e-4),
    "request_overhead_s": (0.0, 2e-3, 4e-3, 6e-3, 8e-3, 1e-2, 1.2e-2, 1.5e-2, 2e-2,
                           2.5e-2, 3e-2),
    "moe_memory": (0.2, 0.3, 0.4, 0.5, 0.6, 0.8, 1.0),
    "per_request_s": (0.0, 1e-5, 2e-5, 5e-5, 1e-4),
    "allreduce_latency_s": (1e-5, 2e-5, 5e-5, 1e-4, 2e-4),
}

#: the grid of each fitted term (v6, tests/data/sim_accuracy/v6_protocol.md): v5's, the
#: efficiencies' upper edges at 1.0 (the physical bound), and the two new terms
_GRID: dict[str, tuple[float, ...]] = {
    **_GRID_V5,
    "memory": (0.5, 0.55, 0.6, 0.65, 0.7, 0.75, 0.8, 0.85, 0.9, 0.95, 1.0),
    "memory_hbm3": (0.5, 0.55, 0.6, 0.65, 0.7, 0.75, 0.8, 0.85, 0.9, 0.95, 1.0),
    "memory_gddr": (0.6, 0.7, 0.75, 0.8, 0.85, 0.9, 0.95, 1.0),
    "compute": (0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0),
    "api_server_s": (0.0, 5e-4, 1e-3, 2e-3, 3e-3, 5e-3, 8e-3, 1.2e-2, 2e-2, 3e-2),
    "moe_compute": (0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0),
    "moe_memory_tokens": (0.0, 1.0, 2.0, 4.0, 8.0, 16.0, 64.0),
    # v8 (tests/data/sim_accuracy/v8_protocol.md): seconds per streamed chunk
    "api_stream_s": (0.0, 1e-5, 2e-5, 4e-5, 6e-5, 8e-5, 1e-4, 1.2e-4, 1.5e-4, 2e-4, 3e-4),
    # v9 (tests/data/sim_accuracy/v9_protocol.md): factors of compute
    "compute_fp8": (0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0),
    "compute_gddr": (0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0),
    # v11 (tests/data/sim_accuracy/v11_protocol.md): a factor of compute on HBM3 parts;
    # 2.0 is the edge only where compute is 0.5 (the product is capped at 1)
    "compute_hbm3": (0.8, 1.0, 1.2, 1.4, 1.6, 1.8, 2.0),
}

#: v2's coefficients (docs/SIM_ACCURACY.md), where the v6 fit starts
V2_EFFICIENCY = Efficiency(
    compute=0.8, memory=0.6, memory_hbm3=0.6, memory_gddr=0.9, roofline_p=3.0,
    step_s=1.5e-3, per_request_s=2e-5, per_block_table_s=1e-6, allreduce_latency_s=2e-5,
    prefill_token_s=0.0, moe_memory=0.5, request_overhead_s=0.02)


#: the v6 fit (tests/data/sim_accuracy/v6_protocol.md: accepted by its rule, worse than
#: v2 on every held-out set, so not the default)
V6_FIT_EFFICIENCY = dataclasses.replace(
    V2_EFFICIENCY, compute=0.4, memory=0.55, memory_hbm3=0.9, step_s=1e-3, layer_s=1e-5,
    moe_memory=0.8, moe_compute=0.7)


#: v7's coefficients (the default from v7 to v8, tests/data/sim_accuracy/v7_protocol.md)
V7_EFFICIENCY = dataclasses.replace(V2_EFFICIENCY, memory_hbm3=0.75, moe_memory=0.6,
                                    moe_memory_tokens=1.0)

#: v8's coefficients (the API server's two serial stages fitted: v8_protocol.md)
V8_EFFICIENCY = dataclasses.replace(V7_EFFICIENCY, api_server_s=3e-3, api_stream_s=1e-4)

#: the v9 fit D (v9_protocol.md): rejected by its rule (compute_fp8 on its grid's edge)
V9_FIT_EFFICIENCY = dataclasses.replace(V8_EFFICIENCY, compute=0.5, compute_fp8=0.3,
                                        moe_compute=0.5)

#: v10's candidate E (v10_protocol.md): D without its edge term; adopted (the default)
V10_E_EFFICIENCY = dataclasses.replace(V9_FIT_EFFICIENCY, compute_fp8=1.0)

#: v11's candidate F (v11_protocol.md): E with compute_hbm3, compute, compute_gddr
#: refitted from E, one round on every fit row (v11_fit_log.txt)
V11_FIT_EFFICIENCY = dataclasses.replace(V10_E_EFFICIENCY, compute_hbm3=1.2,
                                         compute_gddr=0.9)


def source_family(row: dict[str, Any], scheme: str = "v9") -> str:
    """The deployment a row's figures come from, for the fit's weights (v6 protocol):
    every GPUStack Performance Lab page is one lab's deployment, as are the
    tenstorrent/tt-inference-server threads, the dennislee22 README and the
    SemiAnalysis InferenceX runs; any other source is the repository or thread it names
    first (v9: ``owner/repo`` or ``owner/repo#N``), else its text up to a quote.
    ``scheme="v6"``: the v6 - v8 fits' families (the text up to a quote: one family per
    file of a repository)."""
    src = str(row.get("source", ""))
    for key, fam in (("GPUStack", "gpustack"), ("tenstorrent/tt-inference-server",
                                               "tenstorrent"),
                     ("dennislee22", "dennislee22"), ("InferenceX", "inferencex")):
        if key in src:
            return fam
    if scheme == "v6":  # the families the v6 - v8 fits weighed by
        return src.split(" '")[0] or row["id"]
    # v9: the repository or thread the source names first ("owner/repo", "owner/repo#N"
    # or "vLLM blog"), so the files of one repository are one deployment (v8 split them
    # by file path)
    m = re.match(r"[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+(#\d+)?", src)
    if m:
        return m.group(0)
    return src.split(" '")[0] or row["id"]


def _weighted_median(pairs: list[tuple[float, float]]) -> float:
    """The smallest value whose cumulative weight reaches half the total."""
    pairs = sorted(pairs)
    half = sum(w for _, w in pairs) / 2.0
    acc = 0.0
    for v, w in pairs:
        acc += w
        if acc >= half - 1e-12:
            return v
    return pairs[-1][0]


def _loss(rows: list[dict[str, Any]], eff: Efficiency, base: Path | None,
          sim: str = "engine", weighted: bool = False, workers: int = 1,
          families: str = "v9", lengths: str = DEFAULT_LENGTHS) -> float:
    """The fit's loss: the median plus a quarter of the mean absolute log error over
    every quoted figure of the rows, pooled (each figure counts the same; v2's loss, kept
    in v5: a loss weighing each metric the same (v4, v5b) let the seven noisy
    concurrency-1 TTFTs set the compute efficiency to its grid's lowest value, 0.3, and
    broke the large-batch rows; docs/SIM_ACCURACY.md).  ``weighted`` (v6): each figure
    weighs 1 / sqrt(n), n the fit rows of its :func:`source_family`; weighted median
    and mean."""
    if weighted:
        count: dict[str, int] = {}
        for row in rows:
            f = source_family(row, families)
            count[f] = count.get(f, 0) + 1
        wt = {row["id"]: 1.0 / math.sqrt(count[source_family(row, families)])
              for row in rows}
        pairs = []
        for r in evaluate(rows, eff, base=base, sim=sim, workers=workers,
                          lengths=lengths):
            for m in METRICS:
                if m in r:
                    pairs.append((abs(math.log1p(r[m]["error"])), wt[r["id"]]))
        tot = sum(w for _, w in pairs)
        return _weighted_median(pairs) + 0.25 * sum(v * w for v, w in pairs) / tot
    errs = []
    for r in evaluate(rows, eff, base=base, sim=sim, workers=workers, lengths=lengths):
        for m in METRICS:
            if m in r:
                errs.append(abs(math.log1p(r[m]["error"])))
    return statistics.median(errs) + 0.25 * statistics.fmean(errs)


def fit(rows: list[dict[str, Any]], start: Efficiency | None = None, *,
        base: Path | None = None, rounds: int = 2, sim: str = "engine",
        grid: dict[str, tuple[float, ...]] | None = None, weighted: bool = True,
        workers: int = 1, log: Any = None, families: str = "v9",
        lengths: str = DEFAULT_LENGTHS) -> Efficiency:
    """Coordinate descent over ``grid`` (default :data:`_GRID`, v6's) on the ``fit``
    rows of ``rows`` but those with a ``fit_excluded`` reason (loss: :func:`_loss`, the
    median plus a quarter of the mean absolute log error over every quoted figure,
    ``weighted`` by source family as the v6 protocol fixes; v5's fit: ``grid=_GRID_V5,
    weighted=False``), from ``start`` (default: the class defaults of
    :class:`Efficiency`, so the result does not depend on the current
    :data:`DEFAULT_EFFICIENCY`; the v6 fit starts from :data:`V2_EFFICIENCY`).
    ``workers``: processes replaying the rows; ``log(name, value, loss, best)``: called
    per candidate.  ``families``: :func:`source_family`'s scheme (``v6`` reproduces
    the v6 - v8 fits); ``lengths``: as :func:`simulate_row`'s."""
    fit_rows = [r for r in rows if r["split"] == "fit" and not r.get("fit_excluded")]
    if not fit_rows:
        from kvcore.errors import ConfigError

        raise ConfigError("fit: no row has split 'fit' (without fit_excluded); valid: "
                          "measurements with fit rows", field="split", value="fit")
    eff = start if start is not None else Efficiency()
    grid = _GRID if grid is None else grid
    best = _loss(fit_rows, eff, base, sim, weighted, workers, families, lengths)
    for _ in range(rounds):
        for name, values in grid.items():
            for v in values:
                cand = dataclasses.replace(eff, **{name: v})
                if cand == eff:
                    continue  # the current point: its loss is ``best``
                loss = _loss(fit_rows, cand, base, sim, weighted, workers, families,
                             lengths)
                if log is not None:
                    log(name, v, loss, best)
                if loss < best - 1e-12:
                    best, eff = loss, cand
    return eff


def _parser() -> Any:
    """The argparse parser of ``python -m kvcore.sim.accuracy`` (one-line errors, exit 2)."""
    import argparse

    class _OneLine(argparse.ArgumentParser):
        def error(self, message: str) -> Any:  # type: ignore[override]
            print(f"error: {message} (see {self.prog} --help)", file=sys.stderr)
            raise SystemExit(2)

    p = _OneLine(prog="python -m kvcore.sim.accuracy",
                 description="Compare the step-time model's simulated figures with the "
                             "published vLLM measurements (the table of "
                             "docs/SIM_ACCURACY.md).")
    p.add_argument("--data", metavar="DIR", default=None,
                   help="folder holding measurements.json (default: the repository's "
                        "tests/data/sim_accuracy)")
    p.add_argument("--only", metavar="ID,ID", default=None,
                   help="evaluate only rows whose id contains one of these substrings")
    p.add_argument("--added", metavar="TAG", default=None,
                   help="evaluate only rows whose 'added' note starts with TAG (e.g. v3)")
    p.add_argument("--fit", action="store_true",
                   help="fit the Efficiency terms on the fit rows first (sees every fit "
                        "row; --only / --added then do not filter)")
    p.add_argument("--fast", action="store_true",
                   help="replay with kvcore.sim.fastsim instead of the engine")
    p.add_argument("--fit-terms", default=None, metavar="NAME,NAME",
                   help="fit only these Efficiency terms, in this order (default: every "
                        "term of the grid); the v7 refit: memory_hbm3,moe_memory,"
                        "moe_memory_tokens with --rounds 2")
    from kvcore.sim.command import _count_arg  # bounded (a plain type=int was not)

    # each round replays every fit row per grid value (minutes): 100 is days already
    p.add_argument("--rounds", type=_count_arg("rounds", maximum=100, what="passes",
                                               vllm=False),
                   default=1, metavar="N",
                   help="coordinate-descent rounds of --fit (default 1, as the v6 "
                        "protocol fits)")
    p.add_argument("--workers", type=_count_arg("workers", maximum=1024, what="processes",
                                                vllm=False),
                   default=1, metavar="N",
                   help="replay the rows in N processes (the same figures)")
    p.add_argument("--lengths", choices=LENGTH_MODELS, default=DEFAULT_LENGTHS,
                   help="how rows' lengths are replayed: sharegpt (default: ShareGPT rows' "
                        "outputs drawn from ShareGPT's length shape, v12_protocol.md) or "
                        "mean (every request at the row's mean lengths, as v1 - v11); "
                        "stated (v14's H: sharegpt, plus each row's stated length "
                        "distribution: output_len_max without --ignore-eos, "
                        "random_range_ratio, a clipped normal)")
    p.add_argument("--fit-from", choices=("v2", "default"), default="v2",
                   help="where --fit starts: v2's coefficients (default, as the v6 and v7 "
                        "fits) or DEFAULT_EFFICIENCY (the v8 refit)")
    return p


def _main(argv: list[str]) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    if args.data is not None:
        base = Path(args.data)
        if not (base / "measurements.json").is_file():
            parser.error(f"argument --data: {args.data!r} holds no measurements.json; "
                         "valid: a folder with measurements.json")
    else:
        base = Path(__file__).resolve().parents[2] / "tests" / "data" / "sim_accuracy"
    # the flags first, then the data
    if args.workers < 1:
        parser.error(f"argument --workers: {args.workers} is not a process count; valid: "
                     "an integer >= 1")
    if args.rounds < 1:
        parser.error(f"argument --rounds: {args.rounds} is not a round count; valid: an "
                     "integer >= 1")
    if not args.fit and (args.fit_terms is not None or args.rounds != 1
                         or args.fit_from != "v2"):
        parser.error("argument --fit-terms / --rounds / --fit-from: only with --fit")
    rows = load_measurements(base / "measurements.json")
    if not args.fit:  # the fit always sees every fit row
        rows = select_rows(rows, args.only, args.added)
    sim = "fast" if args.fast else "engine"
    eff = DEFAULT_EFFICIENCY
    if args.fit:
        def log(name: str, v: float, loss: float, best: float) -> None:
            print(f"fit: {name}={v:g} loss {loss:.5f} (best {best:.5f})", file=sys.stderr,
                  flush=True)

        grid = None
        if args.fit_terms is not None:
            names = [t for t in args.fit_terms.split(",") if t]
            bad = [t for t in names if t not in _GRID]
            if bad or not names:
                parser.error(f"argument --fit-terms: {args.fit_terms!r} names no fitted "
                             f"term or an unknown one ({', '.join(bad)}); valid: "
                             f"{', '.join(_GRID)}")
            grid = {t: _GRID[t] for t in names}
        start = V2_EFFICIENCY if args.fit_from == "v2" else DEFAULT_EFFICIENCY
        eff = fit(rows, start, base=base, sim=sim, workers=args.workers, log=log,
                  rounds=args.rounds, grid=grid, lengths=args.lengths)
        print(f"fitted: {eff}")
    res = evaluate(rows, eff, base=base, sim=sim, workers=args.workers,
                   lengths=args.lengths)
    print("| row | split | output tok/s meas / sim (err) | TTFT ms meas / sim (err) | "
          "TPOT ms meas / sim (err) |")
    print("|---|---|---|---|---|")
    for r in res:
        cells = []
        for m in METRICS:
            if m in r:
                x = r[m]
                cells.append(f"{x['measured']:.4g} / {x['simulated']:.4g} "
                             f"({100 * x['error']:+.0f} %)")
            else:
                cells.append("-")
        print(f"| {r['id']} | {r['split']} | " + " | ".join(cells) + " |")
    for split in ("fit", "holdout"):
        s = summary(res, split)
        print(f"{split}: median |error| " + ", ".join(
            f"{m} {100 * v:.1f} %" if v == v else f"{m} -" for m, v in s.items()))
    for rid, why in sorted(_REFUSALS.items()):
        print(f"kvcore's fit verdict refused {rid} (vLLM ran it): {why}")
    supp = [(r["id"], m, x) for r in res for m, x in r.get("supplementary", {}).items()]
    for rid, m, x in supp:
        print(f"supplementary (not in the medians) {rid} {m}: {x['measured']:.4g} / "
              f"{x['simulated']:.4g} ({100 * x['error']:+.0f} %)")
    return 0


def main(argv: list[str]) -> int:
    """``_main`` with bad input as one line on stderr and exit status 2."""
    from kvcore.errors import KVCoreError

    try:
        return _main(argv)
    except SystemExit as e:  # argparse: --help (0) or a one-line usage error (2)
        return int(e.code or 0) if isinstance(e.code, int) or e.code is None else 2
    except KVCoreError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
