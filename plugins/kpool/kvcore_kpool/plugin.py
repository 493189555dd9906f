"""kvcore hook implementations of kvcore-kpool (entry point `kpool` in group kvcore.plugins)."""

from __future__ import annotations

from kvcore import hookimpl


@hookimpl
def kvcore_spec_types() -> list:
    return []
