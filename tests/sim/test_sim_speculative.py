"""Speculative decoding in the clocked simulator (kvcore.sim.speculative, ``kvcore
simulate --speculative-config JSON --spec-acceptance-rate P``).

Expected values come from the references, never from the code's output:

* the acceptance law of i.i.d. drafts (Leviathan et al. 2023, eq. 1): with per-draft
  probability p and k drafts the accepted count G has P(G >= j) = p^j (j <= k), so
  E[1 + G] = (1 - p^(k+1)) / (1 - p) and E[G^2] = sum_j (2j - 1) p^j; a long seeded run's
  mean is within 5 standard errors of it;
* vLLM's counters (``SpecDecodingStats.observe_draft``: one draft per verification, its
  draft tokens, its accepted tokens) and ``vllm bench serve``'s figures (serve.py:
  acceptance rate = accepted / draft tokens x 100, acceptance length = 1 + accepted /
  drafts, per position = accepted at i / drafts);
* vLLM's stop rule: a request yields exactly its max_tokens, the accepted tokens past it
  trimmed;
* vLLM's synthetic acceptance length schedule (``_acceptance_length_to_rates``);
* the step-time model: a verification computes 1 + drafts tokens per decode.

vLLM's own parser and SpeculativeConfig on the JSON kvcore accepts:
integrations/vllm/tests/test_speculative_config_vs_vllm.py.
"""

from __future__ import annotations

import json
import math
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kvcore_cli_support import assert_clean_error, run_cli, run_json

import kvcore
from kvcore.errors import ConfigError
from kvcore.runtime import KVCacheManager
from kvcore.sim.engine import SimRequest, run_engine
from kvcore.sim.speculative import (
    SCHEDULED_METHODS,
    SpecAcceptanceModel,
    iid_rates,
    length_rates,
    parse_speculative_config,
)
from kvcore.sim.timing import ConstantTimeModel
from kvcore.sim.traces import TraceRequest

MML = 4096


def _manager(num_blocks: int = 2000, mnbt: int = 512, use_eagle: bool = False
             ) -> KVCacheManager:
    cfg = kvcore.plan_model("llama-3.1-8b", num_gpu_blocks_override=num_blocks,
                            max_model_len=MML, max_num_batched_tokens=mnbt)
    return KVCacheManager(cfg, max_model_len=MML, max_num_batched_tokens=mnbt,
                          use_eagle=use_eagle)


def _reqs(seed: int, n: int, out_hi: int = 60) -> list[SimRequest]:
    import random

    rng = random.Random(seed)
    out = []
    for i in range(n):
        prompt = rng.randrange(8, 200)
        t = TraceRequest(f"r{seed}-{i}", 1000.0 * rng.random() * 3, prompt,
                         rng.randrange(1, out_hi), 900 + i,
                         segments=[(5000 + i, 0, prompt)])
        out.append(SimRequest(t))
    return out


class Recorder:
    """Wraps an acceptance model and records every verification (drafts, accepted)."""

    def __init__(self, model: SpecAcceptanceModel) -> None:
        self.model = model
        self.calls: list[tuple[int, int]] = []

    def __call__(self, rid: str, j: int, n: int) -> int:
        a = self.model(rid, j, n)
        self.calls.append((n, a))
        return a


def _run(reqs: list[SimRequest], k: int = 0, acc: Any = None, mnbt: int = 512,
         **kw: Any) -> Any:
    return run_engine(_manager(mnbt=mnbt), reqs, ConstantTimeModel(1.0), max_num_seqs=16,
                      max_num_batched_tokens=mnbt, num_speculative_tokens=k,
                      spec_acceptance=acc, **kw)


# ---- the engine under the acceptance model ---------------------------------------------

@settings(max_examples=12, deadline=None)
@given(st.integers(1, 6), st.integers(0, 10_000), st.integers(0, 3))
def test_p0_gives_the_plain_runs_tokens_and_accepts_nothing(k: int, seed: int,
                                                            run_seed: int) -> None:
    """p = 0: every verification accepts 0 drafts, so each step yields the one token a
    plain decode yields: the same output tokens per request (its max_tokens) as the run
    without drafts."""
    rec = Recorder(SpecAcceptanceModel(iid_rates(0.0, k), seed=run_seed))
    spec = _reqs(seed, 6)
    plain = _reqs(seed, 6)
    _run(spec, k, rec)
    _run(plain)
    assert rec.calls and all(a == 0 for _, a in rec.calls)
    assert [len(r.token_times) for r in spec] == [len(r.token_times) for r in plain] \
        == [r.output_len for r in plain]
    m = rec.model.figures()
    assert m["spec_decode_accepted_tokens"] == 0
    assert m["spec_decode_acceptance_rate"] == 0.0
    assert m["spec_decode_acceptance_length"] == 1.0


@settings(max_examples=25, deadline=None)
@given(st.integers(1, 6), st.integers(0, 10_000))
def test_p1_accepts_every_draft(k: int, seed: int) -> None:
    """p = 1: every verification accepts all its drafts; with a budget that never cuts
    a decode's drafts that is k each time (acceptance length k + 1, rate 100 %), and each
    request still yields exactly its max_tokens (vLLM trims past the stop)."""
    rec = Recorder(SpecAcceptanceModel(iid_rates(1.0, k), seed=seed))
    reqs = _reqs(seed, 6)
    _run(reqs, k, rec, mnbt=4096)
    assert rec.calls and all((n, a) == (k, k) for n, a in rec.calls)
    m = rec.model.figures()
    assert m["spec_decode_acceptance_rate"] == 100.0
    assert m["spec_decode_acceptance_length"] == k + 1
    assert m["spec_decode_per_position_acceptance_rates"] == [1.0] * k
    assert [len(r.token_times) for r in reqs] == [r.output_len for r in reqs]
    # each request takes ceil((max_tokens - 1) / (k + 1)) verifications after its prefill
    # token, the last one possibly trimmed
    want = sum(math.ceil((r.output_len - 1) / (k + 1)) for r in reqs)
    assert len(rec.calls) == want


@settings(max_examples=20, deadline=None)
@given(st.integers(1, 6), st.floats(0.0, 1.0), st.integers(0, 10_000),
       st.sampled_from([16, 64, 512]))
def test_outputs_are_exactly_max_tokens_and_counters_are_vllms(k: int, p: float,
                                                               seed: int, mnbt: int
                                                               ) -> None:
    """Whatever k, p and the budget (small budgets cut drafts): every request yields
    exactly its max_tokens; the counters are sums over the verifications as vLLM's
    observe_draft sums them; each verification accepts a prefix of its drafts."""
    rec = Recorder(SpecAcceptanceModel(iid_rates(p, k), seed=seed))
    reqs = _reqs(seed, 8)
    res = _run(reqs, k, rec, mnbt=mnbt)
    assert res.rejected == 0
    assert [len(r.token_times) for r in reqs] == [r.output_len for r in reqs]
    m = rec.model.figures()
    assert m["spec_decode_num_drafts"] == len(rec.calls)
    assert m["spec_decode_draft_tokens"] == sum(n for n, _ in rec.calls)
    assert m["spec_decode_accepted_tokens"] == sum(a for _, a in rec.calls)
    assert all(1 <= n <= k and 0 <= a <= n for n, a in rec.calls)
    per = m["spec_decode_per_position_acceptance_rates"]
    assert len(per) == k
    for i in range(k):
        assert per[i] == pytest.approx(sum(1 for _, a in rec.calls if a > i)
                                       / len(rec.calls))
    if mnbt >= 512:  # decodes never cut: every verification checks k drafts
        assert all(n == k for n, _ in rec.calls)


def _geometric_moments(p: float, k: int) -> tuple[float, float]:
    """Mean and variance of the accepted drafts G of k i.i.d. drafts (P(G >= j) = p^j)."""
    mean = sum(p ** j for j in range(1, k + 1))
    second = sum((2 * j - 1) * p ** j for j in range(1, k + 1))
    return mean, second - mean * mean


@settings(max_examples=5, deadline=None)
@given(st.integers(1, 7), st.floats(0.05, 0.95), st.integers(0, 10_000))
def test_mean_acceptance_length_matches_leviathan(k: int, p: float, seed: int) -> None:
    """A long seeded run (thousands of verifications): the mean acceptance length is
    within 5 standard errors of (1 - p^(k+1)) / (1 - p) (Leviathan et al. 2023)."""
    rec = Recorder(SpecAcceptanceModel(iid_rates(p, k), seed=seed))
    reqs = [SimRequest(TraceRequest(f"L{seed}-{i}", 0.0, 32, 600, 900 + i,
                                    segments=[(6000 + i, 0, 32)])) for i in range(8)]
    _run(reqs, k, rec, mnbt=4096)
    n = len(rec.calls)
    assert n >= 8 * 599 / (k + 1)  # at most k + 1 tokens a verification
    assert all(d == k for d, _ in rec.calls)
    want = (1 - p ** (k + 1)) / (1 - p)
    mean_g, var_g = _geometric_moments(p, k)
    assert want == pytest.approx(1 + mean_g)  # the two forms of the reference agree
    got = rec.model.figures()["spec_decode_acceptance_length"]
    assert abs(got - want) <= 5 * math.sqrt(var_g / n) + 1e-12, (got, want, n)


@settings(max_examples=30, deadline=None)
@given(st.integers(1, 8), st.floats(1.0, 9.0))
def test_synthetic_length_schedule_is_vllms(k: int, length: float) -> None:
    """vLLM's minimum-variance schedule for a mean acceptance length L: floor(L - 1)
    positions always accepted, the next with the fraction, the rest never; the expected
    length is L, and the model accepts floor(L - 1) or floor(L - 1) + 1 drafts."""
    if length > k + 1:
        with pytest.raises(ConfigError) as e:
            length_rates(length, k)
        assert "synthetic_acceptance_length" in e.value.extra["field"]
        return
    rates = length_rates(length, k)
    full = int(length - 1)
    assert len(rates) == k
    assert rates[:full] == (1.0,) * full
    assert all(r == 0.0 for r in rates[full + 1:])
    assert 1 + sum(rates) == pytest.approx(length)
    m = SpecAcceptanceModel(rates, seed=3)
    got = {m("x", j, k) for j in range(200)}
    assert got <= {full, min(full + 1, k)}


@settings(max_examples=30, deadline=None)
@given(st.lists(st.floats(0.0, 1.0), min_size=1, max_size=6), st.integers(0, 99),
       st.text(min_size=1, max_size=8), st.integers(0, 500))
def test_acceptance_is_a_pure_function_of_seed_request_and_index(
        rates: list[float], seed: int, rid: str, j: int) -> None:
    """The same (seed, request, verification) always accepts the same drafts, in any
    order and on any model object (replicas, processes); fewer drafts accept the same
    prefix, cut (the leading successes among the first n drafts)."""
    rates = sorted(rates, reverse=True)
    k = len(rates)
    a = SpecAcceptanceModel(rates, seed=seed)
    b = SpecAcceptanceModel(rates, seed=seed)
    for x in range(j % 7):  # b has seen other verifications first
        b("other", x, k)
    full = a(rid, j, k)
    assert b(rid, j, k) == full
    for n in range(1, k + 1):
        assert SpecAcceptanceModel(rates, seed=seed)(rid, j, n) == min(full, n)


def test_different_seeds_draw_differently() -> None:
    a = SpecAcceptanceModel(iid_rates(0.5, 4), seed=1)
    b = SpecAcceptanceModel(iid_rates(0.5, 4), seed=2)
    assert [a("r", j, 4) for j in range(64)] != [b("r", j, 4) for j in range(64)]


@settings(max_examples=15, deadline=None)
@given(st.integers(1, 5), st.integers(0, 1000))
def test_a_verification_step_is_timed_by_its_tokens(k: int, seed: int) -> None:
    """The step-time model sees 1 + drafts tokens for every decode that verifies drafts
    (vLLM's target model runs all of them): with 1 s per token and nothing per step,
    every step lasts exactly as many seconds as it scheduled tokens."""
    reqs = _reqs(seed, 5)
    acc = SpecAcceptanceModel(iid_rates(0.5, k), seed=seed)
    res = run_engine(_manager(), reqs, ConstantTimeModel(step_s=0.0, token_s=1.0),
                     max_num_seqs=16, max_num_batched_tokens=512,
                     num_speculative_tokens=k, spec_acceptance=acc)
    ends = res.step_end
    gaps = [b - a for a, b in zip(ends, ends[1:])]
    # (a gap can include an idle jump to the next arrival: never shorter than the step)
    assert all(g >= t - 1e-9 for g, t in zip(gaps, res.step_tokens[1:]))
    busy = [(g, t) for g, t in zip(gaps, res.step_tokens[1:]) if t > len(reqs)]
    assert busy and all(g == pytest.approx(t) for g, t in busy if g < t + 0.5)
    assert max(res.step_tokens) >= 1 + k


def test_p0_verification_costs_more_on_the_roofline() -> None:
    """On the roofline (H100), drafts that are never accepted only add work: the
    TPOT with k = 3, p = 0 is above the plain run's; with p = 1 it is below."""
    base = ["simulate", "llama-3.1-8b", "--gpu", "H100", "--dataset", "random",
            "--random-input-len", "128", "--random-output-len", "32", "--num-prompts",
            "8", "--max-concurrency", "4"]
    spec = ["--speculative-config", '{"method": "ngram", "num_speculative_tokens": 3}']
    import contextlib
    import io

    from kvcore.cli import main

    def tpot(extra: list[str]) -> float:
        buf = io.StringIO()
        with contextlib.redirect_stdout(buf):
            assert main([*base, *extra, "--json"]) == 0
        return float(json.loads(buf.getvalue())["mean_tpot_ms"])

    plain = tpot([])
    assert tpot([*spec, "--spec-acceptance-rate", "0"]) > plain
    assert tpot([*spec, "--spec-acceptance-rate", "1"]) < plain


# ---- the parser ------------------------------------------------------------------------

@settings(max_examples=40, deadline=None)
@given(st.sampled_from(SCHEDULED_METHODS), st.integers(1, 16), st.booleans())
def test_scheduled_methods_parse(method: str, k: int, drop_off: bool) -> None:
    d: dict[str, Any] = {"method": method, "num_speculative_tokens": k}
    if method in ("eagle", "eagle3"):
        d["model"] = "some/eagle-head"
    if drop_off:
        d["disable_eagle_block_drop"] = True
    s = parse_speculative_config(json.dumps(d))
    eagle = method in ("eagle", "eagle3", "mtp")
    assert (s.method, s.num_speculative_tokens) == (method, k)
    # vLLM: use_eagle() for eagle, eagle3, mtp; num_lookahead_tokens = k for them
    assert s.use_eagle == (eagle and not drop_off)
    assert s.num_lookahead_tokens == (k if eagle else 0)
    assert s.include_mtp_layers == (method == "mtp")
    assert ("model" in s.ignored) == ("model" in d)


def test_mtp_aliases_and_ngram_model_as_vllm_maps_them() -> None:
    assert parse_speculative_config(
        '{"method": "deepseek_mtp", "num_speculative_tokens": 1}').method == "mtp"
    assert parse_speculative_config(
        '{"model": "ngram", "num_speculative_tokens": 2}').method == "ngram"


BAD = [
    ("{not json", "speculative_config"),
    ("[1, 2]", "speculative_config"),
    ('{"method": "ngram"}', "num_speculative_tokens"),
    ('{"method": "ngram", "num_speculative_tokens": 0}', "num_speculative_tokens"),
    ('{"method": "ngram", "num_speculative_tokens": 2.5}', "num_speculative_tokens"),
    ('{"method": "ngram", "num_speculative_tokens": true}', "num_speculative_tokens"),
    ('{"method": "ngram", "num_speculative_tokens": 2, "draft_tokens": 3}',
     "draft_tokens"),
    ('{"method": "draft_model", "model": "m", "num_speculative_tokens": 2}', "method"),
    ('{"model": "some/draft", "num_speculative_tokens": 2}', "method"),
    ('{"method": "medusa", "num_speculative_tokens": 2}', "method"),
    ('{"method": "bogus", "num_speculative_tokens": 2}', "method"),
    ('{"method": "eagle", "num_speculative_tokens": 2}', "model"),
    ('{"method": "ngram", "num_speculative_tokens": 2, "tensor_parallel_size": 2}',
     "tensor_parallel_size"),
    ('{"method": "ngram", "num_speculative_tokens": 2, "prompt_lookup_min": 5, '
     '"prompt_lookup_max": 3}', "prompt_lookup_min"),
    ('{"method": "ngram", "num_speculative_tokens": 2, "rejection_sample_method": '
     '"synthetic"}', "rejection_sample_method"),
    ('{"method": "ngram", "num_speculative_tokens": 2, "rejection_sample_method": '
     '"synthetic", "synthetic_acceptance_rates": [0.5, 0.6]}',
     "synthetic_acceptance_rates"),
    ('{"method": "ngram", "num_speculative_tokens": 2, "rejection_sample_method": '
     '"synthetic", "synthetic_acceptance_rates": [0.5]}', "synthetic_acceptance_rates"),
    ('{"method": "ngram", "num_speculative_tokens": 2, "rejection_sample_method": '
     '"synthetic", "synthetic_acceptance_length": 3.5}', "synthetic_acceptance_length"),
    ('{"method": "ngram", "num_speculative_tokens": 2, "synthetic_acceptance_length": 2}',
     "synthetic_acceptance_length"),
    ('{"method": "ngram", "num_speculative_tokens": 2, "parallel_drafting": true}',
     "parallel_drafting"),
    ('{"method": "ngram", "num_speculative_tokens": 2, '
     '"num_speculative_tokens_per_batch_size": [[1, 8, 2]]}',
     "num_speculative_tokens_per_batch_size"),
]


@pytest.mark.parametrize("text,field", BAD)
def test_bad_configs_name_the_field(text: str, field: str) -> None:
    with pytest.raises(ConfigError) as e:
        parse_speculative_config(text)
    assert e.value.extra["field"].endswith(field), e.value.extra
    assert field in str(e.value) or field.replace("_", "-") in str(e.value)


@settings(max_examples=40, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.sampled_from([t for t, _ in BAD]))
def test_bad_configs_are_one_line_cli_errors(capsys: Any, text: str) -> None:
    rc, _, err = run_cli(capsys, ["simulate", "llama-3.1-8b", "--dataset", "random",
                                  "--num-prompts", "2", "--speculative-config", text,
                                  "--spec-acceptance-rate", "0.5"])
    assert_clean_error(rc, err, "speculative")


@pytest.mark.parametrize("extra,words", [
    (["--spec-acceptance-rate", "0.5"], ["--spec-acceptance-rate", "--speculative-config"]),
    (["--spec-acceptance-rate", "1.5", "--speculative-config",
      '{"method": "ngram", "num_speculative_tokens": 2}'], ["spec_acceptance_rate", "1.5"]),
    (["--spec-acceptance-rate", "nan", "--speculative-config",
      '{"method": "ngram", "num_speculative_tokens": 2}'], ["spec_acceptance_rate"]),
    (["--speculative-config", '{"method": "ngram", "num_speculative_tokens": 2}'],
     ["acceptance", "--spec-acceptance-rate"]),
    (["--spec-acceptance-rate", "0.5", "--speculative-config",
      '{"method": "ngram", "num_speculative_tokens": 2, "rejection_sample_method": '
      '"synthetic", "synthetic_acceptance_length": 2}'], ["--spec-acceptance-rate",
                                                         "synthetic"]),
])
def test_acceptance_flag_errors(capsys: Any, extra: list[str], words: list[str]) -> None:
    rc, _, err = run_cli(capsys, ["simulate", "llama-3.1-8b", "--dataset", "random",
                                  "--num-prompts", "2", *extra])
    assert_clean_error(rc, err, *words)


def test_replay_refuses_speculative_config(capsys: Any, tmp_path: Any) -> None:
    trace = tmp_path / "t.jsonl"
    trace.write_text(json.dumps({"timestamp": 0, "input_length": 16, "output_length": 4,
                                 "hash_ids": [1]}) + "\n")
    rc, _, err = run_cli(capsys, ["simulate", "llama-3.1-8b", "--trace", str(trace),
                                  "--scheduler", "replay", "--speculative-config",
                                  '{"method": "ngram", "num_speculative_tokens": 2}'])
    assert_clean_error(rc, err, "--speculative-config", "replay")


# ---- the CLI ---------------------------------------------------------------------------

SPEC_KEYS = ["spec_decode_acceptance_rate", "spec_decode_acceptance_length",
             "spec_decode_num_drafts", "spec_decode_draft_tokens",
             "spec_decode_accepted_tokens", "spec_decode_per_position_acceptance_rates"]
BASE = ["simulate", "llama-3.1-8b", "--dataset", "random", "--random-input-len", "64",
        "--random-output-len", "24", "--num-prompts", "12"]
NGRAM3 = ["--speculative-config", '{"method": "ngram", "num_speculative_tokens": 3}']


def _strip(d: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in d.items() if k not in ("wall_seconds", "result_file")}


@pytest.mark.parametrize("load", [["--max-concurrency", "4"], ["--request-rate", "20"]])
def test_cli_figures_and_same_seed_same_json(capsys: Any, load: list[str]) -> None:
    argv = [*BASE, *load, *NGRAM3, "--spec-acceptance-rate", "0.6", "--seed", "7"]
    a = run_json(capsys, argv)
    b = run_json(capsys, argv)
    assert _strip(a) == _strip(b)
    for k in SPEC_KEYS:
        assert k in a, k
    assert a["speculative_config"] == {"method": "ngram", "num_speculative_tokens": 3}
    assert a["spec_acceptance"]["expected_acceptance_length"] == pytest.approx(
        (1 - 0.6 ** 4) / (1 - 0.6))
    assert a["total_output_tokens"] == run_json(capsys, [*BASE, *load, "--seed", "7"])[
        "total_output_tokens"]
    assert a["spec_decode_acceptance_rate"] == pytest.approx(
        100 * a["spec_decode_accepted_tokens"] / a["spec_decode_draft_tokens"])
    assert a["spec_decode_acceptance_length"] == pytest.approx(
        1 + a["spec_decode_accepted_tokens"] / a["spec_decode_num_drafts"])
    c = run_json(capsys, [*argv[:-1], "8"])
    assert c["spec_decode_accepted_tokens"] != a["spec_decode_accepted_tokens"] or \
        c["spec_decode_per_position_acceptance_rates"] != \
        a["spec_decode_per_position_acceptance_rates"]


def test_cli_text_block_has_vllms_speculative_section(capsys: Any) -> None:
    rc, out, err = run_cli(capsys, [*BASE, *NGRAM3, "--spec-acceptance-rate", "0.5",
                                    "--max-concurrency", "2"])
    assert rc == 0, err
    for label in ("Speculative Decoding", "Acceptance rate (%):", "Acceptance length:",
                  "Drafts:", "Draft tokens:", "Accepted tokens:",
                  "Per-position acceptance (%):", "  Position 2:",
                  "the drafter's own time is not modelled"):
        assert label in out, label
    rc, out, _ = run_cli(capsys, [*BASE, "--max-concurrency", "2"])
    assert "Speculative Decoding" not in out


def test_cli_synthetic_rates_from_the_config(capsys: Any) -> None:
    """vLLM's synthetic sampler settings are the acceptance model: rates [1, 0]
    accept exactly the first draft of every verification."""
    cfg = json.dumps({"method": "ngram", "num_speculative_tokens": 2,
                      "rejection_sample_method": "synthetic",
                      "synthetic_acceptance_rates": [1.0, 0.0]})
    a = run_json(capsys, [*BASE, "--max-concurrency", "3", "--speculative-config", cfg])
    assert a["spec_decode_accepted_tokens"] == a["spec_decode_num_drafts"]
    assert a["spec_decode_acceptance_length"] == 2.0
    assert a["spec_decode_per_position_acceptance_rates"] == [1.0, 0.0]


def test_cli_fleet_takes_the_config_and_one_replica_equals_the_engine(capsys: Any
                                                                      ) -> None:
    argv = [*BASE, "--max-concurrency", "4", *NGRAM3, "--spec-acceptance-rate", "0.6"]
    one = run_json(capsys, argv)
    fleet1 = run_json(capsys, [*argv, "--replicas", "1"])
    for k in SPEC_KEYS + ["total_output_tokens", "mean_tpot_ms", "duration"]:
        assert fleet1[k] == pytest.approx(one[k]), k
    fleet2 = run_json(capsys, [*argv, "--replicas", "2", "--router", "round-robin"])
    assert fleet2["spec_decode_num_drafts"] > 0
    assert fleet2["total_output_tokens"] == one["total_output_tokens"]


def test_cli_save_result_carries_the_figures(capsys: Any, tmp_path: Any) -> None:
    a = run_json(capsys, [*BASE, "--max-concurrency", "4", *NGRAM3,
                          "--spec-acceptance-rate", "0.6", "--save-result",
                          "--result-dir", str(tmp_path)])
    saved = json.loads(open(a["result_file"], encoding="utf-8").read())
    for k in SPEC_KEYS:
        assert saved[k] == a[k], k


@pytest.mark.parametrize("method", ["eagle3", "mtp"])
def test_cli_eagle_and_mtp_run(capsys: Any, method: str) -> None:
    """EAGLE-style methods run with vLLM's block drop and lookahead slots; mtp plans the
    MTP layers (deepseek-v3-style config with num_nextn_predict_layers)."""
    if method == "mtp":
        pytest.importorskip("kvcore_mla")  # deepseek_v3 is the MLA plugin's
    model = "llama-3.1-8b" if method == "eagle3" else "deepseek-v3"
    cfg: dict[str, Any] = {"method": method, "num_speculative_tokens": 2}
    if method == "eagle3":
        cfg["model"] = "some/eagle3-head"
    a = run_json(capsys, ["simulate", model, "--dataset", "random", "--random-input-len",
                          "64", "--random-output-len", "16", "--num-prompts", "6",
                          "--max-concurrency", "3", "--speculative-config",
                          json.dumps(cfg), "--spec-acceptance-rate", "0.8",
                          "--kv-cache-memory", "8GiB", "--max-model-len", "4096"])
    assert a["completed"] == 6 and a["spec_decode_num_drafts"] > 0
    assert "prefill lookahead" in a["note"]


# ---- kvcore tune -----------------------------------------------------------------------

TUNE = ["tune", "llama-3.1-8b", "--gpu", "H100", "--dataset", "random",
        "--random-input-len", "128", "--random-output-len", "16", "--num-prompts", "8",
        "--max-concurrency", "4", "--tp", "1", "--max-num-batched-tokens", "2048",
        "--max-num-seqs", "16", "--kv-cache-dtype", "auto", "--backend", "serial"]


def test_tune_keeps_the_config_fixed_and_prints_it(capsys: Any) -> None:
    import shlex

    cfg = {"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_max": 4}
    out = run_json(capsys, [*TUNE, "--speculative-config", json.dumps(cfg),
                            "--spec-acceptance-rate", "1"])
    line = shlex.split(out["best"]["vllm_serve"])
    i = line.index("--speculative-config")
    assert json.loads(line[i + 1]) == cfg
    assert "--spec-acceptance-rate" not in line  # kvcore's, not a vLLM flag
    assert out["speculative_config"] == cfg
    assert out["best"]["figures"]["spec_decode_acceptance_rate"] == 100.0
    assert out["best"]["figures"]["spec_decode_acceptance_length"] == 4.0
    plain = run_json(capsys, TUNE)
    assert "--speculative-config" not in plain["best"]["vllm_serve"]
    assert out["best"]["figures"]["median_tpot_ms"] < plain["best"]["figures"][
        "median_tpot_ms"]


@pytest.mark.parametrize("extra,words", [
    (["--speculative-config", '{"method": "ngram", "num_speculative_tokens": 2}',
      "--spec-acceptance-rate", "0.5", "--fast"], ["--fast", "speculative"]),
    (["--spec-acceptance-rate", "0.5"], ["--speculative-config"]),
    (["--speculative-config", '{"method": "ngram"}', "--spec-acceptance-rate", "0.5"],
     ["num_speculative_tokens"]),
    (["--speculative-config", '{"method": "ngram", "num_speculative_tokens": 2}'],
     ["--spec-acceptance-rate"]),
])
def test_tune_bad_speculative_input(capsys: Any, extra: list[str], words: list[str]
                                    ) -> None:
    rc, _, err = run_cli(capsys, [*TUNE, *extra])
    assert_clean_error(rc, err, *words)


@pytest.mark.parametrize("cmd", ["simulate", "tune"])
def test_mtp_needs_mtp_layers(capsys: Any, cmd: str) -> None:
    """vLLM's mtp method drafts with the checkpoint's MTP layers: llama-3.1-8b's config
    has none (no num_nextn_predict_layers / mtp_num_hidden_layers)."""
    argv = TUNE if cmd == "tune" else BASE
    rc, _, err = run_cli(capsys, [*argv, "--speculative-config",
                                  '{"method": "mtp", "num_speculative_tokens": 1}',
                                  "--spec-acceptance-rate", "0.5"])
    assert_clean_error(rc, err, "mtp", "MTP layers", "llama-3.1-8b")


# ---- the optional drafter-time term ----------------------------------------------------

@settings(max_examples=20, deadline=None)
@given(st.integers(1, 5), st.floats(0.0, 2.0), st.integers(2, 40))
def test_draft_cost_hand_case(k: int, cost: float, out: int) -> None:
    """One request alone, 1 s a step (ConstantTimeModel), every draft accepted: the
    prefill step takes 1 s and samples token 1; each of the ceil((out - 1) / (k + 1))
    verification steps takes 1 s for the target plus k passes of cost x 1 s (a decode
    step of the one request), so the last token comes at 1 + v (1 + k cost) s."""
    from kvcore.sim.speculative import DraftCostTimeModel

    m = _manager()
    r = SimRequest(TraceRequest("a", 0.0, 40, out, 901, segments=[(7001, 0, 40)]))
    tm = DraftCostTimeModel(ConstantTimeModel(1.0), m.kv_cache_config, k, cost)
    run_engine(m, [r], tm, max_num_seqs=8, max_num_batched_tokens=512,
               num_speculative_tokens=k,
               spec_acceptance=SpecAcceptanceModel(iid_rates(1.0, k)))
    v = math.ceil((out - 1) / (k + 1))
    assert r.latency == pytest.approx(1 + v * (1 + k * cost))
    assert len(r.token_times) == out


def test_draft_cost_default_leaves_figures_unchanged(capsys: Any) -> None:
    argv = [*BASE, "--gpu", "H100", "--max-concurrency", "4", *NGRAM3,
            "--spec-acceptance-rate", "0.6"]
    free = run_json(capsys, argv)
    zero = run_json(capsys, [*argv, "--spec-draft-cost", "0"])
    assert _strip(free) == _strip(zero)
    paid = run_json(capsys, [*argv, "--spec-draft-cost", "0.1"])
    assert paid["mean_tpot_ms"] > free["mean_tpot_ms"]
    assert paid["spec_decode_num_drafts"] == free["spec_decode_num_drafts"]
    assert "--spec-draft-cost" in paid["note"] and "drafting passes" in paid["time_model"]


@pytest.mark.parametrize("extra,words", [
    (["--spec-draft-cost", "0.1"], ["--spec-draft-cost", "--speculative-config"]),
    ([*NGRAM3, "--spec-acceptance-rate", "0.5", "--spec-draft-cost", "-1"],
     ["spec_draft_cost"]),
    ([*NGRAM3, "--spec-acceptance-rate", "0.5", "--spec-draft-cost", "inf"],
     ["spec_draft_cost"]),
])
def test_draft_cost_bad_input(capsys: Any, extra: list[str], words: list[str]) -> None:
    rc, _, err = run_cli(capsys, [*BASE, *extra])
    assert_clean_error(rc, err, *words)


def test_tune_takes_the_draft_cost(capsys: Any) -> None:
    argv = [*TUNE, *NGRAM3, "--spec-acceptance-rate", "0.6"]
    free = run_json(capsys, argv)["best"]["figures"]
    paid = run_json(capsys, [*argv, "--spec-draft-cost", "0.2"])["best"]["figures"]
    assert paid["median_tpot_ms"] > free["median_tpot_ms"]


def test_fleet_router_prediction_follows_eagles_block_drop(capsys: Any) -> None:
    """With eagle3 the replicas drop the last matched block of a hit (vLLM's
    use_eagle); the prefix-aware router's residency index applies the same rule, so
    on one replica its predicted hit ratio equals the replica's measured one, as it
    does without drafts."""
    argv = ["simulate", "llama-3.1-8b", "--dataset", "prefix_repetition",
            "--num-prompts", "12", "--prefix-repetition-num-prefixes", "3",
            "--prefix-repetition-prefix-len", "64", "--prefix-repetition-suffix-len", "16",
            "--prefix-repetition-output-len", "8", "--max-concurrency", "1",
            "--replicas", "1", "--router", "prefix-aware"]
    eagle = ["--speculative-config", '{"method": "eagle3", "model": "h", '
             '"num_speculative_tokens": 2}', "--spec-acceptance-rate", "0.5"]
    plain = run_json(capsys, argv)
    drop = run_json(capsys, [*argv, *eagle])
    assert plain["router_predicted_hit_ratio"] == pytest.approx(plain["prefix_hit_ratio"])
    assert drop["router_predicted_hit_ratio"] == pytest.approx(drop["prefix_hit_ratio"])
    assert drop["prefix_hit_ratio"] < plain["prefix_hit_ratio"]  # one block less a hit
