"""Specs: page sizes (issue #2 numbers), validation, merge, serialization."""

from __future__ import annotations

import pytest

from kvcore import (
    ChunkedLocalAttentionSpec,
    CrossAttentionSpec,
    EncoderOnlyAttentionSpec,
    FullAttentionSpec,
    KVCacheSpec,
    PlanContext,
    SinkFullAttentionSpec,
    SlidingWindowSpec,
)
from kvcore.errors import (
    MissingPluginError,
    SpecError,
    SpecMergeError,
    UnknownDtypeError,
    UnknownKVCacheDtypeError,
)


def full(**kw):
    base = dict(block_size=16, num_kv_heads=8, head_size=128)
    base.update(kw)
    return FullAttentionSpec(**base)


@pytest.mark.parametrize("kv_cache_dtype, page", [
    ("auto", 65_536),                      # 16 x 8 x 2 x 128 x 2 B
    ("bfloat16", 65_536),
    ("float32", 131_072),
    ("fp8", 32_768),
    ("fp8_e5m2", 32_768),
    ("int8_per_token_head", 33_792),       # 16 x 8 x (128 + 128 + 4 + 4)
    ("fp8_per_token_head", 33_792),
    ("int4_per_token_head", 16 * 8 * (64 + 64 + 4 + 4)),
    ("nvfp4", 18_432),                     # 16 x 2 x 8 x (64 + 8)
])
def test_attention_page_sizes(kv_cache_dtype, page):
    assert full(kv_cache_dtype=kv_cache_dtype).page_size_bytes == page


def test_model_dtype_drives_auto():
    assert full(dtype="float32").page_size_bytes == 131_072
    assert full(dtype="fp16").dtype == "float16"


def test_head_size_v():
    # MiMo-style: K 192, V 128 channels, bf16
    spec = full(num_kv_heads=4, head_size=192, head_size_v=128)
    assert spec.page_size_bytes == 16 * 4 * (192 + 128) * 2


def test_torch_dtype_accepted():
    torch = pytest.importorskip("torch")
    assert full(dtype=torch.bfloat16).dtype == "bfloat16"
    assert full(kv_cache_dtype=torch.float8_e4m3fn).kv_cache_dtype == "fp8"


def test_unknown_kv_cache_dtype_lists_known():
    with pytest.raises(UnknownKVCacheDtypeError) as e:
        full(kv_cache_dtype="int3")
    assert "int8_per_token_head" in str(e.value) and "nvfp4" in str(e.value)
    assert "'int3'" in str(e.value)


def test_plugin_kv_cache_dtype_names_the_plugin(monkeypatch):
    monkeypatch.setenv("KVCORE_DISABLE_PLUGIN_AUTOLOAD", "1")
    from kvcore import plugins

    plugins.reload_plugins()
    try:
        with pytest.raises(MissingPluginError) as e:
            full(kv_cache_dtype="turboquant_3bit_nc")
        assert "kvcore-turboquant" in str(e.value)
        with pytest.raises(MissingPluginError) as e:
            full(kv_cache_dtype="fp8_ds_mla")
        assert "kvcore-mla" in str(e.value)
    finally:
        monkeypatch.delenv("KVCORE_DISABLE_PLUGIN_AUTOLOAD")
        plugins.reload_plugins()


def test_unknown_element_dtype():
    with pytest.raises(UnknownDtypeError) as e:
        full(dtype="bfloat17")
    assert "bfloat16" in str(e.value)


@pytest.mark.parametrize("field, value", [
    ("block_size", 0), ("block_size", -16), ("num_kv_heads", 0), ("head_size", "128"),
    ("block_size", True),
])
def test_validation_names_the_field(field, value):
    with pytest.raises(SpecError) as e:
        full(**{field: value})
    assert field in str(e.value)


def test_padding_must_not_shrink_the_page():
    with pytest.raises(SpecError, match="page_size_padded"):
        full(page_size_padded=1000)
    padded = full().with_page_size_padded(70_000)
    assert padded.page_size_bytes == 70_000 and padded.padding_bytes == 70_000 - 65_536
    assert full().with_page_size_padded(65_536).page_size_padded is None


def test_blocks_per_request_formulas():
    ctx = PlanContext(max_model_len=32_768, max_num_batched_tokens=8192,
                      max_num_encoder_input_tokens=1500)
    assert full().max_num_blocks_per_req(ctx) == 2048
    sw = SlidingWindowSpec(block_size=16, num_kv_heads=8, head_size=256, sliding_window=1024)
    assert sw.max_num_blocks_per_req(ctx) == 577          # cdiv(1023 + 8192, 16) + 1
    assert sw.max_num_blocks_per_req(ctx, 100) == 8       # cdiv(100, 16) + 1
    ch = ChunkedLocalAttentionSpec(block_size=16, num_kv_heads=8, head_size=128,
                                   attention_chunk_size=8192)
    assert ch.max_num_blocks_per_req(ctx) == 1024         # cdiv(8192 + 8192, 16)
    cross = CrossAttentionSpec(block_size=16, num_kv_heads=20, head_size=64, dtype="float16")
    assert cross.max_num_blocks_per_req(ctx) == 94        # cdiv(1500, 16)
    assert cross.bytes_per_token == 0
    enc = EncoderOnlyAttentionSpec(block_size=16, num_kv_heads=8, head_size=64)
    assert enc.page_size_bytes == 0 and enc.max_num_blocks_per_req(ctx) == 0
    sink = SinkFullAttentionSpec(block_size=16, num_kv_heads=8, head_size=128, sink_len=64)
    assert sink.num_sink_blocks == 4 and sink.max_num_blocks_per_req(ctx, 4096) == 256


def test_merge_equal_and_different():
    assert FullAttentionSpec.merge([full(), full()]) == full()
    with pytest.raises(SpecMergeError) as e:
        FullAttentionSpec.merge([full(), full(num_kv_heads=4)])
    assert "num_kv_heads" in str(e.value) and e.value.extra["fields"] == ["num_kv_heads"]
    with pytest.raises(SpecMergeError) as e:
        KVCacheSpec.merge([full(), full(kv_cache_dtype="fp8", head_size=64)])
    assert set(e.value.extra["fields"]) == {"head_size", "kv_cache_dtype"}


def test_full_attention_merge_records_window():
    merged = FullAttentionSpec.merge([full(sliding_window=1024), full()])
    assert merged.sliding_window == 1024
    with pytest.raises(SpecMergeError):
        FullAttentionSpec.merge([full(sliding_window=1024), full(sliding_window=512)])


@pytest.mark.parametrize("spec", [
    full(),
    full(kv_cache_dtype="nvfp4", head_size_v=64),
    SlidingWindowSpec(block_size=32, num_kv_heads=2, head_size=64, sliding_window=128),
    ChunkedLocalAttentionSpec(block_size=16, num_kv_heads=8, head_size=128,
                              attention_chunk_size=8192),
    CrossAttentionSpec(block_size=16, num_kv_heads=20, head_size=64, dtype="float16"),
    SinkFullAttentionSpec(block_size=16, num_kv_heads=8, head_size=128, sink_len=64),
    full().with_page_size_padded(100_000),
])
def test_dict_round_trip(spec):
    d = spec.to_dict()
    assert d["type"] == spec.kind
    assert KVCacheSpec.from_dict(d) == spec


def test_from_dict_errors():
    with pytest.raises(SpecError, match="unknown field"):
        KVCacheSpec.from_dict({"type": "full_attention", "block_size": 16, "num_kv_heads": 8,
                               "head_size": 128, "heads": 3})
    with pytest.raises(SpecError, match="known types"):
        KVCacheSpec.from_dict({"type": "nope"})
    with pytest.raises(SpecError, match="'type'"):
        KVCacheSpec.from_dict({"block_size": 16})


def test_specs_are_values():
    assert full() == full() and hash(full()) == hash(full())
    with pytest.raises(AttributeError):
        full().block_size = 32  # type: ignore[misc]
