"""Adapters on real configs (copied into tests/data): layer counts per kind, state
shapes and dtypes, attention sharding, and planning through kvcore.plan_model."""

import json
from collections import Counter
from pathlib import Path

import pytest
from kvcore_mamba.adapters import mamba_layer_specs, nemotron_h_layer_kinds

from kvcore import plan_model
from kvcore.errors import ConfigError
from kvcore.models.config import CacheConfig, load_model_config, parse_model_config
from kvcore.plugins import get_plugin_manager
from kvcore.registry import get_registry

DATA = Path(__file__).parent / "data"


def specs_of(name, **cache):
    mc = load_model_config(DATA / name)
    return mc, mamba_layer_specs(mc, CacheConfig(**cache))


def kinds(specs):
    return Counter(s.kind for s in specs.values())


def only(specs, kind):
    found = {s for s in specs.values() if s.kind == kind}
    assert len(found) == 1
    return found.pop()


def test_mamba2_2_7b_mamba_ssm_schema():
    mc, specs = specs_of("mamba2-2.7b.json")
    assert mc.model_type == "mamba2"  # normalized by the core from ssm_cfg
    assert kinds(specs) == {"mamba": 64}
    s = only(specs, "mamba")
    # Mamba2 defaults: d_inner 2 x 2560, headdim 64 -> 80 heads, d_state 128, 1 group
    assert s.shapes == ((3, 5120 + 2 * 128), (80, 64, 128))
    assert s.dtypes == ("bfloat16", "bfloat16")


def test_mamba2attn_attention_at_attn_layer_idx():
    _, specs = specs_of("mamba2attn-2.7b.json")
    assert kinds(specs) == {"mamba": 58, "full_attention": 6}
    names = list(specs)
    attn_idx = [i for i, n in enumerate(names) if specs[n].kind == "full_attention"]
    assert attn_idx == [9, 18, 27, 36, 45, 56]
    a = only(specs, "full_attention")
    assert (a.num_kv_heads, a.head_size, a.block_size) == (30, 128, 16)
    _, tp2 = specs_of("mamba2attn-2.7b.json", tensor_parallel_size=2)
    assert only(tp2, "full_attention").num_kv_heads == 15
    with pytest.raises(ConfigError, match="not divisible by tensor_parallel_size 4"):
        specs_of("mamba2attn-2.7b.json", tensor_parallel_size=4)


def test_nemotron_h_56b_pattern():
    raw = json.loads((DATA / "nemotron-h-56b-base-8k.json").read_text(
        ), parse_constant=float)
    pattern = raw["hybrid_override_pattern"]
    _, specs = specs_of("nemotron-h-56b-base-8k.json")
    # 118 layers: 54 M (Mamba2), 10 * (attention), 54 - (MLP: no cache)
    assert kinds(specs) == {"mamba": pattern.count("M"), "full_attention": pattern.count("*")}
    assert kinds(specs) == {"mamba": 54, "full_attention": 10}
    s = only(specs, "mamba")
    assert s.shapes == ((3, 20480), (256, 64, 256))
    assert s.dtypes == ("bfloat16", "float32")  # Nemotron-H keeps float32
    assert s.page_size_bytes == 3 * 20480 * 2 + 256 * 64 * 256 * 4
    a = only(specs, "full_attention")
    assert (a.num_kv_heads, a.head_size) == (8, 128)
    # tp 16: vLLM 0.32's MambaMixer2 asserts n_groups (8) % tp == 0 or n_groups == 1
    # (vllm/model_executor/layers/mamba/mamba_mixer2.py:319): refused, not planned
    with pytest.raises(ConfigError, match="n_groups 8"):
        specs_of("nemotron-h-56b-base-8k.json", tensor_parallel_size=16)
    _, tp8 = specs_of("nemotron-h-56b-base-8k.json", tensor_parallel_size=8)
    assert only(tp8, "full_attention").num_kv_heads == 1  # 8 KV heads over 8 ranks


def test_nemotron_3_nano_moe_pattern():
    _, specs = specs_of("nemotron-3-nano-30b-a3b.aiconfigurator.json")
    # MEMEM*E...: 23 M, 6 *, 23 E (MoE: no cache)
    assert kinds(specs) == {"mamba": 23, "full_attention": 6}
    s = only(specs, "mamba")
    # 64 heads x 64, 8 groups x 128: conv 4096 + 2048
    assert s.shapes == ((3, 6144), (64, 64, 128))
    assert s.dtypes == ("bfloat16", "float32")


def test_nemotron_3_ultra_layers_block_type_without_num_hidden_layers():
    mc, specs = specs_of("nemotron-3-ultra-550b-a55b.aiconfigurator.json")
    assert mc.num_hidden_layers is None
    assert len(nemotron_h_layer_kinds(mc.view)) == 108
    assert kinds(specs) == {"mamba": 48, "full_attention": 12}
    _, mtp = specs_of("nemotron-3-ultra-550b-a55b.aiconfigurator.json",
                      include_mtp_layers=True)
    assert kinds(mtp) == {"mamba": 48, "full_attention": 13}


def test_nemotron_bad_pattern_names_the_field():
    raw = {"model_type": "nemotron_h", "hybrid_override_pattern": "MX*",
           "mamba_num_heads": 8, "mamba_head_dim": 8, "n_groups": 1, "ssm_state_size": 8,
           "num_attention_heads": 4, "num_key_value_heads": 4, "hidden_size": 64}
    with pytest.raises(ConfigError, match="hybrid_override_pattern"):
        mamba_layer_specs(parse_model_config(raw), CacheConfig())


def test_qwen3_next_full_attention_interval():
    _, specs = specs_of("qwen3-next-80b-a3b-thinking.json")
    assert kinds(specs) == {"mamba": 36, "full_attention": 12}
    full = [i for i, s in enumerate(specs.values()) if s.kind == "full_attention"]
    assert full == list(range(3, 48, 4))
    s = only(specs, "mamba")
    assert s.shapes == ((3, 8192), (32, 128, 128))
    assert s.dtypes == ("bfloat16", "bfloat16")  # no mamba_ssm_dtype in this config
    a = only(specs, "full_attention")
    assert (a.num_kv_heads, a.head_size) == (2, 256)


def test_qwen3_5_layer_types_and_ssm_dtype():
    mc, specs = specs_of("qwen3.5-35b-a3b.json")
    assert mc.model_type == "qwen3_5_moe"
    assert kinds(specs) == {"mamba": 30, "full_attention": 10}
    s = only(specs, "mamba")
    assert s.dtypes == ("bfloat16", "float32")  # text_config.mamba_ssm_dtype
    assert s.page_size_bytes == 3 * 8192 * 2 + 32 * 128 * 128 * 4
    _, mtp = specs_of("qwen3.5-35b-a3b.json", include_mtp_layers=True)
    assert kinds(mtp) == {"mamba": 30, "full_attention": 11}


def test_modes_and_speculative_tokens_reach_the_state_spec():
    mc, none = specs_of("qwen3.5-35b-a3b.json")
    s = only(none, "mamba")
    assert (s.mamba_cache_mode, s.block_size) == ("none", 262144)  # max_position_embeddings
    _, align = specs_of("qwen3.5-35b-a3b.json", mamba_cache_mode="align", block_size=528,
                        num_speculative_tokens=2)
    s = only(align, "mamba")
    assert (s.mamba_cache_mode, s.block_size, s.num_speculative_blocks) == ("align", 528, 2)
    assert s.shapes[0] == (3 + 2, 8192)
    assert only(align, "full_attention").block_size == 528


def test_jamba_attn_layer_period_and_offset():
    # transformers JambaConfig defaults (SOURCES.md): 32 layers, period 8, offset 4
    raw = {"model_type": "jamba", "hidden_size": 4096, "num_hidden_layers": 32,
           "num_attention_heads": 32, "num_key_value_heads": 8, "attn_layer_period": 8,
           "attn_layer_offset": 4, "mamba_d_state": 16, "mamba_d_conv": 4,
           "mamba_expand": 2, "max_position_embeddings": 262144, "torch_dtype": "bfloat16"}
    specs = mamba_layer_specs(parse_model_config(raw), CacheConfig())
    assert [i for i, s in enumerate(specs.values()) if s.kind == "full_attention"] == \
        [4, 12, 20, 28]
    assert kinds(specs) == {"mamba": 28, "full_attention": 4}
    s = only(specs, "mamba")
    assert s.shapes == ((3, 8192), (8192, 16))
    assert s.page_size_bytes == 8192 * 3 * 2 + 8192 * 16 * 2
    # with a float32 SSM cache dtype the state is the vector's 573,440 B
    fp32 = mamba_layer_specs(parse_model_config({**raw, "mamba_ssm_cache_dtype": "float32"}),
                             CacheConfig())
    assert only(fp32, "mamba").page_size_bytes == 573_440
    assert "model.layers.4.self_attn.attn" in specs and "model.layers.0.mamba" in specs


def test_transformers_mamba1_and_mamba2_schemas():
    m1 = {"model_type": "mamba", "hidden_size": 768, "state_size": 16, "conv_kernel": 4,
          "expand": 2, "num_hidden_layers": 24}
    specs = mamba_layer_specs(parse_model_config(m1), CacheConfig(tensor_parallel_size=2))
    assert kinds(specs) == {"mamba": 24}
    assert only(specs, "mamba").shapes == ((3, 768), (768, 16))
    m2 = {"model_type": "mamba2", "hidden_size": 4096, "num_hidden_layers": 64,
          "num_heads": 128, "head_dim": 64, "n_groups": 8, "state_size": 128,
          "conv_kernel": 4, "expand": 2}
    specs = mamba_layer_specs(parse_model_config(m2), CacheConfig())
    assert only(specs, "mamba").shapes == ((3, 8192 + 2 * 8 * 128), (128, 64, 128))
    ssm1 = {"d_model": 768, "n_layer": 24, "ssm_cfg": {}}  # mamba_ssm Mamba1
    mc = parse_model_config(ssm1)
    assert mc.model_type == "mamba"
    assert only(mamba_layer_specs(mc, CacheConfig()), "mamba").shapes == \
        ((3, 1536), (1536, 16))


def test_unknown_model_types_are_left_to_other_adapters():
    mc = parse_model_config({"model_type": "llama", "num_hidden_layers": 2,
                             "num_attention_heads": 4, "hidden_size": 64})
    assert mamba_layer_specs(mc, CacheConfig()) is None
    kimi = load_model_config(DATA / "kimi-k3.aiconfigurator.json")
    assert mamba_layer_specs(kimi, CacheConfig()) is None  # kvcore-mla owns kimi_k3


def test_hook_is_registered_and_dispatches():
    get_registry()
    mc = load_model_config(DATA / "qwen3-next-80b-a3b-thinking.json")
    specs = get_plugin_manager().hook.kvcore_layer_specs(model_config=mc,
                                                         cache_config=CacheConfig())
    assert kinds(specs) == {"mamba": 36, "full_attention": 12}
    types = [t for r in get_plugin_manager().hook.kvcore_model_types() for t in (r or [])]
    for t in ("mamba", "mamba2", "jamba", "nemotron_h", "qwen3_next", "qwen3_5_moe"):
        assert t in types


@pytest.mark.parametrize("name,counts", [
    ("nemotron-h-56b-base-8k.json", {"mamba": 54, "full_attention": 10}),
    ("mamba2-2.7b.json", {"mamba": 64}),
    ("mamba2attn-2.7b.json", {"mamba": 58, "full_attention": 6}),
    ("qwen3-next-80b-a3b-thinking.json", {"mamba": 36, "full_attention": 12}),
    ("qwen3.5-35b-a3b.json", {"mamba": 30, "full_attention": 10}),
])
def test_models_plan(name, counts):
    cfg = plan_model(DATA / name, kv_cache_memory_bytes=20 * 2**30, max_model_len=8192)
    assert cfg.stats["layers_per_kind"] == counts
    assert cfg.num_blocks > 0 and cfg.stats["max_concurrency"] > 0
    planned = Counter()
    for g in cfg.kv_cache_groups:
        planned[g.kind] += len(g.layer_names)
    assert dict(planned) == counts
    # every group's page is equal after unification (one block id per block)
    pages = {g.page_size_bytes for g in cfg.kv_cache_groups}
    assert len(pages) == 1


def test_hybrid_align_plan_gives_state_the_attention_block():
    cfg = plan_model(DATA / "qwen3-next-80b-a3b-thinking.json", kv_cache_memory_bytes=2**34,
                     max_model_len=32768, mamba_cache_mode="align")
    blocks = {g.kind: g.block_size for g in cfg.kv_cache_groups}
    assert blocks["mamba"] == blocks["full_attention"]
    # attention page 2 heads x 256 x 2 x 2 B = 2048 B/token must hold the 1,097,728 B
    # state: 536 tokens, raised to a multiple of 16 -> 544
    assert blocks["full_attention"] == 544
