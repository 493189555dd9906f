"""The ``turboquant_full_attention`` spec kind: full attention whose K and V are stored
TurboQuant-packed, one byte slot per token per KV head.

``page_size_bytes = block_size x num_kv_heads x slot_bytes`` with ``slot_bytes = key
bytes + value bytes`` rounded up to even (vLLM 0.32's ``slot_size_aligned``) from
:mod:`kvcore_turboquant.schemes` (the same formula as the
core's :class:`~kvcore.specs.AttentionSpec`, with a TurboQuant ``kv_cache_dtype``).  The
kind is managed by the core's full-attention manager and groups with ``full_attention``
layers of the same page size.  No torch import here.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from kvcore.errors import SpecError
from kvcore.specs import FullAttentionSpec
from kvcore_turboquant.schemes import TurboQuantConfig, is_turboquant_name, turboquant_config

__all__ = ["TurboQuantFullAttentionSpec"]


@dataclass(frozen=True, kw_only=True)
class TurboQuantFullAttentionSpec(FullAttentionSpec):
    """Full attention with TurboQuant-quantized K/V.

    Attributes
    ----------
    kv_cache_dtype:
        A TurboQuant scheme name (default ``turboquant_4bit_nc``); any other name raises
        :class:`kvcore.errors.SpecError` naming the field.  Stored under its canonical
        general name (``turboquant_4bit_nc`` -> ``turboquant_k4v4_nc``).

    Other fields as :class:`kvcore.specs.FullAttentionSpec` (block_size in tokens,
    num_kv_heads, head_size, head_size_v, dtype = the model dtype of the inputs).

    Example
    -------
    >>> s = TurboQuantFullAttentionSpec(block_size=16, num_kv_heads=8, head_size=128,
    ...                                 kv_cache_dtype="turboquant_3bit_nc")
    >>> s.slot_bytes, s.page_size_bytes
    (102, 13056)
    """

    kind: ClassVar[str] = "turboquant_full_attention"

    kv_cache_dtype: str = "turboquant_4bit_nc"

    def __post_init__(self) -> None:
        if not is_turboquant_name(str(self.kv_cache_dtype).strip().lower()):
            raise SpecError(
                f"{type(self).__name__}.kv_cache_dtype must be a TurboQuant scheme "
                f"(turboquant_k{{kb}}v{{vb}}[_nc] or a preset), got {self.kv_cache_dtype!r}",
                field="kv_cache_dtype", value=self.kv_cache_dtype)
        super().__post_init__()

    @classmethod
    def _always_serialized(cls) -> tuple[str, ...]:
        return ("dtype", "kv_cache_dtype")

    @property
    def turboquant(self) -> TurboQuantConfig:
        """Key/value bits and norm correction of this layer's scheme."""
        return turboquant_config(self.kv_cache_dtype)

    @property
    def slot_bytes(self) -> int:
        """K + V bytes of one token of one KV head."""
        return self.turboquant.slot_bytes(self.head_size, self.effective_head_size_v)

    @property
    def real_page_size_bytes(self) -> int:
        return self.block_size * self.num_kv_heads * self.slot_bytes
