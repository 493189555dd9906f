"""Tester 4's findings (tests/data/tester4_findings.md), one strict xfail per finding that
a test can show: flip each (remove the mark) when the finding is fixed.

Expected values come from the rules the docs state (kvcore.sim.engine's module
docstring: the serial stage ``seen_i = max(sent_i + request_overhead_s, seen_(i-1) +
api_server_s)`` in send order; ``vllm bench serve --max-concurrency``: a request is sent
as soon as any slot frees, a slot frees at the reply; tests/sim/test_sim_clock.py's rule
2: times are exact at any absolute time; the house rule on bad input), never from a
run's own output.
"""

from __future__ import annotations

import dataclasses
import json
import random
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kvcore_sim_support import ServedTimeModel, small_plan

import kvcore
from kvcore.errors import ConfigError
from kvcore.runtime import KVCacheManager
from kvcore.sim.engine import SimRequest, run_engine
from kvcore.sim.fleet import run_fleet
from kvcore.sim.workload import random_dataset, with_arrivals

MML = 4096


_Served = ServedTimeModel


def _cfg() -> Any:
    return small_plan(MML)


def _case(seed: int) -> tuple[Any, list[Any], int | None]:
    """A seeded burst/trickle with ~30 % too-long (rejected) requests."""
    rng = random.Random(seed)
    n = rng.randrange(2, 25)
    tm = _Served(rng.choice([0.0, 0.004]), 2e-5, rng.choice([0.0, 0.01]),
                 rng.choice([0.0, 0.003, 0.02]))
    ds = random_dataset(n, 64, 8, seed=seed)
    ds = [dataclasses.replace(t, prompt_len=5000) if rng.random() < 0.3 else t for t in ds]
    arr = sorted(rng.choice([0.0, rng.random()]) for _ in range(n))
    return tm, with_arrivals(ds, arr), rng.choice([None, 1, 2, 5])


def _engine(tm: Any, ds: list[Any], conc: int | None) -> list[SimRequest]:
    mgr = KVCacheManager(_cfg(), max_model_len=MML, max_num_batched_tokens=512)
    res = run_engine(mgr, [SimRequest(t) for t in ds], tm, max_num_seqs=64,
                     max_num_batched_tokens=512, max_concurrency=conc, keep_requests=True)
    return list(res.requests)


def _fleet(tm: Any, ds: list[Any], conc: int | None, replicas: int = 1) -> list[SimRequest]:
    reqs = [SimRequest(t) for t in ds]
    run_fleet(_cfg(), reqs, tm, replicas=replicas, router="round-robin", max_num_seqs=64,
              max_num_batched_tokens=512, max_concurrency=conc, max_model_len=MML)
    return reqs


# ---- finding 1 ---------------------------------------------------------------------


def test_f1_a_request_is_sent_when_the_first_slot_frees() -> None:
    """--max-concurrency 2, all at t = 0: A (fits), B and C (too long: rejected, each
    reply ``request_overhead_s`` after its send), D (fits).  B's reply frees a slot at
    0.01: C is sent then; C's reply would free one at 0.02, but A's reply comes first
    (A is seen at 0.01; its 64-token prefill and 7 decodes take 1.42 ms at token_s 2e-5), so vLLM bench's
    semaphore sends D at A's reply: ``D.sent == A.sent + A's E2EL``."""
    tm = _Served(0.0, 2e-5, 0.01, 0.0)
    ds = random_dataset(4, 64, 8, seed=0)
    ds = [t if i in (0, 3) else dataclasses.replace(t, prompt_len=5000)
          for i, t in enumerate(ds)]
    a, b, c, d = sorted(_engine(tm, with_arrivals(ds, [0.0] * 4), 2),
                        key=lambda r: r.request_id)
    assert b.rejected and c.rejected and not a.rejected and not d.rejected
    assert c.sent == pytest.approx(0.01)
    a_reply = a.sent + a.token_times[-1]
    assert a_reply < 0.02
    assert d.sent == pytest.approx(a_reply, abs=1e-12)


def test_f1_one_replica_fleet_is_run_engine_with_rejections() -> None:
    """Seeded cases (too-long requests among bursts, concurrency caps, api_server_s):
    the same sends and token times (tests/sim/test_sim_clock.py rule 1's equality)."""
    bad = []
    for seed in range(30):
        tm, ds, conc = _case(seed)
        a = sorted(_engine(tm, ds, conc), key=lambda r: r.request_id)
        b = sorted(_fleet(tm, ds, conc), key=lambda r: r.request_id)
        for x, y in zip(a, b):
            if x.rejected != y.rejected or x.sent != pytest.approx(y.sent, abs=1e-9) or \
                    x.token_times != pytest.approx(y.token_times, abs=1e-9):
                bad.append((seed, x.request_id))
                break
    assert not bad


# ---- finding 2 ---------------------------------------------------------------------


def test_f2_serial_stage_in_send_order_with_rejections() -> None:
    """Every seeded case: each admitted request's engine-seen time
    ``sent + request_overhead_s + api_wait`` follows the recurrence over the admitted
    requests in send-time order."""
    bad = []
    for seed in range(30):
        tm, ds, conc = _case(seed)
        rs = sorted((r for r in _engine(tm, ds, conc) if not r.rejected),
                    key=lambda r: r.sent)
        prev = None
        for r in rs:
            t = r.sent + tm.request_overhead_s
            if prev is not None and prev + tm.api_server_s > t:
                t = prev + tm.api_server_s
            if abs(r.sent + tm.request_overhead_s + r.api_wait - t) > 1e-9:
                bad.append((seed, r.request_id))
                break
            prev = t
    assert not bad


# ---- finding 3 ---------------------------------------------------------------------


@pytest.mark.parametrize("over,api", [(0.0, 0.0), (0.02, 0.0051)])
def test_f3_fleet_closed_loop_at_1e12_is_the_closed_loop_at_zero(over: float,
                                                                 api: float) -> None:
    """Two replicas, --max-concurrency 3, ten requests at one instant: the token times
    (relative to each send) at t = 1e12 s are those at t = 0, to the bit (rule 2)."""
    tm = _Served(0.0123, 3.1e-5, over, api)
    ds = random_dataset(10, 32, 4, seed=1)
    at0 = _fleet(tm, with_arrivals(ds, [0.0] * 10), 3, replicas=2)
    far = _fleet(tm, with_arrivals(ds, [1e12] * 10), 3, replicas=2)
    assert [r.token_times for r in far] == [r.token_times for r in at0]


@settings(max_examples=25, deadline=None)
@given(st.integers(0, 10**12), st.lists(st.integers(0, 2000), min_size=2, max_size=12),
       st.integers(2, 4), st.sampled_from([None, 1, 3]),
       st.sampled_from([(0.0, 0.0, 0.0), (0.02, 0.0051, 0.0), (0.01, 0.003, 1e-4)]))
def test_f3_a_fleet_schedules_the_same_at_any_time(offset: int, ticks: list[int],
                                                   replicas: int, conc: int | None,
                                                   shares: tuple[float, float, float]
                                                   ) -> None:
    """Generated arrivals (multiples of 1/128 s, so ``offset + t`` is exact) on 2-4
    replicas, open and closed loop, with the API server's terms: every token time
    (relative to its send) at ``offset`` s is the one at 0, to the bit, and the absolute
    sends are the ones at 0 moved by ``offset``."""
    tm = ServedTimeModel(0.0123, 3.1e-5, *shares)
    rel = sorted(k / 128 for k in ticks)
    ds = random_dataset(len(rel), 32, 4, seed=len(rel))
    at0 = _fleet(tm, with_arrivals(ds, rel), conc, replicas=replicas)
    far = _fleet(tm, with_arrivals(ds, [offset + t for t in rel]), conc,
                 replicas=replicas)
    assert [r.token_times for r in far] == [r.token_times for r in at0]
    for a, b in zip(at0, far):
        assert b.sent == pytest.approx(a.sent + offset, rel=1e-15, abs=1e-3)


# ---- finding 4 ---------------------------------------------------------------------


def _row() -> dict[str, Any]:
    from pathlib import Path

    p = Path(__file__).resolve().parent / "data" / "sim_accuracy" / "measurements.json"
    rows = json.loads(p.read_text())["rows"]
    r = next(r for r in rows if r["id"] == "qwen3-1.7b-a100-80gb-128-128-c1")
    return dict(r, num_prompts=2)


@pytest.mark.parametrize("key", ["enable_chunked_prefill", "enable_prefix_caching"])
def test_f4_row_booleans_are_checked(key: str) -> None:
    from pathlib import Path

    from kvcore.sim.accuracy import simulate_row

    base = Path(__file__).resolve().parent / "data" / "sim_accuracy"
    with pytest.raises(ConfigError, match=key):
        simulate_row(dict(_row(), **{key: "false"}), base=base, sim="fast")


# ---- finding 5 ---------------------------------------------------------------------


@pytest.mark.parametrize("text", ["not json", '{"x": 1}',
                                  '{"rows": [{"id": "a", "split": "fit", "config": '
                                  '"qwen3-1.7b.json", "gpu": "A100-80GB", "input_len": 8,'
                                  ' "output_len": 8, "num_prompts": 1, "measured": {}, '
                                  '"pipeline_parallel_size": "two"}]}'])
def test_f5_accuracy_cli_bad_data_is_one_line_exit_2(tmp_path: Any, capsys: Any,
                                                     text: str) -> None:
    from kvcore.sim.accuracy import main

    (tmp_path / "measurements.json").write_text(text)
    try:
        code = main(["--data", str(tmp_path)])
    except Exception as e:  # a traceback is the finding
        pytest.fail(f"traceback: {type(e).__name__}: {e}")
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1
    assert "measurements.json" in err or "pipeline_parallel_size" in err


# ---- finding 6 ---------------------------------------------------------------------


def test_f6_dotted_speculative_config_as_vllm_serve_takes_it(capsys: Any) -> None:
    """vLLM 0.32's FlexibleArgumentParser reads ``--speculative-config.method ngram
    --speculative-config.num_speculative_tokens 3`` to the object the JSON form gives
    ({'method': 'ngram', 'num_speculative_tokens': 3}: checked with EngineArgs.
    add_cli_args(FlexibleArgumentParser()) in the vLLM venv)."""
    from kvcore.cli import main

    base = ["simulate", "llama-3.1-8b", "--gpu", "H100", "--dataset-name", "random",
            "--num-prompts", "2", "--random-input-len", "32", "--random-output-len", "4",
            "--max-model-len", "4096", "--spec-acceptance-rate", "0.5", "--json"]
    assert main([*base, "--speculative-config",
                 '{"method": "ngram", "num_speculative_tokens": 3}']) == 0
    want = json.loads(capsys.readouterr().out)
    assert main([*base, "--speculative-config.method", "ngram",
                 "--speculative-config.num_speculative_tokens", "3"]) == 0
    got = json.loads(capsys.readouterr().out)
    assert got["output_throughput"] == want["output_throughput"]


@pytest.mark.parametrize("extra, word", [
    (["--speculative-config.method"], "speculative-config.method"),  # no value
    (["--no-such-config.method", "ngram"], "no-such-config"),
    (["--speculative-config.method", "medusa"], "method")])
def test_f6_a_bad_dotted_flag_is_one_line_exit_2(capsys: Any, extra: list[str],
                                                 word: str) -> None:
    """The dotted form is rewritten before parsing, so its bad input meets the same
    checks as the JSON form's: one line naming the flag or field, exit 2."""
    from kvcore.cli import main

    base = ["simulate", "llama-3.1-8b", "--gpu", "H100", "--dataset-name", "random",
            "--num-prompts", "2", "--random-input-len", "32", "--random-output-len", "4",
            "--max-model-len", "4096", "--spec-acceptance-rate", "0.5"]
    assert main([*base, *extra]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and word in err, err


# ---- finding 7 ---------------------------------------------------------------------


@pytest.mark.parametrize("text", ['{"method": "ngram", "num_speculative_tokens": "3"}',
                                  '{"method": "ngram", "num_speculative_tokens": 3.0}'])
def test_f7_speculative_config_values_vllm_coerces(text: str) -> None:
    """vLLM 0.32: SpeculativeConfig(method='ngram', num_speculative_tokens='3') and
    (..., 3.0) both give num_speculative_tokens 3 (pydantic lax mode; run in the vLLM
    venv)."""
    from kvcore.sim.speculative import parse_speculative_config

    assert parse_speculative_config(text).num_speculative_tokens == 3


# ---- finding 8 ---------------------------------------------------------------------


def test_f8_fastsim_whole_prompt_over_budget_names_the_budget() -> None:
    """1,000-token prompts, max_num_batched_tokens 512, chunked prefill off, a KV cache
    of ~65k tokens: the budget is at fault (vLLM refuses max_num_batched_tokens <
    max_model_len; the engine names max_num_batched_tokens), not the KV cache."""
    from kvcore.sim.fastsim import Workload, run_workload

    cfg = kvcore.plan_model("llama-3.1-8b", kv_cache_memory_bytes=8 << 30,
                            max_model_len=MML, max_num_batched_tokens=4096)
    with pytest.raises(ConfigError) as e:
        run_workload(_Served(0.01, 2e-5), cfg, Workload(1000, 4, 3), max_num_seqs=8,
                     max_num_batched_tokens=512, enable_chunked_prefill=False,
                     kv_capacity_tokens=(cfg.num_blocks - 1) * 16)
    assert e.value.extra["field"] == "max_num_batched_tokens"


# ---- finding 9 ---------------------------------------------------------------------


@pytest.mark.parametrize("field,kw", [
    ("enable_chunked_prefill", {"enable_chunked_prefill": "false"}),
    ("api_server_s", {}),
])
def test_f9_fastsim_checks_like_the_engine(field: str, kw: dict[str, Any]) -> None:
    """The engine refuses enable_chunked_prefill='false' and a time model's
    api_server_s = -1 with a ConfigError naming them; the fast loop must too."""
    from kvcore.sim.fastsim import Workload, run_workload

    tm = _Served(0.01, 2e-5, 0.0, -1.0 if field == "api_server_s" else 0.0)
    with pytest.raises(ConfigError) as e:
        run_workload(tm, _cfg(), Workload(100, 4, 3), max_num_seqs=8, **kw)
    assert e.value.extra["field"] == field


# ---- finding 11 --------------------------------------------------------------------


@pytest.mark.parametrize("argv", [["--fit-terms", "bogus"], ["--rounds", "0"]])
def test_f11_fit_only_flags_without_fit_are_refused(tmp_path: Any, capsys: Any,
                                                    argv: list[str]) -> None:
    """House rule: bad input is one line and exit 2; a fit-only flag without --fit (or
    a bad value of one) must not run the evaluation and exit 0."""
    import shutil
    from pathlib import Path

    from kvcore.sim.accuracy import main

    src = Path(__file__).resolve().parent / "data" / "sim_accuracy"
    shutil.copytree(src / "configs", tmp_path / "configs")
    (tmp_path / "measurements.json").write_text(json.dumps({"rows": [_row()]}))
    assert main(["--data", str(tmp_path), "--fast", *argv]) == 2
    assert argv[0] in capsys.readouterr().err


# ---- finding 12 --------------------------------------------------------------------


def test_f12_sim_timing_speculative_figures_are_todays(capsys: Any) -> None:
    """docs/SIM_TIMING.md quotes the roofline's figures (llama-3.1-8b, H100, random
    1024 in / 128 out, 200 prompts, --max-concurrency 16): 'mean TPOT 9.21 ms without
    drafts ... against 1,409' (they predated the v7 coefficients: finding 12)."""
    import re
    from pathlib import Path

    from kvcore.cli import main

    doc = Path(__file__).resolve().parents[1] / "docs" / "SIM_TIMING.md"
    if not doc.is_file():  # tests/packaging runs a copy of tests/ without docs/
        pytest.skip("docs/SIM_TIMING.md is not beside this copy of the tests")
    text = " ".join(doc.read_text().split())
    m = re.search(r"mean TPOT ([\d.]+) ms without drafts.*?against ([\d,]+)\)", text)
    assert m, "the figures' sentence moved"
    assert main(["simulate", "llama-3.1-8b", "--gpu", "H100", "--dataset-name", "random",
                 "--num-prompts", "200", "--random-input-len", "1024",
                 "--random-output-len", "128", "--max-concurrency", "16", "--json"]) == 0
    got = json.loads(capsys.readouterr().out)
    assert round(got["mean_tpot_ms"], 2) == float(m.group(1))
    assert round(got["output_throughput"]) == int(m.group(2).replace(",", ""))


# ---- finding 13 --------------------------------------------------------------------


@pytest.mark.parametrize("replicas", [0, 2])
def test_f13_a_burst_through_the_serial_stage_is_exact_at_1e12(replicas: int) -> None:
    """Six requests at one instant, near-zero steps, request_overhead_s 0.02,
    api_server_s 0.0051: the TTFTs (seconds from each send) at t = 1e12 s are those at
    t = 0 to the bit (tests/sim/test_sim_clock.py rule 2; at 1e12 s one ulp is 122 us,
    so a wait computed as ``(seen_prev + api) - seen`` on the absolute clock is off by
    tens of us per request).  replicas 0: run_engine; 2: run_fleet round-robin."""
    tm = _Served(0.0, 1e-6, 0.02, 0.0051)
    ttft = {}
    for base in (0.0, 1e12):
        ds = with_arrivals(random_dataset(6, 32, 2, seed=1), [base] * 6)
        if replicas:
            rs = _fleet(tm, ds, None, replicas=replicas)
        else:
            rs = _engine(tm, ds, None)
        ttft[base] = [r.token_times[0] for r in sorted(rs, key=lambda r: r.request_id)]
    assert ttft[1e12] == ttft[0.0]


# ---- finding 14 --------------------------------------------------------------------


def test_f14_fit_without_fit_rows_is_one_line_exit_2(tmp_path: Any, capsys: Any) -> None:
    import shutil
    from pathlib import Path

    from kvcore.sim.accuracy import main

    src = Path(__file__).resolve().parent / "data" / "sim_accuracy"
    shutil.copytree(src / "configs", tmp_path / "configs")
    (tmp_path / "measurements.json").write_text(
        json.dumps({"rows": [dict(_row(), split="holdout")]}))
    try:
        code = main(["--data", str(tmp_path), "--fit", "--fast"])
    except Exception as e:  # a traceback is the finding
        pytest.fail(f"traceback: {type(e).__name__}: {e}")
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and "fit" in err[0]


# ---- finding 10 --------------------------------------------------------------------


@pytest.mark.parametrize("cost", ["1e308", "101", "-0.1", "nan", "inf"])
def test_f10_spec_draft_cost_out_of_range_is_one_line_exit_2(capsys: Any, cost: str) -> None:
    """--spec-draft-cost 1e308 failed deep in a step ("step_time returned inf"), naming
    neither the flag nor what is valid."""
    from kvcore.cli import main

    code = main(["simulate", "llama-3.1-8b", "--gpu", "H100", "--dataset-name", "random",
                 "--num-prompts", "4", "--random-input-len", "64", "--random-output-len",
                 "8", "--speculative-config", '{"method": "ngram", '
                 '"num_speculative_tokens": 2}', "--spec-acceptance-rate", "0.5",
                 "--spec-draft-cost", cost])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and "--spec-draft-cost" in err[0], err

