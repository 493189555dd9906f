"""Through vLLM 0.32's own Scheduler (fake model, CPU; kvcore_vllm.harness), kvcore's
planner's layout serves a long-context workload in at most the steps of vLLM's own
planner's layout, with no more preemptions (issue 22, item 5: the vLLM Scheduler recipe
of ../shared/vllm-reference).  Both runs use vLLM's own KVCacheManager and the same
KV-cache memory (the harness sizes it as blocks x the layers' summed pages); only the
planner differs.  Small slice: Gemma-3-like (5 sliding : 1 full), gpt-oss-like
(alternating sliding / full), a Llama-4-like chunked mix, at two batch sizes.
"""

from __future__ import annotations

import random

import pytest

LAYOUTS = {
    "gemma3-like": [("sliding", {"sliding_window": 128})] * 5 + [("full", {})],
    "gpt-oss-like": [("sliding", {"sliding_window": 128}), ("full", {})] * 2,
    "llama4-like": [("chunked", {"chunk": 256})] * 3 + [("full", {})],
}


def _workload(layers, planner, mnbt, seed=0):
    from kvcore_vllm.harness import Workload

    rng = random.Random(seed)
    prefix = [rng.randrange(1, 32000) for _ in range(256)]
    reqs = []
    for i in range(24):
        n = rng.randrange(600, 1500)
        body = [rng.randrange(1, 32000) for _ in range(n)]
        prompt = (prefix + body) if i % 2 else body
        reqs.append((f"r{i}", prompt[:1800], rng.randrange(64, 200), i // 4))
    return Workload(seed=seed, layers=layers, block_size=16, num_blocks=420,
                    max_model_len=2048, max_num_batched_tokens=mnbt, max_num_seqs=16,
                    requests=reqs, planner=planner, events=False)


@pytest.mark.parametrize("mnbt", [512, 2048])
@pytest.mark.parametrize("name", sorted(LAYOUTS))
def test_kvcore_layout_needs_no_more_steps_than_vllms(name, mnbt):
    from kvcore_vllm.harness import run

    out = {}
    for planner in ("vllm", "kvcore"):
        r = run(_workload(LAYOUTS[name], planner, mnbt), "vllm", max_steps=20000)
        preempted = sum(len(s["preempted"]) for s in r["steps"])
        finished = sum(len(s["finished"]) for s in r["steps"])
        out[planner] = (r["num_steps"], preempted, finished)
    assert out["kvcore"][2] == out["vllm"][2] == 24
    assert out["kvcore"][0] <= out["vllm"][0], out
    assert out["kvcore"][1] <= out["vllm"][1], out
