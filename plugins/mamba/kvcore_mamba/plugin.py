"""kvcore hook implementations of kvcore-mamba (entry point ``mamba`` in group
``kvcore.plugins``): the ``mamba`` spec kind with its runtime manager, and the adapters
of Mamba, Mamba2, Jamba, Nemotron-H, Qwen3-Next and Qwen3.5."""

from __future__ import annotations

from typing import Any

from kvcore import hookimpl
from kvcore.registry import SpecType
from kvcore_mamba.spec import MambaSpec


@hookimpl
def kvcore_spec_types() -> list[SpecType]:
    return [SpecType(MambaSpec, "mamba", "kvcore_mamba.manager:MambaManager")]


@hookimpl
def kvcore_layer_specs(model_config: Any, cache_config: Any) -> dict[str, Any] | None:
    from kvcore_mamba.adapters import mamba_layer_specs

    return mamba_layer_specs(model_config, cache_config)


@hookimpl
def kvcore_model_types() -> list[str]:
    from kvcore_mamba.adapters import MODEL_TYPES

    return list(MODEL_TYPES)
