"""kv_cache_dtype names, byte counts, the turboquant_full_attention spec and its
registration.  Expected byte counts are the issue's formula worked by hand."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kvcore_turboquant.schemes import (
    PRESETS,
    TurboQuantConfig,
    explain_invalid_name,
    turboquant_config,
)
from kvcore_turboquant.spec import TurboQuantFullAttentionSpec

import kvcore
from kvcore.errors import KVCoreError, SpecError, UnknownKVCacheDtypeError
from kvcore.registry import get_registry
from kvcore.specs import KVCacheSpec, PlanContext

# issue 8: bytes per token per KV head at D = 128
PRESET_BYTES_D128 = {
    "turboquant_k8v4": 196,      # 128 (fp8) + 64 + 4
    "turboquant_4bit_nc": 134,   # 64 + 2 + 64 + 4
    "turboquant_k3v4_nc": 118,   # 48 + 2 + 64 + 4
    "turboquant_3bit_nc": 102,   # 48 + 2 + 48 + 4
}


@pytest.mark.parametrize("name,expected", sorted(PRESET_BYTES_D128.items()))
def test_preset_bytes_through_registry(name, expected):
    scheme = get_registry().kv_cache_dtype(name)
    assert scheme.bytes_per_token_head(128, 128, "bfloat16") == expected
    assert scheme.distribution == "kvcore-turboquant"


def test_presets_are_aliases_of_general_names():
    reg = get_registry()
    assert reg.kv_cache_dtype("turboquant_4bit_nc") is reg.kv_cache_dtype("turboquant_k4v4_nc")
    assert reg.kv_cache_dtype("turboquant_3bit_nc") is reg.kv_cache_dtype("turboquant_k3v3_nc")
    assert reg.kv_cache_dtype("turboquant_4bit_nc").name == "turboquant_k4v4_nc"
    assert reg.kv_cache_dtype("turboquant_k8v4").name == "turboquant_k8v4"
    assert turboquant_config("turboquant_3bit_nc") == TurboQuantConfig(3, 3, True)
    assert turboquant_config("turboquant_k8v4") == TurboQuantConfig(8, 4, False)


def test_every_general_name_is_registered():
    reg = get_registry()
    names = set(reg.kv_cache_dtypes)
    for kb in (2, 3, 4, 8):
        for vb in (2, 3, 4, 8):
            assert f"turboquant_k{kb}v{vb}" in names
            assert (f"turboquant_k{kb}v{vb}_nc" in names) == (kb != 8)
    assert set(PRESETS) <= names
    # 16 plain + 12 norm-corrected names + 2 preset aliases
    assert len([n for n in names if n.startswith("turboquant")]) == 30


def test_plugin_listed_with_its_kind_and_dtypes():
    info = {p.name: p for p in kvcore.plugins.list_plugins()}["turboquant"]
    assert info.distribution == "kvcore-turboquant"
    assert info.kinds == ["turboquant_full_attention"]
    assert "turboquant_k3v3_nc" in info.kv_cache_dtypes


@given(d=st.integers(1, 512), dv=st.integers(1, 512), kb=st.sampled_from([2, 3, 4, 8]),
       vb=st.sampled_from([2, 3, 4, 8]), nc=st.booleans())
@settings(max_examples=200, deadline=None)
def test_general_form_bytes_formula(d, dv, kb, vb, nc):
    if nc and kb == 8:
        return
    name = f"turboquant_k{kb}v{vb}{'_nc' if nc else ''}"
    scheme = get_registry().kv_cache_dtype(name)
    key = d if kb == 8 else math.ceil(d * kb / 8) + 2
    value = math.ceil(dv * vb / 8) + 4
    assert scheme.key_bytes(d, "bfloat16") == key
    assert scheme.value_bytes(dv, "bfloat16") == value
    # the slot rounded up to even: vLLM 0.32 TurboQuantConfig.slot_size_aligned
    # (turboquant/config.py:167-175)
    assert scheme.bytes_per_token_head(d, dv, "float16") == key + value + (key + value) % 2


@pytest.mark.parametrize("bad", ["turboquant_k8v4_nc", "turboquant_k8v8_nc"])
def test_nc_with_8bit_keys_is_a_clear_error(bad):
    with pytest.raises(UnknownKVCacheDtypeError, match="norm correction"):
        turboquant_config(bad)
    assert "8-bit keys" in explain_invalid_name(bad)
    # not registered: the core refuses the name (its message is the core's; see README)
    with pytest.raises(KVCoreError):
        get_registry().kv_cache_dtype(bad)
    with pytest.raises(KVCoreError):
        TurboQuantFullAttentionSpec(block_size=16, num_kv_heads=8, head_size=128,
                                    kv_cache_dtype=bad)


@pytest.mark.parametrize("bad", ["turboquant_k5v4", "turboquant_k4v1", "turboquant_x"])
def test_bad_bit_widths_rejected(bad):
    with pytest.raises(UnknownKVCacheDtypeError):
        turboquant_config(bad)
    assert explain_invalid_name(bad) is not None
    assert explain_invalid_name("turboquant_k4v4") is None
    assert explain_invalid_name("fp8") is None


# ---- spec -----------------------------------------------------------------------------
@pytest.mark.parametrize("name,slot", sorted(PRESET_BYTES_D128.items()))
def test_spec_page_size(name, slot):
    s = TurboQuantFullAttentionSpec(block_size=16, num_kv_heads=8, head_size=128,
                                    kv_cache_dtype=name)
    assert s.slot_bytes == slot
    assert s.page_size_bytes == 16 * 8 * slot
    assert s.bytes_per_token == 8 * slot
    # a request of 1000 tokens: cdiv(1000, 16) = 63 blocks
    assert s.max_num_blocks_per_req(PlanContext(max_model_len=1000)) == 63
    assert s.max_memory_usage_bytes(PlanContext(max_model_len=1000)) == 63 * 16 * 8 * slot


def test_spec_hybrid_page_example():
    # issue 8's hybrid case: turboquant_k8v4 at D = 256, 2 KV heads, block 16:
    # 16 x 2 x (256 + 128 + 4) = 12,416 B
    s = TurboQuantFullAttentionSpec(block_size=16, num_kv_heads=2, head_size=256,
                                    kv_cache_dtype="turboquant_k8v4")
    assert s.page_size_bytes == 12_416


def test_spec_head_size_v_and_default_dtype():
    s = TurboQuantFullAttentionSpec(block_size=16, num_kv_heads=1, head_size=192,
                                    head_size_v=128)
    assert s.kv_cache_dtype == "turboquant_k4v4_nc"  # default turboquant_4bit_nc
    assert s.slot_bytes == (96 + 2) + (64 + 4)


def test_spec_registered_as_full_attention_kind():
    reg = get_registry()
    st_ = reg.spec_type("turboquant_full_attention")
    assert st_.cls is TurboQuantFullAttentionSpec
    assert st_.grouping_base == "full_attention"
    assert st_.manager_cls == "kvcore.runtime.managers:FullAttentionManager"
    assert reg.grouping_base(TurboQuantFullAttentionSpec(
        block_size=16, num_kv_heads=8, head_size=128)) == "full_attention"
    assert isinstance(TurboQuantFullAttentionSpec(block_size=16, num_kv_heads=8,
                                                  head_size=128), kvcore.FullAttentionSpec)


def test_spec_round_trip_and_validation():
    s = TurboQuantFullAttentionSpec(block_size=32, num_kv_heads=4, head_size=96,
                                    kv_cache_dtype="turboquant_k3v4_nc")
    d = s.to_dict()
    assert d["type"] == "turboquant_full_attention"
    assert d["kv_cache_dtype"] == "turboquant_k3v4_nc"
    assert KVCacheSpec.from_dict(d) == s
    assert s.copy_with_new_block_size(64).page_size_bytes == 2 * s.page_size_bytes
    with pytest.raises(SpecError, match="kv_cache_dtype"):
        TurboQuantFullAttentionSpec(block_size=16, num_kv_heads=8, head_size=128,
                                    kv_cache_dtype="fp8")
    merged = TurboQuantFullAttentionSpec.merge([s, s])
    assert merged == s
