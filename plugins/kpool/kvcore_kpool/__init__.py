"""kvcore plugin kvcore-kpool: the k-pool indexer's per-request ring tail (kind
``kpool_tail``).

Public names: :class:`KPoolTailSpec`, :func:`kpool_ring_size`;
``kvcore_kpool.manager.KPoolTailManager`` (runtime, imported lazily);
``kvcore_kpool.kernels`` (tail write and pool compression; imports torch)."""

from kvcore_kpool.spec import KPoolTailSpec, kpool_ring_size

__version__ = "0.1.0"

__all__ = ["KPoolTailSpec", "kpool_ring_size", "__version__"]
