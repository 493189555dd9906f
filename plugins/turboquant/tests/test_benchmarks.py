"""The benchmark callables run on CPU at tiny sizes and report consistent byte counts."""

import importlib.util

import pytest
from kvcore_turboquant.benchmarks import BENCHMARKS

#: Triton paths skip cleanly without triton (issue 15 item 14); the torch references run
HAS_TRITON = importlib.util.find_spec("triton") is not None
requires_triton = pytest.mark.skipif(not HAS_TRITON, reason="triton is not installed")

SLOT = {"turboquant_k8v4": 196, "turboquant_4bit_nc": 134, "turboquant_k3v4_nc": 118,
        "turboquant_3bit_nc": 102}


def test_one_store_and_one_dequant_per_preset():
    assert sorted(BENCHMARKS) == sorted(f"turboquant_{kind}_{s}" for kind in
                                        ("store", "dequant") for s in SLOT)


@requires_triton
@pytest.mark.parametrize("name", ["turboquant_store_turboquant_3bit_nc",
                                  "turboquant_dequant_turboquant_k8v4"])
def test_benchmark_runs_on_cpu(name):
    r = BENCHMARKS[name]("cpu", tokens=4, repeats=1)
    assert r["name"] == name and r["tokens"] == 4 and r["seconds_per_call"] > 0
    assert r["backend"] == "triton"  # TRITON_INTERPRET=1 (conftest.py)
    scheme = name.split("_", 2)[2]
    # 4 tokens x 8 heads x (bf16 K + V: 2 x 128 x 2 B, plus one slot)
    assert r["bytes_moved"] == 4 * 8 * (512 + SLOT[scheme])
