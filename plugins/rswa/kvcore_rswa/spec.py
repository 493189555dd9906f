"""The ``rswa`` spec: full attention whose decode keys are limited to a window.

R-SWA (Reference Sliding Window Attention) visibility, for a request whose prompt holds
``P = num_prompt_tokens`` tokens and a query at absolute position ``q``::

    key position k is visible  iff  k <= q  and  (k < P  or  q - k < rswa_window)

so every prompt token (the "reference": image and text prompt of an OCR model) stays
visible to every later token, while a generated token sees only the last
``rswa_window`` generated positions (itself included).  This is the mask of the
reference implementation (vLLM's ``RSWASpec`` / ``rswa_mask_mod``: ``causal & (kv_idx <
prefix_len | abs_q - kv_idx < window)``).

The page is that of full attention (K and V per token per KV head).  What differs is
the runtime: :class:`kvcore_rswa.manager.RSWAManager` frees the blocks lying wholly
between the end of the prompt (rounded up to a block) and the start of the decode
window, so one request holds ``O(prompt + rswa_window)`` tokens of KV.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from kvcore.errors import SpecError, SpecMergeError
from kvcore.specs import FullAttentionSpec, PlanContext, cdiv

__all__ = ["RSWASpec", "rswa_visible", "rswa_kept_block_range"]


def rswa_visible(q: int, k: int, num_prompt_tokens: int, rswa_window: int) -> bool:
    """Whether the key at position ``k`` is visible to the query at position ``q``
    under R-SWA (positions are absolute token indices, 0-based)."""
    return k <= q and (k < num_prompt_tokens or q - k < rswa_window)


def rswa_kept_block_range(num_prompt_tokens: int, num_computed_tokens: int,
                          rswa_window: int, block_size: int) -> tuple[int, int]:
    """The gap ``[first, last)`` of block indices that no future query can see.

    ``first = cdiv(num_prompt_tokens, block_size)`` (the first block lying wholly
    after the prompt: the prompt's partial tail block is kept, since it holds prompt
    tokens); ``last = max(num_prompt_tokens, num_computed_tokens - rswa_window + 1)
    // block_size`` (the next query is at position ``num_computed_tokens`` and sees
    generated keys ``> num_computed_tokens - rswa_window``; every block ending at or
    before that start is invisible to it and to every later query).  Empty when
    ``last <= first``.
    """
    first = cdiv(num_prompt_tokens, block_size)
    window_start = max(num_prompt_tokens, num_computed_tokens - rswa_window + 1)
    return first, max(first, window_start // block_size)


@dataclass(frozen=True, kw_only=True)
class RSWASpec(FullAttentionSpec):
    """Full attention with R-SWA decode visibility (kind ``rswa``).

    Attributes
    ----------
    rswa_window:
        Generated tokens a generated token attends to (itself included), > 0.
        Every other field is :class:`kvcore.specs.FullAttentionSpec`'s:
        ``page_size_bytes = block_size x num_kv_heads x (K + V bytes per head)``.

    Prefix caching: the class opts in (``participates_in_prefix_caching`` True), but
    only for the prompt: KV of a prompt token is a function of the prefix (prompt
    tokens see the whole causal prefix), KV of a generated token is not (it saw only
    the window), so the manager never offers a block holding a generated token to the
    prefix cache.

    Blocks per request (planning): ``cdiv(max_len, block_size)``, the same as full
    attention, and this is tight, not just conservative: the prompt is never freed
    and a request of ``max_len`` tokens may be (almost) all prompt, in which case it
    holds every block while it prefills.  The saving is at run time, for long
    outputs: a request of prompt ``P`` holds at most ``cdiv(P, block_size) +
    cdiv(rswa_window - 1 + new_tokens, block_size) + 1`` blocks.

    Raises SpecError when ``rswa_window`` is not a positive int.
    """

    kind: ClassVar[str] = "rswa"

    rswa_window: int

    def __post_init__(self) -> None:
        value = self.rswa_window
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise SpecError(
                f"RSWASpec.rswa_window must be a positive int (generated tokens a "
                f"generated token attends to), got {value!r}", field="rswa_window",
                value=value)
        super().__post_init__()

    def max_num_blocks_per_req(self, ctx: PlanContext, max_len: int | None = None) -> int:
        """``cdiv(cdiv(max_len, dcp), block_size)``: full attention's count (see the
        class docstring for why this is also R-SWA's worst case)."""
        return super().max_num_blocks_per_req(ctx, max_len)

    def max_num_blocks_for(self, num_prompt_tokens: int, max_len: int,
                           max_new_tokens_per_step: int = 1) -> int:
        """Blocks one request holds at most at run time, given its prompt length.

        ``min(cdiv(max_len, block_size), cdiv(P, block_size) + cdiv(rswa_window - 1 +
        max_new_tokens_per_step, block_size) + 1)``: the prompt's blocks plus the
        window of the next query (``rswa_window - 1`` earlier keys plus the step's new
        tokens), which starts anywhere inside a block (+1).
        """
        full = cdiv(max_len, self.block_size)
        window = cdiv(self.rswa_window - 1 + max_new_tokens_per_step, self.block_size) + 1
        return min(full, cdiv(num_prompt_tokens, self.block_size) + window)

    def as_full_attention(self) -> FullAttentionSpec:
        """Full attention (blocks for every token) for a plan without the hybrid
        manager; the page and per-request blocks are unchanged."""
        return FullAttentionSpec(
            block_size=self.block_size, num_kv_heads=self.num_kv_heads,
            head_size=self.head_size, dtype=self.dtype, kv_cache_dtype=self.kv_cache_dtype,
            head_size_v=self.head_size_v, non_causal=self.non_causal)

    @classmethod
    def merge(cls, specs: list[Any]) -> Any:
        """Merge R-SWA specs; they must agree on every field, ``rswa_window`` included
        (raises SpecMergeError naming the differing fields)."""
        windows = {getattr(s, "rswa_window", None) for s in specs}
        if len(windows) > 1:
            raise SpecMergeError(
                f"R-SWA layers in one KV-cache group must share rswa_window, got "
                f"{sorted(windows, key=str)}", fields=["rswa_window"])
        return super().merge(specs)
