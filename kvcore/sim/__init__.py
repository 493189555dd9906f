"""Trace-driven simulation of the runtime: trace readers (Mooncake JSONL, Azure CSV,
kvcore JSONL), vLLM's random dataset and arrivals, the clockless replay, the clocked
engine (vLLM's Scheduler loop with a step-time model), serving figures named as
``vllm bench serve`` names them, and the ``kvcore simulate`` command."""

from __future__ import annotations

from kvcore.sim.engine import Engine, EngineResult, SimRequest, StepRecord, run_engine
from kvcore.sim.metrics import format_summary, parse_goodput, serving_metrics
from kvcore.sim.replay import Job, ReplayResult, prepare_jobs, replay
from kvcore.sim.traces import (
    TraceRequest,
    mooncake_ideal_hit_ratio,
    read_azure,
    read_kvcore_jsonl,
    read_mooncake,
    read_trace,
)
from kvcore.sim.workload import arrival_times, random_dataset, with_arrivals

__all__ = [
    "SimRequest",
    "EngineResult",
    "Engine",
    "StepRecord",
    "run_engine",
    "serving_metrics",
    "format_summary",
    "parse_goodput",
    "random_dataset",
    "arrival_times",
    "with_arrivals",
    "Job",
    "ReplayResult",
    "prepare_jobs",
    "replay",
    "TraceRequest",
    "read_trace",
    "read_mooncake",
    "read_azure",
    "read_kvcore_jsonl",
    "mooncake_ideal_hit_ratio",
]
