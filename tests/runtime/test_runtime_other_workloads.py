"""Workloads like the conformance one, checked against an independent model.

With a pool that never evicts, a request's hit is determined by the workload alone:
requests sharing ``prefix_id`` share their first ``min(prefix_len)`` tokens, and every
full prompt block of every earlier request is cached (at allocation, so same-step
admissions count).  So request k hits
``16 * min(max_j<k min(plen_j, plen_k) // 16, (prompt_len_k - 1) // 16)``
over earlier j with the same prefix_id.  A finite pool can only hit less.
"""

from __future__ import annotations

import json
import random

import pytest
from helpers_runtime import DATA, config, full

from kvcore.runtime import KVCacheManager
from kvcore.sim.replay import Job, replay
from kvcore.sim.traces import read_kvcore_jsonl


def generate(seed, n=300):
    """A workload with the conformance generator's parameters (meta.json)."""
    rnd = random.Random(seed)
    rows = []
    for k in range(n):
        prompt = rnd.randint(512, 4096)
        out = rnd.randint(64, 256)
        if rnd.random() < 0.5:
            pid = rnd.randrange(8)
            plen = min(rnd.randint(128, 2048), prompt)
        else:
            pid, plen = None, 0
        rows.append({"id": f"req-{k:05d}", "prompt_len": prompt, "prefix_id": pid,
                     "prefix_len": plen, "unique_len": prompt - plen, "output_len": out})
    return rows


def infinite_cache_hits(rows, block=16):
    best: dict[int, list[int]] = {}
    hits = []
    for r in rows:
        pid, plen = r["prefix_id"], r["prefix_len"]
        shared = max((min(p, plen) for p in best.get(pid, [])), default=0) \
            if pid is not None else 0
        hits.append(block * min(shared // block, (r["prompt_len"] - 1) // block))
        if pid is not None:
            best.setdefault(pid, []).append(plen)
    return hits


def run(path, num_blocks, max_running=64):
    mgr = KVCacheManager(config(num_blocks, full(16)), max_model_len=8192)
    res = replay(mgr, [Job(t) for t in read_kvcore_jsonl(path)], max_running=max_running)
    return mgr, res


def test_seed0_without_eviction_matches_the_model():
    rows = [json.loads(line) for line in (DATA / "workload-seed0.jsonl").open()]
    _, res = run(DATA / "workload-seed0.jsonl", 400_000)
    assert [j.num_cached_tokens for j in res.jobs] == infinite_cache_hits(rows)


@pytest.mark.parametrize("seed", [1, 2])
def test_generated_workloads(tmp_path, seed):
    rows = generate(seed)
    path = tmp_path / "w.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    model = infinite_cache_hits(rows)
    mgr, res = run(path, 400_000)
    assert [j.num_cached_tokens for j in res.jobs] == model
    # a small pool (about 20 long requests) evicts: hits can only fall
    mgr, small = run(path, 6_000, max_running=16)
    got = [j.num_cached_tokens for j in small.jobs]
    assert all(g <= m for g, m in zip(got, model))
    assert sum(got) < sum(model)
    assert small.rejected == 0 and mgr.usage == 0.0
    for j in small.jobs:
        assert j.finish_step == j.admit_step + j.trace.output_len - 1
