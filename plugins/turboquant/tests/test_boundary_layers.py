"""vLLM 0.32's TurboQuant boundary protection (fresh tester, T3): on a dense model the
first ``min(2, L // 2)`` and the last ``min(2, L // 2)`` decoder layers keep the native
dtype; hybrids keep every layer quantized.

Expected values from vLLM 0.32's code, re-stated here (not kvcore's):
vllm/engine/arg_utils.py:2293-2310 (a ``turboquant_*`` kv_cache_dtype adds
``TurboQuantConfig.get_boundary_skip_layers`` to ``kv_cache_dtype_skip_layers``),
vllm/model_executor/layers/quantization/turboquant/config.py:177-211 (n = 2,
``n = min(n, num_layers // 2)``, first n + last n; ``[]`` for a hybrid) and
vllm/model_executor/layers/attention/attention.py:299-313 (a listed layer index gets
``kv_cache_dtype = "auto"``: the model dtype, 2 x head_size x 2 B per token per head).
"""

from __future__ import annotations

import json
import subprocess
import sys

from hypothesis import given, settings
from hypothesis import strategies as st
from kvcore_turboquant.schemes import turboquant_config

import kvcore
from kvcore.models.config import CacheConfig, parse_model_config
from kvcore.models.planner import layer_specs_for

VLLM_PRESETS = ["turboquant_k8v4", "turboquant_4bit_nc", "turboquant_k3v4_nc",
                "turboquant_3bit_nc"]


def vllm_skip(num_layers: int, n: int = 2) -> set[int]:
    """TurboQuantConfig.get_boundary_skip_layers of a dense model (config.py:204-211)."""
    n = min(n, num_layers // 2)
    return set(range(n)) | set(range(num_layers - n, num_layers))


def _llama(num_layers: int, kv: int, head: int) -> dict:
    return {"model_type": "llama", "num_hidden_layers": num_layers,
            "num_attention_heads": kv * 2, "num_key_value_heads": kv,
            "hidden_size": kv * 2 * head, "head_dim": head, "torch_dtype": "bfloat16",
            "max_position_embeddings": 4096}


@settings(max_examples=60)
@given(num_layers=st.integers(1, 40), kv=st.sampled_from([1, 2, 4, 8]),
       head=st.sampled_from([64, 128]), dtype=st.sampled_from(VLLM_PRESETS))
def test_dense_boundary_layers_at_model_dtype(num_layers, kv, head, dtype):
    cfg = parse_model_config(_llama(num_layers, kv, head), name="gen")
    specs = layer_specs_for(cfg, CacheConfig(kv_cache_dtype=dtype))
    skip = vllm_skip(num_layers)
    slot = turboquant_config(dtype).slot_bytes(head)
    slot += slot % 2                     # vLLM's slot_size_aligned (config.py:167-175)
    for i in range(num_layers):
        s = specs[f"model.layers.{i}.self_attn"]
        if i in skip:
            assert s.kind == "full_attention" and s.kv_cache_dtype == "auto"
            assert s.page_size_bytes == 16 * kv * 2 * head * 2
        else:
            assert s.kind == "turboquant_full_attention"
            assert s.page_size_bytes == 16 * kv * slot


def test_llama_31_8b_k8v4_blocks_as_vllm():
    """Tester's T3 figure: 20 GiB / (4 x 65,536 + 28 x 25,088 B) = 22,262 blocks."""
    proc = subprocess.run(
        [sys.executable, "-m", "kvcore", "plan", "llama-3.1-8b", "--kv-cache-memory",
         "20GiB", "--max-model-len", "8192", "--kv-cache-dtype", "turboquant_k8v4",
         "--json"], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["num_blocks"] == 20 * 2**30 // (4 * 65_536 + 28 * 25_088)


def test_hybrid_keeps_every_attention_layer_quantized():
    """config.py:192-202: a hybrid (Mamba + attention) skips no layer."""
    import pytest

    pytest.importorskip("kvcore_mamba")
    cfg = kvcore.models.config.load_model_config("nemotron-h-56b-base-8k")
    specs = layer_specs_for(cfg, CacheConfig(kv_cache_dtype="turboquant_k8v4"))
    attn = [s for s in specs.values() if s.kind != "mamba"]
    assert attn and all(str(s.kv_cache_dtype).startswith("turboquant_") for s in attn)


@settings(max_examples=200)
@given(head=st.integers(1, 64).map(lambda k: 8 * k), heads=st.integers(1, 16),
       bs=st.sampled_from([16, 32, 64, 128]), dtype=st.sampled_from(VLLM_PRESETS))
def test_page_slot_rounded_to_even_as_vllm(head, heads, bs, dtype):
    """Fresh tester T5: vLLM 0.32's page is block_size x heads x slot_size_aligned, the
    K + V slot rounded up to even (turboquant/config.py:138-175: key ceil(D kb / 8) + 2,
    or D at kb = 8; value ceil(D vb / 8) + 4; v1/attention/backends/turboquant_attn.py:153).
    Re-stated from vLLM's presets (config.py TQ_PRESETS), not from kvcore's formula."""
    import math

    from kvcore_turboquant.spec import TurboQuantFullAttentionSpec

    kb, vb = {"turboquant_k8v4": (8, 4), "turboquant_4bit_nc": (4, 4),
              "turboquant_k3v4_nc": (3, 4), "turboquant_3bit_nc": (3, 3)}[dtype]
    key = head if kb == 8 else math.ceil(head * kb / 8) + 2
    slot = key + math.ceil(head * vb / 8) + 4
    slot += slot % 2
    spec = TurboQuantFullAttentionSpec(block_size=bs, num_kv_heads=heads, head_size=head,
                                       kv_cache_dtype=dtype)
    assert spec.page_size_bytes == bs * heads * slot
    from kvcore.specs import FullAttentionSpec  # the same dtype on a plain attention kind

    plain = FullAttentionSpec(block_size=bs, num_kv_heads=heads, head_size=head,
                              kv_cache_dtype=dtype)
    assert plain.page_size_bytes == bs * heads * slot


def test_k3v4_nc_head_72_page_is_vllms_4480():
    """The tester's example: head 72, 4 KV heads, block 16: slot 27 + 2 + 36 + 4 = 69 ->
    70 (vLLM 4,480 B, kvcore was 4,416)."""
    from kvcore_turboquant.spec import TurboQuantFullAttentionSpec

    s = TurboQuantFullAttentionSpec(head_size=72, num_kv_heads=4, block_size=16,
                                    kv_cache_dtype="turboquant_k3v4_nc")
    assert s.page_size_bytes == 16 * 4 * 70 == 4480
