"""``--mamba-ssm-cache-dtype`` takes vLLM 0.32's values only, on every model and path
(tester A, F7).

vLLM 0.32: ``MambaDType = Literal["auto", "float32", "float16", "bfloat16"]``
(vllm/config/cache.py); ``vllm serve`` refuses any other value, on any model.  kvcore
planned ``bool`` / ``int8`` / ``fp8`` / ``float64`` states (other concurrencies, exit
0) and ignored junk on models without Mamba layers.  Generated names (hypothesis:
kvcore's dtype names, case changes, vLLM's names with a suffix, random text) on a
hybrid and a plain-attention model, through the CLI (``plan``, ``plan --gpu``) and the
Python API (``plan_model``); valid exactly when vLLM's Literal holds the name.
"""

from __future__ import annotations

import ast
import glob
import importlib.util
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kvcore_cli_support import assert_clean_error, run_cli

import kvcore
from kvcore.errors import ConfigError

#: vLLM 0.32's MambaDType, written from its source (checked below when it is installed)
VLLM_MAMBA_DTYPES = ("auto", "float32", "float16", "bfloat16")
MODELS = ["qwen3-next-80b-a3b-thinking", "llama-3.1-8b"]


def _vllm_mamba_dtypes() -> list[str] | None:
    root = Path(__file__).resolve().parents[1]
    hits = sorted(glob.glob(str(root / ".venv-vllm" / "lib" / "python3*" / "site-packages"
                                / "vllm" / "config" / "cache.py")))
    hits += sorted(glob.glob("/work/main/.venv-vllm/lib/python3*/site-packages/vllm/config/"
                             "cache.py"))
    if not hits:
        return None
    for node in ast.parse(Path(hits[0]).read_text()).body:
        if isinstance(node, ast.Assign) and any(
                isinstance(t, ast.Name) and t.id == "MambaDType" for t in node.targets):
            sl = node.value.slice  # type: ignore[attr-defined]
            return [e.value for e in (sl.elts if isinstance(sl, ast.Tuple) else [sl])]
    return None


def test_the_list_is_vllms() -> None:
    from kvcore.models.config import VLLM_MAMBA_SSM_CACHE_DTYPES

    assert VLLM_MAMBA_SSM_CACHE_DTYPES == VLLM_MAMBA_DTYPES
    got = _vllm_mamba_dtypes()
    if got is None:
        pytest.skip("vLLM 0.32's source is not installed here")
    assert list(VLLM_MAMBA_DTYPES) == got


names = st.one_of(
    st.sampled_from(VLLM_MAMBA_DTYPES),
    st.sampled_from(["bool", "int8", "uint8", "fp8", "float64", "fp32", "bf16", "half",
                     "float", "fp16", "float8_e4m3fn", "bogus", "int4", "nvfp4"]),
    st.sampled_from(VLLM_MAMBA_DTYPES).map(str.upper),
    st.sampled_from(VLLM_MAMBA_DTYPES).map(lambda s: s + "x"),
    st.text(st.characters(min_codepoint=33, max_codepoint=126), min_size=1, max_size=10))


@settings(max_examples=30, deadline=None, derandomize=True,
          suppress_health_check=list(HealthCheck))
@given(name=names, model=st.sampled_from(MODELS), gpu=st.booleans())
@pytest.mark.skipif(importlib.util.find_spec('kvcore_mamba') is None, reason='needs kvcore-mamba')
def test_the_cli_takes_vllms_values_only(name: str, model: str, gpu: bool,
                                         capsys: Any) -> None:
    if name.startswith("-"):
        return  # argparse's business
    argv = ["plan", model, f"--mamba-ssm-cache-dtype={name}", "--max-model-len", "8192"]
    argv += ["--gpu", "H200", "--tp", "4"] if gpu else ["--kv-cache-memory", "20GiB"]
    rc, out, err = run_cli(capsys, argv)
    if name in VLLM_MAMBA_DTYPES:
        assert rc == 0, err
    else:
        assert_clean_error(rc, err, "--mamba-ssm-cache-dtype", "float32, float16, bfloat16")


@settings(max_examples=20, deadline=None, derandomize=True,
          suppress_health_check=list(HealthCheck))
@given(name=names, model=st.sampled_from(MODELS))
@pytest.mark.skipif(importlib.util.find_spec('kvcore_mamba') is None, reason='needs kvcore-mamba')
def test_the_api_takes_vllms_values_only(name: str, model: str) -> None:
    kw = dict(kv_cache_memory_bytes=20 << 30, max_model_len=8192, mamba_ssm_cache_dtype=name)
    if name in VLLM_MAMBA_DTYPES:
        kvcore.plan_model(model, **kw)
    else:
        with pytest.raises(ConfigError) as info:
            kvcore.plan_model(model, **kw)
        assert info.value.extra["field"] == "mamba_ssm_cache_dtype"
