"""kvcore inside vLLM 0.32.

* :func:`to_vllm_spec` / :func:`from_vllm_spec`, :func:`to_vllm_config` /
  :func:`from_vllm_config`: the spec and ``KVCacheConfig`` bridge
  (:mod:`kvcore_vllm.specs`);
* :func:`get_kv_cache_configs`: vLLM's planner signature, planned by kvcore
  (:mod:`kvcore_vllm.planner`);
* :class:`KVCacheManager`: a drop-in for vLLM's, backed by kvcore's runtime
  (:mod:`kvcore_vllm.manager`);
* :func:`residency_index_from_vllm`: a :class:`kvcore.routing.ResidencyIndex` that
  answers vLLM's own hit rule from vLLM's KV events (:mod:`kvcore_vllm.routing`);
* :func:`install` / :func:`uninstall`: make vLLM use them; the ``vllm.general_plugins``
  entry point does it when ``KVCORE_VLLM=1`` (:mod:`kvcore_vllm.plugin`).

Importing this package imports neither vLLM nor torch; each name loads its module on
first use.
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "KVCacheManager",
    "get_kv_cache_configs",
    "to_vllm_spec",
    "from_vllm_spec",
    "to_vllm_config",
    "from_vllm_config",
    "install",
    "uninstall",
    "installed",
    "SUPPORTED_VLLM",
    "residency_index_from_vllm",
]

_WHERE = {
    "KVCacheManager": "kvcore_vllm.manager",
    "get_kv_cache_configs": "kvcore_vllm.planner",
    "to_vllm_spec": "kvcore_vllm.specs",
    "from_vllm_spec": "kvcore_vllm.specs",
    "to_vllm_config": "kvcore_vllm.specs",
    "from_vllm_config": "kvcore_vllm.specs",
    "install": "kvcore_vllm.installer",
    "uninstall": "kvcore_vllm.installer",
    "installed": "kvcore_vllm.installer",
    "SUPPORTED_VLLM": "kvcore_vllm.installer",
    "residency_index_from_vllm": "kvcore_vllm.routing",
}


def __getattr__(name: str) -> Any:
    mod = _WHERE.get(name)
    if mod is None:
        raise AttributeError(f"module 'kvcore_vllm' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(mod), name)
