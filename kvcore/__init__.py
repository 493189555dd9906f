"""kvcore: lay out, size and manage the KV cache of LLM serving engines.

The flow: a model config -> per-layer :class:`KVCacheSpec` (through plugin adapters) ->
:func:`group_layers` -> :func:`plan` with a memory budget -> :class:`KVCacheConfig`
-> the runtime (:class:`KVCacheManager`) and kernels.  Planning never imports torch.
"""

from __future__ import annotations

__version__ = "0.1.0"

from typing import TYPE_CHECKING, Any

import kvcore.sweep  # noqa: E402,F401,I001  (the alias module first: `kvcore.sweep` stays the function)
from kvcore.deploy.sweep import sweep  # noqa: E402,I001  kvcore.sweep(...) -> rows
from kvcore.errors import (
    ConfigError,
    KVCoreError,
    MissingPluginError,
    NotEnoughMemoryError,
    PluginConflictError,
    PluginError,
    SpecError,
    SpecMergeError,
    UnknownDtypeError,
    UnknownKVCacheDtypeError,
    UnknownModelTypeError,
)

#: public name -> the module that defines it.  ``import kvcore`` loads only the errors
#: and the (stdlib-only) sweep module; each name below is imported on first use
#: (PEP 562), so ``import kvcore`` stays fast (benchmarks/bench_import.py) and the
#: planner loads only what it needs.
_LAZY: dict[str, str] = {
    "compute_budget": "kvcore.deploy.budget",
    "plan_on_gpu": "kvcore.deploy.budget",
    "dtype_size": "kvcore.dtypes",
    "normalize_dtype": "kvcore.dtypes",
    "GroupingResult": "kvcore.grouping",
    "group_layers": "kvcore.grouping",
    "hookimpl": "kvcore.hookspecs",
    "hookspec": "kvcore.hookspecs",
    "KVCacheConfig": "kvcore.kv_cache_config",
    "KVCacheGroupSpec": "kvcore.kv_cache_config",
    "KVCacheTensor": "kvcore.kv_cache_config",
    "CacheConfig": "kvcore.models.config",
    "ModelConfig": "kvcore.models.config",
    "load_model_config": "kvcore.models.config",
    "plan_model": "kvcore.deploy",
    "estimate_weights": "kvcore.deploy.weights",
    "plan": "kvcore.planning",
    "plan_from_specs_file": "kvcore.planning",
    "plan_to_dict": "kvcore.planning",
    "KVQuantMode": "kvcore.quant",
    "QuantScheme": "kvcore.quant",
    "SpecType": "kvcore.registry",
    "get_registry": "kvcore.registry",
    "KVCacheBlocks": "kvcore.runtime",
    "KVCacheManager": "kvcore.runtime",
    "Request": "kvcore.runtime",
    "block_tables": "kvcore.runtime.kernel_tables",
    "slot_mapping": "kvcore.runtime.kernel_tables",
    "state_indices": "kvcore.runtime.kernel_tables",
    "AttentionSpec": "kvcore.specs",
    "ChunkedLocalAttentionSpec": "kvcore.specs",
    "CrossAttentionSpec": "kvcore.specs",
    "EncoderOnlyAttentionSpec": "kvcore.specs",
    "FullAttentionSpec": "kvcore.specs",
    "KVCacheSpec": "kvcore.specs",
    "PlanContext": "kvcore.specs",
    "SinkFullAttentionSpec": "kvcore.specs",
    "SlidingWindowSpec": "kvcore.specs",
}


def __getattr__(name: str) -> Any:
    import importlib

    module = _LAZY.get(name)
    if module is None:
        # a submodule (kvcore.planning, kvcore.runtime ...) reached as an attribute
        if name.startswith("_") or not name.isidentifier():
            raise AttributeError(f"module 'kvcore' has no attribute {name!r}")
        try:
            return importlib.import_module(f"kvcore.{name}")
        except ModuleNotFoundError as exc:
            if exc.name != f"kvcore.{name}":
                raise
            raise AttributeError(f"module 'kvcore' has no attribute {name!r}") from None
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # later reads skip __getattr__
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))


if TYPE_CHECKING:  # the names, for type checkers and IDEs
    from kvcore.deploy import plan_model
    from kvcore.deploy.budget import compute_budget, plan_on_gpu
    from kvcore.deploy.weights import estimate_weights
    from kvcore.dtypes import dtype_size, normalize_dtype
    from kvcore.grouping import GroupingResult, group_layers
    from kvcore.hookspecs import hookimpl, hookspec
    from kvcore.kv_cache_config import KVCacheConfig, KVCacheGroupSpec, KVCacheTensor
    from kvcore.models.config import CacheConfig, ModelConfig, load_model_config
    from kvcore.planning import plan, plan_from_specs_file, plan_to_dict
    from kvcore.quant import KVQuantMode, QuantScheme
    from kvcore.registry import SpecType, get_registry
    from kvcore.runtime import KVCacheBlocks, KVCacheManager, Request
    from kvcore.runtime.kernel_tables import block_tables, slot_mapping, state_indices
    from kvcore.specs import (
        AttentionSpec,
        ChunkedLocalAttentionSpec,
        CrossAttentionSpec,
        EncoderOnlyAttentionSpec,
        FullAttentionSpec,
        KVCacheSpec,
        PlanContext,
        SinkFullAttentionSpec,
        SlidingWindowSpec,
    )

__all__ = [
    "__version__",
    # specs
    "KVCacheSpec",
    "AttentionSpec",
    "FullAttentionSpec",
    "SlidingWindowSpec",
    "ChunkedLocalAttentionSpec",
    "CrossAttentionSpec",
    "EncoderOnlyAttentionSpec",
    "SinkFullAttentionSpec",
    "PlanContext",
    # grouping and planning
    "group_layers",
    "GroupingResult",
    "plan",
    "plan_model",
    "plan_from_specs_file",
    "plan_to_dict",
    "KVCacheConfig",
    "KVCacheGroupSpec",
    "KVCacheTensor",
    # runtime
    "KVCacheManager",
    "block_tables",
    "slot_mapping",
    "state_indices",
    "KVCacheBlocks",
    "Request",
    # models
    "ModelConfig",
    "CacheConfig",
    "load_model_config",
    # dtypes and schemes
    "dtype_size",
    "normalize_dtype",
    "KVQuantMode",
    "QuantScheme",
    # plugins
    "hookimpl",
    "hookspec",
    "SpecType",
    "get_registry",
    # GPU budgets and sweeps (issue #16)
    "estimate_weights",
    "compute_budget",
    "plan_on_gpu",
    "sweep",
    # errors
    "KVCoreError",
    "ConfigError",
    "MissingPluginError",
    "NotEnoughMemoryError",
    "PluginConflictError",
    "PluginError",
    "SpecError",
    "SpecMergeError",
    "UnknownDtypeError",
    "UnknownKVCacheDtypeError",
    "UnknownModelTypeError",
]
