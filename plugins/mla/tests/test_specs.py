"""MLA spec page sizes, merging, serialization and registration.

Expected values are the issue's figures (issue 6) and hand arithmetic from the record
layouts (vLLM kv_cache_interface.py / flashmla_sparse.py)."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kvcore_mla.specs import (
    HiddenStateCacheSpec,
    MLAAttentionSpec,
    MLAIndexerSpec,
    SlidingWindowMLASpec,
)

from kvcore.errors import MissingPluginError, SpecError, SpecMergeError
from kvcore.registry import get_registry
from kvcore.specs import KVCacheSpec, PlanContext


def mla(**kw):
    base = dict(block_size=64, num_kv_heads=1, head_size=576, dtype="bfloat16")
    base.update(kw)
    return MLAAttentionSpec(**base)


def v4(**kw):
    base = dict(block_size=256, num_kv_heads=1, head_size=512, dtype="bfloat16",
                kv_cache_dtype="fp8_ds_mla", model_version="deepseek_v4")
    base.update(kw)
    return MLAAttentionSpec(**base)


# ---- page sizes from the issue ------------------------------------------------------

def test_deepseek_v3_bf16_page_and_bytes_per_token():
    s = mla()
    assert s.page_size_bytes == 64 * 576 * 2 == 73_728
    # 61 layers x 576 x 2 B = 70,272 B per token
    assert 61 * s.bytes_per_token == 70_272


def test_fp8_page_is_one_byte_per_element():
    assert mla(kv_cache_dtype="fp8").page_size_bytes == 64 * 576


def test_fp8_ds_mla_page_41984():
    s = mla(kv_cache_dtype="fp8_ds_mla")
    # 512 fp8 + 4 float32 scales + 64 bf16 = 656 B/token
    assert s.entry_bytes == 512 + 16 + 128 == 656
    assert s.page_size_bytes == 41_984


def test_v4_compressed_block_256_ratio_128():
    s = v4(compress_ratio=128)
    assert s.storage_block_size == 2
    assert s.raw_page_size_bytes == 2 * 584 == 1_168
    assert s.alignment == 576  # the V4 default
    assert s.page_size_bytes == 1_728  # 3 x 576
    # kernels see 2 entries a block, not 256: 256 would overrun the buffer 128x
    shape = s.kv_cache_shape(num_blocks=10)
    assert shape == (10, 2, 584)
    assert shape[0] * shape[1] * shape[2] <= 10 * s.page_size_bytes
    assert 10 * s.block_size * 584 == 128 * 10 * s.raw_page_size_bytes


def test_v4_record_by_name_equals_model_version_form():
    a = v4(compress_ratio=4)
    b = MLAAttentionSpec(block_size=256, num_kv_heads=1, head_size=512,
                         kv_cache_dtype="fp8_ds_mla_v4", compress_ratio=4)
    # 64 states x 584 = 37,376 -> 65 x 576 = 37,440
    assert a.page_size_bytes == b.page_size_bytes == 37_440


def test_v4_sliding_window_page_and_blocks():
    s = SlidingWindowMLASpec(block_size=64, num_kv_heads=1, head_size=512,
                             sliding_window=128, kv_cache_dtype="fp8_ds_mla",
                             model_version="deepseek_v4")
    assert s.page_size_bytes == 37_440
    ctx = PlanContext(max_model_len=32768, max_num_batched_tokens=8192)
    # cdiv(min(128 - 1 + 8192, 32768), 64) + 1 = 130 + 1
    assert s.max_num_blocks_per_req(ctx) == 131


def test_explicit_alignment_pads_other_layouts():
    assert mla(kv_cache_dtype="fp8_ds_mla", alignment=576).page_size_bytes == 73 * 576
    assert mla(alignment=576).page_size_bytes == 73_728  # already a multiple


def test_indexer_132_bytes_per_token():
    s = MLAIndexerSpec(block_size=64, head_size=128)
    assert s.entry_bytes == 132
    assert s.page_size_bytes == 64 * 132 == 8_448
    with pytest.raises(SpecError, match="indexer"):
        MLAIndexerSpec(block_size=64, kv_cache_dtype="bfloat16")


def test_hidden_state_cache_is_mla_shaped():
    s = HiddenStateCacheSpec(block_size=16, num_kv_heads=1, head_size=4096)
    assert s.kind == "hidden_state_cache"
    assert s.page_size_bytes == 16 * 4096 * 2


def test_tensor_parallel_does_not_apply_to_latent():
    # the spec has no tp field: pages are per rank and identical on every rank
    ctx1 = PlanContext(max_model_len=4096, tensor_parallel_size=1)
    ctx8 = PlanContext(max_model_len=4096, tensor_parallel_size=8)
    s = mla()
    assert s.max_memory_usage_bytes(ctx1) == s.max_memory_usage_bytes(ctx8) == 64 * 73_728


def test_blocks_per_request_use_logical_block_size():
    ctx = PlanContext(max_model_len=32768)
    assert mla().max_num_blocks_per_req(ctx) == 512
    assert v4(compress_ratio=128).max_num_blocks_per_req(ctx) == 128


# ---- validation --------------------------------------------------------------------

def test_block_size_must_be_multiple_of_compress_ratio():
    with pytest.raises(SpecError, match="compress_ratio"):
        v4(block_size=64, compress_ratio=128)


def test_bad_fields():
    with pytest.raises(SpecError):
        mla(compress_ratio=0)
    with pytest.raises(SpecError):
        mla(alignment=0)


def test_unknown_dtype_lists_known():
    with pytest.raises(Exception, match="fp8_ds_mla"):
        mla(kv_cache_dtype="not_a_dtype")


# ---- merging -----------------------------------------------------------------------

def test_merge_equal_keeps_quant_mode_and_alignment():
    a = mla(kv_cache_dtype="fp8_ds_mla", alignment=576)
    m = MLAAttentionSpec.merge([a, mla(kv_cache_dtype="fp8_ds_mla", alignment=576)])
    assert m.kv_cache_dtype == "fp8_ds_mla" and m.alignment == 576
    assert m.page_size_bytes == a.page_size_bytes


@pytest.mark.parametrize("field,other", [
    ("kv_cache_dtype", dict(kv_cache_dtype="fp8")),
    ("alignment", dict(alignment=576 * 2)),
    ("compress_ratio", dict(compress_ratio=4)),
    ("model_version", dict(model_version="deepseek_v32")),
])
def test_merge_errors_name_the_field(field, other):
    a, b = mla(alignment=576), mla(**{"alignment": 576, **other})
    with pytest.raises(SpecMergeError, match=field) as exc:
        MLAAttentionSpec.merge([a, b])
    assert exc.value.extra["fields"] == [field]


def test_merge_rejects_other_kinds():
    with pytest.raises(SpecMergeError, match="kind"):
        MLAAttentionSpec.merge([mla(), MLAIndexerSpec(block_size=64)])


def test_sliding_merge_checks_window():
    a = SlidingWindowMLASpec(block_size=64, num_kv_heads=1, head_size=576,
                             sliding_window=128)
    b = SlidingWindowMLASpec(block_size=64, num_kv_heads=1, head_size=576,
                             sliding_window=256)
    with pytest.raises(SpecMergeError, match="sliding_window"):
        SlidingWindowMLASpec.merge([a, b])
    assert SlidingWindowMLASpec.merge([a, a]) == a


# ---- serialization and registry -------------------------------------------------

@pytest.mark.parametrize("spec", [
    mla(), mla(kv_cache_dtype="fp8_ds_mla"), v4(compress_ratio=4),
    MLAIndexerSpec(block_size=64),
    HiddenStateCacheSpec(block_size=16, num_kv_heads=1, head_size=4096),
    SlidingWindowMLASpec(block_size=64, num_kv_heads=1, head_size=576, sliding_window=8),
])
def test_to_dict_round_trip(spec):
    d = spec.to_dict()
    assert KVCacheSpec.from_dict(d) == spec
    assert d["type"] == spec.kind


def test_vector_layer_dict_builds_the_vector_page():
    # a layer of the deepseek-v32-fp8-ds-mla planner vector
    spec = KVCacheSpec.from_dict({"type": "mla_attention", "block_size": 64,
                                  "num_kv_heads": 1, "head_size": 576,
                                  "dtype": "bfloat16", "kv_cache_dtype": "fp8_ds_mla"})
    assert spec.page_size_bytes == 41_984


def test_registry_kinds_managers_grouping():
    reg = get_registry()
    assert reg.spec_class("mla_attention") is MLAAttentionSpec
    assert reg.spec_class("sliding_window_mla") is SlidingWindowMLASpec
    assert reg.grouping_base(MLAIndexerSpec(block_size=64)) == "mla_attention"
    assert reg.grouping_base(mla()) == "mla_attention"
    st = reg.spec_type("mla_attention")
    assert st.manager_cls == "kvcore.runtime.managers:FullAttentionManager"
    assert st.distribution == "kvcore-mla"
    assert reg.spec_type("sliding_window_mla").manager_cls.endswith("SlidingWindowManager")
    assert reg.kv_cache_dtype("fp8_ds_mla").key_bytes(576, "bfloat16") == 656
    assert reg.kv_cache_dtype("fp8_ds_mla_v4").key_bytes(512, "bfloat16") == 584


def test_missing_mamba_kind_names_distribution():
    from kvcore.registry import Registry

    with pytest.raises(MissingPluginError, match="kvcore-mamba"):
        Registry().spec_class("mamba")


# ---- properties --------------------------------------------------------------------

@settings(max_examples=60, deadline=None)
@given(states=st.integers(1, 64), ratio=st.sampled_from([1, 2, 4, 128]),
       align=st.one_of(st.none(), st.integers(1, 1024)),
       dtype=st.sampled_from(["auto", "fp8", "fp8_ds_mla", "float32"]))
def test_page_is_aligned_and_minimal(states, ratio, align, dtype):
    s = mla(block_size=states * ratio, compress_ratio=ratio, alignment=align,
            kv_cache_dtype=dtype)
    raw = states * s.entry_bytes
    assert s.storage_block_size == states
    assert s.raw_page_size_bytes == raw
    if align is None:
        assert s.page_size_bytes == raw
    else:
        assert s.page_size_bytes % align == 0
        assert raw <= s.page_size_bytes < raw + align
    # a copy with a doubled block size holds twice the entries
    d = s.copy_with_new_block_size(2 * s.block_size)
    assert d.raw_page_size_bytes == 2 * raw


def test_sliding_window_mla_as_full_attention_keeps_layout():
    s = SlidingWindowMLASpec(block_size=64, num_kv_heads=1, head_size=512,
                             sliding_window=128, kv_cache_dtype="fp8_ds_mla",
                             model_version="deepseek_v4")
    f = s.as_full_attention()
    assert isinstance(f, MLAAttentionSpec)
    assert f.sliding_window == 128 and f.page_size_bytes == s.page_size_bytes == 37_440
