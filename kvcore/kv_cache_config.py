"""Plain data produced by grouping and planning, consumed by the runtime and kernels."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from kvcore.specs import KVCacheSpec

__all__ = ["KVCacheGroupSpec", "KVCacheTensor", "KVCacheConfig"]


@dataclass(frozen=True)
class KVCacheGroupSpec:
    """Layers that share one block table.

    Attributes
    ----------
    layer_names:
        The group's layers, in layer order.
    spec:
        The merged spec of the group (for a packed group of layers with different page
        sizes, the first layer's spec: it carries the kind, block size and windows the
        runtime manager needs).
    layer_specs:
        Per-layer specs when the layers' pages differ (a packed group); None when every
        layer has ``spec``.
    """

    layer_names: tuple[str, ...]
    spec: KVCacheSpec
    layer_specs: tuple[KVCacheSpec, ...] | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "layer_names", tuple(self.layer_names))
        if self.layer_specs is not None:
            object.__setattr__(self, "layer_specs", tuple(self.layer_specs))
            assert len(self.layer_specs) == len(self.layer_names)

    @property
    def kind(self) -> str:
        return self.spec.kind

    @property
    def block_size(self) -> int:
        return self.spec.block_size

    @property
    def is_packed(self) -> bool:
        return self.layer_specs is not None

    def spec_of(self, layer_name: str) -> KVCacheSpec:
        """The spec of one layer of the group."""
        if self.layer_specs is None:
            return self.spec
        return self.layer_specs[self.layer_names.index(layer_name)]

    @property
    def page_size_bytes(self) -> int:
        """Bytes one block id takes per layer; for a packed group, across the group."""
        if self.layer_specs is None:
            return self.spec.page_size_bytes
        return sum(s.page_size_bytes for s in self.layer_specs)

    @property
    def bytes_per_block(self) -> int:
        """Bytes one block id of this group takes across all of its layers."""
        if self.layer_specs is None:
            return self.spec.page_size_bytes * len(self.layer_names)
        return self.page_size_bytes

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "type": self.kind,
            "layer_names": list(self.layer_names),
            "block_size": self.block_size,
            "page_size_bytes": self.page_size_bytes,
            "spec": self.spec.to_dict(),
        }
        if self.layer_specs is not None:
            out["layer_specs"] = [s.to_dict() for s in self.layer_specs]
        return out


@dataclass(frozen=True)
class KVCacheTensor:
    """One KV-cache buffer (or a view into a shared one).

    Attributes
    ----------
    size:
        Bytes of the buffer.
    shared_by:
        Layer names whose caches live in it (one layer of each group, which never use
        the same block id at the same time).
    offset:
        Byte offset of this layer's page inside a block for a block-outermost layout
        (0 otherwise).
    block_stride:
        Bytes from block i to block i+1 in the buffer (the page size for the default
        layer-outermost layout; the bytes of a whole block id for a block-outermost one).

    In a block-outermost layout every entry is a view into ONE buffer of
    ``num_blocks x block_stride`` bytes (layers of different groups overlap, as they
    do not use a block id at the same time); ``size`` is then the bytes the layer's
    pages span, and the sizes add up to more than the buffer.  The plan's
    ``kv_cache_memory_bytes_used`` gives the real total.
    """

    size: int
    shared_by: tuple[str, ...]
    offset: int = 0
    block_stride: int = 0

    def __post_init__(self) -> None:
        object.__setattr__(self, "shared_by", tuple(self.shared_by))

    def to_dict(self) -> dict[str, Any]:
        return {"size": self.size, "shared_by": list(self.shared_by),
                "offset": self.offset, "block_stride": self.block_stride}


@dataclass(frozen=True)
class KVCacheConfig:
    """A planned KV cache: blocks, tensors and groups, plus what they mean for users.

    ``num_blocks`` counts the null block (block 0, never handed out).  Sizes in bytes,
    lengths in tokens.  The capacity fields are None when no memory budget was given.
    """

    num_blocks: int | None
    kv_cache_tensors: tuple[KVCacheTensor, ...]
    kv_cache_groups: tuple[KVCacheGroupSpec, ...]
    max_model_len: int = 0
    bytes_per_block: int = 0
    kv_cache_layout: str = "LBNHC"
    stats: dict[str, Any] = field(default_factory=dict, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "kv_cache_tensors", tuple(self.kv_cache_tensors))
        object.__setattr__(self, "kv_cache_groups", tuple(self.kv_cache_groups))

    @property
    def groups(self) -> tuple[KVCacheGroupSpec, ...]:
        return self.kv_cache_groups

    def __getattr__(self, name: str) -> Any:
        # plan statistics (max_concurrency, kv_cache_capacity_tokens, ...) as attributes
        stats = self.__dict__.get("stats")
        if stats is not None and name in stats:
            return stats[name]
        raise AttributeError(name)
