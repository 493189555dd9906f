"""The benchmark callables run and report consistent figures (tiny sizes, CPU)."""

import pytest

pytest.importorskip("torch")
pytest.importorskip("triton")

from kvcore_mla.benchmarks import BENCHMARKS  # noqa: E402


def test_every_benchmark_runs_on_cpu():
    assert len(BENCHMARKS) == 6
    for name, fn in BENCHMARKS.items():
        r = fn("cpu", tokens=8, repeats=1)
        assert r["name"] == name and r["tokens"] == 8
        assert r["seconds_per_call"] > 0
        mode = next(m for m in ("fp8_ds_mla", "fp8", "auto") if name.endswith(m))
        width = {"auto": 1152, "fp8": 576, "fp8_ds_mla": 656}[mode]
        # bf16 latents (576 x 2 B) in or out, plus the cache entries
        assert r["bytes_moved"] == 8 * (1152 + width)
