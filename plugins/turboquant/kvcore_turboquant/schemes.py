"""TurboQuant ``kv_cache_dtype`` names, their parameters and their bytes per token.

Names
-----
The general form is ``turboquant_k{kb}v{vb}[_nc]``: ``kb`` key bits and ``vb`` value bits,
each one of 2, 3, 4, 8; the ``_nc`` suffix turns on *norm correction* (the dequantized
key is rescaled to the original key norm).  Four presets (the names vLLM users know) are
aliases of general names:

=====================  ======================  ========================================
preset                 general name            bytes per token per KV head at D = 128
=====================  ======================  ========================================
``turboquant_k8v4``    (itself)                128 + (64 + 4) = 196
``turboquant_4bit_nc`` ``turboquant_k4v4_nc``  (64 + 2) + (64 + 4) = 134
``turboquant_k3v4_nc`` (itself)                (48 + 2) + (64 + 4) = 118
``turboquant_3bit_nc`` ``turboquant_k3v3_nc``  (48 + 2) + (48 + 4) = 102
=====================  ======================  ========================================

``_nc`` with 8-bit keys is invalid: 8-bit keys are stored as fp8 (e4m3) values without
normalization or rotation, so there is no norm to correct.  Such a name is not
registered; :func:`explain_invalid_name` gives the reason for an error message.

Bytes (issue 8; TurboQuant, Zandieh et al. 2025, arXiv:2504.19874, section 3)
-----------------------------------------------------------------------------
Per token and KV head, K and V share one byte slot:

* key, ``kb`` < 8: ``ceil(D x kb / 8)`` bytes of packed Lloyd-Max codes + 2 bytes (fp16
  norm);  ``kb`` = 8: ``D`` bytes (fp8 e4m3, no norm);
* value: ``ceil(Dv x vb / 8)`` bytes of packed uniform codes + 4 bytes (fp16 scale, fp16
  zero point).

This module imports neither torch nor numpy (the planner uses it).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any

from kvcore.quant import QuantScheme

__all__ = [
    "DISTRIBUTION",
    "BITS",
    "PRESETS",
    "TurboQuantConfig",
    "turboquant_config",
    "is_turboquant_name",
    "explain_invalid_name",
    "all_schemes",
    "key_bytes",
    "value_bytes",
]

DISTRIBUTION = "kvcore-turboquant"

#: Allowed key and value bit widths.
BITS: tuple[int, ...] = (2, 3, 4, 8)

#: preset name -> general name (an alias; a preset equal to its general name maps to itself)
PRESETS: dict[str, str] = {
    "turboquant_k8v4": "turboquant_k8v4",
    "turboquant_4bit_nc": "turboquant_k4v4_nc",
    "turboquant_k3v4_nc": "turboquant_k3v4_nc",
    "turboquant_3bit_nc": "turboquant_k3v3_nc",
}

MODE = "turboquant"

_GENERAL = re.compile(r"^turboquant_k(\d+)v(\d+)(_nc)?$")

#: bytes of the key's fp16 norm and of the value's fp16 scale + fp16 zero point
KEY_META_BYTES = 2
VALUE_META_BYTES = 4


@dataclass(frozen=True)
class TurboQuantConfig:
    """The parameters of one TurboQuant scheme.

    Attributes
    ----------
    key_bits:
        Bits per key coordinate (2, 3, 4: Lloyd-Max codes of the rotated unit key;
        8: fp8 e4m3 values, not rotated).
    value_bits:
        Bits per value coordinate (2, 3, 4, 8: uniform min/max codes).
    norm_correction:
        Store ``norm / ||dequantized unit key||`` instead of ``norm`` so the dequantized
        key keeps the original norm (never with 8-bit keys).
    """

    key_bits: int
    value_bits: int
    norm_correction: bool = False

    def __post_init__(self) -> None:
        from kvcore.errors import UnknownKVCacheDtypeError

        for what, b in (("key_bits", self.key_bits), ("value_bits", self.value_bits)):
            if b not in BITS:
                raise UnknownKVCacheDtypeError(
                    f"TurboQuant {what} must be one of {', '.join(map(str, BITS))}, "
                    f"got {b!r}", kv_cache_dtype=self.name, field=what)
        if self.norm_correction and self.key_bits == 8:
            raise UnknownKVCacheDtypeError(
                f"{self.name!r} is invalid: norm correction (_nc) needs rotated, "
                "norm-scaled keys, but 8-bit keys are stored as plain fp8 without a norm; "
                f"use {self.name[:-3]!r}", kv_cache_dtype=self.name, field="norm_correction")

    @property
    def name(self) -> str:
        """The general ``kv_cache_dtype`` name, e.g. ``turboquant_k3v3_nc``."""
        nc = "_nc" if self.norm_correction else ""
        return f"turboquant_k{self.key_bits}v{self.value_bits}{nc}"

    @property
    def key_is_fp8(self) -> bool:
        return self.key_bits == 8

    def key_code_bytes(self, head_size: int) -> int:
        """Bytes of the packed key payload (codes, or fp8 values for 8-bit keys)."""
        if self.key_is_fp8:
            return head_size
        return math.ceil(head_size * self.key_bits / 8)

    def value_code_bytes(self, head_size_v: int) -> int:
        """Bytes of the packed value codes."""
        return math.ceil(head_size_v * self.value_bits / 8)

    def key_bytes(self, head_size: int) -> int:
        """Key bytes per token per KV head: ``ceil(D x kb / 8) + 2``, or ``D`` at kb = 8."""
        if self.key_is_fp8:
            return head_size
        return self.key_code_bytes(head_size) + KEY_META_BYTES

    def value_bytes(self, head_size_v: int) -> int:
        """Value bytes per token per KV head: ``ceil(Dv x vb / 8) + 4``."""
        return self.value_code_bytes(head_size_v) + VALUE_META_BYTES

    def content_bytes(self, head_size: int, head_size_v: int | None = None) -> int:
        """K + V bytes of one token of one KV head, before the slot's alignment."""
        dv = head_size if head_size_v is None else head_size_v
        return self.key_bytes(head_size) + self.value_bytes(dv)

    def slot_bytes(self, head_size: int, head_size_v: int | None = None) -> int:
        """One slot of the cache (one token of one KV head): K + V bytes rounded up to an
        even number, as vLLM 0.32's ``TurboQuantConfig.slot_size_aligned``
        (vllm/model_executor/layers/quantization/turboquant/config.py:167-175, used by
        TurboQuantAttentionBackend.customize_spec, v1/attention/backends/
        turboquant_attn.py:153); the last byte of an odd slot is padding."""
        s = self.content_bytes(head_size, head_size_v)
        return s + s % 2


def is_turboquant_name(name: str) -> bool:
    """True for a preset or a name of the form ``turboquant_k{kb}v{vb}[_nc]`` (valid or not)."""
    return isinstance(name, str) and (name in PRESETS or bool(_GENERAL.match(name)))


def explain_invalid_name(name: str) -> str | None:
    """Why ``name`` is not a valid TurboQuant kv_cache_dtype, or None when it is valid or
    not a TurboQuant-looking name (for the core's unknown-dtype error message)."""
    if not isinstance(name, str) or not name.startswith("turboquant"):
        return None
    try:
        turboquant_config(name)
    except Exception as exc:  # noqa: BLE001 - any failure is the explanation
        return str(exc)
    return None


def turboquant_config(scheme: Any) -> TurboQuantConfig:
    """The :class:`TurboQuantConfig` of a kv_cache_dtype name or a QuantScheme.

    Raises :class:`kvcore.errors.UnknownKVCacheDtypeError` for a name that is not a
    TurboQuant scheme (e.g. ``turboquant_k8v4_nc``: norm correction with fp8 keys, or a
    bit width outside 2, 3, 4, 8).
    """
    from kvcore.errors import UnknownKVCacheDtypeError

    if isinstance(scheme, TurboQuantConfig):
        return scheme
    name = scheme.name if isinstance(scheme, QuantScheme) else scheme
    if not isinstance(name, str):
        raise UnknownKVCacheDtypeError(
            f"expected a TurboQuant kv_cache_dtype name or QuantScheme, got {scheme!r}",
            kv_cache_dtype=repr(scheme))
    key = PRESETS.get(name.strip().lower(), name.strip().lower())
    m = _GENERAL.match(key)
    if m is None:
        raise UnknownKVCacheDtypeError(
            f"{name!r} is not a TurboQuant kv_cache_dtype; valid: the presets "
            f"{', '.join(PRESETS)} or turboquant_k{{kb}}v{{vb}}[_nc] with kb, vb in "
            f"{{{', '.join(map(str, BITS))}}} (no _nc with kb = 8)",
            kv_cache_dtype=name)
    return TurboQuantConfig(int(m.group(1)), int(m.group(2)), m.group(3) is not None)


def key_bytes(cfg: TurboQuantConfig):  # -> BytesFn
    return lambda d, _dtype: cfg.key_bytes(d)


def value_bytes(cfg: TurboQuantConfig):  # -> BytesFn
    return lambda d, _dtype: cfg.value_bytes(d)


def slot_bytes(cfg: TurboQuantConfig):  # -> SlotFn
    return lambda d, dv, _dtype: cfg.slot_bytes(d, dv)


def _aliases(general: str) -> tuple[str, ...]:
    return tuple(p for p, g in PRESETS.items() if g == general and p != general)


def all_schemes() -> list[QuantScheme]:
    """Every valid TurboQuant scheme (16 without and 12 with norm correction), presets
    as aliases of their general names."""
    out: list[QuantScheme] = []
    for nc in (False, True):
        for kb in BITS:
            if nc and kb == 8:
                continue
            for vb in BITS:
                cfg = TurboQuantConfig(kb, vb, nc)
                kdesc = ("fp8 e4m3 keys" if kb == 8 else
                         f"{kb}-bit rotated Lloyd-Max keys + fp16 norm"
                         + (" (norm-corrected)" if nc else ""))
                out.append(QuantScheme(
                    cfg.name, MODE, key_bytes(cfg), value_bytes(cfg),
                    aliases=_aliases(cfg.name), storage_dtype="uint8",
                    slot_bytes=slot_bytes(cfg),
                    spec_kind="turboquant_full_attention",
                    description=f"TurboQuant: {kdesc}; {vb}-bit min/max values + fp16 "
                                "scale and zero point",
                    distribution=DISTRIBUTION))
    return out
