"""Page layout of attention pages (pure Python: runs without torch)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kvcore.errors import KVCoreError
from kvcore.ops.layout import (
    SUPPORTED_KV_CACHE_DTYPES,
    attention_page_layout,
    storage_dtype_name,
)
from kvcore.specs import FullAttentionSpec, SlidingWindowSpec


def test_int8_per_token_head_offsets_by_hand():
    # N=16 tokens, H=8 heads, D=128: K values 16*8*128 = 16384 B, K scales 16*8*4 = 512 B
    spec = FullAttentionSpec(block_size=16, num_kv_heads=8, head_size=128,
                             kv_cache_dtype="int8_per_token_head")
    lay = attention_page_layout(spec)
    assert (lay.key_offset, lay.key_scale_offset) == (0, 16384)
    assert (lay.value_offset, lay.value_scale_offset) == (16896, 33280)
    # issue 10: block_size x H x (D + 4) for K, same for V
    assert lay.page_size_bytes == 2 * 16 * 8 * (128 + 4) == 33792
    assert lay.storage_dtype == "int8" and not lay.head_major


def test_bf16_layout_by_hand_and_head_size_v():
    spec = FullAttentionSpec(block_size=16, num_kv_heads=2, head_size=192, head_size_v=128)
    lay = attention_page_layout(spec, "BLHNC")
    assert lay.value_offset == 16 * 2 * 192 * 2
    assert lay.page_size_bytes == 16 * 2 * (192 + 128) * 2
    assert lay.head_major and lay.key_scale_offset is None


@settings(max_examples=60, deadline=None)
@given(block_size=st.sampled_from([1, 4, 16, 64]), heads=st.integers(1, 16),
       head_size=st.sampled_from([4, 8, 64, 96, 128, 256]),
       head_size_v=st.sampled_from([None, 64, 128]),
       kv_dtype=st.sampled_from(SUPPORTED_KV_CACHE_DTYPES),
       dtype=st.sampled_from(["bfloat16", "float16", "float32"]))
def test_layout_bytes_equal_spec_page_size(block_size, heads, head_size, head_size_v,
                                           kv_dtype, dtype):
    spec = SlidingWindowSpec(block_size=block_size, num_kv_heads=heads,
                             head_size=head_size, head_size_v=head_size_v, dtype=dtype,
                             kv_cache_dtype=kv_dtype, sliding_window=128)
    lay = attention_page_layout(spec)
    assert lay.page_size_bytes == spec.real_page_size_bytes
    # planes are disjoint and in order K, (K scales), V, (V scales)
    ends = [lay.key_offset, lay.key_scale_offset, lay.value_offset,
            lay.value_scale_offset]
    ends = [e for e in ends if e is not None]
    assert ends == sorted(ends)
    if lay.has_scales:
        assert lay.key_scale_offset % 4 == 0 and lay.value_scale_offset % 4 == 0


def test_storage_dtypes():
    assert storage_dtype_name("auto", "float16") == "float16"
    assert storage_dtype_name("fp8_e4m3") == "float8_e4m3fn"
    assert storage_dtype_name("fp8_e5m2") == "float8_e5m2"
    assert storage_dtype_name("int8_per_token_head") == "int8"
    assert storage_dtype_name("fp8_per_token_head") == "float8_e4m3fn"


def test_unsupported_dtype_lists_supported():
    spec = FullAttentionSpec(block_size=16, num_kv_heads=2, head_size=64,
                             kv_cache_dtype="nvfp4")
    with pytest.raises(KVCoreError, match="int8_per_token_head") as err:
        attention_page_layout(spec)
    assert err.value.extra["field"] == "kv_cache_dtype"


def test_bad_layout_string():
    spec = FullAttentionSpec(block_size=16, num_kv_heads=2, head_size=64)
    with pytest.raises(KVCoreError, match="C .channels. last"):
        attention_page_layout(spec, "LBNCH")


def test_misaligned_scale_plane_is_an_error():
    spec = FullAttentionSpec(block_size=1, num_kv_heads=1, head_size=6,
                             kv_cache_dtype="int8_per_token_head")
    with pytest.raises(KVCoreError, match="multiple of 4"):
        attention_page_layout(spec)
