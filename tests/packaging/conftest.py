"""Session fixtures of the packaging checks (see pkg_support.py for how the venvs are
made): six wheels, a core-only venv, a kernel dependency layer and one venv per plugin."""

from __future__ import annotations

import os
import shutil
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from pkg_support import (
    DISTRIBUTIONS,
    KERNEL_DEPS,
    ROOT,
    TEST_DEPS,
    TIMINGS,
    Venv,
    make_venv,
    run,
    timed,
    wheel_has,
)


# ---- fixtures ---------------------------------------------------------------------------
@pytest.fixture(scope="session")
def wheels(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """``{distribution: wheel path}`` for the six distributions, built from the working
    tree by scripts/build_wheels.py."""
    out = tmp_path_factory.mktemp("wheels")
    t0 = time.perf_counter()
    run([sys.executable, str(ROOT / "scripts" / "build_wheels.py"), "--out", str(out)])
    timed("build 6 wheels", time.perf_counter() - t0)
    found = {}
    for name in DISTRIBUTIONS:
        prefix = "kvcore-" if name == "kvcore" else f"kvcore_{name}-"
        matches = sorted(out.glob(prefix + "*.whl"))
        assert len(matches) == 1, (name, [p.name for p in out.iterdir()])
        found[name] = matches[0]
    return found


@pytest.fixture(scope="session")
def has_cli(wheels: dict[str, Path]) -> bool:
    """Whether the core wheel ships the ``kvcore`` command's module."""
    return wheel_has(wheels["kvcore"], "kvcore/cli.py")


@pytest.fixture(scope="session")
def core_venv(tmp_path_factory: pytest.TempPathFactory, wheels: dict[str, Path]) -> Venv:
    """A venv with only the core wheel (and what it depends on) plus pytest and
    hypothesis to run the core's tests: no torch, triton, numpy, rich or plugin."""
    venv = make_venv(tmp_path_factory.mktemp("venv-core") / "venv")
    timed("core venv: pip install core wheel + pytest, hypothesis",
          venv.pip_install(wheels["kvcore"], *TEST_DEPS))
    return venv


@pytest.fixture(scope="session")
def dependency_layer(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path | None]:
    """A venv holding torch==2.13.0, triton, numpy, pytest and hypothesis (and no kvcore
    distribution), shared by the plugin venvs through a .pth file; None when
    KVCORE_PACKAGING_ISOLATED=1."""
    if os.environ.get("KVCORE_PACKAGING_ISOLATED", "") not in ("", "0"):
        yield None
        return
    path = tmp_path_factory.mktemp("dependency-layer") / "venv"
    layer = make_venv(path)
    timed("dependency layer: pip install torch==2.13.0, triton, numpy, pytest, hypothesis",
          layer.pip_install(*KERNEL_DEPS, *TEST_DEPS))
    dists = layer.distributions()
    assert not any(name.startswith("kvcore") for name in dists), dists
    yield path
    shutil.rmtree(path.parent, ignore_errors=True)


@pytest.fixture(scope="session")
def plugin_venv(tmp_path_factory: pytest.TempPathFactory, wheels: dict[str, Path],
                dependency_layer: Path | None) -> Callable[[str], Venv]:
    """``plugin_venv(name)``: a venv with the core wheel and the wheel of plugin ``name``
    with its ``[test,kernels]`` extras (made once per session and plugin)."""
    cache: dict[str, Venv] = {}

    def get(name: str) -> Venv:
        if name not in cache:
            venv = make_venv(tmp_path_factory.mktemp(f"venv-{name}") / "venv",
                             layer=dependency_layer)
            extra = () if dependency_layer is not None else KERNEL_DEPS
            secs = venv.pip_install(wheels["kvcore"], f"{wheels[name]}[test,kernels]",
                                    *extra)
            timed(f"{name} venv: pip install core + kvcore-{name}[test,kernels]", secs)
            cache[name] = venv
        return cache[name]

    return get


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if TIMINGS:
        terminalreporter.section("packaging timings")
        for label, secs in TIMINGS:
            terminalreporter.write_line(f"{secs:7.1f} s  {label}")

