"""A test-only state spec kind (``test_state``), importable by name from any test."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from kvcore.specs import KVCacheSpec, PlanContext


@dataclass(frozen=True, kw_only=True)
class StateSpec(KVCacheSpec):
    """A test-only recurrent state: a fixed page per request (like a Mamba state)."""

    kind: ClassVar[str] = "test_state"
    scales_with_block_size: ClassVar[bool] = False

    state_bytes: int
    blocks_per_request: int = 1

    @property
    def real_page_size_bytes(self) -> int:
        return self.state_bytes

    def max_num_blocks_per_req(self, ctx: PlanContext, max_len: int | None = None) -> int:
        return self.blocks_per_request
