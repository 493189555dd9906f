"""The ``kpool_tail`` spec: one ring block per request for a k-pool indexer's tail.

A k-pool indexer (GLM5-Next style DSA indexer with ``index_kpool > 1``) stores one
compressed key per pool of ``kpool`` consecutive tokens.  Until a pool is complete its
raw keys and gate scores must be kept somewhere: that is the tail, a ring of
``ring_size`` slots per request, token ``pos`` in slot ``pos % ring_size``, with

    ring_size = kpool x next_pow2(ceil((kpool + num_speculative_tokens) / kpool))

slots: room for an incomplete pool (at most ``kpool - 1`` tokens) plus the tokens one
step adds (``1 + num_speculative_tokens``), rounded to whole pools and to a power of
two.  The ring lives in one block, claimed at the request's first allocation, never
grown or evicted, freed with the request (:class:`kvcore_kpool.manager.KPoolTailManager`).

Prefix caching: the tail's content depends on where the request is, not on a prefix
alone, so the spec opts out (``participates_in_prefix_caching`` False).  The hybrid
coordinator skips such groups when settling on a common hit, so the tail caps no hit;
a hit length is a multiple of the attention block size, which ``ring_size`` divides
(checked here), so a hit always ends on a pool boundary and the ring starts empty.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, ClassVar

from kvcore.dtypes import dtype_size, normalize_dtype
from kvcore.errors import SpecError
from kvcore.specs import KVCacheSpec, PlanContext

__all__ = ["KPoolTailSpec", "kpool_ring_size", "next_pow2"]


def next_pow2(n: int) -> int:
    """The smallest power of two >= n (n >= 1)."""
    return 1 << max(0, (n - 1).bit_length())


def kpool_ring_size(kpool: int, num_speculative_tokens: int = 0) -> int:
    """``kpool x next_pow2(ceil((kpool + num_speculative_tokens) / kpool))`` slots."""
    if kpool < 1 or num_speculative_tokens < 0:
        raise SpecError(f"kpool must be >= 1 and num_speculative_tokens >= 0, got "
                        f"kpool={kpool}, num_speculative_tokens={num_speculative_tokens}",
                        field="kpool")
    return kpool * next_pow2(-(-(kpool + num_speculative_tokens) // kpool))


def _check_int(obj: Any, name: str, minimum: int) -> None:
    value = getattr(obj, name)
    if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
        raise SpecError(f"KPoolTailSpec.{name} must be an int >= {minimum}, got {value!r}",
                        field=name, value=value)


@dataclass(frozen=True, kw_only=True)
class KPoolTailSpec(KVCacheSpec):
    """A per-request ring of raw indexer keys and gate scores (kind ``kpool_tail``).

    Attributes
    ----------
    block_size:
        The attention block size of the model (tokens); ``ring_size`` must divide it.
        The page does not depend on it (``scales_with_block_size`` False).
    kpool:
        Tokens per pool (``index_kpool`` of the config), >= 1.
    head_size:
        Channels of one indexer key (``index_head_dim``, 128 in GLM5-Next / DSA); the
        gate scores have as many channels (one softmax per channel).
    num_kv_heads:
        Indexer key heads (1 in DSA-style indexers).
    dtype:
        Element dtype of the raw keys; ``gate_dtype`` (None = ``dtype``) of the gate
        scores.
    num_speculative_tokens:
        Draft tokens verified per step (they enlarge the ring, see ``ring_size``).

    ``page_size_bytes = ring_size x num_kv_heads x head_size x (itemsize(dtype) +
    itemsize(gate_dtype))``; blocks per request: 1.

    Raises SpecError naming the field for a bad value, and naming both numbers when
    ``ring_size`` does not divide ``block_size``.
    """

    kind: ClassVar[str] = "kpool_tail"
    participates_in_prefix_caching: ClassVar[bool] = False
    scales_with_block_size: ClassVar[bool] = False

    kpool: int
    head_size: int = 128
    num_kv_heads: int = 1
    dtype: str = "bfloat16"
    gate_dtype: str | None = None
    num_speculative_tokens: int = 0

    def __post_init__(self) -> None:
        _check_int(self, "kpool", 1)
        _check_int(self, "head_size", 1)
        _check_int(self, "num_kv_heads", 1)
        _check_int(self, "num_speculative_tokens", 0)
        object.__setattr__(self, "dtype", normalize_dtype(self.dtype))
        if self.gate_dtype is not None:
            object.__setattr__(self, "gate_dtype", normalize_dtype(self.gate_dtype))
        super().__post_init__()
        ring = self.ring_size
        if self.block_size % ring:
            raise SpecError(
                f"kpool_tail ring size {ring} (kpool {self.kpool} x "
                f"{ring // self.kpool} pools for {self.num_speculative_tokens} "
                f"speculative tokens) does not divide the attention block size "
                f"{self.block_size}; use a block size that is a multiple of {ring}",
                field="block_size", ring_size=ring, block_size=self.block_size)

    @property
    def ring_size(self) -> int:
        """Slots of the ring (tokens), see :func:`kpool_ring_size`."""
        return kpool_ring_size(self.kpool, self.num_speculative_tokens)

    @property
    def storage_block_size(self) -> int:
        """Entries physically stored per block: the ring's slots."""
        return self.ring_size

    @property
    def real_page_size_bytes(self) -> int:
        gate = self.gate_dtype or self.dtype
        return (self.ring_size * self.num_kv_heads * self.head_size
                * (dtype_size(self.dtype) + dtype_size(gate)))

    def max_num_blocks_per_req(self, ctx: PlanContext, max_len: int | None = None) -> int:
        """1: the ring block, whatever the length."""
        return 1

    def as_full_attention(self) -> None:
        """None: a ring is not attention (it cannot be planned as full attention)."""
        return None

    def with_plan_context(self, ctx: PlanContext) -> KPoolTailSpec:
        """The ring sized for the plan's ``num_speculative_tokens`` when it exceeds the
        spec's own (e.g. a specs file planned with speculation); raises SpecError when
        the larger ring no longer divides ``block_size``."""
        n = getattr(ctx, "num_speculative_tokens", 0) or 0
        if n <= self.num_speculative_tokens:
            return self
        return dataclasses.replace(self, num_speculative_tokens=n)

    def with_attention_block_size(self, block_size: int) -> KPoolTailSpec:
        """The same ring with the model's attention block size (padding kept: the page
        does not change); raises SpecError when the ring does not divide it."""
        return dataclasses.replace(self, block_size=block_size)

    @classmethod
    def _always_serialized(cls) -> tuple[str, ...]:
        return ("dtype", "kpool")
