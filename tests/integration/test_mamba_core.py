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
