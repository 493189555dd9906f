"""Shared helpers of the clocked-simulation tests: a constant-step time model carrying
the API server's two terms, and the small dense plan the differential tests run on."""

from __future__ import annotations

import dataclasses
from functools import cache
from typing import Any

import kvcore
from kvcore.sim.timing import ConstantTimeModel


@dataclasses.dataclass(frozen=True)
class ServedTimeModel(ConstantTimeModel):
    """``step_s + token_s x tokens`` seconds a step (ConstantTimeModel) with the API
    server's share ``request_overhead_s``, serial stage ``api_server_s`` (seconds per
    request) and the way back's ``api_stream_s`` (seconds per streamed chunk), as the
    roofline carries them."""

    request_overhead_s: float = 0.0
    api_server_s: float = 0.0
    api_stream_s: float = 0.0


@cache
def small_plan(max_model_len: int = 4096) -> Any:
    """Llama-3.1-8B with 8 GiB of KV, ``max_num_batched_tokens`` 512 (planned once)."""
    return kvcore.plan_model("llama-3.1-8b", kv_cache_memory_bytes=8 << 30,
                             max_model_len=max_model_len, max_num_batched_tokens=512)
