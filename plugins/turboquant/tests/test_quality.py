"""Attention-output quality (issue 8: at least 0.99 cosine similarity for
turboquant_4bit_nc against bf16 K/V on random inputs) and the two command-line tools."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from kvcore_turboquant.distortion import main as distortion_main
from kvcore_turboquant.quality import PRESET_ORDER, attention_cosine, markdown


def test_4bit_nc_attention_cosine_at_least_099():
    r = attention_cosine("turboquant_4bit_nc", seq_len=1024, num_queries=16, seed=0)
    assert r["cos_mean"] >= 0.99
    assert r["bytes_per_token_head"] == 134
    assert r["compression"] == pytest.approx(2 * 2 * 128 / 134)  # K + V bf16: 512 B


def test_more_bits_give_higher_cosine():
    rows = [attention_cosine(s, seq_len=256, num_queries=8, num_kv_heads=4, seed=1)
            for s in PRESET_ORDER]
    cos = [r["cos_mean"] for r in rows]
    # k8v4 (fp8 K, 4-bit V) > 4/4 > 3/4 > 3/3 bits
    assert cos == sorted(cos, reverse=True)
    assert all(0.9 < c < 1.0 for c in cos)
    table = markdown(rows, 128)
    assert table.count("\n") == 5 and "`turboquant_3bit_nc` | 102 | 5.02x" in table


def test_distortion_cli_json(capsys):
    assert distortion_main(["--head-size", "64", "--bits", "2", "4", "--num-vectors",
                            "2000", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert [r["bits"] for r in out["results"]] == [2, 4]
    by_bits = {r["bits"]: r["mse"] for r in out["results"]}
    # D = 64, 2,000 vectors: within 10% of the Gaussian Lloyd-Max MSE
    assert by_bits[2] == pytest.approx(0.1175, rel=0.1)
    assert by_bits[4] == pytest.approx(0.0095, rel=0.1)


def test_distortion_cli_module_and_norm_correction():
    proc = subprocess.run(
        [sys.executable, "-m", "kvcore_turboquant.distortion", "--head-size", "32",
         "--bits", "3", "--num-vectors", "500", "--norm-correction", "--json"],
        capture_output=True, text=True, check=True)
    out = json.loads(proc.stdout)
    assert out["norm_correction"] is True and out["results"][0]["bits"] == 3
    assert 0.02 < out["results"][0]["mse"] < 0.05
