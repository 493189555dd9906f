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

from kvcore.sim.traces import TRACE_FORMATS
from kvcore.units import length_arg, parse_size

__all__ = ["add_subparser", "run", "simulate", "DEFAULT_KV_CACHE_MEMORY_BYTES"]

#: budget per rank when neither --kv-cache-memory nor --num-blocks is given (16 GiB)
DEFAULT_KV_CACHE_MEMORY_BYTES = 16 << 30


def add_subparser(subparsers: Any) -> argparse.ArgumentParser:
    """Add the ``simulate`` command to a ``kvcore`` argparse subparsers object."""
    p = subparsers.add_parser(
        "simulate", help="replay a request trace against a model's KV cache",
        description=__doc__.split("\n\n")[0])
    p.add_argument("model", help="config.json path, folder, or embedded name")
    p.add_argument("--trace", required=True,
                   help="Mooncake JSONL, Azure LLM inference CSV or kvcore JSONL")
    p.add_argument("--trace-format", default="auto", choices=list(TRACE_FORMATS))
    p.add_argument("--kv-cache-memory", default=None,
                   help="KV-cache budget per rank (default 16GiB unless --num-blocks is "
                        "given; 20GiB, 20GB, bytes)")
    p.add_argument("--num-blocks", type=length_arg("num_blocks", minimum=2), default=None,
                   help="use this many blocks, counting the null block, instead of the "
                        "budget's (the planner's num_gpu_blocks_override)")
    p.add_argument("--max-model-len", type=length_arg("max_model_len"), default=None,
                   help="tokens per request, with vLLM's suffixes (128K = 131,072; "
                        "default: the config's maximum); longer requests are rejected")
    p.add_argument("--block-size", type=length_arg("block_size"), default=None)
    p.add_argument("--kv-cache-dtype", default="auto")
    p.add_argument("--tp", type=length_arg("tensor_parallel_size"), default=1,
                   dest="tensor_parallel_size")
    p.add_argument("--max-num-seqs", type=length_arg("max_num_seqs"), default=64,
                   help="most requests running at once (default 64)")
    p.add_argument("--max-num-batched-tokens", type=length_arg("max_num_batched_tokens"),
                   default=8192)
    p.add_argument("--no-prefix-caching", action="store_true")
    p.add_argument("--limit", type=length_arg("limit", minimum=0), default=None,
                   help="replay the first N requests")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument("--plot", default=None, metavar="FILE.png",
                   help="plot block usage and prefix-hit ratio over the replay "
                        "(needs matplotlib: pip install 'kvcore[plot]')")
    p.set_defaults(func=run)
    return p


def simulate(model: Any, trace: str, *, kv_cache_memory_bytes: int | None = None,
             num_blocks: int | None = None, max_model_len: int | None = None,
             block_size: int | None = None, kv_cache_dtype: str = "auto",
             tensor_parallel_size: int = 1, max_num_seqs: int = 64,
             max_num_batched_tokens: int = 8192, enable_prefix_caching: bool = True,
             trace_format: str = "auto", limit: int | None = None,
             progress: Any = None, sample_every: int | None = None,
             requests: Sequence[Any] | None = None,
             ) -> tuple[dict[str, Any], Any]:
    """Plan, replay, and return ``(report dict, ReplayResult)`` (see the module
    docstring for the fields).

    ``num_blocks`` is passed to the planner as ``num_gpu_blocks_override`` (blocks,
    counting the null block).  ``requests`` (already read :class:`TraceRequest` objects)
    skips reading ``trace`` again.  Raises ConfigError (bad option or trace, naming the
    field) and the planner's errors (NotEnoughMemoryError, ...).
    """
    import kvcore
    from kvcore.errors import ConfigError
    from kvcore.runtime import KVCacheManager
    from kvcore.sim.replay import Job, replay
    from kvcore.sim.traces import mooncake_ideal_hit_ratio, read_trace

    for name, value, low in (("max_num_seqs", max_num_seqs, 1), ("limit", limit, 0),
                             ("num_blocks", num_blocks, 2)):
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
    res = replay(mgr, jobs, max_running=max_num_seqs, time_calls=True, progress=progress,
                 sample_every=sample_every)
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
    from kvcore.errors import ConfigError

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
    try:
        fig.savefig(path, dpi=100)
    except (OSError, ValueError) as exc:
        raise ConfigError(f"--plot {path}: cannot write the plot ({exc})", field="plot",
                          value=path) from exc
    finally:
        plt.close(fig)


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
        msg = (f"--num-blocks {args.num_blocks} (counting the null block) is too few for "
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


def run(args: argparse.Namespace) -> int:
    """Entry point of ``kvcore simulate`` (returns the exit status)."""
    from kvcore.errors import NotEnoughMemoryError
    from kvcore.sim.traces import read_trace

    # cheap checks first: nothing below is worth a replay that cannot be saved
    if args.plot:
        check_plot_path(args.plot)
    if args.kv_cache_memory is not None:
        budget: int | None = parse_size(args.kv_cache_memory)
    elif args.num_blocks is not None:
        budget = None  # the block count is the user's; no budget to contradict it
    else:
        budget = DEFAULT_KV_CACHE_MEMORY_BYTES
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
        report, res = simulate(
            args.model, args.trace, kv_cache_memory_bytes=budget,
            num_blocks=args.num_blocks, max_model_len=args.max_model_len,
            block_size=args.block_size, kv_cache_dtype=args.kv_cache_dtype,
            tensor_parallel_size=args.tensor_parallel_size, max_num_seqs=args.max_num_seqs,
            max_num_batched_tokens=args.max_num_batched_tokens,
            enable_prefix_caching=not args.no_prefix_caching,
            trace_format=args.trace_format, limit=args.limit, progress=progress_cb,
            requests=traces)
    except NotEnoughMemoryError as exc:
        raise _explain_not_enough(exc, args, budget) from exc
    finally:
        if bar is not None:
            bar.stop()
    if args.plot:
        _plot(res, args.plot, f"{args.model} on {Path(args.trace).name}")
        report["plot"] = args.plot
    if args.json:
        print(json.dumps(report))
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
