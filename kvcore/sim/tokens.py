"""Deterministic synthetic token ids.

``tok(stream, pos) = 1 + splitmix64(((stream << 32) | pos) mod 2**64) % 50000``: the
formula of the runtime conformance workload (``tests/runtime/data/*.meta.json``).
splitmix64 is Steele, Lea and Flood's SplitMix64 finalizer (OOPSLA 2014; constants as in
``java.util.SplittableRandom``).  numpy is used when importable (vectorized); the pure
Python path gives identical ids.
"""

from __future__ import annotations

from typing import Any

__all__ = ["splitmix64", "tok", "stream_tokens", "VOCAB"]

MASK = (1 << 64) - 1
VOCAB = 50000

_np: Any
try:  # optional speed-up
    import numpy as _np
except ImportError:  # pragma: no cover
    _np = None


def splitmix64(x: int) -> int:
    """SplitMix64 of a 64-bit int (all arithmetic mod 2**64)."""
    z = (x + 0x9E3779B97F4A7C15) & MASK
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK
    return z ^ (z >> 31)


def tok(stream: int, pos: int) -> int:
    """Token id in ``[1, 50000]`` at position ``pos`` of ``stream``."""
    return 1 + splitmix64(((stream << 32) | pos) & MASK) % VOCAB


def stream_tokens(stream: int, start: int, count: int) -> list[int]:
    """``[tok(stream, p) for p in range(start, start + count)]``."""
    if count <= 0:
        return []
    if _np is None or count < 64:
        return [tok(stream, p) for p in range(start, start + count)]
    u = _np.uint64
    with _np.errstate(over="ignore"):
        x = (_np.uint64((stream << 32) & MASK)
             | _np.arange(start, start + count, dtype=_np.uint64))
        z = x + u(0x9E3779B97F4A7C15)
        z = (z ^ (z >> u(30))) * u(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> u(27))) * u(0x94D049BB133111EB)
        z = z ^ (z >> u(31))
    return ((z % u(VOCAB)) + u(1)).tolist()
