"""kvcore-mamba through the core planner: plan-wide options reach the state specs."""

from __future__ import annotations

import pytest

pytest.importorskip("kvcore_mamba")

from kvcore.planning import plan_from_specs_file  # noqa: E402


def specs_file(**options):
    layers = {"l0.mamba": {"type": "mamba", "block_size": 528,
                           "shapes": [[3, 512], [8, 64, 64]],
                           "dtypes": ["bfloat16", "float32"]},
              "l1.attn": {"type": "full_attention", "block_size": 528, "num_kv_heads": 1,
                          "head_size": 128, "dtype": "bfloat16"}}
    return {"options": {"max_model_len": 32_768, "num_gpu_blocks_override": 2200, **options},
            "layers": layers}


def test_options_mode_applies_to_mamba_layers():
    none = plan_from_specs_file(specs_file())
    align = plan_from_specs_file(specs_file(mamba_cache_mode="align"))
    # cdiv(32768, 528) = 63 attention blocks; 1 state block (none) or 2 (align)
    assert none.stats["blocks_per_request"] == 63 + 1
    assert align.stats["blocks_per_request"] == 63 + 2
    state = next(g for g in none.kv_cache_groups if g.kind == "mamba")
    assert state.block_size == 32_768          # none mode: one state block per request


def test_ssm_cache_dtype_override_doubles_a_bf16_ssm_state():
    from kvcore import plan_model

    base = plan_model("qwen3-next-80b-a3b-thinking", max_model_len=4096)
    f32 = plan_model("qwen3-next-80b-a3b-thinking", max_model_len=4096,
                     mamba_ssm_cache_dtype="float32")
    g = next(g for g in base.kv_cache_groups if g.kind == "mamba").spec
    g32 = next(g for g in f32.kv_cache_groups if g.kind == "mamba").spec
    assert g32.dtypes[-1] == "float32" and g.dtypes[-1] == "bfloat16"
    # the recurrent state (last tensor) doubles; the conv state is unchanged
    import math
    ssm = math.prod(g.shapes[-1])
    assert g32.real_page_size_bytes - g.real_page_size_bytes == ssm * 2
