"""kvcore hook implementations of kvcore-mla (entry point `mla` in group kvcore.plugins)."""

from __future__ import annotations

from kvcore import hookimpl


@hookimpl
def kvcore_spec_types() -> list:
    return []
