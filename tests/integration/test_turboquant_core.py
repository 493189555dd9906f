"""kvcore-turboquant through the core: plan kinds, sizes and error messages."""

from __future__ import annotations

import pytest

pytest.importorskip("kvcore_turboquant")

from kvcore import plan_model  # noqa: E402
from kvcore.errors import UnknownKVCacheDtypeError  # noqa: E402
from kvcore.registry import get_registry  # noqa: E402


def test_llama_3bit_nc_plan():
    config = plan_model("llama-3.1-8b", kv_cache_dtype="turboquant_3bit_nc",
                        max_model_len=8192)
    # 28 x 8 x 102 B + layers 0, 1, 30, 31 at bf16, as vLLM 0.32 keeps them
    # (vllm/engine/arg_utils.py:2293-2310, turboquant/config.py:177-211)
    assert config.stats["bytes_per_token"] == 28 * 8 * 102 + 4 * 8 * 512 == 39_232
    assert round(131_072 / config.stats["bytes_per_token"], 2) == 3.34
    # one uniform-type full-attention group of mixed pages (vLLM's UniformTypeKVCacheSpecs)
    assert [len(g.layer_names) for g in config.kv_cache_groups] == [32]


def test_invalid_turboquant_name_is_explained_not_missing():
    with pytest.raises(UnknownKVCacheDtypeError) as e:
        get_registry().kv_cache_dtype("turboquant_k8v4_nc")
    assert "not installed" not in str(e.value) and "8-bit keys" in str(e.value)
