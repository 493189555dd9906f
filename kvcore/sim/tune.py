"""``kvcore tune MODEL --gpu H100``: search vLLM's serving settings by simulated goodput.

Every candidate (``--tensor-parallel-size`` x ``--max-num-batched-tokens`` x
``--max-num-seqs`` x ``--block-size`` x ``--kv-cache-dtype`` x prefix caching x
``--mamba-cache-mode`` x chunked prefill, ``--chunked-prefill on|off|both``) is planned on the GPU (:func:`kvcore.plan_model`: a TP whose
weights do not fit, or a layout the planner refuses, is dropped and listed) and
simulated once on the workload (``--dataset-name random | prefix_repetition | burstgpt |
sharegpt ...`` as ``vllm bench serve`` draws it, :mod:`kvcore.sim.datasets`, or
``--trace FILE``) by :func:`simulate_once`.  Candidates are ranked by the
objective per GPU (``--objective goodput`` by default, with ``--goodput ttft:MS
tpot:MS`` as vLLM's flag: requests per second meeting every SLO; divided by ``tp x
pp`` so that a layout on more GPUs must earn them), ties broken by output throughput.
The best is printed as the ``vllm serve`` command line to run, with the runner-ups
and their figures; ``--json`` prints one object.

The simulations run one per task on ``--backend local`` (a process pool, default) or
``--backend ray [--address ADDR]`` (:mod:`kvcore.sim.backends`).

:func:`simulate_once` runs the vLLM-faithful engine (:mod:`kvcore.sim.engine`:
vLLM 0.32's Scheduler over kvcore's KVCacheManager, real prefix caching) timed by the
roofline model of :mod:`kvcore.sim.timing`; ``--fast`` uses the token-level loop of
:mod:`kvcore.sim.fastsim` instead (no block manager: faster, approximate).
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import sys
from collections.abc import Sequence
from typing import Any

from kvcore.errors import ConfigError, KVCoreError

__all__ = ["add_subparser", "run", "simulate_once", "candidates", "tune", "merge_same_runs",
           "vllm_command", "serve_model", "parse_goodput", "prefer_simpler", "OBJECTIVES"]

OBJECTIVES = ("goodput", "output_throughput", "request_throughput",
              "total_token_throughput")

#: ``vllm serve`` flags of the searched knobs, in the order they are printed
_FLAGS = (("tensor_parallel_size", "--tensor-parallel-size"),
          ("pipeline_parallel_size", "--pipeline-parallel-size"),
          ("max_num_batched_tokens", "--max-num-batched-tokens"),
          ("max_num_seqs", "--max-num-seqs"),
          ("block_size", "--block-size"),
          ("kv_cache_dtype", "--kv-cache-dtype"),
          ("mamba_cache_mode", "--mamba-cache-mode"))


def parse_goodput(items: Sequence[str] | None) -> dict[str, float]:
    """``["ttft:500", "tpot:50"]`` -> ``{"ttft": 500.0, "tpot": 50.0}`` (ms), vLLM's
    ``--goodput`` spelling and rule (values >= 0, as ``check_goodput_args``): the same
    parser as ``kvcore simulate`` (:func:`kvcore.sim.metrics.parse_goodput`).  Raises
    ConfigError naming the bad item."""
    from kvcore.sim.metrics import parse_goodput as _parse

    return _parse(items)


def _trace_requests(wl: dict[str, Any]) -> list[Any]:
    """The TraceRequests of a workload dict (random dataset or trace file), with
    arrivals, as ``kvcore simulate`` builds them."""
    from kvcore.sim.traces import read_trace
    from kvcore.sim.workload import arrival_times, random_dataset, with_arrivals

    rate = wl.get("request_rate", math.inf)
    ramp = wl.get("ramp_up_strategy")
    if ramp is not None:
        times = arrival_times(wl.get("num_prompts") or 0, math.inf,
                              wl.get("burstiness", 1.0), wl.get("seed", 0),
                              ramp_up_strategy=ramp,
                              ramp_up_start_rps=wl.get("ramp_up_start_rps"),
                              ramp_up_end_rps=wl.get("ramp_up_end_rps"))
    if wl.get("trace") or wl.get("dataset_opts"):
        if wl.get("dataset_opts"):
            from kvcore.sim.datasets import dataset_requests

            reqs, _ = dataset_requests(argparse.Namespace(**wl["dataset_opts"]))
        else:
            reqs = read_trace(wl["trace"], wl.get("trace_format", "auto"))
        if wl.get("limit") is not None:
            reqs = reqs[:wl["limit"]]
        if ramp is not None:
            reqs = with_arrivals(reqs, arrival_times(
                len(reqs), math.inf, wl.get("burstiness", 1.0), wl.get("seed", 0),
                ramp_up_strategy=ramp, ramp_up_start_rps=wl.get("ramp_up_start_rps"),
                ramp_up_end_rps=wl.get("ramp_up_end_rps")))
        elif not math.isinf(rate):
            reqs = with_arrivals(reqs, arrival_times(len(reqs), rate,
                                                     wl.get("burstiness", 1.0),
                                                     wl.get("seed", 0)))
        elif reqs and reqs[0].arrival_ms:
            t0 = reqs[0].arrival_ms
            reqs = [type(r)(**{**r.__dict__, "arrival_ms": r.arrival_ms - t0})
                    for r in reqs]
        return reqs
    reqs = random_dataset(wl["num_prompts"], wl["input_len"], wl["output_len"],
                          wl.get("prefix_len", 0), wl.get("range_ratio", 0.0),
                          wl.get("seed", 0))
    if ramp is not None:
        return with_arrivals(reqs, times)
    if not math.isinf(rate):
        reqs = with_arrivals(reqs, arrival_times(len(reqs), rate, wl.get("burstiness", 1.0),
                                                 wl.get("seed", 0)))
    return reqs


def _run_engine(model: Any, kv: Any, cand: dict[str, Any]) -> dict[str, Any]:
    from kvcore.runtime import KVCacheManager
    from kvcore.sim.engine import SimRequest, run_engine
    from kvcore.sim.metrics import serving_metrics

    wl = cand["workload"]
    mnbt = int(cand["max_num_batched_tokens"])
    mml = int(kv.max_model_len or cand.get("max_model_len") or 0)
    pc = bool(cand.get("enable_prefix_caching", True))
    spec, acceptance = _speculative(cand)
    mgr = KVCacheManager(kv, max_model_len=mml, enable_caching=pc,
                         max_num_batched_tokens=mnbt,
                         use_eagle=bool(spec is not None and spec.use_eagle))
    spec_kw: dict[str, Any] = {} if spec is None else dict(
        num_speculative_tokens=spec.num_speculative_tokens, spec_acceptance=acceptance,
        num_lookahead_tokens=spec.num_lookahead_tokens)
    res = run_engine(mgr, [SimRequest(r) for r in _trace_requests(wl)], model,
                     max_num_seqs=int(cand["max_num_seqs"]), max_num_batched_tokens=mnbt,
                     max_model_len=mml, max_concurrency=wl.get("max_concurrency"),
                     record_steps=False,
                     enable_chunked_prefill=_chunked(cand),
                     **spec_kw)
    from kvcore.sim.engine import check_some_served

    check_some_served(res.requests, max_model_len=mml, num_blocks=kv.num_blocks)
    fig = serving_metrics(res, goodput=cand.get("goodput") or None)
    fig.pop("kv_usage", None)
    if acceptance is not None:
        fig.update(acceptance.figures())
    return fig


def _speculative(cand: dict[str, Any]) -> tuple[Any, Any]:
    """``(SpeculativeSettings, SpecAcceptanceModel)`` of a candidate's ``speculative``
    entry (``{"config": the --speculative-config object, "rates": per-position rates,
    "seed": int}``), or ``(None, None)``."""
    sp = cand.get("speculative")
    if not sp:
        return None, None
    from kvcore.sim.speculative import SpecAcceptanceModel, parse_speculative_config

    return (parse_speculative_config(dict(sp["config"])),
            SpecAcceptanceModel(sp["rates"], seed=int(sp.get("seed", 0))))


def simulate_once(cand: dict[str, Any]) -> dict[str, Any]:
    """Plan and simulate one candidate; returns ``{"config": ..., "figures": {...}}``
    or ``{"config": ..., "error": "..."}`` when the planner refuses it.

    ``config`` keys: ``model``, ``gpu``, ``tensor_parallel_size``,
    ``pipeline_parallel_size``, ``max_num_batched_tokens``, ``max_num_seqs``,
    ``block_size`` (None: the planner's), ``kv_cache_dtype``,
    ``enable_prefix_caching``, ``mamba_cache_mode``, ``max_model_len`` and the workload:
    ``workload`` (``input_len``, ``output_len``, ``num_prompts``, ``prefix_len``,
    ``max_concurrency``, ``request_rate``, ``burstiness``, ``seed``, or ``trace`` /
    ``trace_format`` / ``limit`` for a trace file, or ``dataset`` / ``dataset_opts``
    (the flags of :func:`kvcore.sim.datasets.dataset_requests`) for another dataset),
    ``goodput`` (ms per SLO key) and ``sim`` (``engine``, default, or ``fast``).  A plain
    dict in, a plain dict out (it crosses process and Ray boundaries).  The returned
    ``config`` carries the Mamba cache mode vLLM 0.32 runs
    (:func:`kvcore.sim.modes.resolve_mamba_cache_mode`); a mode or block size vLLM
    refuses gives an ``error``.
    """
    import kvcore
    from kvcore.models.config import load_model_config
    from kvcore.sim.engine import check_scheduler_limits
    from kvcore.sim.fastsim import Workload, run_workload
    from kvcore.sim.timing import roofline_for

    tp = int(cand.get("tensor_parallel_size", 1))
    pp = int(cand.get("pipeline_parallel_size", 1))
    try:
        from kvcore.deploy.gpus import check_attention_block_size
        from kvcore.sim.modes import check_vllm_chunked_prefill, resolve_mamba_cache_mode

        # what vLLM 0.32 runs for this line (kvcore.sim.modes): the mode follows prefix
        # caching on Mamba models; a mode or block size vLLM refuses is an error entry
        mode, _ = resolve_mamba_cache_mode(cand.get("mamba_cache_mode"),
                                           bool(cand.get("enable_prefix_caching", True)),
                                           _has_mamba(cand["model"]))
        check_vllm_chunked_prefill(mode, _chunked(cand))
        cand = {**cand, "mamba_cache_mode": mode}
        spec, _ = _speculative(cand)
        spec_plan: dict[str, Any] = {} if spec is None else {
            "num_speculative_tokens": spec.num_speculative_tokens,
            "include_mtp_layers": spec.include_mtp_layers}
        check_attention_block_size(cand.get("block_size"), cand["gpu"])
        check_scheduler_limits(int(cand["max_num_seqs"]),
                               int(cand["max_num_batched_tokens"]),
                               int(cand.get("max_model_len") or 1 << 62))
        kv = kvcore.plan_model(
            cand["model"], gpu=cand["gpu"], tensor_parallel_size=tp,
            pipeline_parallel_size=pp, max_model_len=cand.get("max_model_len"),
            block_size=cand.get("block_size"),
            kv_cache_dtype=cand.get("kv_cache_dtype", "auto"),
            max_num_batched_tokens=int(cand["max_num_batched_tokens"]),
            max_num_seqs=int(cand["max_num_seqs"]),
            enable_prefix_caching=bool(cand.get("enable_prefix_caching", True)),
            mamba_cache_mode=mode, **spec_plan)
    except KVCoreError as exc:
        return {"config": cand, "error": str(exc.message if hasattr(exc, "message")
                                               else exc)}
    mml_run = int(kv.max_model_len or cand.get("max_model_len") or 0)
    if not _chunked(cand) and \
            int(cand["max_num_batched_tokens"]) < mml_run:
        return {"config": cand, "error": f"max_num_batched_tokens "
                f"{cand['max_num_batched_tokens']} is below max_model_len {mml_run} with "
                f"chunked prefill off; vLLM 0.32 refuses it (SchedulerConfig)"}
    model: Any = roofline_for(load_model_config(cand["model"]), kv, gpu=cand["gpu"],
                              tensor_parallel_size=tp, pipeline_parallel_size=pp,
                              kv_cache_dtype=cand.get("kv_cache_dtype", "auto"))
    if spec is not None and (cand.get("speculative") or {}).get("draft_cost"):
        from kvcore.sim.speculative import DraftCostTimeModel

        model = DraftCostTimeModel(model, kv, spec.num_speculative_tokens,
                                   float(cand["speculative"]["draft_cost"]))
    spec = kv.kv_cache_groups[0].spec
    attn = [g.spec.block_size for g in kv.kv_cache_groups
            if g.spec.scales_with_block_size]
    attn_bs = attn[0] if attn else None
    try:
        if cand.get("sim", "engine") == "engine":
            fig = _run_engine(model, kv, cand)
            fig["num_gpus"] = tp * pp
            fig["num_blocks"] = kv.num_blocks
            fig["block_size"] = attn_bs
            return {"config": cand, "figures": fig}
    except KVCoreError as exc:
        return {"config": cand, "error": str(exc)}
    wl = {k: v for k, v in cand["workload"].items()
          if k not in ("trace", "trace_format", "limit", "dataset", "dataset_opts",
                       "range_ratio", "ramp_up_strategy", "ramp_up_start_rps",
                       "ramp_up_end_rps")}
    if cand["workload"].get("trace") or cand["workload"].get("dataset_opts") or \
            cand["workload"].get("range_ratio") or cand["workload"].get("ramp_up_strategy"):
        traces = _trace_requests(cand["workload"])
        w = Workload.from_trace(traces, max_concurrency=wl.get("max_concurrency"))
    else:
        wl["requests"] = ()
        w = Workload(**wl)
    cap = (kv.num_blocks - 1) * spec.block_size if kv.num_blocks else None
    try:
        fig = run_workload(model, kv, w, max_num_seqs=int(cand["max_num_seqs"]),
                           max_num_batched_tokens=int(cand["max_num_batched_tokens"]),
                           kv_capacity_tokens=cap,
                           enable_prefix_caching=bool(cand.get("enable_prefix_caching",
                                                                 True)),
                           enable_chunked_prefill=_chunked(cand),
                           goodput=cand.get("goodput") or None)
    except KVCoreError as exc:
        return {"config": cand, "error": str(exc)}
    if not fig.get("completed") and fig.get("failed"):
        mml = int(kv.max_model_len or cand.get("max_model_len") or 0)
        return {"config": cand, "error": f"no request can be served: every request is "
                f"rejected (max_model_len {mml}, num_blocks {kv.num_blocks})"}
    fig["num_gpus"] = tp * pp
    fig["num_blocks"] = kv.num_blocks
    fig["block_size"] = attn_bs
    return {"config": cand, "figures": fig}


def _chunked(cand: dict[str, Any]) -> bool:
    """A candidate's ``enable_chunked_prefill`` (default True, vLLM's); ConfigError naming
    the field for anything but True / False (a string such as "off" is not taken)."""
    return _check_chunked(cand.get("enable_chunked_prefill", True))


def _check_chunked(value: Any) -> bool:
    if not isinstance(value, bool):
        raise ConfigError(f"enable_chunked_prefill must be True or False, got {value!r}",
                          field="enable_chunked_prefill", value=repr(value))
    return value


def _has_mamba(model: Any) -> bool:
    from kvcore.sim.modes import mamba_layout

    return mamba_layout(model)[0]


def candidates(model: Any, gpu: str, *, tp: Sequence[int], pp: Sequence[int] = (1,),
               max_num_batched_tokens: Sequence[int], max_num_seqs: Sequence[int],
               block_size: Sequence[int | None], kv_cache_dtype: Sequence[str],
               prefix_caching: Sequence[bool], mamba_cache_mode: Sequence[str],
               workload: dict[str, Any], goodput: dict[str, float],
               max_model_len: int | None = None, sim: str = "engine",
               chunked_prefill: Sequence[bool] = (True,)) -> list[dict[str, Any]]:
    """The cross product of the searched values, as :func:`simulate_once` configs
    (``max_num_batched_tokens`` below ``max_model_len`` is allowed: chunked prefill;
    pairs with ``max_num_batched_tokens < max_num_seqs`` are left out: vLLM 0.32's
    ``SchedulerConfig`` refuses to start with them; so are, with ``chunked_prefill``
    False -- vLLM's ``--no-enable-chunked-prefill``, whole prompts only --,
    ``max_num_batched_tokens`` below a given ``max_model_len`` (without one the model's
    is known after planning and :func:`simulate_once` gives the refusal as an error),
    and Mamba models with prefix caching on: vLLM asserts chunked prefill for the
    ``align`` mode it then runs, :func:`kvcore.sim.modes.check_vllm_chunked_prefill`).

    Only what vLLM 0.32 runs is a candidate (:mod:`kvcore.sim.modes`): a mode vLLM
    refuses (kvcore's ``all``) raises ConfigError naming ``mamba_cache_mode``; on a
    model with Mamba layers the mode is the one vLLM sets from prefix caching (align
    with it on, none with it off), so combinations vLLM rewrites merge into the one it
    runs (listed once); ``block_size`` values CUDA / ROCm attention backends refuse
    raise ConfigError naming ``block_size`` (:func:`kvcore.deploy.gpus.
    check_attention_block_size`)."""
    from kvcore.deploy.gpus import check_attention_block_size
    from kvcore.sim.modes import check_vllm_mamba_cache_mode, resolve_mamba_cache_mode

    for mm in mamba_cache_mode:
        check_vllm_mamba_cache_mode(mm)
    for bs in block_size:
        check_attention_block_size(bs, gpu)
    for cp in chunked_prefill:
        _check_chunked(cp)
    has_mamba = _has_mamba(model)
    out = []
    seen = set()
    for t, p, b, s, bs, d, pc, mm, cp in itertools.product(
            tp, pp, max_num_batched_tokens, max_num_seqs, block_size, kv_cache_dtype,
            prefix_caching, mamba_cache_mode, chunked_prefill):
        if b < s:  # vLLM's SchedulerConfig refuses max_num_batched_tokens < max_num_seqs
            continue
        if not cp and max_model_len and b < max_model_len:  # and this, chunked off
            continue
        mm, _ = resolve_mamba_cache_mode(mm, pc, has_mamba)
        if mm == "align" and not cp:  # vLLM asserts chunked prefill for align
            continue
        key = (t, p, b, s, bs, d, pc, mm, cp)
        if key in seen:  # a combination vLLM rewrites into one already listed
            continue
        seen.add(key)
        out.append({"model": str(model), "gpu": gpu, "tensor_parallel_size": t,
                    "pipeline_parallel_size": p, "max_num_batched_tokens": b,
                    "max_num_seqs": s, "block_size": bs, "kv_cache_dtype": d,
                    "enable_prefix_caching": pc, "mamba_cache_mode": mm,
                    "enable_chunked_prefill": cp, "max_model_len": max_model_len, "workload": workload,
                    "goodput": goodput, "sim": sim})
    return out


def _score(res: dict[str, Any], objective: str) -> tuple[float, float]:
    f = res["figures"]
    key = "request_goodput" if objective == "goodput" else objective
    value = f.get(key) or 0.0
    return (value / f["num_gpus"], f["output_throughput"] / f["num_gpus"])


def _complexity(cand: dict[str, Any]) -> tuple[int, int]:
    """How far a candidate's config is from ``vllm serve``'s defaults (fewer is simpler): GPUs
    used, then the knobs set away from their default (``kv_cache_dtype`` not auto --
    lower KV precision --, prefix caching off, chunked prefill off, a block size
    given)."""
    gpus = int(cand.get("tensor_parallel_size", 1)) * int(cand.get("pipeline_parallel_size", 1))
    knobs = (int(cand.get("kv_cache_dtype", "auto") != "auto")
             + int(not cand.get("enable_prefix_caching", True))
             + int(not cand.get("enable_chunked_prefill", True))
             + int(cand.get("block_size") is not None))
    return gpus, knobs


def prefer_simpler(ranked: list[dict[str, Any]], objective: str,
                   min_gain: float | None = None) -> tuple[list[dict[str, Any]], int]:
    """``(ranked, n)``: the simplest config (:func:`_complexity`) among those whose
    objective per GPU is within ``min_gain`` (relative; default
    :data:`kvcore.serving.MIN_GAIN`, 1 %: the simulator's error budget) of the top
    one is moved first, the others keep their order; ``n`` is how many ranked configs
    are within that margin of the top (the best included).  A gain within the margin
    does not buy lower KV precision, more GPUs or a non-default knob."""
    from kvcore.serving import MIN_GAIN

    gain = MIN_GAIN if min_gain is None else min_gain
    if not ranked:
        return ranked, 0
    top = _score(ranked[0], objective)[0]
    near = [i for i, r in enumerate(ranked)
            if top > 0 and _score(r, objective)[0] >= top * (1 - gain)] or [0]
    pick = min(near, key=lambda i: (_complexity(ranked[i]["config"]), i))
    out = [ranked[pick], *(r for i, r in enumerate(ranked) if i != pick)]
    return out, len(near)


def tune(configs: Sequence[dict[str, Any]], *, objective: str = "goodput",
         backend: str = "local", workers: int | None = None, address: str | None = None,
         progress: bool | None = None) -> dict[str, Any]:
    """Simulate every config and rank them; returns ``{"ranked": [...], "failed":
    [...], "within_margin": n}`` (ranked best first by :func:`_score`, then the
    simplest of those within :data:`kvcore.serving.MIN_GAIN` of the top moved first:
    :func:`prefer_simpler`)."""
    from kvcore.sim.backends import run_tasks

    if objective not in OBJECTIVES:
        raise ConfigError(f"--objective: unknown objective {objective!r}; valid: "
                          f"{', '.join(OBJECTIVES)}", field="objective", value=objective)
    results = run_tasks(simulate_once, list(configs), backend=backend, workers=workers,
                        address=address, progress=progress, label="tuning")
    ok = [r for r in results if "figures" in r]
    failed = [r for r in results if "figures" not in r]
    ok.sort(key=lambda r: _score(r, objective), reverse=True)
    ok = merge_same_runs(ok)
    ok, near = prefer_simpler(ok, objective)
    return {"ranked": ok, "failed": failed, "within_margin": near}


def merge_same_runs(results: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Candidates that are one run, once, as vLLM runs it.

    On hybrid attention / Mamba models vLLM raises a ``--block-size`` below the size
    whose attention page holds a Mamba state (``_align_hybrid_block_size``,
    platforms/interface.py@0.32: qwen3-next at TP 4 runs 272 for 16 and for no flag, 288
    for 32), as kvcore's planner does (``figures["block_size"]``, the attention block
    size planned).  A result whose requested block size differs from the planned one
    gets the planned one (so the command line and the table show what runs); results
    with the same configuration after that and the same figures are merged, keeping the
    simplest (no ``--block-size``: :func:`_complexity`), else the first.  Order kept."""
    def key(r: dict[str, Any]) -> str:
        cfg = {k: v for k, v in r["config"].items()
               if k not in ("block_size", "requested_block_size")}
        fig = {k: v for k, v in r["figures"].items() if "wall" not in k}
        return json.dumps([cfg, fig], sort_keys=True, default=str)

    out: list[dict[str, Any]] = []
    where: dict[str, int] = {}
    for r in results:
        planned = r["figures"].get("block_size")
        req = r["config"].get("block_size")
        if req is not None and planned is not None and req != planned:
            r = {**r, "config": {**r["config"], "block_size": planned,
                                 "requested_block_size": req}}
        k = key(r) if planned is not None else None
        if k is not None and k in where:
            i = where[k]
            if _complexity(r["config"]) < _complexity(out[i]["config"]):
                out[i] = r
            continue
        if k is not None:
            where[k] = len(out)
        out.append(r)
    return out


def serve_model(model: Any) -> str:
    """The model argument of ``vllm serve`` for kvcore's ``model``: an embedded name
    becomes its HF id (``gemma-3-27b-it`` -> ``google/gemma-3-27b-it``,
    :func:`kvcore.models.embedded.hf_model_id`); a ``config.json`` path its folder
    (vLLM loads a model folder or an HF id, not a config file); anything else as
    given."""
    import os

    from kvcore.models.embedded import hf_model_id

    text = str(model)
    if os.path.isfile(text):
        return os.path.dirname(os.path.abspath(text))
    if os.path.isdir(text):
        return text
    return hf_model_id(text) or text


def vllm_command(model: str, cand: dict[str, Any], *,
                 prefix_caching_default: bool = True) -> str:
    """The ``vllm serve`` command line of a cand (vLLM's flag spelling; defaults left
    out: pipeline parallel 1, mamba mode none, and the block size unless it was
    searched: vLLM then picks it as kvcore's planner did).  Prefix caching is printed
    when it differs from vLLM's default for the model (``prefix_caching_default``:
    on, off for attention-free models; :func:`kvcore.sim.modes.default_prefix_caching`);
    chunked prefill off as ``--no-enable-chunked-prefill``.
    A mode vLLM 0.32 refuses raises ConfigError (``mamba_cache_mode``)."""
    from kvcore.sim.modes import check_vllm_mamba_cache_mode

    parts = ["vllm", "serve", serve_model(model)]
    for key, flag in _FLAGS:
        v = cand.get(key)
        if key == "mamba_cache_mode" and v is not None:
            check_vllm_mamba_cache_mode(v)
        if v is None or (key == "pipeline_parallel_size" and v == 1) or \
                (key == "mamba_cache_mode" and v == "none"):
            continue
        parts += [flag, str(v)]
    pc = bool(cand.get("enable_prefix_caching", True))
    if pc != prefix_caching_default:
        parts.append("--enable-prefix-caching" if pc else "--no-enable-prefix-caching")
    if not _chunked(cand):  # vLLM's default: on
        parts.append("--no-enable-chunked-prefill")
    if cand.get("max_model_len"):
        parts += ["--max-model-len", str(cand["max_model_len"])]
    sp = cand.get("speculative")
    if sp:  # a fixed setting, as given (kvcore's --spec-acceptance-rate is not vLLM's)
        import shlex

        parts += ["--speculative-config", shlex.quote(json.dumps(sp["config"]))]
    return " ".join(parts)


# ---- CLI -------------------------------------------------------------------------------

def _ints(flag: str) -> Any:
    def parse(text: str) -> list[int]:
        out = []
        for part in str(text).split(","):
            try:
                v = int(part)
            except ValueError:
                v = 0
            if v < 1:
                raise argparse.ArgumentTypeError(
                    f"{flag}: expected positive integers separated by commas, got "
                    f"{text!r}")
            out.append(v)
        return out
    return parse


def add_subparser(sub: Any) -> argparse.ArgumentParser:
    """Register ``kvcore tune`` on the CLI's subparsers."""
    p = sub.add_parser("tune", help="search vLLM serving settings by simulated goodput",
                       description=__doc__.split("\n\n")[0])
    p.add_argument("model", help="config.json path, folder, or embedded name")
    p.add_argument("--gpu", required=True, help="catalog GPU (kvcore gpus)")
    p.add_argument("--tp", type=_ints("--tp"), default=None,
                   help="tensor-parallel sizes to try (default 1,2,4,8 where the weights "
                        "fit)")
    p.add_argument("--pp", type=_ints("--pp"), default=[1])
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--trace", help="Mooncake JSONL, Azure CSV or kvcore JSONL")
    from kvcore.sim.command import add_dataset_arguments
    from kvcore.sim.datasets import DATASET_NAMES

    src.add_argument("--dataset-name", "--dataset", dest="dataset",
                     choices=list(DATASET_NAMES),
                     help="vllm bench serve's dataset (vLLM's --dataset-name; --dataset "
                          "is an alias; kvcore.sim.datasets)")
    p.add_argument("--dataset-path", default=None, metavar="FILE",
                   help="the BurstGPT CSV (burstgpt) or ShareGPT JSON (sharegpt)")
    p.add_argument("--random-input-len", type=int, default=None, help="default 1024")
    p.add_argument("--random-output-len", type=int, default=None, help="default 128")
    p.add_argument("--random-prefix-len", type=int, default=None, help="default 0")
    p.add_argument("--num-prompts", type=int, default=None, help="default 500")
    add_dataset_arguments(p)
    p.add_argument("--max-concurrency", type=int, default=None)
    p.add_argument("--request-rate", type=float, default=math.inf)
    p.add_argument("--burstiness", type=float, default=1.0)
    p.add_argument("--random-range-ratio", default=None,
                   help="lengths uniform in [len * (1 - r), len * (1 + r)], r in [0, 1), "
                        "or a JSON dict like '{\"input\": 0.3, \"output\": 0.5}' "
                        "(vLLM's)")
    p.add_argument("--ramp-up-strategy", choices=("linear", "exponential"), default=None,
                   help="ramp the request rate (vllm bench serve's; without "
                        "--request-rate)")
    p.add_argument("--ramp-up-start-rps", type=int, default=None)
    p.add_argument("--ramp-up-end-rps", type=int, default=None)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--limit", type=int, default=None, help="first N trace requests")
    p.add_argument("--goodput", nargs="+", default=None, metavar="KEY:MS",
                   help="SLOs as vLLM's --goodput: ttft:MS tpot:MS e2el:MS")
    p.add_argument("--objective", choices=OBJECTIVES, default=None,
                   help="rank by this figure per GPU (default: goodput with --goodput, "
                        "else output_throughput)")
    p.add_argument("--max-num-batched-tokens", type=_ints("--max-num-batched-tokens"),
                   default=[2048, 8192, 16384])
    p.add_argument("--max-num-seqs", type=_ints("--max-num-seqs"), default=[64, 256, 1024])
    p.add_argument("--block-size", type=_ints("--block-size"), default=None,
                   help="block sizes to try (default: the planner's)")
    p.add_argument("--kv-cache-dtype", default="auto,fp8",
                   help="comma-separated kv_cache_dtype values (default auto,fp8)")
    p.add_argument("--prefix-caching", default=None, choices=["on", "off", "both"],
                   help="default: both with --random-prefix-len or a trace, else on")
    p.add_argument("--chunked-prefill", default="on", choices=["on", "off", "both"],
                   help="chunked prefill on (vLLM's default), off "
                        "(--no-enable-chunked-prefill: whole prompts only, "
                        "max_num_batched_tokens >= max_model_len) or both (default on)")
    p.add_argument("--mamba-cache-mode", default=None,
                   help="comma-separated vLLM 0.32 modes, align and/or none (default: "
                        "both for models with Mamba layers); as in vLLM the mode that "
                        "runs is align with prefix caching on and none with it off, so "
                        "each prefix-caching setting gives one candidate")
    p.add_argument("--max-model-len", type=int, default=None)
    p.add_argument("--top", type=int, default=5, help="runner-ups to print")
    p.add_argument("--backend", choices=["local", "ray", "serial"], default="local")
    p.add_argument("--address", default=None, help="Ray cluster address (--backend ray)")
    p.add_argument("--workers", type=int, default=None)
    p.add_argument("--fast", action="store_true",
                   help="simulate with the token-level loop (kvcore.sim.fastsim) instead "
                        "of the vLLM-faithful engine: faster, no block manager")
    from kvcore.sim.command import spec_acceptance_rate_arg, speculative_config_arg

    p.add_argument("--speculative-config", "-sc", type=speculative_config_arg,
                   default=None, metavar="JSON",
                   help="speculative decoding as vllm serve takes it (a fixed setting, not "
                        "searched; printed in the vllm serve line), as kvcore simulate")
    p.add_argument("--spec-acceptance-rate", type=spec_acceptance_rate_arg, default=None,
                   metavar="P",
                   help="kvcore's acceptance model of --speculative-config's drafts (not "
                        "a vLLM flag): each accepted with probability P, seeded by --seed")
    from kvcore.sim.command import _float_arg

    p.add_argument("--spec-draft-cost", type=_float_arg("spec_draft_cost", allow_inf=False,
                                                        allow_zero=True),
                   default=None, metavar="F",
                   help="kvcore's drafter-time term, as kvcore simulate (default 0)")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=run)
    return p


def _workload(args: argparse.Namespace) -> dict[str, Any]:
    from kvcore.sim.fastsim import Workload

    if args.dataset not in (None, "random"):
        from kvcore.sim.datasets import DATASET_FLAGS, dataset_requests

        opts = {k: getattr(args, k) for k, _ in DATASET_FLAGS[args.dataset]}
        opts.update(dataset=args.dataset, num_prompts=args.num_prompts, seed=args.seed,
                    model=str(args.model))
        dataset_requests(argparse.Namespace(**opts))  # fail here, once, on bad input
        Workload(1, 1, 1, max_concurrency=args.max_concurrency,
                 request_rate=args.request_rate, burstiness=args.burstiness)  # validates
        return {"dataset": args.dataset, "dataset_opts": opts,
                "num_prompts": args.num_prompts, "max_concurrency": args.max_concurrency,
                "request_rate": args.request_rate, "burstiness": args.burstiness,
                "seed": args.seed}
    w = Workload(args.random_input_len or 1024, args.random_output_len or 128,
                 args.num_prompts, max_concurrency=args.max_concurrency,
                 request_rate=args.request_rate, burstiness=args.burstiness,
                 prefix_len=args.random_prefix_len or 0,
                 seed=args.seed)  # validates the numbers
    d: dict[str, Any] = {k: getattr(w, k) for k in (
        "input_len", "output_len", "num_prompts", "max_concurrency", "request_rate",
        "burstiness", "prefix_len", "seed")}
    from kvcore.sim.workload import check_ramp_up, parse_range_ratio

    if args.random_range_ratio is not None:
        if args.trace:
            raise ConfigError(f"--random-range-ratio {args.random_range_ratio}: shapes the "
                              f"random dataset; a trace's requests have their own lengths",
                              field="random_range_ratio", value=args.random_range_ratio)
        d["range_ratio"] = parse_range_ratio(args.random_range_ratio)
    check_ramp_up(args.ramp_up_strategy, args.ramp_up_start_rps, args.ramp_up_end_rps,
                  args.request_rate)
    if args.ramp_up_strategy is not None:
        d.update(ramp_up_strategy=args.ramp_up_strategy,
                 ramp_up_start_rps=args.ramp_up_start_rps,
                 ramp_up_end_rps=args.ramp_up_end_rps)
    if args.trace:
        from kvcore.sim.traces import read_trace

        read_trace(args.trace, "auto")  # fail here, once, on a bad file
        d.update(trace=_regular_trace(str(args.trace)), trace_format="auto",
                 limit=args.limit)
    return d


def _regular_trace(path: str) -> str:
    """``path``, or for a pipe / FIFO (``--trace <(cmd)``, read once by
    :func:`kvcore.sim.traces.read_trace`) a temporary regular file holding its bytes, so
    that every candidate (worker processes, Ray tasks on this machine) reads the same
    requests; removed at exit."""
    import atexit
    import os
    import tempfile
    from pathlib import Path

    from kvcore.sim.traces import _SPOOLED, _spool_key

    key = _spool_key(Path(path))
    if key is None or key not in _SPOOLED:
        return path
    fd, tmp = tempfile.mkstemp(prefix="kvcore-trace-", suffix=".trace")
    with os.fdopen(fd, "wb") as f:
        f.write(_SPOOLED[key])
    def _remove() -> None:
        if os.path.exists(tmp):
            os.remove(tmp)

    atexit.register(_remove)
    return tmp


def _fmt(v: Any) -> str:
    if isinstance(v, float):
        return f"{v:,.1f}" if abs(v) < 1e6 else f"{v:.3g}"
    return str(v)


def run(args: argparse.Namespace) -> int:
    """Entry point of ``kvcore tune`` (returns the exit status)."""
    from kvcore.deploy.gpus import get_gpu

    gpu = get_gpu(args.gpu).name
    goodput = parse_goodput(args.goodput)
    objective = args.objective or ("goodput" if goodput else "output_throughput")
    if objective == "goodput" and not goodput:
        raise ConfigError("--objective goodput needs --goodput KEY:MS ...", field="goodput",
                          value=None)
    from kvcore.sim.datasets import check_dataset_flags

    check_dataset_flags(args, defaults={"num_prompts": 500})
    if args.num_prompts is None:  # a trace: the Workload's placeholder count
        args.num_prompts = 500
    if args.limit is not None and not args.trace:
        raise ConfigError(f"--limit {args.limit}: takes the first N requests of --trace; "
                          f"the random dataset has --num-prompts", field="limit",
                          value=args.limit)
    from kvcore.sim.workload import MAX_NUM_PROMPTS

    if args.num_prompts > MAX_NUM_PROMPTS:
        raise ConfigError(f"--num-prompts {args.num_prompts}: at most {MAX_NUM_PROMPTS:,} "
                          f"(about an hour of CPU per candidate)", field="num_prompts",
                          value=args.num_prompts)
    lows = [("--num-prompts", args.num_prompts, 1), ("--top", args.top, 1)]
    if args.dataset == "random":
        lows += [("--random-input-len", args.random_input_len, 1),
                 ("--random-output-len", args.random_output_len, 0),
                 ("--random-prefix-len", args.random_prefix_len, 0)]
    for flag, v, low in lows:
        if v < low:
            raise ConfigError(f"{flag} must be an integer >= {low}, got {v}",
                              field=flag[2:].replace("-", "_"), value=v)
    if args.dataset == "random":
        # vLLM's get_sampling_params clamps output lengths to >= 1, as kvcore simulate
        args.random_output_len = max(1, args.random_output_len)
    workload = _workload(args)
    dtypes = [d.strip() for d in args.kv_cache_dtype.split(",") if d.strip()]
    shared_prefix = bool(args.trace) or args.dataset == "prefix_repetition" or (
        args.dataset == "random" and args.random_prefix_len > 0)
    from kvcore.sim.modes import default_prefix_caching

    pc_default = default_prefix_caching(args.model)  # vLLM's: off for attention-free
    pc_mode = args.prefix_caching or ("both" if shared_prefix else
                                      "on" if pc_default else "off")
    prefix = {"on": [True], "off": [False], "both": [True, False]}[pc_mode]
    if args.mamba_cache_mode:
        mamba = [m.strip() for m in args.mamba_cache_mode.split(",") if m.strip()]
    else:
        mamba = ["none", "align"] if _has_mamba(args.model) else ["none"]
    configs = candidates(
        args.model, gpu, tp=args.tp or [1, 2, 4, 8], pp=args.pp,
        max_num_batched_tokens=args.max_num_batched_tokens, max_num_seqs=args.max_num_seqs,
        block_size=args.block_size or [None], kv_cache_dtype=dtypes,
        prefix_caching=prefix, mamba_cache_mode=mamba, workload=workload,
        goodput=goodput, max_model_len=args.max_model_len,
        sim="fast" if args.fast else "engine",
        chunked_prefill={"on": [True], "off": [False], "both": [True, False]}[
            args.chunked_prefill])
    from kvcore.sim.command import speculative_setup

    spec, acceptance = speculative_setup(args)
    if spec is not None:
        if args.fast:
            raise ConfigError("--fast: the token-level loop does not model speculative "
                              "decoding; drop --fast to simulate --speculative-config",
                              field="fast", value=True)
        from kvcore.models.config import load_model_config
        from kvcore.sim.speculative import check_model_supports

        check_model_supports(spec, load_model_config(args.model), str(args.model))
        sp = {"config": spec.config, "rates": list(acceptance.rates), "seed": args.seed,
              "draft_cost": args.spec_draft_cost or 0.0}
        for c in configs:
            c["speculative"] = sp
    if not configs:
        raise ConfigError(f"--max-num-batched-tokens {args.max_num_batched_tokens}: every "
                          f"value is below every --max-num-seqs {args.max_num_seqs}; vLLM "
                          f"refuses max_num_batched_tokens < max_num_seqs "
                          f"(SchedulerConfig)", field="max_num_batched_tokens",
                          value=args.max_num_batched_tokens)
    res = tune(configs, objective=objective, backend=args.backend, workers=args.workers,
               address=args.address, progress=None if not args.json else False)
    ranked = res["ranked"]
    if ranked and objective == "goodput" and _score(ranked[0], objective)[0] <= 0:
        slo = " ".join(f"{k}:{v:g}" for k, v in goodput.items())
        reached = []
        for k in goodput:
            key = f"median_{k}_ms"
            vals = [r["figures"][key] for r in ranked if key in r["figures"]]
            if vals:
                reached.append(f"median {k.upper()} {min(vals):,.2f} ms")
        raise ConfigError(f"--goodput {slo}: no candidate meets the SLO (request_goodput "
                          f"0 for all {len(ranked)} simulated); the best reached: "
                          f"{', '.join(reached) or 'none'}; loosen the SLO or search "
                          f"other settings", field="goodput", value=slo)
    if not ranked:
        reasons = sorted({r["error"] for r in res["failed"]})
        served = [r for r in reasons if r.startswith("no request can be served")]
        if served:
            raise ConfigError(f"no candidate serves a request on {gpu}: {served[0]}",
                              field="max_model_len", value=args.max_model_len)
        raise ConfigError(f"no candidate could be planned on {gpu}: "
                          f"{reasons[0] if reasons else 'no candidates'}", field="gpu",
                          value=gpu)
    keys = ("request_goodput", "output_throughput", "request_throughput", "median_ttft_ms",
            "p99_ttft_ms", "median_tpot_ms", "p99_tpot_ms", "preemptions",
            "spec_decode_acceptance_length", "spec_decode_acceptance_rate")
    def entry(r: dict[str, Any]) -> dict[str, Any]:
        c = {k: r["config"][k] for k, _ in _FLAGS}
        c["enable_prefix_caching"] = r["config"]["enable_prefix_caching"]
        c["enable_chunked_prefill"] = r["config"].get("enable_chunked_prefill", True)
        f = {k: r["figures"][k] for k in keys if k in r["figures"]}
        f["planned_block_size"] = r["figures"]["block_size"]
        f["num_gpus"] = r["figures"]["num_gpus"]
        f[f"{objective}_per_gpu"] = _score(r, objective)[0]
        return {"config": c, "figures": f,
                "vllm_serve": vllm_command(args.model, {**r["config"], **c},
                                           prefix_caching_default=pc_default)}
    best = entry(ranked[0])
    runners = [entry(r) for r in ranked[1:1 + args.top]]
    from kvcore.serving import MIN_GAIN

    near = int(res.get("within_margin", 1))
    margin_note = (f"{near - 1} runner-up(s) within {100 * MIN_GAIN:g} % of the best "
                   f"{objective} per GPU (the simulator's error): the simplest of them "
                   f"(default kv_cache_dtype, prefix caching, block size; fewest GPUs) "
                   f"is shown as best" if near > 1 else None)
    if args.json:
        print(json.dumps({"model": args.model, "gpu": gpu, "objective": objective,
                          "goodput_slo_ms": goodput, "best": best,
                          "runner_ups": runners, "candidates": len(configs),
                          "min_gain": MIN_GAIN, "within_margin": near,
                          "margin_note": margin_note,
                          "speculative_config": None if spec is None else spec.config,
                          "spec_acceptance_rate": args.spec_acceptance_rate,
                          "failed": [{"config": {k: f["config"][k] for k, _ in _FLAGS},
                                      "error": f["error"]} for f in res["failed"]]}))
        return 0
    print(f"best of {len(ranked)} candidates on {gpu} (ranked by {objective} per GPU):")
    print(f"  {best['vllm_serve']}")
    print("  " + ", ".join(f"{k} {_fmt(v)}" for k, v in best["figures"].items()))
    if margin_note:
        print(f"  note: {margin_note}")
    headers = ["#", "tp", "mnbt", "max_num_seqs", "block", "kv dtype", "prefix", "chunked",
               "mamba",
               objective + "/gpu", "out tok/s", "med TTFT ms", "med TPOT ms"]
    rows = []
    for i, e in enumerate([best, *runners]):
        c, f = e["config"], e["figures"]
        rows.append([str(i + 1), str(c["tensor_parallel_size"]),
                     str(c["max_num_batched_tokens"]), str(c["max_num_seqs"]),
                     str(c["block_size"] or f["planned_block_size"]), c["kv_cache_dtype"],
                     "on" if c["enable_prefix_caching"] else "off",
                     "on" if c["enable_chunked_prefill"] else "off", c["mamba_cache_mode"],
                     _fmt(f[f"{objective}_per_gpu"]), _fmt(f["output_throughput"]),
                     _fmt(f["median_ttft_ms"]), _fmt(f["median_tpot_ms"])])
    try:
        from rich.console import Console
        from rich.table import Table

        table = Table(title="best and runner-ups", title_justify="left")
        for h in headers:
            table.add_column(h, justify="right")
        for r in rows:
            table.add_row(*r)
        Console(width=max(120, Console().width)).print(table)
    except ImportError:  # pragma: no cover
        for r in [headers, *rows]:
            print("  ".join(r))
    if res["failed"]:
        print(f"{len(res['failed'])} candidates could not be planned (e.g. "
              f"{res['failed'][0]['error'][:120]})", file=sys.stderr)
    return 0
