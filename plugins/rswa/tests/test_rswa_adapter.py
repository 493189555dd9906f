"""The R-SWA adapter on a DeepSeek-OCR config (tests/data, a copy of the upstream
decoder fields with rswa_window set) and on malformed or non-R-SWA configs."""

from __future__ import annotations

import copy
import json
import warnings
from pathlib import Path

import pytest
from kvcore_rswa import RSWASpec
from kvcore_rswa.adapter import RSWAMLAWarning, rswa_layer_specs

import kvcore
from kvcore.errors import ConfigError
from kvcore.models.config import CacheConfig, parse_model_config
from kvcore.plugins import get_plugin_manager

DATA = Path(__file__).parent / "data"
OCR = json.loads((DATA / "deepseek-ocr-rswa.json").read_text())


def mc(raw):
    return parse_model_config(raw, name="test")


def test_deepseek_ocr_layers():
    specs = rswa_layer_specs(mc(OCR), CacheConfig())
    assert list(specs) == [f"model.layers.{i}.self_attn" for i in range(12)]
    s = specs["model.layers.0.self_attn"]
    assert isinstance(s, RSWASpec)
    # 10 KV heads, head_dim 1280 / 10 = 128, window 128, default block 16
    assert (s.num_kv_heads, s.head_size, s.rswa_window, s.block_size) == (10, 128, 128, 16)
    assert s.dtype == "bfloat16"


def test_hook_answers_before_family_adapters():
    # through pluggy, as plan_model calls it (tryfirst: before a deepseek_v2 adapter)
    specs = get_plugin_manager().hook.kvcore_layer_specs(model_config=mc(OCR),
                                                          cache_config=CacheConfig())
    assert {type(s) for s in specs.values()} == {RSWASpec}


def test_tp_block_size_and_dtype_options():
    # 10 KV heads over TP 2: 5 per rank
    specs = rswa_layer_specs(mc(OCR), CacheConfig(tensor_parallel_size=2, block_size=32,
                                                  kv_cache_dtype="fp8"))
    s = specs["model.layers.11.self_attn"]
    assert (s.num_kv_heads, s.block_size, s.kv_cache_dtype) == (5, 32, "fp8")


@pytest.mark.parametrize("tp", [3, 4, 20])
def test_tp_that_does_not_divide_the_heads_is_refused(tp):
    # issue 15 item 6: one rule for every adapter; vLLM refuses a TP size that does not
    # divide the 10 attention heads (ModelConfig.verify_with_parallel_config)
    with pytest.raises(ConfigError, match="tensor_parallel_size"):
        rswa_layer_specs(mc(OCR), CacheConfig(tensor_parallel_size=tp))


@pytest.mark.parametrize("value", [None, 0])
def test_not_rswa_returns_none(value):
    raw = copy.deepcopy(OCR)
    raw["rswa_window"] = value
    assert rswa_layer_specs(mc(raw), CacheConfig()) is None
    assert rswa_layer_specs(mc({"model_type": "llama", "num_hidden_layers": 2,
                                "num_attention_heads": 4, "hidden_size": 256}),
                            CacheConfig()) is None


def test_window_in_language_config():
    raw = copy.deepcopy(OCR)
    del raw["rswa_window"]
    raw["language_config"]["rswa_window"] = 64
    specs = rswa_layer_specs(mc(raw), CacheConfig())
    assert specs["model.layers.0.self_attn"].rswa_window == 64


@pytest.mark.parametrize("value", [-3, "128", 1.5])
def test_malformed_window_names_field(value):
    raw = copy.deepcopy(OCR)
    raw["rswa_window"] = value
    with pytest.raises(ConfigError) as exc:
        rswa_layer_specs(mc(raw), CacheConfig())
    assert exc.value.extra["field"] == "rswa_window"


def test_missing_head_count_names_field():
    raw = copy.deepcopy(OCR)
    del raw["language_config"]["num_attention_heads"]
    with pytest.raises(ConfigError, match="num_attention_heads"):
        rswa_layer_specs(mc(raw), CacheConfig())


def test_mla_decoder_is_left_to_the_mla_adapter():
    raw = copy.deepcopy(OCR)
    raw["language_config"].update(kv_lora_rank=512, qk_rope_head_dim=64, use_mla=True)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert rswa_layer_specs(mc(raw), CacheConfig()) is None
    assert any(issubclass(w.category, RSWAMLAWarning) for w in caught)


def test_plan_model_end_to_end(tmp_path):
    path = tmp_path / "config.json"
    path.write_text(json.dumps(OCR))
    cfg = kvcore.plan_model(str(path), kv_cache_memory_bytes=1 << 30, max_model_len=8192)
    assert [g.kind for g in cfg.kv_cache_groups] == ["rswa"]
    assert len(cfg.kv_cache_groups[0].layer_names) == 12
    # bytes per block id: 12 layers x 81,920 B; blocks = budget // that
    assert cfg.num_blocks == (1 << 30) // (12 * 81_920)
