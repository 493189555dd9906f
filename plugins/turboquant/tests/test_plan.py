"""Planning with TurboQuant dtypes (issue 8: llama-3.1-8b at 26,112 B per token; a
TurboQuant page beside a recurrent state plans with padding)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from kvcore_turboquant.spec import TurboQuantFullAttentionSpec

import kvcore
from kvcore.errors import MissingPluginError, SpecError
from kvcore.registry import get_registry


def test_plan_llama_31_8b_3bit_nc_bytes_per_token():
    """28 quantized layers x 8 KV heads x 102 B (48 + 2 key, 48 + 4 value at D = 128) +
    the 4 boundary layers (0, 1, 30, 31) that vLLM 0.32 keeps at bf16
    (vllm/engine/arg_utils.py:2293-2310, turboquant/config.py:177-211)."""
    config = kvcore.plan_model("llama-3.1-8b", kv_cache_dtype="turboquant_3bit_nc")
    assert config.stats["bytes_per_token"] == 28 * 8 * 102 + 4 * 8 * 2 * 128 * 2 == 39_232
    bf16 = kvcore.plan_model("llama-3.1-8b").stats["bytes_per_token"]
    assert bf16 == 32 * 8 * 2 * 128 * 2 == 131_072
    assert round(bf16 / config.stats["bytes_per_token"], 2) == 3.34


def test_cli_plan_json():
    proc = subprocess.run(
        [sys.executable, "-m", "kvcore.cli", "plan", "llama-3.1-8b", "--kv-cache-dtype",
         "turboquant_3bit_nc", "--json"], capture_output=True, text=True)
    if proc.returncode != 0 and "No module named" in proc.stderr:
        pytest.skip("kvcore.cli is not runnable as a module")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["bytes_per_token"] == 39_232  # boundary layers bf16


def test_hybrid_turboquant_page_beside_state_plans_with_padding():
    try:
        mamba_cls = get_registry().spec_class("mamba")
    except (MissingPluginError, SpecError):
        pytest.skip("kvcore-mamba is not installed")
    from kvcore.planning import plan

    attn = TurboQuantFullAttentionSpec(block_size=16, num_kv_heads=2, head_size=256,
                                       kv_cache_dtype="turboquant_k8v4")
    assert attn.page_size_bytes == 12_416  # 16 x 2 x (256 + 128 + 4)
    state = mamba_cls(block_size=16, shapes=((3_162_112,),), dtypes=("float32",))
    assert state.page_size_bytes == 12_648_448
    layers = {"layers.0.attn": attn, "layers.1.mamba": state, "layers.2.mamba": state,
              "layers.3.attn": attn}
    config = plan(layers, max_model_len=4096, kv_cache_memory_bytes=8 * 2**30)
    # the state page is larger: attention block size rises to the smallest multiple of
    # 16 whose page reaches it: ceil(12,648,448 / 776) = 16,300 -> 16,304 tokens,
    # page 16,304 x 776 = 12,651,904 B; the state is padded by 3,456 B
    groups = {g.spec.kind: g for g in config.kv_cache_groups}
    a = groups["turboquant_full_attention"].spec
    assert a.block_size == 16_304 and a.page_size_bytes == 12_651_904
    assert groups["mamba"].spec.page_size_bytes == 12_651_904
    # two state layers, each padded by 3,456 B per block id
    assert config.stats["padding_bytes_per_block"] == 2 * 3_456
    assert config.num_blocks > 0


def test_groups_with_full_attention_layers():
    # grouping_base "full_attention": bf16 full-attention and TurboQuant layers of one
    # block size share one (packed) group.  Per token: 2 x 8 x 512 B + 2 x 8 x 102 B
    # = 9,824 B; per block id 16 x 9,824 = 157,184 B; 1 GiB // 157,184 = 6,831 blocks.
    from kvcore.planning import plan
    from kvcore.specs import FullAttentionSpec

    full = FullAttentionSpec(block_size=16, num_kv_heads=8, head_size=128)
    tq = TurboQuantFullAttentionSpec(block_size=16, num_kv_heads=8, head_size=128,
                                     kv_cache_dtype="turboquant_3bit_nc")
    config = plan({"l0": full, "l1": tq, "l2": full, "l3": tq}, max_model_len=4096,
                  kv_cache_memory_bytes=2**30)
    assert [g.layer_names for g in config.kv_cache_groups] == [("l0", "l1", "l2", "l3")]
    assert config.stats["bytes_per_token"] == 9_824
    assert config.bytes_per_block == 157_184
    assert config.num_blocks == 6_831
