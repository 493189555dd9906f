"""``kvcore plan`` refuses what vLLM's SchedulerConfig refuses to start (tester A, F6).

vLLM 0.32 (vllm/config/scheduler.py, verify_max_model_len) raises when
``max_num_batched_tokens < max_num_seqs``; ``kvcore simulate`` refused it, ``kvcore
plan`` sized such a deployment with exit 0.  Seeded pairs of the two flags, with a GPU
(vLLM's default max_num_seqs there: 1024 on an 80 GiB H100) and without one (its
default 256), on plan's paths; the expected outcome comes from vLLM's rule alone.
"""

from __future__ import annotations

import random
from typing import Any

import pytest
from kvcore_cli_support import assert_clean_error, run_cli

from kvcore.errors import ConfigError

_RNG = random.Random(6)
CASES = [(_RNG.choice([1, 2, 16, 255, 256, 300, 1023, 1024, 2048]),
          _RNG.choice([None, 1, 64, 256, 257, 1024, 4096]),
          _RNG.choice([True, False])) for _ in range(14)]
CASES += [(2, 256, True), (2, None, True), (2, None, False), (256, 256, True)]


@pytest.mark.parametrize("mnbt, mns, gpu", CASES)
def test_plan_follows_vllms_scheduler_rule(mnbt: int, mns: int | None, gpu: bool,
                                           capsys: Any) -> None:
    argv = ["plan", "llama-3.1-8b", "--max-num-batched-tokens", str(mnbt)]
    argv += ["--gpu", "H100"] if gpu else ["--kv-cache-memory", "20GiB",
                                          "--max-model-len", "4096"]
    if mns is not None:
        if not gpu:
            return  # --max-num-seqs belongs to the GPU fit
        argv += ["--max-num-seqs", str(mns)]
    seqs = mns if mns is not None else (1024 if gpu else 256)
    rc, _, err = run_cli(capsys, argv)
    if mnbt < seqs:
        assert_clean_error(rc, err, "max_num_batched_tokens", str(mnbt), str(seqs))
    else:
        assert rc == 0, err


def test_the_api_gpu_fit_checks_it() -> None:
    from kvcore.deploy.budget import plan_on_gpu

    with pytest.raises(ConfigError, match="max_num_seqs"):
        plan_on_gpu("llama-3.1-8b", gpu="H100", max_num_batched_tokens=2, max_num_seqs=256)


def test_the_check_lives_below_the_simulator() -> None:
    import kvcore.serving
    import kvcore.sim.engine

    assert kvcore.sim.engine.check_scheduler_limits is kvcore.serving.check_scheduler_limits
