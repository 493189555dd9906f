"""Mamba2 n_groups vs tensor parallelism (fresh tester T9).

vLLM 0.32 vllm/model_executor/layers/mamba/mamba_mixer2.py:314-322 (MambaMixer2.__init__):
``assert num_heads % tp_size == 0`` and ``assert (n_groups % tp_size) == 0 or n_groups ==
1`` ("If tensor parallel world size does not divide num_groups, then num_groups must
equal 1").  kvcore must refuse what vLLM asserts on, on every path: the shapes helper,
the Python API (layer_specs_for / plan_model), ``plan --tp`` and ``plan --gpu``, with a
ConfigError naming n_groups, the TP and the valid TPs (CLI: one line, exit 2)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kvcore_mamba.shapes import mamba2_state_shapes

import kvcore
from kvcore.errors import ConfigError
from kvcore.models.config import CacheConfig, load_model_config, parse_model_config
from kvcore.models.planner import layer_specs_for


def vllm_accepts(n_groups: int, n_heads: int, tp: int) -> bool:
    """mamba_mixer2.py:314-322, re-stated."""
    return n_heads % tp == 0 and (n_groups % tp == 0 or n_groups == 1)


@settings(max_examples=150)
@given(n_groups=st.sampled_from([1, 2, 3, 4, 6, 8, 16]), tp=st.sampled_from([1, 2, 3, 4, 8, 16]))
def test_shapes_refuse_what_vllm_asserts(n_groups, tp):
    n_heads, head_dim, d_state = 48 * 16, 16, 32     # heads divisible by every tp here
    kw = dict(d_inner=n_heads * head_dim, n_groups=n_groups, n_heads=n_heads,
              head_dim=head_dim, d_state=d_state, d_conv=4, tp=tp)
    if vllm_accepts(n_groups, n_heads, tp):
        conv, ssm = mamba2_state_shapes(**kw)
        assert ssm == (n_heads // tp, head_dim, d_state)
    else:
        with pytest.raises(ConfigError) as ei:
            mamba2_state_shapes(**kw)
        msg = str(ei.value)
        assert f"n_groups {n_groups}" in msg and f"tensor_parallel_size {tp}" in msg
        valid = [t for t in range(1, n_groups + 1) if n_groups % t == 0]
        assert msg.endswith(", ".join(map(str, valid)))


@settings(max_examples=30)
@given(n_groups=st.sampled_from([2, 4, 8]), tp=st.sampled_from([2, 4, 8, 16]))
def test_python_api_nemotron_h(n_groups, tp):
    raw = dict(load_model_config("nemotron-h-56b-base-8k").raw, n_groups=n_groups)
    cfg = parse_model_config(raw, name="gen-nemotron-h")
    cache = CacheConfig(tensor_parallel_size=tp)
    if vllm_accepts(n_groups, 256, tp):
        assert layer_specs_for(cfg, cache)
    else:
        with pytest.raises(ConfigError, match=f"n_groups {n_groups} "):
            layer_specs_for(cfg, cache)


def test_plan_model_refuses_tp_16():
    with pytest.raises(ConfigError, match="n_groups 8 .*16.*valid tensor_parallel_size: "
                                          "1, 2, 4, 8$"):
        kvcore.plan_model("nemotron-h-56b-base-8k", tensor_parallel_size=16,
                          kv_cache_memory_bytes=20 * 2**30, max_model_len=2048)


@pytest.mark.parametrize("args", [
    ["--tp", "16", "--kv-cache-memory", "20GiB", "--max-model-len", "2048", "--json"],
    ["--gpu", "H100", "--tp", "16", "--max-model-len", "8192"],
])
def test_cli_refuses_one_line_exit_2(args):
    proc = subprocess.run([sys.executable, "-m", "kvcore", "plan", "nemotron-h-56b-base-8k",
                           *args], capture_output=True, text=True)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr
    if "--json" in args:   # --json: the error as one JSON object on stdout
        err = json.loads(proc.stdout)["error"]
        assert err["type"] == "ConfigError" and err["n_groups"] == 8
        assert err["valid"] == [1, 2, 4, 8]
        line = err["message"]
    else:
        lines = proc.stderr.strip().splitlines()
        assert len(lines) == 1
        line = lines[0]
    assert "n_groups 8" in line and "tensor_parallel_size 16" in line
    assert line.endswith("1, 2, 4, 8")
