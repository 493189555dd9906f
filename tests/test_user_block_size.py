"""A --block-size the user gave is never silently changed by --kernel-block-size (F11).

vLLM 0.32 keeps a user-set block size (``CacheConfig.user_specified_block_size``) and
needs an attention backend with ``block_size % kernel_block_size == 0``
(``AttentionBackend.supports_block_size``); with none, the engine refuses.  Only a
hybrid model's block size is raised (``Platform._align_hybrid_block_size``), and
kvcore then says so.  Expected values come from that rule, not from kvcore's output.
"""

from __future__ import annotations

import json
import random
import subprocess
import sys

import pytest
from kvcore_plugin_needs import skip_unless_served

from kvcore.errors import ConfigError
from kvcore.models.planner import plan_model

GiB = 1 << 30
# llama-3.1-8b: 32 full-attention layers, 8 KV heads x 128, bf16 -> 131072 B per token
LLAMA_BYTES_PER_TOKEN = 32 * 2 * 8 * 128 * 2


def _cases(seed: int, n: int) -> list[tuple[int, int]]:
    rng = random.Random(seed)
    out = [(16, 64), (64, 16), (48, 32), (32, 32)]
    while len(out) < n:
        kbs = rng.choice([1, 2, 8, 16, 32, 64, 128])
        out.append((kbs * rng.randint(1, 8) + rng.choice([0, 0, rng.randint(1, kbs)]), kbs))
    return out


@pytest.mark.parametrize("block_size,kbs", _cases(11, 14))
def test_plan_model_keeps_or_refuses_user_block_size(block_size, kbs):
    kw = dict(block_size=block_size, kernel_block_size=kbs,
              kv_cache_memory_bytes=40 * GiB, max_model_len=8192)
    if block_size % kbs:
        with pytest.raises(ConfigError) as e:
            plan_model("llama-3.1-8b", **kw)
        msg = str(e.value)
        assert e.value.extra.get("field") == "block_size"
        assert f"block_size {block_size}" in msg and f"kernel_block_size {kbs}" in msg
        assert f"multiple of {kbs}" in msg
    else:
        cfg = plan_model("llama-3.1-8b", **kw)
        assert {g.spec.block_size for g in cfg.kv_cache_groups} == {block_size}
        assert "block_size_raised" not in cfg.stats


def test_auto_block_size_may_be_raised_silently():
    cfg = plan_model("llama-3.1-8b", kernel_block_size=64, kv_cache_memory_bytes=40 * GiB,
                     max_model_len=8192)
    assert all(g.spec.block_size % 64 == 0 for g in cfg.kv_cache_groups)
    assert "block_size_raised" not in cfg.stats


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "kvcore", "plan", *args],
                          capture_output=True, text=True)


def test_cli_refuses_non_multiple_exit_2():
    r = _cli("llama-3.1-8b", "--block-size", "16", "--kernel-block-size", "64",
             "--kv-cache-memory", "40GiB")
    assert r.returncode == 2
    assert "Traceback" not in r.stderr
    line = (r.stderr + r.stdout).strip()
    assert len(line.splitlines()) == 1
    assert "16" in line and "64" in line and "multiple of 64" in line


def test_cli_hybrid_raise_is_told_text_and_json():
    skip_unless_served("mamba2attn-2.7b")  # a hybrid: kvcore-mamba (core-only venv: skip)
    args = ("mamba2attn-2.7b", "--block-size", "16", "--kernel-block-size", "64",
            "--kv-cache-memory", "40GiB", "--max-model-len", "8192")
    r = _cli(*args)
    assert r.returncode == 0, r.stderr
    assert "block_size 16 (given) is not a multiple of kernel_block_size 64" in r.stdout
    j = _cli(*args, "--json")
    assert j.returncode == 0, j.stderr
    d = json.loads(j.stdout)
    raised = d["block_size_raised"]
    assert raised["block_size"] == 16 and raised["kernel_block_size"] == 64
    assert raised["attention_block_size"] % 64 == 0
    assert raised["attention_block_size"] in {g["block_size"] for g in d["groups"]}
    assert any("(given)" in n for n in d["notes"])
