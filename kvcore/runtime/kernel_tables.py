"""Kernel-facing block tables: what a model runner hands to the attention and state
kernels, with the null block mapped to -1.

The runtime's tables hold :class:`~kvcore.runtime.block_pool.KVCacheBlock` objects, and
positions a layer no longer reads (outside a sliding window, the align-mode entries of
a Mamba table, the gap of R-SWA) hold the **null block**, block id 0, which every request
shares.  Passed to a kernel as id 0, a write there corrupts every request and a read
returns another request's data.  These helpers turn tables into ids in which the null
block is ``-1``; every kernel of kvcore and its plugins skips ids < 0 (writers leave the
memory alone, readers mask the position or return zeros).

* :func:`block_table_ids`: one table -> ``list[int]``.
* :func:`block_tables`: a batch of tables -> ``int32 [num_reqs, width]`` padded with
  -1 (a list of lists, or a torch tensor with ``as_tensor=True``).
* :func:`slot_mapping`: token positions -> slots ``block_id x block_size + offset``
  (vLLM's ``slot_mapping``), -1 where the block is null or missing.
* :func:`state_indices`: the state columns of Mamba-like groups
  (``[running block, speculative blocks]`` per request) -> ``int32 [num_reqs,
  1 + num_speculative_blocks]``.
* :func:`request_block_tables`: the tables of some requests of a
  :class:`~kvcore.runtime.manager.KVCacheManager` group.

Imports no torch unless a tensor is asked for (``as_tensor=True``).
"""

from __future__ import annotations

import operator
from collections.abc import Iterable, Sequence
from typing import Any

__all__ = [
    "NULL_BLOCK_KERNEL_ID",
    "block_table_ids",
    "block_tables",
    "slot_mapping",
    "state_indices",
    "request_block_tables",
]

#: the id kernels receive for the null block and for padding
NULL_BLOCK_KERNEL_ID = -1


def _kernel_id(b: Any) -> int:
    """-1 for the null block (``is_null`` or id 0) or None; the block id otherwise."""
    if b is None:
        return -1
    if isinstance(b, bool):
        raise _type_error(b)
    if isinstance(b, int):
        return -1 if b <= 0 else int(b)
    if hasattr(b, "__index__") and not hasattr(b, "block_id"):  # numpy ints
        i = operator.index(b)
        return -1 if i <= 0 else i
    if getattr(b, "is_null", False):
        return -1
    bid = getattr(b, "block_id", None)
    if not isinstance(bid, int) or isinstance(bid, bool):
        raise _type_error(b)
    return -1 if bid <= 0 else bid


def _type_error(b: Any) -> Exception:
    from kvcore.errors import KVCoreError

    return KVCoreError(f"a block table entry must be a KVCacheBlock or an int block id, "
                       f"got {b!r}", field="block_table", value=repr(b))


def _iterable(value: Any, field: str, what: str) -> Iterable[Any]:
    """``value`` when it can be iterated (not a str or bytes), else KVCoreError naming
    ``field``."""
    if isinstance(value, (str, bytes)) or not hasattr(value, "__iter__"):
        from kvcore.errors import KVCoreError
        from kvcore.units import shorten

        raise KVCoreError(f"{field} must be {what}, got {shorten(value)} "
                          f"({type(value).__name__})", field=field, value=shorten(value))
    return value  # type: ignore[no-any-return]


def block_table_ids(table: Iterable[Any]) -> list[int]:
    """Kernel ids of one block table (KVCacheBlocks or int ids): the null block (id 0)
    and None become -1, negative ids stay -1.  ``[null, null, block 7] -> [-1, -1, 7]``.
    Raises :class:`~kvcore.errors.KVCoreError` (field ``block_table``) for a table that
    is not a sequence or an entry that is neither a block nor an int id.
    """
    return [_kernel_id(b) for b in _iterable(
        table, "block_table", "a sequence of KVCacheBlocks or int block ids")]


def _device(device: Any) -> Any:
    """``device`` as a torch device (None: torch's default), else KVCoreError naming
    ``device``."""
    from kvcore.units import import_torch

    torch = import_torch("a kernel table as a tensor (as_tensor=True)")

    if device is None or isinstance(device, torch.device):
        return device
    try:
        if isinstance(device, (str, int)) and not isinstance(device, bool):
            return torch.device(device)
    except (RuntimeError, ValueError, TypeError):
        pass
    from kvcore.errors import KVCoreError
    from kvcore.units import shorten

    raise KVCoreError(f"device must be a torch.device, a device string ('cpu', 'cuda:0') "
                      f"or None, got {type(device).__name__} {shorten(device)}",
                      field="device", value=shorten(device))


def _as_tensor_flag(as_tensor: Any) -> bool:
    if as_tensor is True or as_tensor is False:
        return as_tensor
    from kvcore.errors import KVCoreError

    raise KVCoreError(f"as_tensor must be True or False, got {as_tensor!r}"[:200],
                      field="as_tensor", value=repr(as_tensor)[:40])


def _as_int32(rows: list[list[int]], device: Any) -> Any:
    device = _device(device)
    import torch

    return torch.tensor(rows, dtype=torch.int32, device=device) if rows and rows[0] \
        else torch.empty((len(rows), 0), dtype=torch.int32, device=device)


def block_tables(tables: Sequence[Iterable[Any]], *, width: int | None = None,
                 as_tensor: bool = False, device: Any = None) -> Any:
    """A batch of block tables as kernel ids, one row per request, padded with -1.

    Parameters
    ----------
    tables: one table per request (KVCacheBlocks or int ids).
    width: columns (``max_blocks_per_req``); default the longest table.  A table longer
        than ``width`` raises :class:`~kvcore.errors.KVCoreError`.
    as_tensor: return ``torch.int32 [num_reqs, width]`` on ``device`` instead of lists.

    Returns ``list[list[int]]`` or the tensor; the null block and padding are -1.
    Raises :class:`~kvcore.errors.KVCoreError` naming ``tables``, ``block_table`` or
    ``width`` for an argument of the wrong type.
    """
    rows = [block_table_ids(t) for t in _iterable(
        tables, "tables", "a sequence of block tables (one per request)")]
    from kvcore.units import as_int

    w_int = max((len(r) for r in rows), default=0) if width is None else as_int(width)
    if w_int is None or w_int < 0:  # numpy integers too, as a plain int; bool refused
        from kvcore.errors import KVCoreError

        raise KVCoreError(f"width must be an int >= 0 (blocks per request), got "
                          f"{width!r}", field="width", value=repr(width))
    w = w_int
    for i, r in enumerate(rows):
        if len(r) > w:
            from kvcore.errors import KVCoreError

            raise KVCoreError(f"table {i} has {len(r)} blocks, more than width {w}",
                              field="width", value=w)
        r.extend([-1] * (w - len(r)))
    return _as_int32(rows, device) if _as_tensor_flag(as_tensor) else rows


def slot_mapping(table: Iterable[Any], positions: Iterable[int], block_size: int, *,
                 as_tensor: bool = False, device: Any = None) -> Any:
    """Slots of token ``positions`` of one request: ``id x block_size + position %
    block_size`` with ``id = table[position // block_size]``; -1 where that block is
    the null block or the position lies past the table (padding), so a writer skips
    it.  ``block_size`` in tokens; returns ``list[int]`` or ``torch.int64 [n]``."""
    from kvcore.units import as_int

    number = as_int(block_size)  # numpy integers too, as a plain int
    if number is None or number < 1:
        from kvcore.errors import KVCoreError

        raise KVCoreError(f"block_size must be a positive int (tokens), got "
                          f"{block_size!r}", field="block_size", value=repr(block_size))
    block_size = number
    ids = block_table_ids(table)
    out = []
    positions = list(_iterable(positions, "positions", "a sequence of int token positions"))
    for p in positions:
        if type(p) is not int:
            if isinstance(p, bool) or not hasattr(p, "__index__"):
                from kvcore.errors import KVCoreError

                raise KVCoreError(f"positions must be int token positions, got {p!r} "
                                  f"({type(p).__name__})", field="positions",
                                  value=repr(p))
            p = operator.index(p)
        i = p // block_size if p >= 0 else -1
        bid = ids[i] if 0 <= i < len(ids) else -1
        out.append(bid * block_size + p % block_size if bid >= 0 else -1)
    if _as_tensor_flag(as_tensor):
        device = _device(device)
        import torch

        return torch.tensor(out, dtype=torch.int64, device=device)
    return out


def state_indices(columns: Sequence[Iterable[Any]], *, width: int | None = None,
                  as_tensor: bool = False, device: Any = None) -> Any:
    """The state columns of a state group, one row per request (the running block,
    then the speculative blocks: ``MambaManager.state_blocks``), as kernel ids padded
    with -1: ``int32 [num_reqs, 1 + num_speculative_blocks]``.  Same conventions as
    :func:`block_tables`."""
    return block_tables(columns, width=width, as_tensor=as_tensor, device=device)


def request_block_tables(manager: Any, requests: Sequence[Any], group_id: int = 0, *,
                         width: int | None = None, as_tensor: bool = False,
                         device: Any = None) -> Any:
    """The block tables of ``requests`` (Request objects or ids) in group ``group_id``
    of a :class:`~kvcore.runtime.manager.KVCacheManager`, as :func:`block_tables`.
    A request without blocks gives a row of -1."""
    managers = getattr(manager, "managers", None)
    if not isinstance(managers, list):
        from kvcore.errors import KVCoreError
        from kvcore.units import shorten

        raise KVCoreError(f"manager must be a kvcore KVCacheManager, got "
                          f"{shorten(manager)} ({type(manager).__name__})",
                          field="manager", value=shorten(manager))
    from kvcore.units import as_int

    gid = as_int(group_id)  # numpy integers too; bool refused
    if gid is None or not 0 <= gid < len(managers):
        from kvcore.errors import KVCoreError

        raise KVCoreError(f"group_id {group_id!r} is not a group of this manager "
                          f"(0..{len(managers) - 1})", field="group_id",
                          value=repr(group_id))
    m = managers[gid]
    rids = [r if isinstance(r, str) else getattr(r, "request_id", None)
            for r in _iterable(requests, "requests", "a sequence of requests or ids")]
    for r, rid in zip(requests, rids):
        if not isinstance(rid, str):
            from kvcore.errors import KVCoreError
            from kvcore.units import shorten

            raise KVCoreError(f"requests must hold Request objects or request ids "
                              f"(str), got {shorten(r)}", field="requests",
                              value=shorten(r))
    return block_tables([m.get_blocks(rid) for rid in rids], width=width,
                        as_tensor=as_tensor, device=device)
