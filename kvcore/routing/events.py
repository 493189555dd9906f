"""KV-cache events as the residency index reads them, and their JSON form.

Three sources give the same three events:

* kvcore's runtime (:meth:`kvcore.runtime.KVCacheManager.take_events`):
  :class:`~kvcore.runtime.BlockStored` / :class:`~kvcore.runtime.BlockRemoved` /
  :class:`~kvcore.runtime.AllBlocksCleared` with ``group_id``;
* vLLM 0.32 (``vllm.distributed.kv_events``): ``BlockStored`` / ``BlockRemoved`` /
  ``AllBlocksCleared`` msgspec structs with ``group_idx`` (None from publishers older
  than hybrid groups), ``medium`` (``"GPU"``, ``"CPU"``, ``"STORAGE"``) and hashes that
  are ``bytes`` or, with ``VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES=1``, the low 64 bits of
  the big-endian hash as an ``int``;
* the JSON form (:func:`event_to_dict` / :func:`event_from_dict`; docs/ROUTING.md):
  ``{"type": "BlockStored", "block_hashes": [hex, ...], "parent_block_hash": hex|null,
  "token_ids": [...], "block_size": n, "group_id": g, "lora_name": null,
  "medium": "GPU"}``, ``{"type": "BlockRemoved", "block_hashes": [...],
  "group_id": g}``, ``{"type": "AllBlocksCleared"}``.  Hashes are lower-case hex
  strings (bytes) or JSON integers (64-bit int hashes).

:func:`decode` turns any of them into ``(op, group_id, block_size, block_hashes,
medium)`` with ``op`` one of :data:`STORED`, :data:`REMOVED`, :data:`CLEARED`; it is the
one place that knows the field names.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

__all__ = ["STORED", "REMOVED", "CLEARED", "decode", "event_to_dict", "event_from_dict",
           "hash_to_json", "hash_from_json"]

STORED = 1
REMOVED = 2
CLEARED = 3

_OPS = {"BlockStored": STORED, "BlockRemoved": REMOVED, "AllBlocksCleared": CLEARED}

Decoded = tuple[int, Any, Any, Sequence[Any], Any]


def hash_to_json(h: Any) -> Any:
    """A block hash as JSON: hex string for bytes, the int itself for int hashes."""
    if isinstance(h, (bytes, bytearray)):
        return bytes(h).hex()
    return h


def hash_from_json(v: Any) -> Any:
    """Inverse of :func:`hash_to_json`.  Raises :class:`~kvcore.errors.KVEventError`
    for a value that is neither a hex string nor an int."""
    if isinstance(v, str):
        try:
            return bytes.fromhex(v)
        except ValueError:
            pass
    elif type(v) is int or isinstance(v, (bytes, bytearray)):
        return v
    from kvcore.errors import KVEventError

    r = repr(v)
    raise KVEventError(f"block hash {r[:40]}: expected a hex string or an int",
                       field="block_hashes", value=r[:40])


def _decode_dict(ev: dict[str, Any]) -> Decoded:
    from kvcore.errors import KVEventError

    t = ev.get("type")
    op = _OPS.get(t) if isinstance(t, str) else None
    if op is None:
        raise KVEventError(f"event type {t!r} is not one of {', '.join(_OPS)}",
                           field="type", value=t)
    if op == CLEARED:
        return CLEARED, None, None, (), None
    g = ev.get("group_id", ev.get("group_idx"))
    raw = ev.get("block_hashes")
    if raw is None:
        raw = []
    if type(raw) not in (list, tuple):
        raise KVEventError(f"block_hashes: expected a list of hex strings or ints, got "
                           f"{repr(raw)[:40]}", field="block_hashes", value=repr(raw)[:40])
    hashes = [hash_from_json(h) for h in raw]
    bs = ev.get("block_size")
    if op == STORED and (type(bs) is not int or bs <= 0):
        raise KVEventError(f"block_size: expected an int > 0, got {repr(bs)[:40]}",
                           field="block_size", value=repr(bs)[:40])
    return op, g, bs, hashes, ev.get("medium")


def _attr_decoder(cls: type) -> Callable[[Any], Decoded]:
    name = cls.__name__
    op = _OPS.get(name)
    if op is None:
        from kvcore.errors import KVEventError

        raise KVEventError(f"event of type {name!r} is not a KV-cache event (expected "
                           f"{', '.join(_OPS)} from kvcore or vLLM, or their dict form)",
                           field="type", value=name)
    if op == CLEARED:
        return lambda ev: (CLEARED, None, None, (), None)
    fields = set(getattr(cls, "__struct_fields__", ())) | set(
        getattr(cls, "__dataclass_fields__", {}))
    gfield = "group_id" if "group_id" in fields or not fields else "group_idx"
    has_medium = "medium" in fields
    if op == STORED:
        if has_medium:
            return lambda ev: (STORED, getattr(ev, gfield, None), ev.block_size,
                               ev.block_hashes, ev.medium)
        return lambda ev: (STORED, getattr(ev, gfield, None), ev.block_size,
                           ev.block_hashes, None)
    if has_medium:
        return lambda ev: (REMOVED, getattr(ev, gfield, None), None, ev.block_hashes,
                           ev.medium)
    return lambda ev: (REMOVED, getattr(ev, gfield, None), None, ev.block_hashes, None)


_DECODERS: dict[type, Callable[[Any], Decoded]] = {dict: _decode_dict}


def decode(ev: Any) -> Decoded:
    """``(op, group_id, block_size, block_hashes, medium)`` of one event (``group_id``,
    ``block_size`` and ``medium`` None where the event has none).  Raises
    :class:`~kvcore.errors.KVEventError` for an object that is not a KV-cache event."""
    f = _DECODERS.get(type(ev))
    if f is None:
        f = _DECODERS[type(ev)] = _attr_decoder(type(ev))
    return f(ev)


def event_to_dict(ev: Any) -> dict[str, Any]:
    """The JSON form of a kvcore or vLLM event (module docstring)."""
    if isinstance(ev, dict):
        return ev
    op, g, bs, hashes, medium = decode(ev)
    if op == CLEARED:
        return {"type": "AllBlocksCleared"}
    d: dict[str, Any] = {"type": "BlockStored" if op == STORED else "BlockRemoved",
                         "block_hashes": [hash_to_json(h) for h in hashes],
                         "group_id": g}
    if op == STORED:
        parent = getattr(ev, "parent_block_hash", None)
        d["parent_block_hash"] = None if parent is None else hash_to_json(parent)
        d["token_ids"] = list(getattr(ev, "token_ids", ()) or ())
        d["block_size"] = bs
        d["lora_name"] = getattr(ev, "lora_name", None)
    if medium is not None:
        d["medium"] = medium
    return d


def event_from_dict(d: dict[str, Any]) -> Any:
    """A kvcore runtime event from its JSON form.  Raises
    :class:`~kvcore.errors.KVEventError` naming the field for a malformed one."""
    from kvcore.errors import KVEventError
    from kvcore.runtime.block_pool import AllBlocksCleared, BlockRemoved, BlockStored

    if not isinstance(d, dict):
        raise KVEventError(f"event: expected a dict (the JSON form), got "
                           f"{type(d).__name__}", field="event", value=type(d).__name__)
    g0 = d.get("group_id", d.get("group_idx"))
    if g0 is not None and (type(g0) is not int or g0 < 0):
        raise KVEventError(f"group_id: expected an int >= 0 or null, got {g0!r}"[:120],
                           field="group_id", value=repr(g0)[:40])
    tok = d.get("token_ids")
    if tok is not None and (type(tok) not in (list, tuple)
                            or any(type(t) is not int for t in tok)):
        raise KVEventError("token_ids: expected a list of ints", field="token_ids",
                           value=repr(tok)[:40])

    op, g, bs, hashes, _ = _decode_dict(d)
    if op == CLEARED:
        return AllBlocksCleared()
    if op == REMOVED:
        return BlockRemoved(tuple(hashes), g)
    parent = d.get("parent_block_hash")
    lora = d.get("lora_name")
    if lora is not None and not isinstance(lora, str):
        raise KVEventError(f"lora_name: expected a str or null, got {lora!r}"[:120],
                           field="lora_name", value=repr(lora)[:40])
    return BlockStored(tuple(hashes), None if parent is None else hash_from_json(parent),
                       tuple(d.get("token_ids") or ()), bs, g, d.get("lora_name"))
