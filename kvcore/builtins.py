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


@hookimpl(specname="kvcore_layer_specs", wrapper=True, tryfirst=True)
def check_layer_specs(model_config: Any, cache_config: Any) -> Any:
    """Around every adapter (core or plugin): the one tensor-parallel rule
    (:func:`kvcore.models.adapters.check_tensor_parallel`) before any adapter runs, and
    the final answer checked (a dict of layer name -> KVCacheSpec, or None)."""
    from kvcore.models.config import ModelConfig
    from kvcore.plugins import check_layer_specs_result

    if isinstance(model_config, ModelConfig):
        from kvcore.models.adapters import check_tensor_parallel

        check_tensor_parallel(model_config,
                              getattr(cache_config, "tensor_parallel_size", 1) or 1)
    result = yield
    return check_layer_specs_result(result, "the model adapters")


@hookimpl
def kvcore_model_types() -> list[str]:
    try:
        from kvcore.models.adapters import CORE_MODEL_TYPES
    except ImportError:
        return []
    return list(CORE_MODEL_TYPES)
