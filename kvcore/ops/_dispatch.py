"""Pick the Triton kernel or the torch reference for a call."""

from __future__ import annotations

import importlib.util
import os
from typing import Any

from kvcore.errors import KVCoreError

__all__ = ["IMPLS", "triton_available", "interpreting", "use_triton"]

IMPLS = ("auto", "triton", "ref")


def triton_available() -> bool:
    """True when the ``triton`` package can be imported."""
    return importlib.util.find_spec("triton") is not None


def interpreting() -> bool:
    """True under ``TRITON_INTERPRET=1`` (Triton kernels run on CPU tensors, in numpy)."""
    return os.environ.get("TRITON_INTERPRET", "0") == "1"


def use_triton(tensor: Any, impl: str = "auto") -> bool:
    """Whether a call on ``tensor`` runs the Triton kernel.

    ``impl="auto"``: Triton for CUDA tensors, or for any tensor under
    ``TRITON_INTERPRET=1``; the torch reference otherwise (CPU tensors, or no triton).
    ``"triton"`` / ``"ref"`` force one.

    Raises
    ------
    KVCoreError
        ``impl`` is not one of ``auto``, ``triton``, ``ref``; or ``"triton"`` was forced
        where it cannot run (no triton, or a CPU tensor outside the interpreter).
    """
    if impl not in IMPLS:
        raise KVCoreError(f"impl {impl!r} is not one of {', '.join(IMPLS)}", field="impl",
                          value=impl)
    if impl == "ref":
        return False
    runnable = triton_available() and (bool(tensor.is_cuda) or interpreting())
    if impl == "triton" and not runnable:
        raise KVCoreError(
            "impl='triton' needs triton and a CUDA tensor (or TRITON_INTERPRET=1 set "
            "before triton is imported)", field="impl", value=impl)
    return runnable
