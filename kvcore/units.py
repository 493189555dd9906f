"""Sizes (bytes) and lengths (tokens): parsing, plausibility bounds, and short echoes
of long values in messages.  Shared by ``kvcore plan``, ``kvcore simulate`` and the
Python API, so that one rule holds everywhere.

Sizes (:func:`parse_size`) are whole bytes, or a number with a unit:

* ``B``; decimal ``KB MB GB TB PB`` (powers of 1000) and binary ``KiB MiB GiB TiB PiB``
  (powers of 1024), case-insensitive, a space allowed before the unit;
* vLLM's one-letter suffixes (``human_readable_int`` in vLLM 0.32's
  ``vllm/utils/argparse_utils.py``, which ``--kv-cache-memory-bytes`` uses): lower-case
  ``k m g t`` are powers of 1000, upper-case ``K M G T`` powers of 1024, so ``20G`` is
  20 GiB and ``20g`` 20 GB.  As in vLLM, a decimal number takes no binary one-letter
  suffix (``1.5G`` is refused; write ``1.5GiB``).

A bare number is bytes and must be whole: ``0.9`` is refused (sizes are bytes or take
units; a fraction of GPU memory is ``--gpu-memory-utilization``).

Lengths (:func:`parse_length`) are whole token counts with vLLM's suffixes: ``k`` =
1,000, ``K`` = 1,024, ``m`` = 10^6, ``M`` = 2^20 (``g``/``G``, ``t``/``T`` likewise);
``25.6k`` = 25,600, ``128K`` = 131,072 (a decimal needs a decimal suffix: ``4096.0`` is
refused, as in vLLM); ``auto`` / ``-1`` where the caller allows it
(vLLM's ``human_readable_int_or_auto``).  Arithmetic is exact (decimal), where vLLM
multiplies a float.

Every size and length is bounded (:data:`BOUNDS`, one place): a value above its bound
is refused as implausible, so no later arithmetic or output meets a 400-digit number.
"""

from __future__ import annotations

import numbers
import operator
import re
from typing import Any

from kvcore.errors import SHORT_LIMIT as SHORT_LIMIT
from kvcore.errors import ConfigError, shorten, shorten_message

__all__ = [
    "BOUNDS",
    "MAX_BYTES",
    "MAX_TOKENS",
    "MAX_BLOCKS",
    "MAX_TOKEN_ID",
    "bound",
    "as_int",
    "as_real",
    "plain_int",
    "plain_ints",
    "check_int",
    "check_number",
    "check_path",
    "check_instance",
    "import_torch",
    "check_items",
    "check_name",
    "parse_size",
    "parse_length",
    "shorten",
    "shorten_message",
    "length_arg",
    "size_arg",
]

#: the largest size kvcore accepts (1 PiB; a GPU holds at most a few hundred GiB)
MAX_BYTES = 1 << 50
#: the longest length in tokens kvcore accepts (2^32; the longest contexts are ~10^7)
MAX_TOKENS = 1 << 32
#: the most blocks kvcore accepts (2^40)
MAX_BLOCKS = 1 << 40
#: token ids are stored as signed 64-bit integers (``array('q')`` in block hashing)
MAX_TOKEN_ID = (1 << 63) - 1

#: plausibility bound of every size, length and count kvcore reads (inclusive).  Keys are
#: the field names of the options and of config.json; :func:`bound` falls back to a
#: bound by the field's unit (bytes, tokens, blocks) for a name not listed.
BOUNDS: dict[str, int] = {
    # sizes (bytes)
    "kv_cache_memory": MAX_BYTES,
    "kv_cache_memory_bytes": MAX_BYTES,
    "gpu_memory": MAX_BYTES,
    "overhead": MAX_BYTES,
    "page_size_bytes": MAX_BYTES,
    "page_size_padded": MAX_BYTES,
    # lengths (tokens)
    "max_model_len": MAX_TOKENS,
    "max_model_len_limit": MAX_TOKENS,
    "max_num_batched_tokens": MAX_TOKENS,
    "max_num_encoder_input_tokens": MAX_TOKENS,
    "max_position_embeddings": MAX_TOKENS,
    "max_target_positions": MAX_TOKENS,
    "max_source_positions": MAX_TOKENS,
    "max_seq_len": MAX_TOKENS,
    "seq_length": MAX_TOKENS,
    "n_positions": MAX_TOKENS,
    "sliding_window": MAX_TOKENS,
    "sliding_window_size": MAX_TOKENS,
    "attention_chunk_size": MAX_TOKENS,
    "chunk_size": MAX_TOKENS,
    "mamba_chunk_size": MAX_TOKENS,
    # a state's block may span a whole request (Mamba "none" mode: max_model_len)
    "block_size": MAX_TOKENS,
    "kernel_block_size": MAX_TOKENS,
    # counts
    "num_gpu_blocks_override": MAX_BLOCKS,
    "num_blocks": MAX_BLOCKS,
    "num_hidden_layers": 10_000,
    "num_layers": 10_000,
    "n_layer": 10_000,
    "n_layers": 10_000,
    "decoder_layers": 10_000,
    "encoder_layers": 10_000,
    "num_nextn_predict_layers": 10_000,
    "mtp_num_hidden_layers": 10_000,
    "depth": 10_000,
    "vt_num_hidden_layers": 10_000,
    "first_k_dense_replace": 100_000,
    "max_window_layers": 100_000,
    "sliding_window_pattern": 100_000,
    "num_attention_heads": 1 << 20,
    "num_key_value_heads": 1 << 20,
    "decoder_attention_heads": 1 << 20,
    "n_head": 1 << 20,
    "n_heads": 1 << 20,
    "num_heads": 1 << 20,
    "head_dim": 1 << 16,
    "head_size": 1 << 16,
    "v_head_dim": 1 << 16,
    "hidden_size": 1 << 24,
    "d_model": 1 << 24,
    "intermediate_size": 1 << 28,
    "vocab_size": 1 << 32,
    "tensor_parallel_size": 1 << 16,
    "pipeline_parallel_size": 1 << 16,
    "num_speculative_tokens": 1 << 10,
    "max_num_seqs": 1 << 24,
    # request rates of vllm bench serve's ramp-up (type=int there; requests per second)
    "ramp_up_start_rps": 1 << 32,
    "ramp_up_end_rps": 1 << 32,
}

_UNIT_BOUNDS = (("bytes", MAX_BYTES), ("memory", MAX_BYTES), ("tokens", MAX_TOKENS),
                ("len", MAX_TOKENS), ("blocks", MAX_BLOCKS), ("size", 1 << 24),
                ("dim", 1 << 16), ("heads", 1 << 20), ("layers", 10_000))


def _arg_field(field: Any, fn: str) -> str:
    """The ``field`` argument of the readers below: a non-empty name (ConfigError)."""
    if not isinstance(field, str) or not field:
        raise ConfigError(f"{fn}: field = {shorten(field)} must be a field name (a "
                          f"non-empty string)", field="field", value=shorten(field))
    return field


def _arg_limit(value: Any, name: str, fn: str) -> None:
    """``minimum`` / ``maximum`` arguments: None or an int (ConfigError)."""
    if value is not None and as_int(value) is None:  # numpy integers too; bool refused
        raise ConfigError(f"{fn}: {name} = {shorten(value)} must be an int or None",
                          field=name, value=shorten(value))


def _arg_flag(value: Any, name: str, fn: str) -> None:
    if not isinstance(value, bool):
        raise ConfigError(f"{fn}: {name} = {shorten(value)} must be True or False",
                          field=name, value=shorten(value))


def bound(field: str) -> int:
    """The plausibility bound (inclusive) of a field: :data:`BOUNDS`, else by the unit
    its name ends with (``*_bytes`` 1 PiB, ``*_tokens`` 2^32, ``*_blocks`` 2^40 ...),
    else 2^40.  Raises ConfigError when ``field`` is not a name."""
    _arg_field(field, "bound")
    key = field.lstrip("-").replace("-", "_").rsplit(".", 1)[-1]
    if key in BOUNDS:
        return BOUNDS[key]
    for suffix, limit in _UNIT_BOUNDS:
        if key.endswith(suffix):
            return limit
    return 1 << 40


# (shorten, shorten_message and SHORT_LIMIT live in kvcore.errors, re-exported here)

# ---- integers ----------------------------------------------------------------------------

def as_int(value: Any) -> int | None:
    """The one rule for an integer argument of kvcore's public API: any integral number
    that is not bool (``operator.index``: Python and numpy integers) as a plain Python
    int; None for anything else (bool, float, text...)."""
    if isinstance(value, bool):
        return None
    try:
        return operator.index(value)
    except TypeError:
        return None


def plain_int(value: Any) -> Any:
    """``value`` as the equal plain int when it is an integral number that is not bool
    (numpy integers); anything else unchanged, for the caller's own check to name.
    For a public entry point that converts once, at its boundary (:func:`as_int`)."""
    if type(value) is int or isinstance(value, bool):
        return value
    number = as_int(value)
    return value if number is None else number


def plain_ints(values: dict[str, Any]) -> dict[str, Any]:
    """A copy of ``values`` (keyword arguments) with :func:`plain_int` applied to each
    value, and to each item of a list or tuple value (per-stage budgets)."""
    out: dict[str, Any] = {}
    for key, v in values.items():
        if isinstance(v, (list, tuple)):
            v = type(v)(plain_int(x) for x in v)
        out[key] = plain_int(v)
    return out


def as_real(value: Any) -> float | None:
    """The rule for a float argument: any real number that is not bool (Python and
    numpy ints and floats) as a plain float; None for anything else or an overflow."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        return None
    try:
        return float(value)
    except (OverflowError, TypeError, ValueError):
        return None


def check_int(value: Any, field: str, *, minimum: int | None = 1,
              maximum: int | None = None, where: str = "",
              allow_integral_float: bool = False) -> int:
    """``value`` as an int in ``[minimum, maximum]`` (``maximum`` None: :func:`bound`
    of ``field``).

    Accepts Python and numpy integers (anything with ``__index__``) and, with
    ``allow_integral_float``, floats with an integer value (JSON's ``4096.0`` or
    ``1e4``).  bool is refused.  Raises ConfigError naming the field, the value (cut)
    and the valid range; ``where`` (a file or model) prefixes the message.
    """
    _arg_field(field, "check_int")
    _arg_limit(minimum, "minimum", "check_int")
    _arg_limit(maximum, "maximum", "check_int")
    _arg_flag(allow_integral_float, "allow_integral_float", "check_int")
    if not isinstance(where, str):
        raise ConfigError(f"check_int: where = {shorten(where)} must be a string",
                          field="where", value=shorten(where))
    pre = f"{where}: " if where else ""
    if maximum is None:
        maximum = bound(field)
    shown = shorten(value)
    if isinstance(value, bool):
        number = None
    elif isinstance(value, float) and allow_integral_float:
        number = int(value) if value == value and abs(value) != float("inf") \
            and value.is_integer() else None
    else:
        try:
            number = operator.index(value)
        except TypeError:
            number = None
    low = "" if minimum is None else ("a positive int" if minimum == 1 else
                                      f"an int >= {minimum:,}")
    if number is None:
        raise ConfigError(f"{pre}{field} = {shown} must be {low or 'an int'}, got "
                          f"{type(value).__name__}", field=field, value=shown,
                          expected="int")
    if minimum is not None and number < minimum:
        raise ConfigError(f"{pre}{field} = {shown} must be {low}", field=field,
                          value=shown, minimum=minimum)
    if number > maximum:
        raise ConfigError(f"{pre}{field} = {shown} is implausibly large "
                          f"(at most {maximum:,})", field=field, value=shown,
                          maximum=maximum)
    return number


# ---- numbers, paths, names and sequences of the Python API ------------------------------

def check_number(value: Any, field: str, *, minimum: float | None = None,
                 maximum: float | None = None, allow_inf: bool = False,
                 exclusive_minimum: bool = False, where: str = "") -> float:
    """``value`` as a float in ``[minimum, maximum]`` (``(minimum, ...`` with
    ``exclusive_minimum``).  Accepts ints (any size that a float holds) and floats;
    bool, NaN, text and other types are refused; ``inf`` only with ``allow_inf``.
    Raises ConfigError naming the field, the value (cut) and the valid range."""
    _arg_field(field, "check_number")
    pre = f"{where}: " if where else ""
    lo = "" if minimum is None else (f" > {minimum:g}" if exclusive_minimum
                                     else f" >= {minimum:g}")
    hi = "" if maximum is None else f" and <= {maximum:g}"
    what = f"a {'' if allow_inf else 'finite '}number{lo}{hi}"
    shown = shorten(value)
    number: float | None = None
    if not isinstance(value, bool) and isinstance(value, numbers.Real):
        try:
            number = float(value)
        except OverflowError:
            number = None
        else:
            if number != number or (not allow_inf and number in (float("inf"),
                                                                 float("-inf"))):
                number = None
    if number is None or (minimum is not None and (
            number < minimum or (exclusive_minimum and number == minimum))) or (
            maximum is not None and number > maximum):
        raise ConfigError(f"{pre}{field} = {shown} must be {what}", field=field,
                          value=shown)
    return number


def check_path(value: Any, field: str, *, where: str = "") -> Any:
    """``value`` as a :class:`pathlib.Path`: a non-empty ``str`` or an
    :class:`os.PathLike` of str.  Raises ConfigError naming the field otherwise (bytes
    paths, numbers, lists ...).  Whether the file exists is the reader's check."""
    import os
    from pathlib import Path

    _arg_field(field, "check_path")
    pre = f"{where}: " if where else ""
    text = value
    if isinstance(value, os.PathLike):
        text = os.fspath(value)
    if not isinstance(text, str) or not text.strip() or "\x00" in text:
        raise ConfigError(f"{pre}{field} = {shorten(value)} must be a file path (a "
                          f"non-empty str or os.PathLike)", field=field,
                          value=shorten(value))
    return Path(text)


def check_name(value: Any, field: str, *, known: Any = None, where: str = "") -> str:
    """``value`` if it is a non-empty str (and, with ``known``, one of them).  Raises
    ConfigError naming the field, the value and the known names."""
    _arg_field(field, "check_name")
    pre = f"{where}: " if where else ""
    names = list(known) if known is not None else None
    if not isinstance(value, str) or not value or (names is not None
                                                   and value not in names):
        valid = f"one of {', '.join(map(str, names))}" if names is not None else \
            "a non-empty name"
        raise ConfigError(f"{pre}{field} = {shorten(value)} must be {valid}",
                          field=field, value=shorten(value))
    return value


def import_torch(what: str) -> Any:
    """The ``torch`` module, for ``what`` (a function's name), or MissingPluginError
    saying which extra installs it (the core imports and plans without torch)."""
    try:
        import torch
    except ImportError:
        from kvcore.errors import MissingPluginError

        raise MissingPluginError(f"{what} needs torch, which is not installed: pip install "
                                 f"'kvcore[torch]'", distribution="kvcore[torch]",
                                 field="torch") from None
    return torch


def check_instance(value: Any, kind: Any, field: str, *, where: str = "",
                   hint: str = "") -> Any:
    """``value`` when it is an instance of ``kind`` (a class or a tuple of classes),
    else ConfigError naming the field, the kinds expected and the value's type;
    ``hint`` (where such an object comes from) ends the message."""
    if isinstance(value, kind):
        return value
    _arg_field(field, "check_instance")
    pre = f"{where}: " if where else ""
    names = " or ".join(k.__name__ for k in (kind if isinstance(kind, tuple) else (kind,)))
    tail = f" ({hint})" if hint else ""
    raise ConfigError(f"{pre}{field} must be a {names}, got {type(value).__name__} "
                      f"{shorten(value)}{tail}", field=field, value=shorten(value))


def check_items(value: Any, kind: Any, field: str, *, hint: str = "",
                where: str = "") -> list[Any]:
    """``value`` as a list whose items are instances of ``kind`` (a class or a tuple of
    classes): a list, tuple or other iterable, not a str, bytes or mapping.  Raises
    ConfigError naming the field and the first bad item's index and type; ``hint``
    (e.g. "wrap a TraceRequest as SimRequest(trace)") ends the message."""
    from collections.abc import Iterable, Mapping

    _arg_field(field, "check_items")
    pre = f"{where}: " if where else ""
    names = " or ".join(k.__name__ for k in (kind if isinstance(kind, tuple) else (kind,)))
    tail = f" ({hint})" if hint else ""
    if isinstance(value, (str, bytes, bytearray, Mapping)) or not isinstance(value,
                                                                             Iterable):
        raise ConfigError(f"{pre}{field} must be a sequence of {names} objects, got "
                          f"{type(value).__name__} {shorten(value)}{tail}", field=field,
                          value=shorten(value))
    items = list(value)
    for i, item in enumerate(items):
        if not isinstance(item, kind):
            raise ConfigError(f"{pre}{field}[{i}] must be {names}, got "
                              f"{type(item).__name__} {shorten(item)}{tail}",
                              field=f"{field}[{i}]", value=shorten(item))
    return items


# ---- sizes -------------------------------------------------------------------------------

_SIZE_UNITS: dict[str, int] = {
    "b": 1,
    "kb": 1000, "mb": 1000**2, "gb": 1000**3, "tb": 1000**4, "pb": 1000**5,
    "kib": 1 << 10, "mib": 1 << 20, "gib": 1 << 30, "tib": 1 << 40, "pib": 1 << 50,
}
#: vLLM's one-letter suffixes (case-sensitive): lower case decimal, upper case binary
_LETTER_DECIMAL = {"k": 10**3, "m": 10**6, "g": 10**9, "t": 10**12}
_LETTER_BINARY = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}

_NUMBER = re.compile(r"\s*([+-]?)([0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE]([+-]?[0-9]{1,4}))?"
                     r"\s*([A-Za-z]*)\s*")

_SIZE_HELP = ("use whole bytes or a number with a unit: KB, MB, GB, TB (powers of 1000), "
              "KiB, MiB, GiB, TiB (powers of 1024), or vLLM's k/m/g/t (1000) and K/M/G/T "
              "(1024), e.g. 20GiB")


def parse_size(text: Any, field: str = "kv_cache_memory", *,
               maximum: int | None = None) -> int:
    """Bytes from ``"20GiB"``, ``"20GB"``, ``"1.5 GiB"``, ``"20G"`` (vLLM: GiB),
    ``"4e9"``, ``"8000000000"`` or an int (see the module docstring for the units).

    Returns int bytes in ``[0, maximum]`` (default :func:`bound` of ``field``, 1 PiB),
    rounded down to a whole byte.  Raises ConfigError naming the field and the value
    for a malformed, fractional unitless, negative or implausibly large size.
    """
    from decimal import Decimal, InvalidOperation  # lazily: decimal costs ~9 ms at import

    _arg_field(field, "parse_size")
    _arg_limit(maximum, "maximum", "parse_size")
    limit = bound(field) if maximum is None else maximum
    if isinstance(text, bool):
        raise ConfigError(f"{field}: {text!r} is not a size; {_SIZE_HELP}", field=field,
                          value=str(text))
    if not isinstance(text, str):
        try:
            return check_int(text, field, minimum=0, maximum=limit)
        except ConfigError:
            if not isinstance(text, float):
                raise
            text = repr(text)
    shown = shorten(text)
    m = _NUMBER.fullmatch(text)
    if not m:
        raise ConfigError(f"{field}: cannot read {shown} as a size; {_SIZE_HELP}",
                          field=field, value=shown)
    sign, digits, exp, unit = m.groups()
    try:
        number = Decimal(digits) * (Decimal(10) ** int(exp or 0))
    except InvalidOperation:  # pragma: no cover - the pattern admits only numbers
        raise ConfigError(f"{field}: cannot read {shown} as a size; {_SIZE_HELP}",
                          field=field, value=shown) from None
    if unit in _LETTER_BINARY:
        if number != number.to_integral_value():
            raise ConfigError(
                f"{field}: {shown}: a decimal number takes no binary one-letter suffix "
                f"(as in vLLM); write {digits}{unit}iB or {digits}{unit.lower()} "
                f"(powers of 1000)", field=field, value=shown)
        mult = _LETTER_BINARY[unit]
    elif unit in _LETTER_DECIMAL:
        mult = _LETTER_DECIMAL[unit]
    elif unit.lower() in _SIZE_UNITS:
        mult = _SIZE_UNITS[unit.lower()]
    elif unit == "":
        mult = 0
    else:
        raise ConfigError(f"{field}: cannot read {shown} as a size (unknown unit "
                          f"{shorten(unit)}); {_SIZE_HELP}", field=field, value=shown)
    if mult == 0:  # bare number: whole bytes
        if number != number.to_integral_value():
            raise ConfigError(
                f"{field}: {shown} is not a whole number of bytes; sizes are bytes or take "
                f"units (e.g. 20GiB); for a fraction of GPU memory use "
                f"--gpu-memory-utilization", field=field, value=shown)
        mult = 1
    value = number * mult
    if mult == 1 and value != value.to_integral_value():
        raise ConfigError(
            f"{field}: {shown} is not a whole number of bytes (B is bytes, not billions); "
            f"write {digits}GB or {digits}GiB for gigabytes", field=field, value=shown)
    if sign == "-" and value != 0:
        raise ConfigError(f"{field}: the size must not be negative, got {shown}",
                          field=field, value=shown)
    if value > limit:
        raise ConfigError(f"{field}: {shown} is not a usable size (too large: at most "
                          f"{limit:,} bytes)", field=field, value=shown, maximum=limit)
    return int(value)


# ---- lengths -----------------------------------------------------------------------------

_LENGTH_HELP = ("use a whole number of tokens, optionally with vLLM's suffixes k = 1,000, "
                "K = 1,024, m = 10^6, M = 2^20 (g/G, t/T likewise), e.g. 128K")
_LENGTH = re.compile(r"\s*([+-]?)([0-9]+(?:\.[0-9]+)?)([kKmMgGtT]?)\s*")


def parse_length(text: Any, field: str = "max_model_len", *, allow_auto: bool = False,
                 minimum: int = 1, maximum: int | None = None) -> int:
    """Tokens from ``"8192"``, ``"128K"`` (131,072), ``"128k"`` (128,000), ``"25.6k"``
    (25,600), ``"1M"`` or an int; ``"auto"`` / ``-1`` give -1 when ``allow_auto``.

    vLLM 0.32's rule (``human_readable_int``): lower-case suffixes are powers of 1000,
    upper-case powers of 1024, and a decimal number takes only a decimal suffix; the
    result must be a whole number.  Returns an int in ``[minimum, maximum]`` (default
    :func:`bound` of ``field``).  Raises ConfigError naming the field and the value.
    """
    from decimal import Decimal

    _arg_field(field, "parse_length")
    _arg_flag(allow_auto, "allow_auto", "parse_length")
    _arg_limit(minimum, "minimum", "parse_length")
    if minimum is None:
        raise ConfigError("parse_length: minimum must be an int", field="minimum")
    _arg_limit(maximum, "maximum", "parse_length")
    limit = bound(field) if maximum is None else maximum
    auto = " or auto" if allow_auto else ""
    if not isinstance(text, str):
        if allow_auto and not isinstance(text, bool) and text == -1:
            return -1
        return check_int(text, field, minimum=minimum, maximum=limit)
    shown = shorten(text)
    if allow_auto and text.strip().lower() in ("auto", "-1"):
        return -1
    m = _LENGTH.fullmatch(text)
    if not m:
        raise ConfigError(f"{field}: cannot read {shown} as a length{auto}; "
                          f"{_LENGTH_HELP}", field=field, value=shown)
    sign, digits, suffix = m.groups()
    number = Decimal(digits)
    if "." in digits and not suffix:
        raise ConfigError(f"{field}: {shown} is not a whole number of tokens (as in vLLM, "
                          f"a decimal needs a suffix: 25.6k); {_LENGTH_HELP}",
                          field=field, value=shown)
    if suffix in _LETTER_BINARY and "." in digits:
        raise ConfigError(
            f"{field}: {shown}: decimals are not allowed with binary suffixes like "
            f"{suffix} (as in vLLM); did you mean {digits}{suffix.lower()}?",
            field=field, value=shown)
    value = number * (_LETTER_BINARY.get(suffix) or _LETTER_DECIMAL.get(suffix) or 1)
    if sign == "-":
        value = -value
    if value != value.to_integral_value():
        raise ConfigError(f"{field}: {shown} is not a whole number of tokens; "
                          f"{_LENGTH_HELP}", field=field, value=shown)
    if value < minimum:
        low = "positive" if minimum == 1 else f">= {minimum:,}"
        raise ConfigError(f"{field} must be {low}{auto}, got {shown}", field=field,
                          value=shown, minimum=minimum)
    if value > limit:
        raise ConfigError(f"{field}: {shown} is implausibly large (at most {limit:,} "
                          f"tokens)", field=field, value=shown, maximum=limit)
    return int(value)


# ---- argparse types ----------------------------------------------------------------------

def _arg_type(parse: Any, name: str) -> Any:
    def convert(text: str) -> Any:
        import argparse

        try:
            return parse(text)
        except ConfigError as exc:
            raise argparse.ArgumentTypeError(exc.message) from None

    convert.__name__ = name  # argparse names the type in its fallback message
    return convert


def length_arg(field: str, *, allow_auto: bool = False, minimum: int = 1,
               maximum: int | None = None) -> Any:
    """An argparse ``type=`` that reads a length or count with :func:`parse_length`
    (a ConfigError becomes argparse's one-line usage error naming the option)."""
    _arg_field(field, "length_arg")
    _arg_flag(allow_auto, "allow_auto", "length_arg")
    _arg_limit(minimum, "minimum", "length_arg")
    _arg_limit(maximum, "maximum", "length_arg")
    return _arg_type(lambda t: parse_length(t, field, allow_auto=allow_auto,
                                            minimum=minimum, maximum=maximum), field)


def size_arg(field: str) -> Any:
    """An argparse ``type=`` that reads a size with :func:`parse_size`."""
    _arg_field(field, "size_arg")
    return _arg_type(lambda t: parse_size(t, field), field)
