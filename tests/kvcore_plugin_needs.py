"""Which embedded models the installed plugin distributions can plan.

The core suite also runs in a venv with only the core installed (tests/packaging): a test
that plans an embedded model served by a plugin calls :func:`skip_unless_served` (or
filters its parameters with :func:`served`) instead of failing there."""

from __future__ import annotations

from functools import cache
from importlib.metadata import PackageNotFoundError, distribution

import pytest


@cache
def missing_distributions(name: str) -> tuple[str, ...]:
    """The plugin distributions embedded model ``name`` needs that are not installed."""
    from kvcore.models import load_model_config
    from kvcore.registry import KNOWN_PLUGIN_MODEL_TYPES

    model = load_model_config(name)
    need: list[str] = []
    for mt in (model.model_type, model.text_model_type):
        need += KNOWN_PLUGIN_MODEL_TYPES.get(mt or "", ())
    missing = []
    for dist in dict.fromkeys(need):
        try:
            distribution(dist)
        except PackageNotFoundError:
            missing.append(dist)
    return tuple(missing)


def skip_unless_served(name: str) -> None:
    """Skip the calling test when model ``name`` needs a plugin that is not installed."""
    missing = missing_distributions(name)
    if missing:
        pytest.skip(f"{name} needs {', '.join(missing)} (not installed)")


def served(names):
    """The names of ``names`` whose plugins are installed."""
    return [n for n in names if not missing_distributions(n)]
