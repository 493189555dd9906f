"""kvcore's random dataset lengths and arrival times equal vLLM 0.32's own
(``vllm.benchmarks.datasets.utils.get_sampling_params`` and
``vllm.benchmarks.serve.get_request``, driven with a fake clock) for the same seed."""

from __future__ import annotations

import asyncio
import json
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kvcore.sim.workload import arrival_times, random_dataset


class _Tok:
    """The tokenizer fields get_sampling_params reads (no special tokens, as kvcore)."""

    vocab_size = 32000

    @staticmethod
    def num_special_tokens_to_add() -> int:
        return 0


@pytest.mark.parametrize("seed", range(5))
@pytest.mark.parametrize("lens", [(1024, 128, 0.0), (300, 40, 0.5), (17, 3, 0.9)])
def test_random_lengths_equal_vllms(seed: int, lens: tuple[int, int, float]) -> None:
    from vllm.benchmarks.datasets.utils import get_sampling_params

    i, o, r = lens
    ins, outs, _ = get_sampling_params(np.random.default_rng(seed), 64, r, i, o, _Tok())
    got = random_dataset(64, i, o, prefix_len=5, range_ratio=r, seed=seed)
    assert [g.prompt_len - 5 for g in got] == ins.tolist()
    assert [g.output_len for g in got] == outs.tolist()


def _vllm_send_times(n: int, rate: float, burstiness: float, seed: int,
                     **ramp: object) -> list[float]:
    from vllm.benchmarks import serve

    now = [0.0]
    sent: list[float] = []

    async def sleep(dt: float) -> None:
        now[0] += dt

    async def drive() -> None:
        async for _req, _rate in serve.get_request(list(range(n)), rate, burstiness,
                                                   **ramp):  # type: ignore[arg-type]
            sent.append(now[0])

    mp = pytest.MonkeyPatch()
    mp.setattr(serve.time, "time", lambda: now[0])
    mp.setattr(serve.asyncio, "sleep", sleep)
    try:
        np.random.seed(seed)  # serve.py's main seeds numpy's global generator
        asyncio.run(drive())
    finally:
        mp.undo()
    return sent


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("rate,burstiness", [(10.0, 1.0), (3.0, 0.25), (50.0, 4.0),
                                             (2.0, math.inf), (math.inf, 1.0)])
def test_arrivals_equal_vllms(seed: int, rate: float, burstiness: float) -> None:
    ref = _vllm_send_times(40, rate, burstiness, seed)
    assert arrival_times(40, rate, burstiness, seed) == pytest.approx(ref, rel=1e-9,
                                                                      abs=1e-12)


# ---- tester 2, finding 17: --random-range-ratio as a JSON dict -------------------------
@settings(max_examples=40, deadline=None)
@given(st.integers(0, 2000), st.integers(0, 400), st.floats(0, 0.99), st.floats(0, 0.99),
       st.integers(0, 2**31), st.integers(1, 60))
def test_range_ratio_dict_lengths_equal_vllms(i: int, o: int, r_in: float, r_out: float,
                                              seed: int, n: int) -> None:
    from vllm.benchmarks.datasets.datasets import _parse_range_ratio
    from vllm.benchmarks.datasets.utils import get_sampling_params

    from kvcore.sim.workload import parse_range_ratio

    text = json.dumps({"input": r_in, "output": r_out})
    assert parse_range_ratio(text) == _parse_range_ratio(text)
    if math.floor(i * (1 - r_in)) < 1:
        return  # an empty prompt: both refuse (tests/sim/test_sim_bench_flags.py)
    ins, outs, _ = get_sampling_params(np.random.default_rng(seed), n,
                                       _parse_range_ratio(text), i, o, _Tok())
    got = random_dataset(n, i, o, range_ratio=parse_range_ratio(text), seed=seed)
    assert [g.prompt_len for g in got] == ins.tolist()
    assert [g.output_len for g in got] == outs.tolist()


# ---- tester 2, finding 9: the ramp-up flags ---------------------------------------------
@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("strategy,start,end,burstiness", [
    ("linear", 1, 20, 1.0), ("linear", 5, 5, 0.5), ("exponential", 1, 100, 1.0),
    ("exponential", 2, 50, math.inf), ("linear", 3, 40, 4.0)])
def test_ramp_up_arrivals_equal_vllms(seed: int, strategy: str, start: int, end: int,
                                      burstiness: float) -> None:
    ramp = {"ramp_up_strategy": strategy, "ramp_up_start_rps": start,
            "ramp_up_end_rps": end}
    ref = _vllm_send_times(30, math.inf, burstiness, seed, **ramp)
    got = arrival_times(30, math.inf, burstiness, seed, **ramp)  # type: ignore[arg-type]
    assert got == pytest.approx(ref, rel=1e-9, abs=1e-12)
