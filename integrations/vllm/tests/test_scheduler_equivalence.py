"""vLLM 0.32's real Scheduler, run twice per workload: once with vLLM's KVCacheManager,
once with kvcore_vllm.KVCacheManager.  Same requests, same sampled tokens (seeded);
every step's SchedulerOutput (scheduled tokens per request, new and cached requests
with computed tokens and block ids, preempted and finished requests, speculative
tokens), the prefix-cache stats and the KV events must be identical.

Each workload also asserts that it exercises what it is named for (hits, preemptions,
chunked prefills, speculative tokens), so a workload that drifted into a trivial one
fails instead of passing vacuously."""

from __future__ import annotations

import pytest
from kvcore_vllm.harness import Workload, run

SEEDS = (0, 1, 2)
SWA = ("sliding", {"sliding_window": 64})
FULL = ("full", {})

WORKLOADS = {
    # shared prefixes, plenty of blocks: prefix hits
    "full_shared_prefixes": dict(layers=[FULL, FULL], max_model_len=512, num_blocks=400),
    # Gemma-like: 5 sliding-window layers per full-attention layer
    "gemma_like_hybrid": dict(layers=[SWA] * 5 + [FULL], max_model_len=512,
                              num_blocks=200),
    # a pool small enough that running requests are preempted
    "small_pool_preemption": dict(layers=[FULL, FULL], max_model_len=512, num_blocks=34),
    "hybrid_small_pool": dict(layers=[SWA] * 5 + [FULL], max_model_len=512,
                              num_blocks=40),
    # chunked prefill under a small token budget
    "chunked_prefill": dict(layers=[FULL, FULL], max_model_len=512, num_blocks=60,
                            max_num_batched_tokens=64, long_prefill_token_threshold=32),
    # speculative decoding (ngram drafts) with random acceptance
    "spec_decode": dict(layers=[FULL, FULL], max_model_len=512, num_blocks=60,
                        num_spec_tokens=3, accept=0.6),
    # Mamba hybrid in align mode (3 state layers : 1 full), small pool: preemptions
    "mamba_align_small_pool": dict(layers=[("mamba", {})] * 3 + [FULL], max_model_len=512,
                                   num_blocks=40),
    # Mamba align with speculative blocks and ngram drafts, chunked prefill
    "mamba_align_spec_decode": dict(layers=[("mamba", {"spec_blocks": 2})] * 3 + [FULL],
                                    max_model_len=512, num_blocks=80, num_spec_tokens=2,
                                    max_num_batched_tokens=64),
    # vLLM's AsyncScheduler: one step in flight (placeholders, in-flight tokens)
    "async_small_pool": dict(layers=[FULL, FULL], max_model_len=512, num_blocks=40,
                             async_scheduling=True),
    "async_hybrid_chunked": dict(layers=[SWA] * 5 + [FULL], max_model_len=512,
                                 num_blocks=50, max_num_batched_tokens=64,
                                 async_scheduling=True),
    "async_mamba_align": dict(layers=[("mamba", {})] * 3 + [FULL], max_model_len=512,
                              num_blocks=40, async_scheduling=True),
    # chunked-local attention (Llama 4 style) beside full attention
    "chunked_local_hybrid": dict(layers=[("chunked", {"chunk": 64})] * 3 + [FULL],
                                 max_model_len=512, num_blocks=120),
}


def _features(res: dict) -> dict[str, int]:
    steps = res["steps"]
    return {
        "hits": sum(s[3] for s in res["stats"]),
        "preempted": sum(len(s["preempted"]) for s in steps),
        "spec": sum(len(s["spec"]) for s in steps),
        "chunks": sum(1 for s in steps for rid, n in s["num_scheduled_tokens"].items()
                      if n == 32),
        "finished": sum(len(s["finished"]) for s in steps),
    }


def _first_difference(a: list, b: list) -> str:
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            keys = [k for k in x if x[k] != y.get(k)] if isinstance(x, dict) else []
            return f"step {i} differs in {keys or 'value'}: vllm={x!r:.400} kvcore={y!r:.400}"
    return f"lengths differ: {len(a)} vs {len(b)}"


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("name", list(WORKLOADS))
def test_identical_scheduler_outputs(name: str, seed: int) -> None:
    w = Workload.shared_prefixes(seed, **WORKLOADS[name])
    ref = run(w, "vllm")
    got = run(w, "kvcore")
    assert ref["num_steps"] > 0 and ref["steps"], "workload did not run"
    assert got["steps"] == ref["steps"], _first_difference(ref["steps"], got["steps"])
    assert got["stats"] == ref["stats"], _first_difference(ref["stats"], got["stats"])
    assert got["events"] == ref["events"], _first_difference(ref["events"], got["events"])
    f = _features(ref)
    assert f["finished"] == len(w.requests)
    assert f["hits"] > 0
    if "preemption" in name or "small_pool" in name or name == "async_mamba_align":
        assert f["preempted"] > 0, f
    if name == "chunked_prefill":
        assert f["chunks"] > 0, f
    if "spec_decode" in name:
        assert f["spec"] > 0, f


@pytest.mark.parametrize("seed", (0, 1))
def test_identical_with_kvcore_planner(seed: int) -> None:
    """The same two managers on a plan made by kvcore_vllm.get_kv_cache_configs."""
    w = Workload.shared_prefixes(seed, layers=[SWA] * 5 + [FULL], max_model_len=512,
                                 num_blocks=200, planner="kvcore")
    ref, got = run(w, "vllm"), run(w, "kvcore")
    assert got["steps"] == ref["steps"], _first_difference(ref["steps"], got["steps"])
    assert got["stats"] == ref["stats"]
    assert got["events"] == ref["events"]


@pytest.mark.parametrize("seed", (0, 1))
def test_kvcore_options_run_the_same_requests(seed: int) -> None:
    """block_order="kvcore" / retention="kvcore" are kvcore's own choices: block ids and
    hit counts may differ from vLLM's, but every request finishes with the same tokens
    scheduled in total, and the pool is empty at the end."""
    w = Workload.shared_prefixes(seed, layers=[SWA] * 5 + [FULL], max_model_len=512,
                                 num_blocks=100)
    ref = run(w, "vllm")
    got = run(w, "kvcore", block_order="kvcore", retention="kvcore")
    fin_ref = sorted(r for s in ref["steps"] for r in s["finished"])
    fin_got = sorted(r for s in got["steps"] for r in s["finished"])
    assert fin_got == fin_ref == sorted(r[0] for r in w.requests)
    assert got["usage"] == 0.0
    # dense retention finds at least as many hits as vLLM's sparse one
    assert sum(s[3] for s in got["stats"]) >= sum(s[3] for s in ref["stats"])


@pytest.mark.parametrize("seed", range(20))
def test_identical_on_generated_configurations(seed: int) -> None:
    """Generated configurations (Workload.random: block size, full / sliding-window /
    chunked-local mixes, tight to plenty pools, token budgets, long-prefill thresholds,
    speculative decoding, Mamba align hybrids, sync or async scheduling, exact
    resends, block-aligned prompts, cache salts, aborts, prefix-cache resets with and
    without running requests, vLLM's or kvcore's planner): the two managers drive
    vLLM's Scheduler identically.  (150 seeds were checked by hand with the same
    driver; CI runs 20.)"""
    w = Workload.random(seed)
    ref, got = run(w, "vllm"), run(w, "kvcore")
    assert got["steps"] == ref["steps"], _first_difference(ref["steps"], got["steps"])
    assert got["stats"] == ref["stats"], _first_difference(ref["stats"], got["stats"])
    assert got["events"] == ref["events"], _first_difference(ref["events"], got["events"])
    assert got["resets"] == ref["resets"]
    assert ref["num_steps"] > 0
