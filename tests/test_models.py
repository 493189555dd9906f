"""HF config loading and the core adapters, on the embedded real configs."""

from __future__ import annotations

import json
import math
from collections import Counter

import pytest

from kvcore import plan_model
from kvcore.errors import ConfigError, MissingPluginError, UnknownModelTypeError
from kvcore.models import CacheConfig, embedded_names, load_model_config, parse_model_config
from kvcore.models.planner import layer_specs_for


def kinds(name: str, **cache) -> Counter:
    specs = layer_specs_for(load_model_config(name), CacheConfig(**cache))
    return Counter(s.kind for s in specs.values())


def test_embedded_configs_listed():
    names = embedded_names()
    assert "llama-3.1-8b" in names and "gpt-oss-20b" in names and "whisper-large-v3" in names
    assert not any("hf_quant_config" in n or "sha256" in n for n in names)


def test_llama_head_dim_derived_and_bytes_per_token():
    cfg = load_model_config("llama-3.1-8b")
    assert "head_dim" not in cfg.raw and cfg.head_dim == 4096 // 32
    config = plan_model("llama-3.1-8b", max_model_len=8192)
    assert config.stats["bytes_per_token"] == 131_072  # 32 x 2 x 8 x 128 x 2 B


def test_gpt_oss_20b():
    assert kinds("gpt-oss-20b") == {"sliding_window": 12, "full_attention": 12}
    # (at max_model_len 8192 with 8192-token steps a 128-token window's admission cap is
    # 513 blocks, more than full attention's 512: the planner search would then plan
    # the windows as full attention; 2048-token steps keep the sliding groups)
    config = plan_model("gpt-oss-20b", max_model_len=8192, max_num_batched_tokens=2048)
    assert config.stats["bytes_per_token"] == 49_152
    sw = [g for g in config.kv_cache_groups if g.kind == "sliding_window"]
    assert sw and sw[0].spec.sliding_window == 128


def test_whisper_large_v3():
    assert kinds("whisper-large-v3") == {"full_attention": 32, "cross_attention": 32}
    config = plan_model("whisper-large-v3", kv_cache_memory_bytes=4_000_000_000)
    assert config.max_model_len == 448
    assert config.stats["bytes_per_token"] == 163_840       # 32 x 2 x 20 x 64 x 2 B (fp16)
    assert config.stats["cross_attention_bytes_per_request"] == 32 * 94 * 81_920
    assert config.stats["blocks_per_request"] == 28 + 94   # 1,500 frames -> 94 blocks


@pytest.mark.parametrize("name, expected", [
    ("mistral-7b-v0.1", {"sliding_window": 32}),
    ("qwen3-8b", {"full_attention": 36}),            # use_sliding_window false
    ("qwen2.5-7b", {"full_attention": 28}),          # sliding_window set, but off
    ("gemma-2-2b-it", {"sliding_window": 13, "full_attention": 13}),
    ("gemma-3-27b-it", {"sliding_window": 52, "full_attention": 10}),
    ("gemma-4-26b-a4b", {"sliding_window": 25, "full_attention": 5}),
    ("llama-4-scout-17b-16e-instruct", {"chunked_local_attention": 36, "full_attention": 12}),
    ("llama-4-scout-17b-16e-4layer", {"chunked_local_attention": 3, "full_attention": 1}),
    ("mimo-v2-flash", {"sliding_window": 39, "full_attention": 9}),
])
def test_layer_kinds(name, expected):
    assert kinds(name) == expected


def test_gemma2_alternates_starting_local():
    specs = layer_specs_for(load_model_config("gemma-2-2b-it"), CacheConfig())
    assert specs["model.layers.0.self_attn"].kind == "sliding_window"
    assert specs["model.layers.1.self_attn"].kind == "full_attention"


def test_llama4_every_fourth_layer_global():
    specs = layer_specs_for(load_model_config("llama-4-scout-17b-16e-instruct"), CacheConfig())
    globals_ = [i for i in range(48) if specs[f"model.layers.{i}.self_attn"].kind ==
                "full_attention"]
    assert globals_ == list(range(3, 48, 4))


def test_gemma4_full_layers_use_global_shape():
    specs = layer_specs_for(load_model_config("gemma-4-26b-a4b"), CacheConfig())
    full = [s for s in specs.values() if s.kind == "full_attention"][0]
    sliding = [s for s in specs.values() if s.kind == "sliding_window"][0]
    assert (full.num_kv_heads, full.head_size) == (2, 512)
    assert (sliding.num_kv_heads, sliding.head_size) == (8, 256)


def test_mimo_sliding_layers_have_their_own_heads():
    specs = layer_specs_for(load_model_config("mimo-v2-flash"), CacheConfig())
    sw = next(s for s in specs.values() if s.kind == "sliding_window")
    full = next(s for s in specs.values() if s.kind == "full_attention")
    assert (sw.num_kv_heads, sw.head_size, sw.head_size_v) == (8, 192, 128)
    assert (full.num_kv_heads, full.head_size, full.head_size_v) == (4, 192, 128)


def test_tensor_parallel_splits_and_replicates_heads():
    specs = layer_specs_for(load_model_config("llama-3.1-8b"),
                            CacheConfig(tensor_parallel_size=4))
    assert {s.num_kv_heads for s in specs.values()} == {2}
    specs = layer_specs_for(load_model_config("llama-3.1-8b"),
                            CacheConfig(tensor_parallel_size=16))
    assert {s.num_kv_heads for s in specs.values()} == {1}
    with pytest.raises(ConfigError, match="tensor_parallel_size"):
        layer_specs_for(load_model_config("llama-3.1-8b"), CacheConfig(tensor_parallel_size=3))


def test_pipeline_parallel_plan_is_per_stage():
    one = plan_model("llama-3.1-8b", kv_cache_memory_bytes=2**30, max_model_len=4096)
    two = plan_model("llama-3.1-8b", kv_cache_memory_bytes=2**30, max_model_len=4096,
                     pipeline_parallel_size=2)
    assert two.num_blocks == 2 * one.num_blocks
    assert len(two.stats["stages"]) == 2


def test_declared_kv_cache_scheme_string_and_companion():
    cfg = load_model_config("qwen3-32b-fp8-static-kvfp8")
    assert cfg.kv_cache_dtype == "fp8"
    specs = layer_specs_for(cfg, CacheConfig())
    assert {s.kv_cache_dtype for s in specs.values()} == {"fp8"}
    # an explicit kv_cache_dtype wins
    specs = layer_specs_for(cfg, CacheConfig(kv_cache_dtype="bfloat16"))
    assert {s.kv_cache_dtype for s in specs.values()} == {"bfloat16"}


@pytest.mark.parametrize("scheme, expected", [
    ("FP8", "fp8"), ({"num_bits": 8, "type": "float", "dynamic": False}, "fp8"),
    ({"num_bits": 8, "type": "int"}, "int8_per_token_head"),
])
def test_kv_cache_scheme_forms(scheme, expected):
    cfg = parse_model_config({"model_type": "llama", "num_hidden_layers": 2,
                              "num_attention_heads": 4, "hidden_size": 256,
                              "quantization_config": {"kv_cache_scheme": scheme}})
    assert cfg.kv_cache_dtype == expected


def test_text_config_nesting_and_non_strict_json(tmp_path):
    path = tmp_path / "config.json"
    path.write_text('{"model_type": "wrapper", "text_config": {"model_type": "llama", '
                    '"num_hidden_layers": 2, "num_attention_heads": 4, "hidden_size": 256, '
                    '"rope_limit": Infinity, "max_position_embeddings": 1024}}')
    cfg = load_model_config(tmp_path)          # a folder holding config.json
    assert cfg.model_type == "wrapper" and cfg.text_model_type == "llama"
    assert math.isinf(cfg.raw["rope_limit"])
    assert cfg.num_key_value_heads == 4 and cfg.head_dim == 64
    config = plan_model(path, kv_cache_memory_bytes=10**8)
    assert config.max_model_len == 1024


def test_real_non_strict_config_loads():
    cfg = load_model_config("nemotron-h-56b-base-8k")
    assert cfg.model_type == "nemotron_h"


def test_every_embedded_config_plans_or_names_its_plugin():
    from kvcore.models.planner import derived_max_model_len
    from kvcore.registry import KNOWN_PLUGIN_MODEL_TYPES

    for name in embedded_names():
        cfg = load_model_config(name)
        try:
            # at most the model's own length: vLLM refuses a longer max_model_len
            length = min(4096, derived_max_model_len(cfg) or 4096)
            config = plan_model(name, kv_cache_memory_bytes=80 * 2**30, max_model_len=length)
        except MissingPluginError as exc:
            assert cfg.model_type in KNOWN_PLUGIN_MODEL_TYPES, name
            assert "kvcore-" in str(exc)
            continue
        assert config.num_blocks > 0, name


def test_unknown_model_type_lists_supported(tmp_path):
    path = tmp_path / "c.json"
    path.write_text(json.dumps({"model_type": "brand_new", "num_hidden_layers": 2}))
    with pytest.raises(UnknownModelTypeError) as e:
        plan_model(path, max_model_len=100)
    assert "brand_new" in str(e.value) and "llama" in str(e.value)


@pytest.mark.parametrize("text, fragment", [
    ('{"model_type": "llama", "num_hidden_layers": 2', "not valid JSON"),
    ('[1, 2]', "JSON object"),
    ('{"num_hidden_layers": 2}', "model_type"),
    ('{"model_type": "llama", "num_attention_heads": 4, "hidden_size": 256}',
     "num_hidden_layers"),
    ('{"model_type": "llama", "num_hidden_layers": "two", "num_attention_heads": 4}',
     "num_hidden_layers"),
    ('{"model_type": "mistral", "num_hidden_layers": 2, "num_attention_heads": 4, '
     '"hidden_size": 256, "sliding_window": -4}', "sliding_window"),
])
def test_malformed_configs(tmp_path, text, fragment):
    path = tmp_path / "config.json"
    path.write_text(text)
    with pytest.raises(ConfigError) as e:
        plan_model(path, max_model_len=100)
    assert fragment in str(e.value)


def test_missing_file_and_unknown_name(tmp_path):
    with pytest.raises(ConfigError, match="embedded"):
        load_model_config("no-such-model")
    with pytest.raises(ConfigError, match="no config.json"):
        load_model_config(tmp_path)


def test_fixture_config_does_not_take_the_real_name():
    names = embedded_names()
    assert "llama-4-scout-17b-16e-4layer" in names
    assert "llama-4-scout-17b-16e" not in names     # the 4-layer fixture is not the model
    assert load_model_config("llama-4-scout-17b-16e-4layer").num_hidden_layers == 4


def test_header_name_is_the_name_typed(cli):
    code, out, _ = cli("plan", "gemma-3-27b-it")
    assert code == 0 and out.splitlines()[0].startswith("kvcore plan: gemma-3-27b-it (")
