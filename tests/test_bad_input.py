"""Bad input gets one clear line naming the field and exit status 2 (JSON under
--json), never a traceback: the cases an adversarial review found."""

from __future__ import annotations

import json

import pytest
from kvcore_plugin_needs import skip_unless_served

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


# ==== issue 15: one test (or more) per numbered item ======================================

from pathlib import Path  # noqa: E402

from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402
from kvcore_watchdog import HANG_CPU_SECONDS, cpu_watchdog  # noqa: E402

from kvcore.models.embedded import embedded_config_path  # noqa: E402

PLAN_FLAGS = ("--max-model-len", "4096", "--kv-cache-memory", "20GiB")


def embedded(name: str) -> dict:
    path = embedded_config_path(name)
    assert path is not None
    return json.loads(Path(path).read_text())


def write_config(tmp_path: Path, data: dict, name: str = "config.json") -> str:
    path = tmp_path / name
    path.write_text(json.dumps(data))
    return str(path)


def timed_error(cli, *argv, fragment="", seconds=HANG_CPU_SECONDS):
    """The refusal comes without a loop over the bad count: a CPU-time watchdog (not a
    wall-clock limit, so a loaded machine cannot trip it) catches a hang."""
    with cpu_watchdog(seconds, f"kvcore {' '.join(argv)[:120]}"):
        return one_line_error(cli, *argv, fragment=fragment)


# ---- item 1: every count an adapter reads is bounded -------------------------------------

@pytest.mark.parametrize("name, key", [
    ("whisper-tiny", "decoder_layers"), ("mamba2-2.7b", "n_layer"),
    ("llama-3.1-8b", "num_hidden_layers"), ("deepseek-v3", "num_hidden_layers"),
    ("nemotron-h-56b-base-8k", "num_hidden_layers"), ("qwen3-next-80b-a3b-thinking",
                                                      "num_hidden_layers"),
])
@pytest.mark.parametrize("value", [10**12, 1e12, 10_001])
def test_item1_counts_are_bounded(cli, tmp_path, name, key, value):
    skip_unless_served(name)
    data = embedded(name)
    data[key] = value
    path = write_config(tmp_path, data)
    timed_error(cli, "plan", path, *PLAN_FLAGS, fragment=key)


def test_item1_mtp_layers_are_bounded(cli, tmp_path):
    skip_unless_served("deepseek-v3")
    data = embedded("deepseek-v3")
    data["num_nextn_predict_layers"] = 10**12
    path = write_config(tmp_path, data)
    timed_error(cli, "plan", path, *PLAN_FLAGS, "--include-mtp",
                fragment="num_nextn_predict_layers")


# ---- item 2: plausibility bounds on every size and length --------------------------------

@pytest.mark.parametrize("flag", ["--max-model-len", "--block-size", "--num-gpu-blocks-override",
                                  "--kernel-block-size", "--kv-cache-memory",
                                  "--max-num-batched-tokens", "--tp"])
def test_item2_huge_flags_are_one_line(cli, flag):
    argv = ["plan", "llama-3.1-8b", "--max-model-len", "4096", "--kv-cache-memory", "20GiB"]
    argv += [flag, "9" * 400]
    payload = timed_error(cli, *argv, fragment=flag.lstrip("-").replace("-", "_")
                          if flag != "--kv-cache-memory" else "kv_cache_memory")
    assert len(payload["message"]) < 400


@pytest.mark.parametrize("key", ["max_position_embeddings", "head_dim", "hidden_size",
                                 "num_attention_heads", "sliding_window"])
@pytest.mark.parametrize("digits", [309, 400])
def test_item2_huge_config_ints(cli, tmp_path, key, digits):
    data = embedded("mistral-7b-v0.1")
    raw = json.dumps({**data, key: 0}).replace(f'"{key}": 0', f'"{key}": {"9" * digits}')
    path = tmp_path / "config.json"
    path.write_text(raw)
    payload = timed_error(cli, "plan", str(path), "--kv-cache-memory", "20GiB",
                          fragment=key)
    assert "implausibly large" in payload["message"]


def test_item2_python_api_bounds():
    from kvcore import plan_model

    for kwargs in ({"max_model_len": 10**400}, {"block_size": 10**30},
                   {"kv_cache_memory_bytes": 10**30}, {"num_gpu_blocks_override": 10**30}):
        with pytest.raises(ConfigError):
            plan_model("llama-3.1-8b", **{"max_model_len": 4096, **kwargs})


# ---- item 3: wrong types name the field, the value and the expected type -----------------

@pytest.mark.parametrize("name, key, value, expected", [
    ("mamba2-2.7b", "ssm_cfg", 5, "an object"),
    ("mamba2-2.7b", "ssm_cfg", "Mamba2", "an object"),
    ("mamba2-2.7b", "ssm_cfg", ["Mamba2"], "an object"),
    ("llama-4-scout-17b-16e-4layer", "no_rope_layers", 4, "a list"),
    ("gemma-3-27b-it", "sliding_window_pattern", "6", "a positive int"),
    ("qwen3-8b", "max_window_layers", "16", "an int >= 0"),
    ("qwen3-8b", "use_sliding_window", "no", "true or false"),
    ("gpt-oss-20b", "layer_types", "sliding_attention", "a list"),
    ("mimo-v2-flash", "swa_head_dim", "192", "a positive int"),
])
def test_item3_wrong_types(cli, tmp_path, name, key, value, expected):
    data = embedded(name)
    target = data["text_config"] if key in data.get("text_config", {}) else data
    target[key] = value
    path = write_config(tmp_path, data)
    payload = one_line_error(cli, "plan", path, *PLAN_FLAGS, fragment=key)
    assert expected in payload["message"] and payload["field"] == key, payload


# ---- item 4: a present but invalid value is an error; only an absent one is defaulted ----

@pytest.mark.parametrize("name, key", [
    ("llama-3.1-8b", "torch_dtype"), ("llama-4-scout-17b-16e-4layer", "attention_chunk_size"),
    ("llama-4-scout-17b-16e-4layer", "no_rope_layers"), ("mamba2attn-2.7b", "attn_layer_idx"),
    ("mimo-v2-flash", "swa_num_key_value_heads"), ("mimo-v2-flash", "swa_head_dim"),
    ("mimo-v2-flash", "swa_v_head_dim"), ("llama-3.1-8b", "quantization_config"),
    ("mamba2-2.7b", "ssm_cfg"),
])
@pytest.mark.parametrize("junk", [0, "", {}])
def test_item4_falsy_junk_is_refused(cli, tmp_path, name, key, junk):
    skip_unless_served(name)
    if key in ("quantization_config", "ssm_cfg") and junk == {}:
        pytest.skip("an empty object is a valid one (all defaults)")
    data = embedded(name)
    target = data["text_config"] if key in data.get("text_config", {}) else data
    target[key] = junk
    path = write_config(tmp_path, data)
    one_line_error(cli, "plan", path, *PLAN_FLAGS, fragment=key)


def test_item4_absent_fields_take_defaults(cli, tmp_path):
    """The other half of the rule: absent (or null) fields take the family's default."""
    data = embedded("llama-4-scout-17b-16e-4layer")
    base = plan_model_json(cli, write_config(tmp_path, data, "a.json"))
    for key in ("no_rope_layers", "attention_chunk_size"):
        for absent in (None, "<removed>"):
            mutated = json.loads(json.dumps(data))
            if absent is None:
                mutated["text_config"][key] = None
            else:
                mutated["text_config"].pop(key)
            got = plan_model_json(cli, write_config(tmp_path, mutated, "b.json"))
            if key == "no_rope_layers":  # [] and absent: HF's default, every 4th NoPE
                assert got["groups"] == base["groups"]
            else:  # no chunk size: no chunked layers
                assert {g["type"] for g in got["groups"]} == {"full_attention"}


def plan_model_json(cli, path):
    code, out, err = cli("plan", path, *PLAN_FLAGS, "--json")
    assert code == 0, err
    return json.loads(out)


@pytest.mark.parametrize("options, fragment", [
    ({"max_model_len_limit": {}}, "max_model_len_limit"),
    ({"max_model_len_limit": ""}, "max_model_len_limit"),
    ({"max_model_len_limit": 0}, "max_model_len_limit"),
    ({"kernel_block_size": True}, "kernel_block_size"),
])
def test_item4_specs_file_options(cli, tmp_path, options, fragment):
    data = specs(**options)
    with pytest.raises(ConfigError, match=fragment):
        plan_from_specs_file(json.loads(json.dumps(data)))
    path = tmp_path / "specs.json"
    path.write_text(json.dumps(data))
    one_line_error(cli, "plan", "--specs", str(path), fragment=fragment)


# ---- item 5: inconsistent configs are refused --------------------------------------------

def test_item5_layer_types_longer_than_the_layers(cli, tmp_path):
    data = embedded("gpt-oss-20b")
    data["layer_types"] = data["layer_types"] + ["full_attention"]
    one_line_error(cli, "plan", write_config(tmp_path, data), *PLAN_FLAGS,
                   fragment="layer_types")


@settings(max_examples=40, deadline=None)
@given(heads=st.integers(1, 64), kv=st.integers(1, 64))
def test_item5_kv_heads_must_divide_heads(heads, kv):
    """Generated: a config plans only when num_key_value_heads divides
    num_attention_heads (grouped-query attention: every KV head serves the same
    number of query heads)."""
    from kvcore import plan_model
    from kvcore.models import parse_model_config

    raw = {"model_type": "llama", "num_hidden_layers": 2, "num_attention_heads": heads,
           "num_key_value_heads": kv, "head_dim": 64, "max_position_embeddings": 1024}
    if kv <= heads and heads % kv == 0:
        plan_model(parse_model_config(raw), kv_cache_memory_bytes=10**9)
    else:
        with pytest.raises(ConfigError, match="num_key_value_heads"):
            plan_model(parse_model_config(raw), kv_cache_memory_bytes=10**9)


@pytest.mark.parametrize("pattern", [-2, 2.5, 0, "6", True])
def test_item5_gemma3_pattern(cli, tmp_path, pattern):
    data = embedded("gemma-3-27b-it")
    data["sliding_window_pattern"] = pattern
    one_line_error(cli, "plan", write_config(tmp_path, data), *PLAN_FLAGS,
                   fragment="sliding_window_pattern")


def test_item5_huge_page_size_padded_on_a_state_layer(cli, tmp_path):
    pytest.importorskip("kvcore_mamba")
    layer = {"type": "mamba", "block_size": 1024, "shapes": [[3, 64], [8, 64, 16]],
             "dtypes": ["bfloat16", "float32"], "page_size_padded": 10**29}
    data = specs({"m": layer, "a": F.to_dict()})
    path = tmp_path / "specs.json"
    path.write_text(json.dumps(data))
    one_line_error(cli, "plan", "--specs", str(path), fragment="page_size_padded")


# ---- item 6: one tensor-parallel rule for every adapter ----------------------------------

def tp_allowed(heads: int, kv: int | None, tp: int) -> bool:
    """The rule, from vLLM: tp divides the attention heads (ModelConfig.
    verify_with_parallel_config); KV heads split evenly or replicated evenly
    (QKVParallelLinear); MLA (kv None): the latent is replicated on every rank."""
    if heads % tp:
        return False
    return kv is None or kv % tp == 0 or tp % kv == 0


@pytest.mark.parametrize("name, heads, kv", [
    ("llama-3.1-8b", 32, 8), ("qwen3-8b", 32, 8), ("deepseek-v3", 128, None),
    ("gemma-2-2b-it", 8, 4), ("whisper-tiny", 6, 6), ("mistral-7b-v0.1", 32, 8),
])
def test_item6_one_rule(name, heads, kv):
    from kvcore.models import CacheConfig, load_model_config
    from kvcore.models.planner import layer_specs_for

    if kv is None:
        pytest.importorskip("kvcore_mla")
    cfg = load_model_config(name)
    for tp in [*range(1, 17), 24, 32, 64, 128, 256, 2**16]:
        if tp_allowed(heads, kv, tp):
            layer_specs_for(cfg, CacheConfig(tensor_parallel_size=tp))
        else:
            with pytest.raises(ConfigError, match="tensor_parallel_size"):
                layer_specs_for(cfg, CacheConfig(tensor_parallel_size=tp))


def test_item6_rswa_llama_follows_the_rule(cli, tmp_path):
    pytest.importorskip("kvcore_rswa")
    data = {"model_type": "llama", "num_hidden_layers": 4, "num_attention_heads": 8,
            "num_key_value_heads": 2, "hidden_size": 512, "max_position_embeddings": 4096}
    plain = write_config(tmp_path, data, "plain.json")
    rswa = write_config(tmp_path, {**data, "rswa_window": 128}, "rswa.json")
    for path in (plain, rswa):
        one_line_error(cli, "plan", path, "--tp", "3", fragment="tensor_parallel_size")
        code, _, err = cli("plan", path, "--tp", "4", *PLAN_FLAGS)
        assert code == 0, err


def test_item6_mla_refuses_a_tp_that_does_not_divide_the_heads(cli):
    pytest.importorskip("kvcore_mla")
    for tp in ("3", str(2**40), "65536"):
        code, _, err = cli("plan", "deepseek-v3", "--tp", tp, *PLAN_FLAGS)
        assert code == 2 and "tensor_parallel_size" in err, err
    code, out, err = cli("plan", "deepseek-v3", "--tp", "8", *PLAN_FLAGS, "--json")
    one, _, _ = cli("plan", "deepseek-v3", *PLAN_FLAGS, "--json")
    assert code == 0, err
    # the latent is replicated: the same page on every rank as on one GPU
    assert json.loads(out)["bytes_per_token"] == json.loads(cli(
        "plan", "deepseek-v3", *PLAN_FLAGS, "--json")[1])["bytes_per_token"]


# ---- item 7: trace and path inputs -------------------------------------------------------

def test_item7_azure_context_tokens_of_5000_digits(cli, tmp_path):
    path = tmp_path / "t.csv"
    path.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n"
                    f"2023-11-16 18:15:46.6805900,{'9' * 5000},10\n")
    payload = one_line_error(cli, "simulate", "llama-3.1-8b", "--trace", str(path),
                             "--num-blocks", "2000", fragment="ContextTokens")
    assert len(payload["message"]) < 400


@pytest.mark.parametrize("token", [2**63, 2**64, -1, 10**30])
def test_item7_token_ids_beyond_64_bits(cli, tmp_path, token):
    path = tmp_path / "t.jsonl"
    path.write_text(json.dumps({"prompt_token_ids": [1] * 15 + [token] + [2] * 16,
                                "output_len": 4}) + "\n")
    one_line_error(cli, "simulate", "llama-3.1-8b", "--trace", str(path),
                   "--num-blocks", "2000", "--max-model-len", "4096",
                   fragment="prompt_token_ids[15]")


@settings(max_examples=50, deadline=None)
@given(token=st.one_of(st.integers(2**63, 2**70), st.integers(-(2**70), -1)),
       pos=st.integers(0, 40))
def test_item7_request_checks_token_ids(token, pos):
    from kvcore import Request
    from kvcore.errors import RequestError

    tokens = [7] * 41
    tokens[pos] = token
    with pytest.raises(RequestError, match=f"position {pos}"):
        Request("r", tokens, block_size=16)
    req = Request("ok", [7] * 20, block_size=16)
    with pytest.raises(RequestError):
        req.append_output_token_ids([token] * 16)


def test_item7_a_5000_character_model_argument(cli):
    payload = one_line_error(cli, "plan", "m" * 5000, fragment="not a usable path")
    assert len(payload["message"]) < 400


# ---- item 8: long values are cut in messages ---------------------------------------------

@pytest.mark.parametrize("argv", [
    ["plan", "llama-3.1-8b", "--kv-cache-memory", "9" * 5000],
    ["plan", "llama-3.1-8b", "--max-model-len", "9" * 5000],
    ["plan", "llama-3.1-8b", "--kv-cache-dtype", "x" * 5000, "--max-model-len", "4096"],
    ["plan", "llama-3.1-8b", "--kv-cache-memory", "1GiB", "--gpu", "g" * 5000],
])
def test_item8_messages_are_short(cli, argv):
    code, out, err = cli(*argv)
    assert code == 2 and len(err.strip().splitlines()) == 1
    assert len(err) < 600, len(err)


# ---- item 9: fractions in --kv-cache-memory; a bad flag points to the command's help -----

@pytest.mark.parametrize("value", ["0.9", "0.5", ".9", "1.5"])
def test_item9_fraction_budget(cli, value):
    payload = one_line_error(cli, "plan", "llama-3.1-8b", "--kv-cache-memory", value,
                             fragment="--gpu-memory-utilization")
    assert "bytes" in payload["message"] and "units" in payload["message"]


@pytest.mark.parametrize("command", ["plan", "simulate", "plugins", "models"])
def test_item9_bad_flag_points_to_the_command_help(cli, command):
    argv = [command] + (["llama-3.1-8b", "--trace", "x.jsonl"] if command == "simulate"
                        else ["llama-3.1-8b"] if command == "plan" else [])
    code, out, err = cli(*argv, "--no-such-flag")
    assert code == 2 and f"kvcore {command} --help" in err, err
    code, out, _ = cli(*argv, "--no-such-flag", "--json")
    assert code == 2 and f"kvcore {command} --help" in json.loads(out)["error"]["message"]


# ---- item 15: multimodal identifiers are typed in block hashes ---------------------------

@settings(max_examples=60, deadline=None)
@given(ident=st.one_of(st.integers(-10**6, 10**6), st.floats(allow_nan=False),
                       st.booleans()))
def test_item15_mm_identifier_types_differ(ident):
    from kvcore import Request

    tokens = list(range(32))
    typed = Request("a", tokens, block_size=16, mm_features=[(0, 4, ident)])
    text = Request("b", tokens, block_size=16, mm_features=[(0, 4, str(ident))])
    assert typed.block_hashes[0] != text.block_hashes[0]
    again = Request("c", tokens, block_size=16, mm_features=[(0, 4, ident)])
    assert typed.block_hashes == again.block_hashes
    assert typed.block_hashes[1] != text.block_hashes[1]  # the chain carries it on


@pytest.mark.parametrize("model", ["9" * 300, "a\x00b", "org/" + "x" * 300, "org/" + "x" * 100,
                                   "org/-bad-", "org/name@" + "r" * 300])
def test_item7_unusable_model_names_in_the_python_api(cli, model):
    """A model name that is no usable path nor a valid HF id: a ConfigError in Python,
    one line in the CLI (found by the fuzz suite: OSError, HFValidationError)."""
    from kvcore import plan_model

    with pytest.raises(ConfigError):
        plan_model(model, max_model_len=4096)
    code, _, err = cli("plan", model, "--max-model-len", "4096")
    assert code == 2 and len(err.strip().splitlines()) == 1 and len(err) < 700, err
