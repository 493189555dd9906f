"""``kv_cache_dtype`` strings -> :class:`QuantScheme`: how a KV-cache layout stores K and V.

A scheme answers one question for the planner: how many bytes one token of one KV head
takes for K and for V, given the head size and the model dtype.  The core provides:

=========================  ==========================================================
name                       bytes per token per KV head (K, then V), head size D
=========================  ==========================================================
``auto``                   D x itemsize(model dtype), each
``bfloat16``/``float16``   D x 2 each; ``float32``: D x 4 each
``fp8`` (``fp8_e4m3``,     D x 1 each, one per-tensor scale (not in the page)
``fp8_e5m2``)
``int8_per_token_head``    D + 4 each: int8 values plus one float32 scale per token
                           per head (vLLM ``kv_cache_dtype="int8_per_token_head"``)
``fp8_per_token_head``     D + 4 each, fp8 values plus a float32 scale
``int4_per_token_head``    ceil(D / 2) + 4 each: two 4-bit values per byte plus a
                           float32 scale
``nvfp4``                  D / 2 + D / 16 each: packed e2m1 values plus one fp8 (e4m3)
                           scale per 16-value micro-block (NVIDIA NVFP4 format)
=========================  ==========================================================

Plugins add schemes through the ``kvcore_kv_cache_dtypes`` hook (``fp8_ds_mla``,
``turboquant_*``, ...).
"""

from __future__ import annotations

import enum
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from kvcore.dtypes import dtype_size, normalize_dtype
from kvcore.errors import ConfigError

#: the most bytes one token of one KV head may take in K or in V (a head of 2**16
#: channels at 8 bytes is 2**19; past this a figure is a plugin's bug, not a format)
_MAX_HEAD_BYTES = 1 << 24

__all__ = ["KVQuantMode", "QuantScheme", "BUILTIN_SCHEMES", "PLUGIN_KV_CACHE_DTYPES"]


class KVQuantMode(str, enum.Enum):
    """How K/V values are quantized; plugins may use ``PLUGIN`` and their own names."""

    NONE = "none"  # model dtype or an explicit float dtype
    FP8_PER_TENSOR = "fp8_per_tensor"
    INT8_PER_TOKEN_HEAD = "int8_per_token_head"
    FP8_PER_TOKEN_HEAD = "fp8_per_token_head"
    INT4_PER_TOKEN_HEAD = "int4_per_token_head"
    NVFP4 = "nvfp4"
    PLUGIN = "plugin"

    @classmethod
    def _missing_(cls, value: object) -> KVQuantMode:
        """``KVQuantMode(x)`` for an unknown ``x``: a ConfigError (and a ValueError, as
        Enum lookups raise) naming the valid modes."""
        from kvcore.errors import ConfigError
        from kvcore.units import shorten

        class _Bad(ConfigError, ValueError):
            pass

        raise _Bad(f"KVQuantMode {shorten(value)} is not a quantization mode; valid: "
                   f"{', '.join(m.value for m in cls)}", field="mode", value=shorten(value))


BytesFn = Callable[[int, str], int]


@dataclass(frozen=True)
class QuantScheme:
    """One ``kv_cache_dtype``: its name(s), mode and per-token-per-head byte counts.

    Parameters
    ----------
    name:
        The canonical ``kv_cache_dtype`` string.
    mode:
        A :class:`KVQuantMode` (or a plugin's own string).
    key_bytes, value_bytes:
        ``f(head_size, model_dtype) -> int``: bytes of K (resp. V) for one token of one
        KV head, scales included.
    aliases:
        Other strings that mean the same scheme.
    storage_dtype:
        The element dtype of the stored values (``"uint8"`` for packed formats), or
        ``None`` for "the model dtype".
    spec_kind:
        The spec kind a full-attention layer with this kv_cache_dtype becomes (e.g.
        ``turboquant_full_attention``), when the scheme needs its own kind; None keeps
        the layer's kind.
    kinds:
        The only spec kinds this format exists for (e.g. ``fp8_ds_mla``: MLA latents);
        empty = any attention kind.  A layer of another kind raises SpecError.
    """

    name: str
    mode: KVQuantMode | str
    key_bytes: BytesFn
    value_bytes: BytesFn
    aliases: tuple[str, ...] = ()
    storage_dtype: str | None = None
    description: str = ""
    spec_kind: str | None = None
    kinds: tuple[str, ...] = ()
    distribution: str = field(default="kvcore", compare=False)
    #: ``(head_size, head_size_v, dtype) -> bytes`` of one token of one KV head when the
    #: format aligns K + V together (TurboQuant rounds the slot up to even); None: the sum
    slot_bytes: Callable[[int, int, str], int] | None = field(default=None, compare=False)

    @property
    def names(self) -> tuple[str, ...]:
        return (self.name, *self.aliases)

    @property
    def is_quantized(self) -> bool:
        return self.mode not in (KVQuantMode.NONE, KVQuantMode.NONE.value)

    def bytes_per_token_head(self, head_size: int, head_size_v: int, dtype: str) -> int:
        """K plus V bytes of one token of one KV head (``slot_bytes`` when set)."""
        if self.slot_bytes is not None:
            return self.slot_bytes(head_size, head_size_v, dtype)
        k = self.key_bytes(head_size, dtype)
        v = self.value_bytes(head_size_v, dtype)
        if type(k) is not int or type(v) is not int or not 0 <= k <= _MAX_HEAD_BYTES \
                or not 0 <= v <= _MAX_HEAD_BYTES:  # off the fast path: each checked
            k = self._checked_bytes("key", k)
            v = self._checked_bytes("value", v)
        return k + v

    def _checked_bytes(self, which: str, value: Any) -> int:
        """One of K / V's bytes per token and head: an int >= 0 (numpy ints taken; not
        bool) within :data:`_MAX_HEAD_BYTES`, else a ConfigError naming the dtype, its
        distribution, which half and the value (tester T13: a negative K passed in
        the sum)."""
        from kvcore.units import as_int, shorten

        number = as_int(value)
        if number is None or not 0 <= number <= _MAX_HEAD_BYTES:
            if number is None and not isinstance(value, bool):
                return value  # type: ignore[no-any-return]  # NaN, text: the sum's check
            raise ConfigError(f"kv_cache_dtype {self.name!r} (from {self.distribution}) "
                              f"{which} bytes per token and head is {shorten(value)}; it "
                              f"must be an int >= 0 and at most {_MAX_HEAD_BYTES:,}",
                              field=f"{which}_bytes", value=shorten(value))
        return number


def _model_dtype_bytes(d: int, dtype: str) -> int:
    return d * dtype_size(dtype)


def _fixed(itemsize: float) -> BytesFn:
    return lambda d, _dtype: int(d * itemsize)


def _per_token_head(bits: int) -> BytesFn:
    # packed values, then one float32 scale per token per head
    return lambda d, _dtype: math.ceil(d * bits / 8) + 4


def _nvfp4(d: int, _dtype: str) -> int:
    # e2m1 values two per byte, one fp8 scale per 16 values
    return d // 2 + math.ceil(d / 16)


def _float(name: str, *aliases: str) -> QuantScheme:
    size = dtype_size(name)
    return QuantScheme(
        name, KVQuantMode.NONE, _fixed(size), _fixed(size), aliases,
        storage_dtype=normalize_dtype(name), description=f"{name} K and V",
    )


BUILTIN_SCHEMES: tuple[QuantScheme, ...] = (
    QuantScheme("auto", KVQuantMode.NONE, _model_dtype_bytes, _model_dtype_bytes,
                description="the model dtype"),
    _float("bfloat16", "bf16"),
    _float("float16", "fp16", "half"),
    _float("float32", "fp32", "float"),
    QuantScheme("fp8", KVQuantMode.FP8_PER_TENSOR, _fixed(1), _fixed(1),
                ("fp8_e4m3",), storage_dtype="float8_e4m3fn",
                description="fp8 e4m3 with per-tensor scales"),
    QuantScheme("fp8_e5m2", KVQuantMode.FP8_PER_TENSOR, _fixed(1), _fixed(1),
                storage_dtype="float8_e5m2", description="fp8 e5m2 with per-tensor scales"),
    QuantScheme("int8_per_token_head", KVQuantMode.INT8_PER_TOKEN_HEAD,
                _per_token_head(8), _per_token_head(8), storage_dtype="int8",
                description="int8 with a float32 scale per token per head, K and V"),
    QuantScheme("fp8_per_token_head", KVQuantMode.FP8_PER_TOKEN_HEAD,
                _per_token_head(8), _per_token_head(8), storage_dtype="float8_e4m3fn",
                description="fp8 e4m3 with a float32 scale per token per head, K and V"),
    QuantScheme("int4_per_token_head", KVQuantMode.INT4_PER_TOKEN_HEAD,
                _per_token_head(4), _per_token_head(4), storage_dtype="uint8",
                description="int4 (two per byte) with a float32 scale per token per head"),
    QuantScheme("nvfp4", KVQuantMode.NVFP4, _nvfp4, _nvfp4, storage_dtype="uint8",
                description="NVFP4: e2m1 values plus an fp8 scale per 16 values"),
)

#: kv_cache_dtype names (or prefixes ending in ``*``) that known plugins provide, so that
#: an error can say which distribution to install.
PLUGIN_KV_CACHE_DTYPES: dict[str, str] = {
    "fp8_ds_mla": "kvcore-mla",
    "fp8_ds_mla_v4": "kvcore-mla",
    "turboquant_*": "kvcore-turboquant",
}
