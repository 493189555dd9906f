"""Tester1 finding 9 on a real trace: the first 150 rows of the Mooncake conversation
trace (Apache-2.0, kvcache-ai/Mooncake FAST'25 traces, copied from /work/shared/traces
into tests/data), 4 replicas, Llama-3.1-8B on H100, --request-rate 10.  Round-robin
hits 0.0552 of prompt tokens (it reads no events); prefix-aware, which trusted
delivered events alone, hit 0.0552 / 0.0552 / 0.0503 at --event-delay 0 / 5 / 50 s
on main at 1b16e34 (the tester saw 0.0568 / 0.0503 / 0.0518 at 9dbf0c1).  With its
routing history and prefix-hash placement it must never hit less than round-robin."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from kvcore.cli import main

TRACE = Path(__file__).parent.parent / "data" / "tester1_mooncake_conversation_150.jsonl"
ARGS = ["simulate", "llama-3.1-8b", "--gpu", "H100", "--max-model-len", "32768",
        "--trace", str(TRACE), "--replicas", "4", "--request-rate", "10", "--json"]


def _hit(capsys: Any, router: str, delay: str) -> float:
    assert main([*ARGS, "--router", router, "--event-delay", delay]) == 0
    return float(json.loads(capsys.readouterr().out)["prefix_hit_ratio"])


@pytest.mark.parametrize("delay", ["0", "5", "50"])
def test_prefix_aware_never_loses_hits_to_round_robin(capsys: Any, delay: str) -> None:
    rr = _hit(capsys, "round-robin", delay)
    pa = _hit(capsys, "prefix-aware", delay)
    assert rr > 0  # the slice does share prefixes (multi-turn conversations)
    assert pa >= rr, (delay, pa, rr)
