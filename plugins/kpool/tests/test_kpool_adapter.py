"""The kpool adapter (a wrapper around the kvcore_layer_specs hook): tails beside the
layers of whatever adapter serves the model, or beside its own full-attention layers."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import pytest
from kvcore_kpool import KPoolTailSpec
from kvcore_kpool.adapter import add_kpool_tails, find_index_kpool

from kvcore.errors import ConfigError
from kvcore.models.config import CacheConfig, parse_model_config
from kvcore.plugins import get_plugin_manager
from kvcore.specs import FullAttentionSpec, KVCacheSpec

LLAMA = {"model_type": "llama", "num_hidden_layers": 3, "num_attention_heads": 8,
         "num_key_value_heads": 2, "hidden_size": 1024, "max_position_embeddings": 4096,
         "torch_dtype": "bfloat16"}


def mc(**extra):
    return parse_model_config({**LLAMA, **extra}, name="test")


def hook(model_config, cache_config=None):
    return get_plugin_manager().hook.kvcore_layer_specs(
        model_config=model_config, cache_config=cache_config or CacheConfig())


def test_core_adapter_answer_gets_one_tail_per_layer():
    specs = hook(mc(index_kpool=16, index_head_dim=128))
    names = list(specs)
    assert names == [n for i in range(3) for n in (
        f"model.layers.{i}.self_attn", f"model.layers.{i}.self_attn.indexer.kpool_tail")]
    tail = specs["model.layers.1.self_attn.indexer.kpool_tail"]
    assert isinstance(tail, KPoolTailSpec)
    # the core's block size for llama is 16: ring 16 divides it
    assert (tail.kpool, tail.ring_size, tail.block_size, tail.head_size) == (16, 16, 16, 128)
    assert specs["model.layers.1.self_attn"].kind == "full_attention"


def test_without_pooling_the_answer_is_untouched():
    plain = hook(mc())
    assert all(s.kind == "full_attention" for s in plain.values())
    for value in (None, 0, 1):
        assert find_index_kpool(mc(index_kpool=value)) is None
    base = {"model.layers.0.self_attn": FullAttentionSpec(block_size=16, num_kv_heads=1,
                                                          head_size=8)}
    assert add_kpool_tails(mc(index_kpool=1), CacheConfig(), base) is base


def test_speculation_ring_must_divide_block_size():
    # 3 draft tokens: ring 32 does not divide the block size 16 -> error naming both
    with pytest.raises(ConfigError) as exc:
        hook(mc(index_kpool=16), CacheConfig(num_speculative_tokens=3))
    assert exc.value.extra["field"] == "index_kpool"
    assert "32" in exc.value.message and "16" in exc.value.message
    specs = hook(mc(index_kpool=16), CacheConfig(num_speculative_tokens=3, block_size=64))
    assert specs["model.layers.0.self_attn.indexer.kpool_tail"].ring_size == 32


def test_fallback_for_a_model_no_adapter_serves():
    raw = {**LLAMA, "model_type": "toy_kpool_lm", "index_kpool": 4}
    specs = hook(parse_model_config(raw, name="toy"))
    assert list(specs)[:2] == ["model.layers.0.self_attn",
                               "model.layers.0.self_attn.indexer.kpool_tail"]
    attn = specs["model.layers.0.self_attn"]
    assert (attn.block_size, attn.num_kv_heads, attn.head_size) == (64, 2, 128)


def test_no_fallback_for_a_plugin_model_type_or_mla():
    # a deepseek_v32 / MLA config must keep saying "install kvcore-mla", not become
    # full attention
    for raw in ({**LLAMA, "model_type": "deepseek_v32", "index_kpool": 4},
                {**LLAMA, "model_type": "toy", "kv_lora_rank": 512, "index_kpool": 4}):
        assert add_kpool_tails(parse_model_config(raw), CacheConfig(), None) is None


@dataclass(frozen=True, kw_only=True)
class FakeIndexer(KVCacheSpec):
    """Stands for kvcore-mla's indexer cache (only kind, block_size, compress_ratio are
    read by the adapter); not registered."""

    kind: ClassVar[str] = "mla_indexer"
    compress_ratio: int = 1

    @property
    def real_page_size_bytes(self) -> int:
        return self.block_size // self.compress_ratio * 132


def test_tails_go_beside_indexers_and_pool_them():
    attn = FullAttentionSpec(block_size=64, num_kv_heads=1, head_size=576)
    base = {}
    for i in range(3):
        base[f"model.layers.{i}.self_attn.attn"] = attn
        if i != 1:                              # layer 1 shares another's indexer
            base[f"model.layers.{i}.self_attn.indexer.k_cache"] = FakeIndexer(block_size=64)
    out = add_kpool_tails(mc(index_kpool=4), CacheConfig(), base)
    assert list(out) == [
        "model.layers.0.self_attn.attn", "model.layers.0.self_attn.indexer.k_cache",
        "model.layers.0.self_attn.indexer.kpool_tail",
        "model.layers.1.self_attn.attn",
        "model.layers.2.self_attn.attn", "model.layers.2.self_attn.indexer.k_cache",
        "model.layers.2.self_attn.indexer.kpool_tail"]
    assert out["model.layers.0.self_attn.indexer.k_cache"].compress_ratio == 4
    assert out["model.layers.2.self_attn.indexer.kpool_tail"].ring_size == 4


@pytest.mark.parametrize("value", [-1, "16", 2.5])
def test_malformed_index_kpool(value):
    with pytest.raises(ConfigError) as exc:
        hook(mc(index_kpool=value))
    assert exc.value.extra["field"] == "index_kpool"
