"""Element dtype names and their item sizes, without importing torch.

Every public function accepts a dtype *name* (``"bfloat16"``, ``"bf16"``,
``"float8_e4m3fn"``, ...) or, when torch is installed, a ``torch.dtype``.  Names are
normalized to torch's spelling (``"bfloat16"``, ``"float16"``, ``"float8_e4m3fn"``).
"""

from __future__ import annotations

from typing import Any

from kvcore.errors import UnknownDtypeError

__all__ = ["DTYPE_SIZES", "normalize_dtype", "dtype_size", "to_torch_dtype"]

#: canonical dtype name -> item size in bytes
DTYPE_SIZES: dict[str, int] = {
    "float64": 8,
    "float32": 4,
    "float16": 2,
    "bfloat16": 2,
    "float8_e4m3fn": 1,
    "float8_e5m2": 1,
    "float8_e4m3fnuz": 1,
    "float8_e5m2fnuz": 1,
    "int64": 8,
    "int32": 4,
    "int16": 2,
    "int8": 1,
    "uint8": 1,
    "bool": 1,
}

_ALIASES: dict[str, str] = {
    "double": "float64",
    "fp64": "float64",
    "float": "float32",
    "fp32": "float32",
    "f32": "float32",
    "half": "float16",
    "fp16": "float16",
    "f16": "float16",
    "bf16": "bfloat16",
    "fp8": "float8_e4m3fn",
    "fp8_e4m3": "float8_e4m3fn",
    "float8_e4m3": "float8_e4m3fn",
    "fp8_e5m2": "float8_e5m2",
    "long": "int64",
    "int": "int32",
    "byte": "uint8",
}


def normalize_dtype(dtype: Any) -> str:
    """Return the canonical name of ``dtype`` (a name or a ``torch.dtype``).

    Raises
    ------
    UnknownDtypeError
        ``dtype`` is neither a known name nor a torch dtype; the message lists the
        known names.
    """
    if not isinstance(dtype, str):
        # torch.dtype prints as "torch.bfloat16"; numpy dtypes have .name
        text = str(dtype)
        if text.startswith("torch."):
            dtype = text[len("torch."):]
        elif hasattr(dtype, "name"):
            dtype = str(dtype.name)
        else:
            raise UnknownDtypeError(
                f"dtype {dtype!r} is not a dtype name or torch.dtype; "
                f"known names: {', '.join(sorted(DTYPE_SIZES))}"
            )
    name = dtype.strip().lower()
    if name.startswith("torch."):
        name = name[len("torch."):]
    name = _ALIASES.get(name, name)
    if name not in DTYPE_SIZES:
        raise UnknownDtypeError(
            f"dtype {dtype!r} is not known; known names: "
            f"{', '.join(sorted(set(DTYPE_SIZES) | set(_ALIASES)))}"
        )
    return name


def dtype_size(dtype: Any) -> int:
    """Item size in bytes of ``dtype`` (a name or a ``torch.dtype``)."""
    return DTYPE_SIZES[normalize_dtype(dtype)]


def to_torch_dtype(dtype: Any) -> Any:
    """The ``torch.dtype`` for ``dtype``; imports torch (install ``kvcore[torch]``).
    Raises UnknownDtypeError for an unknown name and MissingPluginError without
    torch."""
    from kvcore.units import import_torch

    name = normalize_dtype(dtype)
    torch = import_torch("to_torch_dtype")
    return getattr(torch, name)
