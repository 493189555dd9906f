"""The core wheel alone in a fresh venv: no torch anywhere, only the core listed as a
plugin, and the core's own tests pass there (tests that need torch, triton or a plugin
skip)."""

from __future__ import annotations

from pathlib import Path

import pytest
from pkg_support import ROOT, Venv, copy_tests, plugins_json, run_pytest

pytestmark = pytest.mark.slow

HEAVY = ("torch", "triton", "numpy")


def test_import_kvcore_does_not_import_torch(core_venv: Venv) -> None:
    proc = core_venv.python_c("""
        import sys
        import kvcore
        from kvcore import FullAttentionSpec
        spec = FullAttentionSpec(block_size=16, num_kv_heads=8, head_size=128,
                                 dtype="bfloat16")
        assert spec.page_size_bytes == 65536, spec.page_size_bytes
        assert 'torch' not in sys.modules
        print(kvcore.__file__)
        """)
    assert Path(proc.stdout.strip()).is_relative_to(core_venv.path), proc.stdout


def test_torch_is_not_installed(core_venv: Venv) -> None:
    proc = core_venv.python_c("import torch", check=False)
    assert proc.returncode != 0
    assert "ModuleNotFoundError: No module named 'torch'" in proc.stderr, proc.stderr
    installed = core_venv.distributions()
    for name in (*HEAVY, "rich"):
        assert name not in installed, f"{name} is installed in the core-only venv"
    assert not [d for d in installed if d.startswith("kvcore-")], installed
    assert {"kvcore", "pluggy", "importlib-metadata"} <= set(installed), installed


def test_plugins_json_lists_only_the_core(core_venv: Venv, has_cli: bool) -> None:
    out = plugins_json(core_venv, has_cli)
    assert [p["name"] for p in out.plugins] == ["core"], out.plugins
    core = out.plugins[0]
    assert core["distribution"] == "kvcore"
    assert core["version"] == "0.1.0"
    # the core's own kinds and kv_cache_dtypes come through the same hooks
    assert "full_attention" in core["kinds"] and "sliding_window" in core["kinds"]
    assert {"auto", "fp8", "int8_per_token_head", "nvfp4"} <= set(core["kv_cache_dtypes"])
    assert "kvcore_spec_types" in core["hooks"]


def test_plugin_kind_names_the_distribution_to_install(core_venv: Venv) -> None:
    """Issue 2: a kind or kv_cache_dtype that a plugin provides names that plugin."""
    proc = core_venv.python_c("""
        from kvcore import KVCacheSpec, MissingPluginError
        try:
            KVCacheSpec.from_dict({"type": "mla_attention", "block_size": 64})
        except MissingPluginError as exc:
            print(exc)
        else:
            raise SystemExit("no MissingPluginError")
        """)
    assert "kvcore-mla" in proc.stdout and "pip install kvcore-mla" in proc.stdout


def test_core_tests_pass_in_core_only_venv(core_venv: Venv,
                                           tmp_path_factory: pytest.TempPathFactory) -> None:
    src = ROOT / "tests"
    if not [p for p in src.rglob("test_*.py")
            if "packaging" not in p.relative_to(src).parts]:
        pytest.skip("the core has no tests outside tests/packaging yet")
    work = copy_tests(src, tmp_path_factory.mktemp("core-tests"), exclude=("packaging",),
                      siblings=("benchmarks",))
    # the step-time model's accuracy table (~2.5 min of CPU simulating 158 published
    # runs) is no property of the install: the core stage runs it once
    proc = run_pytest(core_venv, work, "core tests in the core-only venv",
                      "--ignore=tests/sim/test_sim_accuracy.py")
    assert " passed" in proc.stdout


def test_plan_without_torch(core_venv: Venv, has_cli: bool) -> None:
    """The main job (``kvcore plan``) runs in the core-only venv without torch."""
    probe = core_venv.python_c("import kvcore; print(hasattr(kvcore, 'plan_model'))")
    if probe.stdout.strip() != "True":
        pytest.skip("kvcore.plan_model is not in the core yet")
    core_venv.python_c("""
        import sys
        import kvcore
        cfg = kvcore.plan_model("llama-3.1-8b", kv_cache_memory_bytes=20 * 2**30,
                                max_model_len=8192)
        # Llama-3.1-8B: 32 layers x 8 KV heads x 128 x (K + V) x 2 B (bf16) per token;
        # a 16-token block of one layer: 16 x 8 x 128 x 2 x 2 = 65,536 B; 20 GiB over
        # 32 layers of such pages = 20 x 2**30 / (32 x 65,536) = 10,240 blocks.
        assert cfg.num_blocks == 10240, cfg.num_blocks
        assert 'torch' not in sys.modules
        """)
    if has_cli:
        proc = core_venv.script("kvcore", "plan", "llama-3.1-8b", "--kv-cache-memory",
                                "20GiB", "--max-model-len", "8192")
        assert proc.stdout.strip(), "kvcore plan printed nothing"
