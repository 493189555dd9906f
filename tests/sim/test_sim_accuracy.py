"""The step-time model against published vLLM measurements (issue 21 item 4).

Rows: tests/data/sim_accuracy/measurements.json (each with its URL and quoted figures);
the coefficients (:data:`kvcore.sim.timing.DEFAULT_EFFICIENCY`) were fitted on the rows
marked ``fit`` only (with the fast loop; the figures here come from the engine).  The
rows added as v3 (``added`` starts with ``v3``) were pre-registered: committed, held out,
before kvcore computed any figure for them.  The goal of the issue, on the held-out rows:
median absolute error of output throughput <= 15 %, TPOT <= 15 %, TTFT <= 25 %; bounds
here are the measured ones, goals not met are strict xfails.  Deterministic: the
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
    # all held-out rows (v1 + v2 + the pre-registered v3): 13.4 % and 10.4 % measured
    assert s["output_throughput"] <= 0.15, s
    assert s["tpot_ms"] <= 0.15, s
    # four held-out TTFTs (AWQ 16k prefill -38 %, three v3 sweep first points +28 to
    # +68 %): median 43.6 % measured, bounded here so it cannot get worse unnoticed; the
    # goal is the xfail below
    assert s["ttft_ms"] <= 0.44, s


@pytest.mark.xfail(strict=True, reason="held-out TTFT misses the issue's 25 % goal: "
                   "median 43.6 % over 4 rows; docs/SIM_ACCURACY.md")
def test_heldout_ttft_goal(results):
    assert accuracy.summary(results, "holdout")["ttft_ms"] <= 0.25


def _v3(results, rows):
    v3 = {r["id"] for r in rows if str(r.get("added", "")).startswith("v3")}
    return [r for r in results if r["id"] in v3]


def test_preregistered_v3_rows_are_all_held_out(rows):
    v3 = [r for r in rows if str(r.get("added", "")).startswith("v3")]
    assert len(v3) >= 15
    assert {r["split"] for r in v3} == {"holdout"}
    assert all("pre-registered" in r["added"] for r in v3)


def test_preregistered_v3_errors_as_measured(results, rows):
    # the first evaluation of the 18 pre-registered rows (no refit): 22.3 % throughput
    # (15 rows), 20.7 % TPOT (18 rows), 49.4 % TTFT (3 rows); bounded at what was measured
    s = accuracy.summary(_v3(results, rows), "holdout")
    assert s["output_throughput"] <= 0.23, s
    assert s["tpot_ms"] <= 0.21, s
    assert s["ttft_ms"] <= 0.50, s


@pytest.mark.xfail(strict=True, reason="the pre-registered v3 rows alone miss the issue's "
                   "goals (TP-2 H100 72B -23 % throughput, gemma-3-4b decode -20 %); "
                   "docs/SIM_ACCURACY.md")
def test_preregistered_v3_goals(results, rows):
    s = accuracy.summary(_v3(results, rows), "holdout")
    assert s["output_throughput"] <= 0.15 and s["tpot_ms"] <= 0.15, s
    assert s["ttft_ms"] <= 0.25, s


def test_select_rows_filters_and_rejects_unknown(rows):
    from kvcore.errors import KVCoreError

    got = accuracy.select_rows(rows, only="tt-gemma,dl-qwen2-72b")
    assert got and all("tt-gemma" in r["id"] or "dl-qwen2-72b" in r["id"] for r in got)
    assert len(accuracy.select_rows(rows, added="v3")) == sum(
        str(r.get("added", "")).startswith("v3") for r in rows)
    with pytest.raises(KVCoreError, match="no measurement row"):
        accuracy.select_rows(rows, only="no-such-row")


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


@pytest.mark.parametrize("only", ["qwen3-1.7b-a100-80gb-128-128-c1"])
def test_cli_prints_a_dash_for_a_split_without_rows(capsys, only, rows):
    """``python -m kvcore.sim.accuracy --only ID`` on one fit row: the holdout split has
    no rows, so its medians are "-", not "nan %" (tester 2)."""
    assert [r["split"] for r in accuracy.select_rows(rows, only)] == ["fit"]
    assert accuracy.main(["--only", only]) == 0
    lines = capsys.readouterr().out.splitlines()
    hold = next(ln for ln in lines if ln.startswith("holdout:"))
    fit = next(ln for ln in lines if ln.startswith("fit:"))
    assert "nan" not in hold and hold.count(" -") == 3, hold
    assert "%" in fit and "nan" not in fit
