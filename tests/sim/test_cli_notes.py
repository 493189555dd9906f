"""What the clocked commands say about inputs they could not use: a config file vLLM
cannot load by that name (``kvcore tune``'s printed ``vllm serve`` line), and a
requested sim judge that had nothing to judge (``kvcore plan --judge sim`` on a model
with one candidate layout).

Expected behaviour: vLLM loads ``FOLDER/config.json`` (transformers' ``CONFIG_NAME``)
or an HF id, never a file of another name.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from kvcore.cli import main as cli
from kvcore.models.embedded import CONFIG_DIR
from kvcore.sim.tune import serve_model, serve_model_note

TUNE = ["--gpu", "H100", "--dataset", "random", "--random-input-len", "256",
        "--random-output-len", "8", "--num-prompts", "4", "--max-concurrency", "2",
        "--tp", "1", "--max-num-batched-tokens", "2048", "--max-num-seqs", "16",
        "--kv-cache-dtype", "auto", "--max-model-len", "2048", "--backend", "serial"]


def _llama(tmp_path: Path, name: str) -> Path:
    src = next(p for p in CONFIG_DIR.glob("*.json") if p.stem.startswith("llama-3.1-8b"))
    dst = tmp_path / name
    dst.parent.mkdir(parents=True, exist_ok=True)
    shutil.copy(src, dst)
    return dst


@pytest.mark.parametrize("name", ["llama.json", "models/8b-config.json", "config.JSON"])
def test_tune_says_a_config_of_another_name_is_not_loadable(tmp_path, capsys, name):
    cfg = _llama(tmp_path, name)
    assert serve_model(str(cfg)) == str(cfg)  # no folder would load it
    assert cli(["tune", str(cfg), *TUNE]) == 0
    out = capsys.readouterr().out
    assert f"vllm serve {cfg}" in out
    assert "note: vllm serve loads a model folder" in out
    assert cli(["tune", str(cfg), *TUNE, "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["model_note"] and str(cfg) in doc["model_note"]


def test_tune_on_config_json_prints_its_folder_and_no_note(tmp_path, capsys):
    cfg = _llama(tmp_path, "m/config.json")
    assert serve_model_note(str(cfg)) is None
    assert cli(["tune", str(cfg), *TUNE, "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["best"]["vllm_serve"].split()[2] == str(cfg.parent)
    assert doc["model_note"] is None
    assert serve_model_note("llama-3.1-8b") is None  # an embedded name: its HF id


def test_plan_says_the_sim_judge_did_not_run_on_one_layout(tmp_path, capsys):
    # llama-3.1-8b: 32 full-attention layers, one group, one candidate layout
    eff = tmp_path / "eff.json"
    eff.write_text(json.dumps({"format": "kvcore-efficiency/1",
                               "efficiency": {"request_overhead_s": 0.01}}))
    assert cli(["plan", "llama-3.1-8b", "--gpu", "H100", "--judge", "sim",
                "--efficiency", str(eff)]) == 0
    line = next(ln for ln in capsys.readouterr().out.splitlines()
                if ln.startswith("serving:"))
    assert "by analytic" in line
    assert f"the sim (--efficiency {eff}) judge did not run" in line
    assert cli(["plan", "llama-3.1-8b", "--gpu", "H100"]) == 0
    line = next(ln for ln in capsys.readouterr().out.splitlines()
                if ln.startswith("serving:"))
    assert "did not run" not in line  # the analytic judge was what was asked


def test_plan_sim_judge_that_ran_has_no_note(capsys: Any):
    # gemma-3-27b-it: 5:1 sliding window : full, several candidate layouts to judge
    assert cli(["plan", "gemma-3-27b-it", "--gpu", "H100", "--judge", "sim",
                "--max-model-len", "8192"]) == 0
    out = capsys.readouterr().out
    assert "judged by sim" in out and "did not run" not in out
