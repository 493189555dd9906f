"""A third-party plugin with broken hooks, pip-installed into a fresh venv with the core
wheel (issue 15, items 10 and 11): whatever its adapter does (raise, SystemExit(0),
return a list, a string or non-spec values), ``kvcore plan`` exits 2 with one line naming
the distribution, its version and the hook; its raising ``kvcore_explain_kv_cache_dtype``
does not turn ``--kv-cache-dtype bogus`` into a traceback; its manager path to a missing
module is named by ``kvcore plugins`` (exit 2) and does not stop other models from
planning."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest
from pkg_support import Venv, make_venv, timed

pytestmark = pytest.mark.slow

DIST, VERSION, MODEL_TYPE = "kvcore-broken-hooks", "0.2.0", "broken_hooks_model"

_MODULE = f'''
"""Broken on purpose: BROKEN_HOOKS_MODE picks how the adapter misbehaves."""

import os
from dataclasses import dataclass
from typing import ClassVar

from kvcore import FullAttentionSpec, SpecType, hookimpl


@dataclass(frozen=True, kw_only=True)
class BrokenHooksSpec(FullAttentionSpec):
    kind: ClassVar[str] = "broken_hooks_kind"


@hookimpl
def kvcore_spec_types():
    return [SpecType(BrokenHooksSpec, "broken_hooks_kind",
                     "kvcore_broken_hooks_missing_module:Manager")]


@hookimpl
def kvcore_model_types():
    return ["{MODEL_TYPE}"]


@hookimpl
def kvcore_layer_specs(model_config, cache_config):
    if model_config.model_type != "{MODEL_TYPE}":
        return None
    mode = os.environ.get("BROKEN_HOOKS_MODE", "raise")
    spec = FullAttentionSpec(block_size=16, num_kv_heads=4, head_size=64)
    if mode == "raise":
        raise RuntimeError("the adapter exploded")
    if mode == "exit0":
        raise SystemExit(0)
    if mode == "list":
        return [spec]
    if mode == "string":
        return "model.layers.0.self_attn"
    if mode == "nonspec":
        return {{"model.layers.0.self_attn": 5}}
    return {{"model.layers.0.self_attn": spec}}


@hookimpl
def kvcore_explain_kv_cache_dtype(name):
    if os.environ.get("BROKEN_HOOKS_MODE") == "explain":
        raise ValueError("explain exploded")
    return None
'''


def _write_distribution(root: Path) -> Path:
    path = root / DIST
    (path / "kvcore_broken_hooks").mkdir(parents=True)
    (path / "kvcore_broken_hooks" / "__init__.py").write_text(
        textwrap.dedent(_MODULE).lstrip())
    (path / "pyproject.toml").write_text(textwrap.dedent(f"""\
        [build-system]
        requires = ["setuptools>=68"]
        build-backend = "setuptools.build_meta"

        [project]
        name = "{DIST}"
        version = "{VERSION}"
        requires-python = ">=3.10"
        dependencies = ["kvcore"]

        [project.entry-points."kvcore.plugins"]
        brokenhooks = "kvcore_broken_hooks"

        [tool.setuptools]
        packages = ["kvcore_broken_hooks"]
        """))
    return path


@pytest.fixture(scope="module")
def broken_venv(tmp_path_factory: pytest.TempPathFactory, wheels: dict[str, Path]) -> Venv:
    source = _write_distribution(tmp_path_factory.mktemp("broken-hooks-src"))
    venv = make_venv(tmp_path_factory.mktemp("venv-broken-hooks") / "venv")
    timed("broken-hooks venv: pip install core wheel + broken plugin source",
          venv.pip_install(wheels["kvcore"], source))
    return venv


@pytest.fixture(scope="module")
def config_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("broken-hooks-cfg") / "config.json"
    path.write_text(json.dumps({"model_type": MODEL_TYPE, "num_hidden_layers": 2,
                                "num_attention_heads": 4, "hidden_size": 256,
                                "max_position_embeddings": 1024}))
    return path


def _one_line(proc) -> str:  # noqa: ANN001
    text = proc.stdout + proc.stderr
    assert "Traceback" not in text, text
    lines = [line for line in proc.stderr.splitlines()
             if line.strip() and not line.startswith("kvcore: warning:")]
    assert len(lines) == 1, proc.stderr
    return lines[0]


@pytest.mark.parametrize("mode, fragment", [
    ("raise", "RuntimeError"), ("exit0", "SystemExit"), ("list", "list"),
    ("string", "str"), ("nonspec", "KVCacheSpec"),
])
def test_broken_adapter_is_one_line_naming_the_plugin(broken_venv: Venv, has_cli: bool,
                                                       config_path: Path, mode: str,
                                                       fragment: str) -> None:
    if not has_cli:
        pytest.skip("kvcore/cli.py is not in the core yet")
    proc = broken_venv.script("kvcore", "plan", str(config_path), "--kv-cache-memory",
                              "1GiB", check=False, BROKEN_HOOKS_MODE=mode)
    assert proc.returncode == 2, (proc.stdout, proc.stderr)
    line = _one_line(proc)
    for part in (DIST, VERSION, "kvcore_layer_specs", fragment):
        assert part in line, (part, line)
    proc = broken_venv.script("kvcore", "plan", str(config_path), "--kv-cache-memory",
                              "1GiB", "--json", check=False, BROKEN_HOOKS_MODE=mode)
    payload = json.loads(proc.stdout)["error"]
    assert proc.returncode == 2 and payload["type"] == "PluginError"
    assert payload["distribution"] == DIST and payload["version"] == VERSION


def test_broken_explain_hook(broken_venv: Venv, has_cli: bool) -> None:
    if not has_cli:
        pytest.skip("kvcore/cli.py is not in the core yet")
    proc = broken_venv.script("kvcore", "plan", "llama-3.1-8b", "--max-model-len", "4096",
                              "--kv-cache-dtype", "bogus", check=False,
                              BROKEN_HOOKS_MODE="explain")
    assert proc.returncode == 2
    line = _one_line(proc)
    assert DIST in line and "kvcore_explain_kv_cache_dtype" in line, line


def test_other_models_plan_and_plugins_names_the_missing_manager(broken_venv: Venv,
                                                                 has_cli: bool) -> None:
    if not has_cli:
        pytest.skip("kvcore/cli.py is not in the core yet")
    proc = broken_venv.script("kvcore", "plan", "llama-3.1-8b", "--max-model-len", "4096",
                              "--kv-cache-memory", "20GiB", "--json", check=False)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["num_blocks"] > 1
    proc = broken_venv.script("kvcore", "plugins", check=False)
    assert proc.returncode == 2
    assert "kvcore_broken_hooks_missing_module" in proc.stderr and DIST in proc.stderr
    assert "Traceback" not in proc.stdout + proc.stderr
