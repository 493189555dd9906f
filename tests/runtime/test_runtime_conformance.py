"""Replaying the conformance workload reproduces vLLM 0.32's per-request results.

Data: tests/runtime/data (copied from shared/vectors/runtime; the README there defines
the loop and the block-pool behaviour).  The sensitivity counts (91, 1, 1) are the
README's own measurements of how many hit counts change when one behaviour changes,
so they check that each behaviour is implemented, not just that the totals agree.
"""

from __future__ import annotations

import json

import pytest
from helpers_runtime import DATA, config, full

from kvcore.runtime import KVCacheManager
from kvcore.runtime.block_pool import BlockPool
from kvcore.sim.replay import Job, replay
from kvcore.sim.traces import read_kvcore_jsonl

WORKLOAD = DATA / "workload-seed0.jsonl"
META = json.loads((DATA / "workload-seed0.jsonl.meta.json").read_text())["replay"]
EXPECTED = [json.loads(line) for line in (DATA / "vllm-results-seed0.jsonl").open()]


@pytest.fixture(scope="module")
def prepared():
    """Requests hashed once; each replay takes fresh copies."""
    mgr = KVCacheManager(config(META["num_blocks"], full(META["block_size"])),
                         max_model_len=META["max_model_len"])
    jobs = [Job(t) for t in read_kvcore_jsonl(WORKLOAD)]
    for j in jobs:
        j.materialize(mgr)
    return jobs


def _replay(prepared, num_blocks=None, pool_cls=None):
    mgr = KVCacheManager(config(num_blocks or META["num_blocks"], full(META["block_size"])),
                         max_model_len=META["max_model_len"])
    if pool_cls is not None:
        pool_cls.patch(mgr)
    jobs = []
    for p in prepared:
        j = Job(p.trace)
        j.request = p.request.copy()
        j.outputs = p.outputs
        jobs.append(j)
    return mgr, replay(mgr, jobs, max_running=META["max_running"])


def test_replay_reproduces_vllm_results_exactly(prepared):
    mgr, res = _replay(prepared)
    got = res.results()
    assert len(got) == len(EXPECTED) == 2000
    mismatches = [(g, e) for g, e in zip(got, EXPECTED) if g != e]
    assert mismatches == []
    # the README's totals
    assert res.prefix_hit_tokens == 860096
    assert res.prompt_tokens == 4579394
    assert sum(1 for g in got if g["num_cached_tokens"] > 0) == 964
    assert res.steps == 5127
    assert res.rejected == 0 and res.preempted == 0
    assert mgr.usage == 0.0
    assert mgr.block_pool.num_free_blocks == META["num_blocks"] - 1


def test_finish_step_formula(prepared):
    _, res = _replay(prepared)
    for j in res.jobs:
        assert j.finish_step == j.admit_step + j.trace.output_len - 1


def _hits(res):
    return [j.num_cached_tokens for j in res.jobs]


def test_no_eviction_changes_91_hit_counts(prepared):
    _, res = _replay(prepared, num_blocks=400_000)
    expected = [e["num_cached_tokens"] for e in EXPECTED]
    assert sum(a != b for a, b in zip(_hits(res), expected)) == 91


class _AllToBack:
    """Variant pool: every freed block goes to the back of the free queue."""

    @staticmethod
    def patch(mgr):
        pool = mgr.block_pool

        def free_blocks(blocks):
            for b in blocks:
                if b.is_null:
                    continue
                b.ref_cnt -= 1
                if b.ref_cnt == 0:
                    pool.free_queue.append(b)
        pool.free_blocks = free_blocks


class _FirstBlockFirst:
    """Variant pool: a request's blocks are freed first block first."""

    @staticmethod
    def patch(mgr):
        pool = mgr.block_pool
        orig = BlockPool.free_blocks

        def free_blocks(blocks):
            orig(pool, list(blocks)[::-1])
        pool.free_blocks = free_blocks


@pytest.mark.parametrize("variant", [_AllToBack, _FirstBlockFirst])
def test_eviction_order_variants_change_one_hit_count(prepared, variant):
    _, res = _replay(prepared, pool_cls=variant)
    expected = [e["num_cached_tokens"] for e in EXPECTED]
    assert sum(a != b for a, b in zip(_hits(res), expected)) == 1
