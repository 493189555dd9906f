"""kvcore's own spec types, kv_cache_dtypes and model adapters, registered through the
same hooks as any third-party plugin (plugin name ``core``, distribution ``kvcore``)."""

from __future__ import annotations

from typing import Any

from kvcore.hookspecs import hookimpl
from kvcore.quant import BUILTIN_SCHEMES, QuantScheme
from kvcore.registry import SpecType
from kvcore.specs import (
    ChunkedLocalAttentionSpec,
    CrossAttentionSpec,
    EncoderOnlyAttentionSpec,
    FullAttentionSpec,
    SinkFullAttentionSpec,
    SlidingWindowSpec,
)

_M = "kvcore.runtime.managers:"


@hookimpl
def kvcore_spec_types() -> list[SpecType]:
    return [
        SpecType(FullAttentionSpec, "full_attention", _M + "FullAttentionManager"),
        SpecType(SlidingWindowSpec, "sliding_window", _M + "SlidingWindowManager"),
        SpecType(ChunkedLocalAttentionSpec, "chunked_local_attention",
                 _M + "ChunkedLocalAttentionManager"),
        SpecType(CrossAttentionSpec, "cross_attention", _M + "CrossAttentionManager"),
        SpecType(EncoderOnlyAttentionSpec, "encoder_only_attention", None),
        SpecType(SinkFullAttentionSpec, "sink_full_attention",
                 _M + "SinkFullAttentionManager"),
    ]


@hookimpl
def kvcore_kv_cache_dtypes() -> list[QuantScheme]:
    return list(BUILTIN_SCHEMES)


@hookimpl
def kvcore_layer_specs(model_config: Any, cache_config: Any) -> dict[str, Any] | None:
    try:
        from kvcore.models.adapters import core_layer_specs
    except ImportError:  # models not built yet
        return None
    return core_layer_specs(model_config, cache_config)


@hookimpl
def kvcore_model_types() -> list[str]:
    try:
        from kvcore.models.adapters import CORE_MODEL_TYPES
    except ImportError:
        return []
    return list(CORE_MODEL_TYPES)
