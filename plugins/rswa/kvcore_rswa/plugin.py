"""kvcore hook implementations of kvcore-rswa (entry point ``rswa`` in group
``kvcore.plugins``).

Registers the ``rswa`` kind (:class:`kvcore_rswa.spec.RSWASpec`, its own grouping kind,
runtime manager ``kvcore_rswa.manager:RSWAManager``, imported on first use) and the
adapter for configs with ``rswa_window``.  No module imported here imports torch.
"""

from __future__ import annotations

from typing import Any

from kvcore import hookimpl
from kvcore.registry import SpecType
from kvcore_rswa.spec import RSWASpec

MANAGER = "kvcore_rswa.manager:RSWAManager"


@hookimpl
def kvcore_spec_types() -> list[SpecType]:
    return [SpecType(RSWASpec, "rswa", MANAGER)]


@hookimpl(tryfirst=True)
def kvcore_layer_specs(model_config: Any, cache_config: Any) -> dict[str, Any] | None:
    # tryfirst: ``rswa_window`` is more specific than a model_type, so this adapter
    # answers before a family adapter (core or kvcore-mla) that would plan the same
    # decoder as plain full attention; it returns None for every other config.
    from kvcore_rswa.adapter import rswa_layer_specs

    return rswa_layer_specs(model_config, cache_config)


@hookimpl
def kvcore_model_types() -> list[str]:
    # served by config field (rswa_window), not by model_type: a deepseek_vl_v2 config
    # without rswa_window is not served, so listing it would mislead error messages
    return []
