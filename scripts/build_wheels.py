#!/usr/bin/env python3
"""Build the six kvcore distributions as wheels.

Usage::

    python scripts/build_wheels.py [--out DIR] [NAME ...]

``NAME`` is ``kvcore`` (the core) or a plugin name (``mla``, ``mamba``, ``turboquant``,
``rswa``, ``kpool``); default: all six.  ``vllm`` builds the vLLM bridge
(``integrations/vllm``, distribution ``kvcore-vllm``; only when named).  Wheels land in
``DIR`` (default ``dist/``).

Each distribution's sources are first copied to a temporary directory, so a build never
writes ``build/`` or ``*.egg-info`` into the working tree and never packs a stale file
left in an old ``build/lib`` (setuptools does not clean it).  The build itself is
``python -m pip wheel --no-deps`` with pip's normal build isolation, i.e. exactly what a
user's ``pip install`` of the source tree does (the build requirements of each
pyproject.toml are installed into a throw-away environment from pip's configured
indexes).  Prints one line per wheel: name, size in bytes, seconds taken.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PLUGINS = ("mla", "mamba", "turboquant", "rswa", "kpool")
ALL = ("kvcore", *PLUGINS)
#: built only when named: the vLLM bridge (integrations/vllm)
INTEGRATIONS = ("vllm",)

# never copied into a build directory
_IGNORE = shutil.ignore_patterns(
    ".git", "build", "dist", "*.egg-info", "__pycache__", "*.pyc", ".venv*",
    ".mypy_cache", ".ruff_cache", ".pytest_cache", ".hypothesis", ".whl", ".gl")
# top-level folders of the repository that are not part of the core distribution
_NOT_CORE = {"plugins", "tests", "benchmarks", "scripts", ".ci", "docs", "notes",
             "integrations"}


def source_dir(name: str) -> Path:
    """The directory holding the pyproject.toml of distribution ``name``."""
    if name == "kvcore":
        return ROOT
    if name in INTEGRATIONS:
        return ROOT / "integrations" / name
    if name not in PLUGINS:
        raise SystemExit(f"unknown distribution {name!r}; known: "
                         f"{', '.join(ALL + INTEGRATIONS)}")
    return ROOT / "plugins" / name


def wheel_prefix(name: str) -> str:
    """The file-name prefix of a distribution's wheel (``kvcore_mla-``...)."""
    return "kvcore-" if name == "kvcore" else f"kvcore_{name}-"


def _copy_sources(name: str, dest: Path) -> Path:
    src = source_dir(name)
    if name != "kvcore":
        shutil.copytree(src, dest, ignore=_IGNORE)
        return dest
    dest.mkdir()
    for entry in src.iterdir():
        if entry.name in _NOT_CORE or _IGNORE(str(src), [entry.name]):
            continue
        if entry.is_dir():
            shutil.copytree(entry, dest / entry.name, ignore=_IGNORE)
        else:
            shutil.copy2(entry, dest / entry.name)
    return dest


def build_one(name: str, out: Path) -> tuple[str, Path, float]:
    """Build distribution ``name`` into ``out``; returns (name, wheel path, seconds).

    Raises SystemExit with pip's output when the build fails.
    """
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix=f"kvcore-build-{name}-") as tmp:
        src = _copy_sources(name, Path(tmp) / "src")
        wheel_dir = Path(tmp) / "wheel"
        proc = subprocess.run(
            [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-input",
             "--disable-pip-version-check", "-q", "--wheel-dir", str(wheel_dir), str(src)],
            capture_output=True, text=True)
        if proc.returncode != 0:
            raise SystemExit(f"building the {name} wheel failed (pip exit {proc.returncode}):"
                             f"\n{proc.stdout}\n{proc.stderr}")
        wheels = sorted(wheel_dir.glob(wheel_prefix(name) + "*.whl"))
        if len(wheels) != 1:
            raise SystemExit(f"expected one {wheel_prefix(name)}*.whl, found "
                             f"{[w.name for w in wheel_dir.iterdir()]}")
        target = out / wheels[0].name
        shutil.copy2(wheels[0], target)
    return name, target, time.perf_counter() - t0


def build(names: list[str] | tuple[str, ...] = ALL, out: Path | str = ROOT / "dist",
          jobs: int = 2) -> dict[str, Path]:
    """Build ``names`` into ``out`` (old wheels of those distributions are removed first);
    returns ``{name: wheel path}``."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    for name in names:
        source_dir(name)  # validates the name
        for old in out.glob(wheel_prefix(name) + "*.whl"):
            old.unlink()
    with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        results = list(pool.map(lambda n: build_one(n, out), names))
    for _name, path, secs in results:
        print(f"built {path.name:<45} {path.stat().st_size:>9,} B  {secs:5.1f} s")
    return {name: path for name, path, _ in results}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("names", nargs="*", default=list(ALL), metavar="NAME",
                        help=f"distributions to build (default: all of {', '.join(ALL)})")
    parser.add_argument("--out", default=str(ROOT / "dist"), help="wheel directory")
    parser.add_argument("--jobs", type=int, default=2, help="parallel builds (default 2)")
    args = parser.parse_args(argv)
    t0 = time.perf_counter()
    build(args.names, args.out, args.jobs)
    print(f"{len(args.names)} wheel(s) in {args.out} ({time.perf_counter() - t0:.1f} s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
