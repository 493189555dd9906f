"""``kvcore plan``'s serving side: ``--workload FILE`` (a trace, read by
:mod:`kvcore.sim.traces`), the judge (``--judge``), and the printed comparison of the
chosen layout with vLLM's own layout (``--explain``: the Pareto front).

This is the CLI layer: it may import :mod:`kvcore.sim` (planning never does; it takes
a :class:`kvcore.serving.Workload` and a judge callable).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from kvcore.errors import ConfigError
from kvcore.serving import Judge, LayoutReport, ServingFigures, Workload, workload_from_requests

__all__ = ["load_workload", "make_judge", "sim_judge", "simulate_plan", "TRACE_BLOCK_TOKENS"]

#: granularity (tokens) at which prompts given as token ids are compared for shared
#: prefixes
TRACE_BLOCK_TOKENS = 16


def shared_prefix_lengths(requests: Sequence[Any]) -> list[int]:
    """Per request (in order), the leading prompt tokens it shares with an earlier
    request: Mooncake ``hash_ids`` (512-token blocks, the last possibly partial),
    else the prompt's ``segments`` (runs of one token stream), else its token ids in
    blocks of :data:`TRACE_BLOCK_TOKENS`."""
    from kvcore.sim.traces import MOONCAKE_BLOCK_TOKENS

    # prefixes as nodes of a trie: a node is (parent node, next item); linear in the
    # prompt (a tuple of the whole prefix per block was quadratic: tester A, stop 37)
    nodes: dict[tuple[Any, ...], int] = {}
    out = []
    for r in requests:
        parent = 0
        items: Any
        if r.hash_ids is not None:
            items = ((("h", h), min(r.prompt_len, (i + 1) * MOONCAKE_BLOCK_TOKENS))
                     for i, h in enumerate(r.hash_ids))
        elif r.segments:
            def seg_items(segs: Any) -> Any:
                n = 0
                for seg in segs:
                    n += seg[2]
                    yield ("s", tuple(seg)), n
            items = seg_items(r.segments)
        else:
            toks = r.token_ids or ()
            items = ((("t", tuple(toks[end - TRACE_BLOCK_TOKENS:end])), end)
                     for end in range(TRACE_BLOCK_TOKENS, len(toks) + 1, TRACE_BLOCK_TOKENS))
        shared = 0
        matching = True
        for item, n in items:
            edge = (parent, item)
            node = nodes.get(edge)
            if node is None:
                matching = False
                node = nodes[edge] = len(nodes) + 1
            elif matching:
                shared = n
            parent = node
        out.append(min(shared, r.prompt_len))
    return out


def load_workload(path: str, max_num_seqs: int = 256) -> Workload:
    """A trace file (Mooncake JSONL, Azure CSV, kvcore JSONL; :func:`read_trace`) as a
    :class:`Workload`.  Raises ConfigError naming the file and line of a bad row."""
    from kvcore.sim.traces import read_trace

    reqs = read_trace(path)
    shared = shared_prefix_lengths(reqs)
    return workload_from_requests(
        [(r.prompt_len, max(1, r.output_len), s) for r, s in zip(reqs, shared)],
        max_num_seqs=max_num_seqs, source=f"trace {path} ({len(reqs):,} requests)")


def make_judge(name: str, model: Any = None, **kw: Any) -> Judge | None:
    """``analytic`` (None: planning's own proxy) or ``sim`` (:func:`sim_judge`)."""
    if name == "analytic":
        return None
    try:
        import kvcore.sim.engine  # noqa: F401
    except ImportError:
        from kvcore.errors import ConfigError

        raise ConfigError("--judge sim needs kvcore.sim (the clocked simulator); use "
                          "--judge analytic", field="judge", value=name) from None
    return sim_judge(model, **kw)


def _fmt_time(t: float) -> str:
    return "n/a" if math.isinf(t) else f"{t:,.3f}"


def _row(f: ServingFigures) -> list[str]:
    return [f"{f.num_groups}", ", ".join(f"{b:,}" for b in f.block_sizes),
            "-" if f.prefix_hit_alignment_tokens is None
            else f"{f.prefix_hit_alignment_tokens:,}",
            "-" if f.guarantee is None else f"{f.guarantee:.2f}",
            "-" if f.steady_capacity_requests is None
            else f"{f.steady_capacity_requests:.1f}",
            f"{f.prefix_hit_fraction:.0%}", _fmt_time(f.time_s)]


HEADERS = ["groups", "block sizes", "hit alignment", "guarantee", "steady capacity",
           "prefix hits", "time (s)"]


def print_serving(stats: Any, table: Any, explain: bool = False,
                  judge_requested: str | None = None) -> None:
    """The chosen layout beside vLLM's (``table(title, headers, rows)`` prints one).
    ``judge_requested``: the judge the user asked for (``sim``; ``--efficiency``: ``sim
    with --efficiency FILE``); when the planner had one layout and so ran no judge, the
    line says it went unused instead of naming only the analytic estimate."""
    won, base = stats.serving, stats.vllm_layout
    if won is None:
        return
    unused = ""
    if judge_requested and won.judged_by == "analytic":
        unused = (f"; one layout to choose from, so the {judge_requested} judge did not "
                  "run")
    if stats.candidates_scored <= 1 and base is not None:
        print(f"serving: one candidate layout, vLLM's own ({won.num_groups} group"
              f"{'s' if won.num_groups != 1 else ''}, {_fmt_time(won.time_s)} s on the "
              f"workload by {won.judged_by}{unused})")
        return
    rows = [["kvcore (chosen)"] + _row(won)]
    if base is not None:
        rows.append(["vLLM's layout"] + _row(base.figures))
    wl = stats.workload or {}
    which = "the chosen layout and vLLM's" if base is not None else \
        "the chosen layout (no vLLM layout: see the note)"
    table(f"serving: {which} on the workload "
          f"({wl.get('source', 'default')}; judged by {won.judged_by}{unused})",
          ["layout"] + HEADERS, rows)
    gain = stats.gain_over_vllm
    if gain is not None:
        kept = base is not None and won == base.figures
        print(f"gain over vLLM's layout: {gain:+.1%} time to serve"
              + (" (vLLM's layout kept: no candidate was faster)" if kept else
                 " (as fast as vLLM's layout and no worse on guarantee, steady capacity, "
                 "groups and hit alignment)" if abs(gain) < 5e-4 else ""))
    if explain and stats.pareto_front:
        table("Pareto front of the judged layouts (guarantee, steady capacity, groups, "
              "hit alignment, time)", ["layout"] + HEADERS,
              [[("* " if p.is_vllm_layout else "") + p.strategy] + _row(p.figures)
               for p in stats.pareto_front])


def serving_json(stats: Any) -> dict[str, Any] | None:
    """The ``serving`` object of ``kvcore plan --json``."""
    won, base = stats.serving, stats.vllm_layout
    if won is None:
        return None
    front: list[LayoutReport] = stats.pareto_front or []
    return {"chosen": won.to_dict(), "vllm_layout": base.to_dict() if base else None,
            "gain_over_vllm": stats.gain_over_vllm, "workload": stats.workload,
            "pareto_front": [p.to_dict() for p in front]}


def workload_requests(workload: Workload, max_requests: int = 48) -> list[Any]:
    """The workload as trace requests for the simulator: each class keeps its share of
    at most ``max_requests`` requests (at least one each), all arriving at 0; a class's
    shared prefix is one token stream common to its requests (stream ``1 + class``),
    the rest unique (:class:`kvcore.sim.traces.TraceRequest` segments)."""
    from kvcore.sim.traces import TraceRequest

    total = workload.num_requests
    out = []
    k = 0
    for j, rc in enumerate(workload.requests):
        n = max(1, round(rc.count * min(1.0, max_requests / total)))
        for _ in range(n):
            segs = []
            if rc.shared_prefix_len:
                segs.append((1 + j, 0, rc.shared_prefix_len))
            if rc.prompt_len > rc.shared_prefix_len:
                segs.append((1_000_000 + k, 0, rc.prompt_len - rc.shared_prefix_len))
            out.append(TraceRequest(f"w{k}", 0.0, rc.prompt_len, rc.output_len,
                                    2_000_000 + k, segs))
            k += 1
    return out


#: the longest output (tokens) the sim judge serves of the default workload (no
#: --workload): its outputs are max_model_len // 4 tokens, one decode step each, so a
#: 131,072-token max_model_len would time 48 x 32,768 decode steps per candidate
DEFAULT_WORKLOAD_MAX_OUTPUT_LEN = 256


def bounded_default_workload(workload: Workload,
                             max_output_len: int = DEFAULT_WORKLOAD_MAX_OUTPUT_LEN
                             ) -> Workload:
    """The default workload (``source`` "default ...", :func:`kvcore.serving.
    default_workload`) with each output cut to ``max_output_len`` tokens; prompts and
    shared prefixes (what windows, chunks and prefix hits depend on) kept.  Any other
    workload (a --workload trace) is returned as it is."""
    import dataclasses

    if not workload.source.startswith("default") or all(
            r.output_len <= max_output_len for r in workload.requests):
        return workload
    cut = tuple(dataclasses.replace(r, output_len=min(r.output_len, max_output_len))
                for r in workload.requests)
    return dataclasses.replace(workload, requests=cut,
                               source=f"{workload.source}, outputs cut to "
                                      f"{max_output_len:,} tokens for the sim judge")


def sim_judge(model: Any = None, *, gpu: str = "H100-SXM", tensor_parallel_size: int = 1,
              pipeline_parallel_size: int = 1, max_requests: int = 48,
              max_requests_cap: int = 256,
              default_max_output_len: int = DEFAULT_WORKLOAD_MAX_OUTPUT_LEN,
              efficiency: Any = None) -> Judge:
    """A judge that serves each candidate's plan in the clocked simulator
    (:func:`kvcore.sim.engine.run_engine` over kvcore's runtime ``KVCacheManager``,
    vLLM 0.32's scheduling rules) and returns the simulated duration (seconds, every
    request arriving at 0) plus the scheduler's CPU time (the measured cost per
    scheduled request and group times the requests the steps ran).  Step times: :func:`kvcore.sim.timing.roofline_for` of
    ``model`` on ``gpu`` (without a model, e.g. a specs file: a constant 10 ms step, so
    the time counts steps).  The workload is cut (:func:`workload_requests`) to keep
    the judge quick: to ``max_requests`` requests, or to twice the largest steady
    capacity of the candidates (at most ``max_requests_cap``) so that memory binds
    where it binds on the whole workload.  The default workload (no --workload) has its
    outputs cut to ``default_max_output_len`` tokens (:func:`bounded_default_workload`),
    so the judge's cost is bounded whatever max_model_len is.  A candidate whose plan
    does not hold one request is infinitely slow.  The planner does not call a judge
    when there is one layout to judge (:func:`kvcore.grouping` ``_serving_judgment``).
    ``efficiency``: the roofline's :class:`~kvcore.sim.timing.Efficiency` (None: the
    fitted default; ``kvcore calibrate`` writes a deployment's own).  Raises
    ConfigError naming an argument of the wrong type or out of range."""
    import os

    from kvcore.errors import NotEnoughMemoryError
    from kvcore.models.config import ModelConfig
    from kvcore.sim import timing
    from kvcore.units import check_instance, check_int, check_name

    where = "sim_judge"
    if model is not None:
        check_instance(model, (str, os.PathLike, ModelConfig), "model", where=where,
                       hint="a config.json path, an embedded name or a ModelConfig")
    check_name(gpu, "gpu", where=where)
    for nm, v in (("tensor_parallel_size", tensor_parallel_size),
                  ("pipeline_parallel_size", pipeline_parallel_size),
                  ("max_requests", max_requests), ("max_requests_cap", max_requests_cap),
                  ("default_max_output_len", default_max_output_len)):
        check_int(v, nm, minimum=1, maximum=1 << 30, where=where)
    if efficiency is not None:
        check_instance(efficiency, timing.Efficiency, "efficiency", where=where,
                       hint="kvcore.sim.timing.Efficiency or None")

    models: dict[int, Any] = {}

    def time_model(cfg: Any) -> Any:
        if model is None:
            return timing.ConstantTimeModel(step_s=0.01)
        if 0 not in models:
            try:
                models[0] = timing.roofline_for(
                    model, cfg, gpu=gpu, tensor_parallel_size=tensor_parallel_size,
                    pipeline_parallel_size=pipeline_parallel_size,
                    **({} if efficiency is None else {"efficiency": efficiency}))
            except Exception:  # no weights figures for this model: count steps
                models[0] = timing.ConstantTimeModel(step_s=0.01)
        return models[0]

    def judge(cands: Sequence[Any], workload: Workload) -> list[float]:
        cut = bounded_default_workload(workload, default_max_output_len)
        judge.judged_by = base + (  # type: ignore[attr-defined]
            ")" if cut is workload else f"; the default workload's outputs cut to "
            f"{default_max_output_len:,} tokens: give --workload to judge on yours)")
        workload = cut
        # enough requests that memory binds where it binds on the whole workload
        # (twice the largest steady capacity, at most max_requests_cap)
        cap = max((c.figures.steady_capacity_requests or 0.0) for c in cands)
        n = max(max_requests, min(workload.num_requests, max_requests_cap,
                                  math.ceil(2 * cap)))
        times = []
        for c in cands:
            try:
                cfg = c.extra["config"]()
            except NotEnoughMemoryError:
                times.append(math.inf)
                continue
            t, info = simulate_plan(cfg, workload, time_model(cfg),
                                    c.figures.cpu_seconds_per_request_step, n)
            c.extra["sim"] = info
            times.append(t)
        return times

    base = f"sim ({'roofline ' + gpu if model is not None else 'steps'}" + (
        ", --efficiency coefficients" if efficiency is not None and model is not None
        else "")
    judge.judged_by = base + ")"  # type: ignore[attr-defined]
    return judge


def simulate_plan(config: Any, workload: Workload, time_model: Any,
                  cpu_seconds_per_request_step: float = 0.0, max_requests: int = 48
                  ) -> tuple[float, dict[str, Any]]:
    """Serve ``workload`` (cut by :func:`workload_requests`; requests longer than the
    plan's max_model_len left out) on ``config`` in the clocked simulator: seconds
    (the engine's duration plus ``cpu_seconds_per_request_step`` per scheduled request
    and step) and ``{"steps", "preemptions", "prefix_hit_ratio", "cpu_s"}``.

    Raises ConfigError (field ``max_model_len``) when no request of the workload fits
    within the plan's max_model_len, as ``kvcore simulate`` does
    (:func:`kvcore.sim.engine.check_some_served`); a plan whose KV cache rejects every
    request takes ``inf`` seconds; ConfigError naming an argument of the wrong type."""
    from kvcore.kv_cache_config import KVCacheConfig
    from kvcore.runtime import KVCacheManager
    from kvcore.sim.engine import SimRequest, run_engine
    from kvcore.units import check_instance, check_int, check_number

    where = "simulate_plan"
    check_instance(config, KVCacheConfig, "config", where=where, hint="kvcore.plan_model")
    check_instance(workload, Workload, "workload", where=where)
    if not callable(getattr(time_model, "step_time", None)):
        raise ConfigError(f"{where}: time_model must have a step_time(batch) method "
                          f"(kvcore.sim.timing), got {type(time_model).__name__}",
                          field="time_model")
    check_number(cpu_seconds_per_request_step, "cpu_seconds_per_request_step",
                 minimum=0.0, maximum=3600.0, where=where)
    check_int(max_requests, "max_requests", minimum=1, maximum=1 << 30, where=where)

    mml = int(config.max_model_len)
    ctx = config.stats.plan_context
    mnbt = ctx.max_num_batched_tokens if ctx is not None else \
        config.stats.max_num_batched_tokens
    caching = ctx.enable_prefix_caching if ctx is not None else True
    mgr = KVCacheManager(config, max_model_len=mml, enable_caching=caching,
                         max_num_batched_tokens=mnbt)
    from kvcore.sim.engine import check_some_served

    every = workload_requests(workload, max_requests)
    # no request within max_model_len: a time over zero served requests judges nothing
    # (kvcore simulate refuses the same workload): ConfigError naming max_model_len
    check_some_served([SimRequest(r) for r in every], max_model_len=mml)
    reqs = [r for r in every if r.prompt_len + r.output_len <= mml]
    res = run_engine(mgr, [SimRequest(r) for r in reqs], time_model,
                     max_num_seqs=workload.max_num_seqs, max_num_batched_tokens=mnbt,
                     max_model_len=mml, record_steps=True)
    if reqs and all(r.rejected for r in res.requests):
        # this plan's KV cache holds no request: it cannot serve the workload at all
        return math.inf, {"steps": res.steps, "preemptions": res.preemptions,
                          "prefix_hit_ratio": 0.0, "cpu_s": 0.0, "served": 0}
    # the scheduler's CPU time per scheduled request and group (measured,
    # kvcore.serving.CPU_US_PER_REQUEST_STEP), added to the GPU step times
    cpu = cpu_seconds_per_request_step * sum(res.step_running)
    return float(res.duration) + cpu, {"steps": res.steps, "preemptions": res.preemptions,
                                       "prefix_hit_ratio": res.prefix_hit_ratio,
                                       "cpu_s": cpu}
