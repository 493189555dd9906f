"""The ``kpool_tail`` spec: ring size formula, page, divisibility error, serialization."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kvcore_kpool import KPoolTailSpec, kpool_ring_size

from kvcore.errors import SpecError
from kvcore.registry import get_registry
from kvcore.specs import KVCacheSpec, PlanContext


@pytest.mark.parametrize("kpool,spec,ring", [
    (16, 0, 16),    # ceil(16/16)=1 -> 1 pool
    (16, 3, 32),    # ceil(19/16)=2 -> 2 pools
    (16, 16, 32),   # ceil(32/16)=2
    (16, 17, 64),   # ceil(33/16)=3 -> next_pow2 = 4
    (4, 0, 4),
    (4, 1, 8),      # ceil(5/4)=2
    (4, 8, 16),     # ceil(12/4)=3 -> 4
    (1, 0, 1),
    (3, 0, 3),
])
def test_ring_size_formula(kpool, spec, ring):
    assert kpool_ring_size(kpool, spec) == ring


@settings(max_examples=200, deadline=None)
@given(kpool=st.integers(1, 256), spec=st.integers(0, 64))
def test_ring_holds_an_incomplete_pool_plus_one_step(kpool, spec):
    ring = kpool_ring_size(kpool, spec)
    pools = ring // kpool
    assert ring % kpool == 0 and pools & (pools - 1) == 0       # whole pools, power of 2
    assert ring >= (kpool - 1) + (1 + spec)                     # tail + one step's tokens
    assert ring < 2 * (kpool + spec) + kpool                    # and not much more


def test_kind_flags_and_registry():
    reg = get_registry()
    assert reg.spec_class("kpool_tail") is KPoolTailSpec
    assert reg.manager_class("kpool_tail").__name__ == "KPoolTailManager"
    assert KPoolTailSpec.scales_with_block_size is False
    assert KPoolTailSpec.participates_in_prefix_caching is False


def test_page_and_blocks_per_request():
    s = KPoolTailSpec(block_size=64, kpool=16)
    # 16 slots x 1 head x 128 channels x (2 B key + 2 B gate), bf16
    assert s.page_size_bytes == 16 * 128 * 4 == 8192
    assert KPoolTailSpec(block_size=64, kpool=16, gate_dtype="float32").page_size_bytes \
        == 16 * 128 * 6
    ctx = PlanContext(max_model_len=1 << 20)
    assert s.max_num_blocks_per_req(ctx) == 1
    assert s.max_memory_usage_bytes(ctx) == 8192
    assert s.bytes_per_token == 0.0
    assert s.storage_block_size == 16
    assert s.as_full_attention() is None


def test_ring_must_divide_block_size_error_names_both():
    with pytest.raises(SpecError) as exc:
        KPoolTailSpec(block_size=48, kpool=16, num_speculative_tokens=3)
    msg = exc.value.message
    assert "32" in msg and "48" in msg
    assert exc.value.extra["ring_size"] == 32 and exc.value.extra["block_size"] == 48
    # 64 is a multiple of 32: fine
    assert KPoolTailSpec(block_size=64, kpool=16, num_speculative_tokens=3).ring_size == 32


def test_with_attention_block_size_validates_and_keeps_padding():
    s = KPoolTailSpec(block_size=16, kpool=16).with_page_size_padded(262144)
    t = s.with_attention_block_size(64)
    assert (t.block_size, t.page_size_bytes) == (64, 262144)
    with pytest.raises(SpecError):
        s.with_attention_block_size(24)


@pytest.mark.parametrize("field,value", [("kpool", 0), ("head_size", 0),
                                         ("num_speculative_tokens", -1), ("kpool", 2.0)])
def test_fields_validated(field, value):
    kw = dict(block_size=64, kpool=16)
    kw[field] = value
    with pytest.raises(SpecError) as exc:
        KPoolTailSpec(**kw)
    assert exc.value.extra["field"] == field


def test_roundtrip():
    s = KPoolTailSpec(block_size=128, kpool=4, num_speculative_tokens=3, head_size=128)
    d = s.to_dict()
    assert d["type"] == "kpool_tail" and d["kpool"] == 4
    assert KVCacheSpec.from_dict(d) == s


def test_plan_wide_speculation_enlarges_the_ring():
    from kvcore.planning import plan
    from kvcore.specs import FullAttentionSpec

    s = KPoolTailSpec(block_size=64, kpool=16)
    assert s.with_plan_context(PlanContext(max_model_len=64)) is s
    assert s.with_plan_context(
        PlanContext(max_model_len=64, num_speculative_tokens=3)).ring_size == 32
    specs = {"a": FullAttentionSpec(block_size=64, num_kv_heads=1, head_size=128), "t": s}
    cfg = plan(specs, max_model_len=1024, num_speculative_tokens=3)
    tail = next(g.spec for g in cfg.kv_cache_groups if g.kind == "kpool_tail")
    assert tail.ring_size == 32 and tail.real_page_size_bytes == 32 * 128 * 4
    # 17 draft tokens: ring 64; with attention block 32 that cannot divide -> error
    small = {"a": FullAttentionSpec(block_size=32, num_kv_heads=1, head_size=128),
             "t": KPoolTailSpec(block_size=32, kpool=16)}
    with pytest.raises(SpecError, match="64"):
        plan(small, max_model_len=1024, num_speculative_tokens=17)
