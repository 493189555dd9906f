"""Bad input gets one clear line naming the field and exit status 2 (JSON under
--json), never a traceback: the cases an adversarial review found."""

from __future__ import annotations

import json

import pytest

from kvcore import FullAttentionSpec, KVCacheSpec, group_layers, plan
from kvcore.errors import ConfigError, NotEnoughMemoryError, SpecError
from kvcore.planning import plan_from_specs_file

LLAMA = {"model_type": "llama", "num_hidden_layers": 2, "num_attention_heads": 4,
         "hidden_size": 256, "max_position_embeddings": 1024}
F = FullAttentionSpec(block_size=16, num_kv_heads=8, head_size=128)


def one_line_error(cli, *argv, fragment):
    code, out, err = cli(*argv)
    assert code == 2, (out, err)
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    assert fragment in err, err
    code, out, err = cli(*argv, "--json")
    assert code == 2
    payload = json.loads(out)["error"]
    assert payload["type"] and payload["message"]
    return payload


@pytest.mark.parametrize("content, fragment", [
    (b"\xff\xfe\x00garbage", "UTF-8"),
    (b'{"model_type": "llama", "num_hidden_layers": ' + b"9" * 5000 + b"}", "valid JSON"),
    (b"[" * 100_000 + b"]" * 100_000, "JSON"),
    (json.dumps({**LLAMA, "num_hidden_layers": 10**30}).encode(), "implausibly large"),
    (json.dumps({**LLAMA, "num_key_value_heads": 64}).encode(), "num_key_value_heads"),
    (json.dumps({**LLAMA, "hidden_size": 0}).encode(), "hidden_size"),
    (json.dumps({**LLAMA, "model_type": "whisper", "decoder_layers": 2,
                 "decoder_attention_heads": 4, "d_model": 256}).encode(),
     "max_source_positions"),
])
def test_bad_config_files(cli, tmp_path, content, fragment):
    path = tmp_path / "config.json"
    path.write_bytes(content)
    one_line_error(cli, "plan", str(path), fragment=fragment)


@pytest.mark.parametrize("argv, fragment", [
    (["--kv-cache-memory", "1e400"], "too large"),
    (["--kv-cache-memory", "nan"], "kv_cache_memory"),
    (["--kv-cache-memory", "-1GiB"], "negative"),
    (["--block-size", "1e3"], "--block-size"),
    (["--mamba-cache-mode", "foo"], "--mamba-cache-mode"),
    (["--tp", "1000"], "tensor_parallel_size"),
    (["--tp", "0"], "tensor_parallel_size"),
    (["--pp", "100"], "pipeline_parallel_size"),
    (["--block-size", "0"], "block_size"),
    (["--max-model-len", "-5"], "max-model-len"),
    (["--kv-cache-memory", "1GB", "--max-model-len", "8192", "--num-gpu-blocks-override",
      "100"], "num_gpu_blocks_override"),
])
def test_bad_flags(cli, argv, fragment):
    one_line_error(cli, "plan", "llama-3.1-8b", *argv, fragment=fragment)


def specs(layers=None, **options):
    return {"options": {"max_model_len": 1024, "kv_cache_memory_bytes": 10**9, **options},
            "layers": layers if layers is not None else {
                "a": F.to_dict(), "b": F.to_dict()}}


@pytest.mark.parametrize("data, fragment", [
    (specs({"a": "full_attention"}), "'type'"),
    (specs({"a": 5}), "'type'"),
    (specs({"a": [1, 2]}), "'type'"),
    (specs({"a": None}), "'type'"),
    (specs(kv_cache_layout=5), "kv_cache_layout"),
    (specs(stages=5), "stages"),
    (specs(stages="ab"), "stages"),
    (specs(stages=[["a"], ["a"]]), "exactly one stage"),
    (specs(stages=[["a"]]), "leave out"),
    (specs(pipeline_parallel_size=10), "pipeline_parallel_size"),
    (specs(enable_prefix_caching="no"), "enable_prefix_caching"),
    (specs(disable_hybrid_kv_cache_manager="no"), "disable_hybrid_kv_cache_manager"),
    (specs({"x": {"type": "cross_attention", "block_size": 16, "num_kv_heads": 4,
                  "head_size": 64}}), "max_num_encoder_input_tokens"),
    (specs({"a": {**F.to_dict(), "non_causal": "yes"}}), "non_causal"),
    (specs({"a": {**F.to_dict(), "sliding_window": "x"}}), "sliding_window"),
])
def test_bad_specs_files(cli, tmp_path, data, fragment):
    with pytest.raises((ConfigError, SpecError)) as e:
        plan_from_specs_file(data)
    assert fragment in str(e.value)
    path = tmp_path / "specs.json"
    path.write_text(json.dumps(data))
    one_line_error(cli, "plan", "--specs", str(path), fragment=fragment)


def test_specs_file_takes_plan_flags_and_refuses_model_flags(cli, tmp_path):
    path = tmp_path / "specs.json"
    path.write_text(json.dumps({"layers": {"a": F.to_dict()}}))   # no options at all
    code, out, _ = cli("plan", "--specs", str(path), "--max-model-len", "1024",
                       "--kv-cache-memory", "1GB", "--json")
    assert code == 0 and json.loads(out)["num_blocks"] == 10**9 // 65_536
    one_line_error(cli, "plan", "--specs", str(path), "--max-model-len", "1024", "--tp", "4",
                   fragment="--tp")


def test_api_rejects_non_specs():
    for bad in ([F], {"a": {"type": "full_attention"}}, {"a": None}):
        with pytest.raises(ConfigError, match="KVCacheSpec|mapping"):
            plan(bad, max_model_len=100)
        with pytest.raises(ConfigError):
            group_layers(bad)


def test_numpy_integers_accepted():
    np = pytest.importorskip("numpy")
    config = plan({"a": F}, max_model_len=np.int64(1024),
                  kv_cache_memory_bytes=np.int64(10**9))
    assert config.num_blocks == 10**9 // 65_536


def test_override_message_names_the_override():
    with pytest.raises(NotEnoughMemoryError) as e:
        plan({"a": F}, max_model_len=8192, kv_cache_memory_bytes=20 * 2**30,
             num_gpu_blocks_override=100)
    msg = str(e.value)
    assert "num_gpu_blocks_override 100" in msg and "513 blocks" in msg
    assert "budget" not in msg


def test_budget_count_must_match_pp(cli):
    one_line_error(cli, "plan", "llama-3.1-8b", "--max-model-len", "8192",
                   "--kv-cache-memory", "20GiB,10GiB", "--pp", "3",
                   fragment="2 budgets")


def test_gpt_oss_without_layer_types_alternates(tmp_path):
    from kvcore.models import CacheConfig, load_model_config
    from kvcore.models.planner import layer_specs_for

    raw = json.loads(load_model_config("gpt-oss-20b").source and
                     open(load_model_config("gpt-oss-20b").source).read())
    raw.pop("layer_types")
    path = tmp_path / "config.json"
    path.write_text(json.dumps(raw))
    specs = layer_specs_for(load_model_config(path), CacheConfig())
    kinds = [specs[f"model.layers.{i}.self_attn"].kind for i in range(4)]
    assert kinds == ["sliding_window", "full_attention"] * 2


def test_spec_fields_checked_by_type():
    with pytest.raises(SpecError, match="non_causal"):
        KVCacheSpec.from_dict({**F.to_dict(), "non_causal": 1})


def test_broken_pipe_is_quiet():
    import subprocess
    import sys

    proc = subprocess.run(f"{sys.executable} -m kvcore.cli plan deepseek-v3.2 --json | head -1",
                          shell=True, capture_output=True, text=True)
    assert "Traceback" not in proc.stderr
