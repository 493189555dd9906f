"""One direction everywhere: specs, grouping, planning and the runtime never import the
GPU-fit package (kvcore.deploy), the simulator (kvcore.sim), the routing index
(kvcore.routing) or the vLLM bridge (kvcore_vllm).  Checked on the source (every import
statement, also inside functions), so a lazy import cannot slip through."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import kvcore

#: kvcore's own source: the checkout's, or the installed package's where tests/ runs as a
#: copy (tests/packaging)
ROOT = Path(kvcore.__file__).resolve().parent
#: the layers that must stay below deploy / sim / routing / the bridge
LOW = ["specs.py", "grouping.py", "planning.py", "serving.py", "kv_cache_config.py",
       "registry.py",
       "quant.py", "dtypes.py", "units.py", "errors.py", "hookspecs.py", "plugins.py",
       "builtins.py", "runtime", "models", "ops"]
HIGH = ("kvcore.deploy", "kvcore.sim", "kvcore.routing", "kvcore_vllm")
#: compatibility aliases of moved modules (they only re-export kvcore.deploy.*)
ALIASES = {"models/weights.py"}


def _files() -> list[Path]:
    out: list[Path] = []
    for name in LOW:
        p = ROOT / name
        out += sorted(p.rglob("*.py")) if p.is_dir() else [p]
    return [p for p in out if p.relative_to(ROOT).as_posix() not in ALIASES]


def _imports(path: Path) -> list[str]:
    names: list[str] = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.append(node.module)
            names += [f"{node.module}.{a.name}" for a in node.names]
    return names


@pytest.mark.parametrize("path", _files(), ids=lambda p: p.relative_to(ROOT).as_posix())
def test_low_layers_never_import_high_ones(path: Path) -> None:
    bad = [n for n in _imports(path) if n.startswith(HIGH) or n in {
        "kvcore.budget", "kvcore.gpus", "kvcore.sweep", "kvcore.models.weights"}]
    assert bad == [], f"{path.relative_to(ROOT)} imports {bad}"


def test_the_walk_sees_the_files() -> None:
    # the check above is vacuous if the walk finds nothing: the planner and runtime exist
    names = {p.relative_to(ROOT).as_posix() for p in _files()}
    assert {"planning.py", "grouping.py", "runtime/manager.py", "models/planner.py"} <= names


def test_errors_and_units_are_no_cycle() -> None:
    assert "kvcore.units" not in _imports(ROOT / "errors.py")


def test_old_paths_are_the_moved_modules() -> None:
    import kvcore.budget
    import kvcore.deploy.budget
    import kvcore.deploy.gpus
    import kvcore.deploy.weights
    import kvcore.gpus
    import kvcore.models.weights

    assert kvcore.budget is kvcore.deploy.budget
    assert kvcore.gpus is kvcore.deploy.gpus
    assert kvcore.models.weights is kvcore.deploy.weights
    assert callable(kvcore.sweep) and not isinstance(kvcore.sweep, type(kvcore))
