"""``enable_chunked_prefill=False``: kvcore's engine schedules step for step as vLLM
0.32's real ``Scheduler`` with ``SchedulerConfig(enable_chunked_prefill=False)``
(tester 4; built as test_sim_schedule_vs_vllm.py builds its step-identity tests).

The harness builds its SchedulerConfig with chunked prefill on; here the class is
wrapped for the construction so vLLM's Scheduler runs with it off (its waiting loop:
``if not enable_chunked_prefill and num_new_tokens > token_budget: break``), and
``run_engine`` gets ``enable_chunked_prefill=False``.  Workloads: dense, 12 to 32
requests from shared prefixes in bursts (arrivals every 10 steps: several prompts wait
at once, so a whole-prompt budget matters), ``max_model_len`` 320 and budgets of 320 to
512 tokens (vLLM requires ``max_num_batched_tokens >= max_model_len`` with chunked
prefill off), long-prefill thresholds 0 / 16 / 100 (vLLM still caps a prompt's chunk at
the threshold with chunked prefill off), tight to ample pools (preemption).

The suite must discriminate: on some seeds the engine with chunked prefill *on* does
not match vLLM's no-chunking schedule (else the workloads would not exercise the
rule)."""

from __future__ import annotations

import random
from typing import Any

import pytest

pytest.importorskip("vllm")

import test_sim_schedule_vs_vllm as T  # noqa: E402
from kvcore_vllm.harness import Workload  # noqa: E402

SEEDS = range(6)
DIFFERS: dict[int, bool] = {}


def _workload(seed: int) -> Workload:
    rng = random.Random(seed)
    bs = rng.choice([16, 32])
    w = Workload.shared_prefixes(
        seed, n=rng.randrange(12, 32), layers=[T.FULL, T.FULL], max_model_len=320,
        block_size=bs, num_blocks=rng.choice([40, 60, 200, 400]) * 16 // bs + 1,
        max_num_batched_tokens=rng.choice([320, 400, 512]),
        long_prefill_token_threshold=rng.choice([0, 0, 0, 16, 100]),
        max_num_seqs=rng.choice([4, 8, 16]), log_stats=False, events=False)
    w.requests = [(rid, p[:300], min(mt, 320 - min(len(p), 300) - 1), (a // 10) * 10)
                  for rid, p, mt, a in w.requests]
    return w


@pytest.mark.parametrize("seed", SEEDS)
def test_engine_without_chunked_prefill_schedules_as_vllm(seed: int,
                                                           monkeypatch: Any) -> None:
    import vllm.config as vcfg

    import kvcore.sim.engine as engine_mod

    orig = vcfg.SchedulerConfig
    made: list[Any] = []

    def no_chunking(**kw: Any) -> Any:
        kw["enable_chunked_prefill"] = False
        made.append(orig(**kw))
        return made[-1]

    monkeypatch.setattr(vcfg, "SchedulerConfig", no_chunking)
    run = engine_mod.run_engine
    mode = {"chunked": False}
    monkeypatch.setattr(engine_mod, "run_engine", lambda *a, **k: run(
        *a, enable_chunked_prefill=mode["chunked"], **k))
    w = _workload(seed)
    ref = T._vllm_steps(w, "dense")
    assert made and all(not c.enable_chunked_prefill for c in made)
    got, res = T._engine_steps(w)
    assert ref, "workload did not run"
    assert got == ref, T._diff(ref, got)
    assert sorted(f for s in got for f in s[3]) == sorted(r[0] for r in w.requests)
    mode["chunked"] = True
    on, _ = T._engine_steps(w)
    DIFFERS[seed] = on != ref


def test_the_workloads_exercise_whole_prompt_scheduling() -> None:
    """Runs after the parametrized cases (same module, file order)."""
    if len(DIFFERS) < len(SEEDS):
        pytest.skip("run with the whole module")
    assert sum(DIFFERS.values()) >= 2, DIFFERS
