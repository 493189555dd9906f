"""kvcore hook implementations of kvcore-turboquant (entry point `turboquant` in group kvcore.plugins)."""

from __future__ import annotations

from kvcore import hookimpl


@hookimpl
def kvcore_spec_types() -> list:
    return []
