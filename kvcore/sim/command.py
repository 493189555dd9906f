"""``kvcore simulate MODEL --trace FILE``: replay a request trace against the planned
KV cache of a model and report prefix-cache hits, block usage, rejections and
preemptions.

The KV cache is planned with :func:`kvcore.plan_model` (same options as ``kvcore
plan``; the budget is 16 GiB per rank unless ``--kv-cache-memory`` is given, and
``--num-blocks`` is passed as ``num_gpu_blocks_override`` with no default budget);
the runtime is :class:`kvcore.runtime.KVCacheManager` with prefix caching; the
scheduling model is the one documented in :mod:`kvcore.sim.replay` (arrival order,
closed loop, at most ``--max-num-seqs`` running, whole prompts per step, FCFS with
head-of-line blocking, recompute preemption of the newest request).  Trace formats and
token expansion: :mod:`kvcore.sim.traces`.

``--json`` prints one object: ``requests`` (admitted), ``trace_requests``,
``prompt_tokens``, ``prefix_hit_tokens``, ``prefix_hit_ratio`` (a fraction),
``peak_usage`` (fraction of usable blocks), ``rejected``, ``preempted``, ``steps``,
``manager_calls``, ``manager_calls_per_s`` (calls per second of time inside
``get_computed_blocks`` / ``allocate_slots`` / ``free``),
``allocate_slots_calls_per_s``, ``wall_seconds``, the plan (``num_blocks``,
``block_size``, ``max_model_len``, ``max_num_seqs``) and, for Mooncake traces,
``ideal_prefix_hit_ratio`` (infinite cache at the trace's 512-token granularity).

**With a clock** (any flag of the "clocked simulation" group, or ``--scheduler vllm``):
the workload is the trace (arrivals from its timestamps, or ``--request-rate`` /
``--burstiness``) or one of ``vllm bench serve``'s datasets (``--dataset-name random |
prefix_repetition | burstgpt | sharegpt``, ``--dataset`` an alias:
:mod:`kvcore.sim.datasets`); the loop is
:mod:`kvcore.sim.engine` (vLLM's Scheduler, with ``--max-concurrency``); the step-time
model comes from :func:`make_time_model`; ``--json`` prints the figures of
:mod:`kvcore.sim.metrics` (``vllm bench serve --save-result``'s names) plus the run's
settings (:func:`simulate_clocked`), the text output vLLM's "Serving Benchmark Result"
block.  With ``--gpu`` the KV budget is :func:`kvcore.deploy.budget.plan_on_gpu`'s and
``--max-num-seqs`` / ``--max-num-batched-tokens`` default to ``vllm serve``'s for that
GPU (:func:`vllm_serve_defaults`).  ``--speculative-config JSON`` (vLLM's) with
``--spec-acceptance-rate P`` simulates speculative decoding
(:mod:`kvcore.sim.speculative`; :func:`speculative_setup`), adding ``vllm bench serve``'s
``spec_decode_*`` figures.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from kvcore.sim.fleet import MAX_REPLICAS  # the bound of --replicas
from kvcore.sim.traces import TRACE_FORMATS
from kvcore.sim.workload import (
    MAX_NUM_PROMPTS,  # the bound of --num-prompts
    MAX_SEED,  # the bound of --seed (numpy's)
)
from kvcore.units import length_arg, parse_size
from kvcore.userfiles import dumps_json

__all__ = ["add_subparser", "run", "simulate", "simulate_clocked", "make_time_model",
           "time_model_note", "speculative_setup", "speculative_note", "vllm_serve_defaults", "select_percentile_metrics",
           "PERCENTILE_METRICS", "DEFAULT_KV_CACHE_MEMORY_BYTES",
           "prefix_repetition_arrivals_note", "trace_span_note"]

#: budget per rank when neither --kv-cache-memory nor --num-blocks is given (16 GiB)
DEFAULT_KV_CACHE_MEMORY_BYTES = 16 << 30


def add_subparser(subparsers: Any) -> argparse.ArgumentParser:
    """Add the ``simulate`` command to a ``kvcore`` argparse subparsers object."""
    p = subparsers.add_parser(
        "simulate", help="replay a request trace against a model's KV cache",
        description=__doc__.split("\n\n")[0])
    p.add_argument("model", help="config.json path, folder, or embedded name")
    p.add_argument("--trace", default=None,
                   help="Mooncake JSONL, Azure LLM inference CSV or kvcore JSONL (or "
                        "--dataset-name)")
    p.add_argument("--trace-format", default="auto", choices=list(TRACE_FORMATS))
    p.add_argument("--kv-cache-memory", "--kv-cache-memory-bytes", dest="kv_cache_memory",
                   default=None,
                   help="KV-cache budget per rank (default 16GiB unless --num-blocks is "
                        "given; 20GiB, 20GB, bytes; --kv-cache-memory-bytes is vLLM's "
                        "spelling)")
    p.add_argument("--num-blocks", "--num-gpu-blocks-override", dest="num_blocks",
                   type=_count_arg("num_blocks", minimum=2, what="blocks"), default=None,
                   help="use this many blocks, counting the null block, instead of the "
                        "budget's (the planner's num_gpu_blocks_override; "
                        "--num-gpu-blocks-override is vLLM's spelling)")
    p.add_argument("--max-model-len", type=length_arg("max_model_len"), default=None,
                   help="tokens per request, with vLLM's suffixes (128K = 131,072; "
                        "default: the config's maximum); longer requests are rejected")
    p.add_argument("--block-size", type=length_arg("block_size"), default=None)
    p.add_argument("--kv-cache-dtype", default="auto")
    p.add_argument("--tp", "--tensor-parallel-size", "-tp",
                   type=_count_arg("tensor_parallel_size", what="GPUs"), default=1,
                   dest="tensor_parallel_size",
                   help="tensor-parallel size (--tensor-parallel-size / -tp: vLLM's "
                        "spellings)")
    p.add_argument("--max-num-seqs", type=_count_arg("max_num_seqs", what="requests"),
                   default=None,
                   help="most requests running at once (default: 64 for the replay; "
                        "vLLM's serve default for the clocked run: 1024 on GPUs of "
                        ">= 70 GiB but A100, else 256)")
    p.add_argument("--max-num-batched-tokens", type=length_arg("max_num_batched_tokens"),
                   default=None,
                   help="token budget per step (default: 8192 for the replay; vLLM's "
                        "serve default for the clocked run: 16384 on GPUs of >= 160 GiB, "
                        "8192 on >= 70 GiB but A100, else 2048)")
    p.add_argument("--no-prefix-caching", "--no-enable-prefix-caching",
                   dest="no_prefix_caching", action="store_true",
                   help="prefix caching off (default: vLLM 0.32's for the model: on, off "
                        "for attention-free models such as pure Mamba; "
                        "--no-enable-prefix-caching is vLLM's spelling)")
    p.add_argument("--enable-prefix-caching", action="store_true",
                   help="prefix caching on for an attention-free model (vLLM's flag)")
    p.add_argument("--mamba-cache-mode", default=None, type=_mamba_mode_arg,
                   help="vLLM 0.32's --mamba-cache-mode for Mamba / linear-attention "
                        "layers: align (a state cached at each block boundary a step "
                        "ends on) or none; as in vLLM, the mode that runs is align with "
                        "prefix caching on (the default) and none with "
                        "--no-prefix-caching (kvcore.sim.modes)")
    p.add_argument("--limit", type=_count_arg("limit", minimum=1, what="requests", vllm=False),
                   default=None, help="replay the first N requests of --trace")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument("--plot", default=None, metavar="FILE.png",
                   help="plot block usage and prefix-hit ratio over the replay; with the "
                        "clock: KV usage, running batch and queue over time and the "
                        "TTFT / TPOT CDFs (needs matplotlib: pip install 'kvcore[plot]')")
    add_clock_arguments(p)
    p.set_defaults(func=run)
    return p


def _mamba_mode_arg(text: str) -> str:
    """An argparse ``type=``: vLLM 0.32's ``--mamba-cache-mode`` (align | none)."""
    import argparse

    from kvcore.errors import ConfigError
    from kvcore.sim.modes import check_vllm_mamba_cache_mode

    try:
        return check_vllm_mamba_cache_mode(text)
    except ConfigError as exc:
        raise argparse.ArgumentTypeError(exc.message) from None


def _count_arg(field: str, *, minimum: int = 1, maximum: int | None = None,
               what: str = "", vllm: bool = True) -> Any:
    """An argparse ``type=``: a plain integer in ``[minimum, maximum]`` (``maximum``
    None: :func:`kvcore.units.bound` of ``field``), as vLLM's ``type=int`` flags take
    it: no length suffix (``1k``), no decimal.  ``what`` names the unit in the
    message (``requests``); ``vllm``: the flag is vLLM's (the message says so)."""
    import argparse
    import re

    from kvcore.errors import shorten
    from kvcore.units import bound

    top = bound(field) if maximum is None else maximum
    unit = f" ({what})" if what else ""
    src = " (vLLM's type=int)" if vllm else ""

    def parse(text: str) -> int:
        from kvcore.errors import ConfigError

        raw = str(text).strip()
        if not re.fullmatch(r"[+-]?[0-9]{1,30}", raw) or \
                not minimum <= int(raw) <= top:
            raise ConfigError(
                f"{field} must be an integer in [{minimum:,}, {top:,}]{unit}, without a "
                f"suffix or decimals{src}, got {shorten(str(text))!r}", field=field,
                value=shorten(str(text)), minimum=minimum, maximum=top)
        return int(raw)

    def convert(text: str) -> int:
        from kvcore.errors import ConfigError

        try:
            return parse(text)
        except ConfigError as exc:  # the CLI's --json error keeps its field and value
            raise argparse.ArgumentTypeError(exc.message) from None

    convert.__name__ = field
    return convert


def simulate(model: Any, trace: str, *, kv_cache_memory_bytes: int | None = None,
             num_blocks: int | None = None, max_model_len: int | None = None,
             block_size: int | None = None, kv_cache_dtype: str = "auto",
             tensor_parallel_size: int = 1, max_num_seqs: int = 64,
             max_num_batched_tokens: int = 8192, enable_prefix_caching: bool = True,
             trace_format: str = "auto", limit: int | None = None,
             progress: Any = None, sample_every: int | None = None,
             requests: Sequence[Any] | None = None, mamba_cache_mode: str | None = None,
             ) -> tuple[dict[str, Any], Any]:
    """Plan, replay, and return ``(report dict, ReplayResult)`` (see the module
    docstring for the fields).

    ``num_blocks`` is passed to the planner as ``num_gpu_blocks_override`` (blocks,
    counting the null block).  ``requests`` (already read :class:`TraceRequest` objects)
    skips reading ``trace`` again.  Raises ConfigError (bad option or trace, naming the
    field: ``max_num_seqs`` / ``limit`` / ``sample_every`` not integers >= 1,
    ``num_blocks`` < 2, ``progress`` not callable; every request rejected: naming
    ``max_model_len`` or ``num_blocks``) and the planner's errors
    (NotEnoughMemoryError, ...).
    """
    import kvcore
    from kvcore.errors import ConfigError
    from kvcore.runtime import KVCacheManager
    from kvcore.sim.replay import Job, replay
    from kvcore.sim.traces import mooncake_ideal_hit_ratio, read_trace
    from kvcore.units import plain_int

    # numpy integers as the equal plain int, once here (bool etc. refused below, named)
    kv_cache_memory_bytes, num_blocks, max_model_len, block_size = (
        plain_int(kv_cache_memory_bytes), plain_int(num_blocks), plain_int(max_model_len),
        plain_int(block_size))
    tensor_parallel_size, max_num_seqs, max_num_batched_tokens, limit, sample_every = (
        plain_int(tensor_parallel_size), plain_int(max_num_seqs),
        plain_int(max_num_batched_tokens), plain_int(limit), plain_int(sample_every))
    if progress is not None and not callable(progress):
        raise ConfigError(f"progress must be a callable progress(done) or None, got "
                          f"{type(progress).__name__}", field="progress",
                          value=type(progress).__name__)
    for name, value, low in (("max_num_seqs", max_num_seqs, 1), ("limit", limit, 1),
                             ("num_blocks", num_blocks, 2),
                             ("sample_every", sample_every, 1)):
        if value is None and name != "max_num_seqs":
            continue
        if isinstance(value, bool) or not isinstance(value, int) or value < low:
            what = " (the null block plus at least one usable block)" \
                if name == "num_blocks" else ""
            raise ConfigError(f"{name} must be an integer >= {low}{what}, got {value!r}",
                              field=name, value=value)
    traces = list(requests) if requests is not None else read_trace(trace, trace_format)
    if limit is not None:
        traces = traces[:limit]
    opts: dict[str, Any] = {}
    if num_blocks is not None:
        opts["num_gpu_blocks_override"] = num_blocks
    from kvcore.sim.modes import mamba_layout, resolve_mamba_cache_mode

    mode, mode_note = resolve_mamba_cache_mode(mamba_cache_mode, enable_prefix_caching,
                                               mamba_layout(model)[0])
    if mode != "none":
        opts["mamba_cache_mode"] = mode
    cfg = kvcore.plan_model(
        model, kv_cache_memory_bytes=kv_cache_memory_bytes, max_model_len=max_model_len,
        block_size=block_size, kv_cache_dtype=kv_cache_dtype,
        tensor_parallel_size=tensor_parallel_size,
        max_num_batched_tokens=max_num_batched_tokens,
        enable_prefix_caching=enable_prefix_caching, **opts)
    if cfg.num_blocks is None:
        raise ConfigError("simulate needs a KV-cache budget: pass --kv-cache-memory or "
                          "--num-blocks", field="kv_cache_memory")
    mml = int(cfg.max_model_len or max_model_len or 0)
    mgr = KVCacheManager(cfg, max_model_len=mml, enable_caching=enable_prefix_caching,
                         max_num_batched_tokens=max_num_batched_tokens)
    jobs = [Job(t) for t in traces]
    if sample_every is None:
        sample_every = max(1, sum(t.output_len for t in traces) // max(1, max_num_seqs)
                           // 400)
    from types import SimpleNamespace

    from kvcore.sim.engine import check_some_served

    bs = cfg.kv_cache_groups[0].spec.block_size if cfg.kv_cache_groups else None

    def served_check() -> None:
        check_some_served([SimpleNamespace(rejected=j.rejected,
                                           prompt_len=j.trace.prompt_len,
                                           output_len=j.output_len) for j in jobs],
                          max_model_len=mml, num_blocks=cfg.num_blocks, block_size=bs)

    served_check()  # every request past max_model_len: before the run
    res = replay(mgr, jobs, max_running=max_num_seqs, time_calls=True, progress=progress,
                 sample_every=sample_every)
    served_check()  # every request rejected by the pool
    report: dict[str, Any] = {
        "model": str(model),
        "trace": str(trace),
        "trace_requests": len(traces),
        "requests": res.requests,
        "prompt_tokens": res.prompt_tokens,
        "prefix_hit_tokens": res.prefix_hit_tokens,
        "prefix_hit_ratio": round(res.prefix_hit_ratio, 6),
        "peak_usage": round(res.peak_usage, 6),
        "rejected": res.rejected,
        "preempted": res.preempted,
        "steps": res.steps,
        "manager_calls": res.manager_calls,
        "manager_calls_per_s": round(res.manager_calls / res.manager_seconds, 1)
        if res.manager_seconds else None,
        "allocate_slots_calls_per_s": round(res.allocate_slots_calls
                                            / res.allocate_slots_seconds, 1)
        if res.allocate_slots_seconds else None,
        "wall_seconds": round(res.wall_seconds, 3),
        "num_blocks": cfg.num_blocks,
        "block_size": cfg.kv_cache_groups[0].spec.block_size if cfg.kv_cache_groups else None,
        "max_model_len": mml,
        "max_num_seqs": max_num_seqs,
    }
    if traces and traces[0].hash_ids is not None:
        report["ideal_prefix_hit_ratio"] = round(mooncake_ideal_hit_ratio(traces), 6)
    if mamba_layout(model)[0]:
        report["mamba_cache_mode"] = mode
    if mode_note:
        report["note"] = mode_note
    return report, res


def _pyplot() -> Any:
    """matplotlib.pyplot on the Agg backend; ConfigError naming the install command if
    matplotlib is missing."""
    from kvcore.errors import ConfigError

    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as exc:
        raise ConfigError("--plot needs matplotlib, which is not installed: pip install "
                          "matplotlib (or pip install 'kvcore[plot]')", field="plot",
                          value="matplotlib") from exc
    return plt


def check_plot_path(path: str) -> None:
    """Fail before the replay if ``--plot path`` cannot be written: matplotlib missing,
    no such folder, a folder at ``path``, an unwritable folder or a file type matplotlib
    cannot write.  Raises ConfigError with ``field="plot"``."""
    from kvcore.errors import ConfigError

    plt = _pyplot()
    p = Path(path)
    parent = p.parent if str(p.parent) else Path(".")
    if not parent.is_dir():
        raise ConfigError(f"--plot {path}: the folder {str(parent)!r} does not exist; "
                          f"create it or give a path in an existing folder",
                          field="plot", value=path)
    if p.is_dir():
        raise ConfigError(f"--plot {path}: is a folder; give a file name such as "
                          f"{str(p / 'simulate.png')!r}", field="plot", value=path)
    if not os.access(parent, os.W_OK):
        raise ConfigError(f"--plot {path}: the folder {str(parent)!r} is not writable",
                          field="plot", value=path)
    ext = p.suffix[1:].lower()
    if ext:
        known = plt.figure().canvas.get_supported_filetypes()
        plt.close("all")
        if ext not in known:
            raise ConfigError(f"--plot {path}: matplotlib cannot write .{ext} files; use "
                              f"one of: " + ", ".join(f".{e}" for e in sorted(known)),
                              field="plot", value=path)


def _plot(res: Any, path: str, title: str) -> None:

    plt = _pyplot()
    steps = [s for s, _, _ in res.samples]
    fig, ax = plt.subplots(figsize=(8, 4))
    ax.plot(steps, [100 * u for _, u, _ in res.samples], label="block usage (%)")
    ax.plot(steps, [100 * r for _, _, r in res.samples],
            label="cumulative prefix-hit ratio (%)")
    ax.set_xlabel("step")
    ax.set_ylabel("%")
    ax.set_ylim(0, 100)
    ax.set_title(title)
    ax.legend(loc="lower right")
    fig.tight_layout()
    from kvcore.sim.metrics import save_plot

    save_plot(fig, path)


def _gib_ceil(n: int) -> str:
    """``n`` bytes rounded up to 0.01 GiB, as a ``--kv-cache-memory`` value."""
    return f"{math.ceil(n / (1 << 30) * 100) / 100:.2f}GiB"


def _explain_not_enough(exc: Any, args: argparse.Namespace, budget: int | None) -> Any:
    """The planner's NotEnoughMemoryError reworded with the simulate flags that fix it:
    which of --num-blocks, --kv-cache-memory or the 16 GiB default was too small, and
    the --num-blocks / --kv-cache-memory / --max-model-len values that would plan."""
    from kvcore.errors import NotEnoughMemoryError

    extra = dict(exc.extra)
    mml = extra.get("max_model_len")
    fits = extra.get("estimated_max_model_len")
    src = " (the config's maximum)" if args.max_model_len is None else ""
    one = f"one request of max_model_len {mml}{src}" if mml else "one request"
    fix_len = f", or --max-model-len {fits} or less" if fits else ""
    if args.num_blocks is not None:
        need = extra.get("min_num_blocks")
        fix = f"pass --num-blocks {need} or more" if need else "pass more --num-blocks"
        msg = (f"--num-blocks {args.num_blocks} (num_blocks, counting the null block) is too "
               f"few for "
               f"{one}: {fix}{fix_len}")
        extra["field"] = "num_blocks"
    else:
        need_b = extra.get("min_kv_cache_memory_bytes")
        fix = (f"pass --kv-cache-memory {_gib_ceil(need_b)} or more" if need_b
               else "pass a larger --kv-cache-memory")
        which = ("the default KV-cache budget of 16 GiB per rank (--kv-cache-memory not "
                 "given)" if args.kv_cache_memory is None
                 else f"--kv-cache-memory {args.kv_cache_memory} ({budget} B)")
        msg = f"{which} is too small for {one}: {fix}{fix_len}"
        extra["field"] = "kv_cache_memory"
    extra.setdefault("planner_message", exc.message)
    return NotEnoughMemoryError(msg, **extra)


def _replay(args: argparse.Namespace, budget: int | None, traces: Any, progress: Any
            ) -> tuple[dict[str, Any], Any]:
    """:func:`simulate` with the CLI's settings (the clockless replay)."""
    return simulate(
        args.model, args.trace, kv_cache_memory_bytes=budget,
        num_blocks=args.num_blocks, max_model_len=args.max_model_len,
        block_size=args.block_size, kv_cache_dtype=args.kv_cache_dtype,
        tensor_parallel_size=args.tensor_parallel_size, max_num_seqs=args.max_num_seqs,
        max_num_batched_tokens=args.max_num_batched_tokens,
        enable_prefix_caching=not args.no_prefix_caching,
        trace_format=args.trace_format, limit=args.limit, progress=progress,
        requests=traces, mamba_cache_mode=getattr(args, "mamba_cache_mode", None))


def _progress(args: argparse.Namespace, total: int | None) -> tuple[Any, Any]:
    """(progress callback or None, rich bar to stop or None) for a clocked run."""
    if args.json or not total:
        return None, None
    if sys.stderr.isatty():
        try:
            from rich.progress import BarColumn, MofNCompleteColumn, Progress
        except ImportError:
            pass
        else:
            bar = Progress("[progress.description]{task.description}", BarColumn(),
                           MofNCompleteColumn(), transient=True)
            bar.start()
            task = bar.add_task("simulating", total=total)
            return (lambda done: bar.update(task, completed=done)), bar
    if total >= PLAIN_PROGRESS_MIN_REQUESTS:
        # no terminal (a CI log, a pipe): a plain line every 5 % of a long run, as the
        # clockless replay prints (fresh tester T12: a million prompts ran ~17 minutes
        # without a word); short runs stay silent
        step = max(1, total // 20)
        state = {"next": step}

        def plain(done: int) -> None:
            if state["next"] < 0:
                return  # the last line is out
            if done >= state["next"] or done >= total:
                print(f"  {done}/{total} requests", file=sys.stderr, flush=True)
                state["next"] = -1 if done >= total else done + step
        return plain, None
    return None, None


#: runs of at least this many requests print plain progress lines off a terminal
PLAIN_PROGRESS_MIN_REQUESTS = 10_000


#: string flags whose empty value would otherwise mean "not given" (``--plot ''``: no
#: plot, ``--router ''``: round-robin) and the comma-list axes of a fleet sweep
_NON_EMPTY_FLAGS = ("plot", "router", "time_model", "result_dir", "result_filename",
                    "label", "trace", "model", "address", "efficiency")
_LIST_FLAGS = ("model", "trace", "router")


def check_empty_values(args: argparse.Namespace) -> None:
    """Refuse an empty (or blank) value of a string flag and an empty item of a comma
    list (``--router round-robin,,least-loaded``), naming the flag: an empty value is
    not "not given".  Raises ConfigError."""
    from kvcore.errors import ConfigError

    for name in _NON_EMPTY_FLAGS:
        v = getattr(args, name, None)
        flag = "MODEL" if name == "model" else "--" + name.replace("_", "-")
        if isinstance(v, str) and not v.strip():
            drop = "" if name == "model" else f" (or drop {flag})"
            raise ConfigError(f"{flag} {v!r}: an empty value; give one{drop}",
                              field=name, value=v)
        if name in _LIST_FLAGS and isinstance(v, str) and "," in v and any(
                not item.strip() for item in v.split(",")):
            raise ConfigError(f"{flag} {v!r}: an empty item in the comma list; give "
                              f"values separated by single commas", field=name,
                              value=v)


def run(args: argparse.Namespace) -> int:
    """Entry point of ``kvcore simulate`` (returns the exit status)."""
    from kvcore.errors import NotEnoughMemoryError
    from kvcore.sim.traces import read_trace

    # cheap checks first: nothing below is worth a replay that cannot be saved
    check_empty_values(args)
    if args.plot:
        check_plot_path(args.plot)
    if args.kv_cache_memory is not None:
        budget: int | None = parse_size(args.kv_cache_memory)
    elif args.num_blocks is not None:
        budget = None  # the block count is the user's; no budget to contradict it
    else:
        budget = DEFAULT_KV_CACHE_MEMORY_BYTES
    from kvcore.errors import ConfigError

    is_clocked = clocked(args)
    check_mode_flags(args, is_clocked)
    if getattr(args, "enable_prefix_caching", False):
        if args.no_prefix_caching:
            raise ConfigError("--enable-prefix-caching and --no-prefix-caching (or "
                              "vLLM's --no-enable-prefix-caching): give one "
                              "(enable_prefix_caching is on or off)",
                              field="enable_prefix_caching", value=True)
    elif not args.no_prefix_caching and "," not in str(args.model):
        from kvcore.sim.modes import default_prefix_caching

        # vLLM 0.32's default (config/model.py is_prefix_caching_supported): off for an
        # attention-free model, on otherwise
        args.no_prefix_caching = not default_prefix_caching(args.model)
    if args.trace is None and (args.dataset is None or not is_clocked):
        raise ConfigError("give a workload: --trace FILE (Mooncake JSONL, Azure CSV, "
                          "kvcore JSONL) or --dataset-name random|prefix_repetition|"
                          "burstgpt|sharegpt", field="trace")
    if not is_clocked:  # the clockless replay's defaults
        if args.max_num_seqs is None:
            args.max_num_seqs = 64
        if args.max_num_batched_tokens is None:
            args.max_num_batched_tokens = 8192
        if args.pipeline_parallel_size != 1:
            raise ConfigError("--pp needs the clocked run (--scheduler vllm)",
                              field="pipeline_parallel_size",
                              value=args.pipeline_parallel_size)
    if is_clocked:
        n_req = args.num_prompts if args.dataset in ("random", "burstgpt") else None
        if args.dataset == "prefix_repetition":  # vLLM makes whole groups only
            k = args.prefix_repetition_num_prefixes
            n_req = k * (args.num_prompts // k) or None
        progress_cb, bar = _progress(args, n_req)
        try:
            return run_clocked(args, budget, progress_cb)
        except NotEnoughMemoryError as exc:
            if args.gpu is not None and "min_num_blocks" not in exc.extra:
                raise
            raise _explain_not_enough(exc, args, budget) from exc
        finally:
            if bar is not None:
                bar.stop()
    traces = read_trace(args.trace, args.trace_format)
    total = None
    bar = None
    progress_cb = None
    use_rich = False
    if not args.json and sys.stderr.isatty():
        try:
            import rich.progress  # noqa: F401

            use_rich = True
        except ImportError:
            use_rich = False
    if not args.json:
        n = len(traces)
        total = min(n, args.limit) if args.limit is not None and args.limit >= 0 else n
    if use_rich:
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            TimeElapsedColumn,
            TimeRemainingColumn,
        )

        bar = Progress("[progress.description]{task.description}", BarColumn(),
                       MofNCompleteColumn(), TimeElapsedColumn(), TimeRemainingColumn(),
                       transient=True)
        bar.start()
        task = bar.add_task("simulating", total=total)

        def progress_cb(done: int) -> None:
            bar.update(task, completed=done)
    elif not args.json and total:
        step = max(1, total // 20)
        state = {"next": step}

        def progress_cb(done: int) -> None:
            if done >= state["next"]:
                print(f"  {done}/{total} requests", file=sys.stderr, flush=True)
                state["next"] = done + step
    try:
        try:
            report, res = _replay(args, budget, traces, progress_cb)
        except NotEnoughMemoryError as exc:
            fits = exc.extra.get("estimated_max_model_len")
            # nothing sized by the user: cap max_model_len at what the default budget
            # holds (as the clocked run does) and say so
            if args.max_model_len is not None or args.kv_cache_memory is not None or \
                    args.num_blocks is not None or not fits:
                raise
            args.max_model_len = int(fits)
            report, res = _replay(args, budget, traces, progress_cb)
            cap = (f"max_model_len capped at {int(fits)}: the longest the default 16 "
                   f"GiB KV budget holds (give --max-model-len or --kv-cache-memory to "
                   f"choose)")
            report["note"] = f"{cap}; {report['note']}" if report.get("note") else cap
    except NotEnoughMemoryError as exc:
        raise _explain_not_enough(exc, args, budget) from exc
    finally:
        if bar is not None:
            bar.stop()
    if args.plot:
        _plot(res, args.plot, f"{args.model} on {Path(args.trace).name}")
        report["plot"] = args.plot
    if args.json:
        print(dumps_json(report))
        return 0
    rows = [
        ("requests admitted", f"{report['requests']:,} of {report['trace_requests']:,}"),
        ("prompt tokens", f"{report['prompt_tokens']:,}"),
        ("prefix-hit tokens", f"{report['prefix_hit_tokens']:,}"),
        ("prefix-hit ratio", f"{100 * report['prefix_hit_ratio']:.2f} %"),
    ]
    if "ideal_prefix_hit_ratio" in report:
        rows.append(("ideal (infinite cache, 512-token blocks)",
                     f"{100 * report['ideal_prefix_hit_ratio']:.2f} %"))
    rows += [
        ("peak block usage", f"{100 * report['peak_usage']:.1f} % of "
                             f"{report['num_blocks'] - 1:,} usable blocks"),
        ("rejected", f"{report['rejected']:,}"),
        ("preempted", f"{report['preempted']:,}"),
        ("steps", f"{report['steps']:,}"),
        ("manager calls/s", f"{report['manager_calls_per_s'] or 0:,.0f} "
                            f"({report['manager_calls']:,} calls)"),
        ("wall time", f"{report['wall_seconds']:.1f} s"),
    ]
    if report.get("note"):
        rows.append(("note", report["note"]))
    if args.plot:
        rows.append(("plot", args.plot))
    try:
        from rich.console import Console
        from rich.table import Table

        table = Table(title=f"kvcore simulate {args.model}", show_header=False)
        table.add_column("", style="bold")
        table.add_column("", justify="right")
        for k, v in rows:
            table.add_row(k, v)
        Console().print(table)
    except ImportError:
        width = max(len(k) for k, _ in rows)
        for k, v in rows:
            print(f"{k:<{width}}  {v}")
    return 0


# ---- the clocked run (kvcore.sim.engine) -------------------------------------------------
#: flags that ask for the clocked engine (any of them, or --scheduler vllm)
CLOCK_FLAGS = ("dataset", "request_rate", "burstiness", "max_concurrency", "goodput", "gpu",
               "ramp_up_strategy", "ramp_up_start_rps", "ramp_up_end_rps",
               "percentile_metrics",
               "time_model", "long_prefill_token_threshold", "gpu_memory_utilization",
               "result_dir", "result_filename", "replicas", "router", "event_delay",
               "speculative_config", "spec_acceptance_rate", "spec_draft_cost",
               "enable_chunked_prefill", "efficiency")
#: ConstantTimeModel step time without a GPU step-time model, s
PLACEHOLDER_STEP_S = 0.01
#: flags the clockless replay does not read (an error there, not silently ignored)
REPLAY_IGNORES = ("replicas", "router", "event_delay", "goodput", "max_concurrency",
                  "request_rate", "burstiness", "ramp_up_strategy", "ramp_up_start_rps",
                  "ramp_up_end_rps", "percentile_metrics", "gpu", "gpu_memory_utilization",
                  "time_model", "long_prefill_token_threshold", "result_dir",
                  "result_filename", "backend", "workers", "address",
                  "speculative_config", "spec_acceptance_rate", "spec_draft_cost",
                  "enable_chunked_prefill", "efficiency")


def _float_arg(field: str, *, allow_inf: bool = True, allow_zero: bool = False) -> Any:
    """An argparse ``type=``: a number > 0 (``inf`` allowed if ``allow_inf``, 0 if
    ``allow_zero``)."""
    import argparse

    def convert(text: str) -> float:
        try:
            v = float(text)
        except ValueError:
            v = float("nan")
        if not (v >= 0 if allow_zero else v > 0) or (math.isinf(v) and not allow_inf):
            inf = " or inf" if allow_inf else ""
            raise argparse.ArgumentTypeError(
                f"{field} must be a number {'>=' if allow_zero else '>'} 0{inf}, got "
                f"{text!r}")
        return v

    convert.__name__ = field
    return convert


def speculative_config_arg(text: str) -> Any:
    """An argparse ``type=``: ``--speculative-config JSON``
    (:func:`kvcore.sim.speculative.parse_speculative_config`)."""
    import argparse

    from kvcore.errors import ConfigError
    from kvcore.sim.speculative import parse_speculative_config

    try:
        return parse_speculative_config(text)
    except ConfigError as exc:
        raise argparse.ArgumentTypeError(exc.message) from None


def spec_acceptance_rate_arg(text: str) -> float:
    """An argparse ``type=``: ``--spec-acceptance-rate P``, a probability in [0, 1]."""
    import argparse

    try:
        v = float(text)
    except ValueError:
        v = float("nan")
    if not 0.0 <= v <= 1.0:
        raise argparse.ArgumentTypeError(
            f"spec_acceptance_rate must be a probability in [0, 1] (each draft token "
            f"accepted with it), got {text!r}")
    return v


def speculative_setup(args: argparse.Namespace) -> tuple[Any, Any]:
    """``(SpeculativeSettings, SpecAcceptanceModel)`` of a run, or ``(None, None)``
    without ``--speculative-config``.  The acceptance is vLLM's synthetic rates from the
    config, or ``--spec-acceptance-rate`` (:func:`kvcore.sim.speculative.iid_rates`),
    exactly one of them.  Raises ConfigError naming the flag otherwise."""
    from kvcore.errors import ConfigError
    from kvcore.sim.speculative import SpecAcceptanceModel, iid_rates

    spec = getattr(args, "speculative_config", None)
    p = getattr(args, "spec_acceptance_rate", None)
    if spec is None:
        cost = getattr(args, "spec_draft_cost", None)
        if cost is not None:
            raise ConfigError(f"--spec-draft-cost {cost:g}: the time of "
                              f"--speculative-config's drafter; give --speculative-config "
                              f"too", field="spec_draft_cost", value=cost)
        if p is not None:
            raise ConfigError(f"--spec-acceptance-rate {p:g}: the acceptance of "
                              f"--speculative-config's drafts; give --speculative-config "
                              f"too", field="spec_acceptance_rate", value=p)
        return None, None
    k = spec.num_speculative_tokens
    if spec.synthetic_acceptance_rates is not None:
        if p is not None:
            raise ConfigError(f"--spec-acceptance-rate {p:g}: --speculative-config already "
                              f"sets the acceptance (rejection_sample_method 'synthetic'); "
                              f"give one of them", field="spec_acceptance_rate", value=p)
        rates = spec.synthetic_acceptance_rates
    elif p is None:
        raise ConfigError("--speculative-config needs an acceptance model: "
                          "--spec-acceptance-rate P (each draft accepted with probability "
                          "P), or rejection_sample_method 'synthetic' with "
                          "synthetic_acceptance_rates or synthetic_acceptance_length in "
                          "the config", field="spec_acceptance_rate", value=None)
    else:
        rates = iid_rates(p, k)
    return spec, SpecAcceptanceModel(rates, seed=args.seed)


def speculative_note(spec: Any, draft_cost: float | None = None) -> str:
    """The report's note on a speculative run: what kvcore does not model."""
    parts = [f"speculative decoding ({spec.method}, {spec.num_speculative_tokens} "
             f"drafts): " + (f"the drafter's time is kvcore's --spec-draft-cost term "
                             f"({draft_cost:g} of a decode step a pass)" if draft_cost
                             else "the drafter's own time is not modelled (a free "
                                  "drafter)")]
    if spec.num_lookahead_tokens:
        parts.append("vLLM's prefill lookahead (a chunk never ends inside it) is not "
                     "modelled")
    if spec.method in ("eagle", "eagle3"):
        parts.append("the EAGLE head's own KV-cache layers are not planned")
    if spec.ignored:
        parts.append(f"fields that do not change the schedule, ignored: "
                     f"{', '.join(spec.ignored)}")
    return "; ".join(parts)


def _seconds_arg(text: str) -> float:
    """An argparse ``type=``: a finite number of seconds >= 0 (``--event-delay``)."""
    import argparse

    try:
        v = float(text)
    except ValueError:
        v = float("nan")
    if not 0 <= v < math.inf:
        raise argparse.ArgumentTypeError(
            f"event_delay must be a finite number of seconds >= 0, got {text!r}")
    return v


def _ratio_arg(text: str) -> Any:
    """An argparse ``type=``: vLLM's ``--random-range-ratio`` (a float or a JSON dict
    ``{"input": r, "output": r}``, :func:`kvcore.sim.workload.parse_range_ratio`)."""
    import argparse

    from kvcore.errors import ConfigError
    from kvcore.sim.workload import parse_range_ratio

    try:
        return parse_range_ratio(text)
    except ConfigError as exc:
        raise argparse.ArgumentTypeError(exc.message) from None


#: ``--percentile-metrics`` names (vllm/benchmarks/serve.py:1800-1808); the last two
#: are reported under --max-concurrency only (the client's semaphore wait,
#: :func:`kvcore.sim.metrics.client_queue_metrics`), as vLLM's
PERCENTILE_METRICS = ("ttft", "tpot", "itl", "e2el", "client_queue_time",
                      "e2el_including_client_queue")


def _metrics_arg(text: str) -> list[str]:
    """An argparse ``type=``: ``--percentile-metrics ttft,tpot,itl,e2el`` (vLLM's
    ``selected_percentile_metrics``; a name kvcore does not compute is refused)."""
    import argparse

    out: list[str] = []
    for item in str(text).split(","):
        name = item.strip()
        if name not in PERCENTILE_METRICS:
            raise argparse.ArgumentTypeError(
                f"percentile_metrics: unknown metric {name!r}; valid: "
                f"{', '.join(PERCENTILE_METRICS)} (comma list, e.g. ttft,tpot,itl)")
        if name not in out:
            out.append(name)
    return out


def select_percentile_metrics(fig: dict[str, Any], selected: Sequence[str] | None
                              ) -> dict[str, Any]:
    """``fig`` with only the ``--percentile-metrics`` chosen: vLLM's
    ``process_one_metric`` (benchmarks/serve.py) writes ``mean_/median_/std_/pNN_
    {metric}_ms`` only for the selected metrics, so the others' keys are dropped.
    ``selected`` None keeps all four (kvcore's default; vLLM's is ``ttft,tpot,itl``
    for generative models, but issue 21 asks for ``mean_e2el_ms`` too)."""
    if selected is None:
        return fig
    if isinstance(selected, (str, bytes)) or not isinstance(
            selected, (list, tuple, set, frozenset)) or not all(
            isinstance(m, str) for m in selected):
        from kvcore.errors import ConfigError

        raise ConfigError(f"percentile_metrics must be a list of metric names (of "
                          f"{', '.join(PERCENTILE_METRICS)}), got {selected!r}",
                          field="percentile_metrics", value=repr(selected))
    import re

    pat = re.compile(r"^(mean|median|std|p[0-9.]+)_(ttft|tpot|itl|e2el)_ms$")
    out = {}
    for k, v in fig.items():
        m = pat.match(k)
        if m and m.group(2) not in selected:
            continue
        out[k] = v
    return out


def _ramp_rps_arg(field: str) -> Any:
    """An argparse ``type=``: a ramp-up rate, an integer in ``[0, bound(field)]``
    (vLLM's ``type=int``; a rate too large for a float was an OverflowError)."""
    return _count_arg(field, minimum=0, what="requests per second")


def _goodput_arg(text: str) -> str:
    import argparse

    from kvcore.errors import ConfigError
    from kvcore.sim.metrics import parse_goodput

    try:
        parse_goodput([text])
    except ConfigError as exc:
        raise argparse.ArgumentTypeError(exc.message) from None
    return text


def _percentiles_arg(text: str) -> list[float]:
    import argparse

    out: list[float] = []
    for item in str(text).split(","):
        try:
            v = float(item)
        except ValueError:
            v = float("nan")
        if not 0.0 <= v <= 100.0:
            raise argparse.ArgumentTypeError(
                f"metric_percentiles: each percentile must be a number in [0, 100], got "
                f"{item!r} (e.g. 50,90,99)")
        out.append(v)
    return out


def add_dataset_arguments(g: Any) -> None:
    """The flags of the prefix_repetition, burstgpt and sharegpt datasets (vLLM 0.32's
    names; defaults filled by :func:`kvcore.sim.datasets.check_dataset_flags`)."""
    g.add_argument("--prefix-repetition-prefix-len",
                   type=length_arg("prefix_repetition_prefix_len", minimum=0),
                   default=None, help="prefix_repetition: tokens of each prefix (default "
                                      "256, vLLM's)")
    g.add_argument("--prefix-repetition-suffix-len",
                   type=length_arg("prefix_repetition_suffix_len", minimum=0),
                   default=None, help="prefix_repetition: tokens after the prefix (default "
                                      "256)")
    g.add_argument("--prefix-repetition-num-prefixes",
                   type=_count_arg("prefix_repetition_num_prefixes", what="prefixes"),
                   default=None,
                   help="prefix_repetition: distinct prefixes, num_prompts // N prompts "
                        "each (default 10)")
    g.add_argument("--prefix-repetition-output-len",
                   type=length_arg("prefix_repetition_output_len"), default=None,
                   help="prefix_repetition: output tokens per request (default 128)")
    g.add_argument("--sharegpt-output-len", type=length_arg("sharegpt_output_len"),
                   default=None, help="sharegpt: output tokens per request instead of the "
                                      "completion's")
    g.add_argument("--tokenizer", default=None, metavar="PATH",
                   help="sharegpt: a local folder with the model's tokenizer.json (needs "
                        "transformers or tokenizers; default: the model's folder)")
    g.add_argument("--disable-shuffle", action="store_true", default=None,
                   help="prefix_repetition, sharegpt: keep vLLM's generation / file order "
                        "(any dataset takes it, as vLLM's; random / burstgpt: no-op)")
    g.add_argument("--no-oversample", action="store_true", default=None,
                   help="sharegpt: fewer requests than --num-prompts rather than repeats "
                        "(any dataset takes it, as vLLM's; elsewhere a no-op)")


def add_clock_arguments(p: Any) -> None:
    """The flags of the clocked run (``vllm bench serve``'s names and defaults)."""
    g = p.add_argument_group(
        "clocked simulation (vLLM's Scheduler with a step-time model; figures as vllm "
        "bench serve --save-result names them)")
    g.add_argument("--scheduler", choices=("auto", "vllm", "replay"), default="auto",
                   help="vllm: the clocked loop of vLLM's Scheduler (kvcore.sim.engine); "
                        "replay: the clockless replay; auto (default): vllm when any flag "
                        "of this group is given, else replay")
    from kvcore.sim.datasets import DATASET_NAMES

    g.add_argument("--dataset-name", "--dataset", dest="dataset", choices=DATASET_NAMES,
                   default=None,
                   help="vllm bench serve's dataset instead of --trace (vLLM's "
                        "--dataset-name; --dataset is an alias; kvcore.sim.datasets)")
    g.add_argument("--dataset-path", default=None, metavar="FILE",
                   help="the BurstGPT CSV (burstgpt) or ShareGPT JSON (sharegpt)")
    g.add_argument("--num-prompts", type=_count_arg("num_prompts",
                                                    maximum=MAX_NUM_PROMPTS,
                                                    what="requests"), default=None,
                   help=f"requests of the dataset (default 1000, vLLM's; at most "
                        f"{MAX_NUM_PROMPTS:,}: ~1 h of CPU)")
    g.add_argument("--random-input-len", type=length_arg("random_input_len", minimum=0),
                   default=None, help="default 1024 (vLLM's)")
    g.add_argument("--random-output-len", type=length_arg("random_output_len", minimum=0),
                   default=None, help="default 128 (vLLM's)")
    g.add_argument("--random-prefix-len", type=length_arg("random_prefix_len", minimum=0),
                   default=None, help="tokens of a prefix shared by every prompt (default 0)")
    g.add_argument("--random-range-ratio", type=_ratio_arg, default=None,
                   help="lengths uniform in [len * (1 - r), len * (1 + r)], r in [0, 1); "
                        "a JSON dict like '{\"input\": 0.3, \"output\": 0.5}' sets them "
                        "independently (vLLM's)")
    add_dataset_arguments(g)
    g.add_argument("--request-rate", type=_float_arg("request_rate"), default=None,
                   help="requests per second, Poisson (gamma with --burstiness) arrivals; "
                        "inf: all at t = 0 (default: the trace's timestamps, inf for "
                        "--dataset)")
    g.add_argument("--burstiness", type=_float_arg("burstiness"), default=None,
                   help="gamma shape of the inter-arrival times (default 1: Poisson)")
    g.add_argument("--ramp-up-strategy", choices=("linear", "exponential"), default=None,
                   help="ramp the request rate from --ramp-up-start-rps to "
                        "--ramp-up-end-rps over the requests (vllm bench serve's; "
                        "without --request-rate)")
    g.add_argument("--ramp-up-start-rps", type=_ramp_rps_arg("ramp_up_start_rps"),
                   default=None, help="starting request rate of the ramp-up (RPS)")
    g.add_argument("--ramp-up-end-rps", type=_ramp_rps_arg("ramp_up_end_rps"),
                   default=None, help="ending request rate of the ramp-up (RPS)")
    g.add_argument("--seed", type=_count_arg("seed", minimum=0, maximum=MAX_SEED),
                   default=0, help="seeds the dataset, the arrivals and the acceptance "
                                   "draws (vLLM's; numpy takes [0, 2**32 - 1])")
    g.add_argument("--max-concurrency", type=_count_arg("max_concurrency",
                                                        what="requests"), default=None,
                   help="most outstanding requests (closed loop, vllm bench serve's)")
    g.add_argument("--goodput", nargs="+", type=_goodput_arg, default=None,
                   metavar="KEY:MS", help="SLOs for request_goodput: ttft:MS tpot:MS e2el:MS")
    g.add_argument("--metric-percentiles", type=_percentiles_arg, default=[99.0],
                   metavar="P[,P]", help="percentiles of the --percentile-metrics to "
                                         "report (comma list, default 99, vLLM's)")
    g.add_argument("--percentile-metrics", type=_metrics_arg, default=None,
                   metavar="M[,M]", help="metrics to report (mean, median, std and "
                                         "--metric-percentiles): ttft, tpot, itl, e2el, "
                                         "client_queue_time, e2el_including_client_queue "
                                         "(the last two under --max-concurrency; vLLM's "
                                         "flag; default: ttft, tpot, itl, e2el, vLLM's "
                                         "ttft,tpot,itl plus e2el)")
    g.add_argument("--save-result", action="store_true",
                   help="also write the report to a JSON file named as vllm bench serve "
                        "names it ({label}-{rate}qps[-concurrency{N}]-{model}-{date}.json)")
    g.add_argument("--save-detailed", action="store_true",
                   help="with --save-result: per-request input_lens, output_lens, ttfts, "
                        "itls, start_times, queue_times too")
    g.add_argument("--result-dir", default=None, help="folder for --save-result")
    g.add_argument("--result-filename", default=None, help="file name for --save-result")
    g.add_argument("--label", default="kvcore-simulate",
                   help="the label of --save-result's file name (vLLM's --label)")
    g.add_argument("--long-prefill-token-threshold",
                   type=length_arg("long_prefill_token_threshold", minimum=0), default=None)
    g.add_argument("--enable-chunked-prefill", action=argparse.BooleanOptionalAction,
                   default=None,
                   help="vLLM's flag (default on); --no-enable-chunked-prefill schedules "
                        "whole prompts only, and the default max_num_batched_tokens "
                        "becomes max(max_model_len, the GPU's default), as vLLM 0.32 "
                        "sets it")
    g.add_argument("--gpu", default=None, metavar="NAME",
                   help="plan the KV budget on this GPU (kvcore gpus) and time steps on it")
    g.add_argument("--gpu-memory-utilization", type=_float_arg(
        "gpu_memory_utilization", allow_inf=False), default=None)
    g.add_argument("--pp", "--pipeline-parallel-size", "-pp",
                   type=_count_arg("pipeline_parallel_size", what="stages"), default=1,
                   dest="pipeline_parallel_size",
                   help="pipeline-parallel size (--pipeline-parallel-size / -pp: vLLM's "
                        "spellings)")
    g.add_argument("--efficiency", default=None, metavar="FILE.json",
                   help="the roofline's coefficients from kvcore calibrate --output "
                        "(fitted to your own vllm bench serve runs; needs --gpu); "
                        "default: kvcore's fitted defaults (docs/SIM_ACCURACY.md)")
    g.add_argument("--time-model", default=None, metavar="NAME",
                   help="a step-time model by name (constant, roofline (needs --gpu), or "
                        "one registered under the kvcore.time_models entry points, given "
                        "the run's model, plan, --gpu, --tp, --pp as it takes them); "
                        "default: the roofline with --gpu, else a constant 10 ms a step")
    from kvcore.deploy.sweep import list_of

    g.add_argument("--replicas", type=list_of(_count_arg("replicas",
                                                         maximum=MAX_REPLICAS,
                                                         what="replicas",
                                                         vllm=False)),
                   default=None,
                   help="simulate a fleet of N replicas of the plan behind --router "
                        f"(kvcore.sim.fleet; default 1, at most {MAX_REPLICAS:,}); a comma "
                        "list sweeps")
    g.add_argument("--router", default=None, metavar="NAME",
                   help="round-robin (default), least-loaded, prefix-aware, "
                        "prefix-aware-attention-only, or one registered under the "
                        "kvcore.routers entry points; a comma list sweeps")
    g.add_argument("--backend", choices=["local", "ray", "serial"], default=None,
                   help="where a fleet sweep (a comma list in the model, --trace, "
                        "--replicas or --router) runs its simulations: a local process "
                        "pool (default), Ray, or this process (kvcore.sim.backends)")
    g.add_argument("--workers", type=_count_arg("workers", what="processes", vllm=False),
                   default=None,
                   help="worker processes of a fleet sweep (default: the CPUs)")
    g.add_argument("--address", default=None,
                   help="Ray cluster address for --backend ray (default: a local Ray)")
    g.add_argument("--event-delay", type=_seconds_arg,
                   default=None, metavar="S",
                   help="seconds before a replica's KV events reach the router (default 0)")
    g.add_argument("--speculative-config", "-sc", type=speculative_config_arg,
                   default=None, metavar="JSON",
                   help="speculative decoding as vllm serve takes it, e.g. '{\"method\": "
                        "\"ngram\", \"num_speculative_tokens\": 3}' (methods ngram, "
                        "ngram_gpu, eagle, eagle3, mtp; kvcore.sim.speculative); the "
                        "acceptance comes from rejection_sample_method 'synthetic' "
                        "(synthetic_acceptance_rates / _length) or --spec-acceptance-rate")
    g.add_argument("--spec-acceptance-rate", type=spec_acceptance_rate_arg, default=None,
                   metavar="P",
                   help="kvcore's acceptance model (not a vLLM flag): each draft token is "
                        "accepted with probability P (0..1), independently, seeded by "
                        "--seed; a verification of k drafts yields (1 - P^(k+1)) / (1 - P) "
                        "tokens on average")
    g.add_argument("--spec-draft-cost", type=_float_arg("spec_draft_cost", allow_inf=False,
                                                        allow_zero=True),
                   default=None, metavar="F",
                   help="kvcore's drafter-time term (not a vLLM flag; default 0: a free "
                        "drafter): k drafting passes a step, each F times a decode step of "
                        "the step's decoding requests (kvcore.sim.speculative."
                        "DraftCostTimeModel)")


def check_mode_flags(args: argparse.Namespace, is_clocked: bool) -> None:
    """Refuse flags the chosen mode would ignore, naming the flag: a dataset's flags
    without ``--dataset-name`` naming that dataset, then the dataset's defaults filled
    (vLLM's; :func:`kvcore.sim.datasets.check_dataset_flags`), and the clocked run's
    flags with ``--scheduler replay``.  Raises ConfigError."""
    from kvcore.errors import ConfigError

    def flag(name: str) -> str:
        return "--" + name.replace("_", "-")

    from kvcore.sim.datasets import check_dataset_flags

    check_dataset_flags(args)
    if getattr(args, "limit", None) is not None and getattr(args, "trace", None) is None:
        raise ConfigError(f"--limit {args.limit}: takes the first N requests of --trace; "
                          f"a dataset has --num-prompts", field="limit",
                          value=args.limit)
    if getattr(args, "save_detailed", False) and not getattr(args, "save_result", False):
        raise ConfigError("--save-detailed: adds per-request lists to --save-result's "
                          "file; give --save-result too", field="save_detailed",
                          value=True)
    if getattr(args, "address", None) is not None and \
            getattr(args, "backend", None) != "ray":
        raise ConfigError(f"--address {args.address}: the Ray cluster of --backend ray; "
                          f"give --backend ray too", field="address", value=args.address)
    if not is_clocked:
        for name in REPLAY_IGNORES:
            v = getattr(args, name, None)
            if v is not None:
                v = json.dumps(v.config) if hasattr(v, "config") else v
                raise ConfigError(f"{flag(name)} {v}: the clockless replay (--scheduler "
                                  f"replay) does not use it; drop it or run the clocked "
                                  f"engine (--scheduler vllm)", field=name,
                                  value=str(v))
        for name in ("save_result", "save_detailed"):
            if getattr(args, name, False):
                raise ConfigError(f"{flag(name)}: the clockless replay (--scheduler "
                                  f"replay) has no serving figures to save; run the "
                                  f"clocked engine (--scheduler vllm)", field=name,
                                  value=True)


def clocked(args: argparse.Namespace) -> bool:
    """Whether ``args`` ask for the clocked engine (``--scheduler``, or any clock flag)."""
    if args.scheduler != "auto":
        return bool(args.scheduler == "vllm")
    return bool(getattr(args, "save_result", False)) or any(
        getattr(args, f, None) is not None for f in CLOCK_FLAGS)


def result_path(args: argparse.Namespace, when: Any = None) -> str:
    """``--save-result``'s file: vLLM's ``compute_result_filename`` (``{label}-{rate}qps
    [-concurrency{N}]-{model}-{%Y%m%d-%H%M%S}.json``, ``--result-filename`` instead,
    inside ``--result-dir``).  Raises ConfigError (field ``result_dir``) for a folder
    that exists as a file or cannot be written."""
    import datetime

    from kvcore.errors import ConfigError

    now = when or datetime.datetime.now()
    rate = args.request_rate if args.request_rate is not None else math.inf
    conc = f"-concurrency{args.max_concurrency}" if args.max_concurrency is not None else ""
    model = str(args.model).rstrip("/").split("/")[-1]
    stamp = now.strftime('%Y%m%d-%H%M%S')
    if getattr(args, "ramp_up_strategy", None) is not None:  # serve.py's ramp-up name
        name = args.result_filename or (
            f"{args.label}-ramp-up-{args.ramp_up_strategy}-{args.ramp_up_start_rps}qps-"
            f"{args.ramp_up_end_rps}qps{conc}-{model}-{stamp}.json")
    else:
        name = args.result_filename or f"{args.label}-{rate}qps{conc}-{model}-{stamp}.json"
    folder = Path(args.result_dir) if args.result_dir else Path(name).parent
    if folder.exists() and not folder.is_dir():
        raise ConfigError(f"--result-dir {folder}: is a file, not a folder",
                          field="result_dir", value=str(folder))
    probe = folder
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    if not os.access(probe, os.W_OK):
        raise ConfigError(f"--result-dir {folder}: {str(probe)!r} is not writable",
                          field="result_dir", value=str(folder))
    return str(Path(args.result_dir) / name) if args.result_dir else name


def _save_result(args: argparse.Namespace, path: str, report: dict[str, Any],
                 res: Any) -> None:
    import datetime

    from kvcore.errors import ConfigError

    out = {"date": datetime.datetime.now().strftime("%Y%m%d-%H%M%S"),
           "backend": args.label, "label": args.label, "model_id": str(args.model),
           **report}
    reqs = res.requests
    out["latencies"] = [r.latency if r.finish >= 0 else 0.0 for r in reqs]
    if args.save_detailed:
        out["input_lens"] = [r.prompt_len for r in reqs]
        out["output_lens"] = [len(r.token_times) for r in reqs]
        out["ttfts"] = [r.ttft if r.token_times else 0.0 for r in reqs]
        out["itls"] = [r.itl for r in reqs]
        out["start_times"] = [r.sent for r in reqs]
        # vLLM's "queue_times" (serve.py:1296): start_time - request_arrival_time, the
        # client semaphore's wait under --max-concurrency, else 0.0 (its default)
        out["queue_times"] = [max(0.0, r.sent - r.arrival) if r.sent >= 0 else 0.0
                              for r in reqs]
    try:
        if args.result_dir:
            os.makedirs(args.result_dir, exist_ok=True)
        with open(path, "w", encoding="utf-8") as f:
            f.write(dumps_json(out))
    except OSError as exc:
        raise ConfigError(f"--save-result {path}: cannot write ({exc.strerror or exc})",
                          field="result_dir", value=path) from exc


def vllm_serve_defaults(gpu_memory_bytes: int | None, gpu_name: str = ""
                        ) -> tuple[int, int]:
    """``(max_num_seqs, max_num_batched_tokens)`` vLLM 0.32 ``vllm serve`` picks
    (``EngineArgs._set_default_max_num_seqs_and_batched_tokens_args``, usage context
    OPENAI_API_SERVER): >= 160 GiB: (1024, 16384); >= 70 GiB and not an A100: (1024,
    8192); otherwise (256, 2048)."""
    from kvcore.errors import ConfigError
    from kvcore.units import as_int

    mem_int = None if gpu_memory_bytes is None else as_int(gpu_memory_bytes)  # numpy too
    if gpu_memory_bytes is not None and (mem_int is None or mem_int < 0):
        raise ConfigError(f"gpu_memory_bytes must be an integer >= 0 or None, got "
                          f"{gpu_memory_bytes!r}", field="gpu_memory_bytes",
                          value=repr(gpu_memory_bytes))
    if not isinstance(gpu_name, str):
        raise ConfigError(f"gpu_name must be a string, got {gpu_name!r}",
                          field="gpu_name", value=repr(gpu_name))
    gib = 1 << 30
    mem = mem_int or 0
    if mem >= 160 * gib:
        return 1024, 16384
    if mem >= 70 * gib and "a100" not in gpu_name.lower():
        return 1024, 8192
    return 256, 2048


#: the ``kvcore simulate`` flag that gives each option of a step-time model's factory
_TIME_MODEL_FLAGS = {"model_config": "MODEL", "kv_cache_config": "the plan",
                     "gpu": "--gpu", "tensor_parallel_size": "--tp",
                     "pipeline_parallel_size": "--pp"}


def make_time_model(args: argparse.Namespace, model_config: Any, kv_cache_config: Any
                    ) -> Any:
    """The step-time model of a clocked run.

    The run's context: ``model_config``, ``kv_cache_config``, ``tensor_parallel_size``,
    ``pipeline_parallel_size`` (when not 1) and ``gpu`` (with ``--gpu``).
    ``--time-model NAME``: :func:`kvcore.sim.timing.load_time_model` with the part of
    the context its factory takes by name (all of it when it takes ``**options``); a
    factory that needs what the run lacks (``roofline`` without ``--gpu``) is a
    ConfigError naming the flag.  Without a name, with ``--gpu``: the roofline
    (``roofline_for`` with that context).  Otherwise
    :class:`~kvcore.sim.timing.ConstantTimeModel` of ``PLACEHOLDER_STEP_S`` per step, a
    placeholder: its latencies count steps, not seconds of any GPU
    (:func:`time_model_note` says so in the output).  ``--efficiency FILE``: the
    roofline with :func:`kvcore.sim.calibrate.load_efficiency`'s coefficients (a
    ConfigError without ``--gpu`` or with another ``--time-model``).
    """
    from kvcore.errors import ConfigError
    from kvcore.sim import timing

    ctx: dict[str, Any] = {"model_config": model_config,
                           "kv_cache_config": kv_cache_config,
                           "tensor_parallel_size": args.tensor_parallel_size}
    if getattr(args, "pipeline_parallel_size", 1) != 1:
        ctx["pipeline_parallel_size"] = args.pipeline_parallel_size
    gpu = getattr(args, "gpu", None)
    if gpu:
        ctx["gpu"] = gpu
    name = getattr(args, "time_model", None)
    eff_file = getattr(args, "efficiency", None)
    if eff_file is not None:
        if name not in (None, "roofline") or not gpu:
            raise ConfigError(f"--efficiency {eff_file} sets the roofline model's "
                              "coefficients: give --gpu (and no other --time-model)",
                              field="efficiency", value=eff_file)
        from kvcore.sim.calibrate import load_efficiency, warn_if_other_deployment

        rest = {k: v for k, v in ctx.items() if k not in ("model_config", "kv_cache_config")}
        eff = load_efficiency(eff_file)
        kvd = getattr(args, "kv_cache_dtype", "auto")
        if isinstance(kvd, str) and kvd != "auto":  # the model's name records it
            rest["kv_cache_dtype"] = kvd
        warn_if_other_deployment(eff_file, gpu=gpu,
                                 tensor_parallel_size=args.tensor_parallel_size,
                                 model=str(getattr(args, "model", "") or "") or None)
        return timing.roofline_for(model_config, kv_cache_config, efficiency=eff, **rest)
    if name:
        accepted, required = timing.time_model_options(name)
        lacking = sorted(required - set(ctx))
        if lacking:
            flags = ", ".join(_TIME_MODEL_FLAGS.get(k, k) for k in lacking)
            raise ConfigError(f"--time-model {name} needs {flags} (its "
                              f"{', '.join(lacking)}): the step-time model cannot be "
                              f"built without it", field=lacking[0], value=name)
        opts = ctx if accepted is None else {k: v for k, v in ctx.items() if k in accepted}
        return timing.load_time_model(name, **opts)
    roofline = getattr(timing, "roofline_for", None)
    if gpu and roofline is not None:
        rest = {k: v for k, v in ctx.items() if k not in ("model_config", "kv_cache_config")}
        kvd = getattr(args, "kv_cache_dtype", "auto")
        if isinstance(kvd, str) and kvd != "auto":  # the model's name records it
            rest["kv_cache_dtype"] = kvd
        return roofline(model_config, kv_cache_config, **rest)
    return timing.ConstantTimeModel(step_s=PLACEHOLDER_STEP_S)


def time_model_note(args: argparse.Namespace, model: Any) -> str:
    """One line saying which step-time model timed the run."""
    from kvcore.sim.timing import ConstantTimeModel

    if isinstance(model, ConstantTimeModel) and not getattr(args, "time_model", None):
        why = ("the roofline step-time model for --gpu is not in this kvcore yet"
               if getattr(args, "gpu", None) else "no --gpu given")
        return (f"constant {model.step_s * 1000:g} ms a step + {model.token_s * 1e6:g} us "
                f"a token (placeholder: {why}; latencies count steps, not GPU time)")
    for attr in ("description", "name"):
        text = getattr(model, attr, None)
        if isinstance(text, str) and text:
            return text
    return type(model).__name__


def _model_config(model: Any) -> Any:
    from kvcore.models.config import ModelConfig, load_model_config
    from kvcore.models.hub import resolve_model

    if isinstance(model, ModelConfig):
        return model
    resolved, _ = resolve_model(model)
    return resolved if isinstance(resolved, ModelConfig) else load_model_config(resolved)


def _clocked_requests(args: argparse.Namespace) -> tuple[list[Any], str]:
    """The TraceRequests of a clocked run (arrivals set) and the workload's name."""
    from kvcore.errors import ConfigError
    from kvcore.sim.datasets import dataset_requests
    from kvcore.sim.traces import read_trace
    from kvcore.sim.workload import arrival_times, with_arrivals

    if args.dataset is not None and args.trace is not None:
        raise ConfigError("give --trace FILE or --dataset-name NAME, not both",
                          field="dataset", value=args.dataset)
    if args.dataset is not None:
        reqs, name = dataset_requests(args)
        rate = math.inf if args.request_rate is None else args.request_rate
    else:
        reqs = read_trace(args.trace, args.trace_format)
        if args.limit is not None:
            reqs = reqs[:args.limit]
        name = str(args.trace)
        rate = args.request_rate
    ramp = getattr(args, "ramp_up_strategy", None)
    from kvcore.sim.workload import check_ramp_up

    check_ramp_up(ramp, getattr(args, "ramp_up_start_rps", None),
                  getattr(args, "ramp_up_end_rps", None),
                  math.inf if rate is None else rate)
    if ramp is not None:
        burst = 1.0 if args.burstiness is None else args.burstiness
        reqs = with_arrivals(reqs, arrival_times(
            len(reqs), math.inf, burst, args.seed, ramp_up_strategy=ramp,
            ramp_up_start_rps=args.ramp_up_start_rps, ramp_up_end_rps=args.ramp_up_end_rps))
    elif rate is not None:
        burst = 1.0 if args.burstiness is None else args.burstiness
        reqs = with_arrivals(reqs, arrival_times(len(reqs), rate, burst, args.seed))
    elif args.burstiness is not None:
        raise ConfigError("--burstiness shapes the arrivals of --request-rate; give "
                          "--request-rate too (the trace's own timestamps have no "
                          "burstiness)", field="burstiness", value=args.burstiness)
    elif reqs:  # the trace's timestamps, from its first request
        t0 = reqs[0].arrival_ms
        if t0:
            reqs = [type(r)(**{**r.__dict__, "arrival_ms": r.arrival_ms - t0})
                    for r in reqs]
    return reqs, name


#: a trace spanning longer than this is probably not in milliseconds (fresh tester T1)
TRACE_SPAN_NOTE_MS = 31 * 24 * 3600 * 1000


def trace_span_note(reqs: Any) -> str | None:
    """A note when the requests' arrivals span more than 31 days: trace timestamps are
    read as milliseconds (Mooncake's, Azure's), so a trace in microseconds or
    nanoseconds replays 1,000 or 10**6 times too slowly, its idle gaps included in the
    duration and every throughput.  The run goes on (a long trace is not wrong, an
    earlier finding's rule); None otherwise."""
    times = [float(getattr(r, "arrival_ms", 0.0) or 0.0) for r in reqs]
    if not times:
        return None
    span = max(times) - min(times)
    if span <= TRACE_SPAN_NOTE_MS:
        return None
    return (f"the trace's arrivals span {span / 86_400_000:,.4g} days (timestamps are "
            f"read as milliseconds; a trace in microseconds or nanoseconds is 1,000 or "
            f"10**6 times too slow, and the duration and every throughput hold its idle "
            f"gaps)")


def prefix_repetition_arrivals_note(args: argparse.Namespace) -> str | None:
    """The note of a prefix_repetition run whose send times are gamma draws (a finite
    --request-rate or a ramp-up, finite --burstiness), else None.

    vLLM seeds numpy's global stream with --seed (serve.py:2013), then
    PrefixRepetitionRandomDataset reseeds it and draws every prefix and suffix with
    ``np.random.randint(0, tokenizer.vocab_size, ...)`` plus the re-tokenisation
    top-ups of ``gen_prompt_decode_to_target_len`` (datasets.py:4194-4221, 536), and
    ``get_request``'s ``np.random.gamma`` draws continue that stream.  How far it
    advanced depends on the tokenizer (its vocab_size and how random ids re-encode),
    which kvcore does not run for this dataset, so kvcore draws from a fresh
    ``RandomState(seed)``: the same gamma process (rate, burstiness, rescaled to
    n / rate), another realisation of it."""
    if getattr(args, "dataset", None) != "prefix_repetition":
        return None
    burst = 1.0 if args.burstiness is None else args.burstiness
    gamma = (getattr(args, "ramp_up_strategy", None) is not None
             or (args.request_rate is not None and not math.isinf(args.request_rate)))
    if not gamma or math.isinf(burst):
        return None
    return ("send times: the same gamma process as vLLM's, another draw (vLLM draws "
            "them after prefix_repetition's np.random prompt tokens, which depend on the "
            "tokenizer)")


def simulate_clocked(args: argparse.Namespace, *, budget: int | None,
                     progress: Any = None) -> tuple[dict[str, Any], Any]:
    """Plan (on ``--gpu`` when given), run :func:`kvcore.sim.engine.run_engine` and return
    ``(report, EngineResult)``: the figures of :mod:`kvcore.sim.metrics` plus the run's
    settings (``model``, ``dataset`` or ``trace``, ``num_prompts``, ``request_rate``,
    ``burstiness``, ``max_concurrency``, ``seed``, ``time_model``, the plan:
    ``num_blocks``, ``block_size``, ``max_model_len``, ``max_num_seqs``,
    ``max_num_batched_tokens``, ``tensor_parallel_size``, ``pipeline_parallel_size``,
    ``gpu``)."""
    import kvcore
    from kvcore.errors import ConfigError, NotEnoughMemoryError
    from kvcore.runtime import KVCacheManager
    from kvcore.sim.engine import SimRequest, run_engine
    from kvcore.sim.metrics import client_queue_metrics, parse_goodput, serving_metrics

    goodput = parse_goodput(args.goodput)
    note: str | None = None
    spec, acceptance = speculative_setup(args)
    reqs, workload = _clocked_requests(args)
    if not reqs:
        raise ConfigError("the workload has no requests", field="trace", value=args.trace)
    note = prefix_repetition_arrivals_note(args)
    span = trace_span_note(reqs)
    if span:
        note = f"{note}; {span}" if note else span
    gpu_info = None
    if args.gpu is not None:
        from kvcore.deploy.gpus import get_gpu

        gpu_info = get_gpu(args.gpu, memory_flag=False)
    seqs, tokens = vllm_serve_defaults(gpu_info.memory_bytes if gpu_info else None,
                                       gpu_info.name if gpu_info else "")
    max_num_seqs = args.max_num_seqs or seqs
    mnbt = args.max_num_batched_tokens or tokens
    chunked = getattr(args, "enable_chunked_prefill", None) is not False
    plan_kw: dict[str, Any] = dict(
        max_model_len=args.max_model_len, block_size=args.block_size,
        kv_cache_dtype=args.kv_cache_dtype, tensor_parallel_size=args.tensor_parallel_size,
        pipeline_parallel_size=args.pipeline_parallel_size, max_num_batched_tokens=mnbt,
        enable_prefix_caching=not args.no_prefix_caching)
    if args.num_blocks is not None:
        plan_kw["num_gpu_blocks_override"] = args.num_blocks
    if spec is not None:  # vLLM sizes Mamba's speculative state blocks by k
        from kvcore.sim.speculative import check_model_supports

        check_model_supports(spec, _model_config(args.model), str(args.model))
        plan_kw["num_speculative_tokens"] = spec.num_speculative_tokens
        if spec.include_mtp_layers:
            plan_kw["include_mtp_layers"] = True
    from kvcore.sim.modes import check_vllm_chunked_prefill, mamba_layout, resolve_mamba_cache_mode

    has_mamba = mamba_layout(args.model)[0]
    mamba_mode, mode_note = resolve_mamba_cache_mode(
        getattr(args, "mamba_cache_mode", None), not args.no_prefix_caching, has_mamba)
    check_vllm_chunked_prefill(mamba_mode, chunked)
    if mamba_mode != "none":
        plan_kw["mamba_cache_mode"] = mamba_mode
    if gpu_info is not None:
        from kvcore.deploy.budget import plan_on_gpu

        if args.kv_cache_memory is not None:
            plan_kw["kv_cache_memory_bytes"] = budget
        if args.num_blocks is not None:
            # the block count is the limit asked for: check it alone first, so that a
            # count too small for one request is named as such (not as the GPU's budget)
            kvcore.plan_model(args.model, **{**plan_kw, "kv_cache_memory_bytes": None})
        gkw: dict[str, Any] = {}
        if args.gpu_memory_utilization is not None:
            gkw["gpu_memory_utilization"] = args.gpu_memory_utilization
        cfg = plan_on_gpu(args.model, gpu=args.gpu, max_num_seqs=max_num_seqs, **gkw,
                          **plan_kw)
    else:
        if args.gpu_memory_utilization is not None:
            raise ConfigError("--gpu-memory-utilization needs --gpu NAME",
                              field="gpu_memory_utilization",
                              value=args.gpu_memory_utilization)
        try:
            cfg = kvcore.plan_model(args.model, kv_cache_memory_bytes=budget, **plan_kw)
        except NotEnoughMemoryError as exc:
            fits = exc.extra.get("estimated_max_model_len")
            # nothing sized by the user (no --max-model-len, --kv-cache-memory or
            # --num-blocks): cap max_model_len at what the default budget holds, as
            # --max-model-len auto does, and say so in the report
            if args.max_model_len is not None or args.kv_cache_memory is not None or \
                    args.num_blocks is not None or not fits:
                raise
            plan_kw["max_model_len"] = int(fits)
            cfg = kvcore.plan_model(args.model, kv_cache_memory_bytes=budget, **plan_kw)
            cap_note = (f"max_model_len capped at {int(fits)}: the longest the default "
                        f"16 GiB KV budget holds (give --max-model-len, --kv-cache-memory "
                        f"or --gpu to choose)")
            note = f"{cap_note}; {note}" if note else cap_note
    if cfg.num_blocks is None:
        raise ConfigError("simulate needs a KV-cache budget: pass --kv-cache-memory, "
                          "--num-blocks or --gpu", field="kv_cache_memory")
    # the weights' caveats the GPU plan noted (a quant_method kvcore does not model is
    # counted in the model dtype), as kvcore plan prints them
    for wnote in getattr(getattr(cfg, "stats", None), "notes", None) or ():
        if isinstance(wnote, str) and "quant_method" in wnote:
            note = f"{note}; {wnote}" if note else wnote
    mml = int(cfg.max_model_len or args.max_model_len or 0)
    if not chunked and mnbt < mml:
        if args.max_num_batched_tokens is not None:
            raise ConfigError(f"--max-num-batched-tokens {mnbt} is smaller than "
                              f"max_model_len ({mml}) with --no-enable-chunked-prefill; "
                              "vLLM refuses it: give at least max_model_len, or a smaller "
                              "--max-model-len", field="max_num_batched_tokens",
                              value=mnbt)
        # vLLM 0.32 EngineArgs: the default budget holds a whole max_model_len prompt;
        # planned again with it (vLLM profiles its activations at that budget)
        args = argparse.Namespace(**{**vars(args), "max_num_batched_tokens": mml})
        return simulate_clocked(args, budget=budget, progress=progress)
    use_eagle = bool(spec is not None and spec.use_eagle)
    mgr = KVCacheManager(cfg, max_model_len=mml, enable_caching=not args.no_prefix_caching,
                         max_num_batched_tokens=mnbt, use_eagle=use_eagle)
    spec_kw: dict[str, Any] = {} if spec is None else dict(
        num_speculative_tokens=spec.num_speculative_tokens, spec_acceptance=acceptance,
        num_lookahead_tokens=spec.num_lookahead_tokens)
    time_model = make_time_model(args, _model_config(args.model), cfg)
    if spec is not None and getattr(args, "spec_draft_cost", None):
        from kvcore.sim.speculative import DraftCostTimeModel

        time_model = DraftCostTimeModel(time_model, cfg, spec.num_speculative_tokens,
                                        args.spec_draft_cost)
    sims = [SimRequest(r) for r in reqs]
    from kvcore.sim.engine import check_some_served

    check_some_served(sims, max_model_len=mml)  # every request past max_model_len
    fleet = getattr(args, "replicas", None) is not None or \
        getattr(args, "router", None) is not None
    res: Any
    if fleet:
        from kvcore.sim.fleet import fleet_metrics, run_fleet

        res = run_fleet(cfg, sims, time_model, replicas=args.replicas or 1,
                        router=args.router or "round-robin", max_num_seqs=max_num_seqs,
                        max_num_batched_tokens=mnbt,
                        long_prefill_token_threshold=args.long_prefill_token_threshold
                        or 0, max_model_len=mml, max_concurrency=args.max_concurrency,
                        event_delay_s=args.event_delay or 0.0,
                        enable_caching=not args.no_prefix_caching, progress=progress,
                        manager_kw={"use_eagle": True} if use_eagle else None,
                        engine_kw={**spec_kw, "enable_chunked_prefill": chunked})
        m = fleet_metrics(res, goodput=goodput or None,
                          percentiles=args.metric_percentiles)
    else:
        res = run_engine(mgr, sims, time_model, max_num_seqs=max_num_seqs,
                         max_num_batched_tokens=mnbt,
                         long_prefill_token_threshold=args.long_prefill_token_threshold
                         or 0, max_model_len=mml, max_concurrency=args.max_concurrency,
                         progress=progress, enable_chunked_prefill=chunked, **spec_kw)
        m = serving_metrics(res, goodput=goodput or None,
                            percentiles=args.metric_percentiles)
    check_some_served(res.requests, max_model_len=mml, num_blocks=cfg.num_blocks,
                      block_size=cfg.kv_cache_groups[0].spec.block_size
                      if cfg.kv_cache_groups else None)
    rate = args.request_rate
    if rate is None:
        rate = math.inf if args.dataset else None
    report: dict[str, Any] = {
        "model": str(args.model),
        ("dataset" if args.dataset else "trace"): workload,
        # vLLM writes result_json["num_prompts"] = args.num_prompts (serve.py:2264),
        # the flag's value even where the dataset makes fewer requests
        # (prefix_repetition, sharegpt --no-oversample); a trace: its request count
        "num_prompts": args.num_prompts if args.dataset and args.num_prompts is not None
        else len(reqs),
        "request_rate": "inf" if rate is not None and math.isinf(rate) else rate,
        "burstiness": args.burstiness if args.burstiness is not None else 1.0,
        "max_concurrency": args.max_concurrency,
        "seed": args.seed,
        **select_percentile_metrics(m, getattr(args, "percentile_metrics", None)),
        **client_queue_metrics(res.requests, max_concurrency=args.max_concurrency,
                               request_rate=rate,
                               percentiles=args.metric_percentiles,
                               selected=getattr(args, "percentile_metrics", None)),
        "time_model": time_model_note(args, time_model),
        "gpu": gpu_info.name if gpu_info else None,
        "tensor_parallel_size": args.tensor_parallel_size,
        "pipeline_parallel_size": args.pipeline_parallel_size,
        "num_blocks": cfg.num_blocks,
        "block_size": cfg.kv_cache_groups[0].spec.block_size if cfg.kv_cache_groups else None,
        "num_kv_cache_groups": len(cfg.kv_cache_groups),
        "max_model_len": mml,
        "max_num_seqs": max_num_seqs,
        "max_num_batched_tokens": mnbt,
        "enable_chunked_prefill": chunked,
        "wall_seconds": round(res.wall_seconds, 3),
    }
    if has_mamba:
        report["mamba_cache_mode"] = mamba_mode
    if spec is not None:
        report["speculative_config"] = spec.config
        report["spec_acceptance"] = {
            "source": "synthetic_acceptance_rates" if args.spec_acceptance_rate is None
            else "spec_acceptance_rate",
            "spec_acceptance_rate": args.spec_acceptance_rate,
            "per_position_rates": list(acceptance.rates),
            "expected_acceptance_length": acceptance.expected_acceptance_length,
            "spec_draft_cost": getattr(args, "spec_draft_cost", None) or 0.0}
        report.update(acceptance.figures())
        spec_note = speculative_note(spec, getattr(args, "spec_draft_cost", None))
        note = f"{note}; {spec_note}" if note else spec_note
    if mode_note:
        note = f"{note}; {mode_note}" if note else mode_note
    if getattr(args, "ramp_up_strategy", None) is not None:  # serve.py's result_json keys
        report.update(ramp_up_strategy=args.ramp_up_strategy,
                      ramp_up_start_rps=args.ramp_up_start_rps,
                      ramp_up_end_rps=args.ramp_up_end_rps)
    if note:
        report["note"] = note
    return report, res


def _plot_clocked(res: Any, path: str, title: str) -> None:

    plt = _pyplot()
    fig, axes = plt.subplots(2, 2, figsize=(11, 7))
    t = res.step_end
    ax = axes[0][0]
    ax.plot(t, [100 * u for u in res.step_usage], lw=0.8)
    ax.set_title("KV-cache usage (% of usable blocks)")
    ax.set_xlabel("time (s)")
    ax.set_ylim(0, 100)
    ax = axes[0][1]
    ax.plot(t, res.step_running, lw=0.8, label="running")
    ax.plot(t, res.step_waiting, lw=0.8, label="waiting")
    ax.set_title("requests")
    ax.set_xlabel("time (s)")
    ax.legend(loc="upper right")
    done = [r for r in res.requests if not r.rejected and r.finish >= 0]
    series = (("TTFT", sorted(1000 * r.ttft for r in done)),
              ("TPOT", sorted(1000 * (r.token_times[-1] - r.token_times[0])
                              / (len(r.token_times) - 1)
                              for r in done if len(r.token_times) > 1)))
    for ax, (name, xs) in zip(axes[1], series):
        if xs:
            ax.plot(xs, [(i + 1) / len(xs) for i in range(len(xs))])
        ax.set_title(f"{name} CDF")
        ax.set_xlabel(f"{name} (ms)")
        ax.set_ylim(0, 1)
    fig.suptitle(title)
    fig.tight_layout()
    from kvcore.sim.metrics import save_plot

    save_plot(fig, path)


def run_clocked(args: argparse.Namespace, budget: int | None, progress: Any) -> int:
    """The clocked branch of :func:`run` (prints the report; returns the exit status)."""
    from kvcore.sim.metrics import format_summary

    if is_fleet_sweep(args):
        return run_fleet_sweep(args, budget)
    path = result_path(args) if args.save_result else None  # checked before the run
    report, res = simulate_clocked(args, budget=budget, progress=progress)
    if path is not None:
        _save_result(args, path, report, res)
        report["result_file"] = path
    fleet = "replicas" in report
    if args.plot:
        if fleet:
            from kvcore.sim.fleet import plot_fleet

            plot_fleet(res, args.plot, f"{args.model}: simulated fleet")
        else:
            _plot_clocked(res, args.plot, f"{args.model}: simulated serving")
        report["plot"] = args.plot
    if args.json:
        print(dumps_json(report))
        return 0
    rate = report["request_rate"]
    extra = [("Time model:", report["time_model"]),
             ("KV cache:", f"{report['num_blocks']:,} blocks, "
                           f"{report['num_kv_cache_groups']} groups, block_size "
                           f"{report['block_size']}"),
             ("Wall time (s):", f"{report['wall_seconds']:.2f}")]
    if fleet:
        extra[2:2] = [
            ("Fleet:", f"{report['replicas']} replicas, router {report['router']}, "
                       f"event delay {report['event_delay_s']:g} s"),
            ("Requests per replica:", " ".join(map(str, report["requests_per_replica"]))),
            ("Imbalance (max/mean):", f"requests {report['request_imbalance']:.2f}, busy "
                                      f"time {report['busy_imbalance']:.2f}")]
    if report.get("note"):
        extra.append(("Note:", report["note"]))
    if args.plot:
        extra.append(("Plot:", args.plot))
    if path is not None:
        extra.append(("Result file:", path))
    print(format_summary(report, max_concurrency=args.max_concurrency,
                         request_rate=math.inf if rate in (None, "inf") else float(rate),
                         extra=extra))
    return 0


# ---- fleet sweeps (kvcore.sim.backends) ---------------------------------------------------
#: a sweep row's figures (the table's columns, in order)
SWEEP_FIGURES = ("prefix_hit_ratio", "router_predicted_hit_ratio", "mean_ttft_ms",
                 "p99_ttft_ms", "mean_tpot_ms", "output_throughput", "duration",
                 "busy_imbalance", "preemptions", "completed", "failed")


def _axis(value: Any) -> list[Any]:
    if value is None:
        return [None]
    if isinstance(value, list):
        return value
    if isinstance(value, str):
        return [v for v in value.split(",")]
    return [value]


def is_fleet_sweep(args: argparse.Namespace) -> bool:
    """Whether ``args`` ask for several fleets: a comma list in the model, ``--trace``,
    ``--replicas`` or ``--router`` (or ``--backend`` given)."""
    return getattr(args, "backend", None) is not None or any(
        len(_axis(getattr(args, f, None))) > 1 for f in ("model", "trace", "replicas",
                                                          "router"))


def fleet_sweep_tasks(args: argparse.Namespace, budget: int | None
                      ) -> list[dict[str, Any]]:
    """One task per (model, trace, replicas, router), in that nesting order: the
    namespace's fields with the axes set to one value each."""
    base = {k: v for k, v in vars(args).items()
            if k not in ("model", "trace", "replicas", "router")}
    tasks = []
    for model in _axis(args.model):
        for trace in _axis(args.trace):
            for n in _axis(args.replicas):
                for router in _axis(args.router):
                    tasks.append({**base, "model": model, "trace": trace,
                                  "replicas": n or 1, "router": router or "round-robin",
                                  "_budget": budget})
    return tasks


def simulate_fleet_task(task: dict[str, Any]) -> dict[str, Any]:
    """One fleet of a sweep (a module-level function: pools and Ray pickle it by name):
    the report of :func:`simulate_clocked` without its wall time and per-step series,
    so every backend gives the same row."""
    import argparse as _ap

    t = dict(task)
    budget = t.pop("_budget")
    args = _ap.Namespace(**t)
    args.json = True
    args.plot = None
    args.save_result = False
    report, _ = simulate_clocked(args, budget=budget, progress=None)
    for k in ("wall_seconds", "kv_usage", "per_replica"):
        report.pop(k, None)
    return report


def _cell(row: dict[str, Any], key: str, fmt: str) -> str:
    """A sweep table cell: "-" for a figure --percentile-metrics left out."""
    v = row.get(key)
    return "-" if v is None else format(v, fmt)


def run_fleet_sweep(args: argparse.Namespace, budget: int | None) -> int:
    """Run :func:`fleet_sweep_tasks` on ``--backend`` (default local) and print one
    table (``--json``: ``{"sweep": [rows]}``, each row a fleet's report)."""
    from kvcore.errors import ConfigError
    from kvcore.sim.backends import run_tasks

    if args.plot or args.save_result:
        raise ConfigError("--plot and --save-result draw or save one run; a fleet sweep "
                          "prints a table (use --json for its rows)",
                          field="plot" if args.plot else "save_result",
                          value=args.plot or True)
    tasks = fleet_sweep_tasks(args, budget)
    rows = run_tasks(simulate_fleet_task, tasks, backend=args.backend or "local",
                     workers=args.workers, address=args.address,
                     label="simulating fleets")
    if args.json:
        print(dumps_json({"sweep": rows}))
        return 0
    head = ["model", "trace", "replicas", "router", "hit %", "pred hit %", "TTFT ms",
            "p99 TTFT", "TPOT ms", "out tok/s", "dur s", "busy max/mean", "preempt",
            "done", "failed"]
    body = []
    for task, r in zip(tasks, rows):
        pred = r.get("router_predicted_hit_ratio")
        body.append([str(task["model"]), os.path.basename(str(task["trace"]))
                     if task["trace"] else str(task.get("dataset") or "-"),
                     str(r["replicas"]), str(r["router"]),
                     f"{100 * r['prefix_hit_ratio']:.1f}",
                     "" if pred is None else f"{100 * pred:.1f}",
                     _cell(r, "mean_ttft_ms", ".1f"), _cell(r, "p99_ttft_ms", ".1f"),
                     _cell(r, "mean_tpot_ms", ".2f"), f"{r['output_throughput']:.0f}",
                     f"{r['duration']:.1f}", f"{r['busy_imbalance']:.2f}",
                     str(r["preemptions"]), str(r["completed"]), str(r["failed"])])
    widths = [max(len(h), *(len(b[i]) for b in body)) for i, h in enumerate(head)]
    print("  ".join(h.ljust(w) for h, w in zip(head, widths)))
    for b in body:
        print("  ".join(c.ljust(w) if i < 4 else c.rjust(w)
                        for i, (c, w) in enumerate(zip(b, widths))))
    return 0
