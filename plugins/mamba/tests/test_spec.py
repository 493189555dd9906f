"""MambaSpec: page sizes, blocks per request per mode, (de)serialization, validation."""

import json
import math
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kvcore_mamba.spec import MambaSpec

from kvcore.errors import SpecError
from kvcore.registry import get_registry
from kvcore.specs import FullAttentionSpec, KVCacheSpec, PlanContext

DATA = Path(__file__).parent / "data"
JAMBA_LAYER = {"type": "mamba", "block_size": 32768, "shapes": [[8192, 3], [8192, 16]],
               "dtypes": ["bfloat16", "float32"]}


def jamba(**kw):
    return MambaSpec(block_size=kw.pop("block_size", 32768),
                     shapes=((8192, 3), (8192, 16)), dtypes=("bfloat16", "float32"), **kw)


def test_jamba_state_page_is_sum_of_state_bytes():
    # conv 8192 x 3 bf16 + SSM 8192 x 16 fp32 (vector jamba-v0.1 description)
    spec = jamba()
    assert spec.state_bytes == (8192 * 3 * 2, 8192 * 16 * 4)
    assert spec.page_size_bytes == 573_440
    assert spec.real_page_size_bytes == 573_440


def test_padding_to_the_attention_page():
    # vector: attention 144 tokens x 8 heads x 128 x 2 (K, V) x 2 B = 589,824 B
    padded = jamba().with_page_size_padded(144 * 8 * 128 * 2 * 2)
    assert padded.page_size_bytes == 589_824
    assert padded.real_page_size_bytes == 573_440
    assert padded.padding_bytes == 16_384
    with pytest.raises(SpecError, match="page_size_padded"):
        jamba(page_size_padded=573_439)


def test_state_does_not_scale_with_block_size():
    s = jamba()
    assert MambaSpec.scales_with_block_size is False
    assert s.bytes_per_token == 0.0
    assert s.copy_with_new_block_size(16).page_size_bytes == 573_440
    assert s.as_full_attention() is None


def test_round_trip_of_the_vector_layers():
    vec = json.loads((DATA / "jamba-v0.1.json").read_text())
    layers = [d for d in vec["input"]["layers"].values() if d["type"] == "mamba"]
    assert len(layers) == 28
    for d in layers:
        spec = KVCacheSpec.from_dict(d)
        assert isinstance(spec, MambaSpec)
        assert spec.to_dict() == d
        assert json.loads(json.dumps(spec.to_dict())) == d
    assert KVCacheSpec.from_dict(JAMBA_LAYER).to_dict() == JAMBA_LAYER


def test_non_default_fields_serialize():
    s = jamba(mamba_cache_mode="align", num_speculative_blocks=2, block_size=528,
              page_size_padded=600_000)
    d = s.to_dict()
    assert d["mamba_cache_mode"] == "align"
    assert d["num_speculative_blocks"] == 2
    assert d["page_size_padded"] == 600_000
    assert KVCacheSpec.from_dict(d) == s


@pytest.mark.parametrize("mode,spec_blocks,expected", [
    ("none", 0, 1), ("none", 2, 3), ("align", 0, 2), ("align", 3, 5),
    # all: cdiv(32768, 528) = 63 blocks (+ speculative)
    ("all", 0, 63), ("all", 1, 64),
])
def test_blocks_per_request(mode, spec_blocks, expected):
    s = jamba(block_size=528, mamba_cache_mode=mode, num_speculative_blocks=spec_blocks)
    ctx = PlanContext(max_model_len=32768)
    assert s.max_num_blocks_per_req(ctx) == expected
    assert s.max_memory_usage_bytes(ctx) == expected * 573_440


def test_issue_case_blocks_per_request_and_concurrency():
    # issue 7: 3 Mamba groups in align mode + 1 full-attention group, block 528,
    # 2,200 blocks, max_model_len 32,768 -> 3 x 2 + cdiv(32768, 528) = 69; 2200 / 69
    ctx = PlanContext(max_model_len=32768, mamba_cache_mode="align")
    mamba = jamba(block_size=528, mamba_cache_mode="align")
    attn = FullAttentionSpec(block_size=528, num_kv_heads=8, head_size=128)
    per_req = 3 * mamba.max_num_blocks_per_req(ctx) + attn.max_num_blocks_per_req(ctx)
    assert per_req == 69
    assert round(2200 / per_req, 2) == 31.88


def test_with_attention_block_size_per_mode():
    none = jamba()
    assert none.with_attention_block_size(144) is none
    align = jamba(block_size=16, mamba_cache_mode="align").with_page_size_padded(589_824)
    moved = align.with_attention_block_size(144)
    assert moved.block_size == 144 and moved.page_size_bytes == 589_824
    assert jamba(block_size=16, mamba_cache_mode="all").with_attention_block_size(
        528).block_size == 528


def test_prefix_caching_only_outside_none_mode():
    assert jamba().participates_in_prefix_caching is False
    assert jamba(mamba_cache_mode="align").participates_in_prefix_caching is True
    assert jamba(mamba_cache_mode="all").participates_in_prefix_caching is True


def test_registry_knows_the_kind():
    reg = get_registry()
    assert reg.spec_class("mamba") is MambaSpec
    assert reg.spec_type("mamba").manager_cls == "kvcore_mamba.manager:MambaManager"


@pytest.mark.parametrize("kw,field", [
    ({"shapes": (), "dtypes": ()}, "shapes"),
    ({"shapes": ((3, 0),), "dtypes": ("bfloat16",)}, "shapes"),
    ({"shapes": ((3, 4),), "dtypes": ("bfloat16", "float32")}, "dtypes"),
    ({"shapes": ((3, 4),), "dtypes": ("complex_thing",)}, "dtypes"),
    ({"shapes": ((3, 4),), "dtypes": ("bf16",), "mamba_cache_mode": "some"},
     "mamba_cache_mode"),
    ({"shapes": ((3, 4),), "dtypes": ("bf16",), "num_speculative_blocks": -1},
     "num_speculative_blocks"),
])
def test_invalid_fields_name_the_field(kw, field):
    with pytest.raises(SpecError) as info:
        MambaSpec(block_size=16, **kw)
    assert info.value.extra["field"] == field
    assert field in str(info.value)


def test_merge_requires_equal_states():
    a = jamba()
    assert MambaSpec.merge([a, jamba()]) == a
    from kvcore.errors import SpecMergeError
    with pytest.raises(SpecMergeError, match="dtypes"):
        MambaSpec.merge([a, MambaSpec(block_size=32768, shapes=a.shapes,
                                      dtypes=("bfloat16", "bfloat16"))])


_DT = {"bfloat16": 2, "float16": 2, "float32": 4, "float8_e4m3fn": 1}
shapes_st = st.lists(st.lists(st.integers(1, 64), min_size=1, max_size=3).map(tuple),
                     min_size=1, max_size=4)


@settings(max_examples=60, deadline=None)
@given(shapes=shapes_st, data=st.data())
def test_page_is_sum_and_round_trips(shapes, data):
    dtypes = data.draw(st.lists(st.sampled_from(sorted(_DT)), min_size=len(shapes),
                                max_size=len(shapes)))
    mode = data.draw(st.sampled_from(["none", "align", "all"]))
    spec = MambaSpec(block_size=data.draw(st.integers(1, 4096)), shapes=tuple(shapes),
                     dtypes=tuple(dtypes), mamba_cache_mode=mode,
                     num_speculative_blocks=data.draw(st.integers(0, 3)))
    assert spec.page_size_bytes == sum(math.prod(s) * _DT[d] for s, d in zip(shapes, dtypes))
    assert KVCacheSpec.from_dict(json.loads(json.dumps(spec.to_dict()))) == spec
    ctx = PlanContext(max_model_len=data.draw(st.integers(1, 100_000)))
    n = spec.max_num_blocks_per_req(ctx)
    assert n >= 1 + spec.num_speculative_blocks
    if mode != "all":
        assert n == (2 if mode == "align" else 1) + spec.num_speculative_blocks
