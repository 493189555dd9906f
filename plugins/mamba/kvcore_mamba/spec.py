"""The ``mamba`` spec kind: a recurrent state per request (Mamba1/2, gated DeltaNet, KDA,
linear attention), not K/V per token.

One block of a ``mamba`` layer holds one whole state: every state tensor of the layer
(e.g. the conv window and the SSM state) for one point of the sequence.  Its page is the
sum of the state bytes, ``sum(prod(shape) x itemsize(dtype))``, and does not grow with
``block_size`` (``scales_with_block_size = False``); page-size unification of a hybrid
model pads it (``page_size_padded``).  Formula and modes follow vLLM v1
(``vllm/v1/kv_cache_interface.py`` ``MambaSpec``, ``max_memory_usage_bytes``).

``mamba_cache_mode``
    ``none``   one live state per request, plus one per speculative token; no prefix
               caching.  ``block_size`` is a bound on the request length (vLLM sets it to
               ``max_model_len``), so one block covers the whole request.
    ``align``  prefix caching; the block table is indexed by token position with the
               attention block size, states are checkpointed at block boundaries where a
               prefill chunk ends; 2 + speculative blocks are resident per request (the
               running state and the last checkpoint).
    ``all``    every block boundary keeps its state: one block per ``block_size`` tokens,
               so any block-aligned prefix can hit.  The SSM kernel materialises a state
               inside a prefill chunk only every ``mamba_chunk_size`` tokens, so the block
               size must be a multiple of it (``block_size_alignment``; the planner rounds
               block sizes up to it).  vLLM 0.32 has no ``all`` mode
               (``MambaCacheMode = Literal["align", "none"]``).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any, ClassVar

from kvcore.dtypes import dtype_size, normalize_dtype
from kvcore.errors import SpecError, UnknownDtypeError
from kvcore.specs import MAMBA_CACHE_MODES, KVCacheSpec, PlanContext, cdiv

__all__ = ["MambaSpec", "MAMBA_CACHE_MODES"]


@dataclass(frozen=True, kw_only=True)
class MambaSpec(KVCacheSpec):
    """Recurrent state of one layer.

    Attributes
    ----------
    block_size:
        Tokens per block.  ``none`` mode: a bound on the request length (one block per
        request; vLLM uses ``max_model_len``).  ``align`` / ``all``: the attention block
        size of the model (the block table is indexed by position; grouping sets it
        through :meth:`with_attention_block_size`).
    shapes:
        One shape per state tensor of this layer on one tensor-parallel rank, e.g.
        ``((d_conv - 1, conv_dim), (n_heads, head_dim, d_state))`` for Mamba2 (see
        :mod:`kvcore_mamba.shapes`).  Elements, not bytes.
    dtypes:
        One dtype name per state tensor (``"bfloat16"``, ``"float32"``, ...).
    mamba_cache_mode:
        ``none`` | ``align`` | ``all`` (module docstring).
    num_speculative_blocks:
        Extra state blocks per request for speculative decoding (one per draft token;
        vLLM sets it to ``num_speculative_tokens``).
    mamba_chunk_size:
        Tokens per chunk of the layer's chunked SSM scan (Mamba2 / SSD: the config's
        ``chunk_size`` or ``mamba_chunk_size``, vLLM ``ModelConfig.get_mamba_chunk_size``),
        or None when unknown.  Inside a prefill chunk the kernel materialises a state
        only at chunk ends, counted from the prefill chunk's start (vLLM's
        ``prefill_checkpoint_alignment`` rule, ``(position - query_start) % alignment ==
        0``).  In ``all`` mode the block size must be a multiple of it
        (:attr:`block_size_alignment`), and the runtime trusts a state at a block
        boundary inside a prefill chunk only where both counts meet; with None it
        trusts only states where a chunk ends.
    page_size_padded:
        Bytes of a padded page (page-size unification), >= the real state bytes.

    Raises
    ------
    SpecError
        A shape that is empty or holds a non-positive int, ``dtypes`` of another length
        than ``shapes``, an unknown dtype or mode, a negative ``num_speculative_blocks``,
        a ``mamba_chunk_size`` that is not a positive int or None.  A ``block_size`` that
        is not a multiple of :attr:`block_size_alignment` is accepted here (the planner
        rounds it up, and drops a layout whose attention block size would break it);
        :meth:`check_block_size` and the runtime manager refuse it.
    """

    kind: ClassVar[str] = "mamba"
    scales_with_block_size: ClassVar[bool] = False

    shapes: tuple[tuple[int, ...], ...]
    dtypes: tuple[str, ...]
    mamba_cache_mode: str = "none"
    num_speculative_blocks: int = 0
    mamba_chunk_size: int | None = None

    def __post_init__(self) -> None:
        shapes = self.shapes
        if isinstance(shapes, list):
            shapes = tuple(shapes)
        if not isinstance(shapes, tuple) or not shapes:
            raise SpecError(f"MambaSpec.shapes must be a non-empty tuple of shapes, got "
                            f"{self.shapes!r}", field="shapes", value=repr(self.shapes))
        norm_shapes = []
        for shape in shapes:
            if not isinstance(shape, (tuple, list)) or not shape or not all(
                    isinstance(d, int) and not isinstance(d, bool) and d > 0
                    for d in shape):
                raise SpecError(
                    f"MambaSpec.shapes: each shape must be a non-empty tuple of positive "
                    f"ints, got {shape!r}", field="shapes", value=repr(shape))
            norm_shapes.append(tuple(shape))
        object.__setattr__(self, "shapes", tuple(norm_shapes))
        dtypes = self.dtypes
        if isinstance(dtypes, (str, bytes)) or not isinstance(dtypes, (tuple, list)):
            raise SpecError(f"MambaSpec.dtypes must be a tuple of dtype names, got "
                            f"{dtypes!r}", field="dtypes", value=repr(dtypes))
        if len(dtypes) != len(self.shapes):
            raise SpecError(
                f"MambaSpec.dtypes has {len(dtypes)} entries but shapes has "
                f"{len(self.shapes)}; give one dtype per state tensor", field="dtypes")
        try:
            object.__setattr__(self, "dtypes", tuple(normalize_dtype(d) for d in dtypes))
        except UnknownDtypeError as exc:
            raise SpecError(f"MambaSpec.dtypes: {exc}", field="dtypes") from exc
        if self.mamba_cache_mode not in MAMBA_CACHE_MODES:
            raise SpecError(
                f"MambaSpec.mamba_cache_mode {self.mamba_cache_mode!r} is not one of "
                f"{', '.join(MAMBA_CACHE_MODES)}", field="mamba_cache_mode",
                value=self.mamba_cache_mode)
        n = self.num_speculative_blocks
        if not isinstance(n, int) or isinstance(n, bool) or n < 0:
            raise SpecError(f"MambaSpec.num_speculative_blocks must be an int >= 0, got "
                            f"{n!r}", field="num_speculative_blocks", value=repr(n))
        c = self.mamba_chunk_size
        if c is not None and (not isinstance(c, int) or isinstance(c, bool) or c <= 0):
            raise SpecError(f"MambaSpec.mamba_chunk_size must be a positive int (tokens) or "
                            f"None, got {c!r}", field="mamba_chunk_size", value=repr(c))
        super().__post_init__()

    @property
    def participates_in_prefix_caching(self) -> bool:  # type: ignore[override]
        """False in ``none`` mode (one running state, no checkpoint to resume from: the
        runtime then turns prefix caching off for the whole model), True otherwise."""
        return self.mamba_cache_mode != "none"

    @property
    def block_size_alignment(self) -> int:  # type: ignore[override]
        """``mamba_chunk_size`` in ``all`` mode (a state must exist at every block
        boundary), else 1: ``align`` mode caches states only where a prefill chunk
        ends, which any block size allows (vLLM 0.32 splits the SSM chunks there,
        ``mamba_attn._compute_chunk_metadata``), and ``none`` caches none."""
        if self.mamba_cache_mode == "all" and self.mamba_chunk_size:
            return self.mamba_chunk_size
        return 1

    # ---- sizes -------------------------------------------------------------------
    @property
    def state_bytes(self) -> tuple[int, ...]:
        """Bytes of each state tensor: ``prod(shape) x itemsize(dtype)``."""
        return tuple(math.prod(s) * dtype_size(d) for s, d in zip(self.shapes, self.dtypes))

    @property
    def real_page_size_bytes(self) -> int:
        """Sum of the state bytes of one block (vLLM ``MambaSpec.page_size_bytes``)."""
        return sum(self.state_bytes)

    @property
    def bytes_per_token(self) -> float:
        return 0.0

    def max_num_blocks_per_req(self, ctx: PlanContext, max_len: int | None = None) -> int:
        """Blocks one request needs: ``none`` 1 + speculative, ``align`` 2 + speculative,
        ``all`` cdiv(max_len, block_size) + speculative (vLLM
        ``MambaSpec.max_memory_usage_bytes``).  The spec's own mode decides."""
        if self.mamba_cache_mode == "all":
            n = ctx.max_model_len if max_len is None else max_len
            return cdiv(n, self.block_size) + self.num_speculative_blocks
        if self.mamba_cache_mode == "align":
            return 2 + self.num_speculative_blocks
        return 1 + self.num_speculative_blocks

    # ---- derived specs --------------------------------------------------------------
    def as_full_attention(self) -> KVCacheSpec | None:
        return None

    def with_attention_block_size(self, block_size: int) -> MambaSpec:
        """In ``align`` / ``all`` mode the block table is indexed by token position with
        the attention block size, so the state block takes it (padding kept); in
        ``none`` mode the spec is returned unchanged."""
        if self.mamba_cache_mode == "none" or block_size == self.block_size:
            return self
        return dataclasses.replace(self, block_size=block_size)

    def check_block_size(self, block_size: int | None = None) -> None:
        """Raise :class:`~kvcore.errors.SpecError` when ``block_size`` (default: the
        spec's) is not a multiple of :attr:`block_size_alignment` (``all`` mode: the SSM
        kernel has no state at such block boundaries)."""
        bs = self.block_size if block_size is None else block_size
        align = self.block_size_alignment
        if bs % align:
            raise SpecError(
                f"MambaSpec block_size {bs} is not a multiple of mamba_chunk_size "
                f"{align}: in mamba_cache_mode 'all' the SSM kernel materialises states "
                f"only every {align} tokens, so every block boundary must fall on one "
                f"(valid: a multiple of {align}, e.g. {-(-bs // align) * align})",
                field="block_size", value=bs, mamba_chunk_size=align)

    def with_plan_context(self, ctx: PlanContext) -> MambaSpec:
        """Take the plan's options: a plan-wide ``mamba_cache_mode`` of ``align`` or
        ``all`` applies to a state left at ``none`` (a specs file may set the mode only
        in its options), the plan's speculative tokens add state blocks, and in ``none``
        mode the block size is ``max_model_len`` (one state block covers the request);
        in ``all`` mode a block size that is not a multiple of ``mamba_chunk_size`` is
        rounded up to one (800 -> 1,024 with 256-token chunks)."""
        spec = self
        if ctx.mamba_cache_mode != "none" and spec.mamba_cache_mode == "none":
            spec = spec.with_mode(ctx.mamba_cache_mode)
        if ctx.num_speculative_tokens and not spec.num_speculative_blocks:
            spec = spec.with_mode(spec.mamba_cache_mode,
                                  num_speculative_blocks=ctx.num_speculative_tokens)
        if spec.mamba_cache_mode == "none" and spec.block_size != ctx.max_model_len \
                and ctx.max_model_len > 0:
            spec = spec.with_mode("none", block_size=ctx.max_model_len)
        align = spec.block_size_alignment
        if spec.block_size % align:  # all mode: round up to a multiple of the SSM chunk
            spec = spec.with_mode(spec.mamba_cache_mode,
                                  block_size=-(-spec.block_size // align) * align)
        return spec

    def with_mode(self, mamba_cache_mode: str, num_speculative_blocks: int | None = None,
                  block_size: int | None = None) -> MambaSpec:
        """The same state with another cache mode (and optionally speculative blocks and
        block size); padding kept."""
        kw: dict[str, Any] = {"mamba_cache_mode": mamba_cache_mode}
        if num_speculative_blocks is not None:
            kw["num_speculative_blocks"] = num_speculative_blocks
        if block_size is not None:
            kw["block_size"] = block_size
        return dataclasses.replace(self, **kw)
