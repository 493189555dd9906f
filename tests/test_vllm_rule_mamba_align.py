"""vLLM's own layout of a Mamba hybrid in ``align`` mode: vLLM has one
``cache_config.block_size``; its platform hook raises it until an attention page holds
the Mamba state, then sets ``mamba_block_size`` to it (``update_block_size_for_backend``,
vllm/platforms/interface.py@0.32).  So in vLLM's layout the state's block size equals the
attention block size; a 16-token state block would checkpoint 17x as often as vLLM does
(and the fleet's routers and the serving judge would compare against a layout vLLM
never builds)."""

from __future__ import annotations

import pytest

import kvcore

pytest.importorskip("kvcore_mamba")


@pytest.mark.parametrize("model", ["qwen3-next-80b-a3b-thinking", "nemotron-h-56b-base-8k"])
@pytest.mark.parametrize("tp", [1, 4])
@pytest.mark.parametrize("budget_gib", [8, 40])
def test_state_follows_the_attention_block_in_align_mode(model, tp, budget_gib):
    try:
        cfg = kvcore.plan_model(model, tensor_parallel_size=tp, max_model_len=8192,
                                kv_cache_memory_bytes=budget_gib * 2**30,
                                mamba_cache_mode="align")
    except kvcore.KVCoreError as exc:  # a TP size the model cannot split
        pytest.skip(str(exc))
    vllm = cfg.stats.vllm_layout
    assert vllm is not None
    sizes = set(vllm.figures.block_sizes)
    assert len(sizes) == 1, sizes  # attention and state share vLLM's one block size
    assert min(sizes) > 16  # raised so a page holds the state
