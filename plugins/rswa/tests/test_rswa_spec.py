"""The ``rswa`` spec: page, per-request blocks, validation, serialization, and the
R-SWA gap rule checked against the visibility rule by brute force."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kvcore_rswa import RSWASpec, rswa_kept_block_range, rswa_visible

from kvcore.errors import SpecError, SpecMergeError
from kvcore.registry import get_registry
from kvcore.specs import FullAttentionSpec, KVCacheSpec, PlanContext


def ocr_spec(**kw):
    args = dict(block_size=16, num_kv_heads=10, head_size=128, rswa_window=128)
    args.update(kw)
    return RSWASpec(**args)


def test_kind_and_registry():
    assert RSWASpec.kind == "rswa"
    reg = get_registry()
    assert reg.spec_class("rswa") is RSWASpec
    assert reg.manager_class("rswa").__name__ == "RSWAManager"
    assert issubclass(RSWASpec, FullAttentionSpec)
    assert RSWASpec.participates_in_prefix_caching is True
    assert RSWASpec.scales_with_block_size is True


def test_page_size_hand_arithmetic():
    # 16 tokens x 10 KV heads x (128 K + 128 V) x 2 B (bf16) = 81,920 B
    assert ocr_spec().page_size_bytes == 81_920
    # fp8: 1 B per element -> half
    assert ocr_spec(kv_cache_dtype="fp8").page_size_bytes == 40_960
    assert ocr_spec().bytes_per_token == 81_920 / 16


def test_blocks_per_request_equal_full_attention():
    ctx = PlanContext(max_model_len=8192)
    # a request of 8,192 tokens may be all prompt, and the prompt is never freed
    assert ocr_spec().max_num_blocks_per_req(ctx) == 512
    assert ocr_spec().max_num_blocks_per_req(ctx, 1000) == 63
    assert ocr_spec().max_memory_usage_bytes(ctx) == 512 * 81_920


def test_runtime_bound_for_a_known_prompt():
    s = ocr_spec()
    # prompt 1,000: 63 blocks; window of 128 plus one new token spans cdiv(128, 16) + 1
    assert s.max_num_blocks_for(1000, 11_000) == 63 + 8 + 1
    # short request: never more than full attention
    assert s.max_num_blocks_for(10, 20) == 2


@pytest.mark.parametrize("bad", [0, -1, 1.5, None, True])
def test_rswa_window_validated(bad):
    with pytest.raises(SpecError) as exc:
        ocr_spec(rswa_window=bad)
    assert exc.value.extra["field"] == "rswa_window"


def test_roundtrip_through_specs_file_form():
    s = ocr_spec(kv_cache_dtype="fp8")
    d = s.to_dict()
    assert d["type"] == "rswa" and d["rswa_window"] == 128
    assert KVCacheSpec.from_dict(d) == s


def test_merge_requires_same_window():
    assert RSWASpec.merge([ocr_spec(), ocr_spec()]) == ocr_spec()
    with pytest.raises(SpecMergeError, match="rswa_window"):
        RSWASpec.merge([ocr_spec(), ocr_spec(rswa_window=64)])


def test_as_full_attention_keeps_page():
    fa = ocr_spec().as_full_attention()
    assert type(fa) is FullAttentionSpec
    assert fa.page_size_bytes == ocr_spec().page_size_bytes


def test_visibility_rule_by_hand():
    # prompt 10, window 4, query at 20: prompt 0..9 and generated 17..20
    seen = [k for k in range(25) if rswa_visible(20, k, 10, 4)]
    assert seen == list(range(10)) + [17, 18, 19, 20]


def test_gap_by_hand():
    # prompt 1,000, block 16: first gap block 63 (block 62 holds prompt 992..999)
    # next query at 2,000 sees generated keys 1,873..1,999 -> blocks < 1873 // 16 = 117
    assert rswa_kept_block_range(1000, 2000, 128, 16) == (63, 117)
    # window still overlapping the prompt's tail block: no gap
    assert rswa_kept_block_range(1000, 1100, 128, 16) == (63, 63)


@settings(max_examples=150, deadline=None)
@given(prompt=st.integers(1, 80), gen=st.integers(0, 120), window=st.integers(1, 40),
       block=st.sampled_from([1, 2, 4, 8, 16]))
def test_gap_is_exactly_the_invisible_blocks(prompt, gen, window, block):
    n = prompt + gen                    # computed tokens; next query at n
    first, last = rswa_kept_block_range(prompt, n, window, block)
    horizon = n + 2 * window + block    # later queries only see less of the past
    for i in range(first, last):
        for k in range(i * block, (i + 1) * block):
            assert k >= prompt, "a gap block holds a prompt token"
            for q in range(n, horizon):
                assert not rswa_visible(q, k, prompt, window)
    # maximal: every block below the next query's block outside the gap is seen by it
    for i in range(0, -(-n // block)):
        if first <= i < last:
            continue
        assert any(rswa_visible(n, k, prompt, window)
                   for k in range(i * block, min((i + 1) * block, n + 1))), (i, first, last)
