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


@settings(max_examples=120)
@given(head=st.integers(1, 48).map(lambda k: 8 * k), heads=st.integers(1, 8),
       bs=st.sampled_from([16, 32, 64]), dtype=st.sampled_from(VLLM_PRESETS))
def test_page_is_vllms_customize_spec(head, heads, bs, dtype):
    """T5: kvcore's TurboQuant page equals the page of vLLM's own spec after
    TurboQuantAttentionBackend.customize_spec (v1/attention/backends/turboquant_attn.py:
    141-153: state_content_bytes = TurboQuantConfig.slot_size_aligned, the slot rounded
    up to even, turboquant/config.py:167-175), e.g. k3v4_nc at head 72: 4,480 B, not
    4,416; and the bridge gives vLLM that page."""
    import kvcore_vllm
    import torch
    from kvcore_turboquant.spec import TurboQuantFullAttentionSpec
    from vllm.v1.attention.backends.turboquant_attn import TurboQuantAttentionBackend
    from vllm.v1.kv_cache_interface import FullAttentionSpec, get_kv_quant_mode

    v = TurboQuantAttentionBackend.customize_spec(FullAttentionSpec(
        block_size=bs, num_kv_heads=heads, head_size=head, dtype=torch.uint8,
        kv_quant_mode=get_kv_quant_mode(dtype)))
    k = TurboQuantFullAttentionSpec(block_size=bs, num_kv_heads=heads, head_size=head,
                                    kv_cache_dtype=dtype)
    assert k.page_size_bytes == v.page_size_bytes
    assert kvcore_vllm.to_vllm_spec(k).page_size_bytes == v.page_size_bytes


KVCORE_ONLY = ["turboquant_k3v4", "turboquant_k2v2", "turboquant_k4v8_nc", "turboquant_k8v8",
               "turboquant_k2v4_nc"]


@pytest.mark.parametrize("dtype", KVCORE_ONLY)
def test_bridge_kvcore_only_turboquant_is_a_spec_error(dtype):
    """T4: vLLM 0.32 knows only the TurboQuant presets (KVQuantMode members,
    vllm/v1/kv_cache_interface.py:106-107 looks the name up as a member; the presets are
    turboquant/config.py TQ_PRESETS).  A kvcore-only name is a SpecError naming the dtype
    and vLLM's names, from to_vllm_spec and from to_vllm_config; never a KeyError."""
    import kvcore_vllm
    from kvcore_turboquant.spec import TurboQuantFullAttentionSpec
    from vllm.model_executor.layers.quantization.turboquant.config import TQ_PRESETS

    import kvcore
    from kvcore.errors import SpecError

    assert dtype not in TQ_PRESETS
    spec = TurboQuantFullAttentionSpec(block_size=16, num_kv_heads=8, head_size=128,
                                       kv_cache_dtype=dtype)
    with pytest.raises(SpecError) as ei:
        kvcore_vllm.to_vllm_spec(spec)
    msg = str(ei.value)
    assert repr(spec.kv_cache_dtype) in msg and all(p in msg for p in TQ_PRESETS)
    plan = kvcore.plan_model("llama-3.1-8b", kv_cache_memory_bytes=8 * 2**30,
                             max_model_len=4096, kv_cache_dtype=dtype)
    with pytest.raises(SpecError, match="no vLLM 0.32 counterpart"):
        kvcore_vllm.to_vllm_config(plan)


@pytest.mark.parametrize("dtype", VLLM_PRESETS)
def test_bridge_vllm_presets_still_convert(dtype):
    """The presets keep converting (the page is vLLM's, as test_page_is_vllms_customize_spec)."""
    import kvcore_vllm
    from kvcore_turboquant.spec import TurboQuantFullAttentionSpec

    spec = TurboQuantFullAttentionSpec(block_size=16, num_kv_heads=8, head_size=128,
                                       kv_cache_dtype=dtype)
    assert kvcore_vllm.to_vllm_spec(spec).page_size_bytes == spec.page_size_bytes
