"""The runtime: block pool with prefix caching, per-kind managers, coordinators and
:class:`KVCacheManager` (docs/DESIGN.md section 7).  Imports no torch."""

from __future__ import annotations

from kvcore.runtime.block_pool import (
    AllBlocksCleared,
    BlockPool,
    BlockRemoved,
    BlockStored,
    FreeBlockQueue,
    KVCacheBlock,
)
from kvcore.runtime.coordinator import (
    HybridCoordinator,
    KVCacheCoordinator,
    NoPrefixCacheCoordinator,
    UnitaryCoordinator,
    make_coordinator,
)
from kvcore.runtime.hashing import (
    ROOT_HASH,
    BlockHasher,
    Request,
    block_extra_keys,
    get_hash_function,
    hash_block_tokens,
)
from kvcore.runtime.kernel_tables import (
    NULL_BLOCK_KERNEL_ID,
    block_table_ids,
    block_tables,
    request_block_tables,
    slot_mapping,
    state_indices,
)
from kvcore.runtime.manager import KVCacheBlocks, KVCacheManager, PrefixCacheStats
from kvcore.runtime.managers import (
    ChunkedLocalAttentionManager,
    CrossAttentionManager,
    FullAttentionManager,
    SingleTypeManager,
    SinkFullAttentionManager,
    SlidingWindowManager,
)

__all__ = [
    "KVCacheManager",
    "KVCacheBlocks",
    "PrefixCacheStats",
    "Request",
    "BlockHasher",
    "ROOT_HASH",
    "hash_block_tokens",
    "block_extra_keys",
    "get_hash_function",
    "BlockPool",
    "KVCacheBlock",
    "FreeBlockQueue",
    "BlockStored",
    "BlockRemoved",
    "AllBlocksCleared",
    "SingleTypeManager",
    "FullAttentionManager",
    "SlidingWindowManager",
    "ChunkedLocalAttentionManager",
    "CrossAttentionManager",
    "SinkFullAttentionManager",
    "KVCacheCoordinator",
    "NoPrefixCacheCoordinator",
    "UnitaryCoordinator",
    "HybridCoordinator",
    "make_coordinator",
    "NULL_BLOCK_KERNEL_ID",
    "block_table_ids",
    "block_tables",
    "slot_mapping",
    "state_indices",
    "request_block_tables",
]
