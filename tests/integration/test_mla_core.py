"""kvcore-mla through the core: its dtypes apply only to MLA layers; bad MLA fields."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("kvcore_mla")

from kvcore import plan_model  # noqa: E402
from kvcore.errors import ConfigError, SpecError  # noqa: E402
from kvcore.models import load_model_config  # noqa: E402


def test_fp8_ds_mla_only_for_mla_layers():
    with pytest.raises(SpecError, match="mla_attention"):
        plan_model("llama-3.1-8b", kv_cache_dtype="fp8_ds_mla", max_model_len=8192)
    config = plan_model("deepseek-v3", kv_cache_dtype="fp8_ds_mla",
                        kv_cache_memory_bytes=40_000_000_000, max_model_len=32_768)
    assert config.num_blocks == 15_618          # the deepseek-v32-fp8-ds-mla vector


def test_zero_kv_lora_rank_is_an_error(tmp_path):
    raw = json.loads(open(load_model_config("deepseek-v3").source).read())
    raw["kv_lora_rank"] = 0
    path = tmp_path / "config.json"
    path.write_text(json.dumps(raw))
    with pytest.raises(ConfigError, match="kv_lora_rank"):
        plan_model(path, max_model_len=4096)
