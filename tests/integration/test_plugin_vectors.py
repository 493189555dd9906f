"""Planner vectors whose layers are of plugin kinds (MLA, Mamba): they need the core plus
the plugin distribution; skipped when the plugin is not installed."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent.parent))
from test_planner_vectors import VECTORS, check_vector, is_core, load  # noqa: E402

PROVIDER = {"mla_attention": "kvcore_mla", "sliding_window_mla": "kvcore_mla",
            "mla_indexer": "kvcore_mla", "mamba": "kvcore_mamba"}


def needed(vector: dict) -> set[str]:
    return {PROVIDER.get(layer["type"], "?") for layer in vector["input"]["layers"].values()
            if layer["type"] in PROVIDER}


@pytest.mark.parametrize("path", [p for p in VECTORS if not is_core(load(p))],
                         ids=lambda p: p.stem)
def test_plugin_vector(path):
    vector = load(path)
    for module in needed(vector):
        if importlib.util.find_spec(module) is None:
            pytest.skip(f"needs {module.replace('_', '-')}")
    check_vector(vector)
