"""Each plugin wheel with the core wheel in a fresh venv (torch, triton and numpy from the
dependency layer): it loads through its entry point, registers its kinds without
importing torch, and its own tests pass there."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from pkg_support import (
    PLUGINS,
    ROOT,
    Venv,
    copy_tests,
    has_test_files,
    make_venv,
    plugins_json,
    run_pytest,
    timed,
)

pytestmark = pytest.mark.slow

#: a kind each plugin must register (issue 2, "Must show")
EXPECTED_KIND = {
    "mla": "mla_attention",
    "mamba": "mamba",
    "turboquant": "turboquant_full_attention",
    "rswa": "rswa",
    "kpool": "kpool_tail",
}


@pytest.mark.parametrize("name", PLUGINS)
def test_plugin_is_listed_with_its_kind(plugin_venv: Callable[[str], Venv], has_cli: bool,
                                        name: str) -> None:
    venv = plugin_venv(name)
    out = plugins_json(venv, has_cli)
    listed = out.by_name()
    assert set(listed) == {"core", name}, list(listed)
    entry = listed[name]
    assert entry["distribution"] == f"kvcore-{name}"
    assert entry["version"] == "0.1.0"
    assert "kvcore_spec_types" in entry["hooks"], entry
    assert EXPECTED_KIND[name] in entry["kinds"], entry
    assert "was skipped" not in out.stderr, out.stderr


@pytest.mark.parametrize("name", PLUGINS)
def test_plugin_loads_without_torch(plugin_venv: Callable[[str], Venv], name: str) -> None:
    """Loading the plugin and building the registry imports no torch, triton or numpy
    (they are importable in this venv, so an eager import would show)."""
    venv = plugin_venv(name)
    venv.python_c(f"""
        import sys, warnings
        import kvcore
        from kvcore.plugins import KVCorePluginWarning, list_plugins
        warnings.simplefilter("error", KVCorePluginWarning)
        names = [p.name for p in list_plugins()]
        assert names == ["core", "{name}"], names
        kvcore.get_registry().spec_class("{EXPECTED_KIND[name]}")
        heavy = sorted(m for m in ("torch", "triton", "numpy") if m in sys.modules)
        assert not heavy, f"loading kvcore-{name} imported {{heavy}}"
        import torch  # present through the [kernels] extra
        """)


@pytest.mark.parametrize("name", PLUGINS)
def test_plugin_tests_pass_in_its_venv(plugin_venv: Callable[[str], Venv], name: str,
                                       tmp_path_factory: pytest.TempPathFactory) -> None:
    src = ROOT / "plugins" / name / "tests"
    if not src.is_dir() or not has_test_files(src):
        pytest.skip(f"plugins/{name}/tests has no tests yet")
    venv = plugin_venv(name)
    work = copy_tests(src, tmp_path_factory.mktemp(f"{name}-tests"))
    proc = run_pytest(venv, work, f"kvcore-{name} tests in its venv")
    assert " passed" in proc.stdout


@pytest.fixture(scope="session")
def all_wheels_venv(tmp_path_factory: pytest.TempPathFactory, wheels: dict[str, Path],
                    dependency_layer: Path | None) -> Venv:
    """A venv with all six wheels (no extras: the plugins need no torch to load)."""
    venv = make_venv(tmp_path_factory.mktemp("venv-all") / "venv", layer=dependency_layer)
    timed("all-wheels venv: pip install the six wheels",
          venv.pip_install(*wheels.values()))
    return venv


def test_all_five_plugins_listed_with_their_kinds(all_wheels_venv: Venv,
                                                  has_cli: bool) -> None:
    """Issue 2, "Must show": kvcore plugins --json lists the five plugin distributions
    with their kinds; loading all of them imports no torch."""
    out = plugins_json(all_wheels_venv, has_cli)
    listed = out.by_name()
    assert set(listed) == {"core", *PLUGINS}, list(listed)
    assert list(listed)[0] == "core"
    for name in PLUGINS:
        assert listed[name]["distribution"] == f"kvcore-{name}"
        assert EXPECTED_KIND[name] in listed[name]["kinds"], listed[name]
    kinds = [k for p in out.plugins for k in p["kinds"]]
    assert len(kinds) == len(set(kinds)), f"a kind is listed twice: {kinds}"
    assert "was skipped" not in out.stderr, out.stderr
    all_wheels_venv.python_c("""
        import sys
        from kvcore.plugins import list_plugins
        assert len(list_plugins()) == 6
        heavy = sorted(m for m in ("torch", "triton", "numpy") if m in sys.modules)
        assert not heavy, heavy
        """)
