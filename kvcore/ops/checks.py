"""Host-side checks of kernel arguments, run before any launch (core and plugins).

A Triton kernel does not bound-check its loads and stores: a slot id past the cache, a
block id past ``num_blocks`` or a ``seq_lens`` entry longer than its block table makes it
read or write another layer's pages (or fault the device).  Every kernel entry point of
:mod:`kvcore.ops` and of the plugins therefore checks its index arguments here first, on
the reference path and on the Triton path alike, and raises
:class:`~kvcore.errors.KernelArgumentError` naming the argument, the bad value (and
where it is) and the valid range.

Cost: one fused min/max reduction per index tensor (O(n), no Python loop over the
elements), and the extremes of all the tensors one call checks come back to the host in
one transfer (one device sync per call on a GPU).  The error path takes further syncs
to locate the bad entry.  kvcore has no debug switch for kernel arguments (the only one,
``KVCacheManager(check_invariants=...)``, checks the manager), so these checks are
always on.

``import kvcore.ops.checks`` does not import torch; the functions do, on first call.

- ids: ``-1`` means "skip" (padding, the null block as
  :func:`kvcore.runtime.kernel_tables.block_tables` maps it); other negative ids are
  refused; slot ids ``< num_blocks x block_size``, block ids ``< num_blocks``;
- index tensors: int32 or int64 (a Python list or tuple is converted to int64 on the
  given device; a float or bool tensor is refused);
- ``seq_lens`` in ``[0, block_table.shape[1] x block_size]``; the block ids a request
  reads (the first ``ceil(seq_len / block_size)`` of its row) in ``[-1, num_blocks)``,
  entries past that are ignored, as the kernels ignore them;
- scales finite and > 0; copy destinations distinct and not also sources.
"""

from __future__ import annotations

import math
from typing import Any

from kvcore.errors import KernelArgumentError, shorten

__all__ = [
    "INDEX_DTYPES",
    "FLOAT_DTYPES",
    "index_tensor",
    "check_ids",
    "check_block_table",
    "check_scales",
    "check_copy_pairs",
    "check_dtype",
]

#: dtypes an index tensor may have
INDEX_DTYPES = ("int32", "int64")
#: the dtypes of K / V inputs the kernels take
FLOAT_DTYPES = ("bfloat16", "float16", "float32")


def _torch() -> Any:
    import torch

    return torch


def _dtype_name(t: Any) -> str:
    return str(t.dtype).replace("torch.", "")


def _fail(message: str, field: str, value: Any, valid: str, **extra: Any) -> KernelArgumentError:
    return KernelArgumentError(message, field=field, value=value, valid=valid, **extra)


def index_tensor(x: Any, name: str, device: Any = None) -> Any:
    """``x`` as an integer index tensor: a tensor must be int32 / int64 (returned as is);
    a list, tuple or int is converted to int64 on ``device``.

    Raises :class:`KernelArgumentError` (``field=name``) for anything else."""
    torch = _torch()
    if isinstance(x, torch.Tensor):
        if _dtype_name(x) not in INDEX_DTYPES:
            raise _fail(f"{name} must be an int32 or int64 tensor; got dtype "
                        f"{_dtype_name(x)}", name, _dtype_name(x), "int32 or int64")
        return x
    if isinstance(x, (list, tuple, int)) and not isinstance(x, bool):
        try:
            t = torch.as_tensor(x, device=device)
        except (TypeError, ValueError, RuntimeError) as e:
            raise _fail(f"{name}: {shorten(x)} is not a rectangular list of ints "
                        f"({type(e).__name__})", name, shorten(x),
                        "int32/int64 tensor or list of ints") from None
        if t.numel() == 0:
            return t.to(torch.int64)
        if t.dtype != torch.int64:
            raise _fail(f"{name} must hold ints; got {shorten(x)} (dtype "
                        f"{_dtype_name(t)})", name, shorten(x),
                        "int32/int64 tensor or list of ints")
        return t
    raise _fail(f"{name} must be an int32/int64 tensor or a list of ints; got "
                f"{type(x).__name__}", name, type(x).__name__,
                "int32/int64 tensor or list of ints")


def _extremes(tensors: list[Any]) -> list[tuple[int, int]]:
    """(min, max) of each non-empty tensor, brought to the host in one transfer."""
    torch = _torch()
    parts = []
    for t in tensors:
        lo, hi = torch.aminmax(t.reshape(-1))
        parts.append(torch.stack((lo.to(torch.int64), hi.to(torch.int64))))
    if not parts:
        return []
    flat = torch.cat(parts).tolist() if len(parts) > 1 else parts[0].tolist()
    return [(int(flat[2 * i]), int(flat[2 * i + 1])) for i in range(len(parts))]


def _where(t: Any, bad: Any) -> str:
    """The position of the first True of ``bad`` (error path only)."""
    torch = _torch()
    idx = torch.nonzero(bad.reshape(bad.shape if bad.dim() else (1,)))
    if idx.shape[0] == 0:
        return ""
    pos = tuple(int(i) for i in idx[0].tolist())
    return f" at index {pos[0] if len(pos) == 1 else list(pos)}"


def _range_error(t: Any, name: str, low: int, high: int, what: str, lo: int, hi: int,
                 hint: str = "") -> KernelArgumentError:
    bad_value = lo if lo < low else hi
    bad = (t < low) | (t >= high)
    valid = f"[{low}, {high - 1}]" if what == "length" else f"[{low}, {high})"
    skip = " (-1 = skip)" if low == -1 else ""
    return _fail(f"{name}: {what} {bad_value}{_where(t, bad)} is outside {valid}{skip}"
                 f"{hint}", name, bad_value, valid)


def check_ids(checks: list[tuple[Any, str, int, int, str]], hint: str = "") -> None:
    """Range-check index tensors with one host transfer for all of them.

    ``checks``: ``(tensor, name, low, high, what)`` each; ``tensor`` values must lie in
    ``[low, high)`` (``what`` names an entry in the message: ``"slot id"``).  Empty
    tensors pass.  ``hint`` is appended to the message (e.g. the cache's shape)."""
    live = [c for c in checks if c[0].numel()]
    for (t, name, low, high, what), (lo, hi) in zip(live, _extremes([c[0] for c in live])):
        if lo < low or hi >= high:
            raise _range_error(t, name, low, high, what, lo, hi, hint)


def check_block_table(block_table: Any, seq_lens: Any, block_size: int, num_blocks: int,
                      *, table_name: str = "block_table", lens_name: str = "seq_lens",
                      min_len: int = 0) -> None:
    """``seq_lens`` in ``[min_len, block_table.shape[1] x block_size]`` and the block ids
    each request reads (the first ``ceil(seq_len / block_size)`` entries of its row) in
    ``[-1, num_blocks)``; one host transfer."""
    torch = _torch()
    if seq_lens.numel() == 0:
        return
    max_len = block_table.shape[1] * block_size
    if block_table.shape[1] == 0:
        (lo, hi), = _extremes([seq_lens])
        if lo < min_len or hi > max_len:
            raise _range_error(seq_lens, lens_name, min_len, max_len + 1, "length", lo,
                               hi, f" (block_table has {block_table.shape[1]} columns x "
                               f"block_size {block_size})")
        return
    nblk = (seq_lens.to(torch.int64) + (block_size - 1)) // block_size
    cols = torch.arange(block_table.shape[1], device=block_table.device)
    used = cols[None, :] < nblk.to(block_table.device)[:, None]
    ids = torch.where(used, block_table, torch.full_like(block_table, -1))
    (slo, shi), (blo, bhi) = _extremes([seq_lens, ids])
    if slo < min_len or shi > max_len:
        raise _range_error(seq_lens, lens_name, min_len, max_len + 1, "length", slo, shi,
                           f" (block_table has {block_table.shape[1]} columns x "
                           f"block_size {block_size})")
    if blo < -1 or bhi >= num_blocks:
        raise _range_error(ids, table_name, -1, num_blocks, "block id", blo, bhi,
                           f" (the cache has {num_blocks} blocks)")


def block_table_and_lens(block_table: Any, seq_lens: Any, device: Any, block_size: int,
                         num_blocks: int, *, num_reqs: int | None = None
                         ) -> tuple[Any, Any]:
    """``(block_table, seq_lens)`` of a paged read as index tensors on ``device``
    (:func:`index_tensor`), shaped ``[num_reqs, max_blocks_per_req]`` and
    ``[num_reqs]`` (``num_reqs`` given: that many rows, e.g. the query's), and checked by
    :func:`check_block_table` against a cache of ``num_blocks`` blocks of
    ``block_size`` tokens.  Raises KernelArgumentError (field ``block_table`` for the
    shapes)."""
    block_table = index_tensor(block_table, "block_table", device)
    seq_lens = index_tensor(seq_lens, "seq_lens", device)
    if block_table.dim() != 2 or seq_lens.dim() != 1 \
            or block_table.shape[0] != seq_lens.shape[0] \
            or (num_reqs is not None and seq_lens.shape[0] != num_reqs):
        rows = "num_reqs" if num_reqs is None else f"num_reqs = {num_reqs}"
        raise _fail(f"block_table must be [{rows}, max_blocks_per_req] and seq_lens "
                    f"[{rows}]; got {tuple(block_table.shape)} and "
                    f"{tuple(seq_lens.shape)}", "block_table", tuple(block_table.shape),
                    f"[{rows}, max_blocks_per_req] and [{rows}]")
    check_block_table(block_table, seq_lens, block_size, num_blocks)
    return block_table, seq_lens


def check_scales(**scales: Any) -> None:
    """Each scale (a Python number or a tensor) finite and > 0; tensors' extremes come
    back in one transfer."""
    torch = _torch()
    tensors = []
    for name, s in scales.items():
        if isinstance(s, torch.Tensor):
            if s.numel() == 0:
                raise _fail(f"{name} is an empty tensor", name, "[]", "finite, > 0")
            tensors.append((name, s))
            continue
        try:
            v = float(s)
        except (TypeError, ValueError):
            raise _fail(f"{name} must be a number or a float tensor; got "
                        f"{type(s).__name__}", name, shorten(s), "finite, > 0") from None
        if not (math.isfinite(v) and v > 0):
            raise _fail(f"{name} = {v!r}: a scale must be finite and > 0", name, v,
                        "finite, > 0")
    if not tensors:
        return
    parts = []
    for _, s in tensors:
        f = s.detach().reshape(-1).float()
        ok = torch.isfinite(f) & (f > 0)
        parts.append(torch.stack((ok.all().float(), f.min(), f.max())))
    flat = torch.cat(parts).tolist()
    for i, (name, s) in enumerate(tensors):
        if not flat[3 * i]:
            f = s.detach().reshape(-1).float()
            bad = ~(torch.isfinite(f) & (f > 0))
            v = float(f[bad][0])
            raise _fail(f"{name} = {v!r}{_where(f, bad) if f.numel() > 1 else ''}: a "
                        f"scale must be finite and > 0", name, v, "finite, > 0")


def check_copy_pairs(src: Any, dst: Any, num_blocks: int, *, name: str = "src_to_dst",
                     hint: str = "", src_name: str | None = None,
                     dst_name: str | None = None) -> None:
    """Source and destination block ids in ``[-1, num_blocks)`` (a pair with a -1 is
    skipped), and among the pairs kept, destinations distinct and never a source
    (copies run in parallel: a repeated destination or a source also written makes the
    result depend on the order).  One host transfer.  ``name`` is the argument in
    messages (``src_name`` / ``dst_name`` when sources and destinations are separate
    arguments)."""
    torch = _torch()
    src_name, dst_name = src_name or name, dst_name or name
    n = src.shape[0]
    if n == 0:
        return
    keep = (src >= 0) & (dst >= 0)
    ar = torch.arange(n, device=src.device, dtype=torch.int64)
    # skipped pairs get sentinels that match nothing: dst -1-i, src -(n+1)-i
    d = torch.where(keep, dst.to(torch.int64), -1 - ar)
    s = torch.where(keep, src.to(torch.int64), -(n + 1) - ar)
    ds = torch.sort(d).values
    dup = (ds[1:] == ds[:-1]).any() if n > 1 else torch.zeros((), dtype=torch.bool,
                                                                 device=src.device)
    cross = torch.isin(d, s).any()
    lo, hi = torch.aminmax(torch.stack((src, dst)).reshape(-1).to(torch.int64))
    vals = torch.stack((lo, hi, dup.to(torch.int64), cross.to(torch.int64))).tolist()
    lo_, hi_, dup_, cross_ = (int(v) for v in vals)
    if lo_ < -1 or hi_ >= num_blocks:
        for t, what, field in ((src, "source", src_name), (dst, "destination", dst_name)):
            bad = (t < -1) | (t >= num_blocks)
            if bool(bad.any()):
                v = int(t[bad][0])
                at = _where(t, bad).replace("index", "pair")
                raise _fail(f"{field}: {what} block id {v}{at} is outside "
                            f"[-1, {num_blocks}) (-1 = skip){hint}", field, v,
                            f"[-1, {num_blocks})")
    if dup_:
        u, c = torch.unique(d[d >= 0], return_counts=True)
        v = int(u[c > 1][0])
        raise _fail(f"{dst_name}: destination block {v} appears in more than one pair; "
                    f"destinations must be distinct", dst_name, v, "distinct destinations")
    if cross_:
        v = int(d[torch.isin(d, s)][0])
        raise _fail(f"{dst_name}: block {v} is both a destination and a source; a "
                    f"destination must not also be a source", dst_name, v,
                    "destinations that are not sources")


def check_dtype(t: Any, name: str, allowed: tuple[str, ...] = FLOAT_DTYPES,
                same_as: tuple[Any, str] | None = None) -> None:
    """``t``'s dtype one of ``allowed`` and, with ``same_as=(other, other_name)``, equal
    to ``other``'s."""
    got = _dtype_name(t)
    if got not in allowed:
        raise _fail(f"{name} has dtype {got}; valid: {', '.join(allowed)}", name, got,
                    ", ".join(allowed))
    if same_as is not None and _dtype_name(same_as[0]) != got:
        other = _dtype_name(same_as[0])
        raise _fail(f"{name} has dtype {got} but {same_as[1]} has {other}; they must be "
                    f"the same", name, got, other)
