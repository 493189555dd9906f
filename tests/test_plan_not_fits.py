"""A plan vLLM cannot start is not "fits": a ``num_gpu_blocks_override`` beyond the GPU's
KV budget, and every fatal ceiling (:mod:`kvcore.deploy.ceilings`).

References: vLLM 0.32 ``vllm/v1/core/kv_cache_utils.py`` (``may_override_num_blocks``
replaces the profiled block count by the override; ``get_kv_cache_configs`` sets
``available_memory = override x bytes_per_block`` and the worker allocates it, so past
``floor(budget / bytes_per_block)`` blocks the allocation runs out of memory at start);
vllm#38270 / vllm#49064 ("max_num_seqs (N) exceeds available Mamba cache blocks (M)",
fatal from 0.19).  Ported from tester1's findings 2 and 3 (TESTER1.md)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kvcore_plugin_needs import served, skip_unless_served

from kvcore.cli import main
from kvcore.deploy.budget import plan_on_gpu
from kvcore.errors import NotEnoughMemoryError

SMALL = ["llama-3.1-8b", "mistral-7b-v0.1", "qwen2.5-7b", "gemma-2-2b-it"]


def _budget_blocks(model: str, gpu: str, mml: int) -> int:
    """vLLM's own block count for this budget: floor(KV budget / bytes_per_block)."""
    c = plan_on_gpu(model, gpu=gpu, max_model_len=mml)
    budget = c.stats["kv_cache_memory_bytes"]
    return int(budget) // c.bytes_per_block


@settings(max_examples=12, deadline=None, derandomize=True)
@given(model=st.sampled_from(SMALL), gpu=st.sampled_from(["H100", "A100", "L40S"]),
       mml=st.sampled_from([4096, 16384]), factor=st.floats(0.05, 3.0))
def test_override_fits_iff_the_budget_holds_it(model: str, gpu: str, mml: int,
                                               factor: float) -> None:
    try:
        largest = _budget_blocks(model, gpu, mml)
    except NotEnoughMemoryError:
        return  # the model does not fit this GPU at all: nothing to override
    override = max(1, int(largest * factor))
    c = plan_on_gpu(model, gpu=gpu, max_model_len=mml, num_gpu_blocks_override=override,
                    raise_if_not_fits=False)
    if override * c.bytes_per_block > int(c.stats["kv_cache_memory_bytes"]):
        assert c.stats["fits"] is False
        with pytest.raises(NotEnoughMemoryError) as ei:
            plan_on_gpu(model, gpu=gpu, max_model_len=mml, num_gpu_blocks_override=override)
        assert "num_gpu_blocks_override" in ei.value.message
        assert f"{largest:,}" in ei.value.message  # names the largest that fits
    else:
        assert c.stats["fits"] is True and c.num_blocks == override


@pytest.mark.parametrize("extra", [0, 1])
def test_override_boundary(extra: int) -> None:
    largest = _budget_blocks("llama-3.1-8b", "H100", 16384)
    c = plan_on_gpu("llama-3.1-8b", gpu="H100", max_model_len=16384,
                    num_gpu_blocks_override=largest + extra, raise_if_not_fits=False)
    assert c.stats["fits"] is (extra == 0)


def _run(capsys: Any, argv: list[str]) -> tuple[int, str, str]:
    rc = main(argv)
    out = capsys.readouterr()
    return rc, out.out, out.err


def test_plan_block_override_beyond_the_gpu_does_not_fit(capsys: Any) -> None:
    """tester1 #2: 100,000,000 blocks x 2 MiB (195 TiB) on an 80 GB H100 said fits."""
    rc, out, err = _run(capsys, ["plan", "llama-3.1-8b", "--gpu", "H100",
                                 "--max-model-len", "16384",
                                 "--num-gpu-blocks-override", "100000000", "--json"])
    assert rc == 2 and "num_gpu_blocks_override" in out + err


# --- every fatal ceiling is a not-fit ---------------------------------------------------

@settings(max_examples=10, deadline=None, derandomize=True)
@given(seqs=st.integers(1, 40000), mml=st.sampled_from([4096, 8192, 32768]),
       tp=st.sampled_from([2, 4]), engine=st.sampled_from(["vllm==0.32", "vllm==0.10.1"]))
def test_mamba_blocks_ceiling(seqs: int, mml: int, tp: int, engine: str) -> None:
    """Mamba blocks < max_num_seqs: fatal from vLLM 0.19 (then fits False and the plan
    raises), a warning before (fits unchanged)."""
    skip_unless_served("qwen3-next-80b-a3b-thinking")
    # vLLM refuses max_num_seqs > max_num_batched_tokens before any ceiling (tester A
    # F6): the step is raised with the sequences, as a deployment that large would
    kw: dict[str, Any] = dict(gpu="H100", tensor_parallel_size=tp, max_model_len=mml,
                              max_num_seqs=seqs, engine=engine,
                              max_num_batched_tokens=max(seqs, 8192))
    c = plan_on_gpu("qwen3-next-80b-a3b-thinking", raise_if_not_fits=False, **kw)
    fatal = [x for x in c.stats.get("ceilings") or [] if x["fatal"]]
    mamba = [x for x in c.stats.get("ceilings") or [] if x["kind"] == "mamba_blocks"]
    if mamba:
        assert seqs > mamba[0]["limit"]  # the rule: one Mamba block per running sequence
        assert mamba[0]["fatal"] is (engine == "vllm==0.32")
    if fatal:
        assert c.stats["fits"] is False
        with pytest.raises(NotEnoughMemoryError):
            plan_on_gpu("qwen3-next-80b-a3b-thinking", **kw)


#: the models whose plugins are installed (the core-only packaging venv has none)
MODELS = served(["llama-3.1-8b", "qwen3-next-80b-a3b-thinking", "gemma-3-27b-it",
                 "mistral-7b-v0.1"])


@settings(max_examples=16, deadline=None, derandomize=True)
@given(model=st.sampled_from(MODELS), gpu=st.sampled_from(["H100", "A100", "L4"]),
       tp=st.sampled_from([1, 2, 4]), mml=st.sampled_from([2048, 32768, 131072]),
       seqs=st.sampled_from([None, 64, 4096, 100000]))
def test_no_fatal_ceiling_beside_fits(model: str, gpu: str, tp: int, mml: int,
                                      seqs: int | None) -> None:
    """Over every fatal kind the ceilings produce (mamba_blocks, max_model_len), fits is
    never true beside one, and the raising form raises."""
    kw: dict[str, Any] = dict(gpu=gpu, tensor_parallel_size=tp, max_model_len=mml,
                              max_num_seqs=seqs)
    try:
        c = plan_on_gpu(model, raise_if_not_fits=False, **kw)
    except Exception as exc:  # a TP that does not divide the heads: invalid, not a fit
        assert type(exc).__name__ == "ConfigError", exc
        return
    fatal = [x for x in c.stats.get("ceilings") or [] if x["fatal"]]
    if fatal:
        assert c.stats["fits"] is False, fatal
    if c.stats["fits"] is False:
        with pytest.raises(NotEnoughMemoryError):
            plan_on_gpu(model, **kw)


def test_plan_fits_is_false_when_vllm_refuses_to_start(capsys: Any) -> None:
    """tester1 #3: qwen3-next TP 4 on H100, --max-num-seqs 20000 (and a step as large,
    which vLLM requires): the Mamba ceiling is fatal (about 6,000 blocks); the CLI exits
    2 naming max_num_seqs, as a not-fit does."""
    skip_unless_served("qwen3-next-80b-a3b-thinking")
    rc, out, err = _run(capsys, ["plan", "qwen3-next-80b-a3b-thinking", "--gpu", "H100",
                                 "--tp", "4", "--max-model-len", "8192",
                                 "--max-num-seqs", "20000",
                                 "--max-num-batched-tokens", "20000", "--json"])
    assert rc == 2
    d = json.loads(out)["error"]
    assert d["fits"] is False and "max_num_seqs" in d["message"]
    assert "refuses to start" in d["message"]


def test_sweep_row_with_a_fatal_ceiling_does_not_fit() -> None:
    skip_unless_served("qwen3-next-80b-a3b-thinking")
    from kvcore.deploy.sweep import sweep

    rows = sweep("qwen3-next-80b-a3b-thinking", gpu="H100", tensor_parallel_size=4,
                 max_model_len=8192, max_num_seqs=20000, max_num_batched_tokens=20000)
    assert rows[0]["fits"] is False and "max_num_seqs" in rows[0]["error"]


def test_simulate_num_blocks_beyond_the_gpu_is_refused(capsys: Any) -> None:
    """tester1 #2: simulate --gpu H100 --num-blocks 100000000 ran on 195 TiB of KV."""
    rc, out, err = _run(capsys, ["simulate", "llama-3.1-8b", "--gpu", "H100", "--dataset",
                                 "random", "--num-prompts", "8", "--random-input-len", "64",
                                 "--random-output-len", "8", "--max-model-len", "16384",
                                 "--num-blocks", "100000000"])
    assert rc == 2 and len(err.strip().splitlines()) == 1
    assert "num_blocks" in err and "largest num_gpu_blocks_override that fits" in err
