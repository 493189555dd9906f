"""The kvcore CLI: the main job on embedded configs, specs files, and clean errors."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from kvcore.cli import parse_size
from kvcore.errors import ConfigError

DATA = Path(__file__).parent / "data"


def test_plan_llama_json(cli):
    code, out, _ = cli("plan", "llama-3.1-8b", "--kv-cache-memory", "20GiB",
                       "--max-model-len", "8192", "--json")
    assert code == 0
    d = json.loads(out)
    assert d["bytes_per_token"] == 131_072
    assert d["num_blocks"] == 20 * 2**30 // (32 * 65_536)
    assert d["max_concurrency"] == pytest.approx(d["num_blocks"] / 512)
    assert d["kv_cache_capacity_tokens"] == int(d["num_blocks"] / 512 * 8192)
    assert d["groups"][0]["num_layers"] == 32 and d["groups"][0]["page_size_bytes"] == 65_536
    assert d["per_rank"] == {"tensor_parallel_size": 1, "pipeline_parallel_size": 1}
    assert sum(len(t["shared_by"]) for t in d["kv_cache_tensors"]) == 32


def test_plan_table(cli):
    code, out, _ = cli("plan", "gpt-oss-20b", "--kv-cache-memory", "20GB",
                       "--max-model-len", "131072")
    assert code == 0
    assert "sliding_window" in out and "full_attention" in out
    assert "49,152 B" in out                 # bytes per token
    assert "max concurrency" in out and "longest max_model_len" in out


def test_plan_without_budget(cli):
    code, out, _ = cli("plan", "qwen3-8b", "--json")
    d = json.loads(out)
    assert code == 0 and d["num_blocks"] is None and d["max_concurrency"] is None
    assert d["max_model_len"] == 40_960    # the config's max_position_embeddings
    assert d["kv_cache_memory_bytes_for_one_request"] == (2560 + 1) * 36 * 65_536


def test_plan_specs_file(cli, tmp_path):
    vector = json.loads((DATA / "planner" / "llama3-8b.json").read_text())
    path = tmp_path / "specs.json"
    path.write_text(json.dumps(vector["input"]))
    code, out, _ = cli("plan", "--specs", str(path), "--json")
    assert code == 0 and json.loads(out)["num_blocks"] == 3814


@pytest.mark.parametrize("argv, fragment", [
    (["plan", "llama-3.1-8b", "--kv-cache-memory=-3GB"], "negative"),
    (["plan", "llama-3.1-8b", "--kv-cache-memory", "lots"], "kv_cache_memory"),
    (["plan", "llama-3.1-8b", "--kv-cache-dtype", "int3"], "int3"),
    (["plan", "llama-3.1-8b", "--kv-cache-memory", "1GB", "--max-model-len", "131072"],
     "longest max_model_len"),
    (["plan", "no-such-model"], "embedded"),
    (["plan", "llama-3.1-8b", "--max-model-len", "many"], "max-model-len"),
])
def test_errors_are_one_line(cli, argv, fragment):
    code, out, err = cli(*argv)
    assert code == 2 and out == ""
    assert len(err.strip().splitlines()) == 1 and fragment in err
    assert "Traceback" not in err
    code, out, err = cli(*argv, "--json")
    assert code == 2
    payload = json.loads(out)["error"]
    assert payload["type"] and payload["message"]
    assert fragment.replace("-", "_").split()[0] in json.dumps(payload).replace("-", "_")


@pytest.mark.parametrize("text", ['{"model_type": "llama", "num_hid',
                                  '{"model_type": "llama"}', "", "null"])
def test_broken_config_files(cli, tmp_path, text):
    path = tmp_path / "config.json"
    path.write_text(text)
    code, out, err = cli("plan", str(path), "--json")
    assert code == 2
    err_obj = json.loads(out)["error"]
    assert err_obj["type"] == "ConfigError"
    # the message names the file, or (valid JSON, missing fields) the field
    assert str(path) in err_obj["message"] or "num_hidden_layers" in err_obj["message"]


def test_not_enough_memory_json_carries_the_numbers(cli):
    code, out, _ = cli("plan", "llama-3.1-8b", "--kv-cache-memory", "2000000000",
                       "--max-model-len", "131072", "--json")
    err = json.loads(out)["error"]
    assert code == 2 and err["type"] == "NotEnoughMemoryError"
    assert err["min_kv_cache_memory_bytes"] == 17_181_966_336
    assert err["estimated_max_model_len"] == 15_232


def test_models_lists_embedded(cli):
    code, out, _ = cli("models", "--json")
    models = {m["name"]: m for m in json.loads(out)["models"]}
    assert code == 0 and models["gpt-oss-20b"]["model_type"] == "gpt_oss"
    assert "sliding_window x12" in models["gpt-oss-20b"]["attention"]


@pytest.mark.parametrize("text, value", [
    ("20GiB", 20 * 2**30), ("20GB", 20 * 10**9), ("1.5 GiB", 3 * 2**29),
    ("4e9", 4 * 10**9), ("8000000000", 8 * 10**9), ("512MiB", 2**29),
])
def test_parse_size(text, value):
    assert parse_size(text) == value


def test_parse_size_rejects():
    for bad in ("-1GB", "20 parsecs", "GB"):
        with pytest.raises(ConfigError):
            parse_size(bad)


def test_console_script_runs():
    out = subprocess.run([sys.executable, "-m", "kvcore.cli", "plan", "llama-3.1-8b",
                          "--max-model-len", "8192", "--json"],
                         capture_output=True, text=True, check=True)
    assert json.loads(out.stdout)["bytes_per_token"] == 131_072
