"""Trace-driven simulation of the runtime: trace readers (Mooncake JSONL, Azure CSV,
kvcore JSONL), the replay scheduler, and the ``kvcore simulate`` command."""

from __future__ import annotations

from kvcore.sim.replay import Job, ReplayResult, prepare_jobs, replay
from kvcore.sim.traces import (
    TraceRequest,
    mooncake_ideal_hit_ratio,
    read_azure,
    read_kvcore_jsonl,
    read_mooncake,
    read_trace,
)

__all__ = [
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
