"""KV-cache specs of Multi-head Latent Attention (MLA) models.

MLA (DeepSeek-V2, arXiv:2405.04434) caches one compressed latent per token instead of K
and V per head: ``kv_lora_rank`` values (512 for DeepSeek-V2/V3, GLM-5, Kimi) followed by
the decoupled RoPE key (``qk_rope_head_dim``, 64).  So an MLA layer has
``num_kv_heads = 1`` and ``head_size = kv_lora_rank + qk_rope_head_dim`` (576) and
stores no separate V.  The latent is not sharded by tensor parallelism: every rank holds
the whole latent of every token.

Bytes of one stored entry (one token, or one compressed state when
``compress_ratio > 1``):

=====================================  ==============================================
layout                                  bytes per entry (head size D)
=====================================  ==============================================
``auto`` / ``bfloat16`` / ``float16``   D x itemsize (576 x 2 = 1,152 in bf16)
``fp8`` (per-tensor scale)              D x 1 (576)
``fp8_ds_mla`` (DeepSeek-V3.2 record)   (D - 64) fp8 NoPE values + one float32 scale
                                        per 128-value tile + 64 bf16 RoPE values:
                                        512 + 4 x 4 + 128 = 656 for D = 576
V4 record (``fp8_ds_mla`` with          (D - 64) fp8 NoPE + one 1-byte ue8m0 scale per
``model_version="deepseek_v4"``, or     64 values, padded to 8 bytes + 64 bf16 RoPE:
``fp8_ds_mla_v4``)                      448 + 8 + 128 = 584 for D = 512
``mla_indexer`` (V3.2 / GLM-5 DSA)      D fp8 + one float32 scale per 128 values:
                                        128 + 4 = 132 for D = 128
=====================================  ==============================================

A page holds ``storage_block_size = block_size // compress_ratio`` entries and is padded
up to a multiple of ``alignment`` bytes when one is set (576 B by default for the V4
record, which FlashMLA's paged layout needs):
``real_page_size_bytes = round_up(storage_block_size x entry_bytes, alignment)``.

Sources: vLLM ``vllm/v1/kv_cache_interface.py`` (``MLAAttentionSpec``,
``SlidingWindowMLASpec``, ``HiddenStateCacheSpec``, ``_apply_alignment_padding``), the
FlashMLA sparse record described in vLLM ``flashmla_sparse.py``, and the DeepSeek-V4
compressor (``vllm/models/deepseek_v4``).  Checked against the issue's figures:
DeepSeek-V3 bf16 64-token page 73,728 B; fp8_ds_mla 64-token page 41,984 B; V4 compressed
layer (block 256, ratio 128): 2 states, 1,168 B raw, 1,728 B padded.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from kvcore.errors import SpecError, SpecMergeError
from kvcore.specs import FullAttentionSpec, SlidingWindowSpec, cdiv

__all__ = [
    "FP8_DS_MLA",
    "FP8_DS_MLA_V4",
    "DEEPSEEK_V4",
    "V4_DEFAULT_ALIGNMENT",
    "MLAAttentionSpec",
    "SlidingWindowMLASpec",
    "MLAIndexerSpec",
    "HiddenStateCacheSpec",
    "ds_mla_record_bytes",
    "ds_mla_v4_record_bytes",
    "indexer_entry_bytes",
    "round_up",
]

FP8_DS_MLA = "fp8_ds_mla"
FP8_DS_MLA_V4 = "fp8_ds_mla_v4"
DEEPSEEK_V4 = "deepseek_v4"
#: FlashMLA's paged V4 layout pads each page to a multiple of 576 B (vLLM
#: ``alignment=576 if cache_dtype == "fp8_ds_mla"``).
V4_DEFAULT_ALIGNMENT = 576
#: RoPE part of every DeepSeek record: 64 values stored in bf16.
ROPE_DIM = 64
#: fp8_ds_mla quantizes the NoPE part in tiles of 128 values, one float32 scale each.
DS_MLA_TILE = 128
#: the V4 record quantizes in tiles of 64 values, one ue8m0 (1-byte) scale each,
#: scale bytes padded to a multiple of 8.
DS_MLA_V4_TILE = 64
#: the indexer cache quantizes in tiles of 128 values, one float32 scale each.
INDEXER_TILE = 128


def round_up(x: int, multiple: int) -> int:
    """Smallest multiple of ``multiple`` that is >= ``x``."""
    return cdiv(x, multiple) * multiple


def ds_mla_record_bytes(head_size: int = 576) -> int:
    """Bytes of one DeepSeek-V3.2 ``fp8_ds_mla`` record: ``head_size - 64`` fp8 NoPE
    values, one float32 scale per 128-value tile, 64 bf16 RoPE values.
    656 for head_size 576 (512 + 16 + 128)."""
    nope = head_size - ROPE_DIM
    return nope + 4 * cdiv(nope, DS_MLA_TILE) + 2 * ROPE_DIM


def ds_mla_v4_record_bytes(head_size: int = 512) -> int:
    """Bytes of one DeepSeek-V4 record (one stored state): ``head_size - 64`` fp8 NoPE
    values, one ue8m0 byte per 64-value tile padded to 8 bytes, 64 bf16 RoPE values.
    584 for head_size 512 (448 + 8 + 128; vLLM ``_scale_dim = nope // 64 + 1``)."""
    nope = head_size - ROPE_DIM
    return nope + round_up(cdiv(nope, DS_MLA_V4_TILE), 8) + 2 * ROPE_DIM


def indexer_entry_bytes(head_size: int = 128) -> int:
    """Bytes of one sparse-attention indexer key: ``head_size`` fp8 values plus one
    float32 scale per 128 values (132 for index_head_dim 128; vLLM
    ``DeepseekV32IndexerCache``: ``head_dim + head_dim // 128 * 4``)."""
    return head_size + 4 * cdiv(head_size, INDEXER_TILE)


def _check_int(spec: Any, name: str, minimum: int) -> None:
    value = getattr(spec, name)
    if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
        raise SpecError(
            f"{type(spec).__name__}.{name} must be an int >= {minimum}, got {value!r}",
            field=name, value=repr(value))


def _scheme_name(name: str) -> str:
    from kvcore.registry import get_registry

    return get_registry().kv_cache_dtype(name).name


class _MLAPage:
    """Page-size logic shared by the MLA spec classes (a mixin: the fields
    ``compress_ratio``, ``alignment`` and ``model_version`` are declared on each
    dataclass)."""

    block_size: int
    num_kv_heads: int
    head_size: int
    dtype: str
    kv_cache_dtype: str
    compress_ratio: int
    alignment: int | None
    model_version: str | None
    #: fields whose values must agree for two layers to share a group spec
    _mla_merge_fields: ClassVar[tuple[str, ...]] = (
        "kv_cache_dtype", "compress_ratio", "model_version", "alignment")

    def _mla_post_init(self) -> None:
        _check_int(self, "compress_ratio", 1)
        if self.alignment is not None:
            _check_int(self, "alignment", 1)
        if self.model_version is not None and not isinstance(self.model_version, str):
            raise SpecError(f"{type(self).__name__}.model_version must be a string or "
                            f"null, got {self.model_version!r}", field="model_version")
        if isinstance(self.block_size, int) and self.block_size % self.compress_ratio:
            raise SpecError(
                f"{type(self).__name__}.block_size {self.block_size} must be a multiple "
                f"of compress_ratio {self.compress_ratio} (a page holds block_size / "
                f"compress_ratio stored states)", field="block_size",
                value=self.block_size)
        if self.alignment is None and self.uses_v4_record:
            object.__setattr__(self, "alignment", V4_DEFAULT_ALIGNMENT)

    @property
    def uses_v4_record(self) -> bool:
        """True for the DeepSeek-V4 584-byte record."""
        name = _scheme_name(self.kv_cache_dtype)
        return name == FP8_DS_MLA_V4 or (name == FP8_DS_MLA
                                         and self.model_version == DEEPSEEK_V4)

    @property
    def storage_block_size(self) -> int:
        """Entries (tokens, or compressed states) physically stored per block:
        ``block_size // compress_ratio``.  Kernels size and index the cache with this,
        never with ``block_size``."""
        return self.block_size // self.compress_ratio

    @property
    def entry_bytes(self) -> int:
        """Bytes of one stored token / state across its KV heads (see module doc)."""
        name = _scheme_name(self.kv_cache_dtype)
        if self.uses_v4_record:
            return self.num_kv_heads * ds_mla_v4_record_bytes(self.head_size)
        if name == FP8_DS_MLA:
            return self.num_kv_heads * ds_mla_record_bytes(self.head_size)
        from kvcore.registry import get_registry

        scheme = get_registry().kv_cache_dtype(name)
        # MLA stores one latent per token: the scheme's key bytes only, no V
        return self.num_kv_heads * scheme.key_bytes(self.head_size, self.dtype)

    @property
    def raw_page_size_bytes(self) -> int:
        """``storage_block_size x entry_bytes``, before alignment padding."""
        return self.storage_block_size * self.entry_bytes

    @property
    def real_page_size_bytes(self) -> int:
        """The raw page rounded up to a multiple of ``alignment`` (when set)."""
        raw = self.raw_page_size_bytes
        return raw if self.alignment is None else round_up(raw, self.alignment)

    @property
    def bytes_per_token(self) -> float:
        return self.real_page_size_bytes / self.block_size

    def kv_traffic(self) -> Any:
        """KV traffic per step (:class:`kvcore.specs.KVTraffic`): the stored records at
        ``real_page_size_bytes / block_size`` bytes per token (fp8_ds_mla scales and V4
        alignment included, one record per ``compress_ratio`` tokens), read over the
        context (or window) as the base kind reads it; attention runs in the latent
        space (absorbed MLA): keys of ``head_size`` channels, values of ``head_size -
        64`` (``kv_lora_rank``, the RoPE part is key only)."""
        import dataclasses

        t = super().kv_traffic()  # type: ignore[misc]
        v_dim = self.head_size - 64 if self.head_size > 64 else self.head_size
        return dataclasses.replace(t, qk_dim=self.head_size, v_dim=v_dim,
                                   tokens_per_entry=self.compress_ratio)

    def kv_cache_shape(self, num_blocks: int) -> tuple[int, int, int]:
        """Shape of this layer's cache as the kernels view it:
        ``(num_blocks, storage_block_size, entry_width)``, entry_width in elements of
        the storage dtype (bytes for the packed ``fp8_ds_mla`` records).  An aligned page
        is laid out as ``[num_blocks, page_size_bytes]`` bytes whose first
        ``storage_block_size x entry_bytes`` bytes hold the entries."""
        if self.uses_v4_record or _scheme_name(self.kv_cache_dtype) == FP8_DS_MLA:
            return (num_blocks, self.storage_block_size, self.entry_bytes)
        return (num_blocks, self.storage_block_size, self.num_kv_heads * self.head_size)

    def _check_mla_merge(self, specs: list[Any]) -> None:
        for other in specs:
            if type(other) is not type(self):
                raise SpecMergeError(
                    f"cannot merge {type(self).__name__} ({self.kind!r}) with "  # type: ignore[attr-defined]
                    f"{type(other).__name__} ({getattr(other, 'kind', '?')!r}); MLA "
                    f"layers of one group must be of one kind", fields=["type"])
        for name in self._mla_merge_fields:
            values = {getattr(s, name) for s in specs}
            if len(values) > 1:
                what = {"kv_cache_dtype": "quantization mode",
                        "compress_ratio": "compress ratio",
                        "model_version": "model version",
                        "alignment": "page alignment"}[name]
                raise SpecMergeError(
                    f"MLA layers in one KV-cache group must use the same {what}; "
                    f"{name} differs: {sorted(values, key=repr)}", fields=[name])


@dataclass(frozen=True, kw_only=True)
class MLAAttentionSpec(_MLAPage, FullAttentionSpec):
    """One MLA latent per token (or per ``compress_ratio`` tokens), full attention.

    Attributes (besides those of :class:`kvcore.specs.FullAttentionSpec`)
    ----------------------------------------------------------------------
    num_kv_heads:
        1 for MLA (one latent per token).
    head_size:
        ``kv_lora_rank + qk_rope_head_dim`` (576), or 512 for DeepSeek-V4.
    kv_cache_dtype:
        ``auto``, ``bfloat16``, ``fp8``, ``fp8_ds_mla``, ``fp8_ds_mla_v4``, ...
    compress_ratio:
        Tokens per stored state (1 = uncompressed; DeepSeek-V4 uses 4 and 128).
    alignment:
        Pad each page to a multiple of this many bytes (None: no padding; 576 by
        default for the V4 record).
    model_version:
        ``"deepseek_v4"`` selects the 584 B V4 record for ``fp8_ds_mla``.

    Page size: see the module docstring.  Blocks per request: ``cdiv(max_len,
    block_size)`` (``block_size`` is the logical tokens per block).
    Raises SpecError for a bad field (block_size not a multiple of compress_ratio, ...).
    """

    kind: ClassVar[str] = "mla_attention"

    compress_ratio: int = 1
    alignment: int | None = None
    model_version: str | None = None

    def __post_init__(self) -> None:
        self._mla_post_init()
        super().__post_init__()

    @classmethod
    def merge(cls, specs: list[Any]) -> Any:
        """Merge MLA specs of one group; keeps kv_cache_dtype, compress_ratio,
        model_version and alignment, which must agree (else SpecMergeError naming the
        field)."""
        if not specs:
            raise SpecMergeError("cannot merge an empty list of specs")
        specs[0]._check_mla_merge(specs)
        return FullAttentionSpec.merge.__func__(cls, specs)  # type: ignore[attr-defined]


@dataclass(frozen=True, kw_only=True)
class HiddenStateCacheSpec(MLAAttentionSpec):
    """Per-token hidden states kept for speculative decoding (vLLM
    ``HiddenStateCacheSpec``, a marker subclass of the MLA spec): ``head_size`` values
    per token in the model dtype.  Groups with the MLA layers."""

    kind: ClassVar[str] = "hidden_state_cache"

    def kv_traffic(self) -> Any:
        """Writes the new tokens' hidden states and reads only those (a window of one
        token); no attention."""
        import dataclasses

        return dataclasses.replace(super().kv_traffic(), window=1, qk_dim=0, v_dim=0)


@dataclass(frozen=True, kw_only=True)
class SlidingWindowMLASpec(_MLAPage, SlidingWindowSpec):
    """MLA latents (or DeepSeek-V4 compressor states) kept for the last
    ``sliding_window`` tokens.

    Page size as :class:`MLAAttentionSpec`; blocks per request as
    :class:`kvcore.specs.SlidingWindowSpec`: ``cdiv(min(sliding_window - 1 +
    max_num_batched_tokens, max_len), block_size) + 1``.
    """

    kind: ClassVar[str] = "sliding_window_mla"

    compress_ratio: int = 1
    alignment: int | None = None
    model_version: str | None = None

    def __post_init__(self) -> None:
        self._mla_post_init()
        super().__post_init__()

    def as_full_attention(self) -> MLAAttentionSpec:
        """This layer planned as full MLA attention (hybrid manager off): an
        :class:`MLAAttentionSpec` with the same layout that records the window."""
        return MLAAttentionSpec(
            block_size=self.block_size, num_kv_heads=self.num_kv_heads,
            head_size=self.head_size, dtype=self.dtype, kv_cache_dtype=self.kv_cache_dtype,
            sliding_window=self.sliding_window, compress_ratio=self.compress_ratio,
            alignment=self.alignment, model_version=self.model_version)

    @classmethod
    def merge(cls, specs: list[Any]) -> Any:
        """As :meth:`MLAAttentionSpec.merge`; the windows must agree too."""
        if not specs:
            raise SpecMergeError("cannot merge an empty list of specs")
        specs[0]._check_mla_merge(specs)
        return SlidingWindowSpec.merge.__func__(cls, specs)  # type: ignore[attr-defined]


@dataclass(frozen=True, kw_only=True)
class MLAIndexerSpec(_MLAPage, FullAttentionSpec):
    """The key cache of the sparse-attention "lightning indexer" (DeepSeek-V3.2 DSA,
    GLM-5): one ``head_size``-wide (``index_head_dim``, 128) fp8 key per token with a
    float32 scale per 128 values, 132 B per token per layer, whatever the main cache's
    dtype (vLLM ``DeepseekV32IndexerCache``).

    ``kv_cache_dtype`` must be ``auto`` or ``fp8`` (both mean that fixed format).
    Groups with the MLA layers (same block size, its own page size).
    """

    kind: ClassVar[str] = "mla_indexer"

    num_kv_heads: int = 1
    head_size: int = 128
    compress_ratio: int = 1
    alignment: int | None = None
    model_version: str | None = None

    def __post_init__(self) -> None:
        self._mla_post_init()
        super().__post_init__()
        if self.kv_cache_dtype not in ("auto", "fp8"):
            raise SpecError(
                f"MLAIndexerSpec.kv_cache_dtype {self.kv_cache_dtype!r}: the indexer "
                f"cache always stores fp8 keys with float32 scales; use 'auto' or 'fp8'",
                field="kv_cache_dtype", value=self.kv_cache_dtype)

    @property
    def uses_v4_record(self) -> bool:
        return False

    @property
    def entry_bytes(self) -> int:
        return self.num_kv_heads * indexer_entry_bytes(self.head_size)

    def kv_cache_shape(self, num_blocks: int) -> tuple[int, int, int]:
        return (num_blocks, self.storage_block_size, self.entry_bytes)

    def kv_traffic(self) -> Any:
        """As MLA, but the indexer only scores keys (no values)."""
        import dataclasses

        return dataclasses.replace(super().kv_traffic(), v_dim=0)

    @classmethod
    def merge(cls, specs: list[Any]) -> Any:
        if not specs:
            raise SpecMergeError("cannot merge an empty list of specs")
        specs[0]._check_mla_merge(specs)
        return FullAttentionSpec.merge.__func__(cls, specs)  # type: ignore[attr-defined]

