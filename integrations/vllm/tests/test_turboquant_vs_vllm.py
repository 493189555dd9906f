"""kvcore's TurboQuant layer specs against vLLM 0.32's own code (fresh tester T3, T4, T5).

Run with /work/bin/kvpy-vllm -m pytest."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

pytest.importorskip("vllm")
pytest.importorskip("kvcore_turboquant")

from kvcore.models.config import CacheConfig, parse_model_config  # noqa: E402
from kvcore.models.planner import layer_specs_for  # noqa: E402

VLLM_PRESETS = ["turboquant_k8v4", "turboquant_4bit_nc", "turboquant_k3v4_nc",
                "turboquant_3bit_nc"]


@settings(max_examples=40)
@given(num_layers=st.integers(1, 48), dtype=st.sampled_from(VLLM_PRESETS))
def test_boundary_layers_are_vllms(num_layers, dtype):
    """T3: the layers kvcore keeps at the model dtype are exactly vLLM's
    TurboQuantConfig.get_boundary_skip_layers of the dense model
    (vllm/model_executor/layers/quantization/turboquant/config.py:177-211, called by
    vllm/engine/arg_utils.py:2293-2310; attention.py:299-313 sets those layers to
    kv_cache_dtype "auto")."""
    from vllm.model_executor.layers.quantization.turboquant.config import TurboQuantConfig

    mc = SimpleNamespace(is_hybrid=False,
                         hf_text_config=SimpleNamespace(num_hidden_layers=num_layers))
    want = {int(i) for i in TurboQuantConfig.get_boundary_skip_layers(mc)}
    cfg = parse_model_config({"model_type": "llama", "num_hidden_layers": num_layers,
                              "num_attention_heads": 16, "num_key_value_heads": 4,
                              "hidden_size": 2048, "head_dim": 128,
                              "torch_dtype": "bfloat16"}, name="gen")
    specs = layer_specs_for(cfg, CacheConfig(kv_cache_dtype=dtype))
    got = {i for i in range(num_layers)
           if specs[f"model.layers.{i}.self_attn"].kv_cache_dtype == "auto"}
    assert got == want
