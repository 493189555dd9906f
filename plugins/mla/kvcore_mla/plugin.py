"""kvcore hook implementations of kvcore-mla (entry point ``mla`` in group
``kvcore.plugins``).

Registers the spec kinds ``mla_attention``, ``sliding_window_mla``, ``mla_indexer`` and
``hidden_state_cache``, the kv_cache_dtypes ``fp8_ds_mla`` and ``fp8_ds_mla_v4``, and the
adapters of :mod:`kvcore_mla.adapters`.  Imports no torch.
"""

from __future__ import annotations

from typing import Any

from kvcore import hookimpl
from kvcore.quant import QuantScheme
from kvcore.registry import SpecType

_M = "kvcore.runtime.managers:"


@hookimpl
def kvcore_spec_types() -> list[SpecType]:
    from kvcore_mla.specs import (
        HiddenStateCacheSpec,
        MLAAttentionSpec,
        MLAIndexerSpec,
        SlidingWindowMLASpec,
    )

    return [
        SpecType(MLAAttentionSpec, "mla_attention", _M + "FullAttentionManager"),
        SpecType(SlidingWindowMLASpec, "sliding_window_mla", _M + "SlidingWindowManager"),
        # the indexer and hidden-state caches share the MLA layers' group (same block
        # size, their own page size)
        SpecType(MLAIndexerSpec, "mla_indexer", _M + "FullAttentionManager",
                 grouping_base="mla_attention"),
        SpecType(HiddenStateCacheSpec, "hidden_state_cache", _M + "FullAttentionManager",
                 grouping_base="mla_attention"),
    ]


@hookimpl
def kvcore_kv_cache_dtypes() -> list[QuantScheme]:
    from kvcore_mla.quant import MLA_SCHEMES

    return list(MLA_SCHEMES)


@hookimpl
def kvcore_layer_specs(model_config: Any, cache_config: Any) -> dict[str, Any] | None:
    from kvcore_mla.adapters import mla_layer_specs

    return mla_layer_specs(model_config, cache_config)


@hookimpl
def kvcore_model_types() -> list[str]:
    from kvcore_mla.adapters import MLA_MODEL_TYPES

    return list(MLA_MODEL_TYPES)
