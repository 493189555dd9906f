"""Builders shared by the runtime tests (KVCacheConfig without the planner)."""

from __future__ import annotations

from pathlib import Path

from kvcore.kv_cache_config import KVCacheConfig, KVCacheGroupSpec
from kvcore.specs import (
    CrossAttentionSpec,
    FullAttentionSpec,
    SlidingWindowSpec,
)

DATA = Path(__file__).parent / "data"


def full(block_size: int = 16) -> FullAttentionSpec:
    return FullAttentionSpec(block_size=block_size, num_kv_heads=2, head_size=64)


def swa(window: int, block_size: int = 16) -> SlidingWindowSpec:
    return SlidingWindowSpec(block_size=block_size, num_kv_heads=2, head_size=64,
                             sliding_window=window)


def cross(block_size: int = 16) -> CrossAttentionSpec:
    return CrossAttentionSpec(block_size=block_size, num_kv_heads=2, head_size=64)


def config(num_blocks: int, *specs) -> KVCacheConfig:
    """One group per spec (one layer each), ``num_blocks`` counting the null block."""
    groups = [KVCacheGroupSpec((f"layer.{i}",), s) for i, s in enumerate(specs)]
    return KVCacheConfig(num_blocks=num_blocks, kv_cache_tensors=(),
                         kv_cache_groups=tuple(groups))
