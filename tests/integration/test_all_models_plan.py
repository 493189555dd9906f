"""With every plugin installed, every embedded real config plans (issue #4), and the
plugin families give the layer counts their configs imply."""

from __future__ import annotations

import importlib.util

import pytest

from kvcore import plan_model
from kvcore.models import embedded_names

PLUGINS = ["kvcore_mla", "kvcore_mamba", "kvcore_turboquant", "kvcore_rswa", "kvcore_kpool"]
pytestmark = pytest.mark.skipif(
    any(importlib.util.find_spec(p) is None for p in PLUGINS),
    reason="needs all five plugin distributions")


@pytest.mark.parametrize("name", embedded_names())
def test_every_embedded_config_plans(name):
    from kvcore.models import load_model_config
    from kvcore.models.planner import derived_max_model_len

    # at most the model's own length (Whisper: 448): vLLM refuses a longer max_model_len
    length = min(8192, derived_max_model_len(load_model_config(name)) or 8192)
    config = plan_model(name, kv_cache_memory_bytes=80 * 2**30, max_model_len=length)
    assert config.num_blocks and config.num_blocks > 1
    assert config.max_concurrency > 0
    covered = sorted(n for t in config.kv_cache_tensors for n in t.shared_by)
    assert covered == sorted(n for g in config.kv_cache_groups for n in g.layer_names)


@pytest.mark.parametrize("name, expected", [
    ("deepseek-v3", {"mla_attention": 61}),
    ("deepseek-v3.2", {"mla_attention": 61, "mla_indexer": 61}),
    # Nemotron-H-56B: hybrid_override_pattern has 54 'M' and 10 '*'
    ("nemotron-h-56b-base-8k", {"mamba": 54, "full_attention": 10}),
    ("mamba2attn-2.7b", {"mamba": 58, "full_attention": 6}),
    ("mamba2-2.7b", {"mamba": 64}),
    # full_attention_interval 4 over 48 layers
    ("qwen3-next-80b-a3b-thinking", {"mamba": 36, "full_attention": 12}),
    ("qwen3.5-35b-a3b", {"mamba": 30, "full_attention": 10}),
    ("kimi-k3", {"mamba": 69, "mla_attention": 24}),
])
def test_plugin_family_layer_counts(name, expected):
    config = plan_model(name, max_model_len=8192)
    assert config.stats["layers_per_kind"] == expected


def test_nemotron_pattern_count_is_independent():
    """Counts computed from the raw pattern string, not through the adapter."""
    from kvcore.models import load_model_config

    pattern = load_model_config("nemotron-h-56b-base-8k").raw["hybrid_override_pattern"]
    assert (pattern.count("M"), pattern.count("*")) == (54, 10)


def test_deepseek_v3_matches_its_vector():
    config = plan_model("deepseek-v3", kv_cache_memory_bytes=40_000_000_000,
                        max_model_len=32_768)
    assert config.num_blocks == 8894
    assert [(g.kind, g.block_size, g.page_size_bytes, len(g.layer_names))
            for g in config.kv_cache_groups] == [("mla_attention", 64, 73_728, 61)]
    assert config.stats["bytes_per_token"] == 61 * 576 * 2
