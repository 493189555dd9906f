"""Runtime manager of the ``rswa`` kind: full attention that frees the decode gap.

For a request with ``P`` prompt tokens, after ``n`` computed tokens (the next query is
at position ``n``), the blocks of indices in ``[cdiv(P, block_size), max(P, n -
rswa_window + 1) // block_size)`` hold only generated tokens that no present or future
query can see (:func:`kvcore_rswa.spec.rswa_kept_block_range`).  Before each allocation
they are returned to the pool and replaced by the null block in the block table, so
block indices keep their meaning and the kernel reads the table unchanged.  Kept: every
prompt block (the partial tail block too: it holds prompt tokens) and the window's
blocks.  A request thus holds at most ``cdiv(P, B) + cdiv(rswa_window - 1 +
new_tokens, B) + 1`` blocks.  The rule is that of vLLM's ``RSWAManager`` (which keeps
one more token: ``n - rswa_window``).

Prefix caching: only blocks wholly inside the prompt are cached (their KV is a function
of the prefix); a block holding a generated token never is.  Hits are full attention's
(leading cached blocks).
"""

from __future__ import annotations

from typing import Any

from kvcore.runtime.block_pool import KVCacheBlock
from kvcore.runtime.managers import FullAttentionManager
from kvcore_rswa.spec import rswa_kept_block_range

__all__ = ["RSWAManager"]


class RSWAManager(FullAttentionManager):
    """Block tables of one ``rswa`` group (see the module docstring).

    The prompt length of each request is read from ``request.num_prompt_tokens`` at its
    first allocation (a request object without it is treated as all prompt: nothing is
    freed and everything may be cached, i.e. plain full attention).
    """

    skips_blocks = True

    def __init__(self, spec: Any, block_pool: Any, group_id: int, **kw: Any) -> None:
        super().__init__(spec, block_pool, group_id, **kw)
        self.rswa_window: int = spec.rswa_window
        self.num_prompt_tokens: dict[str, int | None] = {}

    def _prompt_len(self, request_id: str) -> int | None:
        return self.num_prompt_tokens.get(request_id)

    def _gap(self, request_id: str, num_computed_tokens: int) -> tuple[int, int]:
        p = self._prompt_len(request_id)
        if p is None:
            return 0, 0
        table = self.req_to_blocks.get(request_id)
        if not table:
            return 0, 0
        first, last = rswa_kept_block_range(p, num_computed_tokens, self.rswa_window,
                                            self.block_size)
        return first, min(last, len(table))

    def allocate_new_blocks(self, request: Any, num_tokens: int) -> list[KVCacheBlock]:
        rid = request.request_id
        if rid not in self.num_prompt_tokens:
            p = getattr(request, "num_prompt_tokens", None)
            self.num_prompt_tokens[rid] = None if p is None else int(p)
        return super().allocate_new_blocks(request, num_tokens)

    def skipped_block_range(self, request_id: str, num_computed_tokens: int
                            ) -> tuple[int, int]:
        """The gap between the prompt's last block and the decode window; the base
        class frees it tail first and puts the null block in its place."""
        return self._gap(request_id, num_computed_tokens)

    def cache_blocks(self, request: Any, num_tokens: int) -> None:
        """Cache only blocks wholly inside the prompt."""
        p = self._prompt_len(request.request_id)
        if p is not None and num_tokens > p:
            num_tokens = p
        super().cache_blocks(request, num_tokens)

    def max_cache_hit_tokens(self, request: Any) -> int | None:
        """Only blocks wholly inside a prompt hold K/V that the prefix alone determines,
        so a request (a resumed one included, whose token list already holds its own
        output) never hits past its own prompt's last whole block."""
        p = getattr(request, "num_prompt_tokens", None)
        if p is None:
            return None
        return int(p) // self.block_size * self.block_size

    def free(self, request_id: str) -> None:
        self.num_prompt_tokens.pop(request_id, None)
        super().free(request_id)
