"""Adapters on the real HF configs (copied into tests/data/configs; provenance in
/work/shared/model-configs/SOURCES.md).  Layer counts come from the configs
(num_hidden_layers, indexer_types, compress_ratios, linear_attn_config)."""

import json
from collections import Counter

import pytest
from kvcore_mla.adapters import MLA_MODEL_TYPES, kda_state_shapes, mla_layer_specs
from kvcore_mla.specs import MLAAttentionSpec, MLAIndexerSpec

from kvcore.errors import ConfigError
from kvcore.models.config import CacheConfig, load_model_config, parse_model_config


def load(data_dir, name):
    return load_model_config(data_dir / "configs" / f"{name}.json")


def kinds(specs):
    return Counter(s.kind for s in specs.values())


def test_deepseek_v3_61_bf16_mla_layers(data_dir):
    specs = mla_layer_specs(load(data_dir, "deepseek-v3"), CacheConfig())
    assert kinds(specs) == {"mla_attention": 61}
    assert list(specs)[0] == "model.layers.0.self_attn.attn"
    assert list(specs)[-1] == "model.layers.60.self_attn.attn"
    s = specs["model.layers.0.self_attn.attn"]
    assert (s.block_size, s.num_kv_heads, s.head_size, s.dtype) == (64, 1, 576, "bfloat16")
    assert s.page_size_bytes == 73_728
    assert sum(x.bytes_per_token for x in specs.values()) == 70_272


def test_deepseek_v3_matches_planner_vector_layers(data_dir):
    vec = json.loads((data_dir / "vectors" / "deepseek-v3.json").read_text())
    specs = mla_layer_specs(load(data_dir, "deepseek-v3"), CacheConfig())
    assert {k: v.to_dict() for k, v in specs.items()} == vec["input"]["layers"]


def test_deepseek_v3_fp8_ds_mla_and_tp(data_dir):
    mc = load(data_dir, "deepseek-v3")
    specs = mla_layer_specs(mc, CacheConfig(kv_cache_dtype="fp8_ds_mla",
                                            tensor_parallel_size=8))
    assert {s.page_size_bytes for s in specs.values()} == {41_984}  # not sharded by TP


def test_mtp_layers_when_asked(data_dir):
    mc = load(data_dir, "deepseek-v3")
    specs = mla_layer_specs(mc, CacheConfig(include_mtp_layers=True))
    assert len(specs) == 62 and "model.layers.61.self_attn.attn" in specs


def test_block_size_override(data_dir):
    specs = mla_layer_specs(load(data_dir, "deepseek-v3"), CacheConfig(block_size=16))
    assert {s.page_size_bytes for s in specs.values()} == {16 * 1152}


def test_deepseek_v32_61_mla_and_61_indexers(data_dir):
    specs = mla_layer_specs(load(data_dir, "deepseek-v3.2"), CacheConfig())
    assert kinds(specs) == {"mla_attention": 61, "mla_indexer": 61}
    idx = specs["model.layers.7.self_attn.indexer.k_cache"]
    assert isinstance(idx, MLAIndexerSpec)
    assert idx.block_size == 64 and idx.page_size_bytes == 64 * (128 + 4)
    # MTP layer brings its indexer
    specs = mla_layer_specs(load(data_dir, "deepseek-v3.2"),
                            CacheConfig(include_mtp_layers=True))
    assert kinds(specs) == {"mla_attention": 62, "mla_indexer": 62}


def test_glm5_every_layer_has_indexer(data_dir):
    specs = mla_layer_specs(load(data_dir, "glm-5"), CacheConfig())
    assert kinds(specs) == {"mla_attention": 78, "mla_indexer": 78}
    assert specs["model.layers.0.self_attn.attn"].head_size == 512 + 64


def test_glm52_indexers_only_on_full_layers(data_dir):
    mc = load(data_dir, "glm-5.2.aiconfigurator")
    types = mc.get_list_of_str("indexer_types")
    full = [i for i, t in enumerate(types) if t == "full"]
    assert len(full) == 21  # SOURCES.md: "full" on 21 layers, "shared" on 57
    specs = mla_layer_specs(mc, CacheConfig())
    assert kinds(specs) == {"mla_attention": 78, "mla_indexer": 21}
    have = sorted(int(k.split(".")[2]) for k, s in specs.items() if s.kind == "mla_indexer")
    assert have == full
    assert "model.layers.3.self_attn.indexer.k_cache" not in specs  # "shared"


def test_glm51_declared_fp8_kv_cache(data_dir):
    mc = load(data_dir, "glm-5.1-nvfp4-kvfp8.aiconfigurator")
    specs = mla_layer_specs(mc, CacheConfig())
    mla = specs["model.layers.0.self_attn.attn"]
    assert mla.kv_cache_dtype == "fp8" and mla.page_size_bytes == 64 * 576
    # an explicit kv_cache_dtype wins over the declared one
    specs = mla_layer_specs(mc, CacheConfig(kv_cache_dtype="bfloat16"))
    assert specs["model.layers.0.self_attn.attn"].page_size_bytes == 73_728


def test_glm52_bad_indexer_types(data_dir):
    raw = json.loads((data_dir / "configs" / "glm-5.2.aiconfigurator.json").read_text())
    raw["indexer_types"] = ["full"] * 3
    with pytest.raises(ConfigError, match="indexer_types"):
        mla_layer_specs(parse_model_config(raw), CacheConfig())


def test_deepseek_v4_flash_layout(data_dir):
    mc = load(data_dir, "deepseek-v4-flash.aiconfigurator")
    ratios = mc.get("compress_ratios")
    assert len(ratios) == 44  # 43 layers + MTP
    n4, n128 = ratios[:43].count(4), ratios[:43].count(128)
    assert (n4, n128) == (21, 20)
    specs = mla_layer_specs(mc, CacheConfig())
    c = Counter((s.kind, s.block_size, s.compress_ratio) for s in specs.values())
    assert c[("sliding_window_mla", 64, 1)] == 43
    assert c[("mla_attention", 256, 4)] == n4
    assert c[("mla_attention", 256, 128)] == n128
    assert c[("mla_indexer", 256, 4)] == n4
    # compressor states: r=4 main (block 4) + r=4 indexer (block 4), r=128 (block 8)
    assert c[("sliding_window_mla", 4, 1)] == 2 * n4
    assert c[("sliding_window_mla", 8, 1)] == n128
    c128 = specs["model.layers.3.self_attn.mla_attn"]
    assert ratios[3] == 128
    assert (c128.storage_block_size, c128.raw_page_size_bytes, c128.page_size_bytes) \
        == (2, 1_168, 1_728)
    swa = specs["model.layers.0.self_attn.attn"]
    assert swa.sliding_window == 128 and swa.page_size_bytes == 65 * 576  # 64 x 584 -> 37,440
    c4 = specs["model.layers.2.self_attn.mla_attn"]
    assert c4.page_size_bytes == swa.page_size_bytes  # 64 states a page, like the window
    st4 = specs["model.layers.2.self_attn.compressor.state_cache"]
    # 4 tokens x (2 x 2 x 512) float32 = 32,768 -> 57 x 576 = 32,832
    assert (st4.head_size, st4.dtype, st4.sliding_window) == (2048, "float32", 8)
    assert st4.page_size_bytes == 32_832
    # the MTP layer (ratio 0) is sliding-window only
    specs = mla_layer_specs(mc, CacheConfig(include_mtp_layers=True))
    assert "model.layers.43.self_attn.attn" in specs
    assert "model.layers.43.self_attn.mla_attn" not in specs


def test_deepseek_v4_bad_ratios(data_dir):
    raw = json.loads((data_dir / "configs" / "deepseek-v4-flash.aiconfigurator.json")
                     .read_text())
    raw["compress_ratios"] = [4] * 10
    with pytest.raises(ConfigError, match="compress_ratios"):
        mla_layer_specs(parse_model_config(raw), CacheConfig())
    raw["compress_ratios"] = [0] * 43
    specs = mla_layer_specs(parse_model_config(raw), CacheConfig())
    assert kinds(specs) == {"sliding_window_mla": 43}


def test_deepseek_v4_block_size_must_fit_ratio(data_dir):
    mc = load(data_dir, "deepseek-v4-flash.aiconfigurator")
    with pytest.raises(ConfigError, match="compress ratio 128"):
        mla_layer_specs(mc, CacheConfig(block_size=16))


def test_kimi_k3_layers(data_dir):
    pytest.importorskip("kvcore_mamba", reason="Kimi-K3's KDA layers need kvcore-mamba")
    mc = load(data_dir, "kimi-k3.aiconfigurator")
    specs = mla_layer_specs(mc, CacheConfig())
    assert kinds(specs) == {"mla_attention": 24, "mamba": 69}
    # full_attn_layers [4, 8, ...] are 1-based: layer 4 is model.layers.3
    assert isinstance(specs["model.layers.3.self_attn.attn"], MLAAttentionSpec)
    assert specs["model.layers.0.self_attn"].kind == "mamba"
    assert list(specs) == sorted(specs, key=lambda k: int(k.split(".")[2]))


def test_kda_state_shapes_kimi_k3(data_dir):
    mc = load(data_dir, "kimi-k3.aiconfigurator")
    conv, rec = kda_state_shapes(mc)
    assert conv == (3, 3 * 96 * 128) and rec == (96, 128, 128)
    assert conv[0] * conv[1] * 2 + rec[0] * rec[1] * rec[2] * 4 == 6_512_640
    assert kda_state_shapes(mc, tp=4) == ((3, 3 * 96 * 128 // 4), (24, 128, 128))
    # one more conv row per draft token
    assert kda_state_shapes(mc, num_speculative_tokens=2)[0] == (5, 3 * 96 * 128)
    with pytest.raises(ConfigError, match="tensor_parallel_size"):
        kda_state_shapes(mc, tp=5)


def test_kimi_k3_kda_spec_follows_mamba_conventions(data_dir):
    pytest.importorskip("kvcore_mamba", reason="Kimi-K3's KDA layers need kvcore-mamba")
    mc = load(data_dir, "kimi-k3.aiconfigurator")
    kda = mla_layer_specs(mc, CacheConfig())["model.layers.0.self_attn"]
    assert kda.shapes == ((3, 36864), (96, 128, 128))
    assert kda.dtypes == ("bfloat16", "float32")
    assert kda.page_size_bytes == 6_512_640
    assert kda.block_size == 1_048_576  # none mode: one block per request (max len)
    kda = mla_layer_specs(mc, CacheConfig(mamba_cache_mode="align"))[
        "model.layers.0.self_attn"]
    assert kda.block_size == 64 and kda.mamba_cache_mode == "align"


def test_kimi_needs_mamba_plugin(data_dir, monkeypatch):
    from kvcore.errors import MissingPluginError
    from kvcore.registry import Registry, get_registry

    real = get_registry()

    class NoMamba:
        """The real registry without the 'mamba' kind (kvcore-mamba not installed)."""

        def __getattr__(self, name):
            return getattr(real, name)

        def spec_class(self, kind):
            if kind == "mamba":
                return Registry().spec_class(kind)
            return real.spec_class(kind)

    monkeypatch.setattr("kvcore.registry.get_registry", lambda: NoMamba())
    with pytest.raises(MissingPluginError, match="kvcore-mamba"):
        mla_layer_specs(load(data_dir, "kimi-k3.aiconfigurator"), CacheConfig())


def test_other_models_return_none():
    mc = parse_model_config({"model_type": "llama", "num_hidden_layers": 2,
                             "num_attention_heads": 4, "hidden_size": 256})
    assert mla_layer_specs(mc, CacheConfig()) is None
    assert "deepseek_v3" in MLA_MODEL_TYPES and "glm_moe_dsa" in MLA_MODEL_TYPES


def test_missing_field_names_it(data_dir):
    raw = json.loads((data_dir / "configs" / "deepseek-v3.json").read_text())
    del raw["kv_lora_rank"]
    with pytest.raises(ConfigError, match="kv_lora_rank"):
        mla_layer_specs(parse_model_config(raw), CacheConfig())


def test_hook_is_served_through_plugin_manager(data_dir):
    from kvcore.plugins import get_plugin_manager

    pm = get_plugin_manager()
    specs = pm.hook.kvcore_layer_specs(model_config=load(data_dir, "deepseek-v3.2"),
                                       cache_config=CacheConfig())
    assert kinds(specs) == {"mla_attention": 61, "mla_indexer": 61}


@pytest.mark.parametrize("model_type", ["deepseek_v2", "kimi_k2"])
def test_same_layout_model_types(data_dir, model_type):
    # DeepSeek-V2 and Kimi-K2 share V3's attention fields (kv_lora_rank 512, rope 64)
    raw = json.loads((data_dir / "configs" / "deepseek-v3.json").read_text())
    raw["model_type"] = model_type
    raw["num_hidden_layers"] = 27
    specs = mla_layer_specs(parse_model_config(raw), CacheConfig())
    assert kinds(specs) == {"mla_attention": 27}
    assert {s.page_size_bytes for s in specs.values()} == {73_728}


def test_kimi_bad_layer_lists(data_dir):
    raw = json.loads((data_dir / "configs" / "kimi-k3.aiconfigurator.json").read_text())
    raw["text_config"]["linear_attn_config"]["full_attn_layers"] = [0, 4]
    with pytest.raises(ConfigError, match="full_attn_layers"):
        mla_layer_specs(parse_model_config(raw), CacheConfig())
    raw["text_config"]["linear_attn_config"]["full_attn_layers"] = [1, 4]  # 1 is KDA too
    with pytest.raises(ConfigError, match="twice"):
        mla_layer_specs(parse_model_config(raw), CacheConfig())


def test_kimi_layers_follow_vllms_is_kda_layer(data_dir):
    """vLLM 0.32 (models/kimi_k3, transformers_utils/configs/kimi_linear.py): layer i is
    KDA when ``(i + 1) in kda_layers``, every other decoder layer MLA;
    ``full_attn_layers`` is never consulted (tester A, F8: a layer in neither list had
    no KV cache, exit 0).  Seeded mutants: entries dropped from either list, a list
    emptied or removed; the expected kinds come from vLLM's rule alone."""
    import random

    pytest.importorskip("kvcore_mamba", reason="Kimi-K3's KDA layers need kvcore-mamba")
    base = json.loads((data_dir / "configs" / "kimi-k3.aiconfigurator.json").read_text())
    n = base["text_config"]["num_hidden_layers"]
    rng = random.Random(8)
    for case in range(24):
        raw = json.loads(json.dumps(base))
        lac = raw["text_config"]["linear_attn_config"]
        for key in ("full_attn_layers", "kda_layers"):
            how = rng.choice(["keep", "drop some", "empty", "remove"] if key ==
                             "full_attn_layers" else ["keep", "drop some", "empty"])
            if how == "drop some":
                lac[key] = sorted(rng.sample(lac[key], rng.randint(0, len(lac[key]))))
            elif how == "empty":
                lac[key] = []
            elif how == "remove":
                del lac[key]
        kda = set(lac["kda_layers"])
        specs = mla_layer_specs(parse_model_config(raw), CacheConfig())
        want = {f"model.layers.{i}.self_attn" if i + 1 in kda else
                f"model.layers.{i}.self_attn.attn" for i in range(n)}
        assert set(specs) == want, case
        got = kinds(specs)
        assert got["mamba"] == len(kda) and got["mla_attention"] == n - len(kda), case
