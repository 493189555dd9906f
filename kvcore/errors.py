"""kvcore's error classes.

Every error kvcore raises on bad input is a :class:`KVCoreError` (a ``ValueError``), so a
caller can catch one class; each subclass names what was wrong.  Long values are cut in
the middle in messages and extra fields (:func:`shorten_message`).  ``to_dict()`` gives the
JSON form the CLI prints under ``--json`` (``{"type", "message", ...extra fields}``).
"""

from __future__ import annotations

import re
from typing import Any

# ---- echoing values in messages ----------------------------------------------------------

#: the longest value echoed in full in a message
SHORT_LIMIT = 64


def shorten(value: Any, limit: int = SHORT_LIMIT) -> str:
    """``repr(value)`` (a str as is), cut in the middle when longer than ``limit``:
    ``'123456...(5,000 characters)...7890'``.  Never raises (a repr that raises or a
    huge int gives its type and size)."""
    if isinstance(value, int) and not isinstance(value, bool) and \
            abs(value).bit_length() > 4 * limit:
        return f"<int of about {int(abs(value).bit_length() * 0.30103):,} digits>"
    try:
        text = repr(value) if not isinstance(value, str) or not value.isprintable() \
            else value  # control characters (a newline) are escaped: one line
    except Exception:  # noqa: BLE001 - a broken __repr__ must not hide the real error
        return f"<{type(value).__name__}>"
    if len(text) <= limit:
        return text
    head = max(8, limit * 2 // 3)
    tail = max(4, limit // 4)
    return f"{text[:head]}...({len(text):,} characters)...{text[-tail:]}"


_LONG_RUN = re.compile(r"\S{" + str(2 * SHORT_LIMIT + 1) + ",}")


def shorten_message(message: str, limit: int = 2 * SHORT_LIMIT) -> str:
    """A message with every run of more than ``limit`` non-space characters (a huge
    number, a long path or token) cut in the middle by :func:`shorten`."""
    if not message.isprintable():  # a newline or other control character: escaped
        message = "".join(c if c.isprintable() else repr(c)[1:-1] for c in message)
    if len(message) <= limit:
        return message
    return _LONG_RUN.sub(lambda m: shorten(m.group(0)), message)


__all__ = [
    "KVCoreError",
    "UnknownDtypeError",
    "UnknownKVCacheDtypeError",
    "SpecError",
    "SpecMergeError",
    "PluginError",
    "PluginConflictError",
    "MissingPluginError",
    "ConfigError",
    "UnknownModelTypeError",
    "NotEnoughMemoryError",
    "BlockPoolError",
    "RequestError",
    "KVEventError",
    "KernelArgumentError",
]


class KVCoreError(ValueError):
    """Base class of kvcore's input errors.  ``extra`` holds machine-readable fields."""

    def __init__(self, message: str, **extra: Any) -> None:
        message = shorten_message(str(message))  # a 5,000-digit value is cut in the middle
        super().__init__(message)
        self.message = message
        self.extra = {k: shorten(v, 128) if isinstance(v, str) or isinstance(v, int) and
                      not isinstance(v, bool) and v.bit_length() > 256 else v
                      for k, v in extra.items()}

    def to_dict(self) -> dict[str, Any]:
        return {"type": type(self).__name__, "message": self.message, **self.extra}


class UnknownDtypeError(KVCoreError):
    """An element dtype name that kvcore does not know."""


class UnknownKVCacheDtypeError(KVCoreError):
    """A ``kv_cache_dtype`` string no installed scheme provides."""


class SpecError(KVCoreError):
    """A KV-cache spec with an invalid field value."""


class SpecMergeError(SpecError):
    """Layers put in one group whose specs differ; ``fields`` names the differences."""


class PluginError(KVCoreError):
    """A plugin that is invalid."""


class PluginConflictError(PluginError):
    """Two plugins claim the same kind, spec class or kv_cache_dtype."""


class MissingPluginError(KVCoreError):
    """Something a known but uninstalled plugin provides; ``distribution`` names it."""


class ConfigError(KVCoreError):
    """A malformed model config or plan option; the message names the field."""


class UnknownModelTypeError(ConfigError):
    """A ``model_type`` no installed adapter serves."""


class NotEnoughMemoryError(KVCoreError):
    """The KV-cache budget cannot hold one request of ``max_model_len``.

    ``extra`` carries ``min_kv_cache_memory_bytes`` (the smallest budget that plans) and
    ``estimated_max_model_len`` (the longest length the given budget allows).
    """


class BlockPoolError(KVCoreError):
    """A block-table operation that would corrupt the block pool: freeing a block that
    is not held (a duplicate in one free, or a ref count going below 0), a block object
    that is not one of the pool's (``block_id`` names it), a manager returning blocks it
    did not take from the pool, or asking for more blocks than are free.  ``extra``
    carries ``block_id`` and, where known, ``kind`` (the group's spec kind, i.e. the
    plugin whose manager did it)."""


class RequestError(KVCoreError):
    """A request the planned KV cache cannot serve (e.g. an encoder input longer than
    the plan's ``max_num_encoder_input_tokens``); the message names the field, the
    value and the planned limit."""


class KVEventError(KVCoreError):
    """A KV-cache event a :class:`kvcore.routing.ResidencyIndex` cannot apply: an
    unknown group, a ``block_size`` other than the group's, the removal of a block the
    replica never stored, an unknown event type, or a batch whose sequence number is
    lower than the one expected (out of order or replayed).  ``extra`` carries
    ``replica``, ``field`` and ``value``; the replica is marked stale (never trusted
    for a hit) unless nothing was applied."""


class KernelArgumentError(KVCoreError):
    """A kernel argument refused on the host before any launch (:mod:`kvcore.ops._checks`):
    a slot or block id outside the cache, a ``seq_lens`` entry longer than its block
    table covers, a scale that is not finite and > 0, copy destinations that repeat or
    are also sources, an index tensor of a non-integer dtype, or a K/V dtype the kernel
    does not take.  ``extra`` carries ``field`` (the argument), ``value`` (the bad index
    or value) and ``valid`` (the range or set that would be accepted)."""
