"""Side-by-side plans: every combination of GPUs, TP / PP sizes, KV dtypes, lengths and
utilizations (``kvcore plan MODEL --tp 1,2,4,8 --kv-cache-dtype auto,fp8 ...``;
``kvcore.sweep(...)`` in Python).

Lengths take vLLM's suffixes (:func:`kvcore.units.parse_length`: ``k`` = 1,000,
``K`` = 1,024, ``m`` / ``M`` likewise, so ``128K`` is 131,072).  A comma list in
``--kv-cache-memory`` keeps its meaning (one budget per pipeline stage), so it is not a
sweep axis.  A row that does not FIT (:class:`~kvcore.errors.NotEnoughMemoryError`)
says so (``fits`` False, ``error``) and the sweep goes on; an invalid value (an unknown
dtype or GPU, a TP size that does not divide the heads, a malformed axis) is an error
of the whole sweep (the CLI exits 2).  Output: a table (:func:`print_table`), CSV (:func:`write_csv`), JSON (a list of
plans, :func:`rows_to_json`) and a PNG of max concurrency against context length, one
line per option set (:func:`plot`, needs ``kvcore[plot]``).  A rich progress bar appears
on a terminal when a sweep runs longer than a second.
"""

from __future__ import annotations

import csv
import itertools
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from kvcore.errors import ConfigError, KVCoreError, NotEnoughMemoryError
from kvcore.userfiles import dumps_json

__all__ = ["sweep", "SWEEP_AXES", "ROW_COLUMNS", "list_of"]

#: sweep axes: (Python keyword, CLI flag)
SWEEP_AXES = (("gpu", "--gpu"), ("gpu_memory_bytes", "--gpu-memory"),
              ("gpu_memory_utilization", "--gpu-memory-utilization"),
              ("tensor_parallel_size", "--tp"), ("pipeline_parallel_size", "--pp"),
              ("kv_cache_dtype", "--kv-cache-dtype"), ("max_model_len", "--max-model-len"))

#: the figures of a row, after the option columns
ROW_COLUMNS = ("weights_bytes", "kv_cache_memory_bytes", "num_blocks", "max_concurrency",
               "longest_max_model_len", "fits")


def _as_list(value: Any, name: str) -> list[Any]:
    """One axis: a value, or a non-empty ordered sequence of values (list, tuple,
    range, a 1-d numpy array; raises ConfigError)."""
    if not isinstance(value, (list, tuple, str, bytes)) and getattr(value, "ndim", 1) == 1 \
            and hasattr(value, "__len__") and hasattr(value, "__getitem__") \
            and not isinstance(value, (set, frozenset, dict)):
        value = list(value.tolist() if hasattr(value, "tolist") else value)
    if isinstance(value, (list, tuple)):
        if not value:
            raise ConfigError(f"sweep: {name} is an empty list; give a value or a "
                              f"non-empty list of values", field=name, value="[]")
        return list(value)
    if isinstance(value, (set, frozenset, dict)):
        raise ConfigError(f"sweep: {name} must be a value or a list of values (ordered), "
                          f"got a {type(value).__name__}", field=name, value=repr(value))
    return [value]


def _check_count(value: Any, name: str, *, optional: bool = False) -> None:
    if optional and value is None:
        return
    from kvcore.units import as_int

    number = as_int(value)  # numpy integers too; bool refused
    if number is None or number < 1:
        raise ConfigError(f"sweep: {name} must be a positive int (or a list of them), got "
                          f"{value!r}", field=name, value=repr(value))


def _plan_keywords() -> set[str]:
    """The keywords a sweep passes on to every plan (plan_model's, plan(), the budget's)."""
    import inspect

    from kvcore.models.planner import plan_model
    from kvcore.planning import SPECS_FILE_OPTIONS

    keys = {k for k in inspect.signature(plan_model).parameters if k not in ("model",)}
    keys.discard("plan_options")
    return (keys | set(SPECS_FILE_OPTIONS) | set(_BUDGET_ONLY) | set(_gpu_only())) - \
        {k for k, _ in SWEEP_AXES}


def sweep(model: Any, *, gpu: Any = None, gpu_memory_bytes: Any = None,
          gpu_memory_utilization: Any = 0.9, tensor_parallel_size: Any = 1,
          pipeline_parallel_size: Any = 1, kv_cache_dtype: Any = "auto",
          max_model_len: Any = None, progress: bool | None = None,
          on_row: Callable[[dict[str, Any]], None] | None = None,
          **plan_kwargs: Any) -> list[dict[str, Any]]:
    """Plan every combination of the list-valued options; returns one row per plan.

    Each axis takes a value or a list: ``gpu`` (catalog names), ``gpu_memory_bytes``,
    ``gpu_memory_utilization``, ``tensor_parallel_size``, ``pipeline_parallel_size``,
    ``kv_cache_dtype``, ``max_model_len`` (ints or vLLM-style strings such as ``"128K"``).
    Other keywords go to every plan (``kv_cache_memory_bytes``, ``overhead_bytes``,
    ``data_parallel_size``, ``enable_expert_parallel``, ``block_size``, ...).

    Each row is a dict: the option values, ``weights_bytes`` (per rank; None without a
    GPU), ``kv_cache_memory_bytes``, ``num_blocks``, ``max_concurrency``,
    ``longest_max_model_len``, ``fits`` (None when neither a GPU nor a budget is given),
    ``min_tensor_parallel_size_that_fits`` and ``error`` (the message of a row that does
    not plan), plus ``plan`` (the :class:`~kvcore.kv_cache_config.KVCacheConfig`, or
    None).  Raises ConfigError for a malformed option (before planning anything).
    """
    from kvcore.units import parse_length

    if model is None or (isinstance(model, str) and not model.strip()):
        raise ConfigError("sweep: model is required (an embedded name, a config.json path "
                          "or a HuggingFace id)", field="model", value=repr(model))
    if on_row is not None and not callable(on_row):
        raise ConfigError(f"sweep: on_row must be a function on_row(row) or None, got "
                          f"{type(on_row).__name__}", field="on_row",
                          value=type(on_row).__name__)
    unknown = sorted(set(plan_kwargs) - _plan_keywords())
    if unknown:
        raise ConfigError(f"sweep: unknown keyword {unknown[0]!r}; valid: "
                          f"{', '.join(k for k, _ in SWEEP_AXES)}, "
                          f"{', '.join(sorted(_plan_keywords()))}", field=unknown[0])
    lengths = [None if v is None else parse_length(v, "max_model_len", allow_auto=True)
               for v in _as_list(max_model_len, "max_model_len")]
    axes = {"gpu": _as_list(gpu, "gpu"),
            "gpu_memory_bytes": _as_list(gpu_memory_bytes, "gpu_memory_bytes"),
            "gpu_memory_utilization": _as_list(gpu_memory_utilization,
                                               "gpu_memory_utilization"),
            "tensor_parallel_size": _as_list(tensor_parallel_size, "tensor_parallel_size"),
            "pipeline_parallel_size": _as_list(pipeline_parallel_size,
                                               "pipeline_parallel_size"),
            "kv_cache_dtype": _as_list(kv_cache_dtype, "kv_cache_dtype"),
            "max_model_len": lengths}
    from kvcore.units import plain_int, plain_ints

    # numpy integers as the equal plain int, once here (rows then carry plain ints)
    axes = {k: [plain_int(v) for v in vs] for k, vs in axes.items()}
    plan_kwargs = plain_ints(plan_kwargs)
    for key in ("tensor_parallel_size", "pipeline_parallel_size"):
        for v in axes[key]:
            _check_count(v, key)
    for v in axes["gpu_memory_bytes"]:
        _check_count(v, "gpu_memory_bytes", optional=True)
    from kvcore.deploy.budget import check_kv_cache_dtype

    for v in axes["kv_cache_dtype"]:
        if not isinstance(v, str) or not v:
            raise ConfigError(f"sweep: kv_cache_dtype must be a dtype name (or a list of "
                              f"them), got {v!r}", field="kv_cache_dtype", value=repr(v))
        check_kv_cache_dtype(v)  # an unknown dtype fails the sweep, not a row
    gpus = [g for g in axes["gpu"] if g is not None]
    memories = [m for m in axes["gpu_memory_bytes"] if m is not None]
    if gpus and memories:
        raise ConfigError("sweep: give gpu (a catalog name) or gpu_memory_bytes (memory per "
                          "GPU), not both", field="gpu_memory_bytes")
    if gpus or memories:
        from kvcore.deploy.budget import _check_utilization
        from kvcore.deploy.gpus import get_gpu

        for g in gpus:
            get_gpu(g)  # fail before planning anything
        for u in axes["gpu_memory_utilization"]:
            _check_utilization(u)
    else:
        gpu_only = _gpu_only()
        given = [k for k in gpu_only if k in plan_kwargs and not _is_default(
            plan_kwargs[k], gpu_only[k])]
        if given or axes["gpu_memory_utilization"] not in ([0.9], [None]):
            name = given[0] if given else "gpu_memory_utilization"
            raise ConfigError(f"sweep: {name} needs a GPU: give gpu (a catalog name, see "
                              f"kvcore gpus) or gpu_memory_bytes", field=name)
        axes["gpu_memory_utilization"] = [None]
    combos = list(itertools.product(*axes.values()))
    rows: list[dict[str, Any]] = []
    start = time.monotonic()
    bar = None
    try:
        for i, values in enumerate(combos):
            opts = dict(zip(axes, values))
            rows.append(_row(model, opts, plan_kwargs))
            if on_row:
                try:
                    on_row(rows[-1])
                except KVCoreError:
                    raise
                except (Exception, SystemExit) as e:  # a user's callback: named
                    from kvcore.units import shorten

                    name = getattr(on_row, "__name__", type(on_row).__name__)
                    raise ConfigError(f"sweep: on_row {name!r} raised {type(e).__name__} "
                                      f"on row {i + 1} of {len(combos)}: "
                                      f"{shorten(str(e))}", field="on_row",
                                      value=name) from e
            if bar is None and _want_progress(progress) and time.monotonic() - start > 1 \
                    and i + 1 < len(combos):
                bar = _Progress(len(combos), i + 1)
            elif bar is not None:
                bar.advance()
    finally:
        if bar is not None:
            bar.close()
    return rows


def _want_progress(progress: bool | None) -> bool:
    if progress is not None:
        return progress
    return bool(getattr(sys.stderr, "isatty", lambda: False)())


class _Progress:
    def __init__(self, total: int, done: int) -> None:
        try:
            from rich.progress import Progress
        except ImportError:
            self.p: Any = None
            return
        from rich.console import Console

        self.p = Progress(console=Console(stderr=True), transient=True)
        self.p.start()
        self.task = self.p.add_task("planning", total=total, completed=done)

    def advance(self) -> None:
        if self.p is not None:
            self.p.advance(self.task)

    def close(self) -> None:
        if self.p is not None:
            self.p.stop()


def _row(model: Any, opts: dict[str, Any], plan_kwargs: dict[str, Any]) -> dict[str, Any]:
    from kvcore.deploy.budget import plan_on_gpu
    from kvcore.models.planner import plan_model

    row: dict[str, Any] = {"model": str(getattr(model, "name", "") or model), **opts}
    if opts["gpu"] is not None:
        from kvcore.deploy.gpus import get_gpu

        entry = get_gpu(opts["gpu"])
        row["gpu"] = entry.name  # the catalog name
        row["gpu_memory_bytes"] = entry.memory_bytes
    kwargs = dict(plan_kwargs, tensor_parallel_size=opts["tensor_parallel_size"],
                  pipeline_parallel_size=opts["pipeline_parallel_size"],
                  kv_cache_dtype=opts["kv_cache_dtype"] or "auto",
                  max_model_len=opts["max_model_len"])
    on_gpu = opts["gpu"] is not None or opts["gpu_memory_bytes"] is not None
    row.update({k: None for k in ROW_COLUMNS})
    row.update(min_tensor_parallel_size_that_fits=None, overhead_bytes=None, error=None,
               plan=None)
    try:
        if on_gpu:
            config = plan_on_gpu(model, gpu=opts["gpu"],
                                 gpu_memory_bytes=opts["gpu_memory_bytes"],
                                 gpu_memory_utilization=opts["gpu_memory_utilization"],
                                 **kwargs)
        else:
            gpu_only = _gpu_only()
            config = plan_model(model, **{k: v for k, v in kwargs.items()
                                          if k not in _BUDGET_ONLY and k not in gpu_only})
    except NotEnoughMemoryError as exc:  # a row that does not fit; invalid input raises
        row["fits"] = False
        row["error"] = exc.message
        if row["max_model_len"] is None:  # the config's default length, as a plan shows
            from kvcore.deploy.budget import _config
            from kvcore.models.planner import default_max_model_len

            row["max_model_len"] = default_max_model_len(_config(model))
        row["error_type"] = type(exc).__name__
        for key in ("weights_bytes", "min_tensor_parallel_size_that_fits",
                    "overhead_bytes", "reason"):
            if key in exc.extra:
                row[key] = exc.extra[key]
        return row
    s = config.stats
    row.update(weights_bytes=s.get("weights_bytes"),
               kv_cache_memory_bytes=s.get("kv_cache_memory_bytes"),
               num_blocks=config.num_blocks, max_concurrency=s.get("max_concurrency"),
               longest_max_model_len=s.get("longest_max_model_len"),
               fits=s.get("fits", True if config.num_blocks is not None else None),
               min_tensor_parallel_size_that_fits=s.get(
                   "min_tensor_parallel_size_that_fits"),
               overhead_bytes=s.get("overhead_bytes"), plan=config)
    if opts["max_model_len"] is None:
        row["max_model_len"] = config.max_model_len
    return row


def _gpu_only() -> dict[str, Any]:
    """Keywords that only mean something on a GPU, with their defaults: those of
    :func:`kvcore.deploy.budget.plan_on_gpu` that the planner's ``plan_model`` lacks (read
    from the signatures, so a new GPU option cannot be missed here)."""
    import inspect

    from kvcore.deploy.budget import plan_on_gpu
    from kvcore.models.planner import plan_model

    planner = inspect.signature(plan_model).parameters
    return {k: p.default for k, p in inspect.signature(plan_on_gpu).parameters.items()
            if k not in planner and p.kind is p.KEYWORD_ONLY
            and k not in ("raise_if_not_fits", "gpu_memory_utilization")}


def _is_default(value: Any, default: Any) -> bool:
    return value is default or (type(value) is type(default) and value == default)


#: keywords of the GPU budget only (not the planner's)
_BUDGET_ONLY = ("gpu", "gpu_memory_bytes", "gpu_memory_utilization")


# ---- output ------------------------------------------------------------------------------

def _varying(rows: Sequence[dict[str, Any]]) -> list[str]:
    keys = [k for k, _ in SWEEP_AXES]
    out = [k for k in keys if len({repr(r.get(k)) for r in rows}) > 1]
    if "gpu" in out and all(r.get("gpu") is not None for r in rows):
        out = [k for k in out if k != "gpu_memory_bytes"]  # the catalog's, per GPU
    return out or ["tensor_parallel_size"]


_HEAD = {"gpu": "GPU", "gpu_memory_bytes": "GPU memory", "gpu_memory_utilization": "util",
         "tensor_parallel_size": "TP", "pipeline_parallel_size": "PP",
         "kv_cache_dtype": "KV dtype", "max_model_len": "max_model_len",
         "weights_bytes": "weights/rank", "kv_cache_memory_bytes": "KV budget/rank",
         "num_blocks": "blocks", "max_concurrency": "max concurrency",
         "longest_max_model_len": "longest context", "fits": "fits?"}


def _cell(key: str, value: Any) -> str:
    from kvcore.planning import format_bytes

    if value is None:
        return "-"
    if key == "max_model_len" and value == -1:
        return "auto"
    if key in ("weights_bytes", "kv_cache_memory_bytes", "gpu_memory_bytes"):
        if isinstance(value, list):
            return "/".join(format_bytes(v) for v in value)
        return format_bytes(value)
    if key == "max_concurrency":
        return f"{value:.2f}"
    if key == "fits":
        return "yes" if value else "NO"
    if isinstance(value, int):
        return f"{value:,}"
    return str(value)


def table_rows(rows: Sequence[dict[str, Any]]) -> tuple[list[str], list[list[str]]]:
    """``(headers, cells)`` of the table: the options that vary, then the figures."""
    keys = _varying(rows) + list(ROW_COLUMNS)
    return [_HEAD[k] for k in keys], [[_cell(k, r.get(k)) for k in keys] for r in rows]


def print_wide_table(title: str, headers: Sequence[str], cells: Sequence[Sequence[str]], *,
                     left: Any = (), file: Any = None) -> None:
    """A table that never cuts a figure or a name: a rich table whose columns are as wide
    as their longest cell (headers included, no wrapping) when it fits the terminal;
    otherwise (or without rich) a stacked layout, one block per row with one
    ``header  value`` line per column.  ``left``: indices of left-justified columns
    (the rest are right-justified figures).  A file or pipe gets the full-width table."""
    out = file or sys.stdout
    cells = [[str(c) for c in row] for row in cells]
    widths = [max([len(h)] + [len(row[i]) for row in cells]) for i, h in enumerate(headers)]
    need = sum(w + 3 for w in widths) + 1
    console: Any = None
    try:
        from rich.console import Console
        from rich.table import Table
    except ImportError:
        pass
    else:
        console = Console(file=out, highlight=False)
        if not console.is_terminal:  # a file or pipe: full width
            console = Console(file=out, highlight=False, width=max(need, 80))
    if console is not None and need <= console.width:
        table = Table(title=title or None, title_justify="left")
        for i, h in enumerate(headers):
            table.add_column(h, justify="left" if i in left else "right", no_wrap=True,
                             min_width=widths[i])
        for row in cells:
            table.add_row(*row)
        console.print(table)
        return
    if title:
        print(title, file=out)
    key_width = max(len(h) for h in headers) if headers else 0
    for n, row in enumerate(cells, 1):
        print(f"[{n}]", file=out)
        for h, c in zip(headers, row):
            print(f"  {h.ljust(key_width)}  {c}", file=out)


def print_table(rows: Sequence[dict[str, Any]], title: str = "", file: Any = None) -> None:
    """One table of the rows (:func:`print_wide_table`: nothing cut or wrapped; stacked
    when too wide for the terminal).  Rows that do not fit are listed with their reason
    under the table."""
    headers, cells = table_rows(rows)
    out = file or sys.stdout
    figures = len(headers) - len(ROW_COLUMNS)
    print_wide_table(title, headers, cells, left=range(figures), file=out)
    for r in rows:
        if r.get("error"):
            opts = ", ".join(f"{_HEAD[k]} {_cell(k, r.get(k))}" for k in _varying(rows))
            print(f"  {opts}: {r['error']}", file=out)
    print("max concurrency: requests of max_model_len tokens the blocks hold at once "
          "(vLLM's figure; plan with it); longest context: the longest single request the "
          "blocks hold", file=out)


def write_csv(rows: Sequence[dict[str, Any]], path: str | Path) -> None:
    """The rows as CSV (options, figures, error); raises ConfigError if unwritable."""
    keys = ["model"] + [k for k, _ in SWEEP_AXES] + list(ROW_COLUMNS) + \
        ["overhead_bytes", "min_tensor_parallel_size_that_fits", "error"]
    try:
        with open(path, "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=keys, extrasaction="ignore")
            w.writeheader()
            for r in rows:
                if r.get("gpu") is None and r.get("gpu_memory_bytes") is not None:
                    r = {**r, "gpu": "custom"}  # --gpu-memory: no catalog name
                w.writerow({k: ("/".join(map(str, r[k])) if isinstance(r.get(k), list)
                                else r.get(k)) for k in keys})
    except OSError as exc:
        raise ConfigError(f"--csv: cannot write {path}: {exc.strerror or exc}",
                          field="csv", value=str(path)) from exc


def rows_to_json(rows: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """A list of plans: each the plan's JSON (``plan --json``) with its options, or the
    options with ``fits`` and ``error`` for a row that does not plan."""
    from kvcore.planning import plan_to_dict

    out = []
    for r in rows:
        head = {k: r.get(k) for k in ["model"] + [k for k, _ in SWEEP_AXES]
                if k not in ("gpu", "gpu_memory_bytes")}
        if r.get("gpu") is not None or r.get("gpu_memory_bytes") is not None:
            from kvcore.deploy.gpus import get_gpu

            memory = r.get("gpu_memory_bytes") or get_gpu(r["gpu"]).memory_bytes
            head["gpu"] = {"name": r.get("gpu"), "memory_bytes": memory}
        if r.get("plan") is not None:
            d = plan_to_dict(r["plan"])
            d.update(plan_json_extras(r["plan"].stats))
            out.append({**head, **d})
        else:
            out.append({**head, "fits": r.get("fits"),
                        "weights_bytes": r.get("weights_bytes"),
                        "min_tensor_parallel_size_that_fits":
                            r.get("min_tensor_parallel_size_that_fits"),
                        "error": {"type": r.get("error_type"), "message": r.get("error")}})
    return out


#: ``plan --json`` keys the GPU budget adds (issue #16)
GPU_JSON_KEYS = ("weights_bytes", "weights_bytes_total", "weights_source", "overhead_bytes",
                 "gpu", "gpu_memory_utilization", "fits", "min_tensor_parallel_size_that_fits",
                 "num_gpus", "data_parallel_size", "weights_mtp_bytes", "weights_include_mtp",
                 "engine", "engine_release", "ledger", "ceilings", "vllm_own_layout")


def plan_json_extras(stats: Any) -> dict[str, Any]:
    """The GPU-budget keys of ``plan --json`` (issue #16), always all of them: a plan
    made on a GPU has them in its stats; a plan without one has null for each (the
    weights are estimated only with --gpu / --gpu-memory)."""
    return {k: stats.get(k) for k in GPU_JSON_KEYS}


_COLORS = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2",
           "#7f7f7f", "#bcbd22", "#17becf")  # matplotlib's tab10
_MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*")
_LINESTYLES = ("-", "--", ":", "-.")


def line_style(i: int) -> tuple[str, str, str]:
    """``(colour, marker, linestyle)`` of the ``i``-th line: distinct combinations for
    the first 10 x 8 x 4 = 320 lines (colour first, then marker, then linestyle)."""
    return (_COLORS[i % len(_COLORS)], _MARKERS[(i // len(_COLORS)) % len(_MARKERS)],
            _LINESTYLES[(i // (len(_COLORS) * len(_MARKERS))) % len(_LINESTYLES)])


def plot_lengths(model: Any, max_model_len: Any = None) -> list[int]:
    """Context lengths for a plot of one length's plans: powers of two from 1,024 up to
    ``max_model_len`` (default / auto: the model's derived length), and that length."""
    from kvcore.deploy.budget import _config
    from kvcore.models.planner import derived_max_model_len
    from kvcore.units import as_int

    mml = as_int(max_model_len)  # numpy integers too
    top = mml if mml is not None and mml > 0 else \
        derived_max_model_len(_config(model)) or 131072
    lengths = [1 << k for k in range(10, 40) if (1 << k) < top]
    return [*lengths, top] if lengths else sorted({max(1, top // 4), max(1, top // 2), top})


def plot(rows: Sequence[dict[str, Any]], path: str | Path, title: str = "") -> None:
    """PNG: max concurrency against max_model_len, one line per set of the other options
    (rows that do not fit are left out; lines with the same points are drawn once with
    all their labels; colour x marker x linestyle keep up to 320 lines apart).  The CLI
    plans a range of lengths (:func:`plot_lengths`) when max_model_len is not swept.  Needs matplotlib (``pip install kvcore[plot]``);
    raises ConfigError naming the extra, or if the file cannot be written."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise ConfigError("--plot needs matplotlib: pip install kvcore[plot]",
                          field="plot") from None
    others = [k for k in _varying(rows) if k != "max_model_len"]
    series: dict[str, list[tuple[int, float]]] = {}
    for r in rows:
        if r.get("max_concurrency") is None or not r.get("max_model_len") or \
                r["max_model_len"] < 1:
            continue
        label = ", ".join(f"{_HEAD[k]} {_cell(k, r.get(k))}" for k in others) or "plan"
        series.setdefault(label, []).append((r["max_model_len"], r["max_concurrency"]))
    # identical lines would hide each other: draw each once, labelled with every option
    merged: dict[tuple[tuple[int, float], ...], list[str]] = {}
    for label, pts in series.items():
        merged.setdefault(tuple(sorted(pts)), []).append(label)
    fig, ax = plt.subplots(figsize=(9, 5.5))
    for i, (pts_key, labels) in enumerate(merged.items()):
        color, marker, style = line_style(i)
        ax.plot([p[0] for p in pts_key], [p[1] for p in pts_key], marker=marker,
                label=" = ".join(labels), color=color, linestyle=style)
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("max_model_len (tokens)")
    ax.set_ylabel("max concurrency (requests of max_model_len)")
    ax.set_title(title or "kvcore plan sweep")
    ax.grid(True, which="both", alpha=0.3)
    if merged:
        ax.legend(fontsize="small", loc="upper left", bbox_to_anchor=(1.01, 1.0),
                  borderaxespad=0.0)
    fig.tight_layout()
    try:
        fig.savefig(path, dpi=110)
    except OSError as exc:
        raise ConfigError(f"--plot: cannot write {path}: {exc.strerror or exc}",
                          field="plot", value=str(path)) from exc
    finally:
        plt.close(fig)


# ---- CLI helpers (kvcore/cli.py calls these) ------------------------------------------

def parse_count(text: Any, field: str, flag: str | None = None) -> int:
    """A count of GPUs / ranks (``--tp``, ``--pp``, ``--dp``): a plain positive integer
    (no length suffixes: ``1k`` is not a TP size).  Raises ConfigError naming the flag."""
    from kvcore.units import bound, shorten

    raw = str(text).strip()
    if isinstance(text, bool) or not raw.isascii() or not raw.isdigit() or \
            len(raw) > 12 or not 1 <= int(raw) <= bound(field):
        shown = shorten(str(text))
        raise ConfigError(f"{shown!r} is not a count: {field} ({flag or field}) must be a "
                          f"positive whole number up to {bound(field):,} (1, 2, 4, 8, ...), "
                          f"without a suffix", field=field, value=shown)
    return int(raw)


def count_arg(field: str, flag: str) -> Callable[[str], Any]:
    """An argparse ``type=`` for a count or a comma list of counts (:func:`parse_count`)."""
    return list_of(_arg(lambda t: parse_count(t, field, flag), field))


def list_of(convert: Callable[[str], Any]) -> Callable[[str], Any]:
    """An argparse ``type=``: ``convert`` applied to each item of a comma list; one value
    stays a value, several give a list (a sweep axis)."""
    def parse(text: str) -> Any:
        items = [convert(x) for x in str(text).split(",")]
        return items[0] if len(items) == 1 else items

    parse.__name__ = getattr(convert, "__name__", "value")
    return parse


def _arg(parse: Callable[[str], Any], name: str) -> Callable[[str], Any]:
    """An argparse ``type=`` whose ConfigError becomes argparse's one-line usage error."""
    def convert(text: str) -> Any:
        import argparse

        try:
            return parse(text)
        except ConfigError as exc:
            raise argparse.ArgumentTypeError(exc.message) from None

    convert.__name__ = name
    return convert


def parse_utilization(text: Any) -> float:
    """``--gpu-memory-utilization``: a fraction in (0, 1]; raises ConfigError."""
    try:
        value = float(text)
    except (TypeError, ValueError):
        raise ConfigError(f"--gpu-memory-utilization: {text!r} is not a fraction (e.g. "
                          f"0.9)", field="gpu_memory_utilization", value=str(text)) from None
    if not 0 < value <= 1:
        raise ConfigError(f"--gpu-memory-utilization must be in (0, 1], got {text}",
                          field="gpu_memory_utilization", value=str(text))
    return value


def add_gpu_arguments(p: Any) -> None:
    """The GPU-budget and sweep flags of ``kvcore plan``."""
    from kvcore.deploy.budget import check_gpu_memory
    from kvcore.units import parse_size

    gpu_memory = _arg(lambda t: check_gpu_memory(parse_size(t, "gpu_memory")),
                      "gpu_memory")
    utilization = _arg(parse_utilization, "gpu_memory_utilization")
    overhead = _arg(lambda t: parse_size(t, "overhead"), "overhead")
    dp = _arg(lambda t: parse_count(t, "data_parallel_size", "--dp"), "data_parallel_size")
    if not p.epilog:
        p.epilog = (
            "Terms: the null block is block 0 of the pool, never handed to a request "
            "(padding slots of block tables point at it), so num_blocks counts it; the "
            "layout (LBNHC, BLHNC, ...) is the physical axis order of the KV-cache tensors "
            "(L layers, B blocks, N tokens per block, H heads, C head channels; LBNHC is "
            "the default); max concurrency is how many requests of max_model_len the blocks "
            "hold at once (vLLM's figure: plan with it); the longest context is the "
            "longest single request they hold.")
    g = p.add_argument_group(
        "GPU budget (kvcore gpus lists the catalog)",
        "KV budget per rank = GPU memory x utilization - weights per rank - overhead. "
        "--gpu, --gpu-memory, --gpu-memory-utilization, --tp, --pp, --kv-cache-dtype and "
        "--max-model-len take comma lists: every combination is planned and printed as "
        "one table.")
    g.add_argument("--gpu", metavar="NAME[,NAME]", type=list_of(str),
                   help="GPU model from the catalog (e.g. H100-SXM, H200, MI300X)")
    g.add_argument("--gpu-memory", metavar="SIZE[,SIZE]",
                   type=list_of(gpu_memory),
                   help="memory per GPU instead of (or overriding) --gpu, e.g. 80GB")
    g.add_argument("--gpu-memory-utilization", metavar="F[,F]", default=None,
                   type=list_of(utilization),
                   help="fraction of GPU memory the engine may use (default 0.9, vLLM's)")
    g.add_argument("--overhead", metavar="SIZE", type=overhead,
                   help="activations + CUDA graphs + runtime per rank (default: an "
                        "estimate from the model's shape and --max-num-batched-tokens)")
    g.add_argument("--dp", "--data-parallel-size", "-dp", metavar="N", type=dp,
                   default=None, dest="dp",
                   help="data-parallel replicas (multiplies GPUs, not per-rank memory)")
    g.add_argument("--enable-expert-parallel", action="store_true",
                   help="split MoE experts whole over TP x DP ranks")
    g.add_argument("--engine", metavar="vllm==X.Y[.Z]", default=None,
                   help="the vLLM release whose memory accounting to use: one released "
                        "version from 0.4.0 to 0.32.0 (X.Y is X.Y.0; post releases such "
                        "as 0.10.1.1 taken; no ranges); default: the newest profile, "
                        "vllm==0.32; see docs/ENGINE_PROFILES.md")
    g.add_argument("--usage", choices=["serve", "offline"], default="serve",
                   help="vLLM's usage context for its batch defaults: serve (vllm serve) "
                        "or offline (the LLM class)")
    g.add_argument("--max-num-seqs", metavar="N", type=_arg(
        lambda t: parse_count(t, "max_num_seqs", "--max-num-seqs"), "max_num_seqs"),
        default=None, help="sequences per step (default: the engine's for the GPU)")
    g.add_argument("--performance-mode", default=None,
                   choices=["balanced", "interactivity", "throughput"],
                   help="vLLM's --performance-mode (default balanced): throughput doubles "
                        "the default max_num_batched_tokens and max_num_seqs, so the "
                        "profile run and the sampler take more memory (vLLM 0.32)")
    g.add_argument("--enforce-eager", action="store_true",
                   help="no CUDA graphs (vLLM's --enforce-eager)")
    g.add_argument("--disable-custom-all-reduce", action="store_true",
                   help="no custom all-reduce buffers (vLLM's flag; also what vLLM does "
                        "by itself when TP spans nodes or the GPUs lack P2P)")
    g.add_argument("--explain", action="store_true",
                   help="explain the plan: the Pareto front of the judged layouts and, "
                        "with a GPU, the whole per-rank memory ledger (one line per term, "
                        "with the rule and source of each)")
    g.add_argument("--csv", metavar="FILE", help="write the sweep table as CSV")
    g.add_argument("--plot", metavar="FILE.png",
                   help="plot max concurrency against max_model_len (kvcore[plot])")


def _values(args: Any) -> dict[str, Any]:
    dtypes = str(args.kv_cache_dtype or "auto").split(",")
    return {"gpu": args.gpu, "gpu_memory_bytes": args.gpu_memory,
            "gpu_memory_utilization": _utilization(args),
            "tensor_parallel_size": args.tp, "pipeline_parallel_size": args.pp,
            "kv_cache_dtype": dtypes[0] if len(dtypes) == 1 else dtypes,
            "max_model_len": args.max_model_len}


def is_sweep(args: Any) -> bool:
    """A list in any sweep axis, or --csv / --plot."""
    return any(isinstance(v, list) for v in _values(args).values()) or \
        bool(getattr(args, "csv", None) or getattr(args, "plot", None))


def _utilization(args: Any) -> Any:
    u = getattr(args, "gpu_memory_utilization", None)
    return 0.9 if u is None else u


def on_gpu(args: Any) -> bool:
    """Whether ``kvcore plan`` plans on a GPU (--gpu or --gpu-memory).  Raises
    ConfigError for both at once, and for GPU-only flags (--gpu-memory-utilization,
    --overhead, --dp, --enable-expert-parallel) without a GPU."""
    gpu = getattr(args, "gpu", None) is not None
    memory = getattr(args, "gpu_memory", None) is not None
    if getattr(args, "engine", None) is not None:
        from kvcore.deploy.engines import get_engine

        get_engine(args.engine)  # a release kvcore knows, with or without a GPU
    if gpu and memory:
        raise ConfigError("give --gpu NAME or --gpu-memory SIZE, not both (--gpu names a "
                          "catalog GPU with its memory; --gpu-memory is a GPU of that "
                          "memory)", field="gpu_memory")
    if not (gpu or memory):
        given = [flag for flag, attr in (
            ("--gpu-memory-utilization", "gpu_memory_utilization"),
            ("--overhead", "overhead"), ("--dp", "dp"),
            ("--enable-expert-parallel", "enable_expert_parallel"),
            ("--performance-mode", "performance_mode"))
            if getattr(args, attr, None) is not None
            and getattr(args, attr, None) is not False]  # --overhead 0 counts as given
        if given:
            raise ConfigError(f"{', '.join(given)} need(s) a GPU: give --gpu NAME (see "
                              f"kvcore gpus) or --gpu-memory SIZE", field="gpu")
    return gpu or memory


def gpu_plan_kwargs(args: Any) -> dict[str, Any]:
    """The budget keywords of :func:`kvcore.deploy.budget.plan_on_gpu` from the CLI flags."""
    return {"gpu": args.gpu, "gpu_memory_bytes": args.gpu_memory,
            "gpu_memory_utilization": _utilization(args),
            "overhead_bytes": args.overhead, "data_parallel_size": args.dp or 1,
            "enable_expert_parallel": args.enable_expert_parallel,
            "engine": getattr(args, "engine", None), "usage": getattr(args, "usage", "serve"),
            "max_num_seqs": getattr(args, "max_num_seqs", None),
            "cuda_graphs": not getattr(args, "enforce_eager", False),
            "disable_custom_all_reduce": getattr(args, "disable_custom_all_reduce", False),
            "performance_mode": getattr(args, "performance_mode", None) or "balanced"}


def cli_plan_kwargs(args: Any) -> dict[str, Any]:
    """The plan keywords of ``kvcore plan``'s flags that are not sweep axes."""
    from kvcore.units import parse_size

    kw: dict[str, Any] = {
        "block_size": args.block_size,
        "max_num_encoder_input_tokens": args.max_num_encoder_input_tokens,
        "mamba_cache_mode": args.mamba_cache_mode,
        "num_speculative_tokens": args.num_speculative_tokens,
        "include_mtp_layers": args.include_mtp,
        "mamba_ssm_cache_dtype": args.mamba_ssm_cache_dtype,
        "enable_prefix_caching": not args.no_prefix_caching}
    for opt in ("kernel_block_size", "kv_cache_layout", "num_gpu_blocks_override"):
        if getattr(args, opt, None) is not None:
            kw[opt] = getattr(args, opt)
    if args.max_num_batched_tokens is not None or not on_gpu(args):
        # with a GPU and no flag the engine profile's default applies
        kw["max_num_batched_tokens"] = args.max_num_batched_tokens or 8192
    if getattr(args, "disable_hybrid_kv_cache_manager", False):
        kw["disable_hybrid_kv_cache_manager"] = True
    if args.kv_cache_memory is not None:
        parts = [parse_size(x) for x in str(args.kv_cache_memory).split(",")]
        kw["kv_cache_memory_bytes"] = parts[0] if len(parts) == 1 else parts
    if on_gpu(args):
        kw.update(overhead_bytes=args.overhead, data_parallel_size=args.dp or 1,
                  enable_expert_parallel=args.enable_expert_parallel,
                  engine=getattr(args, "engine", None),
                  usage=getattr(args, "usage", "serve"),
                  max_num_seqs=getattr(args, "max_num_seqs", None),
                  cuda_graphs=not getattr(args, "enforce_eager", False),
                  disable_custom_all_reduce=getattr(args, "disable_custom_all_reduce",
                                                    False))
    return kw


def _is_stdout(path: str) -> bool:
    """Whether ``path`` names standard output (``-``, /dev/stdout, /dev/fd/1, or the same
    file stdout is open on)."""
    import os

    if path in ("-", "/dev/stdout", "/dev/fd/1", "/proc/self/fd/1"):
        return True
    try:
        out, target = os.fstat(sys.stdout.fileno()), os.stat(path)
    except (OSError, ValueError, AttributeError):
        return False
    return (out.st_dev, out.st_ino) == (target.st_dev, target.st_ino)


def run_cli(args: Any) -> int:
    """``kvcore plan`` with a sweep: table (or ``--json``: a list of plans), ``--csv``,
    ``--plot``; exit 0 even when rows do not fit."""

    if getattr(args, "specs", None):
        raise ConfigError("comma lists, --csv and --plot sweep a MODEL, not a --specs file",
                          field="specs")
    if not args.model:
        raise ConfigError("kvcore plan needs MODEL (see kvcore models) or --specs FILE",
                          field="model")
    if args.csv and args.json and _is_stdout(args.csv):
        raise ConfigError(f"--csv {args.csv} with --json would write the CSV into the JSON "
                          f"on standard output; write the CSV to a file, or drop --json",
                          field="csv", value=str(args.csv))
    if args.plot:  # fail before planning anything
        try:
            import matplotlib  # noqa: F401
        except ImportError:
            raise ConfigError("--plot needs matplotlib: pip install kvcore[plot]",
                              field="plot") from None
    rows = sweep(args.model, **_values(args), **cli_plan_kwargs(args))
    if args.csv:
        write_csv(rows, args.csv)
    if args.plot:
        plot_rows = rows
        if not isinstance(args.max_model_len, list):  # a curve over context lengths
            from kvcore.units import parse_length

            given = None if args.max_model_len is None else parse_length(
                args.max_model_len, "max_model_len", allow_auto=True)
            plot_rows = sweep(args.model, **dict(
                _values(args), max_model_len=plot_lengths(args.model, given)),
                **cli_plan_kwargs(args))
        plot(plot_rows, args.plot, title=f"kvcore plan {args.model}")
    if args.json:
        print(dumps_json(rows_to_json(rows), indent=2))
    else:
        print_table(rows, title=f"kvcore plan {args.model}: {len(rows)} plans (per rank)")
        for path in (args.csv, args.plot):
            if path:
                print(f"wrote {path}")
    return 0


def _whole_weights(stats: Any) -> str:
    """The whole-model weights on the same footing as the per-rank figure: with MTP layers
    in both or in neither, said once."""
    from kvcore.planning import format_bytes

    total = stats["weights_bytes_total"]
    mtp = stats.get("weights_mtp_bytes") or 0
    if not mtp:
        return format_bytes(total)
    if stats.get("weights_include_mtp"):
        return f"{format_bytes(total)} with its MTP layers, loaded per rank (--include-mtp)"
    return (f"{format_bytes(total - mtp)} without its MTP / next-n layers "
            f"({format_bytes(mtp)}, not loaded: engines load them only for speculative "
            f"decoding; --include-mtp counts them in both)")


def print_ledger(ledger: dict[str, Any], file: Any = None) -> None:
    """The per-rank memory ledger (``GPUBudget.ledger.to_dict()``: one line per term,
    its rule and source) as ``kvcore plan --explain`` prints it; also printed before the
    error of a plan that does not fit, which points at ``--explain``."""
    from kvcore.planning import format_bytes

    out = file or sys.stdout
    print(f"memory ledger per rank ({ledger['engine']}; max_num_batched_tokens "
          f"{ledger['max_num_batched_tokens']:,}, max_num_seqs "
          f"{ledger['max_num_seqs']:,}):", file=out)
    for i, line in enumerate(ledger["lines"]):
        sign = "" if i == 0 or line["name"] == "KV budget" else "- "
        eq = "= " if line["name"] == "KV budget" else ""
        print(f"  {eq}{sign}{line['name']:<22} {format_bytes(line['bytes']):>11}  "
              f"{line['rule']}  [{line['source']}]", file=out)


def print_gpu_summary(stats: Any, file: Any = None, explain: bool = False) -> None:
    """The budget lines under a single plan made with --gpu / --gpu-memory: the verdict,
    the engine profile, the ceilings vLLM would hit, deployment-wide totals under --dp,
    and with ``explain`` the whole per-rank ledger (one line per term, rule, source)."""
    from kvcore.planning import format_bytes

    if stats.get("gpu") is None:
        return
    out = file or sys.stdout
    g = stats["gpu"]
    name = g.get("name") or "--gpu-memory"
    util = stats.get("gpu_memory_utilization")
    gpus = stats.get("num_gpus")
    fatal = [c for c in stats.get("ceilings") or [] if c.get("fatal")]
    fits = bool(stats.get("fits")) and not fatal
    engine = stats.get("engine")
    usable = next((ln["bytes"] for ln in (stats.get("ledger") or {}).get("lines", ())
                   if ln.get("name") == "usable memory"), None)
    print(f"GPU: {name}, {format_bytes(g['memory_bytes'])} x {util:g} per GPU"
          + (f" (usable {format_bytes(usable)}: CUDA total x {util:g})"
             if usable is not None else "")
          + (f", {gpus} GPUs (TP x PP x DP)" if gpus and gpus > 1 else "") + "; weights "
          f"per rank {format_bytes(stats['weights_bytes'])} (whole model "
          f"{_whole_weights(stats)}, from the {stats['weights_source']}); overhead per rank "
          f"{format_bytes(stats['overhead_bytes'])} (activations, sampler, CUDA graphs, "
          f"non-torch)" + (f"; engine {engine} (release {stats.get('engine_release')})"
                           if engine else "")
          + f"; fits: {'yes' if fits else 'no'}", file=out)
    ledger = stats.get("ledger")
    if explain and ledger:
        print_ledger(ledger, out)
    vl = stats.get("vllm_own_layout")
    if vl:
        gs = vl["groups"]
        from collections import Counter

        kinds = Counter((g["num_layers"], g["kind"], g["block_size"], g["blocks_per_request"])
                        for g in gs)
        desc = ", ".join(f"{n} x ({lay} {kind} layers, block_size {bs}, {bpr} blocks per "
                         f"request)" for (lay, kind, bs, bpr), n in kinds.items())
        nb = vl.get("num_blocks")
        print(f"vLLM's own layout: {vl['num_groups']} groups: {desc}"
              + (f"; {nb:,} blocks" if nb is not None else "")
              + ("; the same as kvcore's" if vl.get("same_as_kvcore") else
                 f"; kvcore's layout differs ({stats.get('strategy')}): the ceilings that "
                 f"predict vLLM use vLLM's"), file=out)
    for c in stats.get("ceilings") or []:
        if c["kind"] == "logged_figures" and not explain:
            continue
        tag = "does not start" if c.get("fatal") else \
            "vLLM's log" if c["kind"] == "logged_figures" else "warning"
        print(f"{tag}: {c['message']} [{c['source']}]", file=out)
    dp = stats.get("data_parallel_size") or 1
    if dp > 1 and stats.get("max_concurrency") is not None:
        print(f"deployment-wide (x {dp} data-parallel replicas): max concurrency "
              f"{stats['max_concurrency'] * dp:.2f} requests, "
              f"{(stats.get('kv_cache_capacity_tokens') or 0) * dp:,} tokens of KV cache "
              f"(the figures above are per rank = per replica)", file=out)
