"""The step-time model against published vLLM measurements (issue 21 item 4).

Rows: tests/data/sim_accuracy/measurements.json (each with its URL and quoted figures);
the coefficients (:data:`kvcore.sim.timing.DEFAULT_EFFICIENCY`, v10) are v2's, fitted on
the v1 + v2 rows marked ``fit``, with terms refitted round by round on every fit row
(v7: three MoE / HBM3 terms; v8: the API server's two serial stages; v9 / v10: compute
and moe_compute), each adopted by a rule fixed before its test rows were read.  Rows
pre-registered later (v3, v5 - v9) were each evaluated once as held out and then, studied
to design the next round, moved to ``fit`` (v*_first_evaluation_*.txt; the protocols
v5_protocol.md ... v12_protocol.md).  Held out now: the v1 / v2 held-out rows, the 7
v10 rows, the 15 v11 rows and the 4 v12 rows (the engine, the tests' figures).  Since
v12 ShareGPT rows are replayed with ShareGPT's output-length shape
(:func:`kvcore.sim.accuracy.sharegpt_output_lengths`), not at their mean lengths.  The
fit rows are checked with the fast loop (kvcore.sim.fastsim, equal to the engine on the
traffic it models) to keep CI short.
The goal of the issue, on held-out rows: median absolute error of output throughput
<= 15 %, TPOT <= 15 %, TTFT <= 25 %; bounds here are the measured ones, goals not met are
strict xfails.  Deterministic.  Re-fitting takes minutes of CPU: set KVCORE_SIM_FIT=1 to
check that the fits reproduce the recorded ones.
"""

from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path

import pytest

from kvcore.sim import accuracy
from kvcore.sim.timing import DEFAULT_EFFICIENCY, Efficiency

DATA = Path(__file__).resolve().parents[1] / "data" / "sim_accuracy"


@pytest.fixture(scope="module")
def rows():
    return accuracy.load_measurements(DATA / "measurements.json")


def _quiet(fn):
    # the runtime's whole-state debug check (on in the test suite) would make these
    # long replays take minutes; the engine's own tests run with it
    mp = pytest.MonkeyPatch()
    mp.setenv("KVCORE_CHECK_INVARIANTS", "0")
    try:
        return fn()
    finally:
        mp.undo()


@pytest.fixture(scope="module")
def results(rows):
    """The held-out rows through the engine (two processes: CI has two cores)."""
    held = [r for r in rows if r["split"] == "holdout"]
    return _quiet(lambda: accuracy.evaluate(held, DEFAULT_EFFICIENCY, base=DATA,
                                            workers=2))


@pytest.fixture(scope="module")
def fit_results(rows):
    """The fit rows through the fast loop."""
    fit = [r for r in rows if r["split"] == "fit"]
    return _quiet(lambda: accuracy.evaluate(fit, DEFAULT_EFFICIENCY, base=DATA,
                                            sim="fast", workers=2))


def _within(s: dict[str, float], **bounds: float) -> None:
    """Each metric's median absolute error at most its bound (the measured value)."""
    for m, bound in bounds.items():
        assert s[m] <= bound, (m, s)


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


def _added(rows, tag):
    ids = {r["id"] for r in rows if str(r.get("added", "")).startswith(tag)}
    return ids


def _of(results, ids):
    return [r for r in results if r["id"] in ids]


def test_v1_v2_heldout_errors_as_measured(results, rows):
    # the v1 + v2 held-out rows (v10 coefficients): 9.7 % throughput (23 rows), 1.1 %
    # TTFT (1 row: the AWQ 16k prefill), 12.4 % TPOT (v10_first_evaluation_E.txt; no
    # ShareGPT row, so v12's length model leaves them as they were)
    old = ({r["id"] for r in rows if r["split"] == "holdout"} - _added(rows, "v10")
           - _added(rows, "v11") - _added(rows, "v12") - _added(rows, "v14")
           - _added(rows, "v15"))
    assert len(old) == 24
    s = accuracy.summary(_of(results, old), "holdout")
    _within(s, output_throughput=0.098, ttft_ms=0.012, tpot_ms=0.125)


@pytest.mark.parametrize("tag, file, n, empty", [
    ("v10", "v10b_rows.json", 7, ["v10c_rows.json"]),
    ("v11", "v11b_rows.json", 15, ["v11c_rows.json", "v11d_rows.json"]),
    ("v12", "v12a_rows.json", 4, []),
    ("v14", "v14b_rows.json", 2, ["v14a_rows.json"])])
def test_sealed_rows_are_preregistered_and_held_out(rows, tag, file, n, empty):
    # held out as sealed (the record as committed); the round's other collectors found
    # none
    here = [r for r in rows if str(r.get("added", "")).startswith(tag)]
    assert len(here) == n and {r["split"] for r in here} == {"holdout"}
    assert all("pre-registered" in r["added"] and r["id"].startswith(file[:4])
               for r in here)
    raw = json.loads((DATA / file).read_text())
    # as committed: an object with a rows list (v10 - v12), or a bare list (v14b)
    sealed = raw if isinstance(raw, list) else accuracy.load_measurements(DATA / file)
    assert [r["id"] for r in sealed] == [r["id"] for r in here]
    assert all(a["measured"] == b["measured"] for a, b in zip(sealed, here))
    assert all(accuracy.load_measurements(DATA / f) == [] for f in empty)


def test_v15_rows_are_the_four_collectors_sealed_files(rows):
    # v15a-d (bare lists, as committed, in that order) are the v15 rows of
    # measurements.json, held out with their figures unchanged
    here = [r for r in rows if str(r.get("added", "")).startswith("v15")]
    sealed = sum((json.loads((DATA / f"v15{c}_rows.json").read_text()) for c in "abcd"), [])
    assert [r["id"] for r in sealed] == [r["id"] for r in here] and len(here) == 50
    assert all(a["measured"] == b["measured"] and a.get("excluded") == b.get("excluded")
               for a, b in zip(sealed, here))
    assert all(r["split"] == "holdout" and "pre-registered" in r["added"] for r in here)


def test_v10_errors_as_measured(results, rows):
    # the one evaluation (v10_first_evaluation_E.txt): 4.5 % throughput (7 rows), 8.0 %
    # TTFT (2), 4.2 % TPOT (7); with v12's ShareGPT length model 2.6 / 7.5 / 4.3 %
    # (v12_first_evaluation_G.txt)
    s = accuracy.summary(_of(results, _added(rows, "v10")), "holdout")
    _within(s, output_throughput=0.026, ttft_ms=0.076, tpot_ms=0.043)


def test_v11_errors_as_measured(results, rows):
    # the one evaluation (v11_first_evaluation_A_E.txt, the default): 8.4 % throughput
    # (15 rows), 68.0 % TTFT (3), 33.7 % TPOT (15): the H100 PCIe decode too slow, the
    # 4090's 32 requests/s queue (v11_protocol.md, outcome).  With v12's ShareGPT length
    # model (v12_first_evaluation_G.txt; not blind: these rows motivated it): 6.1 /
    # 53.4 / 33.8 %
    s = accuracy.summary(_of(results, _added(rows, "v11")), "holdout")
    _within(s, output_throughput=0.062, ttft_ms=0.534, tpot_ms=0.339)


def test_v12_errors_as_measured(results, rows):
    # the one evaluation (v12_first_evaluation_G.txt = _A.txt on these rows: no ShareGPT
    # row): 9.7 % throughput (4 rows), 52.2 % TTFT (4), 8.3 % TPOT (4); the H200's TTFT
    # too long at concurrency 1 and 16 (v12_protocol.md, outcome)
    s = accuracy.summary(_of(results, _added(rows, "v12")), "holdout")
    _within(s, output_throughput=0.098, ttft_ms=0.523, tpot_ms=0.084)


def test_v14_errors_as_measured(results, rows):
    # the one evaluation (v14_evaluation.txt, candidate A, the engine): 8.8 % throughput
    # (2 rows), 24.0 % TTFT (1), 34.3 % TPOT (2): Llama-3.3-70B at TP 4 on A100 PCIe,
    # decode simulated 23-46 % fast (v14_protocol.md)
    s = accuracy.summary(_of(results, _added(rows, "v14")), "holdout")
    _within(s, output_throughput=0.089, ttft_ms=0.241, tpot_ms=0.344)


def test_v14_rules_kept_the_default_and_the_harness():
    # v14_protocol.md: H changed no v14 row and lost on the fit rows it changes (two of
    # three medians); no v14 row is on an HBM3 / GDDR part, so F was not decided
    assert accuracy.DEFAULT_LENGTHS == "sharegpt" and "stated" in accuracy.LENGTH_MODELS
    assert DEFAULT_EFFICIENCY == accuracy.V10_E_EFFICIENCY


def test_v15_errors_as_measured(results, rows):
    # the one evaluation (v15_evaluation.txt, candidate A, the engine): 36.3 % throughput
    # (50 rows), 62.9 % TTFT (46), 25.9 % TPOT (50).  Where: DeepSeek-R1 at TP 8 on vLLM
    # 0.7.x (dstack, 18 rows: throughput +97 to +416 %, TTFT -70 to -100 %), gpt-oss-120b
    # on MI300X and at TP 4 on H200 (decode simulated 27-45 % fast), gpt-oss-120b at TP 1
    # on H200 (TTFT +20 to +610 %); Llama-3.1-8B on A100-40GB within 25 / 20 / 38 %
    s = accuracy.summary(_of(results, _added(rows, "v15")), "holdout")
    _within(s, output_throughput=0.364, ttft_ms=0.630, tpot_ms=0.260)


def test_v15_rule_kept_the_default(rows):
    # v15_protocol.md: on the 34 v15 rows on HBM3 parts F was lower than A on TTFT only
    # (86.0 against 92.9 %; throughput 101.0 against 98.0 %, TPOT 37.2 against 36.3 %),
    # not on two of three: A stays; the 50 rows joined as held out
    assert DEFAULT_EFFICIENCY == accuracy.V10_E_EFFICIENCY
    v15 = [r for r in rows if str(r.get("added", "")).startswith("v15")]
    assert len(v15) == 50 and {r["split"] for r in v15} == {"holdout"}


def test_v12_length_model_adopted():
    # G lowered throughput and TTFT on the earlier held-out ShareGPT rows (7.8 -> 5.9 %,
    # 63.4 -> 49.6 %; TPOT 31.1 -> 32.8 %): the harness replays ShareGPT rows with it
    assert accuracy.DEFAULT_LENGTHS == "sharegpt"


def test_v12b_in_process_rows_are_sealed_not_evaluated(rows):
    # v12b's runs drove vLLM's AsyncLLM in-process (no HTTP server); the harness replays
    # vllm bench serve against vllm serve, so they were left out before any figure was
    # read (v12_protocol.md, amendment); they stay sealed, outside measurements.json
    sealed = accuracy.load_measurements(DATA / "v12b_rows.json")
    assert len(sealed) == 3 and all(r["split"] == "holdout" for r in sealed)
    assert not {r["id"] for r in sealed} & {r["id"] for r in rows}
    assert "not evaluated" in (DATA / "v12_protocol.md").read_text()


def test_v11_fit_f_not_adopted():
    # F (v11_fit_log.txt) was not lower than E on any v11 median: E stays the default,
    # compute_hbm3 at its neutral 1.0 (v11_protocol.md)
    assert DEFAULT_EFFICIENCY == accuracy.V10_E_EFFICIENCY
    assert DEFAULT_EFFICIENCY.compute_hbm3 == 1.0
    assert (accuracy.V11_FIT_EFFICIENCY.compute_hbm3,
            accuracy.V11_FIT_EFFICIENCY.compute_gddr) == (1.2, 0.9)


def test_every_heldout_error_as_measured(results):
    # all held-out rows, v1 / v2 + v10 + v11 + v12 + v14 + v15, with v12's length model:
    # 12.6 % (101 rows) / 45.8 % (57) / 19.2 % (102) (v15_evaluation.txt; v14's: 8.0 %
    # (51) / 35.5 % (11) / 12.4 % (52); v12's: 8.0 % (49) / 40.7 % (10) / 11.4 % (50))
    s = accuracy.summary(results, "holdout")
    _within(s, output_throughput=0.127, ttft_ms=0.459, tpot_ms=0.193)


@pytest.mark.parametrize("tag, files, n, note", [
    ("v7", ["v7_rows.json"], 27, "v8 refit"),
    ("v8", ["v8_rows.json", "v8b_rows.json", "v8c_rows.json"], 51, "v9 refit"),
    ("v9", ["v9b_rows.json", "v9c_rows.json"], 42, "v10: moved")])
def test_sealed_rows_moved_to_fit_with_the_reason(rows, tag, files, n, note):
    # collected blind and sealed (the files, the record as committed), evaluated once
    # as held out (v*_protocol.md), then studied for the next round: fit rows now
    sealed = sum((accuracy.load_measurements(DATA / f) for f in files), [])
    assert len(sealed) == n and {r["split"] for r in sealed} == {"holdout"}
    here = {r["id"]: r for r in rows if str(r.get("added", "")).startswith(tag)}
    assert set(here) == {r["id"] for r in sealed}
    for r in sealed:
        moved = here[r["id"]]
        assert moved["split"] == "fit" and note in moved["split_note"]
        assert "pre-registered" in moved["added"]
        assert moved["measured"] == r["measured"]


def test_v3_rows_moved_to_fit_with_the_reason(rows):
    # pre-registered and evaluated once as held out (v3), then studied to design the v5
    # terms: they can no longer count as held out (tests/data/sim_accuracy/v5_protocol.md)
    v3 = [r for r in rows if str(r.get("added", "")).startswith("v3")]
    assert len(v3) == 18
    assert {r["split"] for r in v3} == {"fit"}
    assert all("pre-registered" in r["added"] and "v5 refit" in r["split_note"] for r in v3)


def test_v5_rows_moved_to_fit_with_the_reason(rows):
    # pre-registered, evaluated once as held out (v5), studied to design v6
    v5 = [r for r in rows if str(r.get("added", "")).startswith("v5")]
    assert len(v5) == 87
    assert {r["split"] for r in v5} == {"fit"}
    assert all("pre-registered" in r["added"] and r["id"].startswith("v5-") for r in v5)
    assert all("v6 refit" in r["split_note"] for r in v5)
    costly = {r["id"] for r in v5 if r.get("fit_excluded")}
    assert len(costly) == 5 and all("-1k8k-" in i for i in costly)
    assert sum("ttft_ms" in r["measured"] for r in v5) == 25
    assert len({r["model"] for r in v5}) >= 8 and {r["gpu"] for r in v5} >= {
        "H100-SXM", "A100-80GB", "H200"}


def test_v5_errors_as_measured(fit_results, rows):
    # the 87 v5 rows (fit rows now), the v10 coefficients, the fast loop, v12's length
    # model: 23.6 / 35.2 / 25.6 % (v12_fit_table_fast_G.txt; with mean lengths 25.3 /
    # 40.4 / 24.6 %; their one held-out evaluation, v2, v5_first_evaluation_v2.txt:
    # 56.1 / 55.4 / 36.8 %); bounded at what was measured so they cannot get worse
    # unnoticed
    s = accuracy.summary(_of(fit_results, _added(rows, "v5")), "fit")
    _within(s, output_throughput=0.237, ttft_ms=0.353, tpot_ms=0.257)


def test_v6_rows_moved_to_fit_with_the_reason(rows):
    # collected blind and sealed (v6_rows.json, the record as committed), evaluated
    # once (v6_protocol.md), then studied to design v7
    v6 = accuracy.load_measurements(DATA / "v6_rows.json")
    assert len(v6) == 15 and {r["split"] for r in v6} == {"holdout"}
    here = {r["id"]: r for r in rows if r["id"].startswith("v6-")}
    assert set(here) == {r["id"] for r in v6}
    for r in v6:
        moved = here[r["id"]]
        assert moved["split"] == "fit" and "v7 refit" in moved["split_note"]
        assert moved["measured"] == r["measured"]


@pytest.mark.parametrize("tag, bounds", [
    # the fit rows of each later round, the v10 coefficients, the fast loop, v12's
    # length model (v12_fit_table_fast_G.txt).  v6 and v7 (H100 runs of recent vLLM:
    # 20k-token prefills, Qwen3-8B under load) are where v10's compute 0.5 is too slow:
    # TTFT 108 % and 58 % against 11 % each with v8.  The length model moved v6 (its
    # ShareGPT sweeps: throughput 18.4 -> 7.2 %, TPOT 18.0 -> 18.9 %) and v8 (TTFT
    # 34.7 -> 35.1 %)
    ("v6", dict(output_throughput=0.072, ttft_ms=1.084, tpot_ms=0.189)),
    ("v7", dict(output_throughput=0.136, ttft_ms=0.579, tpot_ms=0.018)),
    # v8: 11.6 / 35.1 / 12.6 % with the fast loop before stop 39; its KV-bound rows
    # (DeepSeek-R1 TP 8 on H200, QwQ-32B 10k-32k prompts) now replay as the engine
    # replays them (the fast loop admits by vLLM's full-prompt gate and not in a step
    # that preempted: the engine's figures on every changed row, where the older loop
    # was 1-134 points off them; tests/sim/test_fastsim_admission.py)
    ("v8", dict(output_throughput=0.135, ttft_ms=0.369, tpot_ms=0.131)),
    ("v9", dict(output_throughput=0.066, ttft_ms=0.316, tpot_ms=0.083))])
def test_later_rounds_errors_as_measured(fit_results, rows, tag, bounds):
    s = accuracy.summary(_of(fit_results, _added(rows, tag)), "fit")
    _within(s, **bounds)


def test_heldout_throughput_goal(results):
    # issue 21: median absolute error of output throughput <= 15 % on rows not fitted on
    s = accuracy.summary(results, "holdout")
    assert s["output_throughput"] <= 0.15, s


@pytest.mark.xfail(strict=True, reason="issue 21's TPOT goal is missed on the held-out rows "
                   "since v15: 19.2 % over 102 (12.4 % over 52 before v15's 50 rows, "
                   "25.9 % on them); docs/SIM_ACCURACY.md")
def test_heldout_tpot_goal(results):
    # issue 21: TPOT <= 15 % on rows not fitted on
    s = accuracy.summary(results, "holdout")
    assert s["tpot_ms"] <= 0.15, s


@pytest.mark.xfail(strict=True, reason="issue 21's TTFT goal is missed on the held-out rows "
                   "since v11: 45.8 % over 57 TTFTs after v15 (35.5 % over 11 after v14, "
                   "40.7 % over 10 after v12; v15's 46 at 63 %); docs/SIM_ACCURACY.md")
def test_heldout_ttft_goal(results):
    # issue 21: TTFT <= 25 % on rows not fitted on: 6.3 % over the 3 held-out TTFTs of
    # v1 / v2 + v10, 34.2 % with v11's three, 40.7 % with v12's four, 35.5 % with v14's
    # one, 45.8 % with v15's 46
    s = accuracy.summary(results, "holdout")
    assert s["ttft_ms"] <= 0.25, s


@pytest.mark.xfail(strict=True, reason="issue 21's TTFT goal is missed on the larger blind "
                   "set of v10's model: the 37 v9 TTFTs, where v10's figures are v9's fit "
                   "D's, fixed before the v9 rows were read: 31 %; docs/SIM_ACCURACY.md")
def test_ttft_goal_on_the_v9_rows(fit_results, rows):
    s = accuracy.summary(_of(fit_results, _added(rows, "v9")), "fit")
    assert s["ttft_ms"] <= 0.25, s


def test_runs_kvcore_refused_are_recorded_not_dropped(fit_results, rows):
    # vLLM ran every published row; where kvcore's fit verdict refuses one it is still
    # simulated (with the KV of one max_model_len request) and listed
    refused = set(accuracy._REFUSALS)
    assert refused and refused <= {r["id"] for r in rows}
    assert refused <= {r["id"] for r in fit_results}
    assert any("gpt-oss-120b-h100-tp1" in i for i in refused)


@pytest.mark.parametrize("text, want", [
    ("vLLM v0.11.0 (vllm bench serve ...)", "vllm==0.11.0"),
    ("vLLM 0.10.1.1 (benchmark_serving.py ...)", "vllm==0.10.1"),
    ("vLLM (tt-inference-server GPU reference run)", None),
    ("SGLang 0.4", None)])
def test_engine_profile_from_the_rows_engine(text, want):
    assert accuracy.engine_of({"engine": text}) == want


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

    def fake_evaluate(rs, eff, base=None, sim="engine", workers=1, lengths="sharegpt"):
        seen.extend(r["split"] for r in rs)
        return [{"id": r["id"], "split": r["split"],
                 "tpot_ms": {"measured": 1.0, "simulated": 1.0, "error": 0.0}}
                for r in rs]

    monkeypatch.setattr(accuracy, "evaluate", fake_evaluate)
    accuracy.fit(rows, base=DATA, rounds=1, sim="fast")
    assert seen and set(seen) == {"fit"}


def test_fit_skips_the_fit_excluded_rows(rows, monkeypatch):
    excluded = {r["id"] for r in rows if r.get("fit_excluded")}
    # 13 for their cost or deployment (v5 / v6), and since v14 the 8 simon-mo QwQ-32B
    # runs their source withdrew ("invalid due to dummy weights issue", e189876)
    withdrawn = {i for i in excluded if i.startswith("v8b-simonmo-qwq-32b-")}
    assert len(withdrawn) == 8
    assert all("dummy weights" in r["fit_excluded"] for r in rows if r["id"] in withdrawn)
    rest = excluded - withdrawn
    assert len(rest) == 13 and all("-tp2-" in i or "-1k8k-" in i for i in rest)
    seen: set[str] = set()

    def fake_evaluate(rs, eff, base=None, sim="engine", workers=1, lengths="sharegpt"):
        seen.update(r["id"] for r in rs)
        return [{"id": r["id"], "split": r["split"],
                 "tpot_ms": {"measured": 1.0, "simulated": 1.0, "error": 0.0}}
                for r in rs]

    monkeypatch.setattr(accuracy, "evaluate", fake_evaluate)
    accuracy.fit(rows, base=DATA, rounds=1, sim="fast")
    assert seen and not seen & excluded


@pytest.mark.skipif(not os.environ.get("KVCORE_SIM_FIT"),
                    reason="re-fitting takes minutes of CPU; set KVCORE_SIM_FIT=1")
def test_fit_reproduces_the_rejected_v5c_fit(rows):
    # the fit as it stands gives v5c (rejected: compute and memory_gddr at their grid's
    # edge, and worse than v2 on the v5 rows); DEFAULT_EFFICIENCY stays v2's by the
    # pre-registered rule (tests/data/sim_accuracy/v5_protocol.md)
    v5_era = [r for r in rows
              if not str(r.get("added", "")).startswith(("v5", "v6", "v7", "v8", "v9",
                                                          "v10"))]
    got = accuracy.fit(v5_era, base=DATA, sim="fast", grid=accuracy._GRID_V5,
                       weighted=False, lengths="mean")
    v5c = dataclasses.replace(  # the fit starts at the class defaults
        Efficiency(), compute=0.9, memory=0.6, memory_hbm3=0.8, memory_gddr=0.95,
        step_s=0.002, per_request_s=5e-05, allreduce_latency_s=1e-05, moe_memory=1.0,
        request_overhead_s=0.01, layer_s=0.0, moe_layer_s=5e-05)
    assert dataclasses.asdict(got) == pytest.approx(dataclasses.asdict(v5c))


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


@pytest.mark.skipif(not os.environ.get("KVCORE_SIM_FIT"),
                    reason="re-fitting takes half an hour of CPU; set KVCORE_SIM_FIT=1")
def test_fit_reproduces_the_v6_fit(rows):
    # the v6 protocol's fit: one round from v2 on the fit rows of then (every row but
    # the v6 ones), family-weighted (v6_fit_log.txt); accepted by its rule, not adopted
    v6_era = [r for r in rows if not str(r.get("added", "")).startswith(LATER["v6"])]
    got = accuracy.fit(v6_era, accuracy.V2_EFFICIENCY, base=DATA, sim="fast", rounds=1,
                       grid={k: v for k, v in accuracy._GRID.items()
                             if k not in ("moe_memory_tokens", "api_stream_s",
                                          "compute_fp8", "compute_gddr",
                                          "compute_hbm3")},
                       workers=2, families="v6", lengths="mean")
    assert dataclasses.asdict(got) == pytest.approx(
        dataclasses.asdict(accuracy.V6_FIT_EFFICIENCY))


#: the rows each fit did not have yet (they came later)
LATER = {"v6": ("v6", "v7", "v8", "v9", "v10", "v11"),
         "v7": ("v7", "v8", "v9", "v10", "v11"), "v8": ("v8", "v9", "v10", "v11"),
         "v9": ("v9", "v10", "v11"), "v11": ("v11",)}


def _era(rows, tag):
    return [r for r in rows if not str(r.get("added", "")).startswith(LATER[tag])]


@pytest.mark.skipif(not os.environ.get("KVCORE_SIM_FIT"),
                    reason="re-fitting takes minutes of CPU; set KVCORE_SIM_FIT=1")
@pytest.mark.parametrize("tag, start, terms, rounds, families, want", [
    # v7's fit B (v7_fit_log.txt): three terms, two rounds from v2, v6's families
    ("v7", "V2_EFFICIENCY", ("memory_hbm3", "moe_memory", "moe_memory_tokens"), 2, "v6",
     "V7_EFFICIENCY"),
    # v8's fit C (v8_fit_log.txt): from v7, two rounds, v6's families
    ("v8", "V7_EFFICIENCY", ("api_stream_s", "request_overhead_s", "api_server_s"), 2,
     "v6", "V8_EFFICIENCY"),
    # v9's fit D (v9_fit_log.txt; rejected): from v8, one round, v9's families
    ("v9", "V8_EFFICIENCY", ("compute", "compute_fp8", "compute_gddr", "moe_compute"), 1,
     "v9", "V9_FIT_EFFICIENCY"),
    # v11's fit F (v11_fit_log.txt): from v10's E, one round, v9's families
    ("v11", "V10_E_EFFICIENCY", ("compute_hbm3", "compute", "compute_gddr"), 1, "v9",
     "V11_FIT_EFFICIENCY")])
def test_fit_reproduces_each_round(rows, tag, start, terms, rounds, families, want):
    # on the rows each fit had (later rounds' rows filtered out)
    grid = {k: accuracy._GRID[k] for k in terms}
    got = accuracy.fit(_era(rows, tag), getattr(accuracy, start), base=DATA, sim="fast",
                       rounds=rounds, grid=grid, workers=2, families=families,
                       lengths="mean")  # v1 - v11 replayed mean lengths
    assert dataclasses.asdict(got) == pytest.approx(
        dataclasses.asdict(getattr(accuracy, want)))


@pytest.mark.parametrize("pc, want", [(True, "align"), (False, "none")])
def test_rows_plan_the_mamba_cache_mode_vllm_runs(rows, monkeypatch, pc, want):
    # a Mamba-hybrid row is planned with the mode vLLM 0.32 runs: align with prefix
    # caching on (MambaModelConfig.verify_and_update_config), none with it off
    from kvcore_plugin_needs import skip_unless_served

    skip_unless_served("qwen3-next-80b-a3b-thinking")
    row = dict(next(r for r in rows if r["id"].startswith("v6-recipes-qwen3-next")))
    row.update(enable_prefix_caching=pc, num_prompts=2, max_concurrency=2)
    seen = []
    real = accuracy._plan

    def spy(*a, **kw):
        seen.append(a[10] if len(a) > 10 else kw.get("mamba_cache_mode", "none"))
        return real(*a, **kw)

    monkeypatch.setattr(accuracy, "_plan", spy)
    accuracy.simulate_row(row, base=DATA, sim="fast")
    assert seen and set(seen) == {want}
    if pc:  # and vLLM refuses align without chunked prefill
        from kvcore.errors import ConfigError

        with pytest.raises(ConfigError, match="enable_chunked_prefill"):
            accuracy.simulate_row({**row, "enable_chunked_prefill": False}, base=DATA,
                                  sim="fast")
