"""Calibrate the roofline clock on your own ``vllm bench serve`` runs.

The default coefficients (:data:`kvcore.sim.timing.DEFAULT_EFFICIENCY`) are fitted on
published measurements of many deployments.  What they cannot know is the constant of
*your* deployment: at low load a request's TTFT is one prefill step plus the client's,
the host's and the HTTP stack's time, and across published short-prompt,
concurrency-1 runs that time ranges from about 5 to 50 ms (docs/SIM_ACCURACY.md, v13).
One measured run of the deployment holds it.

``kvcore calibrate MODEL RESULT.json [RESULT.json ...] --gpu GPU [--tp N ...]`` reads
``vllm bench serve --save-result`` files (:func:`read_bench_result`), replays each run
(:func:`bench_result_row`: its request count, concurrency, rate, burstiness and mean
lengths; per-request output lengths with ``--save-detailed``) and moves a few
:class:`~kvcore.sim.timing.Efficiency` terms (:data:`DEFAULT_TERMS`: the request
overhead, the GPU's memory efficiency, compute) over fixed grids
(:data:`CALIBRATION_GRID`) until the simulated figures match the measured ones
(:func:`calibrate`: coordinate descent minimising the mean absolute log error).  It
writes the coefficients as JSON (:func:`save_efficiency`);
``kvcore simulate --efficiency FILE`` and ``kvcore tune --efficiency FILE`` use them
(:func:`load_efficiency`).

Bad input (a file that is not a result, a field out of range, an unknown term) raises
:class:`kvcore.errors.ConfigError` naming the file and the field; the CLI prints it on
one line and exits 2.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import sys
from pathlib import Path
from typing import Any

from kvcore.errors import ConfigError
from kvcore.sim.timing import DEFAULT_EFFICIENCY, Efficiency
from kvcore.userfiles import dumps_json

__all__ = ["read_bench_result", "bench_result_row", "calibrate", "memory_term",
           "save_efficiency", "load_efficiency", "CALIBRATION_GRID", "DEFAULT_TERMS",
           "read_bench_results", "warn_if_other_deployment"]

#: each calibrated term's grid: the request overhead in 1 - 5 ms steps to 80 ms
#: (published concurrency-1 TTFT floors reach ~50 ms), memory efficiencies 0.3 - 1.0 by
#: 0.025, compute 0.2 - 1.0 by 0.05 (the upper edges are the datasheet peaks)
CALIBRATION_GRID: dict[str, tuple[float, ...]] = {
    "request_overhead_s": tuple(ms / 1000 for ms in (
        0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 18, 20, 22, 25, 28, 30,
        32, 36, 40, 45, 50, 55, 60, 70, 80)),
    "memory": tuple(round(0.3 + 0.025 * i, 3) for i in range(29)),
    "memory_hbm3": tuple(round(0.3 + 0.025 * i, 3) for i in range(29)),
    "memory_gddr": tuple(round(0.3 + 0.025 * i, 3) for i in range(29)),
    "compute": tuple(round(0.2 + 0.05 * i, 2) for i in range(17)),
    "step_s": tuple(ms / 1000 for ms in (0, 0.25, 0.5, 0.75, 1, 1.25, 1.5, 2, 2.5, 3, 4,
                                         5, 6, 8)),
    "api_server_s": tuple(ms / 1000 for ms in (0, 0.5, 1, 2, 3, 4, 5, 6, 8, 10, 12, 15,
                                               20)),
}

#: the terms :func:`calibrate` moves by default, in this order; ``memory`` stands for the
#: GPU's own memory term (:func:`memory_term`)
DEFAULT_TERMS = ("request_overhead_s", "memory", "compute")

#: the figures compared: the row's measured key -> the result file's key (``{stat}``:
#: ``median`` or ``mean``)
_FIGURES = {"output_throughput": "output_throughput", "ttft_ms": "{stat}_ttft_ms",
            "tpot_ms": "{stat}_tpot_ms"}

#: what ``load_efficiency`` writes and reads
_FORMAT = "kvcore-efficiency/1"


def memory_term(gpu: Any) -> str:
    """The :class:`Efficiency` memory term that applies on ``gpu`` (a catalog name or
    GPU): ``memory_hbm3`` on HBM3 / HBM3e parts, ``memory_gddr`` on GDDR parts, else
    ``memory``.  Raises ConfigError for an unknown GPU or one without perf figures."""
    from kvcore.deploy.gpus import GPU, get_gpu

    g = gpu if isinstance(gpu, GPU) else get_gpu(gpu, memory_flag=False)
    if g.perf is None:
        raise ConfigError(f"gpu: {g.name} has no peak figures in the catalog; give a GPU "
                          "with perf figures (kvcore gpus --json)", field="gpu",
                          value=g.name)
    return {"hbm3": "memory_hbm3", "gddr": "memory_gddr"}.get(g.perf.memory_type, "memory")


#: the largest result or coefficient file read, bytes (a --save-detailed result of
#: 100,000 requests is ~30 MB)
MAX_FILE_BYTES = 512 << 20


def _read_text(path: Any, what: str) -> str:
    if not isinstance(path, (str, Path)) or not str(path):
        raise ConfigError(f"path {path!r} is not a file name; give {what}", field="path",
                          value=repr(path)[:80])
    p = Path(path)
    try:
        exists, regular = p.exists(), p.is_file()
        size = p.stat().st_size if regular else 0
    except (OSError, ValueError) as exc:  # a name too long, a NUL byte
        raise ConfigError(f"{path}: cannot be read ({type(exc).__name__}: {exc}); give "
                          f"{what}", field=str(path), value=str(path)) from None
    if not exists:
        raise ConfigError(f"{path}: no such file; give {what}", field=str(path),
                          value=str(path))
    if not regular:  # a folder, a FIFO, a device: never read (it could block)
        raise ConfigError(f"{path}: not a regular file; give {what}", field=str(path),
                          value=str(path))
    if size > MAX_FILE_BYTES:
        raise ConfigError(f"{path}: {size:,} bytes, more than the {MAX_FILE_BYTES >> 20} "
                          f"MiB read; give {what}", field=str(path), value=str(path))
    try:
        return p.read_text()
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise ConfigError(f"{path}: cannot be read ({type(exc).__name__}: {exc}); give "
                          f"{what}", field=str(path), value=str(path)) from None


def _load_json(path: Any, what: str) -> Any:
    from kvcore.userfiles import loads_json

    text = _read_text(path, what)
    return loads_json(text, f"{path}", field=str(path), value=str(path))


def read_bench_results(path: str | Path) -> list[dict[str, Any]]:
    """The runs of a ``vllm bench serve --save-result`` file: one JSON object, or one
    per line (``--append-result`` appends each run as a line).  Raises ConfigError naming
    the file when it cannot be read, is not JSON, or holds something else than objects."""
    from kvcore.userfiles import loads_json

    what = "a vllm bench serve --save-result JSON file"
    text = _read_text(path, what)
    try:  # the shared reader: bad JSON, nesting too deep, an integer too long
        objs = [loads_json(text, f"{path}", field=str(path), value=str(path))]
    except ConfigError as first:
        lines = [ln for ln in text.splitlines() if ln.strip()]
        if len(lines) <= 1:  # one line: its own error
            raise ConfigError(f"{first.message}; give {what}", **first.extra) from None
        # several lines: --append-result's one run per line (a bad line is named)
        objs = [loads_json(ln, f"{path}:{i}", field=str(path), value=str(path), line=i)
                for i, ln in enumerate(text.splitlines(), 1) if ln.strip()]
    for obj in objs:
        if not isinstance(obj, dict):
            raise ConfigError(f"{path}: holds a JSON {type(obj).__name__}, not the object "
                              "vllm bench serve --save-result writes", field=str(path),
                              value=str(path))
    return objs


def read_bench_result(path: str | Path) -> dict[str, Any]:
    """The object of a ``vllm bench serve --save-result`` JSON file holding one run
    (``--save-detailed`` adds per-request lists; :func:`read_bench_results` reads
    ``--append-result`` files of several).  Raises ConfigError naming the file when it
    cannot be read, is not JSON, is not an object or holds several runs."""
    objs = read_bench_results(path)
    if len(objs) != 1:
        raise ConfigError(f"{path}: holds {len(objs)} runs (--append-result); read them "
                          "with read_bench_results", field=str(path), value=str(path))
    return objs[0]


def _num(name: str, obj: dict[str, Any], key: str, *, minimum: float = 0.0,
         strict: bool = True, integer: bool = False) -> float | None:
    v = obj.get(key)
    if v is None:
        return None
    ok = (not isinstance(v, bool) and isinstance(v, (float, int))
          and (isinstance(v, float) or abs(v) < 1 << 62) and math.isfinite(v)
          and (v > minimum if strict else v >= minimum)
          and (not integer or isinstance(v, int)))
    if not ok:
        kind = "an integer" if integer else "a finite number"
        rel = ">" if strict else ">="
        shown = repr(v) if len(repr(v)) <= 40 else repr(v)[:37] + "..."
        raise ConfigError(f"{name}: {key} {shown} is not {kind} {rel} {minimum:g}",
                          field=key, value=shown)
    return float(v)


def _check_rate(result: dict[str, Any], name: str, n: int, rate: Any, burst: Any) -> None:
    """Warn when a result's ``request_throughput`` (completed / duration) is above what
    its ``request_rate`` allows, i.e. the rate field does not describe the run (an edited
    file, another run's rate) and the replay would send requests slower than they came.

    vllm bench serve sends n requests with gaps drawn from a Gamma(shape ``burstiness``,
    mean 1 / r); recent versions rescale the send times so that the last one is at
    exactly n / r, older ones leave the sum of the n - 1 gaps free: a Gamma(b (n - 1))
    of mean (n - 1) / r and relative standard deviation 1 / sqrt(b (n - 1)).  The
    duration is at least the last send, so the throughput is at most
    r x n / (n - 1) / (1 - 4 / sqrt(b (n - 1))) but for a 4-sigma draw; kvcore warns
    above that, with 5 % more, and only where b (n - 1) >= 64 (the bound is then at
    most 2 r; a few requests say too little)."""
    import warnings

    if rate is None or rate == "inf" or n < 2:
        return
    thr = result.get("request_throughput")  # not replayed: a malformed one is ignored
    if isinstance(thr, bool) or not isinstance(thr, (int, float)) or not (
            0 < thr < math.inf):
        return
    b = math.inf if burst == "inf" else float(burst if burst is not None else 1.0)
    k = b * (n - 1)
    if k < 64:
        return
    bound = float(rate) * n / (n - 1) * 1.05
    if k < math.inf:
        bound /= 1 - 4 / math.sqrt(k)
    if thr > bound:
        warnings.warn(f"{name}: request_throughput {thr:.4g} req/s is above what its "
                      f"request_rate {float(rate):.4g} req/s allows for {n} requests (at "
                      f"most {bound:.4g}): the file's rate does not describe this run; "
                      "the replay sends at the file's rate (check the run's "
                      "--request-rate)", stacklevel=3)


def bench_result_row(result: dict[str, Any], *, model: str, gpu: str,
                     name: str = "result", statistic: str = "median",
                     tensor_parallel_size: int = 1, pipeline_parallel_size: int = 1,
                     kv_cache_dtype: str = "auto", max_model_len: int | None = None,
                     max_num_batched_tokens: int | None = None,
                     max_num_seqs: int | None = None, enable_prefix_caching: bool = True,
                     enable_chunked_prefill: bool = True,
                     kv_cache_memory_gib: float | None = None,
                     engine: str | None = None, dataset: str = "random",
                     gpu_memory_utilization: float | None = None,
                     block_size: int | None = None) -> dict[str, Any]:
    """A measurement row (the format of :mod:`kvcore.sim.accuracy`) replaying one
    ``vllm bench serve`` result: ``completed`` requests (tokens: ``total_input_tokens`` /
    ``total_output_tokens`` per request, rounded; ``input_lens`` / ``output_lens`` per
    request when the file has them, ``--save-detailed``, failed requests dropped), the file's ``max_concurrency``,
    ``request_rate`` (``"inf"`` or requests/s) and ``burstiness``; compared figures
    ``output_throughput`` (tokens/s), ``{statistic}_ttft_ms`` and
    ``{statistic}_tpot_ms`` (ms), those the file has.  ``model``: a config path,
    folder or embedded name; ``gpu``: a catalog name; the rest as ``vllm serve``'s flags
    of the run (``engine``: ``vllm==X.Y.Z``, the profile its GPU budget is planned with).
    ``gpu_memory_utilization`` / ``block_size``: the run's ``vllm serve`` flags (None:
    vLLM's defaults; the utilization is unused with ``kv_cache_memory_gib``).
    ``dataset``: the run's ``--dataset-name``, ``random`` (every request at the mean
    lengths) or ``sharegpt`` (output lengths drawn from ShareGPT's shape and scaled to
    the run's mean, :func:`kvcore.sim.accuracy.sharegpt_output_lengths`); per-request
    ``output_lens`` in the file replace either.

    Raises ConfigError naming ``name`` and the field: ``completed`` missing or < 1,
    token totals missing or < 1 per request, a rate, burstiness or concurrency out of
    range, a ramp-up run (not replayed), a figure that is not a number >= 0, no figure
    at all, or ``statistic`` not median / mean."""
    from kvcore.units import plain_int

    # numpy integers as the equal plain int, once here (the row holds plain ints; bool,
    # floats and text are refused below, naming the field)
    tensor_parallel_size, pipeline_parallel_size, max_model_len, block_size = (
        plain_int(tensor_parallel_size), plain_int(pipeline_parallel_size),
        plain_int(max_model_len), plain_int(block_size))
    max_num_batched_tokens, max_num_seqs = (plain_int(max_num_batched_tokens),
                                            plain_int(max_num_seqs))
    if not isinstance(result, dict):
        raise ConfigError(f"result: a {type(result).__name__}, not the object vllm bench "
                          "serve --save-result writes", field="result",
                          value=repr(result)[:40])
    names: tuple[tuple[str, Any], ...] = (("model", model), ("gpu", gpu), ("name", name),
                                          ("kv_cache_dtype", kv_cache_dtype))
    for key, val in names:
        if not isinstance(val, str) or not val:
            raise ConfigError(f"{key} {val!r} must be a non-empty name (kv_cache_dtype: "
                              "auto, fp8, ...)", field=key, value=repr(val)[:40])
    if engine is not None:
        from kvcore.deploy.engines import get_engine

        get_engine(engine)  # a vLLM release kvcore knows (ConfigError naming engine)
    counts: tuple[tuple[str, Any], ...] = (("tensor_parallel_size", tensor_parallel_size),
                     ("pipeline_parallel_size", pipeline_parallel_size),
                     ("max_model_len", max_model_len),
                     ("max_num_batched_tokens", max_num_batched_tokens),
                     ("max_num_seqs", max_num_seqs), ("block_size", block_size))
    for key, val in counts:
        if val is not None and (isinstance(val, bool) or not isinstance(val, int)
                                or not 1 <= val < 1 << 40):
            raise ConfigError(f"{key} {val!r} must be an integer >= 1", field=key,
                              value=repr(val)[:40])
    if kv_cache_memory_gib is not None and (
            isinstance(kv_cache_memory_gib, bool)
            or not isinstance(kv_cache_memory_gib, (int, float))
            or not 0 < kv_cache_memory_gib < 1 << 24):
        raise ConfigError(f"kv_cache_memory_gib {kv_cache_memory_gib!r} must be a number "
                          "of GiB > 0", field="kv_cache_memory_gib",
                          value=repr(kv_cache_memory_gib)[:40])
    if gpu_memory_utilization is not None and (
            isinstance(gpu_memory_utilization, bool)
            or not isinstance(gpu_memory_utilization, (int, float))
            or not 0 < gpu_memory_utilization <= 1):
        raise ConfigError(f"gpu_memory_utilization {gpu_memory_utilization!r} must be a "
                          "fraction in (0, 1] (vLLM's default 0.9)",
                          field="gpu_memory_utilization",
                          value=repr(gpu_memory_utilization)[:40])
    flags: tuple[tuple[str, Any], ...] = (
        ("enable_prefix_caching", enable_prefix_caching),
        ("enable_chunked_prefill", enable_chunked_prefill))
    for key, val in flags:
        if not isinstance(val, bool):
            raise ConfigError(f"{key} {val!r} must be True or False", field=key,
                              value=repr(val)[:40])
    if dataset not in ("random", "sharegpt"):
        raise ConfigError(f"dataset {dataset!r} is not one of random, sharegpt",
                          field="dataset_name", value=repr(dataset))
    if statistic not in ("median", "mean"):
        raise ConfigError(f"statistic {statistic!r} is not one of median, mean",
                          field="statistic", value=repr(statistic))
    if result.get("ramp_up_strategy") is not None:
        raise ConfigError(f"{name}: a --ramp-up-strategy run ({result['ramp_up_strategy']!r})"
                          " is not replayed by calibrate; valid: a fixed --request-rate or "
                          "--max-concurrency run", field="ramp_up_strategy",
                          value=repr(result["ramp_up_strategy"]))
    failed = result.get("failed")
    if result.get("completed") == 0 and isinstance(failed, int) and failed > 0:
        raise ConfigError(f"{name}: no request completed (failed: {failed}); nothing to "
                          "calibrate on", field="completed", value="0")
    done = _num(name, result, "completed", minimum=1, strict=False, integer=True)
    if done is None:
        raise ConfigError(f"{name}: has no 'completed' count; valid: a vllm bench serve "
                          "--save-result file", field="completed")
    n = int(done)
    from kvcore.sim.workload import MAX_NUM_PROMPTS
    from kvcore.units import MAX_TOKENS

    if n > MAX_NUM_PROMPTS:  # each candidate replays them all: as --num-prompts
        raise ConfigError(f"{name}: completed {n:,}: at most {MAX_NUM_PROMPTS:,} requests "
                          f"are replayed (about an hour of CPU per candidate, as "
                          f"--num-prompts); valid: a run of 1 to {MAX_NUM_PROMPTS:,} "
                          f"requests", field="completed", value=str(n),
                          maximum=MAX_NUM_PROMPTS)
    lens: dict[str, int] = {}
    for key in ("total_input_tokens", "total_output_tokens"):
        tot = _num(name, result, key, minimum=n, strict=False, integer=True)
        if tot is None:
            raise ConfigError(f"{name}: has no {key!r}; valid: a vllm bench serve "
                              "--save-result file", field=key)
        lens[key] = max(1, round(tot / n))
        if lens[key] > MAX_TOKENS:  # a mean request longer than any length kvcore takes
            raise ConfigError(f"{name}: {key} {int(tot):,} over {n:,} requests is "
                              f"{lens[key]:,} tokens a request, implausibly long (at most "
                              f"{MAX_TOKENS:,})", field=key, value=str(int(tot)),
                              maximum=MAX_TOKENS)
    rate: Any = result.get("request_rate", "inf")
    if (isinstance(rate, str) and rate.strip().lower() in ("inf", "infinity")) or (
            isinstance(rate, float) and rate == math.inf):
        rate = "inf"  # vllm bench serve writes "inf" for --request-rate inf
    else:
        rate = _num(name, {"request_rate": rate}, "request_rate")
    conc = result.get("max_concurrency")
    if conc is not None:
        conc = int(_num(name, result, "max_concurrency", minimum=1, strict=False,
                        integer=True) or 1)
    burst: Any = result.get("burstiness")
    if (isinstance(burst, str) and burst.strip().lower() in ("inf", "infinity")) or (
            isinstance(burst, float) and burst == math.inf):
        burst = "inf"  # gamma shape inf: evenly spaced arrivals
    else:
        burst = _num(name, result, "burstiness")
    row: dict[str, Any] = {
        "id": name, "split": "fit", "config": model, "gpu": gpu,
        "tensor_parallel_size": tensor_parallel_size,
        "pipeline_parallel_size": pipeline_parallel_size,
        "kv_cache_dtype": kv_cache_dtype,
        "dataset": ("sharegpt (ShareGPT's output-length shape at the run's mean)"
                    if dataset == "sharegpt" else "random (the run's mean lengths)"),
        "input_len": lens["total_input_tokens"], "output_len": lens["total_output_tokens"],
        "num_prompts": n, "max_concurrency": conc, "request_rate": rate,
        "statistic": statistic, "enable_prefix_caching": enable_prefix_caching,
        "enable_chunked_prefill": enable_chunked_prefill, "measured": {},
        "engine": f"vLLM {engine.split('==', 1)[1]}" if engine and "==" in engine else "",
    }
    if burst is not None and burst != 1.0:
        row["burstiness"] = burst
    _check_rate(result, name, n, rate, burst)
    given: tuple[tuple[str, Any], ...] = (
        ("max_model_len", max_model_len), ("max_num_batched_tokens", max_num_batched_tokens),
        ("max_num_seqs", max_num_seqs), ("kv_cache_memory_gib", kv_cache_memory_gib),
        ("gpu_memory_utilization", gpu_memory_utilization), ("block_size", block_size))
    for key, val in given:
        if val is not None:
            row[key] = val
    for key, per_req in _per_request_lens(result, n, name).items():
        row[key] = per_req
    need = row["input_len"] + row["output_len"]
    if max_model_len is not None and need > max_model_len:
        raise ConfigError(f"{name}: its requests ({row['input_len']} + "
                          f"{row['output_len']} tokens on average) do not fit "
                          f"max_model_len {max_model_len}: vLLM would have rejected them; "
                          f"give the run's --max-model-len (>= {need})",
                          field="max_model_len", value=str(max_model_len))
    from kvcore.sim.accuracy import vllm_serve_defaults
    from kvcore.sim.engine import check_scheduler_limits

    d_mnbt, d_mns = vllm_serve_defaults(gpu)  # what vllm serve runs when not given
    check_scheduler_limits(max_num_seqs or d_mns, max_num_batched_tokens or d_mnbt,
                           max_model_len or need)
    for fig, key in _FIGURES.items():
        v = _num(name, result, key.format(stat=statistic), strict=False)
        if v is not None and v > 0:  # vLLM writes 0 where a figure is undefined
            row["measured"][fig] = v
    if not row["measured"]:
        keys = ", ".join(k.format(stat=statistic) for k in _FIGURES.values())
        raise ConfigError(f"{name}: quotes none of {keys} (> 0); valid: a vllm bench "
                          "serve --save-result file", field="output_throughput")
    from kvcore.sim.accuracy import _check_row

    _check_row(row)
    return row


def _per_request_lens(result: dict[str, Any], n: int, name: str = "result"
                      ) -> dict[str, list[int]]:
    """``input_lens`` / ``output_lens`` of a ``--save-detailed`` result, for its ``n``
    completed requests: the lists as written when they hold ``n`` entries, else the
    entries whose ``errors`` item is empty (vLLM lists failed requests too, with output
    0).  A list that does not line up so, or whose sum is not the file's
    ``total_input_tokens`` / ``total_output_tokens`` (vLLM sums the completed requests'
    lengths), is not used, with a warning: the mean lengths replay then."""
    import warnings

    from kvcore.units import MAX_TOKENS

    out: dict[str, list[int]] = {}
    errors = result.get("errors")
    for key, total in (("input_lens", "total_input_tokens"),
                       ("output_lens", "total_output_tokens")):
        lens = result.get(key)
        if lens is None:
            continue
        if isinstance(lens, list) and len(lens) != n and isinstance(errors, list) \
                and len(errors) == len(lens):
            lens = [x for x, e in zip(lens, errors) if not e]
        ok = isinstance(lens, list) and len(lens) == n and all(
            isinstance(x, int) and not isinstance(x, bool) and 1 <= x <= MAX_TOKENS
            for x in lens)
        if ok and sum(lens) != result.get(total):
            warnings.warn(f"{name}: {key} sum to {sum(lens):,} tokens, not the file's "
                          f"{total} {result.get(total)!r}; replaying the mean lengths",
                          stacklevel=3)
            continue
        if not ok:
            warnings.warn(f"{name}: {key} is not {n} per-request token counts (one per "
                          "completed request); replaying the mean lengths", stacklevel=3)
            continue
        out[key] = [int(x) for x in lens]
    return out


def _terms(terms: Any, gpus: list[str]) -> list[str]:
    if isinstance(terms, str) or not isinstance(terms, (list, tuple)) or not terms:
        raise ConfigError(f"terms {terms!r} must be a non-empty list of names; valid: "
                          f"{', '.join(CALIBRATION_GRID)} (memory: the GPU's own)",
                          field="terms", value=repr(terms))
    out: list[str] = []
    own = {memory_term(g) for g in gpus}
    for t in terms:
        if not isinstance(t, str):
            raise ConfigError(f"terms: {t!r} is not a term name; valid: "
                              f"{', '.join(CALIBRATION_GRID)}", field="terms",
                              value=repr(t)[:40])
        if t.startswith("memory_") and t in CALIBRATION_GRID and t not in own:
            raise ConfigError(f"terms: {t} does not apply to {', '.join(gpus)} (its "
                              f"memory term is {', '.join(sorted(own))}; or say memory)",
                              field="terms", value=t)
        names = sorted(own) if t == "memory" else [t]
        for name in names:
            if name not in CALIBRATION_GRID:
                raise ConfigError(f"--terms / terms: {name!r} is not a calibrated term; valid: "
                                  f"{', '.join(CALIBRATION_GRID)}", field="terms",
                                  value=repr(name))
            if name not in out:
                out.append(name)
    return out


def _loss(rows: list[dict[str, Any]], eff: Efficiency, sim: str) -> float:
    """The mean absolute log error over every figure of ``rows`` (a simulated figure of
    0, e.g. the TPOT of one-token outputs, counts as a factor of 10^6 off)."""
    from kvcore.sim.accuracy import METRICS, evaluate

    errs = [abs(math.log(max(1.0 + r[m]["error"], 1e-6))) for r in
            evaluate(rows, eff, sim=sim) for m in METRICS if m in r]
    return sum(errs) / len(errs)


def _check_rows(rows: Any) -> None:
    """Each row a dict that :func:`kvcore.sim.accuracy._check_row` accepts and that
    quotes a figure; ConfigError naming the row otherwise."""
    from kvcore.sim.accuracy import _check_row

    if not isinstance(rows, list) or not rows:
        raise ConfigError("calibrate: no runs to calibrate on; give at least one vllm "
                          "bench serve result (bench_result_row)", field="rows",
                          value=repr(rows)[:40])
    for i, row in enumerate(rows):
        if not isinstance(row, dict):
            raise ConfigError(f"rows[{i}]: a {type(row).__name__}, not a row "
                              "(bench_result_row)", field="rows", value=repr(row)[:40])
        _check_row(row)
        if not isinstance(row.get("measured"), dict) or not row["measured"]:
            raise ConfigError(f"rows[{i}] ({row.get('id')!r}) quotes no figure "
                              "(measured)", field="measured", value=repr(row.get("id")))


def calibrate(rows: list[dict[str, Any]], start: Efficiency = DEFAULT_EFFICIENCY, *,
              terms: Any = DEFAULT_TERMS, rounds: int = 12, sim: str = "fast",
              log: Any = None) -> tuple[Efficiency, float, float]:
    """Coordinate descent over :data:`CALIBRATION_GRID` of ``terms`` from ``start``,
    minimising the mean absolute log error over the rows' figures: the first pass
    scans each term's whole grid and takes its best value; later passes step each term
    to a neighbouring grid value while that lowers the loss; it stops after a pass that
    moves nothing, or after ``rounds`` passes.  A term keeps its value where nothing
    lowers the loss (a figure the runs do not constrain stays at the default).
    Returns ``(efficiency, loss_before, loss_after)``.  ``rows``: from
    :func:`bench_result_row`; ``sim``: ``fast`` (kvcore.sim.fastsim) or ``engine``;
    ``log(term, value, loss)`` per candidate.  Deterministic.

    Raises ConfigError: no rows, an unknown term, ``rounds`` < 1, an unknown ``sim``,
    and the rows' own errors (:func:`kvcore.sim.accuracy.simulate_row`)."""
    _check_rows(rows)
    if log is not None and not callable(log):
        raise ConfigError(f"log {log!r} must be a function (term, value, loss)",
                          field="log", value=repr(log)[:40])
    from kvcore.units import as_int

    rounds_int = as_int(rounds)  # numpy integers too, as a plain int; bool refused
    if rounds_int is None or rounds_int < 1:
        raise ConfigError(f"rounds {rounds!r} must be an integer >= 1", field="rounds",
                          value=repr(rounds))
    rounds = rounds_int
    if sim not in ("fast", "engine"):
        raise ConfigError(f"sim {sim!r} is not one of fast, engine", field="sim",
                          value=repr(sim))
    if not isinstance(start, Efficiency):
        raise ConfigError(f"start {type(start).__name__} is not an Efficiency",
                          field="start", value=repr(start)[:40])
    names = _terms(terms, sorted({str(r.get("gpu")) for r in rows}))
    from kvcore.sim import accuracy

    for row in rows:  # a plan kvcore refuses is not simulated with a stand-in budget
        accuracy._REFUSALS.pop(row["id"], None)
    seen: dict[Efficiency, float] = {}

    def loss_of(eff: Efficiency, name: str, v: float) -> float:
        if eff not in seen:
            seen[eff] = _loss(rows, eff, sim)
            if log is not None:
                log(name, v, seen[eff])
        return seen[eff]

    eff = start
    before = best = seen[eff] = _loss(rows, eff, sim)
    for row in rows:
        why = accuracy._REFUSALS.pop(row["id"], None)
        if why is not None:
            why = why.rsplit(" (simulated with", 1)[0]
            raise ConfigError(f"{row['id']}: the deployment does not plan: {why}; give "
                              "the run's --kv-cache-memory (the KV budget its log "
                              "reports), its --gpu-memory-utilization or the --tp / "
                              "--gpu it ran on", field="gpu",
                              value=str(row.get("gpu")))
    for pass_no in range(rounds):
        moved = False
        for name in names:
            grid = CALIBRATION_GRID[name]
            if pass_no == 0:  # the whole grid
                for v in grid:
                    cand = dataclasses.replace(eff, **{name: v})
                    loss = loss_of(cand, name, v)
                    if loss < best - 1e-12:
                        best, eff, moved = loss, cand, True
                continue
            cur = getattr(eff, name)
            i = min(range(len(grid)), key=lambda k: abs(grid[k] - cur))
            for step in (1, -1):  # walk while it helps
                k = i + step
                while 0 <= k < len(grid):
                    cand = dataclasses.replace(eff, **{name: grid[k]})
                    loss = loss_of(cand, name, grid[k])
                    if not loss < best - 1e-12:
                        break
                    best, eff, moved, i = loss, cand, True, k
                    k += step
        if not moved:
            break
    return eff, before, best


def save_efficiency(eff: Efficiency, path: str | Path, **meta: Any) -> None:
    """Write ``eff`` as JSON (``{"format": "kvcore-efficiency/1", "efficiency": {...},
    ...meta}``), every field, so the file reads the same under a later default.
    ``meta``: JSON values describing the calibration (not ``format`` / ``efficiency``).
    Raises ConfigError: ``eff`` not an Efficiency, a bad path, meta that shadows the
    format or is not plain JSON, or a file that cannot be written."""
    if not isinstance(eff, Efficiency):
        raise ConfigError(f"efficiency {type(eff).__name__} is not an Efficiency",
                          field="efficiency", value=repr(eff)[:40])
    if not isinstance(path, (str, Path)) or not str(path):
        raise ConfigError(f"path {path!r} is not a file name", field="output",
                          value=repr(path)[:40])
    clash = sorted(set(meta) & {"format", "efficiency"})
    if clash:
        raise ConfigError(f"save_efficiency: meta key(s) {', '.join(clash)} would replace "
                          "the file's own", field=clash[0], value=clash[0])
    doc = {"format": _FORMAT, "efficiency": dataclasses.asdict(eff), **meta}
    try:
        text = json.dumps(doc, indent=1, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"save_efficiency: meta is not plain JSON ({exc})", field="meta",
                          value=repr(meta)[:40]) from None
    try:
        Path(path).write_text(text + "\n")
    except OSError as exc:
        raise ConfigError(f"{path}: cannot be written ({exc.strerror or exc})",
                          field="output", value=str(path)) from None


def load_efficiency(path: str | Path, base: Efficiency = DEFAULT_EFFICIENCY
                    ) -> Efficiency:
    """The :class:`Efficiency` of a file :func:`save_efficiency` (``kvcore calibrate
    --output``) wrote, or of a plain JSON object of Efficiency fields; fields it does
    not give keep ``base``'s.  Raises ConfigError naming the file and the field: not
    JSON, not an object, an unknown field (the message lists the valid ones), or a value
    :class:`Efficiency` refuses."""
    if not isinstance(base, Efficiency):
        raise ConfigError(f"base {type(base).__name__} is not an Efficiency", field="base",
                          value=repr(base)[:40])
    obj = _load_json(path, "a JSON file of Efficiency fields (kvcore calibrate --output)")
    nested = isinstance(obj, dict) and ("format" in obj or set(obj) == {"efficiency"})
    fields = obj.get("efficiency") if nested else obj
    if isinstance(obj, dict) and "format" in obj and obj["format"] != _FORMAT:
        raise ConfigError(f"{path}: format {obj['format']!r} is not {_FORMAT!r}",
                          field="format", value=repr(obj["format"]))
    if not isinstance(fields, dict):
        raise ConfigError(f"{path}: holds no object of Efficiency fields; valid: what "
                          "kvcore calibrate --output writes, or {\"compute\": 0.6, ...}",
                          field="efficiency", value=str(path))
    if "completed" in fields and any(str(k).endswith("_ttft_ms") for k in fields):
        raise ConfigError(f"{path}: is a vllm bench serve result, not coefficients; run "
                          f"kvcore calibrate MODEL {path} --gpu GPU -o eff.json and give "
                          "eff.json", field="efficiency", value=str(path))
    known = {f.name for f in dataclasses.fields(Efficiency)}
    bad = sorted(str(k) for k in fields if k not in known)
    if bad:
        raise ConfigError(f"{path}: unknown Efficiency field(s) {', '.join(bad)}; valid: "
                          f"{', '.join(sorted(known))}", field=bad[0], value=str(path))
    try:
        return dataclasses.replace(base, **fields)
    except ConfigError as exc:
        raise ConfigError(f"{path}: {exc}", field=exc.extra.get("field") or "efficiency",
                          value=str(path)) from None


def warn_if_other_deployment(path: str | Path, *, gpu: Any = None,
                             tensor_parallel_size: int | None = None,
                             model: Any = None) -> None:
    """Warn when a coefficient file written by ``kvcore calibrate`` was fitted on
    another model, GPU or TP than the run that uses it (its ``model`` / ``gpu`` /
    ``tensor_parallel_size`` entries; a plain object of fields says nothing, so nothing
    is said).  Raises ConfigError for a ``path`` that is not a path."""
    import warnings

    from kvcore.deploy.gpus import get_gpu
    from kvcore.units import check_path
    from kvcore.userfiles import read_json

    p = check_path(path, "efficiency")
    try:  # bounded, as load_efficiency reads it
        saved = read_json(p, "a kvcore-efficiency file")
    except ConfigError:
        return  # load_efficiency has already said what is wrong with it
    if not isinstance(saved, dict) or saved.get("format") != _FORMAT:
        return
    then = saved.get("gpu")
    if gpu is not None and isinstance(then, str):
        try:
            same = get_gpu(then, memory_flag=False).name == get_gpu(gpu, memory_flag=False).name
        except ConfigError:
            same = False
        if not same:
            warnings.warn(f"--efficiency {path}: calibrated on {then}, used on {gpu}: "
                          "its memory and compute terms are that GPU's", stacklevel=2)
    then_model = saved.get("model")
    if isinstance(model, str) and isinstance(then_model, str) and \
            _model_key(then_model) != _model_key(model):
        warnings.warn(f"--efficiency {path}: calibrated on {then_model}, used on {model}",
                      stacklevel=2)
    tp = saved.get("tensor_parallel_size")
    if tensor_parallel_size is not None and isinstance(tp, int) and tp != \
            tensor_parallel_size:
        warnings.warn(f"--efficiency {path}: calibrated at TP {tp}, used at TP "
                      f"{tensor_parallel_size}", stacklevel=2)


def _model_key(name: str) -> str:
    """A model name for comparing: the last path part (a config file's folder when it is
    config.json), lower case, letters and digits only."""
    import re

    parts = [q for q in str(name).replace("\\", "/").split("/") if q]
    if parts and parts[-1].lower() == "config.json" and len(parts) > 1:
        parts = parts[:-1]
    last = parts[-1] if parts else str(name)
    last = re.sub(r"\.json$", "", last.lower())
    return re.sub(r"[^a-z0-9]", "", last)


def _sizes(name: str) -> set[str]:
    """The parameter counts a model name states (``70b``, ``8b``, ``0.6b``, ``a3b``)."""
    import re

    return set(re.findall(r"(?<![a-z0-9.])(\d+(?:\.\d+)?b)(?![a-z0-9])",
                          str(name).lower().replace("_", "-")))


def warn_if_result_of_another_model(result: dict[str, Any], model: str, name: str) -> None:
    """Warn when a result's ``model_id`` states a parameter count MODEL does not (a
    70B run calibrating an 8B model): the fit would be of the wrong model."""
    import warnings

    mid = result.get("model_id")
    if not isinstance(mid, str):
        return
    theirs, ours = _sizes(mid.split("/")[-1]), _sizes(str(model).split("/")[-1])
    if theirs and ours and not theirs & ours:
        warnings.warn(f"{name}: a run of {mid} (model_id), calibrating {model}: is this "
                      "the same model?", stacklevel=2)


# ---- the CLI ----------------------------------------------------------------------------

def _utilization(text: str) -> float:
    """``--gpu-memory-utilization``: a fraction in (0, 1]; otherwise argparse's one-line
    usage error naming the flag, the value and the valid range."""
    import argparse

    from kvcore.deploy.sweep import parse_utilization

    try:
        return parse_utilization(text)
    except ConfigError as exc:
        raise argparse.ArgumentTypeError(exc.message) from None


def add_subparser(sub: Any) -> argparse.ArgumentParser:
    """Register ``kvcore calibrate`` on the CLI's subparsers."""
    from kvcore.sim.command import _count_arg
    from kvcore.units import length_arg

    p = sub.add_parser("calibrate",
                       help="fit the simulated clock to your vllm bench serve results",
                       description=__doc__.split("\n\n")[0])
    p.add_argument("model", help="config.json path, folder, or embedded name")
    p.add_argument("results", nargs="+", metavar="RESULT.json",
                   help="vllm bench serve --save-result files of runs on this deployment")
    p.add_argument("--gpu", required=True, metavar="NAME", help="catalog GPU (kvcore gpus)")
    p.add_argument("--tp", "--tensor-parallel-size", "-tp", dest="tensor_parallel_size",
                   type=_count_arg("tensor_parallel_size", what="GPUs"), default=1,
                   help="the run's tensor-parallel size (default 1)")
    p.add_argument("--pp", "--pipeline-parallel-size", "-pp", dest="pipeline_parallel_size",
                   type=_count_arg("pipeline_parallel_size", what="stages"), default=1,
                   help="the run's pipeline-parallel size (default 1)")
    p.add_argument("--kv-cache-dtype", default="auto",
                   help="the run's --kv-cache-dtype (auto, fp8, ...)")
    p.add_argument("--max-model-len", type=length_arg("max_model_len"), default=None,
                   help="the run's (default: the model's, as vllm serve)")
    p.add_argument("--max-num-batched-tokens", type=length_arg("max_num_batched_tokens"),
                   default=None, help="the run's (default: vllm serve's for the GPU)")
    p.add_argument("--max-num-seqs", type=_count_arg("max_num_seqs", what="requests"),
                   default=None, help="the run's (default: vllm serve's for the GPU)")
    p.add_argument("--enable-prefix-caching", action=argparse.BooleanOptionalAction,
                   default=True, help="the run's prefix caching (default on, as vLLM)")
    p.add_argument("--no-prefix-caching", dest="enable_prefix_caching",
                   action="store_false", help=argparse.SUPPRESS)
    p.add_argument("--enable-chunked-prefill", action=argparse.BooleanOptionalAction,
                   default=True, help="the run's chunked prefill (default on, as vLLM)")
    p.add_argument("--gpu-memory-utilization", type=_utilization, default=None,
                   metavar="F", help="the run's (default vLLM's 0.9): the GPU budget's share")
    p.add_argument("--block-size", type=length_arg("block_size"), default=None,
                   help="the run's --block-size (default: vLLM's choice for the model)")
    p.add_argument("--kv-cache-memory", "--kv-cache-memory-bytes", default=None,
                   metavar="SIZE",
                   help="the KV budget per rank the run's log reports (20GiB, bytes); "
                        "default: planned on --gpu")
    p.add_argument("--engine", default=None, metavar="vllm==X.Y.Z",
                   help="the vLLM version that ran (its GPU budget profile): one released "
                        "version from 0.4.0 to 0.32.0")
    p.add_argument("--dataset-name", choices=("random", "sharegpt"), default="random",
                   help="the runs' vllm bench serve --dataset-name: random (default; "
                        "the mean lengths) or sharegpt (ShareGPT's output-length shape)")
    p.add_argument("--statistic", choices=("median", "mean"), default="median",
                   help="compare the results' median (default) or mean TTFT / TPOT")
    p.add_argument("--terms", default=",".join(DEFAULT_TERMS), metavar="NAME,NAME",
                   help=f"terms to move, in order (default {','.join(DEFAULT_TERMS)}; "
                        f"memory: the GPU's own; valid: {', '.join(CALIBRATION_GRID)})")
    p.add_argument("--rounds", type=_count_arg("rounds", what="passes", vllm=False),
                   default=12, help="most coordinate-descent passes (default 12; it stops "
                                    "after a pass that moves nothing)")
    p.add_argument("--sim", choices=("fast", "engine"), default="fast",
                   help="replay with kvcore.sim.fastsim (default) or the engine")
    p.add_argument("--output", "-o", default=None, metavar="FILE.json",
                   help="write the coefficients here (kvcore simulate / tune --efficiency)")
    p.add_argument("--verbose", "-v", action="store_true",
                   help="print each candidate's loss on stderr as the search goes")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=run)
    return p


def _pct(sim: float, measured: float) -> str:
    err = 100 * (sim / measured - 1)
    return f"{err:+.0f} %" if abs(err) < 1e4 else (">+9999 %" if err > 0 else "<-9999 %")


def replayed_as(args: argparse.Namespace, max_model_len: int, gpu: str) -> str:
    """The flags the runs were replayed with (calibrate's spelling, vLLM's names),
    defaults resolved (vLLM 0.32's for ``gpu``:
    :func:`kvcore.sim.accuracy.vllm_serve_defaults`), so a user can check them against
    the server's."""
    from kvcore.deploy.budget import DEFAULT_GPU_MEMORY_UTILIZATION
    from kvcore.deploy.engines import DEFAULT_ENGINE
    from kvcore.sim.accuracy import vllm_serve_defaults

    mnbt, mns = vllm_serve_defaults(gpu)
    if not args.enable_chunked_prefill and args.max_num_batched_tokens is None:
        mnbt = max(mnbt, max_model_len)  # vLLM 0.32 EngineArgs without chunked prefill
    parts = [f"--gpu {gpu}", f"--tp {args.tensor_parallel_size}"]
    if args.pipeline_parallel_size != 1:
        parts.append(f"--pp {args.pipeline_parallel_size}")
    parts += [f"--kv-cache-dtype {args.kv_cache_dtype}", f"--max-model-len {max_model_len}",
              f"--max-num-batched-tokens {args.max_num_batched_tokens or mnbt}",
              f"--max-num-seqs {args.max_num_seqs or mns}"]
    if args.block_size is not None:
        parts.append(f"--block-size {args.block_size}")
    if args.kv_cache_memory is not None:  # the budget as given: no engine profile
        parts.append(f"--kv-cache-memory {args.kv_cache_memory}")
    else:
        parts.append("--gpu-memory-utilization "
                     f"{args.gpu_memory_utilization or DEFAULT_GPU_MEMORY_UTILIZATION:g}"
                     f" --engine {args.engine or DEFAULT_ENGINE}")
    parts.append("--enable-prefix-caching" if args.enable_prefix_caching
                 else "--no-enable-prefix-caching")
    if not args.enable_chunked_prefill:
        parts.append("--no-enable-chunked-prefill")
    parts.append(f"--dataset-name {args.dataset_name}")
    return " ".join(parts)


def run(args: argparse.Namespace) -> int:
    """``kvcore calibrate``: read, calibrate, print, write.  Bad input raises
    ConfigError (the CLI prints one line and exits 2)."""
    import warnings

    from kvcore.deploy.gpus import get_gpu
    from kvcore.sim.accuracy import METRICS, evaluate

    gpu = get_gpu(args.gpu, memory_flag=False)
    kv_gib = None
    if args.kv_cache_memory is not None:
        from kvcore.units import parse_size

        kv_gib = parse_size(args.kv_cache_memory, field="kv_cache_memory") / (1 << 30)
        if not kv_gib > 0:
            raise ConfigError(f"--kv-cache-memory {args.kv_cache_memory!r} must be > 0",
                              field="kv_cache_memory", value=args.kv_cache_memory)
    if kv_gib is not None and args.gpu_memory_utilization is not None:
        warnings.warn("--gpu-memory-utilization is unused with --kv-cache-memory (the KV "
                      "budget is given; vLLM ignores it too)", stacklevel=2)
    if args.engine is not None:
        from kvcore.deploy.engines import get_engine

        get_engine(args.engine)
    from kvcore.sim.command import _model_config

    try:
        cfg = _model_config(args.model)  # the model's own error first
    except ConfigError:
        try:
            looks = read_bench_results(args.model)[0]
        except ConfigError:
            looks = {}
        if "completed" in looks:
            raise ConfigError(f"MODEL {args.model}: is a vllm bench serve result, not a "
                              "model config; usage: kvcore calibrate MODEL RESULT.json "
                              "[RESULT.json ...] --gpu GPU", field="model",
                              value=str(args.model)) from None
        raise
    mml = args.max_model_len
    if mml is None:  # vllm serve's default: the model's own (derived) length
        from kvcore.models.planner import derived_max_model_len

        mml = derived_max_model_len(cfg)
    if args.output is not None:  # before minutes of simulation, not after
        out = Path(args.output)
        if not args.output:
            raise ConfigError("--output '': an empty value; give a file name (or drop "
                              "--output)", field="output", value="")
        if any(Path(r).resolve() == out.resolve() for r in args.results):
            raise ConfigError(f"--output {args.output}: is one of the RESULT files; give "
                              "another name (it would overwrite the run)", field="output",
                              value=args.output)
        m = Path(args.model)
        if out.resolve() in (m.resolve(), (m / "config.json").resolve()):
            raise ConfigError(f"--output {args.output}: is the MODEL's config; give "
                              "another name (it would overwrite the model)",
                              field="output", value=args.output)
        if out.is_dir() or not out.resolve().parent.is_dir():
            raise ConfigError(f"--output {args.output}: not a file in an existing folder",
                              field="output", value=args.output)
    rows = []
    for path in args.results:
        runs_in = read_bench_results(path)
        for k, res in enumerate(runs_in):
            stat = args.statistic
            if f"{stat}_tpot_ms" not in res and any(
                    key.endswith("_tpot_ms") for key in res):
                warnings.warn(f"{path}: has no {stat}_tpot_ms: TPOT is not fitted (the "
                              "file's other TPOT statistics: --statistic mean or median)",
                              stacklevel=2)
            rows.append(bench_result_row(
                res, model=args.model, gpu=args.gpu,
                name=str(path) if len(runs_in) == 1 else f"{path}#{k + 1}",
                statistic=args.statistic, tensor_parallel_size=args.tensor_parallel_size,
                pipeline_parallel_size=args.pipeline_parallel_size,
                kv_cache_dtype=args.kv_cache_dtype, max_model_len=mml,
                max_num_batched_tokens=args.max_num_batched_tokens,
                max_num_seqs=args.max_num_seqs,
                enable_prefix_caching=args.enable_prefix_caching,
                enable_chunked_prefill=args.enable_chunked_prefill,
                kv_cache_memory_gib=kv_gib, engine=args.engine,
                dataset=args.dataset_name,
                gpu_memory_utilization=args.gpu_memory_utilization,
                block_size=args.block_size))
            warn_if_result_of_another_model(res, args.model, str(path))
    terms = [t for t in args.terms.split(",") if t]

    for row in rows:
        if row["request_rate"] == "inf" and row["max_concurrency"] is None:
            warnings.warn(f"{row['id']}: every request sent at once (request rate inf, no "
                          "--max-concurrency): its TTFT is the burst's queue, so it pins "
                          "the request overhead poorly; prefer runs with a rate or a "
                          "concurrency cap", stacklevel=2)
    total = sum(int(r["num_prompts"]) for r in rows)
    if total > 20_000 and not args.verbose:
        warnings.warn(f"replaying {total:,} requests per candidate (~90 candidates): this "
                      "takes minutes; --verbose shows the search as it goes", stacklevel=2)
    progress = None
    if not args.json:
        def progress(term: str, value: float, loss: float) -> None:
            print(f"calibrate: {term} = {value:g}: mean |log error| {loss:.4f}",
                  file=sys.stderr, flush=True)

    eff, before, after = calibrate(rows, terms=terms, rounds=args.rounds, sim=args.sim,
                                   log=progress if args.verbose else None)
    if after > 0.2:  # the figures still miss by ~20 % on average
        warnings.warn(f"the calibrated figures still miss the runs' by "
                      f"{100 * (math.exp(after) - 1):.0f} % on average: check that the "
                      "results are of this model, GPU and flags", stacklevel=2)
    for name in _terms(terms, [args.gpu]):
        grid, v = CALIBRATION_GRID[name], getattr(eff, name)
        if v != getattr(DEFAULT_EFFICIENCY, name) and v in (grid[0], grid[-1]):
            warnings.warn(f"{name} ended on its grid's edge ({v:g}): the runs ask for more "
                          "than this term explains (a queue, a cold start, a client "
                          "bottleneck?); check the runs before using the file",
                          stacklevel=2)
    old = evaluate(rows, DEFAULT_EFFICIENCY, sim=args.sim)
    new = evaluate(rows, eff, sim=args.sim)
    moved = {f.name: getattr(eff, f.name) for f in dataclasses.fields(Efficiency)
             if getattr(eff, f.name) != getattr(DEFAULT_EFFICIENCY, f.name)}
    runs = []
    for row, o, c in zip(rows, old, new):
        runs.append({"result": row["id"], "figures": {
            m: {"measured": o[m]["measured"], "default": o[m]["simulated"],
                "calibrated": c[m]["simulated"]} for m in METRICS if m in o}})
    if args.output is not None:
        save_efficiency(eff, args.output, model=args.model, gpu=args.gpu,
                        tensor_parallel_size=args.tensor_parallel_size,
                        pipeline_parallel_size=args.pipeline_parallel_size,
                        kv_cache_dtype=args.kv_cache_dtype,
                        max_model_len=mml,
                        calibrated_on=[str(p) for p in args.results], terms=terms,
                        mean_abs_log_error={"default": before, "calibrated": after})
    if args.json:
        print(dumps_json({"efficiency": dataclasses.asdict(eff), "changed": moved,
                          "mean_abs_log_error": {"default": before, "calibrated": after},
                          "runs": runs, "output": args.output,
                          "replayed_as": replayed_as(args, mml, gpu.name)}, indent=1))
        return 0
    print(f"Calibrated the roofline clock of {args.model} on {gpu.name} (TP "
          f"{args.tensor_parallel_size}) on {len(rows)} run(s): mean |log error| "
          f"{before:.3f} -> {after:.3f}")
    print(f"  replayed as: {replayed_as(args, mml, gpu.name)}")
    unit = {"output_throughput": "tok/s", "ttft_ms": "ms", "tpot_ms": "ms"}
    for r in runs:
        print(f"  {r['result']}:")
        for m, f in r["figures"].items():
            print(f"    {m:17s} measured {f['measured']:10.4g} {unit[m]:5s} default "
                  f"{f['default']:10.4g} ({_pct(f['default'], f['measured'])})"
                  f"  calibrated {f['calibrated']:10.4g} "
                  f"({_pct(f['calibrated'], f['measured'])})")
    print("  changed: " + (", ".join(f"{k} {DEFAULT_EFFICIENCY.__dict__[k]:g} -> {v:g}"
                                     for k, v in moved.items()) or "nothing (the default "
                                                                   "fits best)"))
    if args.output is not None:
        print(f"  wrote {args.output}: kvcore simulate {args.model} --gpu {args.gpu} "
              f"--efficiency {args.output} ...")
    return 0


def main(argv: list[str] | None = None) -> int:  # pragma: no cover - via kvcore.cli
    from kvcore.cli import main as cli_main

    return cli_main(["calibrate", *(sys.argv[1:] if argv is None else argv)])
