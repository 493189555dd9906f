"""The accuracy harness's mechanics (v6 protocol): source families and their weights,
the weighted median, the row keys ``pipeline_parallel_size`` / ``kv_cache_dtype``, and
process-pool replays.  Figures against published rows are in test_sim_accuracy.py."""

from __future__ import annotations

import math
import statistics
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kvcore.sim import accuracy

DATA = Path(__file__).resolve().parents[1] / "data" / "sim_accuracy"


@pytest.fixture(scope="module")
def rows() -> list[dict[str, Any]]:
    return accuracy.load_measurements(DATA / "measurements.json")


def test_every_gpustack_page_is_one_family(rows):
    """The protocol's families: every GPUStack Performance Lab page is one lab's
    deployment (71 rows), and the multi-row sources are one family each."""
    fam = [accuracy.source_family(r) for r in rows]
    gp = [r for r, f in zip(rows, fam) if f == "gpustack"]
    assert len(gp) == 71 and all("GPUStack" in r["source"] for r in gp)
    assert fam.count("tenstorrent") == sum("tenstorrent" in r["source"] for r in rows)
    assert fam.count("dennislee22") == sum("dennislee22" in r["source"] for r in rows)
    # InferenceX's own runs (14 before v15) and v15's rows that name it (its PRs #1061 /
    # #1092, and two Nebius runs of its recipe)
    assert fam.count("inferencex") == sum("InferenceX" in r["source"] for r in rows) == 27
    # a single-thread source is its own family, named by its source
    assert accuracy.source_family({"id": "x", "source": "vllm-project/vllm#1 't'"}) == \
        "vllm-project/vllm#1"


def test_a_repositorys_files_are_one_family(rows):
    """v9: the rows of one repository are one family whatever file they come from (the
    26 RunPod runs, the 8 delphinemico experiments); v6's scheme split them by file."""
    by = {}
    for r in rows:
        by.setdefault(accuracy.source_family(r), []).append(r)
    assert len(by["adithyaJRunpod/vllm_bench"]) == 26
    assert len(by["delphinemico/llm-inference-performance"]) == 8
    old = {accuracy.source_family(r, "v6") for r in by["adithyaJRunpod/vllm_bench"]}
    assert len(old) > 1
    assert accuracy.source_family({"id": "x", "source": "llm-d/llm-d PR #2074 (x)"}) == \
        "llm-d/llm-d"


@settings(max_examples=200, deadline=None)
@given(st.lists(st.floats(0, 10, allow_nan=False), min_size=1, max_size=40),
       st.floats(0.1, 10))
def test_equal_weights_give_the_low_median(values: list[float], w: float) -> None:
    """With equal weights the weighted median is the low median, whatever the weight."""
    got = accuracy._weighted_median([(v, w) for v in values])
    assert got == statistics.median_low(values)


@settings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(st.floats(0, 10, allow_nan=False), st.floats(0.01, 5)),
                min_size=1, max_size=30))
def test_weighted_median_splits_the_weight(pairs: list[tuple[float, float]]) -> None:
    """At most half the weight lies strictly below it and at least half at or below."""
    m = accuracy._weighted_median(pairs)
    tot = sum(w for _, w in pairs)
    assert sum(w for v, w in pairs if v < m) <= tot / 2 + 1e-9
    assert sum(w for v, w in pairs if v <= m) >= tot / 2 - 1e-9


def test_the_weighted_loss_weighs_a_family_by_one_over_sqrt_n(monkeypatch):
    """Four rows of one family with error e1 and one row of another with e2: the weights
    are 1/2 each (4 x 1/2 = 2) and 1: the weighted mean is (2 e1 + e2) / 3."""
    rs = [{"id": f"a{i}", "split": "fit", "source": "GPUStack x"} for i in range(4)]
    rs.append({"id": "b", "split": "fit", "source": "other 'y'"})
    errs = {"a0": 0.1, "a1": 0.1, "a2": 0.1, "a3": 0.1, "b": 1.0}

    def fake_evaluate(rows, eff, base=None, sim="engine", workers=1, lengths="sharegpt"):
        return [{"id": r["id"], "split": "fit",
                 "tpot_ms": {"measured": 1.0, "simulated": 1.0 + errs[r["id"]],
                             "error": errs[r["id"]]}} for r in rows]

    monkeypatch.setattr(accuracy, "evaluate", fake_evaluate)
    e1, e2 = math.log1p(0.1), math.log1p(1.0)
    got = accuracy._loss(rs, accuracy.V2_EFFICIENCY, None, "fast", weighted=True)
    assert got == pytest.approx(e1 + 0.25 * (2 * e1 + e2) / 3, rel=1e-12)
    plain = accuracy._loss(rs, accuracy.V2_EFFICIENCY, None, "fast", weighted=False)
    assert plain == pytest.approx(e1 + 0.25 * (4 * e1 + e2) / 5, rel=1e-12)


def _row(**kw: Any) -> dict[str, Any]:
    base = {"id": "t", "split": "holdout", "config": "llama-3.1-8b", "gpu": "H100-SXM",
            "tensor_parallel_size": 1, "input_len": 8000, "output_len": 64,
            "num_prompts": 8, "max_concurrency": 8, "request_rate": "inf",
            "statistic": "median", "measured": {"tpot_ms": 1.0}}
    base.update(kw)
    return base


def test_a_rows_kv_cache_dtype_is_planned_and_timed(monkeypatch):
    """kv_cache_dtype fp8 halves the KV pages of a bf16 model: the plan's spec says
    fp8, and a long-context decode reads fewer bytes (lower TPOT) than with auto."""
    seen: list[Any] = []
    real = accuracy.roofline_for

    def spy(cfg, kv, **kw):
        seen.append((kv, kw))
        return real(cfg, kv, **kw)

    monkeypatch.setattr(accuracy, "roofline_for", spy)
    auto = accuracy.simulate_row(_row(), sim="fast")
    fp8 = accuracy.simulate_row(_row(kv_cache_dtype="fp8"), sim="fast")
    assert seen[0][1]["kv_cache_dtype"] == "auto" and seen[1][1]["kv_cache_dtype"] == "fp8"
    spec = seen[1][0].kv_cache_groups[0].spec
    assert spec.kv_cache_dtype == "fp8"
    assert spec.page_size_bytes * 2 == seen[0][0].kv_cache_groups[0].spec.page_size_bytes
    assert fp8["tpot_ms"] < auto["tpot_ms"]


def test_a_rows_pipeline_parallel_size_is_planned_and_timed(monkeypatch):
    seen: list[Any] = []
    real = accuracy.roofline_for

    def spy(cfg, kv, **kw):
        m = real(cfg, kv, **kw)
        seen.append(m)
        return m

    monkeypatch.setattr(accuracy, "roofline_for", spy)
    got = accuracy.simulate_row(_row(id="pp", config="llama-3.1-8b",
                                     pipeline_parallel_size=2), sim="fast")
    assert seen[0].pipeline_parallel_size == 2 and seen[0].batches_in_flight == 2
    assert got["tpot_ms"] > 0


def test_pooled_replays_equal_serial_ones(rows):
    some = [r for r in rows if r["split"] == "holdout"][:3]
    a = accuracy.evaluate(some, base=DATA, sim="fast")
    b = accuracy.evaluate(some, base=DATA, sim="fast", workers=2)
    assert a == b


def test_bad_workers_is_one_line_exit_2(capsys):
    assert accuracy.main(["--workers", "0"]) == 2
    err = capsys.readouterr().err
    assert "--workers" in err and len(err.strip().splitlines()) == 1


def test_an_excluded_figure_is_not_evaluated():
    """A figure listed in the row's ``excluded`` (with its reason) stays in ``measured``
    as quoted but never enters the errors (the v8 rows' convention)."""
    row = _row(input_len=512, output_len=16,
               measured={"tpot_ms": 10.0, "ttft_ms": 50.0, "output_throughput": 100.0},
               excluded={"ttft_ms": "cold start"})
    (got,) = accuracy.evaluate([row], sim="fast")
    assert "ttft_ms" not in got and {"tpot_ms", "output_throughput"} <= set(got)


@pytest.mark.parametrize("dp, excluded, ok", [
    (1, {}, True), (2, {"tpot_ms": "dp", "ttft_ms": "dp"}, True),
    (2, {"ttft_ms": "dp"}, False), (2, {}, False), (0, {}, False)])
def test_data_parallel_rows_need_every_figure_excluded(dp, excluded, ok):
    """The harness runs one engine: a row of data_parallel_size > 1 is refused (naming
    the field) unless all its figures are excluded."""
    from kvcore.errors import ConfigError

    row = _row(data_parallel_size=dp, excluded=excluded,
               measured={"tpot_ms": 10.0, "ttft_ms": 50.0})
    if ok:
        accuracy._check_row(row)
        return
    with pytest.raises(ConfigError, match="data_parallel_size") as e:
        accuracy._check_row(row)
    assert e.value.extra["field"] == "data_parallel_size"


def test_fit_from_needs_fit(capsys):
    assert accuracy.main(["--fit-from", "default"]) == 2
    err = capsys.readouterr().err
    assert "--fit-from" in err and len(err.strip().splitlines()) == 1
    assert accuracy.main(["--fit", "--fit-from", "v7"]) == 2
    assert "fit-from" in capsys.readouterr().err


def test_fit_from_default_starts_at_the_default(monkeypatch):
    seen: list[Any] = []

    def fake_fit(rows, start, **kw):
        seen.append(start)
        raise SystemExit(0)

    monkeypatch.setattr(accuracy, "fit", fake_fit)
    for flag, want in (("default", accuracy.DEFAULT_EFFICIENCY),
                       ("v2", accuracy.V2_EFFICIENCY)):
        with pytest.raises(SystemExit):
            accuracy._main(["--fit", "--fast", "--fit-from", flag, "--data", str(DATA)])
        assert seen[-1] == want


def test_a_rows_burstiness_shapes_its_arrivals(monkeypatch):
    """``burstiness`` (vLLM's flag) reaches the arrivals: "inf" gives even gaps of
    1 / rate, as serve.py's get_request sends them; a bad value names the field."""
    from kvcore.errors import ConfigError
    from kvcore.sim import workload

    seen: list[Any] = []
    real = workload.arrival_times

    def spy(n, rate, burst, seed, **kw):
        got = real(n, rate, burst, seed, **kw)
        seen.append((rate, burst, got))
        return got

    monkeypatch.setattr(workload, "arrival_times", spy)
    row = _row(input_len=256, output_len=4, num_prompts=5, max_concurrency=None,
               request_rate=4.0, burstiness="inf")
    accuracy.simulate_row(row)
    rate, burst, times = seen[-1]
    assert burst == float("inf")
    gaps = [b - a for a, b in zip(times, times[1:])]
    assert all(abs(g - 0.25) < 1e-9 for g in gaps)
    for bad in (0, -1.0, "x", True, float("nan")):
        with pytest.raises(ConfigError, match="burstiness") as e:
            accuracy._check_row(dict(row, burstiness=bad))
        assert e.value.extra["field"] == "burstiness"
