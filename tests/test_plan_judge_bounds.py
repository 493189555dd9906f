"""The serving judge runs only when there is a choice, and the sim judge's default
workload is bounded.

Ported from tester1's finding 17 (TESTER1.md): `kvcore plan llama-3.1-8b --gpu H100
--judge sim` simulated 48 requests of 131,072 tokens for a plan with one candidate
layout.  Rules: with one distinct layout (vLLM's own) there is nothing to choose, so no
judge is called; without --workload the default workload's outputs (max_model_len // 4
tokens, one decode step each) are cut for the sim judge, its prompts and shared prefixes
(what windows, chunks and prefix hits depend on) kept, and the judge says so."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

import kvcore
from kvcore import serving
from kvcore.plan_serving import (
    DEFAULT_WORKLOAD_MAX_OUTPUT_LEN,
    bounded_default_workload,
    sim_judge,
)


def test_judge_not_called_with_a_single_candidate() -> None:
    calls: list[int] = []

    def judge(cands: Any, workload: Any) -> list[float]:
        calls.append(len(cands))
        return [1.0] * len(cands)

    kvcore.plan_model("llama-3.1-8b", kv_cache_memory_bytes=20 * 2**30,
                      max_model_len=8192, judge=judge)
    assert calls == []


@settings(max_examples=12, deadline=None, derandomize=True)
@given(model=st.sampled_from(["llama-3.1-8b", "mistral-7b-v0.1", "gemma-2-2b-it",
                              "gpt-oss-20b", "gemma-3-27b-it", "qwen3-8b"]),
       mml=st.sampled_from([2048, 8192, 32768]), gib=st.sampled_from([8, 20, 60]))
def test_judge_called_only_with_two_distinct_layouts(model: str, mml: int, gib: int
                                                     ) -> None:
    seen: list[list[Any]] = []

    def judge(cands: Any, workload: Any) -> list[float]:
        seen.append([tuple(c.groups()) for c in cands])
        return [float(i + 1) for i in range(len(cands))]

    try:
        c = kvcore.plan_model(model, kv_cache_memory_bytes=gib * 2**30, max_model_len=mml,
                              judge=judge)
    except (kvcore.NotEnoughMemoryError, kvcore.ConfigError):
        return  # does not fit, or longer than the model's positions
    for layouts in seen:
        assert len(set(layouts)) >= 2, layouts  # a choice between distinct layouts
    if not seen:  # not judged: the analytic proxy's figures stand
        assert c.stats.serving is None or c.stats.serving.judged_by == "analytic"


@settings(max_examples=30, deadline=None, derandomize=True)
@given(mml=st.integers(2, 1 << 20), mnbt=st.sampled_from([2048, 8192, 16384]),
       cap=st.integers(1, 4096))
def test_default_workload_outputs_are_cut(mml: int, mnbt: int, cap: int) -> None:
    wl = serving.default_workload(mml, mnbt)
    cut = bounded_default_workload(wl, cap)
    assert cut.num_requests == wl.num_requests and cut.max_num_seqs == wl.max_num_seqs
    for a, b in zip(wl.requests, cut.requests):
        assert b.output_len == min(a.output_len, cap)
        assert (b.prompt_len, b.shared_prefix_len, b.count) == \
            (a.prompt_len, a.shared_prefix_len, a.count)
    if any(r.output_len > cap for r in wl.requests):
        assert "cut" in cut.source
    else:
        assert cut is wl


def test_a_given_workload_is_not_cut() -> None:
    wl = serving.workload_from_requests([(100_000, 30_000, 0)] * 4, source="trace x")
    assert bounded_default_workload(wl) is wl


def test_131k_default_workload_is_bounded() -> None:
    """tester1 #17's case: 131,072 tokens -> outputs of 32,768 decode steps each; the sim
    judge serves at most DEFAULT_WORKLOAD_MAX_OUTPUT_LEN of them."""
    wl = serving.default_workload(131072, 8192)
    assert max(r.output_len for r in wl.requests) == 32768
    assert max(r.output_len for r in bounded_default_workload(wl).requests) == \
        DEFAULT_WORKLOAD_MAX_OUTPUT_LEN


def test_sim_judge_says_it_cut_the_default_workload() -> None:
    # constant steps and 2 requests: the bound, not the timing, is tested
    j = sim_judge(None, max_requests=2, max_requests_cap=2)
    seen: list[Any] = []
    assert j is not None
    inner = j

    def spy(cands: Any, workload: Any) -> Any:
        seen.append(workload)
        out = inner(cands, workload)
        spy.judged_by = inner.judged_by  # type: ignore[attr-defined]
        return out

    spy.judged_by = inner.judged_by  # type: ignore[attr-defined]
    c = kvcore.plan_model("gemma-2-2b-it", kv_cache_memory_bytes=2**30,
                          max_model_len=2048, judge=spy)
    assert seen, "gemma-2 has a choice of layouts (1 or 2 groups)"
    assert seen[0].source.startswith("default")
    assert "outputs cut to" in c.stats.serving.judged_by
