"""What each of the six wheels holds: the right packages, data files, entry points and
dependencies (the core's runtime dependencies are only pluggy and importlib-metadata;
torch appears only in extras)."""

from __future__ import annotations

import configparser
import zipfile
from email.parser import Parser
from pathlib import Path

import pytest
from pkg_support import PLUGINS, ROOT

pytestmark = pytest.mark.slow


def _metadata(wheel: Path) -> tuple[list[str], dict[str, list[str]]]:
    """(names of the wheel's files, METADATA headers as lists)."""
    with zipfile.ZipFile(wheel) as zf:
        names = zf.namelist()
        meta_name = next(n for n in names if n.endswith(".dist-info/METADATA"))
        msg = Parser().parsestr(zf.read(meta_name).decode())
    headers: dict[str, list[str]] = {}
    for key, value in msg.items():
        headers.setdefault(key, []).append(value)
    return names, headers


def _entry_points(wheel: Path) -> configparser.ConfigParser:
    with zipfile.ZipFile(wheel) as zf:
        name = next(n for n in zf.namelist() if n.endswith(".dist-info/entry_points.txt"))
        parser = configparser.ConfigParser(delimiters=("=",))
        parser.optionxform = str  # type: ignore[assignment,method-assign]
        parser.read_string(zf.read(name).decode())
    return parser


def _unconditional_requirements(headers: dict[str, list[str]]) -> set[str]:
    """Requirement names (lower case, '_' -> '-') without an ``extra ==`` marker."""
    out = set()
    for req in headers.get("Requires-Dist", []):
        if "extra ==" in req.replace('"', "'").replace("extra=='", "extra == '"):
            continue
        name = req.split(";")[0].strip()
        for sep in "<>=!~[ (":
            name = name.split(sep)[0]
        out.add(name.lower().replace("_", "-"))
    return out


def test_core_wheel_contents(wheels: dict[str, Path]) -> None:
    names, headers = _metadata(wheels["kvcore"])
    assert headers["Name"] == ["kvcore"]
    assert "kvcore/__init__.py" in names
    assert "kvcore/py.typed" in names
    # every embedded HF config.json of the source tree is packed
    configs = sorted(p.name for p in (ROOT / "kvcore/models/configs").glob("*.json"))
    assert configs, "kvcore/models/configs holds no config"
    packed = sorted(Path(n).name for n in names
                    if n.startswith("kvcore/models/configs/") and n.endswith(".json"))
    assert packed == configs
    # nothing but the kvcore package and its dist-info
    tops = {n.split("/")[0] for n in names}
    assert tops == {"kvcore", next(t for t in tops if t.endswith(".dist-info"))}, tops
    assert _unconditional_requirements(headers) == {"pluggy", "importlib-metadata"}
    eps = _entry_points(wheels["kvcore"])
    assert eps["console_scripts"]["kvcore"].strip() == "kvcore.cli:main"


def test_core_wheel_torch_only_in_extras(wheels: dict[str, Path]) -> None:
    _, headers = _metadata(wheels["kvcore"])
    torch_reqs = [r for r in headers.get("Requires-Dist", []) if r.startswith("torch")]
    assert torch_reqs, "the core declares no torch extra"
    assert all("extra ==" in r for r in torch_reqs), torch_reqs
    extras = set(headers.get("Provides-Extra", []))
    assert {"cli", "torch", "test"} <= extras, extras


@pytest.mark.parametrize("name", PLUGINS)
def test_plugin_wheel_contents(wheels: dict[str, Path], name: str) -> None:
    names, headers = _metadata(wheels[name])
    assert headers["Name"] == [f"kvcore-{name}"]
    assert f"kvcore_{name}/__init__.py" in names
    assert f"kvcore_{name}/plugin.py" in names
    tops = {n.split("/")[0] for n in names}
    assert not any(t == "kvcore" or t == "tests" for t in tops), tops
    assert "kvcore" in _unconditional_requirements(headers)
    assert not {"torch", "triton", "numpy"} & _unconditional_requirements(headers)
    eps = _entry_points(wheels[name])
    assert dict(eps["kvcore.plugins"]) == {name: f"kvcore_{name}.plugin"}
