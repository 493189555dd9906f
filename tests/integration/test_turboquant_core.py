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
    assert config.stats["bytes_per_token"] == 26_112           # 32 x 8 x 102 B
    assert round(131_072 / config.stats["bytes_per_token"], 2) == 5.02
    assert {g.kind for g in config.kv_cache_groups} == {"turboquant_full_attention"}


def test_invalid_turboquant_name_is_explained_not_missing():
    with pytest.raises(UnknownKVCacheDtypeError) as e:
        get_registry().kv_cache_dtype("turboquant_k8v4_nc")
    assert "not installed" not in str(e.value) and "8-bit keys" in str(e.value)
