"""Reading the files a user names: bounded bytes, and JSON whose every failure is a
:class:`~kvcore.errors.ConfigError` naming the file.

One place for the readers of config / specs files, traces, datasets, result and
coefficient files and measurement or vector files (a low layer: it imports only
:mod:`kvcore.errors`):

* :func:`read_bytes` reads at most ``limit`` bytes of any path (a regular file, a pipe,
  FIFO or character device such as ``/dev/zero``) and refuses a longer one, so no
  reader takes a file into memory without a bound;
* :func:`loads_json` parses JSON text and turns every failure (bad syntax, nesting past
  the interpreter's recursion limit, an integer of more than 4,300 digits) into a
  ConfigError ``"WHERE: not valid JSON (...)"``; a RecursionError was the CLI's "this is
  a kvcore bug" before;
* :func:`read_json` is the two together for a whole file;
* :func:`check_keys` refuses an unknown key of an object whose keys are fixed, naming
  the key, where it is and the valid keys (with a "did you mean" for a near miss).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from kvcore.errors import ConfigError


def check_keys(data: Any, valid: Any, where: str, *, field: str | None = None) -> None:
    """ConfigError for the first key of the mapping ``data`` not in ``valid``: names the
    key, ``where`` it is (e.g. ``"FILE: options"``), the valid keys and, for a near
    miss, ``did you mean 'KEY'?``.  ``field`` is the error's field (default: the key)."""
    import difflib

    names = sorted(str(v) for v in valid)
    for key in data:
        if key not in valid:
            shown = repr(key) if len(repr(key)) <= 80 else repr(key)[:77] + "..."
            close = difflib.get_close_matches(str(key), names, n=1, cutoff=0.75)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise ConfigError(f"{where}: unknown key {shown}{hint}; valid keys: "
                              f"{', '.join(names)}", field=field or str(key)[:80],
                              where=where)

__all__ = ["MAX_FILE_BYTES", "MAX_DATA_BYTES", "MAX_LINE_BYTES", "read_bytes", "loads_json",
           "read_json", "check_keys"]

#: the largest result, coefficient, measurement or vector file read (a --save-detailed
#: result of 100,000 requests is ~30 MB)
MAX_FILE_BYTES = 512 << 20
#: the largest trace or dataset read into memory (ShareGPT's V3 file is ~642 MB)
MAX_DATA_BYTES = 1 << 30
#: the longest line of a JSONL / CSV trace (a kvcore JSONL row of 2**20 token ids is
#: ~8 MB)
MAX_LINE_BYTES = 64 << 20


def _mib(n: int) -> str:
    return f"{n >> 20:,} MiB"


def read_bytes(path: Path | str, what: str, *, limit: int | None = None,
               **extra: Any) -> bytes:
    """The bytes of ``path``, at most ``limit`` of them (default :data:`MAX_FILE_BYTES`;
    read with a bound whatever the
    file is: ``/dev/zero`` is refused after ``limit`` bytes, not read forever).  Raises
    ConfigError naming the file and ``what`` it should be when it cannot be opened or
    holds more; ``extra`` goes into the error (``field=...``)."""
    if limit is None:
        limit = MAX_FILE_BYTES
    extra.setdefault("field", str(path))
    extra.setdefault("value", str(path))
    try:
        with open(path, "rb") as f:
            raw = f.read(limit + 1)
    except (OSError, ValueError) as exc:  # ValueError: a NUL byte in the name
        why = getattr(exc, "strerror", None) or exc
        raise ConfigError(f"{path}: cannot be read ({why}); give {what}", **extra) from None
    if len(raw) > limit:
        raise ConfigError(f"{path}: more than {_mib(limit)}, the most kvcore reads of "
                          f"{what}", maximum=limit, **extra)
    return raw


def loads_json(text: str | bytes, where: str, *, parse_constant: Any = None,
               **extra: Any) -> Any:
    """``json.loads(text)``; any failure is a ConfigError ``"WHERE: not valid JSON
    (...)"`` (the line and column of a syntax error; "nested too deeply" past the
    recursion limit; the reason of an integer too long).  ``extra`` goes into the
    error."""
    try:
        return json.loads(text, parse_constant=parse_constant)
    except json.JSONDecodeError as exc:
        detail = f"{exc.msg} at line {exc.lineno} column {exc.colno}"
    except RecursionError:
        detail = "nested too deeply"
    except UnicodeDecodeError as exc:
        detail = f"not UTF-8 text at byte {exc.start}"
    except ValueError as exc:  # e.g. an integer of more than 4,300 digits
        detail = str(exc)[:120]
    raise ConfigError(f"{where}: not valid JSON ({detail})", **extra)


def read_json(path: Path | str, what: str, *, limit: int | None = None,
              parse_constant: Any = None, **extra: Any) -> Any:
    """The JSON value of the file ``path`` (:func:`read_bytes`, UTF-8, then
    :func:`loads_json`).  Raises ConfigError naming the file."""
    extra.setdefault("field", str(path))
    extra.setdefault("value", str(path))
    raw = read_bytes(path, what, limit=limit, **extra)
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{path}: not UTF-8 text (byte {exc.start}); give {what}",
                          **extra) from None
    return loads_json(text, str(path), parse_constant=parse_constant, **extra)


def _finite(value: Any) -> Any:
    if isinstance(value, float) and value != value:
        return "nan"
    if isinstance(value, float) and value in (float("inf"), float("-inf")):
        return "inf" if value > 0 else "-inf"
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    return value


def dumps_json(obj: Any, **kwargs: Any) -> str:
    """The JSON text kvcore writes (``--json`` output, ``--save-result`` files): strict
    RFC 8259, a non-finite number written as the string ``"inf"``, ``"-inf"`` or
    ``"nan"`` (as ``vllm bench serve`` writes ``"request_rate": "inf"``), never the bare
    ``Infinity`` / ``NaN`` tokens that strict parsers refuse."""
    return json.dumps(_finite(obj), allow_nan=False, **kwargs)
