"""Grouping and planning: the cases from public bug reports (issue #3) and
property-based invariants."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from kvcore import (
    ChunkedLocalAttentionSpec,
    CrossAttentionSpec,
    FullAttentionSpec,
    SlidingWindowSpec,
    group_layers,
    plan,
)
from kvcore.errors import ConfigError, NotEnoughMemoryError
from kvcore.specs import PlanContext


def attn(bytes_per_token_head_dim: int = 128, heads: int = 1, block: int = 16, **kw):
    return FullAttentionSpec(block_size=block, num_kv_heads=heads,
                             head_size=bytes_per_token_head_dim, **kw)


# ---- issue #3 bug-report cases ---------------------------------------------------------

def test_kernel_block_size_before_unification(state_spec):
    """512 B/token attention + 540,672 B Mamba state, kernel_block_size 64: the attention
    block becomes 1,088 tokens (page 557,056 B) and the state is padded by 16,384 B.
    (Deriving the block size before the kernel granularity gave a ratio of 16.5.)"""
    layers = {"l0.attn": attn(128), "l1.mamba": state_spec(block_size=16, state_bytes=540_672)}
    assert layers["l0.attn"].page_size_bytes == 16 * 512
    result = group_layers(layers, kernel_block_size=64)
    by_kind = {g.kind: g for g in result.groups}
    assert by_kind["full_attention"].block_size == 1088
    assert {g.page_size_bytes for g in result.groups} == {557_056}
    assert by_kind["test_state"].spec.padding_bytes == 16_384


def test_non_integer_ratio_pads_instead_of_failing(state_spec):
    """Attention page 12,416 B at block 16 with a 12,648,448 B state: unified page
    12,651,904 B, attention block 16,304."""
    a = attn(194)  # 1 head x 194 x (K+V) x 2 B = 776 B/token -> 12,416 B per 16 tokens
    assert a.page_size_bytes == 12_416
    result = group_layers({"a": a, "m": state_spec(block_size=16, state_bytes=12_648_448)})
    by_kind = {g.kind: g for g in result.groups}
    assert by_kind["full_attention"].block_size == 16_304
    assert {g.page_size_bytes for g in result.groups} == {12_651_904}


def test_draft_model_with_larger_attention_page(state_spec):
    """Main attention 1,024 B/token, state 1,081,344 B, draft attention 2,048 B/token, all
    at block 1,056: main block doubles to 2,112, draft keeps 1,056, the state keeps its
    block size and is padded; every group reports 2,162,688 B."""
    main = attn(256, block=1056)
    draft = attn(256, heads=2, block=1056)
    assert main.page_size_bytes == 1_081_344 and draft.page_size_bytes == 2_162_688
    layers = {"main.attn": main, "main.mamba": state_spec(block_size=1056,
                                                          state_bytes=1_081_344),
              "draft.attn": draft}
    result = group_layers(layers)
    blocks = {g.layer_names[0]: g.block_size for g in result.groups}
    assert blocks == {"main.attn": 2112, "main.mamba": 1056, "draft.attn": 1056}
    assert {g.page_size_bytes for g in result.groups} == {2_162_688}


def test_mamba_align_capacity(state_spec):
    """Three Mamba states in align mode (2 blocks each) and one full-attention layer,
    block 528, 2,200 blocks, max_model_len 32,768.  Four groups of one layer (vLLM's
    rule) need 63 + 3 x 2 = 69 blocks per request: max concurrency 31.88, capacity
    1,044,776 tokens (not 2,200 // 4 x 528 = 290,400).  A fixed block count does not
    pick the layout (three states in one group would look free: 65 blocks, but each
    block id three pages wide)."""
    page = 528 * 512
    layers = {"l0.attn": attn(128, block=528)}
    for i in range(1, 4):
        layers[f"l{i}.mamba"] = state_spec(block_size=528, state_bytes=page,
                                           blocks_per_request=2)
    config = plan(layers, max_model_len=32_768, num_gpu_blocks_override=2200)
    assert len(config.kv_cache_groups) == 4
    assert config.stats["blocks_per_request"] == 69
    assert config.max_concurrency == pytest.approx(2200 / 69)
    assert round(config.max_concurrency, 2) == 31.88
    assert config.kv_cache_capacity_tokens == 1_044_776


# ---- other rules ----------------------------------------------------------------------

def test_uniform_type_different_heads_is_one_packed_group():
    layers = {"a": attn(128, heads=8), "b": attn(128, heads=2), "c": attn(128, heads=8)}
    result = group_layers(layers)
    assert result.strategy == "packed" and len(result.groups) == 1
    g = result.groups[0]
    assert g.page_size_bytes == 65_536 * 2 + 16_384
    config = plan(layers, max_model_len=1024, kv_cache_memory_bytes=100 * g.page_size_bytes)
    assert config.num_blocks == 100
    assert [t.size for t in config.kv_cache_tensors] == [6_553_600, 1_638_400, 6_553_600]


def test_whole_ratio_scales_block_size():
    sw = SlidingWindowSpec(block_size=16, num_kv_heads=4, head_size=128, sliding_window=128)
    result = group_layers({"a": attn(128, heads=8), "b": sw},
                          ctx=PlanContext(max_model_len=131_072))
    blocks = {g.kind: g.block_size for g in result.groups}
    assert blocks == {"full_attention": 16, "sliding_window": 32}


def test_non_whole_ratio_picks_the_better_candidate():
    # full 65,536 B page vs sliding 49,152 B: padding wins at a short window ...
    sw = SlidingWindowSpec(block_size=16, num_kv_heads=6, head_size=128, sliding_window=256)
    layers = {}
    for i in range(4):
        layers[f"f{i}"] = attn(128, heads=8)
        layers[f"s{i}"] = sw
    ctx_opts = dict(max_model_len=8192, max_num_batched_tokens=2048,
                    kv_cache_memory_bytes=4_000_000_000)
    assert plan(layers, **ctx_opts).stats["strategy"] == "hybrid"
    # ... but with a window as long as the sequence (it never slides: normalized to full
    # attention), one group of different pages wins.
    sw_long = SlidingWindowSpec(block_size=16, num_kv_heads=6, head_size=128,
                                sliding_window=8192)
    layers_long = {k: (sw_long if k.startswith("s") else v) for k, v in layers.items()}
    config = plan(layers_long, **ctx_opts)
    assert config.stats["strategy"] == "packed"
    assert len(config.kv_cache_groups) == 1
    assert config.kv_cache_groups[0].page_size_bytes == 4 * 65_536 + 4 * 49_152


def test_disable_hybrid_plans_windows_as_full():
    sw = SlidingWindowSpec(block_size=16, num_kv_heads=8, head_size=128, sliding_window=128)
    ch = ChunkedLocalAttentionSpec(block_size=16, num_kv_heads=8, head_size=128,
                                   attention_chunk_size=512)
    result = group_layers({"a": attn(128, heads=8), "b": sw},
                          disable_hybrid_kv_cache_manager=True)
    assert len(result.groups) == 1 and result.groups[0].spec.sliding_window == 128
    result = group_layers({"a": attn(128, heads=8), "c": ch},
                          disable_hybrid_kv_cache_manager=True)
    assert result.groups[0].spec.attention_chunk_size == 512


def test_disable_hybrid_with_a_state_is_an_error(state_spec):
    with pytest.raises(ConfigError, match="disable_hybrid_kv_cache_manager"):
        group_layers({"a": attn(), "m": state_spec(block_size=16, state_bytes=100)},
                     disable_hybrid_kv_cache_manager=True)


def test_block_outermost_layout_packs_without_padding(state_spec):
    layers = {"a": attn(128, heads=8), "m": state_spec(block_size=16, state_bytes=100_000)}
    config = plan(layers, max_model_len=1024, kv_cache_memory_bytes=10**8,
                  kv_cache_layout="BLHNC")
    assert config.stats["strategy"] == "block-packed"
    assert config.stats["padding_bytes_per_block"] == 0
    # the attention block is still raised (16 -> 32 tokens) so a page holds the state;
    # the state keeps its 100,000 B page inside the 131,072 B block id
    assert config.bytes_per_block == 131_072
    assert all(t.block_stride == 131_072 for t in config.kv_cache_tensors)
    assert {g.kind: g.page_size_bytes for g in config.kv_cache_groups} == {
        "full_attention": 131_072, "test_state": 100_000}


def test_block_outermost_never_worse_than_padding(state_spec):
    """Packing without raising the attention block size would make every attention
    block id carry a state page; kvcore keeps the better of packed and padded."""
    layers = {f"a{i}": attn(128, heads=8) for i in range(4)}
    layers.update({f"m{i}": state_spec(block_size=16, state_bytes=1_000_000)
                   for i in range(12)})
    opts = dict(max_model_len=32_768, kv_cache_memory_bytes=40 * 2**30)
    padded = plan(layers, **opts)
    packed = plan(layers, kv_cache_layout="BLHNC", **opts)
    assert packed.max_concurrency >= padded.max_concurrency
    with pytest.raises(ConfigError, match="kv_cache_layout"):
        plan(layers, max_model_len=1024, kv_cache_layout="XYZ")


def test_not_enough_memory_message():
    layers = {f"l{i}": attn(128, heads=8) for i in range(32)}
    with pytest.raises(NotEnoughMemoryError) as e:
        plan(layers, max_model_len=131_072, kv_cache_memory_bytes=2_000_000_000)
    msg = str(e.value)
    assert "17181966336" in msg and "15232" in msg
    assert e.value.to_dict()["type"] == "NotEnoughMemoryError"


def test_max_model_len_auto():
    layers = {f"l{i}": attn(128, heads=8) for i in range(32)}
    config = plan(layers, max_model_len=-1, kv_cache_memory_bytes=2_000_000_000)
    assert config.max_model_len == 15_232
    assert config.stats["estimated_max_model_len"] == 15_232


def test_cross_attention_sized_by_encoder():
    layers = {"self": FullAttentionSpec(block_size=16, num_kv_heads=20, head_size=64,
                                        dtype="float16"),
              "cross": CrossAttentionSpec(block_size=16, num_kv_heads=20, head_size=64,
                                          dtype="float16")}
    config = plan(layers, max_model_len=448, max_num_encoder_input_tokens=1500,
                  kv_cache_memory_bytes=10**9)
    assert config.stats["blocks_per_request"] == 28 + 94
    assert config.stats["cross_attention_bytes_per_request"] == 94 * 81_920


def test_no_budget_reports_per_request_figures():
    layers = {f"l{i}": attn(128, heads=8) for i in range(32)}
    config = plan(layers, max_model_len=8192)
    assert config.num_blocks is None and config.max_concurrency is None
    assert config.stats["bytes_per_token"] == 131_072
    assert config.stats["kv_cache_memory_bytes_for_one_request"] == 513 * 2_097_152


@pytest.mark.parametrize("kwargs, field", [
    (dict(max_model_len=0), "max_model_len"),
    (dict(max_model_len=100, kv_cache_memory_bytes=-5), "kv_cache_memory_bytes"),
    (dict(max_model_len=100, kernel_block_size=0), "kernel_block_size"),
    (dict(max_model_len=-1), "max_model_len"),
])
def test_bad_options(kwargs, field):
    with pytest.raises(ConfigError) as e:
        plan({"a": attn()}, **kwargs)
    assert field in str(e.value)


# ---- properties ------------------------------------------------------------------------

@st.composite
def layer_sets(draw, with_states=True):
    n = draw(st.integers(1, 24))
    kinds = ["full", "sliding", "chunked"] + (["state"] if with_states else [])
    shapes = draw(st.lists(st.tuples(st.sampled_from(kinds), st.sampled_from([1, 2, 4, 8]),
                                     st.sampled_from([64, 96, 128, 256]),
                                     st.integers(1_000, 3_000_000)),
                           min_size=1, max_size=3))
    block = draw(st.sampled_from([16, 32]))
    layers = {}
    for i in range(n):
        kind, heads, hd, state = shapes[draw(st.integers(0, len(shapes) - 1))]
        common = dict(block_size=block, num_kv_heads=heads, head_size=hd)
        if kind == "full":
            layers[f"model.layers.{i}"] = FullAttentionSpec(**common)
        elif kind == "sliding":
            layers[f"model.layers.{i}"] = SlidingWindowSpec(sliding_window=512, **common)
        elif kind == "chunked":
            layers[f"model.layers.{i}"] = ChunkedLocalAttentionSpec(
                attention_chunk_size=1024, **common)
        else:
            from kvcore_test_state import StateSpec

            layers[f"model.layers.{i}"] = StateSpec(block_size=block, state_bytes=state)
    return layers


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                 HealthCheck.function_scoped_fixture])
@given(layers=layer_sets(), budget=st.integers(10**8, 10**11),
       kernel=st.sampled_from([None, 16, 64]), max_len=st.sampled_from([512, 4096, 32768]))
def test_plan_invariants(state_spec, layers, budget, kernel, max_len):
    try:
        config = plan(layers, max_model_len=max_len, kv_cache_memory_bytes=budget,
                      kernel_block_size=kernel)
    except NotEnoughMemoryError:
        assume(False)
        return
    groups = config.kv_cache_groups
    # each layer lands in exactly one group
    names = [n for g in groups for n in g.layer_names]
    assert sorted(names) == sorted(layers)
    # unified layouts: one page size everywhere
    if config.stats["strategy"] == "hybrid":
        assert len({g.page_size_bytes for g in groups}) == 1
    # blocks fit the budget
    assert config.num_blocks * config.bytes_per_block <= budget
    assert config.bytes_per_block == max(g.bytes_per_block for g in groups)
    # tensors cover every layer exactly once
    covered = [n for t in config.kv_cache_tensors for n in t.shared_by]
    assert sorted(covered) == sorted(layers)
    # concurrency is consistent with the blocks a request needs
    blocks = config.stats["blocks_per_request"]
    assert config.max_concurrency * blocks <= config.num_blocks * (1 + 1e-12)
    assert blocks <= config.num_blocks - 1
    # block sizes respect the kernel granularity for attention
    if kernel:
        for g in groups:
            if g.spec.scales_with_block_size:
                assert g.block_size % kernel == 0
    # real pages never exceed the page they are given
    for g in groups:
        for n in g.layer_names:
            s = g.spec_of(n)
            assert s.real_page_size_bytes <= s.page_size_bytes


@settings(max_examples=60, deadline=None)
@given(layers=layer_sets(with_states=False), budget=st.integers(10**9, 10**11))
def test_longest_len_is_tight(layers, budget):
    config = plan(layers, max_model_len=-1, kv_cache_memory_bytes=budget,
                  max_model_len_limit=1 << 20)
    longest = config.max_model_len
    from kvcore.grouping import blocks_per_request

    ctx = config.stats["plan_context"]
    assert blocks_per_request(config.kv_cache_groups, ctx, longest) <= config.num_blocks - 1
    if longest < 1 << 20:
        assert blocks_per_request(config.kv_cache_groups, ctx, longest + 1) > \
            config.num_blocks - 1


def test_batched_concurrency_shares_the_step():
    """Gemma-3-shaped 5:1 sliding/full (vector gemma3-12b): vLLM's figure reserves
    cdiv(1023 + 8192, 16) + 1 = 577 blocks per sliding group for every request; with the
    step shared, decoding requests need cdiv(1024, 16) + 1 = 65 per sliding group."""
    sw = SlidingWindowSpec(block_size=16, num_kv_heads=8, head_size=256, sliding_window=1024)
    fa = FullAttentionSpec(block_size=16, num_kv_heads=8, head_size=256)
    layers = {f"l{i}": (fa if i % 6 == 5 else sw) for i in range(48)}
    config = plan(layers, max_model_len=32_768, kv_cache_memory_bytes=16_000_000_000)
    assert config.num_blocks == 15_258
    assert config.max_concurrency == pytest.approx(15_258 / (5 * 577 + 2048))
    decode = 5 * 65 + 2048
    assert config.max_concurrency_batched == pytest.approx(1 + (15_258 - 4933) / decode)
    full_only = plan({f"l{i}": fa for i in range(4)}, max_model_len=4096,
                     kv_cache_memory_bytes=10**9)
    assert full_only.max_concurrency_batched == pytest.approx(full_only.max_concurrency)


def test_padding_per_request_counts_state_blocks_once(state_spec):
    """A small one-block state padded to a big attention page costs its padding once per
    request, not once per attention block."""
    layers = {"a": attn(128, heads=8), "m": state_spec(block_size=16, state_bytes=1000)}
    config = plan(layers, max_model_len=1600, kv_cache_memory_bytes=10**9)
    assert config.stats["padding_bytes_per_block"] == 65_536 - 1000
    assert config.stats["padding_bytes_per_request"] == 1 * (65_536 - 1000)
