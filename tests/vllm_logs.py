"""The public vLLM start-up logs of tests/data/vllm_logs, and kvcore's prediction for each.

Each ``*.json`` there is one log: its URL, the vLLM release (``engine``), model (an
embedded name or a config under ``configs/``), GPU (catalog name, or ``gpu_memory_gib``:
CUDA's total as the log prints it), flags, whether vLLM started, and the logged figures.
``set`` is ``calibration`` (looked at while writing the rules of
:mod:`kvcore.deploy.engines`) or ``heldout`` (not).  Logs of the second pass also carry
``added`` (when, pre-registered as held-out before kvcore's figure was computed),
``first_kvcore`` (that first figure, with the commit of the rules) and, where a log's
first error led to a rule, ``moved`` (why it is calibration now); ``source`` stands in
for ``url`` where the search index did not name the repository.  ``flags`` take
``max_num_seqs``, ``max_num_batched_tokens``, ``enforce_eager``,
``disable_custom_all_reduce`` (what vLLM did when its log says "Custom allreduce is
disabled") and ``flashinfer_sampler`` (false where the log says FlashInfer's sampler is
not available).  ``python tests/vllm_logs.py`` prints the table docs/ENGINE_PROFILES.md
quotes.
"""

from __future__ import annotations

import json
import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import Any

DATA = Path(__file__).parent / "data" / "vllm_logs"
GIB = 1 << 30


def load_cases() -> list[dict[str, Any]]:
    return [json.loads(p.read_text()) for p in sorted(DATA.glob("*.json"))]


def _model(case: dict[str, Any]) -> Any:
    from kvcore.models.config import parse_model_config

    m = case["model"]
    if m.startswith("configs/"):
        raw = json.loads((DATA / m).read_text())
        raw.pop("_source", None)
        return parse_model_config(raw, name=Path(m).stem)
    return m


@dataclass
class Prediction:
    kv_gib: float
    kv_tokens: int | None
    fits: bool
    reasons: list[str]


def predict(case: dict[str, Any]) -> Prediction:
    """kvcore's KV budget (GiB per rank), KV tokens and fits verdict for one log."""
    from kvcore.deploy.budget import plan_on_gpu

    flags = dict(case.get("flags", {}))
    kw: dict[str, Any] = {}
    if "gpu" in case:
        kw["gpu"] = case["gpu"]
    else:
        kw["gpu_memory_bytes"] = int(case["gpu_memory_gib"] * GIB)
    plan_kw: dict[str, Any] = {"max_model_len": case["max_model_len"],
                               "tensor_parallel_size": case.get("tensor_parallel_size", 1),
                               "pipeline_parallel_size": case.get("pipeline_parallel_size", 1)}
    if flags.get("max_num_batched_tokens"):
        plan_kw["max_num_batched_tokens"] = flags["max_num_batched_tokens"]
    cfg = plan_on_gpu(_model(case), engine=case["engine"],
                      gpu_memory_utilization=case["gpu_memory_utilization"],
                      max_num_seqs=flags.get("max_num_seqs"),
                      cuda_graphs=not flags.get("enforce_eager", False),
                      disable_custom_all_reduce=flags.get("disable_custom_all_reduce", False),
                      flashinfer_sampler=flags.get("flashinfer_sampler", True),
                      raise_if_not_fits=False, **kw, **plan_kw)
    s = cfg.stats
    ledger = s.get("ledger") or {}
    kv = ledger.get("kv_cache_memory_bytes")
    kv_gib = (kv if kv is not None else s.get("kv_cache_memory_bytes", 0)) / GIB
    reasons = [c["message"] for c in s.get("ceilings", []) if c.get("fatal")]
    fits = bool(s.fits) and not reasons
    from kvcore.deploy.ceilings import logged_figures

    tokens = logged_figures(cfg, case["engine"]).get("gpu_kv_cache_size_tokens") \
        if s.fits else None
    return Prediction(kv_gib=kv_gib, kv_tokens=tokens, fits=fits, reasons=reasons)


def error(case: dict[str, Any], p: Prediction) -> float | None:
    """Relative error of the KV budget (or, without one logged, of the KV tokens)."""
    lg = case.get("logged", {})
    if "available_kv_cache_gib" in lg and lg["available_kv_cache_gib"] > 0.5:
        return abs(p.kv_gib - lg["available_kv_cache_gib"]) / lg["available_kv_cache_gib"]
    if "kv_tokens" in lg and p.kv_tokens:
        return abs(p.kv_tokens - lg["kv_tokens"]) / lg["kv_tokens"]
    return None


def table() -> list[dict[str, Any]]:
    rows = []
    for c in load_cases():
        p = predict(c)
        rows.append({"id": c["id"], "set": c["set"], "url": c.get("url") or c.get("source"),
                     "engine": c["engine"],
                     "logged_kv_gib": c.get("logged", {}).get("available_kv_cache_gib"),
                     "logged_tokens": c.get("logged", {}).get("kv_tokens"),
                     "kv_gib": round(p.kv_gib, 2), "kv_tokens": p.kv_tokens,
                     "error": error(c, p), "started": c["started"], "fits": p.fits})
    return rows


if __name__ == "__main__":
    rows = table()
    for r in rows:
        e = f"{r['error']:.1%}" if r["error"] is not None else "-"
        print(f"{r['set']:11s} {r['id']:32s} {r['engine']:13s} logged {r['logged_kv_gib']!s:>6} "
              f"{r['logged_tokens']!s:>7}  kvcore {r['kv_gib']:7.2f} {r['kv_tokens']!s:>7} "
              f"err {e:>6}  started {r['started']!s:5} fits {r['fits']!s:5}")
    for which in ("calibration", "heldout"):
        errs = [r["error"] for r in rows if r["set"] == which and r["error"] is not None]
        agree = sum(r["started"] == r["fits"] for r in rows if r["set"] == which)
        n = sum(r["set"] == which for r in rows)
        med = statistics.median(errs) if errs else float("nan")
        print(f"{which}: median error {med:.1%} over {len(errs)} logs with a figure; "
              f"verdict agrees on {agree}/{n}")
