"""Runtime manager of the ``kpool_tail`` kind: one ring block per request.

The block is claimed at the request's first allocation (whatever its length), never
grown, never freed by a window, never cached, and released with the request.  The
group does not take part in prefix caching and does not limit hits
(``limits_prefix_hits`` False): the coordinator settles hits on the other groups alone
(a hit ends on an attention block boundary, which is a pool boundary, so the ring
starts empty).  Same behaviour as the reference's ``KpoolTailManager`` (GLM5-Next
on vLLM: "no-hit/no-prune fixed-one-block manager").
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from kvcore.runtime.block_pool import KVCacheBlock
from kvcore.runtime.managers import SingleTypeManager

__all__ = ["KPoolTailManager"]


class KPoolTailManager(SingleTypeManager):
    """Block tables of one ``kpool_tail`` group: exactly one block per request."""

    limits_prefix_hits = False

    def num_required_blocks(self, request: Any, num_tokens: int) -> int:
        """1: the ring, from the first allocation on."""
        return 1

    def find_longest_cache_hit(self, block_hashes: Sequence[bytes], max_length: int,
                               extra_tokens: int = 0) -> list[KVCacheBlock]:
        """No hits: the ring is not a function of the prefix."""
        return []

    def cache_blocks(self, request: Any, num_tokens: int) -> None:
        """Never caches."""
        return None
