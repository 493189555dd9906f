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
from kvcore.userfiles import dumps_json

# (merge_same_runs and prefer_simpler work on tune()'s own result records: internal)
__all__ = ["simulate_once", "candidates", "tune",
           "vllm_command", "serve_model", "serve_model_note", "parse_goodput",
           "OBJECTIVES"]

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
    pc = _prefix_caching(cand)
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
    or ``{"config": ..., "error": "...", "field": ..., "value": ...}`` when the planner
    (or vLLM's rules) refuses it, or a field is malformed (:func:`check_candidate`:
    the error names it).

    ``config`` keys: ``model`` (a config.json path, folder, embedded name or HF id),
    ``gpu``, ``tensor_parallel_size``, ``pipeline_parallel_size``,
    ``max_num_batched_tokens`` (None: vLLM's default for the run, with chunked prefill
    off ``max(max_model_len, the serve default)``), ``max_num_seqs``,
    ``block_size`` (None: the planner's), ``kv_cache_dtype``,
    ``enable_prefix_caching``, ``enable_chunked_prefill`` (True / False),
    ``mamba_cache_mode``, ``max_model_len`` (None: the model's; -1: the longest that
    fits) and the workload:
    ``workload`` (``input_len``, ``output_len``, ``num_prompts``, ``prefix_len``,
    ``max_concurrency``, ``request_rate``, ``burstiness``, ``seed``, or ``trace`` /
    ``trace_format`` / ``limit`` (>= 1) for a trace file, or ``dataset`` / ``dataset_opts``
    (the flags of :func:`kvcore.sim.datasets.dataset_requests`) for another dataset),
    ``goodput`` (ms per SLO key: ttft, tpot, e2el) and ``sim`` (``engine``, default, or
    ``fast``).  A plain dict in, a plain dict out (it crosses process and Ray
    boundaries).  The returned ``config`` carries the Mamba cache mode vLLM 0.32 runs
    (:func:`kvcore.sim.modes.resolve_mamba_cache_mode`) and the
    ``max_num_batched_tokens`` it runs; a mode or block size vLLM refuses gives an
    ``error``.
    """
    try:
        return _simulate_once(cand)
    except KVCoreError as exc:
        extra: dict[str, Any] = {k: exc.extra[k] for k in ("field", "value")
                                 if k in exc.extra}
        return {"config": cand, "error": str(exc.message if hasattr(exc, "message")
                                               else exc), **extra}


def _simulate_once(cand: dict[str, Any]) -> dict[str, Any]:
    import kvcore
    from kvcore.deploy.gpus import check_attention_block_size
    from kvcore.sim.command import _model_config
    from kvcore.sim.engine import check_scheduler_limits
    from kvcore.sim.fastsim import Workload, run_workload
    from kvcore.sim.modes import check_vllm_chunked_prefill, resolve_mamba_cache_mode
    from kvcore.sim.timing import roofline_for

    cand = check_candidate(cand)
    tp = cand["tensor_parallel_size"]
    pp = cand["pipeline_parallel_size"]
    pc = _prefix_caching(cand)
    chunked = _chunked(cand)
    # what vLLM 0.32 runs for this line (kvcore.sim.modes): the mode follows prefix
    # caching on Mamba models; a mode or block size vLLM refuses is an error entry
    mode, _ = resolve_mamba_cache_mode(cand.get("mamba_cache_mode"), pc,
                                       _has_mamba(cand["model"]))
    check_vllm_chunked_prefill(mode, chunked)
    cand = {**cand, "mamba_cache_mode": mode}
    spec, _ = _speculative(cand)
    spec_plan: dict[str, Any] = {} if spec is None else {
        "num_speculative_tokens": spec.num_speculative_tokens,
        "include_mtp_layers": spec.include_mtp_layers}
    check_attention_block_size(cand.get("block_size"), cand["gpu"])
    given_mml = cand.get("max_model_len")
    known_mml = given_mml if given_mml is not None and given_mml > 0 else None
    mnbt = cand["max_num_batched_tokens"]
    if mnbt is None:  # vLLM's default; with chunked prefill off it needs max_model_len
        mnbt = _default_mnbt(cand["gpu"], known_mml or 0, chunked)
    check_scheduler_limits(cand["max_num_seqs"], mnbt, known_mml or 1 << 62)

    def plan(mnbt: int) -> Any:
        return kvcore.plan_model(
            cand["model"], gpu=cand["gpu"], tensor_parallel_size=tp,
            pipeline_parallel_size=pp, max_model_len=given_mml,
            block_size=cand.get("block_size"),
            kv_cache_dtype=cand.get("kv_cache_dtype", "auto"),
            max_num_batched_tokens=mnbt, max_num_seqs=cand["max_num_seqs"],
            enable_prefix_caching=pc, mamba_cache_mode=mode, **spec_plan)

    kv = plan(mnbt)
    mml_run = int(kv.max_model_len or known_mml or 0)
    if cand["max_num_batched_tokens"] is None and not chunked and mnbt < mml_run:
        mnbt = _default_mnbt(cand["gpu"], mml_run, chunked)  # the model's length: replan
        check_scheduler_limits(cand["max_num_seqs"], mnbt, mml_run)
        kv = plan(mnbt)
        mml_run = int(kv.max_model_len or known_mml or 0)
    cand = {**cand, "max_num_batched_tokens": mnbt}
    if not chunked and mnbt < mml_run:
        raise ConfigError(
            f"max_num_batched_tokens {mnbt} is below max_model_len {mml_run} with chunked "
            f"prefill off; vLLM 0.32 refuses it (SchedulerConfig): give "
            f"max_num_batched_tokens >= {mml_run}, a smaller max_model_len, or none "
            f"(vLLM then uses max(max_model_len, its default))",
            field="max_num_batched_tokens", value=mnbt)
    eff: dict[str, Any] = {}
    if cand.get("efficiency") is not None:  # kvcore calibrate's coefficients
        import dataclasses

        from kvcore.sim.timing import DEFAULT_EFFICIENCY
        eff["efficiency"] = dataclasses.replace(DEFAULT_EFFICIENCY, **cand["efficiency"])
    model: Any = roofline_for(_model_config(cand["model"]), kv, gpu=cand["gpu"],
                              tensor_parallel_size=tp, pipeline_parallel_size=pp,
                              kv_cache_dtype=cand.get("kv_cache_dtype", "auto"), **eff)
    if spec is not None and (cand.get("speculative") or {}).get("draft_cost"):
        from kvcore.sim.speculative import DraftCostTimeModel

        model = DraftCostTimeModel(model, kv, spec.num_speculative_tokens,
                                   float(cand["speculative"]["draft_cost"]))
    spec = kv.kv_cache_groups[0].spec
    attn = [g.spec.block_size for g in kv.kv_cache_groups
            if g.spec.scales_with_block_size]
    attn_bs = attn[0] if attn else None
    if cand.get("sim", "engine") == "engine":
        fig = _run_engine(model, kv, cand)
        fig["num_gpus"] = tp * pp
        fig["num_blocks"] = kv.num_blocks
        fig["block_size"] = attn_bs
        return {"config": cand, "figures": fig}
    wl = {k: v for k, v in cand["workload"].items()
          if k not in ("trace", "trace_format", "limit", "dataset", "dataset_opts",
                       "range_ratio", "ramp_up_strategy", "ramp_up_start_rps",
                       "ramp_up_end_rps")}
    cw = cand["workload"]
    if cw.get("trace") or cw.get("dataset_opts") or cw.get("range_ratio") or \
            cw.get("ramp_up_strategy") or not cw.get("input_len") or \
            not cw.get("output_len"):
        traces = _trace_requests(cw)
        w = Workload.from_trace(traces, max_concurrency=wl.get("max_concurrency"))
    else:
        wl["requests"] = ()
        w = Workload(**wl)
    # the engine's admission (fresh tester T14): a request past max_model_len is
    # rejected on arrival, and a run where every request is is refused as the engine
    # path refuses it; the pool is counted in blocks over every group (T15: one group's
    # tokens over-counted a 5 : 1 sliding-window model's pool about 3-fold)
    from types import SimpleNamespace

    from kvcore.sim.engine import check_some_served
    from kvcore.specs import PlanContext

    check_some_served([SimpleNamespace(prompt_len=p, output_len=o, rejected=False)
                       for p, o, _ in (w.requests or ((w.prefix_len + w.input_len,
                                                       w.output_len, 0.0),))],
                      max_model_len=mml_run)
    ctx = PlanContext(max_model_len=max(1, mml_run), mamba_cache_mode=mode,
                      enable_prefix_caching=pc,
                      num_speculative_tokens=spec_plan.get("num_speculative_tokens", 0),
                      tensor_parallel_size=tp, pipeline_parallel_size=pp)
    fig = run_workload(model, kv, w, max_num_seqs=cand["max_num_seqs"],
                       max_num_batched_tokens=mnbt,
                       kv_capacity_blocks=kv.num_blocks - 1 if kv.num_blocks else None,
                       plan_context=ctx, max_model_len=mml_run or None,
                       enable_prefix_caching=pc, enable_chunked_prefill=chunked,
                       goodput=cand.get("goodput") or None)
    if not fig.get("completed") and fig.get("failed"):
        return {"config": cand, "error": f"no request can be served: every request is "
                f"rejected (max_model_len {mml_run}, num_blocks {kv.num_blocks})",
                "field": "max_model_len", "value": mml_run}
    fig["num_gpus"] = tp * pp
    fig["num_blocks"] = kv.num_blocks
    fig["block_size"] = attn_bs
    return {"config": cand, "figures": fig}


def _has_mamba(model: Any) -> bool:
    from kvcore.sim.modes import mamba_layout

    return mamba_layout(model)[0]


def candidates(model: Any, gpu: str, *, tp: Sequence[int], pp: Sequence[int] = (1,),
               max_num_batched_tokens: Sequence[int | None], max_num_seqs: Sequence[int],
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
    check_attention_block_size`).

    Every argument is checked (ConfigError naming the field, the value and what is
    valid): each searched argument is a non-empty list (a string is not: ``"auto"`` is
    no list of dtypes), counts are ints (no bool, no float), ``max_num_batched_tokens``
    / ``max_model_len`` lengths as vLLM reads them (``8k``; None in
    ``max_num_batched_tokens``: vLLM's default, which with chunked prefill off is
    ``max(max_model_len, the serve default)``, resolved by :func:`simulate_once`),
    ``kv_cache_dtype`` one of vLLM 0.32's ``--kv-cache-dtype`` names
    (:data:`VLLM_KV_CACHE_DTYPES`: a candidate is a ``vllm serve`` line), the flags
    True / False, ``goodput`` vLLM's SLO keys with finite values >= 0, ``sim`` engine
    or fast, ``gpu`` a catalog GPU."""
    from kvcore.deploy.gpus import check_attention_block_size, get_gpu
    from kvcore.errors import shorten
    from kvcore.sim.modes import check_vllm_mamba_cache_mode, resolve_mamba_cache_mode
    from kvcore.units import check_int

    _check_model(model)
    if not isinstance(gpu, str):
        raise ConfigError(f"gpu: expected a GPU name, got {shorten(gpu)}", field="gpu",
                          value=shorten(gpu))
    get_gpu(gpu, memory_flag=False)
    tp = [check_int(t, "tensor_parallel_size") for t in _values(tp, "tensor_parallel_size")]
    pp = [check_int(p, "pipeline_parallel_size")
          for p in _values(pp, "pipeline_parallel_size")]
    max_num_batched_tokens = [_mnbt(b) for b in _values(max_num_batched_tokens,
                                                        "max_num_batched_tokens")]
    max_num_seqs = [check_int(s, "max_num_seqs") for s in _values(max_num_seqs,
                                                                  "max_num_seqs")]
    block_size = [None if bs is None else check_int(bs, "block_size")
                  for bs in _values(block_size, "block_size")]
    kv_cache_dtype = [check_vllm_kv_cache_dtype(d)
                      for d in _values(kv_cache_dtype, "kv_cache_dtype")]
    prefix_caching = [_check_flag(pc, "enable_prefix_caching")
                      for pc in _values(prefix_caching, "enable_prefix_caching")]
    chunked_prefill = [_check_chunked(cp)
                       for cp in _values(chunked_prefill, "enable_chunked_prefill")]
    for mm in _values(mamba_cache_mode, "mamba_cache_mode"):
        if not isinstance(mm, str):
            raise ConfigError(f"mamba_cache_mode: expected align or none, got "
                              f"{shorten(mm)}", field="mamba_cache_mode", value=shorten(mm))
        check_vllm_mamba_cache_mode(mm)
    for bs in block_size:
        check_attention_block_size(bs, gpu)
    if not isinstance(workload, dict):
        raise ConfigError(f"workload: expected a dict, got {shorten(workload)}",
                          field="workload", value=shorten(workload))
    goodput = _check_goodput(goodput)
    max_model_len = _max_model_len(max_model_len)
    _check_sim(sim)
    has_mamba = _has_mamba(model)
    out = []
    seen = set()
    for t, p, b, s, bs, d, pc, mm, cp in itertools.product(
            tp, pp, max_num_batched_tokens, max_num_seqs, block_size, kv_cache_dtype,
            prefix_caching, mamba_cache_mode, chunked_prefill):
        # vLLM's SchedulerConfig refuses max_num_batched_tokens < max_num_seqs (None:
        # vLLM's default, known once planned: simulate_once checks it)
        if b is not None and b < s:
            continue
        if not cp and b is not None and max_model_len and b < max_model_len:
            continue  # and this, chunked off
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

    if objective not in OBJECTIVES or not isinstance(objective, str):
        raise ConfigError(f"--objective: unknown objective {objective!r}; valid: "
                          f"{', '.join(OBJECTIVES)}", field="objective", value=objective)
    if isinstance(configs, (str, bytes, dict)) or not isinstance(configs, (list, tuple)):
        raise ConfigError(f"configs: expected a list of simulate_once configs, got "
                          f"{type(configs).__name__}", field="configs",
                          value=type(configs).__name__)
    if not configs:
        raise ConfigError("configs: no candidates to simulate (an empty list)",
                          field="configs", value="[]")
    for c in configs:
        check_candidate(c)
        if objective == "goodput" and not c.get("goodput"):
            raise ConfigError("objective goodput needs a goodput SLO in every config "
                              "(e.g. {'ttft': 500}; the CLI's --goodput KEY:MS); or rank "
                              "by another objective: "
                              f"{', '.join(o for o in OBJECTIVES if o != 'goodput')}",
                              field="goodput", value=repr(c.get("goodput")))
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
    (vLLM loads a model folder or an HF id, not a config file); a config file of
    another name as given (no folder would load it: :func:`serve_model_note`); anything
    else as given."""
    import os

    from kvcore.models.embedded import hf_model_id

    text = str(model)
    if os.path.isfile(text):
        if os.path.basename(text) != "config.json":  # vLLM reads DIR/config.json only
            return text  # as given, with :func:`serve_model_note`'s note
        return os.path.dirname(os.path.abspath(text))
    if os.path.isdir(text):
        return text
    return hf_model_id(text) or text


def serve_model_note(model: Any) -> str | None:
    """Why the printed ``vllm serve`` line's model needs replacing, or None: a config
    file not named ``config.json`` (vLLM loads ``FOLDER/config.json`` with the weights
    beside it, or an HF id)."""
    import os

    text = str(model)
    if os.path.isfile(text) and os.path.basename(text) != "config.json":
        return (f"vllm serve loads a model folder (config.json and the weights) or an HF "
                f"id, not {text}: replace it with the model's folder or id")
    return None


def vllm_command(model: str, cand: dict[str, Any], *,
                 prefix_caching_default: bool = True) -> str:
    """The ``vllm serve`` command line of a cand (vLLM's flag spelling; defaults left
    out: pipeline parallel 1, mamba mode none, and the block size unless it was
    searched: vLLM then picks it as kvcore's planner did).  Prefix caching is printed
    when it differs from vLLM's default for the model (``prefix_caching_default``:
    on, off for attention-free models; :func:`kvcore.sim.modes.default_prefix_caching`);
    chunked prefill off as ``--no-enable-chunked-prefill``.  Every argument is
    shell-quoted (:func:`shlex.quote`: a model path with a space stays one argument).
    A mode vLLM 0.32 refuses raises ConfigError (``mamba_cache_mode``), so does a
    ``kv_cache_dtype`` ``vllm serve`` has no such name for (:data:`VLLM_KV_CACHE_DTYPES`:
    a kvcore alias such as ``bf16`` or a kvcore plugin's scheme)."""
    import shlex

    from kvcore.sim.modes import check_vllm_mamba_cache_mode
    from kvcore.units import check_int

    _check_model(model)
    if not isinstance(cand, dict):
        raise ConfigError(f"vllm_command: the config must be a dict, got "
                          f"{type(cand).__name__}", field="config",
                          value=type(cand).__name__)
    cand = dict(cand)
    for key in ("tensor_parallel_size", "pipeline_parallel_size", "max_num_seqs",
                "block_size"):
        if cand.get(key) is not None:
            cand[key] = check_int(cand[key], key)
    cand["max_num_batched_tokens"] = _mnbt(cand.get("max_num_batched_tokens"))
    cand["max_model_len"] = _max_model_len(cand.get("max_model_len"))
    parts = ["vllm", "serve", serve_model(model)]
    for key, flag in _FLAGS:
        v = cand.get(key)
        if key == "mamba_cache_mode" and v is not None:
            check_vllm_mamba_cache_mode(v)
        if key == "kv_cache_dtype" and v is not None:
            check_vllm_kv_cache_dtype(v)  # only vLLM's spellings go on the line
        if v is None or (key == "pipeline_parallel_size" and v == 1) or \
                (key == "mamba_cache_mode" and v == "none"):
            continue
        parts += [flag, str(v)]
    pc = _prefix_caching(cand)
    if pc != prefix_caching_default:
        parts.append("--enable-prefix-caching" if pc else "--no-enable-prefix-caching")
    if not _chunked(cand):  # vLLM's default: on
        parts.append("--no-enable-chunked-prefill")
    if cand.get("max_model_len"):
        parts += ["--max-model-len", str(cand["max_model_len"])]
    sp = cand.get("speculative")
    if sp:  # a fixed setting, as given (kvcore's --spec-acceptance-rate is not vLLM's)
        parts += ["--speculative-config", json.dumps(sp["config"])]
    return " ".join(shlex.quote(p) for p in parts)  # a shell runs it as meant


# ---- input checks of the Python API (candidates, simulate_once, tune) ------------------

#: vLLM 0.32's ``--kv-cache-dtype`` choices, ``CacheDType`` (vllm/config/cache.py): the
#: only spellings a printed ``vllm serve`` line may carry (argparse's ``choices`` are
#: case-sensitive; kvcore's aliases and kvcore-plugin schemes are not among them)
VLLM_KV_CACHE_DTYPES = ("auto", "float16", "bfloat16", "fp8", "fp8_e4m3", "fp8_e5m2",
                        "fp8_inc", "fp8_ds_mla", "nvfp4_ds_mla", "turboquant_k8v4",
                        "turboquant_4bit_nc", "turboquant_k3v4_nc", "turboquant_3bit_nc",
                        "ultraquant_4bit", "int4_per_token_head", "int8_per_token_head",
                        "fp8_per_token_head", "nvfp4", "nvfp4_4over6")

#: kvcore's own names of a dtype vLLM spells otherwise (for the hint only: not rewritten)
_VLLM_SPELLING = {"bf16": "bfloat16", "half": "float16", "fp16": "float16"}

#: the keys of a :func:`simulate_once` config
_CAND_KEYS = frozenset({"model", "gpu", "tensor_parallel_size", "pipeline_parallel_size",
                        "max_num_batched_tokens", "max_num_seqs", "block_size",
                        "kv_cache_dtype", "enable_prefix_caching", "mamba_cache_mode",
                        "enable_chunked_prefill", "max_model_len", "workload", "goodput",
                        "sim", "speculative", "requested_block_size", "efficiency"})

#: the keys of a workload dict
_WORKLOAD_KEYS = frozenset({"input_len", "output_len", "num_prompts", "prefix_len",
                            "max_concurrency", "request_rate", "burstiness", "seed",
                            "range_ratio", "ramp_up_strategy", "ramp_up_start_rps",
                            "ramp_up_end_rps", "trace", "trace_format", "limit",
                            "dataset", "dataset_opts"})

_SIMS = ("engine", "fast")
_GOODPUT_KEYS = ("ttft", "tpot", "e2el")


def _check_flag(value: Any, field: str) -> bool:
    """True / False only (a string such as "off", 0, 1 or None is not read as a flag):
    ConfigError naming ``field``, the value and "True or False"."""
    if not isinstance(value, bool):
        raise ConfigError(f"{field} must be True or False, got {value!r}", field=field,
                          value=repr(value))
    return value


def _check_chunked(value: Any) -> bool:
    return _check_flag(value, "enable_chunked_prefill")


def _chunked(cand: dict[str, Any]) -> bool:
    """A candidate's ``enable_chunked_prefill`` (default True, vLLM's); ConfigError naming
    the field for anything but True / False (a string such as "off" is not taken)."""
    return _check_chunked(cand.get("enable_chunked_prefill", True))


def _prefix_caching(cand: dict[str, Any]) -> bool:
    """A candidate's ``enable_prefix_caching`` (default True), checked as
    :func:`_chunked`."""
    return _check_flag(cand.get("enable_prefix_caching", True), "enable_prefix_caching")


def check_vllm_kv_cache_dtype(value: Any, field: str = "kv_cache_dtype") -> str:
    """``value`` if ``vllm serve --kv-cache-dtype`` takes it (:data:`VLLM_KV_CACHE_DTYPES`,
    exact spelling), else ConfigError naming the field, the value, vLLM's spelling
    where there is one and the valid names."""
    from kvcore.errors import shorten

    if isinstance(value, str) and value in VLLM_KV_CACHE_DTYPES:
        return value
    if not isinstance(value, str) or not value.strip():
        raise ConfigError(f"{field}: expected a kv_cache_dtype name, got {shorten(value)}; "
                          f"valid (vLLM 0.32's --kv-cache-dtype): "
                          f"{', '.join(VLLM_KV_CACHE_DTYPES)}", field=field,
                          value=shorten(value))
    low = value.strip().lower()
    if low in VLLM_KV_CACHE_DTYPES:
        hint = f"vLLM's choices are case-sensitive and lower-case: {low!r}"
    elif low in _VLLM_SPELLING:
        hint = f"vLLM spells it {_VLLM_SPELLING[low]!r}"
    else:
        hint = ("vllm serve has no such --kv-cache-dtype (a kvcore alias or a kvcore "
                "plugin's scheme cannot go on a vllm serve line; simulate it with "
                "kvcore simulate)")
    raise ConfigError(f"{field} {shorten(value)}: {hint}; valid (vLLM 0.32's "
                      f"--kv-cache-dtype, vllm/config/cache.py CacheDType): "
                      f"{', '.join(VLLM_KV_CACHE_DTYPES)}", field=field,
                      value=shorten(value))


def _values(value: Any, field: str) -> list[Any]:
    """A non-empty list or tuple of searched values (a string is not a sequence of
    values here: ``"auto"`` is not ``["a", "u", "t", "o"]``)."""
    from kvcore.errors import shorten

    if isinstance(value, (str, bytes, dict)) or not isinstance(value, (list, tuple, range)):
        raise ConfigError(f"{field}: expected a list of values, got {shorten(value)}",
                          field=field, value=shorten(value))
    if not value:
        raise ConfigError(f"{field}: expected a non-empty list of values, got []",
                          field=field, value="[]")
    return list(value)


def _max_model_len(value: Any) -> int | None:
    """None (the model's), -1 (the longest that fits, vLLM's ``auto``) or a length
    (an int, or vLLM's suffixes as :func:`kvcore.units.parse_length`)."""
    from kvcore.units import parse_length

    if value is None:
        return None
    if isinstance(value, float):  # 4096.0 is not silently an int (nor nan)
        from kvcore.units import check_int

        return check_int(value, "max_model_len")
    return parse_length(value, "max_model_len", allow_auto=True)


def _mnbt(value: Any) -> int | None:
    """``max_num_batched_tokens``: a length (vLLM's ``human_readable_int``) or None
    (vLLM's default for the run: :func:`_default_mnbt`)."""
    from kvcore.units import check_int, parse_length

    if value is None:
        return None
    if isinstance(value, float):
        return check_int(value, "max_num_batched_tokens")
    return parse_length(value, "max_num_batched_tokens")


def _check_goodput(goodput: Any) -> dict[str, float]:
    """``{"ttft": ms, ...}``: keys of vLLM's ``--goodput`` (ttft, tpot, e2el), values
    finite numbers >= 0 (``check_goodput_args``); None / {} for no SLO."""
    from kvcore.errors import shorten

    if goodput is None:
        return {}
    if not isinstance(goodput, dict):
        raise ConfigError(f"goodput: expected a dict of SLOs in ms such as "
                          f"{{'ttft': 500, 'tpot': 50}}, got {shorten(goodput)}",
                          field="goodput", value=shorten(goodput))
    out = {}
    for k, v in goodput.items():
        if k not in _GOODPUT_KEYS:
            raise ConfigError(f"goodput: unknown SLO {shorten(k)}; valid (vLLM's "
                              f"--goodput): {', '.join(_GOODPUT_KEYS)}", field="goodput",
                              value=shorten(k))
        if isinstance(v, bool) or not isinstance(v, (int, float)) or \
                not math.isfinite(v) or v < 0:
            raise ConfigError(f"goodput {k} = {shorten(v)}: must be a finite number of "
                              f"ms >= 0", field="goodput", value=shorten(v))
        out[k] = v
    return out


def _check_model(model: Any) -> Any:
    """A model as kvcore reads it: a config.json path, folder, embedded name or HF id
    (a non-empty string or path) or a ModelConfig."""
    import os

    from kvcore.errors import shorten
    from kvcore.models.config import ModelConfig

    if isinstance(model, ModelConfig) or (isinstance(model, os.PathLike)) or (
            isinstance(model, str) and model.strip()):
        return model
    raise ConfigError(f"model: expected a config.json path, folder, embedded model name or "
                      f"HF id, got {shorten(model)}", field="model", value=shorten(model))


def _check_sim(sim: Any) -> str:
    if sim not in _SIMS or not isinstance(sim, str):
        raise ConfigError(f"sim: unknown simulator {sim!r}; valid: {', '.join(_SIMS)}",
                          field="sim", value=repr(sim))
    return sim


def _check_real(value: Any, field: str, *, allow_inf: bool) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or \
            value != value or (not allow_inf and math.isinf(value)) or not value > 0:
        inf = " (inf: all at once)" if allow_inf else ""
        raise ConfigError(f"workload.{field} = {value!r}: must be a number > 0{inf}",
                          field=field, value=repr(value))
    return float(value)


def _check_dict(obj: Any, name: str, keys: Any) -> None:
    """``obj`` is a dict whose keys are all in ``keys``; ConfigError naming ``name``
    otherwise (the key, and the valid ones)."""
    from kvcore.errors import shorten

    if not isinstance(obj, dict):
        raise ConfigError(f"{name}: expected a dict, got {shorten(obj)}", field=name,
                          value=shorten(obj))
    for k in obj:
        if k not in keys:
            raise ConfigError(f"{name}: unknown key {shorten(k)}; valid: "
                              f"{', '.join(sorted(keys))}", field=name, value=shorten(k))


def _check_workload(wl: Any) -> dict[str, Any]:
    """A workload dict as :func:`simulate_once` reads it (see there), checked: unknown
    and missing keys, counts, rates, the dataset name and the trace limit.  Raises
    ConfigError naming the field."""
    from kvcore.errors import shorten
    from kvcore.units import check_int

    _check_dict(wl, "workload", _WORKLOAD_KEYS)
    if wl.get("max_concurrency") is not None:
        check_int(wl["max_concurrency"], "max_concurrency")
    _check_real(wl.get("request_rate", math.inf), "request_rate", allow_inf=True)
    _check_real(wl.get("burstiness", 1.0), "burstiness", allow_inf=True)
    seed = check_int(wl.get("seed", 0), "seed", minimum=0, maximum=(1 << 63) - 1)
    from kvcore.sim.workload import MAX_SEED

    if seed > MAX_SEED:  # vllm bench serve seeds numpy with it: np.random.seed(--seed)
        raise ConfigError(f"seed = {seed}: must be in [0, 2**32 - 1] (vllm bench serve "
                          f"seeds numpy's RandomState with it, as kvcore.sim.workload)",
                          field="seed", value=seed)
    if wl.get("limit") is not None:
        if not wl.get("trace") and not wl.get("dataset_opts"):
            raise ConfigError(f"workload.limit {wl['limit']!r}: takes the first N requests "
                              f"of a trace; the random dataset has num_prompts",
                              field="limit", value=repr(wl["limit"]))
        check_int(wl["limit"], "limit", minimum=1)
    if wl.get("trace") is not None:
        import os

        if not isinstance(wl["trace"], (str, os.PathLike)) or not str(wl["trace"]):
            raise ConfigError(f"workload.trace: expected a file path, got "
                              f"{shorten(wl['trace'])}", field="trace",
                              value=shorten(wl["trace"]))
        if not isinstance(wl.get("trace_format", "auto"), str):
            raise ConfigError(f"workload.trace_format: expected a format name, got "
                              f"{shorten(wl['trace_format'])}", field="trace_format",
                              value=shorten(wl["trace_format"]))
        return wl
    ds = wl.get("dataset")
    opts = wl.get("dataset_opts")
    from kvcore.sim.datasets import DATASET_NAMES

    if ds is not None and ds not in DATASET_NAMES:
        raise ConfigError(f"workload.dataset {shorten(ds)}: valid: "
                          f"{', '.join(DATASET_NAMES)}", field="dataset", value=shorten(ds))
    if opts is not None or ds not in (None, "random"):
        if not isinstance(opts, dict):
            raise ConfigError(f"workload.dataset_opts: expected a dict of the dataset's "
                              f"flags (num_prompts, dataset_path ...), got {shorten(opts)}",
                              field="dataset_opts", value=shorten(opts))
        name = opts.get("dataset", ds)
        if name not in DATASET_NAMES or (ds is not None and name != ds):
            raise ConfigError(f"workload.dataset_opts dataset {shorten(name)}: valid: "
                              f"{', '.join(DATASET_NAMES)} (and workload.dataset's, "
                              f"{shorten(ds)})", field="dataset", value=shorten(name))
        if "num_prompts" not in opts:
            raise ConfigError("workload.dataset_opts: missing 'num_prompts'",
                              field="num_prompts", value=None)
        from kvcore.sim.datasets import DATASET_FLAGS, GENERAL_DATASET_FLAGS, check_dataset_flags

        known = {"dataset", "num_prompts", "seed", "model",
                 *(k for _, fl in DATASET_FLAGS.items() for k, _ in fl),
                 *(k for k, _ in GENERAL_DATASET_FLAGS)}
        for k in opts:
            if k not in known:
                raise ConfigError(f"workload.dataset_opts: unknown key {shorten(k)}; "
                                  f"valid: {', '.join(sorted(known))}", field="dataset_opts",
                                  value=shorten(k))
        check_int(opts["num_prompts"], "num_prompts")
        ns = argparse.Namespace(**{"seed": 0, **opts, "dataset": name})
        check_dataset_flags(ns, defaults={"num_prompts": opts["num_prompts"]})
        return {**wl, "dataset": name, "dataset_opts": vars(ns)}
    for k in ("num_prompts", "input_len", "output_len"):
        if k not in wl:
            raise ConfigError(f"workload: missing {k!r} (the random dataset's "
                              f"num_prompts, input_len, output_len)", field=k, value=None)
    from kvcore.sim.workload import MAX_NUM_PROMPTS

    check_int(wl["num_prompts"], "num_prompts", maximum=MAX_NUM_PROMPTS)
    check_int(wl["input_len"], "input_len", minimum=0)
    check_int(wl["output_len"], "output_len", minimum=0)
    check_int(wl.get("prefix_len", 0), "prefix_len", minimum=0)
    if wl["input_len"] + wl.get("prefix_len", 0) < 1:
        raise ConfigError(f"workload: input_len {wl['input_len']} with prefix_len "
                          f"{wl.get('prefix_len', 0)} gives empty prompts; prefix_len + "
                          f"input_len must be >= 1", field="input_len", value=wl["input_len"])
    return wl


def check_candidate(cand: Any) -> dict[str, Any]:
    """A :func:`simulate_once` config, checked and with its lengths read
    (``max_model_len`` / ``max_num_batched_tokens`` take vLLM's suffixes, as
    :mod:`kvcore.units`): the counts are ints (no bool, no float), the flags True /
    False, ``kv_cache_dtype`` a name, ``goodput`` vLLM's SLO keys, ``sim`` engine or
    fast, the workload as :func:`_check_workload`; unknown keys are refused.  Raises
    ConfigError naming the field, the value and what is valid."""
    from kvcore.errors import shorten
    from kvcore.units import check_int

    _check_dict(cand, "config", _CAND_KEYS)
    for k in ("model", "gpu", "max_num_seqs", "workload"):
        if k not in cand:
            raise ConfigError(f"config: missing {k!r}", field=k, value=None)
    _check_model(cand["model"])
    if not isinstance(cand["gpu"], str):
        raise ConfigError(f"gpu: expected a GPU name, got {shorten(cand['gpu'])}",
                          field="gpu", value=shorten(cand["gpu"]))
    from kvcore.deploy.gpus import get_gpu

    get_gpu(cand["gpu"], memory_flag=False)
    out = dict(cand)
    for k in ("tensor_parallel_size", "pipeline_parallel_size"):
        out[k] = check_int(cand.get(k, 1), k)
    out["max_num_seqs"] = check_int(cand["max_num_seqs"], "max_num_seqs")
    out["max_num_batched_tokens"] = _mnbt(cand.get("max_num_batched_tokens"))
    out["max_model_len"] = _max_model_len(cand.get("max_model_len"))
    if cand.get("block_size") is not None:
        out["block_size"] = check_int(cand["block_size"], "block_size")
    dt = cand.get("kv_cache_dtype", "auto")
    if not isinstance(dt, str) or not dt.strip():
        raise ConfigError(f"kv_cache_dtype: expected a kv_cache_dtype name, got "
                          f"{shorten(dt)}", field="kv_cache_dtype", value=shorten(dt))
    mm = cand.get("mamba_cache_mode")
    if mm is not None and not isinstance(mm, str):
        raise ConfigError(f"mamba_cache_mode: expected align, none or None, got "
                          f"{shorten(mm)}", field="mamba_cache_mode", value=shorten(mm))
    _prefix_caching(cand)
    _chunked(cand)
    out["goodput"] = _check_goodput(cand.get("goodput"))
    _check_sim(cand.get("sim", "engine"))
    out["workload"] = _check_workload(cand["workload"])
    if cand.get("efficiency") is not None:
        out["efficiency"] = _check_efficiency(cand["efficiency"])
    return out


def _check_efficiency(value: Any) -> dict[str, float]:
    """A candidate's ``efficiency``: a dict of :class:`kvcore.sim.timing.Efficiency`
    fields (what ``kvcore calibrate --output`` holds), checked by Efficiency itself;
    ConfigError naming the field otherwise."""
    import dataclasses

    from kvcore.sim.timing import DEFAULT_EFFICIENCY

    known = {f.name for f in dataclasses.fields(DEFAULT_EFFICIENCY)}
    _check_dict(value, "efficiency", known)
    return dataclasses.asdict(dataclasses.replace(DEFAULT_EFFICIENCY, **value))


def _default_mnbt(gpu: str, max_model_len: int, chunked: bool) -> int:
    """vLLM 0.32's ``max_num_batched_tokens`` when ``vllm serve`` is not given one
    (``EngineArgs._set_default_max_num_seqs_and_batched_tokens_args``): the serve default
    of the GPU (:func:`kvcore.sim.command.vllm_serve_defaults`), raised with chunked
    prefill off to ``max(max_model_len, default)`` (arg_utils.py: "If max_model_len is
    too short, use the default for higher throughput")."""
    from kvcore.deploy.gpus import get_gpu
    from kvcore.sim.command import vllm_serve_defaults

    g = get_gpu(gpu, memory_flag=False)
    default = vllm_serve_defaults(getattr(g, "memory_bytes", None), g.name)[1]
    return default if chunked else max(max_model_len, default)


# ---- CLI -------------------------------------------------------------------------------

def _ints(flag: str, *, lengths: bool = False, field: str | None = None) -> Any:
    """An argparse ``type=`` for a comma list of positive ints; ``lengths``: each item
    read as vLLM reads a length (``8k``, ``16K``: :func:`kvcore.units.parse_length`, as
    ``vllm serve --max-num-batched-tokens`` does)."""
    from kvcore.errors import shorten
    from kvcore.units import bound, parse_length

    top = bound(field or flag[2:].replace("-", "_"))  # each item at most its field's bound

    def parse(text: str) -> list[int]:
        out = []
        for part in str(text).split(","):
            if lengths:
                try:
                    v = parse_length(part, flag[2:].replace("-", "_"))
                except ConfigError as exc:
                    raise argparse.ArgumentTypeError(
                        f"{flag}: expected positive lengths separated by commas, got "
                        f"{text!r} ({exc.message})") from None
            else:
                try:
                    v = int(part)
                except ValueError:
                    v = 0
            if v < 1:
                raise argparse.ArgumentTypeError(
                    f"{flag}: expected positive integers separated by commas, got "
                    f"{text!r}")
            if v > top:  # as the single-value flags: 2**64 must not reach numpy
                raise argparse.ArgumentTypeError(
                    f"{flag}: {shorten(part.strip())} is implausibly large (at most "
                    f"{top:,}), got {shorten(text)!r}")
            out.append(v)
        return out
    return parse


def _dtypes_arg(text: str) -> list[str]:
    """``--kv-cache-dtype auto,fp8``: a comma list of vLLM 0.32's kv_cache_dtype names
    (no empty item; a name ``vllm serve`` refuses is refused here, naming it)."""
    items = str(text).split(",")
    if not text.strip() or any(not d.strip() for d in items):
        raise argparse.ArgumentTypeError(
            f"--kv-cache-dtype: expected a comma list of kv_cache_dtype names, got "
            f"{text!r}")
    try:
        return [check_vllm_kv_cache_dtype(d.strip(), "--kv-cache-dtype") for d in items]
    except ConfigError as exc:
        raise argparse.ArgumentTypeError(exc.message) from None


def add_subparser(sub: Any) -> argparse.ArgumentParser:
    """Register ``kvcore tune`` on the CLI's subparsers."""
    p = sub.add_parser("tune", help="search vLLM serving settings by simulated goodput",
                       description=__doc__.split("\n\n")[0])
    p.add_argument("model", help="config.json path, folder, or embedded name")
    p.add_argument("--gpu", required=True, help="catalog GPU (kvcore gpus)")
    p.add_argument("--tp", type=_ints("--tp", field="tensor_parallel_size"), default=None,
                   help="tensor-parallel sizes to try (default 1,2,4,8 where the weights "
                        "fit)")
    p.add_argument("--pp", type=_ints("--pp", field="pipeline_parallel_size"), default=[1])
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
    # every integer flag is bounded as kvcore simulate bounds it (a plain type=int let
    # 2**64 reach numpy: a traceback)
    from kvcore.sim.command import _count_arg, _float_arg, _ramp_rps_arg
    from kvcore.sim.workload import MAX_NUM_PROMPTS, MAX_SEED
    from kvcore.units import length_arg

    p.add_argument("--random-input-len", type=length_arg("random_input_len", minimum=0),
                   default=None, help="default 1024")
    p.add_argument("--random-output-len", type=length_arg("random_output_len", minimum=0),
                   default=None, help="default 128")
    p.add_argument("--random-prefix-len", type=length_arg("random_prefix_len", minimum=0),
                   default=None, help="default 0")
    p.add_argument("--num-prompts", type=_count_arg("num_prompts", maximum=MAX_NUM_PROMPTS,
                                                    what="requests"),
                   default=None, help=f"default 500 (at most {MAX_NUM_PROMPTS:,})")
    add_dataset_arguments(p)
    p.add_argument("--max-concurrency", type=_count_arg("max_concurrency", what="requests"),
                   default=None)
    p.add_argument("--request-rate", type=_float_arg("request_rate"), default=math.inf)
    p.add_argument("--burstiness", type=_float_arg("burstiness"), default=1.0)
    p.add_argument("--random-range-ratio", default=None,
                   help="lengths uniform in [len * (1 - r), len * (1 + r)], r in [0, 1), "
                        "or a JSON dict like '{\"input\": 0.3, \"output\": 0.5}' "
                        "(vLLM's)")
    p.add_argument("--ramp-up-strategy", choices=("linear", "exponential"), default=None,
                   help="ramp the request rate (vllm bench serve's; without "
                        "--request-rate)")
    p.add_argument("--ramp-up-start-rps", type=_ramp_rps_arg("ramp_up_start_rps"),
                   default=None)
    p.add_argument("--ramp-up-end-rps", type=_ramp_rps_arg("ramp_up_end_rps"), default=None)
    p.add_argument("--seed", type=_count_arg("seed", minimum=0, maximum=MAX_SEED), default=0)
    p.add_argument("--limit", type=_count_arg("limit", what="requests", vllm=False),
                   default=None,
                   help="first N trace requests (N >= 1)")
    p.add_argument("--goodput", nargs="+", default=None, metavar="KEY:MS",
                   help="SLOs as vLLM's --goodput: ttft:MS tpot:MS e2el:MS")
    p.add_argument("--objective", choices=OBJECTIVES, default=None,
                   help="rank by this figure per GPU (default: goodput with --goodput, "
                        "else output_throughput)")
    p.add_argument("--max-num-batched-tokens",
                   type=_ints("--max-num-batched-tokens", lengths=True), default=None,
                   help="token budgets to try, with vLLM's suffixes (8k, 16K; default "
                        "2048,8192,16384, and with chunked prefill off also vLLM's own "
                        "default then: max(max_model_len, the serve default))")
    p.add_argument("--max-num-seqs", type=_ints("--max-num-seqs"), default=[64, 256, 1024])
    p.add_argument("--block-size", type=_ints("--block-size"), default=None,
                   help="block sizes to try (default: the planner's)")
    p.add_argument("--kv-cache-dtype", type=_dtypes_arg, default=["auto", "fp8"],
                   help="comma-separated kv_cache_dtype values as vllm serve spells them "
                        "(default auto,fp8)")
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
    p.add_argument("--max-model-len", type=length_arg("max_model_len", allow_auto=True),
                   default=None,
                   help="with vLLM's suffixes (8k, 128K); -1 or auto: the longest that "
                        "fits (default: the model's)")
    p.add_argument("--top", type=_count_arg("top", maximum=1 << 20, vllm=False), default=5,
                   help="runner-ups to print")
    p.add_argument("--backend", choices=["local", "ray", "serial"], default="local")
    p.add_argument("--address", default=None, help="Ray cluster address (--backend ray)")
    p.add_argument("--workers", type=_count_arg("workers", what="processes", vllm=False),
                   default=None)
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
    p.add_argument("--spec-draft-cost", type=_float_arg("spec_draft_cost", allow_inf=False,
                                                        allow_zero=True),
                   default=None, metavar="F",
                   help="kvcore's drafter-time term, as kvcore simulate (default 0)")
    p.add_argument("--efficiency", default=None, metavar="FILE.json",
                   help="the step-time model's coefficients from kvcore calibrate "
                        "--output (fitted to your own vllm bench serve runs); default: "
                        "kvcore's fitted defaults")
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
    input_len = 1024 if args.random_input_len is None else args.random_input_len
    output_len = 128 if args.random_output_len is None else args.random_output_len
    prefix_len = args.random_prefix_len or 0
    from kvcore.sim.workload import check_ramp_up, parse_range_ratio, random_dataset

    if args.random_range_ratio is not None and args.trace:
        raise ConfigError(f"--random-range-ratio {args.random_range_ratio}: shapes the "
                          f"random dataset; a trace's requests have their own lengths",
                          field="random_range_ratio", value=args.random_range_ratio)
    ratio = (None if args.random_range_ratio is None else
             parse_range_ratio(args.random_range_ratio))
    if not args.trace:  # vLLM's rule: the shortest prompt (prefix + input) >= 1 token
        random_dataset(1, input_len, output_len, prefix_len, ratio or 0.0, args.seed)
    w = Workload(max(1, input_len), max(1, output_len),
                 args.num_prompts, max_concurrency=args.max_concurrency,
                 request_rate=args.request_rate, burstiness=args.burstiness,
                 prefix_len=prefix_len, seed=args.seed)  # validates the numbers
    d: dict[str, Any] = {k: getattr(w, k) for k in (
        "num_prompts", "max_concurrency", "request_rate", "burstiness", "prefix_len",
        "seed")}
    d.update(input_len=input_len, output_len=output_len)
    if ratio is not None:
        d["range_ratio"] = ratio
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

    gpu = get_gpu(args.gpu, memory_flag=False).name
    from kvcore.sim.command import _model_config

    _model_config(args.model)  # a path, embedded name or HF id (resolved once, here)
    goodput = parse_goodput(args.goodput)
    objective = args.objective or ("goodput" if goodput else "output_throughput")
    if objective == "goodput" and not goodput:
        raise ConfigError("--objective goodput needs --goodput KEY:MS ...", field="goodput",
                          value=None)
    from kvcore.sim.datasets import check_dataset_flags

    check_dataset_flags(args, defaults={"num_prompts": 500})
    if args.num_prompts is None:  # a trace: the Workload's placeholder count
        args.num_prompts = 500
    if args.limit is not None and args.limit < 1:
        raise ConfigError(f"--limit must be an integer >= 1 (the first N requests of "
                          f"--trace), got {args.limit}", field="limit", value=args.limit)
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
        # vLLM's rule is prefix + shortest input >= 1 (random_dataset checks it)
        lows += [("--random-input-len", args.random_input_len, 0),
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
    dtypes = list(args.kv_cache_dtype)
    shared_prefix = bool(args.trace) or args.dataset == "prefix_repetition" or (
        args.dataset == "random" and args.random_prefix_len > 0)
    from kvcore.sim.modes import default_prefix_caching

    pc_default = default_prefix_caching(args.model)  # vLLM's: off for attention-free
    pc_mode = args.prefix_caching or ("both" if shared_prefix else
                                      "on" if pc_default else "off")
    prefix = {"on": [True], "off": [False], "both": [True, False]}[pc_mode]
    if args.mamba_cache_mode is not None:
        items = args.mamba_cache_mode.split(",")
        if any(not m.strip() for m in items):  # '' or 'align,,none' is no list of modes
            raise ConfigError(f"--mamba-cache-mode: expected a comma list of modes (align, "
                              f"none), got {args.mamba_cache_mode!r}",
                              field="mamba_cache_mode", value=args.mamba_cache_mode)
        mamba = [m.strip() for m in items]
    else:
        mamba = ["none", "align"] if _has_mamba(args.model) else ["none"]
    mnbt = args.max_num_batched_tokens or [2048, 8192, 16384]
    chunked = {"on": [True], "off": [False], "both": [True, False]}[args.chunked_prefill]
    configs = []
    for cp in chunked:
        # chunked prefill off and no --max-num-batched-tokens: vLLM's own default then,
        # max(max_model_len, the serve default) (EngineArgs), is searched too
        grid = mnbt if cp or args.max_num_batched_tokens else [*mnbt, None]
        configs += candidates(
            args.model, gpu, tp=args.tp or [1, 2, 4, 8], pp=args.pp,
            max_num_batched_tokens=grid, max_num_seqs=args.max_num_seqs,
            block_size=args.block_size or [None], kv_cache_dtype=dtypes,
            prefix_caching=prefix, mamba_cache_mode=mamba, workload=workload,
            goodput=goodput, max_model_len=args.max_model_len,
            sim="fast" if args.fast else "engine", chunked_prefill=[cp])
    if args.efficiency is not None:  # kvcore calibrate --output
        import dataclasses

        from kvcore.sim.calibrate import load_efficiency, warn_if_other_deployment

        coeffs = dataclasses.asdict(load_efficiency(args.efficiency))
        warn_if_other_deployment(args.efficiency, gpu=gpu, model=str(args.model),
                                 tensor_parallel_size=(args.tp[0] if args.tp and
                                                       len(args.tp) == 1 else None))
        for c in configs:
            c["efficiency"] = coeffs
    from kvcore.sim.command import speculative_setup

    spec, acceptance = speculative_setup(args)
    if spec is not None:
        if args.fast:
            raise ConfigError("--fast: the token-level loop does not model speculative "
                              "decoding; drop --fast to simulate --speculative-config",
                              field="fast", value=True)
        from kvcore.sim.speculative import check_model_supports

        check_model_supports(spec, _model_config(args.model), str(args.model))
        sp = {"config": spec.config, "rates": list(acceptance.rates), "seed": args.seed,
              "draft_cost": args.spec_draft_cost or 0.0}
        for c in configs:
            c["speculative"] = sp
    if not configs:
        if all(b < s for b in mnbt for s in args.max_num_seqs):
            raise ConfigError(f"--max-num-batched-tokens {mnbt}: every value is below "
                              f"every --max-num-seqs {args.max_num_seqs}; vLLM refuses "
                              f"max_num_batched_tokens < max_num_seqs (SchedulerConfig)",
                              field="max_num_batched_tokens", value=str(mnbt))
        raise ConfigError(f"--max-num-batched-tokens {mnbt}: with --chunked-prefill off "
                          f"vLLM needs max_num_batched_tokens >= max_model_len "
                          f"({args.max_model_len}) and >= max_num_seqs; give such values, "
                          f"or leave --max-num-batched-tokens out (vLLM then uses "
                          f"max(max_model_len, its default))",
                          field="max_num_batched_tokens", value=str(mnbt))
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
        failed = sorted(res["failed"], key=lambda r: r["error"])
        served = [r for r in failed if r["error"].startswith("no request can be served")]
        if served:
            raise ConfigError(f"no candidate serves a request on {gpu}: "
                              f"{served[0]['error']}", field="max_model_len",
                              value=args.max_model_len)
        first = failed[0] if failed else {"error": "no candidates"}
        # the underlying refusal's field and value (kv_cache_dtype 'fp9', not the GPU)
        raise ConfigError(f"no candidate could be planned on {gpu}: {first['error']}",
                          field=first.get("field", "gpu"),
                          value=first.get("value", gpu))
    keys = ("request_goodput", "output_throughput", "request_throughput", "median_ttft_ms",
            "p99_ttft_ms", "median_tpot_ms", "p99_tpot_ms", "preemptions",
            "spec_decode_acceptance_length", "spec_decode_acceptance_rate")
    def entry(r: dict[str, Any]) -> dict[str, Any]:
        c = {k: r["config"].get(k) for k, _ in _FLAGS}
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
        print(dumps_json({"model": args.model, "gpu": gpu, "objective": objective,
                          "goodput_slo_ms": goodput, "best": best,
                          "runner_ups": runners, "candidates": len(configs),
                          "min_gain": MIN_GAIN, "within_margin": near,
                          "margin_note": margin_note,
                          "model_note": serve_model_note(args.model),
                          "speculative_config": None if spec is None else spec.config,
                          "spec_acceptance_rate": args.spec_acceptance_rate,
                          "failed": [{"config": {k: f["config"].get(k)
                                                 for k, _ in _FLAGS},
                                      "error": f["error"]} for f in res["failed"]]}))
        return 0
    print(f"best of {len(ranked)} candidates on {gpu} (ranked by {objective} per GPU):")
    print(f"  {best['vllm_serve']}")
    model_note = serve_model_note(args.model)
    if model_note:
        print(f"  note: {model_note}")
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
              f"{res['failed'][0]['error']})", file=sys.stderr)
    return 0
