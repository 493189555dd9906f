"""The ``kvcore`` command.

``kvcore plan MODEL|--specs FILE [...]``
    lay out and size the KV cache of a model (an embedded name, a config.json, or a
    folder holding one), or of an explicit specs file.
``kvcore simulate MODEL --trace FILE [...]``
    replay a request trace through the block manager with prefix caching.
``kvcore plugins [--json]``
    the loaded plugins with their kinds, kv_cache_dtypes and model types.
``kvcore models [--json]``
    the embedded real configs.

Errors on bad input print one line (``{"error": {...}}`` under ``--json``) and exit 2.
Tables use rich when it is installed (``kvcore[cli]``), plain text otherwise.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import sys
import warnings
from collections.abc import Sequence
from typing import Any

from kvcore.errors import ConfigError, KVCoreError
from kvcore.units import length_arg, parse_length, parse_size
from kvcore.userfiles import dumps_json

__all__ = ["main", "parse_size", "build_parser"]

def _console() -> Any:
    try:
        from rich.console import Console
    except ImportError:
        return None
    return Console(highlight=False)


def _table(title: str, columns: list[str], rows: list[list[Any]]) -> None:
    console = _console()
    if console is not None:  # never cuts a figure or name; stacked when too narrow
        from kvcore.deploy.sweep import print_wide_table

        print_wide_table(title, columns, rows, left=(0, 1))
        return
    widths = [max(len(str(c)) for c in [col] + [r[i] for r in rows])
              for i, col in enumerate(columns)]
    print(title)
    print("  ".join(str(c).ljust(w) for c, w in zip(columns, widths)))
    for row in rows:
        print("  ".join(str(c).ljust(w) for c, w in zip(row, widths)))


def _fmt(n: float | None) -> str:
    from kvcore.planning import format_bytes

    if n is None:
        return "-"
    return f"{int(n):,} B ({format_bytes(n)})" if n >= 1024 else f"{int(n):,} B"


# ---- plan ------------------------------------------------------------------------------

def _add_plan(sub: Any) -> None:
    from kvcore.deploy.sweep import add_gpu_arguments, count_arg, list_of

    p = sub.add_parser("plan", help="lay out and size the KV cache of a model",
                       description="Lay out and size the KV cache of a model, per rank.")
    p.add_argument("model", nargs="?", help="embedded name (kvcore models), config.json "
                   "path, or a folder holding one")
    p.add_argument("--specs", metavar="FILE", help="plan an explicit specs file instead")
    p.add_argument("--kv-cache-memory", metavar="SIZE",
                   help="KV-cache budget per rank (20GiB, 20GB, bytes); a comma list gives "
                        "one budget per pipeline stage")
    p.add_argument("--max-model-len", metavar="N|auto",
                   type=list_of(length_arg("max_model_len", allow_auto=True)),
                   help="tokens per request, with vLLM's suffixes (128K = 131,072, 128k = "
                        "128,000; default: the config's max_position_embeddings; auto or "
                        "-1: the longest that fits)")
    p.add_argument("--kv-cache-dtype", default="auto", metavar="D",
                   help="auto, bfloat16, fp8, int8_per_token_head, nvfp4, ... "
                        "(default auto: the config's declared KV quantization or the model "
                        "dtype)")
    p.add_argument("--block-size", type=length_arg("block_size"), metavar="N",
                   help="tokens per block")
    # vLLM's spellings (--tensor-parallel-size / -tp ...) are accepted as aliases
    p.add_argument("--tp", "--tensor-parallel-size", "-tp",
                   type=count_arg("tensor_parallel_size", "--tp"), default=1,
                   metavar="N[,N]", dest="tp",
                   help="tensor-parallel size")
    p.add_argument("--pp", "--pipeline-parallel-size", "-pp",
                   type=count_arg("pipeline_parallel_size", "--pp"), default=1,
                   metavar="N", dest="pp", help="pipeline-parallel size")
    p.add_argument("--max-num-batched-tokens", type=length_arg("max_num_batched_tokens"),
                   default=None, metavar="N",
                   help="tokens per step (default 8192; with --gpu: the --engine's default "
                        "for that GPU and --usage)")
    p.add_argument("--max-num-encoder-input-tokens",
                   type=length_arg("max_num_encoder_input_tokens", minimum=0), metavar="N")
    p.add_argument("--mamba-cache-mode", default=None, choices=["none", "align", "all"],
                   help="none | align (vLLM 0.32's values) | all (kvcore's own mode, not "
                        "vLLM's: a state cached at every block; never printed in a "
                        "vllm serve line); default: the mode vLLM 0.32 runs, align on a "
                        "model with Mamba and attention layers with prefix caching on, "
                        "else none")
    p.add_argument("--mamba-ssm-cache-dtype", metavar="D",
                   help="recurrent-state dtype of Mamba/linear-attention layers, vLLM "
                        "0.32's auto, float32, float16 or bfloat16 (default: the config's)")
    p.add_argument("--num-speculative-tokens", default=0, metavar="N",
                   type=length_arg("num_speculative_tokens", minimum=0))
    p.add_argument("--include-mtp", action="store_true",
                   help="plan the multi-token-prediction layers too")
    p.add_argument("--kernel-block-size", type=length_arg("kernel_block_size"), metavar="N")
    p.add_argument("--kv-cache-layout", metavar="LAYOUT",
                   help="physical axis order, e.g. LBNHC (default) or BLHNC")
    p.add_argument("--disable-hybrid-kv-cache-manager", action="store_true")
    p.add_argument("--no-prefix-caching", action="store_true")
    p.add_argument("--num-gpu-blocks-override", type=length_arg("num_gpu_blocks_override"),
                   metavar="N")
    p.add_argument("--json", action="store_true", help="print the plan as JSON")
    p.add_argument("--show-tensors", action="store_true", help="list the KV-cache tensors")
    p.add_argument("--workload", metavar="FILE",
                   help="judge the candidate layouts on this trace (Mooncake JSONL, Azure "
                        "CSV or kvcore JSONL); default: a workload from max_model_len and "
                        "max_num_batched_tokens (docs/DESIGN.md, serving figures)")
    p.add_argument("--judge", choices=["auto", "analytic", "sim"], default="auto",
                   help="who times the best candidates: the analytic proxy or the clocked "
                        "simulator (auto: the simulator with --workload when installed)")
    p.add_argument("--efficiency", metavar="FILE.json", default=None,
                   help="the sim judge's step-time coefficients from kvcore calibrate "
                        "--output (your deployment's); needs --judge sim or --workload")
    add_gpu_arguments(p)  # --gpu, --gpu-memory, ... and the sweep outputs (kvcore.deploy.sweep)
    p.set_defaults(func=_cmd_plan)


def _plan_from_args(args: argparse.Namespace) -> Any:
    from kvcore.models.planner import plan_model
    from kvcore.planning import plan_from_specs_file

    budget: int | list[int] | None = None
    if args.kv_cache_memory is not None:
        parts = [parse_size(x) for x in str(args.kv_cache_memory).split(",")]
        budget = parts[0] if len(parts) == 1 else parts
    max_len: int | None = None
    if args.max_model_len is not None:
        max_len = parse_length(args.max_model_len, "max_model_len", allow_auto=True)
    if args.specs:
        if args.model:
            raise ConfigError("give either MODEL or --specs FILE, not both", field="specs")
        from kvcore.models.config import read_json_file

        data = read_json_file(args.specs, "specs")
        if not isinstance(data, dict):
            raise ConfigError(f"{args.specs}: a specs file holds a JSON object with "
                              f"'options' and 'layers'", field="specs")
        model_only = [flag for flag, used in (
            ("--tp", args.tp != 1), ("--pp", args.pp != 1),
            ("--block-size", args.block_size is not None),
            ("--kv-cache-dtype", args.kv_cache_dtype != "auto"),
            ("--include-mtp", args.include_mtp),
            ("--num-speculative-tokens", args.num_speculative_tokens != 0),
            ("--mamba-ssm-cache-dtype", args.mamba_ssm_cache_dtype is not None),
            ("--gpu/--gpu-memory", getattr(args, "gpu", None) is not None
             or getattr(args, "gpu_memory", None) is not None),
            ("--gpu-memory-utilization",
             getattr(args, "gpu_memory_utilization", None) is not None),
            ("--overhead", getattr(args, "overhead", None) is not None),
            ("--dp", getattr(args, "dp", None) is not None),
            ("--enable-expert-parallel", getattr(args, "enable_expert_parallel", False)))
            if used]
        if model_only:
            raise ConfigError(
                f"{', '.join(model_only)}: not usable with --specs, because these flags "
                f"act on a model config (its layers, weights or GPU budget) and a specs "
                f"file lists its layers explicitly; plan a MODEL instead, or set the "
                f"fields in the file (per layer, or tensor_parallel_size / stages / "
                f"kv_cache_memory_bytes in its options)", field="specs")
        from kvcore.models.config import field_dict

        opts = field_dict(data, "options", None, where=str(args.specs))
        if opts is None:
            opts = data["options"] = {}
        if budget is not None:
            opts["kv_cache_memory_bytes"] = budget
        if max_len is not None:
            opts["max_model_len"] = max_len
        for flag, key in (("kernel_block_size", "kernel_block_size"),
                          ("kv_cache_layout", "kv_cache_layout"),
                          ("num_gpu_blocks_override", "num_gpu_blocks_override"),
                          ("max_num_encoder_input_tokens", "max_num_encoder_input_tokens")):
            if getattr(args, flag) is not None:
                opts[key] = getattr(args, flag)
        if args.max_num_batched_tokens is not None:
            opts["max_num_batched_tokens"] = args.max_num_batched_tokens
        if args.mamba_cache_mode not in (None, "none"):
            opts["mamba_cache_mode"] = args.mamba_cache_mode
        if args.disable_hybrid_kv_cache_manager:
            opts["disable_hybrid_kv_cache_manager"] = True
        if args.no_prefix_caching:
            opts["enable_prefix_caching"] = False
        return plan_from_specs_file(data, **_serving_args(args), where=str(args.specs)), None
    if not args.model:
        raise ConfigError("kvcore plan needs MODEL (see kvcore models) or --specs FILE",
                          field="model")
    extra: dict[str, Any] = {}
    for opt in ("kernel_block_size", "kv_cache_layout", "num_gpu_blocks_override"):
        if getattr(args, opt) is not None:
            extra[opt] = getattr(args, opt)
    if args.disable_hybrid_kv_cache_manager:
        extra["disable_hybrid_kv_cache_manager"] = True
    extra.update(_serving_args(args))
    from kvcore.deploy.sweep import gpu_plan_kwargs, on_gpu

    planner: Any = plan_model
    if args.max_num_batched_tokens is not None or not on_gpu(args):
        extra["max_num_batched_tokens"] = args.max_num_batched_tokens or 8192
    if args.max_num_batched_tokens is not None and not on_gpu(args):
        # vLLM refuses max_num_batched_tokens < max_num_seqs (its default 256) to start;
        # on a GPU the engine ledger checks it with the GPU's defaults
        from kvcore.serving import DEFAULT_MAX_NUM_SEQS, check_scheduler_limits

        seqs = getattr(args, "max_num_seqs", None)
        for s in (seqs if isinstance(seqs, list) else [seqs or DEFAULT_MAX_NUM_SEQS]):
            check_scheduler_limits(s or DEFAULT_MAX_NUM_SEQS, args.max_num_batched_tokens,
                                   max(1, max_len) if isinstance(max_len, int) else
                                   args.max_num_batched_tokens)
    if on_gpu(args):  # --gpu / --gpu-memory: the budget comes from the GPU (kvcore.deploy.budget)
        import functools

        from kvcore.deploy.budget import plan_on_gpu

        planner = functools.partial(plan_on_gpu, **gpu_plan_kwargs(args))
    config = planner(
        args.model, kv_cache_memory_bytes=budget, max_model_len=max_len,
        block_size=args.block_size, kv_cache_dtype=args.kv_cache_dtype,
        tensor_parallel_size=args.tp, pipeline_parallel_size=args.pp,
        max_num_encoder_input_tokens=args.max_num_encoder_input_tokens,
        mamba_cache_mode=args.mamba_cache_mode,
        num_speculative_tokens=args.num_speculative_tokens,
        include_mtp_layers=args.include_mtp,
        mamba_ssm_cache_dtype=args.mamba_ssm_cache_dtype,
        enable_prefix_caching=not args.no_prefix_caching, **extra)
    return config, args.model


def _serving_args(args: argparse.Namespace) -> dict[str, Any]:
    """``workload`` / ``judge`` for :func:`kvcore.plan` from --workload / --judge."""
    from kvcore.plan_serving import load_workload, make_judge

    out: dict[str, Any] = {}
    path = getattr(args, "workload", None)
    if path:
        out["workload"] = load_workload(path)
    judge = getattr(args, "judge", "auto") or "auto"
    if judge == "auto":
        judge = "sim" if path else "analytic"
    kw: dict[str, Any] = {"tensor_parallel_size": getattr(args, "tp", 1) or 1,
                          "pipeline_parallel_size": getattr(args, "pp", 1) or 1}
    if getattr(args, "gpu", None):
        kw["gpu"] = args.gpu
    eff_file = getattr(args, "efficiency", None)
    if eff_file is not None:
        if judge != "sim":
            raise ConfigError(f"--efficiency {eff_file}: sets the sim judge's clock; give "
                              "--judge sim (or --workload)", field="efficiency",
                              value=eff_file)
        from kvcore.sim.calibrate import load_efficiency, warn_if_other_deployment

        kw["efficiency"] = load_efficiency(eff_file)
        g = getattr(args, "gpu", None)
        g = g[0] if isinstance(g, list) and len(g) == 1 else g
        warn_if_other_deployment(eff_file, gpu=g if isinstance(g, str) else None,
                                 tensor_parallel_size=kw["tensor_parallel_size"],
                                 model=getattr(args, "model", None))
    j = make_judge(judge, getattr(args, "model", None) if not getattr(args, "specs", None)
                   else None, **kw) if judge != "analytic" else None
    if j is not None:
        out["judge"] = j
    return out


def _cmd_plan(args: argparse.Namespace) -> int:
    from kvcore.deploy.sweep import is_sweep, plan_json_extras, print_gpu_summary, run_cli
    from kvcore.planning import plan_to_dict

    if is_sweep(args):  # comma lists, --csv or --plot: one table of plans
        return run_cli(args)
    config, model = _plan_from_args(args)
    out = plan_to_dict(config)
    s = config.stats
    if args.json:
        for key in ("model", "model_type", "kv_cache_dtype", "model_dtype", "layers_per_kind",
                    "block_size_raised"):
            if key in s:
                out[key] = s[key]
        out["per_rank"] = {"tensor_parallel_size": s.get("tensor_parallel_size", 1),
                           "pipeline_parallel_size": s.get("pipeline_parallel_size", 1)}
        out.update(plan_json_extras(s))
        from kvcore.plan_serving import serving_json

        out["serving"] = serving_json(s)
        print(dumps_json(out, indent=2))
        return 0
    _print_plan(config, out, model)
    from kvcore.plan_serving import print_serving

    explain = bool(getattr(args, "explain", False))
    judge = getattr(args, "judge", "auto") or "auto"
    if judge == "auto":
        judge = "sim" if getattr(args, "workload", None) else "analytic"
    asked = None
    if judge != "analytic":
        eff = getattr(args, "efficiency", None)
        asked = f"{judge} (--efficiency {eff})" if eff else judge
    print_serving(s, _table, explain=explain, judge_requested=asked)
    print_gpu_summary(s, explain=explain)
    if args.show_tensors:
        _print_tensors(out)
    return 0


def _print_plan(config: Any, out: dict[str, Any], model: str | None) -> None:
    s = config.stats
    tp, pp = s.get("tensor_parallel_size", 1), s.get("pipeline_parallel_size", 1)
    head = f"kvcore plan: {s.get('model') or model or 'specs file'}"
    if s.get("model_type"):
        head += f" (model_type {s['model_type']}, dtype {s.get('model_dtype')}, " \
                f"kv_cache_dtype {s.get('kv_cache_dtype')})"
    print(head)
    print(f"per rank: tensor parallel {tp}, pipeline parallel {pp}"
          + (" (each stage plans its own layers; num_blocks is the minimum over stages)"
             if pp > 1 else ""))
    rows = []
    windowed = False
    for i, g in enumerate(out["groups"]):
        spec = g.get("spec") or {}
        kind = str(g["type"])
        window = spec.get("sliding_window") if "sliding" in kind else \
            spec.get("attention_chunk_size") if "chunk" in kind else None
        windowed = windowed or bool(window)
        rows.append([i, g["type"], g["num_layers"], g["block_size"],
                     f"{window:,}" if isinstance(window, int) else "-",
                     spec.get("num_kv_heads", "-"), spec.get("head_size", "-"),
                     f"{g['page_size_bytes']:,}", f"{g['padding_bytes']:,}"])
    _table("KV-cache groups (layers sharing one block table)",
           ["#", "kind", "layers", "block size", "window", "KV heads", "head size",
            "page size (B)", "padding (B)"], rows)
    print(f"layout: {out['kv_cache_layout']}, strategy: {out['strategy']}")
    for note in out.get("notes") or []:
        print(f"  note: {note}")
    print("bytes per token (K/V of every layer that stores one; "
          + ("sliding-window and chunked layers stop growing at their window, so this "
             "rate holds only up to it" if windowed else "all layers grow with the context")
          + f"): {_fmt(out['bytes_per_token'])}")
    if out["cross_attention_bytes_per_request"]:
        print(f"cross-attention per request: {_fmt(out['cross_attention_bytes_per_request'])}")
    if out["state_bytes_per_request"]:
        print(f"recurrent state per request: {_fmt(out['state_bytes_per_request'])}")
    per_stage = out.get("bytes_per_block_per_stage")
    if per_stage:
        print(f"bytes per block id, per stage (rank): "
              f"{', '.join(_fmt(b) for b in per_stage)} (whole model: "
              f"{_fmt(out['bytes_per_block'])})")
    else:
        print(f"bytes per block id (all groups): {_fmt(out['bytes_per_block'])}")
    if out["padding_bytes_per_request"]:
        print(f"padding from page unification: {_fmt(out['padding_bytes_per_request'])} per "
              f"request of max_model_len (largest per block id: "
              f"{_fmt(out['padding_bytes_per_block'])})")
    print(f"one request of max_model_len {out['max_model_len']:,}: "
          f"{out['blocks_per_request']:,} blocks; needs "
          f"{_fmt(out['kv_cache_memory_bytes_for_one_request'])} with the null block")
    if out["num_blocks"] is None:
        print("no memory budget given (--kv-cache-memory): capacity not computed")
        return
    if out["kv_cache_memory_bytes"] is not None:
        budget = out["kv_cache_memory_bytes"]
        text = ", ".join(_fmt(b) for b in budget) if isinstance(budget, list) else _fmt(budget)
        print(f"budget: {text}")
    print(f"num_blocks: {out['num_blocks']:,} (block 0 is the null block)")
    if out["max_concurrency"] is not None:
        print(f"capacity: {out['kv_cache_capacity_tokens']:,} tokens; max concurrency: "
              f"{out['max_concurrency']:.2f} requests of {out['max_model_len']:,} tokens "
              f"(vLLM's figure: plan with this one)")
        full = out.get("max_num_full_length_requests")
        if full is not None and full != math.floor(out["max_concurrency"] + 1e-9):
            print(f"requests of {out['max_model_len']:,} tokens held at once: {full:,} "
                  f"(vLLM's figure counts the null block: {out['num_blocks']:,} - 1"
                  + (f" - {out['num_reserved_blocks']:,} reserved"
                     if out.get("num_reserved_blocks") else "")
                  + f" usable blocks / {out['blocks_per_request']:,} per request)")
    batched = out.get("max_concurrency_batched")
    if batched is not None and out["max_concurrency"] and \
            abs(batched - out["max_concurrency"]) > 0.005 * out["max_concurrency"]:
        print(f"max concurrency with the step's {s.get('max_num_batched_tokens', 0):,} "
              f"batched tokens shared by the batch: {batched:.2f} (a bound for a batch "
              f"where one request prefills and the others decode; the figure above "
              f"reserves a full step for every request, as vLLM does)")
    if out.get("longest_max_model_len") is not None:
        longest = out["longest_max_model_len"]
        capped = longest >= s.get("max_model_len_limit", 1 << 62)
        why = {"model": " (the model's max_position_embeddings; more memory is left)",
               "requested": " (the requested max_model_len; more memory is left)",
               "search": " (kvcore's search limit; more memory is left)"}.get(
            s.get("max_model_len_limit_source", ""), "") if capped else ""
        print(f"longest max_model_len that fits: {longest:,} tokens{why}")


def _print_tensors(out: dict[str, Any]) -> None:
    rows = []
    for i, t in enumerate(out["kv_cache_tensors"]):
        names = t["shared_by"]
        shown = ", ".join(names[:3]) + (f" (+{len(names) - 3} more)" if len(names) > 3 else "")
        rows.append([i, f"{t['size']:,}", t["offset"], f"{t['block_stride']:,}", shown])
    _table("KV-cache tensors", ["#", "size (B)", "offset (B)", "block stride (B)",
                                "shared by"], rows)


# ---- plugins / models ---------------------------------------------------------------------

def _add_plugins(sub: Any) -> None:
    p = sub.add_parser("plugins", help="list the loaded plugins")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=_cmd_plugins)


def _cmd_plugins(args: argparse.Namespace) -> int:
    from kvcore.plugins import list_plugins
    from kvcore.registry import get_registry

    plugins = [p.to_dict() for p in list_plugins()]
    # manager paths are imported here (and when a KVCacheManager is built), not at import
    problems = get_registry().check_managers()
    if args.json:
        out: dict[str, Any] = {"plugins": plugins}
        if problems:
            out["errors"] = [e.to_dict() for e in problems]
        print(dumps_json(out, indent=2))
        return 2 if problems else 0

    def short(items: list[str], limit: int = 12) -> str:
        if not items:
            return "-"
        more = f" (+{len(items) - limit} more)" if len(items) > limit else ""
        return ", ".join(items[:limit]) + more

    console = _console()
    for p in plugins:
        title = f"{p['name']}  ({p['distribution']} {p['version']})"
        if console is not None:
            console.print(f"[bold]{title}[/bold]")
        else:
            print(title)
        print(f"  kinds:           {short(p['kinds'])}")
        print(f"  kv_cache_dtypes: {short(p['kv_cache_dtypes'])}")
        print(f"  model types:     {short(p['model_types'], 24)}")
        print(f"  hooks:           {short(p['hooks'])}")
    for e in problems:
        print(f"kvcore plugins: error: {e.message}", file=sys.stderr)
    return 2 if problems else 0


def _add_models(sub: Any) -> None:
    p = sub.add_parser("models", help="list the embedded real model configs")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=_cmd_models)


def _model_kinds(name: str) -> tuple[str, str]:
    from kvcore.models import load_model_config
    from kvcore.models.config import CacheConfig
    from kvcore.models.planner import layer_specs_for

    cfg = load_model_config(name)
    try:
        specs = layer_specs_for(cfg, CacheConfig())
    except KVCoreError as exc:
        return cfg.model_type, f"({exc.message})"
    kinds: dict[str, int] = {}
    for s in specs.values():
        kinds[s.kind] = kinds.get(s.kind, 0) + 1
    return cfg.model_type, ", ".join(f"{k} x{n}" for k, n in kinds.items())


def _cmd_models(args: argparse.Namespace) -> int:
    from kvcore.models import embedded_names
    from kvcore.models.embedded import embedded_config_path, provenance_note
    from kvcore.registry import get_registry

    get_registry()  # a plugin conflict is one error (exit 2), not a note in every row
    rows = []
    for name in embedded_names():
        model_type, kinds = _model_kinds(name)
        path = embedded_config_path(name)
        rows.append([name, model_type, kinds, provenance_note(path.stem) if path else ""])
    if args.json:
        print(dumps_json({"models": [{"name": n, "model_type": t, "attention": k,
                                      "note": note} for n, t, k, note in rows]}, indent=2))
        return 0
    _table("embedded model configs (kvcore plan NAME; provenance in "
           "kvcore/models/configs/SOURCES.md)",
           ["name", "model_type", "layers per kind", "note"], rows)
    return 0


# ---- entry point -----------------------------------------------------------------------------

class _Parser(argparse.ArgumentParser):
    """argparse with kvcore's error rule: one line (JSON under --json), exit 2."""

    json_errors = False

    def error(self, message: str) -> Any:  # type: ignore[override]
        from kvcore.units import shorten_message

        message = shorten_message(f"{message} (see {self.prog} --help)")
        payload: dict[str, Any] = {"type": "UsageError", "message": message,
                                   "command": self.prog}
        # an option's type (kvcore.units) raised a KVCoreError: keep its field and value
        cause = sys.exc_info()[1]
        while cause is not None and not isinstance(cause, KVCoreError):
            cause = cause.__context__
        if isinstance(cause, KVCoreError):
            for key, value in cause.to_dict().items():
                payload.setdefault(key, value)
        if _Parser.json_errors:
            print(dumps_json({"error": payload}))
        else:
            print(f"{self.prog}: error: {message}", file=sys.stderr)
        raise SystemExit(2)


#: options whose value may look like a negative number or start with '-'
_VALUE_OPTIONS = ("--kv-cache-memory", "--max-model-len")


def _join_values(argv: list[str]) -> list[str]:
    out: list[str] = []
    i = 0
    while i < len(argv):
        a = argv[i]
        if a in _VALUE_OPTIONS and i + 1 < len(argv) and argv[i + 1].startswith("-"):
            out.append(f"{a}={argv[i + 1]}")
            i += 2
            continue
        out.append(a)
        i += 1
    return out


def _human_int(text: str) -> int:
    """vLLM's ``human_readable_int``: ``1k`` 1,000, ``25.6k`` 25,600, ``1K`` 1,024 (binary
    suffixes take integers only), else a plain int; ValueError otherwise."""
    m = re.fullmatch(r"(\d+(?:\.\d+)?)([kKmMgGtT])", text.strip())
    if not m:
        return int(text)
    num, suf = m.groups()
    if suf in "kmgt":
        return int(float(num) * 10 ** (3 * ("kmgt".index(suf) + 1)))
    return int(num) * 2 ** (10 * ("KMGT".index(suf) + 1))


def _dotted_args(argv: list[str]) -> list[str]:
    """vLLM's dotted form of a JSON option (``FlexibleArgumentParser.parse_args``):
    ``--speculative-config.method ngram --speculative-config.num_speculative_tokens 3``
    (or ``--X.a.b=V``) is ``--speculative-config '{"method": "ngram",
    "num_speculative_tokens": 3}'``, appended after the other arguments as vLLM appends
    it.  A value is read as JSON, else as vLLM's human-readable int (``1k``), else kept
    as a string; ``--X.KEY+ a,b`` is the list ``["a", "b"]``, merged with the key's
    earlier lists.  Only tokens ``--NAME.KEY`` with a letter after the dashes count (a
    negative number such as ``-0.5`` stays a value)."""
    out: list[str] = []
    merged: dict[str, dict[str, Any]] = {}
    i = 0
    while i < len(argv):
        a = argv[i]
        head = a.split("=", 1)[0]
        if not (head.startswith("--") and head[2:3].isalpha() and "." in head):
            out.append(a)
            i += 1
            continue
        if "=" in a:
            value_str = a.split("=", 1)[1]
            i += 1
        elif i + 1 < len(argv):
            value_str = argv[i + 1]
            i += 2
        else:  # no value: left to the parser's own "expected one argument"
            out.append(a)
            i += 1
            continue
        as_list = head.endswith("+")
        if as_list:
            head = head[:-1]
            value_str = json.dumps(value_str.split(","))
        key, *keys = head.split(".")
        value: Any
        try:
            value = json.loads(value_str)
        except (ValueError, RecursionError):  # nested too deeply: read as text
            try:
                value = _human_int(value_str)
            except ValueError:
                value = value_str
        node = merged.setdefault(key, {})
        for k in keys[:-1]:  # vLLM's recursive_dict_update: a dict replaces a non-dict
            if not isinstance(node.get(k), dict):
                node[k] = {}
            node = node[k]
        last = keys[-1] if keys else ""
        if isinstance(value, list) and isinstance(node.get(last), list):
            node[last] = node[last] + value
        else:
            node[last] = value
    for key, obj in merged.items():
        out += [key, json.dumps(obj)]
    return out


def build_parser() -> argparse.ArgumentParser:
    from kvcore import __version__

    parser = _Parser(
        prog="kvcore", description="Lay out, size and manage the KV cache of LLM serving "
        "engines.")
    parser.add_argument("--version", action="version", version=f"kvcore {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    _add_plan(sub)
    try:
        import importlib

        sim_command: Any = importlib.import_module("kvcore.sim.command")
    except ImportError:
        sim_command = None
    if sim_command is not None and hasattr(sim_command, "add_subparser"):
        sim_command.add_subparser(sub)
    from kvcore.sim.tune import add_subparser as add_tune

    add_tune(sub)
    from kvcore.sim.calibrate import add_subparser as add_calibrate

    add_calibrate(sub)
    _add_plugins(sub)
    _add_models(sub)
    from kvcore.deploy.gpus import add_subparser as add_gpus

    add_gpus(sub)
    return parser


def _show_warning(message: Any, category: Any, filename: str, lineno: int,
                  file: Any = None, line: str | None = None) -> None:
    """Warnings as one line each on stderr (``kvcore: warning: ...``)."""
    from kvcore.units import shorten_message

    print(f"kvcore: warning: {shorten_message(str(message))}", file=sys.stderr)


def _internal_error(command: str, exc: BaseException, as_json: bool) -> int:
    """Last resort for an input that slipped past validation: one line, exit 2."""
    from kvcore.units import shorten

    message = (f"cannot handle this input ({type(exc).__name__}: {shorten(str(exc))}); "
               f"this is a kvcore bug, please report it with the command line")
    if as_json:
        print(dumps_json({"error": {"type": "InternalError", "message": message}}))
    else:
        print(f"kvcore {command}: error: {message}", file=sys.stderr)
    return 2


#: options that name files (checked before any command runs)
_PATH_OPTIONS = ("model", "specs", "csv", "plot", "trace", "efficiency", "output")


def _check_paths(args: argparse.Namespace) -> None:
    """A path option that no file system accepts (a NUL byte, a name over 255 bytes, a
    path over 4,096 bytes) is a ConfigError naming the option, before anything runs."""
    from kvcore.units import shorten

    for dest in _PATH_OPTIONS:
        value = getattr(args, dest, None)
        if not isinstance(value, str):
            continue
        flag = "MODEL" if dest == "model" else f"--{dest}"
        why = None
        if "\x00" in value:
            why = "it contains a NUL byte"
        elif len(value.encode("utf-8", "surrogateescape")) > 4096 or any(
                len(part.encode("utf-8", "surrogateescape")) > 255
                for part in value.split(os.sep)):
            why = "the name is too long (a file name has at most 255 bytes)"
        if why:
            raise ConfigError(f"{flag} {shorten(value)}: not a usable path ({why})",
                              field=dest, value=shorten(value))
    if getattr(args, "command", None) == "plan" and getattr(args, "plot", None):
        from kvcore.sim.command import check_plot_path

        check_plot_path(args.plot)  # folder, permissions, a file type matplotlib writes


#: vLLM flags (``vllm serve``) and the kvcore option that does the same, for flags a
#: kvcore command does not accept under vLLM's name
VLLM_FLAG_ALIASES = {"--tensor-parallel-size": "--tp", "-tp": "--tp",
                     "--pipeline-parallel-size": "--pp", "-pp": "--pp",
                     "--data-parallel-size": "--dp", "-dp": "--dp",
                     "--kv-cache-memory-bytes": "--kv-cache-memory",
                     "--num-gpu-blocks-override": "--num-blocks"}


def suggest_flags(unknown: Sequence[str], parser: argparse.ArgumentParser) -> str:
    """`` (did you mean --x?)`` for unknown options close to one of ``parser``'s (edit
    similarity, difflib) or spelled as vLLM spells a kvcore option; ``""`` when none."""
    import difflib

    options = [o for o in parser._option_string_actions if o.startswith("--")]
    hints: list[str] = []
    for token in unknown:
        if not token.startswith("-"):
            continue
        flag = token.split("=", 1)[0]
        alias = VLLM_FLAG_ALIASES.get(flag)
        if alias in parser._option_string_actions:
            hints.append(f"{flag} is vLLM's spelling of {alias} here")
            continue
        # never the opposite switch: --no-enable-x is not "close" to --enable-x
        negated = flag.startswith("--no-")
        close = difflib.get_close_matches(
            flag, [o for o in options if o.startswith("--no-") == negated], n=1,
            cutoff=0.75)
        if close:
            hints.append(f"did you mean {close[0]} (for {flag})?")
    return f" ({'; '.join(hints)})" if hints else ""


def _command_parser(parser: argparse.ArgumentParser, command: str | None
                    ) -> argparse.ArgumentParser:
    """The subparser of ``command`` (the top-level parser when there is none)."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction) and command in action.choices:
            return action.choices[command]  # type: ignore[no-any-return]
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the CLI; returns the exit status (0 ok, 2 bad input)."""
    argv = _join_values(_dotted_args(list(sys.argv[1:] if argv is None else argv)))
    _Parser.json_errors = "--json" in argv
    parser = build_parser()
    try:
        args, unknown = parser.parse_known_args(argv)
        if unknown:  # named by the command's own parser, pointing to its --help
            sub = _command_parser(parser, getattr(args, "command", None))
            sub.error(f"unrecognized arguments: {' '.join(unknown)}"
                      f"{suggest_flags(unknown, sub)}")
    except SystemExit as exc:  # --help, --version, or a usage error (already printed)
        return int(exc.code or 0)
    if not getattr(args, "command", None):
        parser.print_help()
        return 2
    as_json = bool(getattr(args, "json", False))
    try:
        with warnings.catch_warnings():
            warnings.showwarning = _show_warning
            _check_paths(args)
            return int(args.func(args) or 0)
    except KVCoreError as exc:
        if as_json:
            print(dumps_json({"error": exc.to_dict()}))
        else:
            ledger = (getattr(exc, "extra", None) or {}).get("ledger")
            if ledger and getattr(args, "explain", False):
                # the not-fit message points at --explain: itemise the budget it
                # could not meet (stdout), then the one-line error (stderr)
                from kvcore.deploy.sweep import print_ledger

                print_ledger(ledger)
            print(f"kvcore {args.command}: error: {exc.message}", file=sys.stderr)
        return 2
    except RecursionError as exc:  # e.g. a pathological input nested too deeply
        return _internal_error(args.command, exc, as_json)
    except (MemoryError, OverflowError) as exc:
        return _internal_error(args.command, exc, as_json)
    except BrokenPipeError:  # e.g. `kvcore plan ... --json | head`
        try:
            sys.stdout = open(os.devnull, "w")  # noqa: SIM115
        except OSError:
            pass
        return 0
    except KeyboardInterrupt as exc:  # Ctrl-C aborts: one line, exit 130 (128 + SIGINT)
        from kvcore.plugins import PluginInterrupt

        why = exc.message if isinstance(exc, PluginInterrupt) else "interrupted"
        print(f"kvcore {args.command}: {why}", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
