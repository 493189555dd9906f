"""kvcore hook implementations of kvcore-turboquant (entry point ``turboquant`` in the
group ``kvcore.plugins``): the ``turboquant_full_attention`` spec kind and the
``turboquant_*`` kv_cache_dtypes.  Imports neither torch nor triton."""

from __future__ import annotations

from kvcore import hookimpl
from kvcore.quant import QuantScheme
from kvcore.registry import SpecType
from kvcore_turboquant.schemes import all_schemes, explain_invalid_name
from kvcore_turboquant.spec import TurboQuantFullAttentionSpec


@hookimpl
def kvcore_spec_types() -> list[SpecType]:
    return [SpecType(TurboQuantFullAttentionSpec, "turboquant_full_attention",
                     "kvcore.runtime.managers:FullAttentionManager",
                     grouping_base="full_attention")]


@hookimpl
def kvcore_kv_cache_dtypes() -> list[QuantScheme]:
    return all_schemes()


@hookimpl
def kvcore_explain_kv_cache_dtype(name: str) -> str | None:
    return explain_invalid_name(name)
