#!/usr/bin/env python3
"""Differential fuzz of kvcore's planner against vLLM 0.32's (issue 14).

Random layer sets over every kind both libraries have (full, sliding, chunked local,
cross attention, MLA, sliding MLA, Mamba states, sink full attention, quantized
``kv_cache_dtype``, mixed head counts, drafter layers, block-outermost layouts, hybrid
manager disabled) with random budgets and lengths are written as cases of
``../shared/vllm-reference/oracle.py`` (vLLM's own ``get_kv_cache_configs``, run once
over the folder with ``--all``) and planned by kvcore from the same layers.

The rule checked: kvcore plans whenever vLLM plans, and kvcore's max concurrency is >=
vLLM's (with ``max_model_len -1``: kvcore's length >= vLLM's), except where vLLM's plan
is unsafe, listed apart with the reason:

* ``sink``: vLLM does not reserve the sink blocks its static-sink backend writes
  (blocks 1..cdiv(sink_len, block_size) of every sink layer), so a request can be given
  them; kvcore reserves them and refuses a budget they do not fit (issue 13 item 7).

Where vLLM raises, the reason is recorded (kvcore's plan is then checked by kvcore's own
invariants: every layer in one group, num_blocks x bytes per block <= budget, one request
of max_model_len fits beside the null block).

Usage (from the repository root)::

    .venv/bin/python scripts/fuzz_vs_vllm.py --n 2000 --seed 0
    .venv/bin/python scripts/fuzz_vs_vllm.py --n 40 --seed 7 --save-fixtures tests/data/planner_oracle

``--save-fixtures DIR`` writes each case (``NAME.json``, the oracle's input),
vLLM's answer (``NAME.expected.json``) and kvcore's specs file (``NAME.kvcore.txt``, JSON)
for tests/test_planner_oracle.py, which replays them without vLLM.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
import zlib
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
ORACLE = ROOT.parent / "shared" / "vllm-reference" / "oracle.py"
VLLM_PYTHON = ROOT / ".vllm-ref" / "venv" / "bin" / "python"

HEADS = (1, 2, 4, 8)
HEAD_SIZES = (64, 128, 256)
KV_DTYPES = ("auto", "auto", "auto", "fp8", "int8_per_token_head")
LENGTHS = (2048, 4096, 8192, 32_768, 131_072)
MAMBA_SHAPES = (
    (((3, 8192), (8192, 16)), ("bfloat16", "float32")),          # Mamba-1 (Jamba)
    (((3, 4352), (64, 64, 128)), ("bfloat16", "float32")),        # Mamba-2
    (((3, 1024), (16, 64, 64)), ("bfloat16", "bfloat16")),        # small Mamba-2
)


# ---- one random case -----------------------------------------------------------------

def _attn(rng: random.Random, block: int, kv_dtype: str | None = None) -> dict[str, Any]:
    d = {"block_size": block, "num_kv_heads": rng.choice(HEADS),
         "head_size": rng.choice(HEAD_SIZES)}
    dt = kv_dtype if kv_dtype is not None else rng.choice(KV_DTYPES)
    if dt != "auto":
        d["kv_cache_dtype"] = dt
    return d


def random_case(rng: random.Random, name: str) -> dict[str, Any]:
    """A case in a neutral form: ``layers`` [(name, kind, fields)], options."""
    family = rng.choice(["dense", "swa", "swa", "chunked", "mla", "mamba", "mamba",
                         "cross", "sink", "mix", "mix"])
    block = rng.choice((16, 16, 32, 64))
    max_len = rng.choice(LENGTHS)
    mnbt = rng.choice((2048, 8192))
    opts: dict[str, Any] = {"max_model_len": max_len, "max_num_batched_tokens": mnbt}
    layers: list[tuple[str, str, dict[str, Any]]] = []
    n = rng.randint(2, 48)
    base = _attn(rng, block)
    kv_dtype = base.get("kv_cache_dtype", "auto")

    def full(i: int, spec: dict[str, Any] | None = None) -> None:
        layers.append((f"model.layers.{i}.attn", "full", dict(spec or base)))

    if family == "dense":
        mixed = rng.random() < 0.4
        for i in range(n):
            full(i, _attn(rng, block, kv_dtype) if mixed and rng.random() < 0.3 else base)
    elif family in ("swa", "chunked"):
        ratio = rng.choice((1, 2, 3, 5, 7))
        window = rng.choice((128, 512, 1024, 4096, 8192))
        other_heads = rng.random() < 0.25
        for i in range(n):
            if i % (ratio + 1) == ratio:
                full(i)
            else:
                spec = dict(_attn(rng, block, kv_dtype) if other_heads else base)
                if family == "swa":
                    spec["sliding_window"] = window
                    layers.append((f"model.layers.{i}.attn", "sliding_window", spec))
                else:
                    spec["attention_chunk_size"] = window
                    layers.append((f"model.layers.{i}.attn", "chunked_local", spec))
    elif family == "mla":
        mla_block = 64
        dt = rng.choice(("auto", "auto", "fp8"))
        spec = {"block_size": mla_block, "num_kv_heads": 1, "head_size": 576}
        if dt != "auto":
            spec["kv_cache_dtype"] = dt
        swa = rng.random() < 0.4
        window = rng.choice((128, 512, 2048))
        for i in range(n):
            if swa and i % 2:
                layers.append((f"model.layers.{i}.attn", "sliding_window_mla",
                               dict(spec, sliding_window=window)))
            else:
                layers.append((f"model.layers.{i}.attn", "mla", dict(spec)))
        if rng.random() < 0.3:  # an MLA model with plain windowed layers beside it
            for j in range(rng.randint(1, 4)):
                layers.append((f"model.layers.{n + j}.attn", "sliding_window",
                               dict(_attn(rng, mla_block, "auto"), sliding_window=window)))
    elif family == "mamba":
        shapes, dtypes = rng.choice(MAMBA_SHAPES)
        every = rng.choice((2, 4, 6, 8))
        with_swa = rng.random() < 0.3
        if max_len == 131_072:
            max_len = opts["max_model_len"] = 32_768
        for i in range(n):
            if i % every == every - 1:
                full(i)
            elif with_swa and i % every == 0:
                layers.append((f"model.layers.{i}.attn", "sliding_window",
                               dict(base, sliding_window=rng.choice((512, 2048)))))
            else:
                layers.append((f"model.layers.{i}.mamba", "mamba",
                               {"block_size": max_len, "shapes": [list(s) for s in shapes],
                                "dtypes": list(dtypes)}))
        if not any(k != "mamba" for _, k, _ in layers):
            full(n)
        opts["enable_prefix_caching"] = False
        opts["kernel_block_size"] = 16
    elif family == "cross":
        n = max(2, n // 2)
        for i in range(n):
            full(i)
            layers.append((f"model.decoder.layers.{i}.encoder_attn", "cross_attention",
                           dict(base)))
        opts["max_num_encoder_input_tokens"] = rng.choice((1500, 3000, 4096))
        opts["enable_prefix_caching"] = False
        max_len = opts["max_model_len"] = rng.choice((448, 2048, 4096))
    elif family == "sink":
        sink = rng.choice((16, 64, 128, 1024, 4096))
        for i in range(n):
            layers.append((f"model.layers.{i}.attn", "sink_full",
                           dict(base, sink_len=sink)))
    else:  # mix: random kinds from a palette
        palette = ["full", "sliding_window", "sliding_window", "chunked_local"]
        window = rng.choice((256, 1024, 4096))
        for i in range(n):
            kind = rng.choice(palette)
            spec = dict(_attn(rng, block, kv_dtype) if rng.random() < 0.3 else base)
            if kind == "sliding_window":
                spec["sliding_window"] = window
            elif kind == "chunked_local":
                spec["attention_chunk_size"] = window * 2
            layers.append((f"model.layers.{i}.attn", kind, spec))
    if family in ("dense", "swa", "mix", "chunked") and rng.random() < 0.25:
        # drafter layers (EAGLE / MTP): full attention with other head counts at the end
        for j in range(rng.randint(1, 2)):
            layers.append((f"drafter.layers.{j}.attn", "full", _attn(rng, block, "auto")))
    has_state = any(k == "mamba" for _, k, _ in layers)
    if not has_state and family != "cross" and rng.random() < 0.12:
        opts["disable_hybrid_kv_cache_manager"] = True
    if not has_state and family not in ("cross", "sink") and rng.random() < 0.15:
        opts["kv_cache_layout"] = "BLHNC"
    if family not in ("mamba", "cross") and rng.random() < 0.08:
        opts["max_model_len"] = -1
    # nvfp4 for some cases' fp8 attention layers (a side stream keyed by the case name,
    # so the main stream, and earlier seeds' cases, stay as they were)
    if random.Random(zlib.crc32(name.encode())).random() < 0.3:
        for _, k, f in layers:
            if f.get("kv_cache_dtype") == "fp8" and k not in ("mla", "sliding_window_mla"):
                f["kv_cache_dtype"] = "nvfp4"
    # a budget around what one to a few hundred requests need, at most ~40,000 blocks
    # (vLLM's KVCacheManager builds one Python object per block)
    per_token = sum(_bytes_per_token(k, f) for _, k, f in layers)
    length = max_len if opts["max_model_len"] > 0 else 32_768
    top = max(2.0, min(300.0, 40_000 * block / length))
    factor = math.exp(rng.uniform(math.log(0.6), math.log(top)))
    opts["kv_cache_memory_bytes"] = int(max(per_token, 1) * length * factor) + \
        rng.randint(0, 1 << 20)
    return {"name": name, "family": family, "layers": layers, "options": opts}


def _bytes_per_token(kind: str, f: dict[str, Any]) -> float:
    if kind == "mamba":
        return 0.0
    item = {"fp8": 1, "int8_per_token_head": 1, "nvfp4": 0.6}.get(
        f.get("kv_cache_dtype", "auto"), 2)
    heads, head = f.get("num_kv_heads", 1), f["head_size"]
    k = 1 if kind in ("mla", "sliding_window_mla") else 2
    return heads * head * item * k


# ---- conversions ---------------------------------------------------------------------

ORACLE_TYPES = {"full": "full", "sliding_window": "sliding_window",
                "chunked_local": "chunked_local", "cross_attention": "cross_attention",
                "mla": "mla", "sliding_window_mla": "sliding_window_mla", "mamba": "mamba",
                "sink_full": "sink_full"}
KVCORE_TYPES = {"full": "full_attention", "sliding_window": "sliding_window",
                "chunked_local": "chunked_local_attention",
                "cross_attention": "cross_attention", "mla": "mla_attention",
                "sliding_window_mla": "sliding_window_mla", "mamba": "mamba",
                "sink_full": "sink_full_attention"}


def to_oracle(case: dict[str, Any]) -> dict[str, Any]:
    """The case in oracle.py's schema (see its docstring)."""
    o = case["options"]
    out: dict[str, Any] = {
        "name": case["name"], "available_memory": o["kv_cache_memory_bytes"],
        "max_model_len": o["max_model_len"],
        "max_num_batched_tokens": o["max_num_batched_tokens"],
        "model_dtype": "bfloat16", "layout": o.get("kv_cache_layout", "LBNHC"),
        "enable_prefix_caching": o.get("enable_prefix_caching", True),
        "disable_hybrid_kv_cache_manager": o.get("disable_hybrid_kv_cache_manager", False),
        "mamba_cache_mode": "none",
        "layers": {n: dict(f, type=ORACLE_TYPES[k]) for n, k, f in case["layers"]},
    }
    if o.get("max_model_len") == -1:
        out["max_model_len_upper"] = 1 << 20
    if "max_num_encoder_input_tokens" in o:
        out["max_num_encoder_input_tokens"] = o["max_num_encoder_input_tokens"]
    if "kernel_block_size" in o:
        out["hybrid_mamba_alignment"] = {"kernel_block_alignment": o["kernel_block_size"]}
    return out


def to_kvcore(case: dict[str, Any]) -> dict[str, Any]:
    """The case as a kvcore specs file (docs/DESIGN.md section 5)."""
    layers = {}
    for n, k, f in case["layers"]:
        d = {"type": KVCORE_TYPES[k], **f, }
        if k != "mamba":
            d["dtype"] = "bfloat16"
        layers[n] = d
    opts = dict(case["options"])
    if opts.get("max_model_len") == -1:
        opts["max_model_len_limit"] = 1 << 20
    return {"options": opts, "layers": layers}


# ---- running both --------------------------------------------------------------------

def run_oracle(folder: Path, names: list[str], python: Path, oracle: Path, jobs: int
               ) -> None:
    """oracle.py --all over the cases ``names`` of ``folder`` (split in ``jobs``
    sub-folders run side by side)."""
    files = [folder / f"{n}.json" for n in names]
    parts = [folder / f"part{j}" for j in range(jobs)]
    for j, part in enumerate(parts):
        part.mkdir(exist_ok=True)
        for f in files[j::jobs]:
            f.rename(part / f.name)
    env = dict(os.environ, VLLM_LOGGING_LEVEL="ERROR")
    procs = [subprocess.Popen([str(python), str(oracle), "--all", str(p)], env=env,
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
             for p in parts]
    for p in procs:
        _, err = p.communicate()
        if p.returncode:
            raise SystemExit(f"oracle.py failed: {err[-2000:]}")
    for part in parts:
        for f in part.iterdir():
            f.rename(folder / f.name)
        part.rmdir()


def plan_kvcore(specs_file: dict[str, Any]) -> dict[str, Any]:
    """kvcore's plan summary, or {"error": ...}."""
    from kvcore.errors import KVCoreError
    from kvcore.planning import plan_from_specs_file, plan_to_dict

    try:
        cfg = plan_from_specs_file(specs_file)
    except KVCoreError as exc:
        return {"error": {"type": type(exc).__name__, "message": str(exc)}}
    out = plan_to_dict(cfg)
    names = sorted(n for g in cfg.kv_cache_groups for n in g.layer_names)
    skipped = cfg.stats.skipped_layers
    budget = specs_file["options"]["kv_cache_memory_bytes"]
    ok = names == sorted(set(specs_file["layers"]) - set(skipped)) and (
        cfg.num_blocks * cfg.bytes_per_block <= budget) and (
        cfg.blocks_per_request + 1 + cfg.num_reserved_blocks <= cfg.num_blocks)
    return {"max_concurrency": out["max_concurrency"], "num_blocks": out["num_blocks"],
            "max_model_len": out["max_model_len"], "groups": len(out["groups"]),
            "strategy": out["strategy"], "invariants": ok}


def unsafe_reason(case: dict[str, Any]) -> str | None:
    if any(k == "sink_full" for _, k, _ in case["layers"]):
        return ("sink: vLLM 0.32 does not reserve the sink blocks its static-sink "
                "backend writes; kvcore reserves them (issue 13 item 7)")
    return None


def vllm_error_reason(err: dict[str, Any]) -> str:
    msg = err.get("message", "")
    t = err.get("type", "")
    if "memory" in msg.lower() or "not enough" in msg.lower() or "available" in msg.lower():
        return "vLLM: not enough memory for one request"
    if t == "NotImplementedError" or "page size" in msg.lower() or "unify" in msg.lower():
        return "vLLM: page sizes it cannot unify (kvcore scales then pads)"
    if "promote" in msg.lower() or "hybrid" in msg.lower():
        return "vLLM: hybrid layout it cannot build with the hybrid manager disabled"
    if t == "StopIteration":
        return ("vLLM: its block-outermost packing of mixed page sizes fails "
                "(StopIteration in _get_packed_kv_cache_groups)")
    if "bounded_replay" in msg:
        return ("vLLM: promoting sliding-window MLA to MLA (hybrid manager disabled) "
                "passes a keyword MLAAttentionSpec does not take")
    if "not assigned to any group" in msg:
        return ("vLLM: its grouping leaves layers out (AssertionError: Some layers are "
                "not assigned to any group)")
    if "same window size" in msg:
        return "vLLM: sliding layers of different windows in one group refused"
    return f"vLLM: {t}: {msg[:120]}"


def compare(case: dict[str, Any], vllm: dict[str, Any], kv: dict[str, Any]
            ) -> tuple[str, str, float | None]:
    """(outcome, detail, gain).  Outcomes: ok, unsafe, vllm_raises, both_raise, FAIL."""
    v_err = vllm.get("error")
    k_err = kv.get("error")
    if v_err:
        reason = vllm_error_reason(v_err)
        if k_err:
            return "both_raise", f"{reason} / kvcore: {k_err['type']}", None
        if not kv.get("invariants"):
            return "FAIL", f"{reason}; kvcore's plan breaks its invariants", None
        return "vllm_raises", reason, None
    unsafe = unsafe_reason(case)
    if k_err:
        if unsafe and k_err["type"] == "NotEnoughMemoryError":
            return "unsafe", unsafe, None
        return "FAIL", f"kvcore raised {k_err['type']}: {k_err['message'][:200]}", None
    if not kv.get("invariants"):
        return "FAIL", "kvcore's plan breaks its invariants", None
    if case["options"]["max_model_len"] == -1:
        v_len = vllm.get("resolved", {}).get("max_model_len_after") or 0
        if kv["max_model_len"] < v_len:
            if unsafe:
                return "unsafe", unsafe, kv["max_model_len"] / max(v_len, 1)
            return "FAIL", f"kvcore max_model_len {kv['max_model_len']} < vLLM's {v_len}", None
        return "ok", "", kv["max_model_len"] / max(v_len, 1)
    v_conc, k_conc = vllm.get("max_concurrency"), kv.get("max_concurrency")
    if v_conc is None or k_conc is None:
        return ("ok", "", None) if v_conc is None else ("FAIL", "kvcore concurrency None", None)
    if k_conc < v_conc * (1 - 1e-9):
        if unsafe:
            return "unsafe", unsafe, k_conc / v_conc
        return "FAIL", f"kvcore {k_conc:.6g} < vLLM {v_conc:.6g}", k_conc / v_conc
    return "ok", "", k_conc / v_conc


def _trimmed(result: dict[str, Any]) -> dict[str, Any]:
    """The fields of an oracle answer the comparison reads (fixtures stay small)."""
    keep = {k: result[k] for k in ("name", "vllm_version", "error", "num_blocks",
                                   "max_concurrency", "kv_cache_capacity_tokens",
                                   "estimated_max_model_len") if k in result}
    if "resolved" in result:
        keep["resolved"] = {k: result["resolved"].get(k) for k in (
            "layout", "max_model_len", "max_model_len_after")}
    if "groups" in result:
        keep["groups"] = [{k: g.get(k) for k in ("type", "block_size", "page_size_bytes",
                                                 "num_layers")} for g in result["groups"]]
    return keep


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=2000, help="random layouts (default 2000)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--jobs", type=int, default=2, help="oracle processes side by side")
    ap.add_argument("--vllm-python", type=Path, default=VLLM_PYTHON)
    ap.add_argument("--oracle", type=Path, default=ORACLE)
    ap.add_argument("--workdir", type=Path, help="keep the cases here (default: a temp dir)")
    ap.add_argument("--save-fixtures", type=Path, metavar="DIR",
                    help="write cases, vLLM's answers and kvcore specs files to DIR")
    ap.add_argument("--report", type=Path, help="write every outcome as JSON here")
    ap.add_argument("--reuse", action="store_true",
                    help="with --workdir: keep vLLM answers already there (re-check "
                         "kvcore only)")
    args = ap.parse_args(argv)
    if not args.vllm_python.exists() or not args.oracle.exists():
        print(f"needs vLLM's reference: {args.vllm_python} and {args.oracle} "
              f"(bash ../shared/vllm-reference/setup.sh)", file=sys.stderr)
        return 2
    rng = random.Random(args.seed)
    cases = [random_case(random.Random(rng.getrandbits(64)), f"fuzz{args.seed}_{i:05d}")
             for i in range(args.n)]
    tmp = None
    if args.workdir:
        folder = args.workdir
        folder.mkdir(parents=True, exist_ok=True)
    else:
        tmp = tempfile.TemporaryDirectory(prefix="kvcore-fuzz-")
        folder = Path(tmp.name)
    def answered(c: dict[str, Any]) -> bool:  # --reuse: same case, answer kept
        case_file = folder / f"{c['name']}.json"
        return bool(args.reuse and args.workdir and case_file.exists()
                    and (folder / f"{c['name']}.expected.json").exists()
                    and json.loads(case_file.read_text()) == to_oracle(c))

    todo = [c for c in cases if not answered(c)]
    for c in todo:
        (folder / f"{c['name']}.json").write_text(json.dumps(to_oracle(c)))
    t0 = time.perf_counter()
    if todo:
        run_oracle(folder, [c["name"] for c in todo], args.vllm_python, args.oracle,
                   max(1, args.jobs))
    t_vllm = time.perf_counter() - t0
    t0 = time.perf_counter()
    rows = []
    for c in cases:
        vllm = json.loads((folder / f"{c['name']}.expected.json").read_text())
        kv = plan_kvcore(to_kvcore(c))
        outcome, detail, gain = compare(c, vllm, kv)
        rows.append({"name": c["name"], "family": c["family"], "outcome": outcome,
                     "detail": detail, "gain": gain, "kvcore": kv,
                     "vllm_max_concurrency": vllm.get("max_concurrency"),
                     "vllm_groups": len(vllm.get("groups", []))})
    t_kv = time.perf_counter() - t0
    if args.save_fixtures:
        out = args.save_fixtures
        out.mkdir(parents=True, exist_ok=True)
        for c in cases:
            name = c["name"]
            (out / f"{name}.json").write_text(json.dumps(to_oracle(c)) + "\n")
            full = json.loads((folder / f"{name}.expected.json").read_text())
            (out / f"{name}.expected.json").write_text(
                json.dumps(_trimmed(full), indent=1) + "\n")
            (out / f"{name}.kvcore.txt").write_text(json.dumps(to_kvcore(c)) + "\n")
    if args.report:
        args.report.write_text(json.dumps(rows, indent=1))
    _summary(rows, args, t_vllm, t_kv)
    if tmp is not None:
        tmp.cleanup()
    return 1 if any(r["outcome"] == "FAIL" for r in rows) else 0


def _summary(rows: list[dict[str, Any]], args: argparse.Namespace, t_vllm: float,
             t_kv: float) -> None:
    from collections import Counter

    counts = Counter(r["outcome"] for r in rows)
    compared = [r for r in rows if r["outcome"] == "ok" and r["gain"] is not None]
    gains = [r["gain"] for r in compared]
    beats = [g for g in gains if g > 1 + 1e-9]
    print(f"kvcore vs vLLM 0.32 planner: {len(rows)} random layouts (seed {args.seed}); "
          f"vLLM {t_vllm:.0f} s, kvcore {t_kv:.1f} s")
    for k in ("ok", "vllm_raises", "both_raise", "unsafe", "FAIL"):
        print(f"  {k:12s} {counts.get(k, 0)}")
    if gains:
        fails = counts.get("FAIL", 0)
        print(f"  compared {len(gains)} (+{fails} FAIL): kvcore >= vLLM on {len(gains)}; "
              f"beats vLLM on "
              f"{len(beats)}; gain median {statistics.median(gains):.4f}x "
              f"(over the {len(beats)} it beats: "
              f"{statistics.median(beats) if beats else 1:.4f}x), largest {max(gains):.3f}x")
    reasons = Counter(r["detail"] for r in rows if r["outcome"] in ("vllm_raises", "unsafe"))
    for reason, n in reasons.most_common(8):
        print(f"  {n:5d} x {reason}")
    for r in [r for r in rows if r["outcome"] == "FAIL"][:15]:
        print(f"  FAIL {r['name']} ({r['family']}): {r['detail']}")
    fam = Counter(r["family"] for r in rows)
    print("  families: " + ", ".join(f"{k} {v}" for k, v in sorted(fam.items())))


if __name__ == "__main__":
    sys.exit(main())
