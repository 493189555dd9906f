"""Tensor code of the core: paged K/V kernels, their torch references, allocation.

``import kvcore.ops`` does not import torch; each name below loads its module (and torch,
and triton for a Triton path) on first use.

================================  ======================================================
name                              what
================================  ======================================================
``reshape_and_cache``             write new tokens' K/V into paged caches (slot_mapping)
``gather_cache``                  read requests' K/V back through their block tables
``copy_blocks``                   copy whole blocks (forks)
``*_ref``                         the torch references (any device)
``paged_decode_attention_ref``    decode attention through a block table (reference)
``dense_attention_ref``           attention over contiguous K/V (reference)
``allocate_tensors``              a KVCacheConfig -> buffers and per-layer views
``attention_page_layout``         the byte layout of an attention page (no torch)
``use_triton``                    the dispatcher's choice for a tensor
================================  ======================================================

Every kernel entry point (these and the plugins') checks its arguments on the host
before any launch, on the reference and the Triton path alike (:mod:`kvcore.ops.checks`:
slot / block ids, ``seq_lens`` against the block table, scales, copy destinations,
index and K/V dtypes), raising :class:`kvcore.errors.KernelArgumentError`.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "reshape_and_cache": "kvcore.ops.cache",
    "reshape_and_cache_ref": "kvcore.ops.cache",
    "gather_cache": "kvcore.ops.cache",
    "gather_cache_ref": "kvcore.ops.cache",
    "copy_blocks": "kvcore.ops.cache",
    "copy_blocks_ref": "kvcore.ops.cache",
    "paged_decode_attention_ref": "kvcore.ops.attention",
    "dense_attention_ref": "kvcore.ops.attention",
    "allocate_tensors": "kvcore.ops.allocate",
    "AllocatedKVCache": "kvcore.ops.allocate",
    "LayerKVCache": "kvcore.ops.allocate",
    "attention_page_layout": "kvcore.ops.layout",
    "AttentionPageLayout": "kvcore.ops.layout",
    "SUPPORTED_KV_CACHE_DTYPES": "kvcore.ops.layout",
    "use_triton": "kvcore.ops._dispatch",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'kvcore.ops' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_EXPORTS))
