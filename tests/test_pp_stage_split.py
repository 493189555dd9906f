"""Pipeline stages split the layers as vLLM does (fresh tester, T6): ``kvcore.plan``
with ``pipeline_parallel_size`` (or one budget per stage) split 32 layers over 3 stages
as 10 / 11 / 11, where vLLM 0.32's ``get_pp_indices`` (vllm/distributed/utils.py,
without VLLM_PP_LAYER_PARTITION) gives 11 / 11 / 10, and kvcore's --gpu path already
did: `kvcore plan llama-3.1-8b --kv-cache-memory 10GiB,12GiB,12GiB --pp 3` reported
16,384 blocks where vLLM's split gives 14,894.
"""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

import kvcore
from kvcore import FullAttentionSpec


def vllm_get_pp_indices(num_hidden_layers: int, pp_rank: int, pp_size: int):
    """vLLM 0.32's get_pp_indices (vllm/distributed/utils.py:126-169), the env-var-free
    branch, transcribed as the oracle."""
    layers_per_partition = num_hidden_layers // pp_size
    partitions = [layers_per_partition for _ in range(pp_size)]
    if remaining_layers := num_hidden_layers % pp_size:
        for i in range(2, remaining_layers + 2):
            partitions[-i] += 1
    start_layer = sum(partitions[:pp_rank])
    return start_layer, start_layer + partitions[pp_rank]


@settings(max_examples=60, deadline=None)
@given(n=st.integers(1, 96), pp=st.integers(2, 8), per_stage=st.booleans())
def test_stages_hold_vllms_layers(n, pp, per_stage):
    if pp > n:
        return
    layers = {f"model.layers.{i}.self_attn": FullAttentionSpec(
        block_size=16, num_kv_heads=8, head_size=128) for i in range(n)}
    budget = [4 << 30] * pp if per_stage else 4 << 30
    cfg = kvcore.plan(layers, kv_cache_memory_bytes=budget, max_model_len=4096,
                      pipeline_parallel_size=pp)
    got = [[int(name.split(".")[2]) for name in stage] for stage in cfg.stats.stages]
    want = [list(range(*vllm_get_pp_indices(n, r, pp))) for r in range(pp)]
    assert got == want


def test_the_testers_case():
    from kvcore.models.config import load_model_config  # noqa: F401 (embedded model)

    cfg = kvcore.plan_model("llama-3.1-8b", kv_cache_memory_bytes=[10 << 30, 12 << 30,
                                                                   12 << 30],
                            max_model_len=8192, pipeline_parallel_size=3)
    # stage 0 holds 11 layers of 16 x 8 x 128 x 2 x 2 B = 65,536 B pages:
    # 10 GiB / (11 x 65,536) = 14,894 blocks (vLLM's split); 10 layers gave 16,384
    assert cfg.num_blocks == 10 * 2**30 // (11 * 65536) == 14894
