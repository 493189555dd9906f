"""Findings of the second fresh-eyes adversarial tester (issue 21 surfaces), one test per
finding, each asserting the behaviour vLLM 0.32 (or physics) requires.  Every test
here FAILS on the branch it was written on (tester2 @ 7dfbb4d); see
/work/wt/TESTER2_FINDINGS.md for the commands, what happened and the guessed causes.
Finding 13 is an open accuracy fault (a strict xfail until the model is refitted).
Findings 5, 6, 7, 9, 10, 11, 14 and 17 are fixed and their tests moved (branch
fixtune5): tests/sim/test_sim_modes.py (5, 6, 7), tests/sim/test_sim_bench_flags.py
(9, 17), tests/sim/test_tune.py (10, 11), tests/sim/test_plan_sim_judge.py (14).
Findings 1-4, 8, 12, 15 and 16 are fixed and their tests moved (branch fixsim5):
tests/sim/test_sim_clock.py (1-4, 15), tests/sim/test_timing_describe.py (8),
tests/sim/test_sim_clocked_cli.py (12), tests/sim/test_fleet.py and
tests/sim/test_sweep_backends.py (16).  Finding 13 (the MoE cost) stays here.

Expected values come from vLLM 0.32's code (paths relative to
site-packages/vllm/ of /work/main/.venv-vllm) and from the definitions of the figures,
never from kvcore's own output.  Cases are generated (parametrised over models,
lengths, seeds, loads) and kept small (a few seconds of CPU each).
"""

from __future__ import annotations

import json

import pytest

from kvcore.cli import main as cli_main

SMALL = ["--gpu", "H100", "--dataset", "random"]


def _run(capsys, argv):
    code = cli_main(argv)
    cap = capsys.readouterr()
    return code, cap.out, cap.err


def _json(capsys, argv):
    code, out, err = _run(capsys, [*argv, "--json"])
    assert code == 0, err + out
    return json.loads(out)


# Generated workloads: (model, extra flags, prompts, input len, output len, seed)
CASES = [
    ("llama-3.1-8b", [], 16, 256, 16, 0),
    ("llama-3.1-8b", ["--random-range-ratio", "0.5"], 12, 512, 32, 3),
    ("qwen2.5-7b", ["--max-model-len", "8192"], 10, 128, 8, 1),
    ("gpt-oss-20b", ["--max-model-len", "8192"], 8, 300, 12, 5),
    ("mistral-7b-v0.1", ["--max-model-len", "8192"], 6, 1024, 4, 2),
]


def _sim_argv(model, extra, n, inp, out, seed):
    return ["simulate", model, *SMALL, "--num-prompts", str(n), "--random-input-len",
            str(inp), "--random-output-len", str(out), "--seed", str(seed), *extra]


# ---- 13 -----------------------------------------------------------------------------

@pytest.mark.xfail(strict=True, reason="open (issue 21): v7's moe_memory_tokens amortises "
                   "the experts' discount (118 -> 75 ms), but memory 0.6 on the A100 still "
                   "streams the 57 GB of experts slower than the measurement; "
                   "docs/SIM_ACCURACY.md, v7")
def test_f13_moe_prefill_that_reads_every_expert_matches_the_measurement(capsys):
    """tenstorrent/tt-inference-server#340 (Qwen3-30B-A3B, 1 x A100, vLLM benchmark_serving,
    random 128/128, concurrency 1; the row ``qwen3-30b-a3b-a100-80gb-128-128-c1`` of
    tests/data/sim_accuracy/measurements.json, split "fit", its TTFT not excluded):
    mean TTFT 35.7 ms.  A 128-token prefill routed top-8 of 128 experts touches
    128 x (1 - (120/128)**128) ~ all 128 experts of every layer, so the measurement says
    the ~57 GB of experts stream in < 36 ms (>= 1.6 TB/s, ~80 % of the A100's 2.04
    TB/s).  kvcore simulates 118.3 ms (+231 %, shown in docs/SIM_ACCURACY.md's own
    table): moe_memory 0.5 x memory 0.6 makes touched experts stream at 30 % of the
    bandwidth.  Fitted on batch-1 decodes (8 experts a layer), it charges any step
    that touches many experts ~3x: decode of 32 requests on H100 costs 55 ms a step,
    more than dense Gemma-3-27B's 37 ms with ~the same weight bytes and 8x the FLOPs.
    Goal of issue 21 for TTFT: within 25 %."""
    fig = _json(capsys, ["simulate", "qwen3-30b-a3b", "--gpu", "A100-80GB", "--dataset",
                         "random", "--num-prompts", "8", "--random-input-len", "128",
                         "--random-output-len", "128", "--max-concurrency", "1",
                         "--max-model-len", "40960"])
    assert fig["mean_ttft_ms"] == pytest.approx(35.7, rel=0.25)
    assert fig["mean_tpot_ms"] == pytest.approx(9.6, rel=0.15)  # holds today: 9.47


