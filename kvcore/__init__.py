"""kvcore: lay out, size and manage the KV cache of LLM serving engines.

The flow: a model config -> per-layer :class:`KVCacheSpec` (through plugin adapters) ->
:func:`group_layers` -> :func:`plan` with a memory budget -> :class:`KVCacheConfig`
-> the runtime (:class:`KVCacheManager`) and kernels.  Planning never imports torch.
"""

from __future__ import annotations

__version__ = "0.1.0"

from kvcore.budget import compute_budget, plan_on_gpu
from kvcore.dtypes import dtype_size, normalize_dtype
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
from kvcore.grouping import GroupingResult, group_layers
from kvcore.hookspecs import hookimpl, hookspec
from kvcore.kv_cache_config import KVCacheConfig, KVCacheGroupSpec, KVCacheTensor
from kvcore.models.config import CacheConfig, ModelConfig, load_model_config
from kvcore.models.planner import plan_model
from kvcore.models.weights import estimate_weights
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
from kvcore.sweep import sweep  # kvcore.sweep(...) -> rows (the function shadows the module)

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
