"""The step-time model against published vLLM measurements (issue 21 item 4).

Rows: tests/data/sim_accuracy/measurements.json (each with its URL and quoted figures);
the coefficients (:data:`kvcore.sim.timing.DEFAULT_EFFICIENCY`) were fitted on the rows
marked ``fit`` only (with the fast loop; the figures here come from the engine).  The goal of the issue, on the held-out rows: median absolute
error of output throughput <= 15 %, TPOT <= 15 %, TTFT <= 25 %.  Deterministic: the
harness (kvcore.sim.fastsim) has no randomness for ``request_rate=inf`` and a seeded
arrival process otherwise.  Re-fitting takes about a minute and a half of CPU: set
KVCORE_SIM_FIT=1 to check that the fit reproduces DEFAULT_EFFICIENCY.
"""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path

import pytest

from kvcore.sim import accuracy
from kvcore.sim.timing import DEFAULT_EFFICIENCY

DATA = Path(__file__).resolve().parents[1] / "data" / "sim_accuracy"


@pytest.fixture(scope="module")
def rows():
    return accuracy.load_measurements(DATA / "measurements.json")


@pytest.fixture(scope="module")
def results(rows):
    # the runtime's whole-state debug check (on in the test suite) would make these
    # long replays take minutes; the engine's own tests run with it
    mp = pytest.MonkeyPatch()
    mp.setenv("KVCORE_CHECK_INVARIANTS", "0")
    try:
        return accuracy.evaluate(rows, DEFAULT_EFFICIENCY, base=DATA)  # the engine
    finally:
        mp.undo()


def test_rows_cite_their_sources(rows):
    assert len(rows) >= 20
    assert len({r["id"] for r in rows}) == len(rows)
    for r in rows:
        assert r["url"].startswith("https://"), r["id"]
        assert r["split"] in ("fit", "holdout")
        assert r["quoted"] and r["measured"]
        assert set(r["measured"]) <= set(accuracy.METRICS)
    assert len({r["model"] for r in rows}) >= 5
    assert len({r["gpu"] for r in rows}) >= 4
    assert {r["tensor_parallel_size"] for r in rows} >= {1, 2}
    held = [r for r in rows if r["split"] == "holdout"]
    assert len(held) >= 10


def test_heldout_errors_meet_the_goals(results):
    s = accuracy.summary(results, "holdout")
    assert s["output_throughput"] <= 0.15, s
    assert s["tpot_ms"] <= 0.15, s
    # the one held-out TTFT (a 16k-token AWQ prefill under --enforce-eager) is 38 % off:
    # bounded here so it cannot get worse unnoticed; the goal is the xfail below
    assert s["ttft_ms"] <= 0.40, s


@pytest.mark.xfail(strict=True, reason="held-out TTFT misses the issue's 25 % goal: one "
                   "held-out row (AWQ, 16k prompt, enforce-eager), -38 %; "
                   "docs/SIM_ACCURACY.md")
def test_heldout_ttft_goal(results):
    assert accuracy.summary(results, "holdout")["ttft_ms"] <= 0.25


def test_fit_sees_only_fit_rows(rows, monkeypatch):
    seen: list[str] = []

    def fake_evaluate(rs, eff, base=None, sim="engine"):
        seen.extend(r["split"] for r in rs)
        return [{"id": r["id"], "split": r["split"],
                 "tpot_ms": {"measured": 1.0, "simulated": 1.0, "error": 0.0}}
                for r in rs]

    monkeypatch.setattr(accuracy, "evaluate", fake_evaluate)
    accuracy.fit(rows, base=DATA, rounds=1, sim="fast")
    assert seen and set(seen) == {"fit"}


@pytest.mark.skipif(not os.environ.get("KVCORE_SIM_FIT"),
                    reason="re-fitting takes minutes of CPU; set KVCORE_SIM_FIT=1")
def test_fit_reproduces_the_default(rows):
    got = accuracy.fit(rows, base=DATA, sim="fast")
    assert dataclasses.asdict(got) == pytest.approx(dataclasses.asdict(DEFAULT_EFFICIENCY))
