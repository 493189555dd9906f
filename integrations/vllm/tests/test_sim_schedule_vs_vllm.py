"""kvcore's simulator loop (``kvcore.sim.engine.run_engine`` over
``kvcore.runtime.KVCacheManager``) schedules exactly as vLLM 0.32's real ``Scheduler``.

Each seeded workload (``kvcore_vllm.harness.Workload.shared_prefixes``: shared prefixes,
private suffixes, arrivals over the first steps) runs twice: through vLLM's Scheduler
with vLLM's own KVCacheManager (the harness), and through kvcore's engine on the same
plan (vLLM's ``KVCacheConfig`` converted by ``kvcore_vllm.specs.from_vllm_config``),
with a constant step time of 1 s so that the engine's clock counts the harness's steps
(the harness adds a request at the step of its ``arrival_step``).  For
sliding-window and Mamba ``align`` hybrids the reference Scheduler runs over
kvcore_vllm's manager in kvcore's retention mode (see :func:`_vllm_steps`): the
scheduler is vLLM's, the prefix-cache retention kvcore's.  Every step's
scheduled requests with their token counts (in schedule order), preempted requests and
finished requests must be equal, and the step at which each happens.

Block sizes 16 and 32; token budgets are small (chunked prefill under 32 to 128
tokens, long-prefill thresholds) and pools tight (preemption by recompute); the suite
asserts that the workloads, taken together, exercise chunking, preemption and prefix
hits, so a drift into trivial workloads fails instead of passing.

Mamba hybrids (vLLM 0.32's ``Scheduler._mamba_block_aligned_split``, which the engine
ports as ``kvcore.sim.engine.mamba_block_aligned_split``): synthetic 3 state : 1 full
layers in ``align`` mode and in ``none`` mode (prefix caching off, as vLLM's
``MambaModelConfig`` sets it; against vLLM's own manager), and two real hybrids from
kvcore's embedded configs in ``align`` mode with vLLM's raised block sizes
(mamba2attn-2.7b: 96-token blocks, 11 groups; qwen3-next-80b-a3b: 544-token blocks,
wider than the prefill chunks).  The Mamba workloads must also show the split at work:
chunks it shortened, and chunks it refused (0 tokens: the running loop skips the
request, the waiting loop stops).  ``mamba_cache_mode="all"`` has no counterpart:
vLLM 0.32's ``CacheConfig`` accepts only ``align`` and ``none``.  The split itself is
checked against vLLM's function on generated arguments (every branch: partial hash
hits, prefill checkpoint blocks, EAGLE, shared-prefix junctions).

Speculative decoding (``num_speculative_tokens`` 1, 2 or 4; vLLM's ngram drafter's
scheduling: no lookahead slots): dense, sliding-window, chunked-local and Mamba
``align`` hybrids (with speculative state blocks), the drafts accepted by a fixed
pattern (:func:`_accept`, the same on both sides); the suite asserts decodes with
drafts, partial, full and no acceptance, preemptions and hits.

Not covered (the engine does not model them step for step): async scheduling, aborts,
prefix-cache resets, EAGLE-style lookahead slots and drafters with extra drafting slots
(``max_num_new_slots_for_drafting`` > 0)."""

from __future__ import annotations

import random
import zlib
from types import SimpleNamespace
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kvcore_vllm.harness import Workload, make_scheduler, run

SWA: tuple[str, dict[str, Any]] = ("sliding", {"sliding_window": 64})
FULL: tuple[str, dict[str, Any]] = ("full", {})

#: layers per kind; budgets, thresholds and pools are drawn per seed
KINDS = {
    "dense": [FULL, FULL],
    "sliding_window_hybrid": [SWA] * 5 + [FULL],
    "chunked_local_hybrid": [("chunked", {"chunk": 64})] * 3 + [FULL],
    "mamba_align_hybrid": [("mamba", {})] * 3 + [FULL],
    "mamba_none_hybrid": [("mamba", {"mode": "none"})] * 3 + [FULL],
}
#: real Mamba hybrids (kvcore's embedded configs), align mode
MODELS = {"mamba2attn": "mamba2attn-2.7b", "qwen3_next": "qwen3-next-80b-a3b-thinking"}
#: kinds whose reference Scheduler runs over kvcore_vllm's manager in kvcore's retention
KVCORE_RETENTION = {"sliding_window_hybrid", "mamba_align_hybrid", *MODELS}
SEEDS = range(8)


def _workload(kind: str, seed: int) -> Workload:
    if kind in MODELS:
        return _model_workload(MODELS[kind], seed)
    rng = random.Random(1000 * seed + len(kind))
    bs = rng.choice([16, 16, 32])
    # a Mamba request holds 2 state blocks per group (6 here): smaller pools preempt
    pools = [12, 14, 20, 60] if kind.startswith("mamba") else [34, 40, 60, 200]
    return Workload.shared_prefixes(
        seed, n=rng.randrange(12, 32), layers=KINDS[kind], max_model_len=512,
        block_size=bs, num_blocks=rng.choice(pools) * 16 // bs + 1,
        max_num_batched_tokens=rng.choice([32, 64, 128]),
        long_prefill_token_threshold=rng.choice([0, 16, 32]),
        max_num_seqs=rng.choice([4, 8, 16]), log_stats=False, events=False,
        prefix_caching=kind != "mamba_none_hybrid")


def _model_workload(model: str, seed: int) -> Workload:
    """A real hybrid: 300- to 1,400-token shared prefixes (hits past the 96- and
    544-token blocks), private suffixes, budgets of 256 to 1,024 tokens."""
    rng = random.Random(seed + 17 * len(model))
    w = Workload(seed=seed, layers=[], model=model, mamba_cache_mode="align",
                 max_model_len=2048, block_size=16, num_blocks=rng.choice([8, 12, 40]),
                 max_num_batched_tokens=rng.choice([256, 512, 1024]),
                 long_prefill_token_threshold=rng.choice([0, 128, 384]),
                 max_num_seqs=rng.choice([4, 8]), log_stats=False, events=False)
    prefixes = [[rng.randrange(1, 32000) for _ in range(rng.randrange(300, 1400))]
                for _ in range(3)]
    for i in range(rng.randrange(10, 20)):
        p = list(rng.choice(prefixes)) if rng.random() < 0.8 else []
        p += [rng.randrange(1, 32000) for _ in range(rng.randrange(1, 400))]
        w.requests.append((f"r{i}", p[:1900], rng.randrange(1, 40), rng.randrange(0, 30)))
    return w


def _vllm_steps(w: Workload, kind: str
                ) -> list[tuple[int, list[tuple[str, int]], list[str], list[str]]]:
    """(step, scheduled in order, preempted, finished by that step) per step that did
    something; a request finished in step k is in the output of step k + 1.

    Dense, chunked-local and Mamba ``none`` hybrids: vLLM's Scheduler with vLLM's own
    KVCacheManager.  Sliding-window and Mamba ``align`` hybrids: vLLM's Scheduler with
    kvcore_vllm's manager in kvcore's retention and block order
    (``retention="kvcore"``: every full block of a windowed group stays cached, and
    kvcore's own Mamba manager caches the state at every chunk end on a block boundary
    once its step has run, as in kvcore's runtime; vLLM caches only the blocks its
    retention policy can reach again (``prefix_cache_retention_interval`` 0: the replay
    boundary and shared-prefix junctions) and a Mamba state at allocation, barring
    same-step hits on it.  Hits, and so chunk sizes, differ by design, not by the
    scheduler: against vLLM's own manager these workloads diverge at the first hit
    that reaches past a window or a state vLLM did not keep)."""
    if kind not in KVCORE_RETENTION:
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


def _engine_steps(w: Workload, splits: list[tuple[int, int]] | None = None,
                  verified: list[tuple[int, int]] | None = None
                  ) -> tuple[list[Any], Any]:
    """The engine's steps as :func:`_vllm_steps` gives vLLM's; ``splits`` collects
    ``(tokens asked, tokens given)`` of each ``mamba_block_aligned_split`` call,
    ``verified`` ``(drafts, accepted)`` of each verification."""
    from kvcore_vllm.specs import from_vllm_config

    import kvcore.sim.engine as engine_mod
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

    split = engine_mod.mamba_block_aligned_split

    def accept(rid: str, k: int, n: int) -> int:
        got = min(n, w.accept_fn(rid, k, n))
        if verified is not None:
            verified.append((n, got))
        return got

    def counted(start: int, n: int, *a: Any, **k: Any) -> int:
        got = split(start, n, *a, **k)
        if splits is not None:
            splits.append((n, got))
        return got

    engine_mod.mamba_block_aligned_split = counted  # type: ignore[assignment]
    try:
        res = run_engine(mgr, reqs, ConstantTimeModel(step_s=1.0),
                         max_num_seqs=w.max_num_seqs,
                         max_num_batched_tokens=w.max_num_batched_tokens,
                         long_prefill_token_threshold=w.long_prefill_token_threshold,
                         max_model_len=w.max_model_len, on_step=hook,
                         num_speculative_tokens=w.num_spec_tokens,
                         spec_acceptance=accept if w.num_spec_tokens else None)
    finally:
        engine_mod.mamba_block_aligned_split = split
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
@pytest.mark.parametrize("kind", [*KINDS, *MODELS])
def test_engine_schedules_as_vllm(kind: str, seed: int) -> None:
    w = _workload(kind, seed)
    ref = _vllm_steps(w, kind)
    splits: list[tuple[int, int]] = []
    got, res = _engine_steps(w, splits)
    assert ref, "workload did not run"
    assert got == ref, _diff(ref, got)
    assert res.rejected == 0
    assert sorted(f for s in got for f in s[3]) == sorted(r[0] for r in w.requests)
    f = FEATURES.setdefault(kind, {"preempted": 0, "chunks": 0, "hits": 0, "cut": 0,
                                   "refused": 0})
    f["preempted"] += res.preemptions
    f["chunks"] += sum(1 for _, s, _, _ in got for _, n in s
                       if n > 1 and n in (w.long_prefill_token_threshold,
                                          w.max_num_batched_tokens))
    f["hits"] += res.prefix_hit_tokens
    f["cut"] += sum(1 for n, m in splits if 0 < m < n)
    f["refused"] += sum(1 for n, m in splits if m == 0 < n)


def test_workloads_exercise_chunking_preemption_and_hits() -> None:
    """Runs after the parametrized cases (same module, file order)."""
    if len(FEATURES) < len(KINDS) + len(MODELS):
        pytest.skip("run with the whole module")
    for kind in ("dense", "sliding_window_hybrid", "mamba_align_hybrid", "mamba2attn"):
        f = FEATURES[kind]
        assert f["preempted"] > 0 and f["chunks"] > 0 and f["hits"] > 0, (kind, f)
    # the split shortens chunks and refuses some (0 tokens) on the align workloads
    for kind in ("mamba_align_hybrid", "mamba2attn", "qwen3_next"):
        f = FEATURES[kind]
        assert f["cut"] > 0 and f["refused"] > 0 and f["hits"] > 0, (kind, f)
    f = FEATURES["mamba_none_hybrid"]  # no prefix caching, no split
    assert f["preempted"] > 0 and f["chunks"] > 0, f
    assert f["hits"] == f["cut"] == f["refused"] == 0, f


def _accept(request_id: str, k: int, num_drafts: int) -> int:
    """A fixed acceptance pattern: drafts accepted at a request's k-th verification
    (0 to ``num_drafts``; a result above it means all of them)."""
    return (zlib.crc32(request_id.encode()) + 3 * k) % (num_drafts + 2)


SPEC_KINDS = ("dense", "sliding_window_hybrid", "chunked_local_hybrid",
              "mamba_align_hybrid")
SPEC_FEATURES: dict[str, dict[str, int]] = {}


def _spec_workload(kind: str, seed: int) -> Workload:
    rng = random.Random(1000 * seed + 5 + len(kind))
    k = rng.choice([1, 2, 4])
    bs = rng.choice([16, 16, 32])
    layers = [("mamba", {"spec_blocks": k})] * 3 + [FULL] \
        if kind == "mamba_align_hybrid" else KINDS[kind]
    # the smallest pool holds one max_model_len request (vLLM refuses to start below)
    pools = [34, 40, 60, 200] if kind in ("dense", "chunked_local_hybrid") \
        else [20, 24, 30, 60]
    return Workload.shared_prefixes(
        seed, n=rng.randrange(12, 32), layers=layers, max_model_len=512, block_size=bs,
        num_blocks=rng.choice(pools) * 16 // bs + 1,
        max_num_batched_tokens=rng.choice([32, 64, 128]),
        long_prefill_token_threshold=rng.choice([0, 16, 32]),
        max_num_seqs=rng.choice([4, 8, 16]), log_stats=False, events=False,
        num_spec_tokens=k, accept_fn=_accept)


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("kind", SPEC_KINDS)
def test_engine_schedules_spec_decode_as_vllm(kind: str, seed: int) -> None:
    w = _spec_workload(kind, seed)
    ref = _vllm_steps(w, kind)
    verified: list[tuple[int, int]] = []
    got, res = _engine_steps(w, verified=verified)
    assert ref, "workload did not run"
    assert got == ref, _diff(ref, got)
    assert res.rejected == 0
    assert sorted(f for s in got for f in s[3]) == sorted(r[0] for r in w.requests)
    f = SPEC_FEATURES.setdefault(kind, {"spec_steps": 0, "none": 0, "partial": 0,
                                        "all": 0, "preempted": 0, "hits": 0})
    f["spec_steps"] += sum(1 for _, s, _, _ in got for _, n in s
                           if n == 1 + w.num_spec_tokens)
    f["none"] += sum(1 for n, a in verified if a == 0)
    f["partial"] += sum(1 for n, a in verified if 0 < a < n)
    f["all"] += sum(1 for n, a in verified if a == n)
    f["preempted"] += res.preemptions
    f["hits"] += res.prefix_hit_tokens


def test_spec_workloads_exercise_drafts_preemption_and_hits() -> None:
    """Runs after the parametrized speculative cases (same module, file order)."""
    if len(SPEC_FEATURES) < len(SPEC_KINDS):
        pytest.skip("run with the whole module")
    for kind, f in SPEC_FEATURES.items():
        assert f["spec_steps"] > 0 and f["hits"] > 0, (kind, f)
        assert f["none"] > 0 and f["partial"] > 0 and f["all"] > 0, (kind, f)
    assert all(SPEC_FEATURES[k]["preempted"] > 0 for k in ("dense", "mamba_align_hybrid")), \
        SPEC_FEATURES


def _vllm_split(block_size: int, hash_block_size: int, partial: bool, eagle: bool,
                ckpt_blocks: bool, alignment: int | None, max_scheduled: int, lpt: int,
                shared_ckpt: bool, num_computed: int, local: int, num_prompt: int,
                num_tokens: int, junction: int, n: int) -> int:
    """vLLM 0.32's ``Scheduler._mamba_block_aligned_split`` on a stand-in Scheduler
    holding the attributes it reads."""
    from vllm.v1.core.sched.scheduler import Scheduler

    sched = SimpleNamespace(
        cache_config=SimpleNamespace(block_size=block_size), block_size=block_size,
        hash_block_size=hash_block_size, mamba_partial_cache_hit=partial,
        use_eagle_block_drop=eagle, mamba_has_prefill_checkpoint_blocks=ckpt_blocks,
        mamba_prefill_checkpoint_alignment=alignment,
        max_num_scheduled_tokens=max_scheduled,
        scheduler_config=SimpleNamespace(long_prefill_token_threshold=lpt),
        mamba_shared_prefix_checkpoint=shared_ckpt)
    req = SimpleNamespace(num_computed_tokens=num_computed, num_prompt_tokens=num_prompt,
                          num_tokens=num_tokens, shared_prefix_boundary=junction)
    return int(Scheduler._mamba_block_aligned_split(sched, req, n, local, 0))


@st.composite
def _split_args(draw: Any) -> dict[str, Any]:
    hbs = draw(st.sampled_from([16, 32, 64]))
    bs = hbs * draw(st.integers(1, 35))
    partial = hbs < bs and draw(st.booleans())
    prompt = draw(st.integers(1, 4000))
    num_tokens = prompt + draw(st.sampled_from([0, 0, 1, 2, 17, 200]))
    computed = draw(st.integers(0, num_tokens))
    local = draw(st.sampled_from([0, 0, hbs, bs, 3 * bs])) if computed == 0 else 0
    local = min(local, max(num_tokens - 1, 0))
    junction = draw(st.sampled_from([0, 0, hbs * draw(st.integers(1, 60)),
                                     bs * draw(st.integers(1, 8)),
                                     draw(st.integers(1, num_tokens))]))
    return dict(block_size=bs, hash_block_size=hbs, partial=partial,
                eagle=draw(st.booleans()), ckpt_blocks=draw(st.booleans()),
                alignment=draw(st.sampled_from([None, 8, 16, hbs])),
                max_scheduled=draw(st.sampled_from([32, 128, 512, 2048, 8192])),
                lpt=draw(st.sampled_from([0, 0, 16, 256, 1000])),
                shared_ckpt=partial and draw(st.booleans()), num_computed=computed,
                local=local, num_prompt=prompt, num_tokens=num_tokens,
                junction=junction, n=draw(st.integers(1, 3000)))


@settings(max_examples=400, derandomize=True, database=None)
@given(_split_args())
def test_split_equals_vllms(a: dict[str, Any]) -> None:
    """kvcore.sim.engine.mamba_block_aligned_split returns what vLLM 0.32's
    ``Scheduler._mamba_block_aligned_split`` returns, on generated arguments."""
    from kvcore.sim.engine import mamba_block_aligned_split

    lpt = a["lpt"]
    max_prefill = min(a["max_scheduled"], lpt) if lpt > 0 else a["max_scheduled"]
    got = mamba_block_aligned_split(
        a["num_computed"] + a["local"], a["n"], a["num_prompt"], a["num_tokens"],
        block_size=a["block_size"], max_prefill_tokens=max_prefill,
        scheduler_block_size=a["block_size"], hash_block_size=a["hash_block_size"],
        use_eagle=a["eagle"], partial_cache_hit=a["partial"],
        has_prefill_checkpoint_blocks=a["ckpt_blocks"],
        checkpoint_alignment=a["alignment"], shared_prefix_boundary=a["junction"],
        shared_prefix_checkpoint=a["shared_ckpt"])
    assert got == _vllm_split(**a)
