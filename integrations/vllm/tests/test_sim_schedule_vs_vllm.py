"""kvcore's simulator loop (``kvcore.sim.engine.run_engine`` over
``kvcore.runtime.KVCacheManager``) schedules exactly as vLLM 0.32's real ``Scheduler``.

Each seeded workload (``kvcore_vllm.harness.Workload.shared_prefixes``: shared prefixes,
private suffixes, arrivals over the first steps) runs twice: through vLLM's Scheduler
with vLLM's own KVCacheManager (the harness), and through kvcore's engine on the same
plan (vLLM's ``KVCacheConfig`` converted by ``kvcore_vllm.specs.from_vllm_config``),
with a constant step time of 1 s so that the engine's clock counts the harness's steps
(the harness adds a request at the step of its ``arrival_step``).  For
sliding-window hybrids the reference Scheduler runs over kvcore_vllm's manager in
kvcore's retention mode (see :func:`_vllm_steps`): the scheduler is vLLM's, the
prefix-cache retention kvcore's.  Every step's
scheduled requests with their token counts (in schedule order), preempted requests and
finished requests must be equal, and the step at which each happens.

Block sizes 16 and 32; token budgets are small (chunked prefill under 32 to 128 tokens, long-prefill
thresholds) and pools tight (preemption by recompute); the suite asserts that the
workloads, taken together, exercise chunking, preemption and prefix hits, so a drift
into trivial workloads fails instead of passing.

Not covered (the engine does not model them step for step): Mamba hybrids in ``align``
mode (the engine cuts prefill chunks with kvcore's ``max_prefill_chunk_tokens``, not
vLLM's ``_mamba_block_aligned_split``, which may also schedule 0 tokens and stop the
waiting loop; on seeded workloads they diverge within a few steps), speculative
decoding, async scheduling, aborts and prefix-cache resets."""

from __future__ import annotations

import random
from typing import Any

import pytest
from kvcore_vllm.harness import Workload, make_scheduler, run

SWA = ("sliding", {"sliding_window": 64})
FULL = ("full", {})

#: (layers, num_blocks choices); budgets and thresholds are drawn per seed
KINDS = {
    "dense": [FULL, FULL],
    "sliding_window_hybrid": [SWA] * 5 + [FULL],
    "chunked_local_hybrid": [("chunked", {"chunk": 64})] * 3 + [FULL],
}
SEEDS = range(8)


def _workload(kind: str, seed: int) -> Workload:
    rng = random.Random(1000 * seed + len(kind))
    bs = rng.choice([16, 16, 32])
    return Workload.shared_prefixes(
        seed, n=rng.randrange(12, 32), layers=KINDS[kind], max_model_len=512,
        block_size=bs, num_blocks=rng.choice([34, 40, 60, 200]) * 16 // bs + 1,
        max_num_batched_tokens=rng.choice([32, 64, 128]),
        long_prefill_token_threshold=rng.choice([0, 16, 32]),
        max_num_seqs=rng.choice([4, 8, 16]), log_stats=False, events=False)


def _vllm_steps(w: Workload, kind: str
                ) -> list[tuple[int, list[tuple[str, int]], list[str], list[str]]]:
    """(step, scheduled in order, preempted, finished by that step) per step that did
    something; a request finished in step k is in the output of step k + 1.

    Dense and chunked-local hybrids: vLLM's Scheduler with vLLM's own KVCacheManager.
    Sliding-window hybrids: vLLM's Scheduler with kvcore_vllm's manager in kvcore's
    retention and block order (``retention="kvcore"``: every full block of a windowed
    group stays cached, as in kvcore's runtime, where vLLM caches only the blocks its
    retention policy can reach again; hits, and so chunk sizes, differ by design, not
    by the scheduler: against vLLM's own manager these workloads diverge at the first
    hit that reaches past a window)."""
    if kind != "sliding_window_hybrid":
        out = run(w, "vllm")["steps"]
    else:
        out = run(w, "kvcore", retention="kvcore", block_order="kvcore")["steps"]
    steps = []
    for k, s in enumerate(out[:-1]):
        fin = sorted(out[k + 1]["finished"])
        sched = list(s["num_scheduled_tokens"].items())
        if sched or s["preempted"] or fin:
            steps.append((k, sched, sorted(s["preempted"]), fin))
    return steps


def _engine_steps(w: Workload) -> tuple[list[Any], Any]:
    from kvcore_vllm.specs import from_vllm_config

    from kvcore.runtime import KVCacheManager
    from kvcore.sim.engine import SimRequest, run_engine
    from kvcore.sim.timing import ConstantTimeModel
    from kvcore.sim.traces import TraceRequest

    vcfg = make_scheduler(w).kv_cache_config
    kcfg = from_vllm_config(vcfg, max_model_len=w.max_model_len)
    mgr = KVCacheManager(kcfg, max_model_len=w.max_model_len,
                         max_num_batched_tokens=w.max_num_batched_tokens)
    reqs = [SimRequest(TraceRequest(rid, 1000.0 * arr, len(p), mt, 10_000 + i,
                                    token_ids=list(p)))
            for i, (rid, p, mt, arr) in enumerate(w.requests)]
    rec: list[Any] = []

    def hook(step: int, sched: list[tuple[str, int]], pre: list[str],
             fin: list[str]) -> None:
        rec.append((sched, sorted(pre), sorted(fin)))

    res = run_engine(mgr, reqs, ConstantTimeModel(step_s=1.0), max_num_seqs=w.max_num_seqs,
                     max_num_batched_tokens=w.max_num_batched_tokens,
                     long_prefill_token_threshold=w.long_prefill_token_threshold,
                     max_model_len=w.max_model_len, on_step=hook)
    # the clock is in steps: step j ran from step_end[j] - 1 to step_end[j]
    steps = [(round(res.step_end[j]) - 1, s, p, f) for j, (s, p, f) in enumerate(rec)
             if s or p or f]
    return steps, res


def _diff(a: list[Any], b: list[Any]) -> str:
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return f"entry {i}: vllm={x!r:.300} kvcore={y!r:.300}"
    return f"lengths differ: vllm {len(a)} kvcore {len(b)}"


FEATURES: dict[str, dict[str, int]] = {}


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("kind", list(KINDS))
def test_engine_schedules_as_vllm(kind: str, seed: int) -> None:
    w = _workload(kind, seed)
    ref = _vllm_steps(w, kind)
    got, res = _engine_steps(w)
    assert ref, "workload did not run"
    assert got == ref, _diff(ref, got)
    assert res.rejected == 0
    assert sorted(f for s in got for f in s[3]) == sorted(r[0] for r in w.requests)
    f = FEATURES.setdefault(kind, {"preempted": 0, "chunks": 0, "hits": 0})
    f["preempted"] += res.preemptions
    f["chunks"] += sum(1 for _, s, _, _ in got for _, n in s
                       if n > 1 and n in (w.long_prefill_token_threshold,
                                          w.max_num_batched_tokens))
    f["hits"] += res.prefix_hit_tokens


def test_workloads_exercise_chunking_preemption_and_hits() -> None:
    """Runs after the parametrized cases (same module, file order)."""
    if len(FEATURES) < len(KINDS):
        pytest.skip("run with the whole module")
    for kind in ("dense", "sliding_window_hybrid"):
        f = FEATURES[kind]
        assert f["preempted"] > 0 and f["chunks"] > 0 and f["hits"] > 0, (kind, f)
