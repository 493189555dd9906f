"""The benchmark entries follow the GPU harness contract (benchmarks/gpu/run_all.py:
name, kind, setup(device, quick) -> (run, bytes_moved)) and run at quick size on CPU."""

import importlib.util

import pytest

torch = pytest.importorskip("torch")

from kvcore_mla.benchmarks import BENCHMARKS  # noqa: E402

#: Triton paths skip cleanly without triton (issue 15 item 14); the torch references run
HAS_TRITON = importlib.util.find_spec("triton") is not None
requires_triton = pytest.mark.skipif(not HAS_TRITON, reason="triton is not installed")


def test_entries_follow_the_harness_contract():
    names = [e["name"] for e in BENCHMARKS]
    assert len(names) == len(set(names)) == 6
    assert {e["kind"] for e in BENCHMARKS} == {"store", "load"}


@requires_triton
@pytest.mark.parametrize("entry", BENCHMARKS, ids=[e["name"] for e in BENCHMARKS])
def test_quick_run_on_cpu(entry):
    run, moved = entry["setup"](torch.device("cpu"), True)
    out = run()
    mode = next(m for m in ("fp8_ds_mla", "fp8", "auto") if m in entry["name"])
    width = {"auto": 1152, "fp8": 576, "fp8_ds_mla": 656}[mode]
    # 256 tokens: bf16 latents (576 x 2 B) in or out, plus the cache entries
    assert moved == 256 * (1152 + width)
    if entry["kind"] == "load":
        assert out.shape == (256, 576) and out.dtype == torch.bfloat16
