"""Helpers of the packaging checks (used by conftest.py and the test modules): fresh
virtual environments that hold only what a user would install, from the wheels of the
six distributions.

Every venv is made with ``python -m venv --without-pip`` and filled by the running
interpreter's pip (``pip --python VENV_PYTHON install ...``), so it uses the machine's
configured indexes and find-links (torch==2.13.0 comes from the local wheel).  Nothing
from the source tree is importable in these venvs: the distributions are installed from
the wheels built by ``scripts/build_wheels.py``, tests run from a copy of the test
directory, and ``PYTHONPATH`` is dropped.

Kernel dependencies (torch, triton, numpy) are installed once per session into a
*dependency layer* venv; each plugin venv sees them through a ``.pth`` file, so pip in
that venv treats them as installed and the plugin's ``[kernels]`` extra adds nothing.
The layer holds no kvcore distribution.  Set ``KVCORE_PACKAGING_ISOLATED=1`` to install
torch, triton and numpy into every plugin venv instead (about 30 s more per plugin).

Every venv lives under pytest's session temporary directory; the layer (about 2 GB) is
deleted at the end of the session.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
import time
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PLUGINS = ("mla", "mamba", "turboquant", "rswa", "kpool")
DISTRIBUTIONS = ("kvcore", *PLUGINS)
#: torch from the machine's local wheel (pip's configured find-links)
TORCH_REQUIREMENT = "torch==2.13.0"
KERNEL_DEPS = (TORCH_REQUIREMENT, "triton>=3.0", "numpy>=1.24")
TEST_DEPS = ("pytest>=8", "hypothesis>=6.90", "pytest-xdist>=3.5")
#: seconds any one subprocess may take (pip installing torch takes ~20 s)
SUBPROCESS_TIMEOUT = 900

#: what each step cost, printed at the end of the session (see pytest_terminal_summary)
TIMINGS: list[tuple[str, float]] = []


def _pip_noise(line: str) -> bool:
    return "is ignored: it is neither a file nor a directory" in line


def run(cmd: list[str], *, cwd: Path | None = None, env: dict[str, str] | None = None,
        check: bool = True, timeout: float = SUBPROCESS_TIMEOUT
        ) -> subprocess.CompletedProcess[str]:
    """Run ``cmd`` capturing text output; on ``check`` a non-zero exit fails the test with
    the command and its output."""
    proc = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=timeout, stdin=subprocess.DEVNULL)
    if check and proc.returncode != 0:
        err = "\n".join(ln for ln in proc.stderr.splitlines() if not _pip_noise(ln))
        pytest.fail(f"command failed (exit {proc.returncode}): {' '.join(map(str, cmd))}\n"
                    f"--- stdout ---\n{proc.stdout[-6000:]}\n--- stderr ---\n{err[-6000:]}",
                    pytrace=False)
    return proc


def _base_env() -> dict[str, str]:
    """The environment for venv processes: the machine's, minus anything that would make
    the source tree or another environment importable."""
    drop_prefixes = ("PYTHON", "VIRTUAL_ENV", "KVCORE_", "PYTEST_", "CONDA", "PIP_PYTHON")
    env = {k: v for k, v in os.environ.items() if not k.startswith(drop_prefixes)}
    env["PYTHONNOUSERSITE"] = "1"
    env["PIP_NO_INPUT"] = "1"
    env["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
    return env


@dataclass
class Venv:
    """A virtual environment made for one packaging check."""

    path: Path
    layer: Path | None = None
    installed: list[str] = field(default_factory=list)

    @property
    def python(self) -> Path:
        return self.path / "bin" / "python"

    @property
    def site_packages(self) -> Path:
        return Path(run([str(self.python), "-c",
                         "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                        env=self.env()).stdout.strip())

    def env(self, **extra: str) -> dict[str, str]:
        env = _base_env()
        env["VIRTUAL_ENV"] = str(self.path)
        env["PATH"] = f"{self.path / 'bin'}{os.pathsep}{env.get('PATH', '')}"
        env.update(extra)
        return env

    def pip_install(self, *args: str | Path) -> float:
        """``pip install ARGS`` into this venv (with the running interpreter's pip);
        returns the seconds it took."""
        t0 = time.perf_counter()
        run([sys.executable, "-m", "pip", "--python", str(self.python), "install",
             "--no-input", "-q", *map(str, args)], env=_base_env())
        self.installed.extend(map(str, args))
        return time.perf_counter() - t0

    def python_c(self, code: str, *, cwd: Path | None = None, check: bool = True,
                 **env: str) -> subprocess.CompletedProcess[str]:
        """Run ``python -c CODE`` in this venv (cwd: a directory outside the source)."""
        return run([str(self.python), "-c", textwrap.dedent(code)],
                   cwd=cwd or self.path, env=self.env(**env), check=check)

    def script(self, name: str, *args: str, cwd: Path | None = None, check: bool = True,
               **env: str) -> subprocess.CompletedProcess[str]:
        """Run a console script of this venv (e.g. ``kvcore``)."""
        return run([str(self.path / "bin" / name), *args], cwd=cwd or self.path,
                   env=self.env(**env), check=check)

    def distributions(self) -> dict[str, str]:
        """``{normalized name: version}`` of every distribution this venv can import."""
        out = self.python_c(
            "import importlib.metadata as m, json; print(json.dumps({"
            "d.metadata['Name'].lower().replace('_', '-'): d.version "
            "for d in m.distributions()}))")
        return json.loads(out.stdout)


def make_venv(path: Path, *, layer: Path | None = None) -> Venv:
    """A new, empty venv at ``path`` (no pip inside: the running pip installs into it).
    With ``layer``, a ``.pth`` file makes that venv's site-packages importable too."""
    run([sys.executable, "-m", "venv", "--without-pip", str(path)])
    venv = Venv(path, layer)
    if layer is not None:
        layer_site = Venv(layer).site_packages
        (venv.site_packages / "_kvcore_test_dependency_layer.pth").write_text(
            f"{layer_site}\n")
    return venv


def timed(label: str, seconds: float) -> None:
    TIMINGS.append((label, seconds))


def wheel_has(wheel: Path, member: str) -> bool:
    with zipfile.ZipFile(wheel) as zf:
        return member in zf.namelist()


@dataclass
class PluginsJSON:
    """The parsed output of ``kvcore plugins --json`` (or of list_plugins() while the
    CLI lacks that command)."""

    plugins: list[dict]
    stderr: str

    def by_name(self) -> dict[str, dict]:
        return {p["name"]: p for p in self.plugins}


def plugins_json(venv: Venv, use_cli: bool, **env: str) -> PluginsJSON:
    """``kvcore plugins --json`` in ``venv``; parsed and shape-checked."""
    if use_cli:
        proc = venv.script("kvcore", "plugins", "--json", **env)
    else:
        proc = venv.python_c(
            "import json; from kvcore.plugins import list_plugins; "
            "print(json.dumps({'plugins': [p.to_dict() for p in list_plugins()]}))", **env)
    data = json.loads(proc.stdout)
    assert set(data) == {"plugins"}, data
    keys = {"name", "distribution", "version", "kinds", "kv_cache_dtypes", "model_types",
            "hooks"}
    for entry in data["plugins"]:
        assert set(entry) == keys, entry
    return PluginsJSON(data["plugins"], proc.stderr)


def copy_tests(src: Path, dest: Path, *, exclude: tuple[str, ...] = (),
               siblings: tuple[str, ...] = ()) -> Path:
    """Copy test directory ``src`` to ``dest/tests`` (minus ``exclude`` and caches) with a
    guard test that fails when kvcore is imported from outside the venv; returns the
    directory to run pytest in.

    ``siblings`` names directories beside ``src`` that tests use as files (e.g.
    ``benchmarks`` scripts run by a test); they are copied to ``dest/<name>``.  Never
    name a directory holding an installed package there.
    """
    ignore = shutil.ignore_patterns("__pycache__", ".pytest_cache", ".hypothesis", *exclude)
    shutil.copytree(src, dest / "tests", ignore=ignore)
    for name in siblings:
        if (src.parent / name).is_dir():
            shutil.copytree(src.parent / name, dest / name, ignore=ignore)
    (dest / "pytest.ini").write_text(textwrap.dedent("""\
        [pytest]
        markers =
            slow: longer tests
        """))
    (dest / "tests" / "test_zz_installed_from_wheel.py").write_text(textwrap.dedent('''\
        """Added by tests/packaging: the packages under test come from the venv."""
        import sys
        from pathlib import Path

        import kvcore


        def test_kvcore_imported_from_the_venv():
            assert Path(kvcore.__file__).resolve().is_relative_to(
                Path(sys.prefix).resolve()), (kvcore.__file__, sys.prefix)
        '''))
    return dest


def has_test_files(path: Path) -> bool:
    return any(path.rglob("test_*.py")) or any(path.rglob("*_test.py"))


def run_pytest(venv: Venv, workdir: Path, label: str,
               *args: str) -> subprocess.CompletedProcess[str]:
    """Run pytest on ``workdir/tests`` in ``venv``; records the time; fails on a non-zero
    exit with pytest's output."""
    t0 = time.perf_counter()
    workers = os.environ.get("KVCORE_TEST_WORKERS", "1")
    parallel = ["-n", workers] if workers.isdigit() and int(workers) > 1 else []
    proc = run([str(venv.python), "-m", "pytest", "-q", "-p", "no:cacheprovider",
                "-o", "addopts=", *parallel, "tests", *args], cwd=workdir,
               env=venv.env(TRITON_INTERPRET="1"), check=False)
    timed(label, time.perf_counter() - t0)
    summary = proc.stdout.strip().splitlines()[-1:] or ["(no output)"]
    print(f"{label}: {summary[0]}")
    assert proc.returncode == 0, (
        f"{label}: pytest exit {proc.returncode}\n{proc.stdout[-12000:]}\n{proc.stderr[-4000:]}")
    return proc
