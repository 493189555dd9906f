"""A third-party plugin, written here as a tiny distribution and pip-installed from its
source directory into a venv with the core wheel: it is listed by ``kvcore plugins
--json`` and its new spec kind works (issue 2, item 6).  Also: two plugins claiming one
kind raise PluginConflictError naming both distributions; a plugin that fails to import
is skipped with a warning naming its distribution, version and error, and the rest
load."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest
from pkg_support import Venv, make_venv, plugins_json, timed

pytestmark = pytest.mark.slow

DEMO_KIND = "demo_mirrored_attention"
CLASH_KIND = "clash_attention"
MISSING_MODULE = "kvcore_missing_dependency_xyz"

_DEMO_MODULE = f'''
"""A third-party kvcore plugin: full attention whose K and V pages are stored
``num_copies`` times (page size = num_copies x the full-attention page size)."""

from dataclasses import dataclass
from typing import ClassVar

from kvcore import FullAttentionSpec, SpecType, hookimpl


@dataclass(frozen=True, kw_only=True)
class MirroredFullAttentionSpec(FullAttentionSpec):
    kind: ClassVar[str] = "{DEMO_KIND}"

    num_copies: int = 2

    @property
    def real_page_size_bytes(self) -> int:
        return self.num_copies * super().real_page_size_bytes


@hookimpl
def kvcore_spec_types():
    return [SpecType(MirroredFullAttentionSpec, "{DEMO_KIND}",
                     "kvcore.runtime.managers:FullAttentionManager")]
'''

_CLASH_MODULE = f'''
"""Claims the kind {CLASH_KIND!r} (as does the other clash plugin)."""

from dataclasses import dataclass
from typing import ClassVar

from kvcore import FullAttentionSpec, SpecType, hookimpl


@dataclass(frozen=True, kw_only=True)
class ClashSpec(FullAttentionSpec):
    kind: ClassVar[str] = "{CLASH_KIND}"


@hookimpl
def kvcore_spec_types():
    return [SpecType(ClashSpec, "{CLASH_KIND}", None)]
'''

_BROKEN_MODULE = f'''
"""Fails to import: its dependency is not installed."""

import {MISSING_MODULE}  # noqa: F401
'''


def write_distribution(root: Path, dist: str, version: str, entry_point: str, module: str,
                       source: str) -> Path:
    """A source tree of a one-module kvcore plugin distribution under ``root/dist``."""
    path = root / dist
    (path / module).mkdir(parents=True)
    (path / module / "__init__.py").write_text(textwrap.dedent(source).lstrip())
    (path / "pyproject.toml").write_text(textwrap.dedent(f"""\
        [build-system]
        requires = ["setuptools>=68"]
        build-backend = "setuptools.build_meta"

        [project]
        name = "{dist}"
        version = "{version}"
        requires-python = ">=3.10"
        dependencies = ["kvcore"]

        [project.entry-points."kvcore.plugins"]
        {entry_point} = "{module}"

        [tool.setuptools]
        packages = ["{module}"]
        """))
    return path


@pytest.fixture(scope="session")
def third_party_sources(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("third-party-src")
    return {
        "demo": write_distribution(root, "kvcore-demo-plugin", "0.3.1", "demo",
                                   "kvcore_demo_plugin", _DEMO_MODULE),
        "clash_a": write_distribution(root, "kvcore-clash-a", "1.0.0", "clash_a",
                                      "kvcore_clash_a", _CLASH_MODULE),
        "clash_b": write_distribution(root, "kvcore-clash-b", "2.0.0", "clash_b",
                                      "kvcore_clash_b", _CLASH_MODULE),
        "broken": write_distribution(root, "kvcore-broken-plugin", "0.0.1", "broken",
                                     "kvcore_broken_plugin", _BROKEN_MODULE),
    }


@pytest.fixture(scope="session")
def demo_venv(tmp_path_factory: pytest.TempPathFactory, wheels: dict[str, Path],
              third_party_sources: dict[str, Path]) -> Venv:
    """The core wheel + the demo plugin, installed from its source directory."""
    venv = make_venv(tmp_path_factory.mktemp("venv-third-party") / "venv")
    timed("third-party venv: pip install core wheel + demo plugin source",
          venv.pip_install(wheels["kvcore"], third_party_sources["demo"]))
    return venv


@pytest.fixture(scope="session")
def crowded_venv(tmp_path_factory: pytest.TempPathFactory, wheels: dict[str, Path],
                 third_party_sources: dict[str, Path]) -> Venv:
    """The core wheel + demo, two plugins claiming one kind, and one that fails to
    import."""
    venv = make_venv(tmp_path_factory.mktemp("venv-conflicts") / "venv")
    timed("conflict venv: pip install core wheel + 4 plugin sources",
          venv.pip_install(wheels["kvcore"], *third_party_sources.values()))
    return venv


def test_third_party_plugin_is_listed(demo_venv: Venv, has_cli: bool) -> None:
    out = plugins_json(demo_venv, has_cli)
    listed = out.by_name()
    assert list(listed) == ["core", "demo"], out.plugins
    demo = listed["demo"]
    assert demo["distribution"] == "kvcore-demo-plugin"
    assert demo["version"] == "0.3.1"
    assert demo["kinds"] == [DEMO_KIND]
    assert demo["kv_cache_dtypes"] == [] and demo["model_types"] == []
    assert demo["hooks"] == ["kvcore_spec_types"]
    assert DEMO_KIND not in listed["core"]["kinds"]


def test_third_party_kind_is_usable(demo_venv: Venv) -> None:
    proc = demo_venv.python_c(f"""
        import json, sys
        from kvcore import FullAttentionSpec, KVCacheSpec, get_registry
        base = {{"type": "{DEMO_KIND}", "block_size": 16, "num_kv_heads": 8,
                 "head_size": 128, "dtype": "bfloat16"}}
        spec = KVCacheSpec.from_dict(base)
        three = KVCacheSpec.from_dict({{**base, "num_copies": 3}})
        int8 = KVCacheSpec.from_dict({{**base, "kv_cache_dtype": "int8_per_token_head"}})
        print(json.dumps({{
            "class": type(spec).__module__ + "." + type(spec).__name__,
            "is_full_attention": isinstance(spec, FullAttentionSpec),
            "page": spec.page_size_bytes,
            "page3": three.page_size_bytes,
            "page_int8": int8.page_size_bytes,
            "roundtrip": KVCacheSpec.from_dict(three.to_dict()) == three,
            "type": three.to_dict()["type"],
            "registered": get_registry().spec_class("{DEMO_KIND}") is type(spec),
            "torch": "torch" in sys.modules,
        }}))
        """)
    got = json.loads(proc.stdout)
    assert got["class"] == "kvcore_demo_plugin.MirroredFullAttentionSpec"
    assert got["is_full_attention"] and got["registered"] and got["roundtrip"]
    assert got["type"] == DEMO_KIND
    # bf16 page: 16 tokens x 8 heads x (128 + 128) x 2 B = 65,536 B, stored num_copies x
    assert got["page"] == 2 * 65_536
    assert got["page3"] == 3 * 65_536
    # int8_per_token_head page (issue 2): 16 x 8 x (128 + 128 + 4 + 4) = 33,792 B
    assert got["page_int8"] == 2 * 33_792
    assert got["torch"] is False


def test_two_plugins_claiming_one_kind_raise_a_conflict(crowded_venv: Venv) -> None:
    proc = crowded_venv.python_c("""
        from kvcore import PluginConflictError, get_registry
        try:
            get_registry()
        except PluginConflictError as exc:
            print(exc)
        else:
            raise SystemExit("no PluginConflictError")
        """, KVCORE_PLUGINS="clash_a,clash_b")
    message = proc.stdout
    assert CLASH_KIND in message
    assert "kvcore-clash-a" in message and "kvcore-clash-b" in message, message


def test_cli_reports_a_conflict_naming_both(crowded_venv: Venv, has_cli: bool) -> None:
    if not has_cli:
        pytest.skip("kvcore/cli.py is not in the core yet")
    proc = crowded_venv.script("kvcore", "plugins", "--json", check=False)
    assert proc.returncode != 0, proc.stdout
    text = proc.stdout + proc.stderr
    assert "PluginConflictError" in text or "conflict" in text.lower(), text
    assert "kvcore-clash-a" in text and "kvcore-clash-b" in text, text
    assert "Traceback" not in text, text


def test_plugin_that_fails_to_import_is_skipped_with_a_warning(crowded_venv: Venv) -> None:
    proc = crowded_venv.python_c("""
        import json, warnings
        from kvcore.plugins import KVCorePluginWarning, list_plugins
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            names = [p.name for p in list_plugins()]
        print(json.dumps({"names": names, "warnings": [
            str(w.message) for w in caught if issubclass(w.category, KVCorePluginWarning)]}))
        """, KVCORE_PLUGINS="demo,broken")
    got = json.loads(proc.stdout)
    assert got["names"] == ["core", "demo"]
    assert len(got["warnings"]) == 1, got["warnings"]
    warning = got["warnings"][0]
    for part in ("kvcore-broken-plugin", "0.0.1", "ModuleNotFoundError", MISSING_MODULE):
        assert part in warning, (part, warning)


def test_cli_lists_the_rest_when_one_fails_to_import(crowded_venv: Venv,
                                                      has_cli: bool) -> None:
    out = plugins_json(crowded_venv, has_cli, KVCORE_PLUGINS="demo,broken")
    assert [p["name"] for p in out.plugins] == ["core", "demo"]
    if has_cli:
        assert "kvcore-broken-plugin" in out.stderr, out.stderr


def test_disable_plugin_autoload(crowded_venv: Venv, has_cli: bool) -> None:
    out = plugins_json(crowded_venv, has_cli, KVCORE_DISABLE_PLUGIN_AUTOLOAD="1")
    assert [p["name"] for p in out.plugins] == ["core"]
