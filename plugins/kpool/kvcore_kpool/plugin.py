"""kvcore hook implementations of kvcore-kpool (entry point ``kpool`` in group
``kvcore.plugins``).

Registers the ``kpool_tail`` kind (:class:`kvcore_kpool.spec.KPoolTailSpec`, its own
grouping kind, runtime manager ``kvcore_kpool.manager:KPoolTailManager`` imported on
first use) and wraps the model adapters to add a tail beside each indexer of a config
with ``index_kpool`` (:mod:`kvcore_kpool.adapter`).  Nothing here imports torch.
"""

from __future__ import annotations

from collections.abc import Generator
from typing import Any

from kvcore import hookimpl
from kvcore.registry import SpecType
from kvcore_kpool.spec import KPoolTailSpec

MANAGER = "kvcore_kpool.manager:KPoolTailManager"


@hookimpl
def kvcore_spec_types() -> list[SpecType]:
    return [SpecType(KPoolTailSpec, "kpool_tail", MANAGER)]


@hookimpl(wrapper=True)
def kvcore_layer_specs(model_config: Any, cache_config: Any
                       ) -> Generator[None, Any, dict[str, Any] | None]:
    # a wrapper: the family adapter answers first, the tails are added to its answer
    result = yield
    from kvcore_kpool.adapter import add_kpool_tails

    return add_kpool_tails(model_config, cache_config, result)


@hookimpl
def kvcore_model_types() -> list[str]:
    # served by config field (index_kpool) on top of any family adapter
    return []
