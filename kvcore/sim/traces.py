"""Trace readers: Mooncake JSONL, Azure LLM inference CSV, kvcore JSONL.

Each reader returns a list of :class:`TraceRequest` in file order.  Token ids are not
stored in the traces; they are expanded deterministically (:mod:`kvcore.sim.tokens`):

* **Mooncake** (``timestamp`` ms, ``input_length``, ``output_length``, ``hash_ids``):
  each hash id stands for one 512-token block (the last one may be partial); the
  tokens of the block with id ``h`` are ``tok(1 + h, 0..len-1)``, so equal ids give
  equal tokens and, because a Mooncake id already covers every earlier block, equal
  prefixes.
* **Azure 2023** (``TIMESTAMP,ContextTokens,GeneratedTokens``): no prefix information;
  every prompt is unique (``tok(UNIQUE_BASE + k, pos)``).
* **kvcore JSONL**: one object a line with ``output_len`` and either
  ``prompt_token_ids`` or a prefix description ``prompt_len``, ``prefix_id``,
  ``prefix_len`` (the runtime conformance workload format: prefix tokens
  ``tok(1 + prefix_id, j)``, unique tokens ``tok(1000000 + k, j - prefix_len)``);
  optional ``id`` and ``arrival`` (ms).

Any of them may be gzip-compressed (recognized by its magic bytes; a ``.gz`` name that
is not gzip data is an error).  Files are UTF-8.  Every field of every row is checked
as it is read (type, range, cross-field rules such as ``len(hash_ids) ==
ceil(input_length / 512)``, a prompt of at least one token, timestamps in file order);
a bad one raises :class:`~kvcore.errors.ConfigError` whose one-line message names the
file, the line, the field, the value and what is valid (``extra``: ``trace``, ``line``,
``field``, ``value``).

Output tokens of request ``k`` are ``tok(2000000 + k, j)`` (kvcore JSONL, as in the
conformance workload) or ``tok(OUTPUT_BASE + k, j)`` (the other formats), never equal
to a prompt stream.
"""

from __future__ import annotations

import csv
import gzip
import io
import json
import math
import re
import zlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import IO, Any

from kvcore.errors import ConfigError, shorten
from kvcore.sim.tokens import stream_tokens
from kvcore.units import MAX_TOKEN_ID, MAX_TOKENS, check_items, check_path
from kvcore.userfiles import loads_json

__all__ = [
    "TraceRequest",
    "MOONCAKE_BLOCK_TOKENS",
    "read_trace",
    "read_mooncake",
    "read_azure",
    "read_kvcore_jsonl",
    "mooncake_ideal_hit_ratio",
    "TRACE_FORMATS",
    "AZURE_COLUMNS",
]

#: tokens one Mooncake hash id stands for
MOONCAKE_BLOCK_TOKENS = 512
#: output / unique token streams of Mooncake and Azure requests (above every hash id)
OUTPUT_BASE = 1 << 31
UNIQUE_BASE = 3 << 30


@dataclass
class TraceRequest:
    """One request of a trace.

    ``segments`` lists the prompt as ``(stream, start, count)`` runs of
    :func:`~kvcore.sim.tokens.stream_tokens` (or ``token_ids`` holds it outright).
    Lengths in tokens, ``arrival_ms`` in milliseconds from the trace start.
    """

    request_id: str
    arrival_ms: float
    prompt_len: int
    output_len: int
    output_stream: int
    segments: list[tuple[int, int, int]] = field(default_factory=list)
    token_ids: Sequence[int] | None = None
    hash_ids: Sequence[int] | None = None

    def prompt_token_ids(self) -> list[int]:
        if self.token_ids is not None:
            return list(self.token_ids)
        out: list[int] = []
        for stream, start, count in self.segments:
            out += stream_tokens(stream, start, count)
        return out

    def output_token_ids(self) -> list[int]:
        return stream_tokens(self.output_stream, 0, self.output_len)


def _shown(value: Any) -> str:
    """``value`` as the user wrote it (JSON spelling), cut to one short line."""
    from kvcore.units import shorten

    try:
        text = json.dumps(value)
    except (TypeError, ValueError):  # ValueError: an int too long to print
        return shorten(value, 60)
    except RecursionError:  # a value nested deeper than the encoder goes
        return f"a {type(value).__name__} nested too deeply to show"
    return text if len(text) <= 60 else text[:57] + "..."


def _json_safe(value: Any) -> Any:
    """``value`` for the ``extra`` of an error (JSON-serializable, short)."""
    if value is None or isinstance(value, (bool, int)):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else _shown(value)
    if isinstance(value, str):
        return value if len(value) <= 200 else value[:197] + "..."
    return _shown(value)


def _err(path: Path, line: int | None, msg: str, **extra: Any) -> ConfigError:
    """A ConfigError whose one-line message starts with ``path:line:``."""
    where = f"{path}:{line}" if line is not None else f"{path}"
    extra.setdefault("field", "trace")
    if line is not None:
        extra["line"] = line
    return ConfigError(f"{where}: {msg}", trace=str(path), **extra)


def _bad(path: Path, line: int, name: str, value: Any, valid: str) -> ConfigError:
    """Field ``name`` of the row on ``line`` holds ``value``; ``valid`` says what may."""
    return _err(path, line, f"{name} must be {valid}, got {_shown(value)}",
                field=name, value=_json_safe(value))


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _int_field(path: Path, line: int, name: str, value: Any, minimum: int,
               maximum: int | None = None) -> int:
    """``value`` if it is a JSON integer (not a bool) in ``[minimum, maximum]``."""
    if not _is_int(value) or value < minimum or (maximum is not None and value > maximum):
        ranged = maximum is not None and (maximum not in (MAX_TOKENS, MAX_TOKEN_ID) or
                                          _is_int(value) and value > maximum)
        valid = f"an integer in [{minimum}, {maximum}]" if ranged else \
            f"an integer >= {minimum}"
        raise _bad(path, line, name, value, valid)
    return int(value)


def _time_field(path: Path, line: int, name: str, value: Any) -> float:
    """``value`` if it is a finite number >= 0 (a time in ms)."""
    if (not isinstance(value, (int, float)) or isinstance(value, bool)
            or not math.isfinite(value) or value < 0):
        raise _bad(path, line, name, value, "a finite number >= 0 (milliseconds)")
    return float(value)


#: the bytes of traces read from a pipe, FIFO or character device (``<(cmd)``,
#: ``/dev/fd/N``, ``mkfifo``), keyed by the path and its (st_dev, st_ino): such a path
#: can be read once only, and auto-detection plus the reader (or tune's check plus its
#: candidates in this process) read a trace more than once
_SPOOLED: dict[tuple[str, int, int], bytes] = {}


def _spool_key(path: Path) -> tuple[str, int, int] | None:
    """The :data:`_SPOOLED` key of an existing non-regular, non-directory path, else
    None."""
    import stat

    try:
        st = path.stat()
    except OSError:
        return None
    if stat.S_ISREG(st.st_mode) or stat.S_ISDIR(st.st_mode):
        return None
    return str(path), st.st_dev, st.st_ino


def _spool(path: Path) -> None:
    """Read a non-regular trace path (a pipe, FIFO, /dev/null) once into
    :data:`_SPOOLED`, as vLLM's loaders ``open()`` any path.  Raises ConfigError when
    it cannot be read."""
    key = _spool_key(path)
    if key is None or key in _SPOOLED:
        return
    from kvcore.userfiles import MAX_DATA_BYTES

    try:
        with path.open("rb") as f:
            data = f.read(MAX_DATA_BYTES + 1)  # bounded: /dev/zero never ends
    except OSError as exc:
        raise _err(path, None, f"cannot read the trace file ({exc.strerror or exc})") from exc
    if len(data) > MAX_DATA_BYTES:
        raise _err(path, None, f"more than {MAX_DATA_BYTES >> 20:,} MiB, the most kvcore "
                   f"reads of a trace from a pipe or device", maximum=MAX_DATA_BYTES)
    _SPOOLED[key] = data


def _open_binary(path: Path) -> IO[bytes]:
    """Binary handle of a trace file; gzip data (by its magic bytes) is decompressed.
    A spooled pipe / FIFO (:func:`_spool`) is served from memory."""
    key = _spool_key(path)
    if key is not None and key in _SPOOLED:
        buf = io.BytesIO(_SPOOLED[key])
        if buf.getvalue()[:2] == b"\x1f\x8b":
            return gzip.GzipFile(fileobj=buf, mode="rb")  # type: ignore[return-value]
        return buf
    try:
        raw = path.open("rb")
        magic = raw.read(2)
        raw.seek(0)
    except OSError as exc:
        raise _err(path, None, f"cannot read the trace file ({exc.strerror or exc})") from exc
    if magic == b"\x1f\x8b":
        raw.close()
        return gzip.open(path, "rb")  # type: ignore[return-value]
    if path.suffix.lower() == ".gz":
        raw.close()
        raise _err(path, None, "the name ends in .gz but the file is not gzip-compressed "
                   f"(it starts with {magic!r}, gzip data starts with b'\\x1f\\x8b')")
    return raw


def _lines(path: Path) -> Iterator[tuple[int, str]]:
    """``(line number from 1, text)`` of each line of a UTF-8 trace file (a UTF-8 BOM
    is dropped).  Raises ConfigError on unreadable, corrupt or truncated gzip data and on
    bytes that are not UTF-8."""
    from kvcore.userfiles import MAX_LINE_BYTES

    with _open_binary(path) as f:
        n = 0
        while True:
            try:  # a bounded line: one endless line (no newline) is refused, not read
                raw = f.readline(MAX_LINE_BYTES + 1)
                if not raw:
                    return
                if len(raw) > MAX_LINE_BYTES:
                    raise _err(path, n + 1, f"a line longer than {MAX_LINE_BYTES >> 20} "
                               f"MiB; a trace row is a few KiB", maximum=MAX_LINE_BYTES)
            except (OSError, EOFError, zlib.error) as exc:
                if isinstance(f, gzip.GzipFile):
                    raise _err(path, None, f"corrupt or truncated gzip data after line "
                               f"{n} ({exc}); re-download or re-compress the trace"
                               ) from exc
                raise _err(path, None, f"cannot read the trace file after line {n} "
                           f"({exc})") from exc
            n += 1
            try:
                text = raw.decode("utf-8-sig" if n == 1 else "utf-8")
            except UnicodeDecodeError as exc:
                raise _err(path, n, f"not UTF-8 text (byte 0x{raw[exc.start]:02x} at "
                           f"column {exc.start + 1}); trace files must be UTF-8 "
                           f"(optionally gzip-compressed)") from exc
            yield n, text


def _json_rows(path: Path, kind: str) -> Iterator[tuple[int, dict[str, Any]]]:
    """``(line number, object)`` of each non-blank line of a JSONL trace."""
    for n, text in _lines(path):
        if not text.strip():
            continue
        # the shared reader: a syntax error, nesting too deep, an integer too long
        row = loads_json(text, f"{path}:{n}", field="trace", trace=str(path), line=n)
        if not isinstance(row, dict):
            raise _err(path, n, f"a {kind} row must be a JSON object, got {_shown(row)}")
        yield n, row


def _need(path: Path, line: int, row: dict[str, Any], name: str, kind: str,
          fields: str) -> Any:
    if name not in row:
        raise _err(path, line, f"missing field {name!r}; a {kind} row needs {fields}",
                   field=name)
    return row[name]


_MOONCAKE_FIELDS = "timestamp, input_length, output_length and hash_ids"
#: largest Mooncake hash id whose token stream (1 + id) stays below OUTPUT_BASE
MAX_HASH_ID = OUTPUT_BASE - 2


def read_mooncake(path: str | Path) -> list[TraceRequest]:
    """Mooncake FAST'25 trace JSONL (``timestamp``, ``input_length``,
    ``output_length``, ``hash_ids``; ``len(hash_ids) == ceil(input_length / 512)``).

    Every row is checked: ``timestamp`` a finite number >= 0 and not below the previous
    row's (the replay admits in file order), ``input_length`` an integer >= 1,
    ``output_length`` an integer >= 0, ``hash_ids`` a list of ``ceil(input_length /
    512)`` integers in ``[0, MAX_HASH_ID]``.  Raises ConfigError naming the line, the
    field, the value and what is valid.
    """
    p = check_path(path, "trace")
    out: list[TraceRequest] = []
    prev_ts: tuple[float, int] | None = None
    for line, row in _json_rows(p, "Mooncake"):
        k = line - 1
        ts_raw, n_raw, o_raw, raw_ids = (
            _need(p, line, row, name, "Mooncake", _MOONCAKE_FIELDS)
            for name in ("timestamp", "input_length", "output_length", "hash_ids"))
        ts = _time_field(p, line, "timestamp", ts_raw)
        n = _int_field(p, line, "input_length", n_raw, 1, MAX_TOKENS)
        o = _int_field(p, line, "output_length", o_raw, 0, MAX_TOKENS)
        if not isinstance(raw_ids, list):
            raise _bad(p, line, "hash_ids", raw_ids, "a list of integers")
        ids = [_int_field(p, line, f"hash_ids[{i}]", h, 0, MAX_HASH_ID)
               for i, h in enumerate(raw_ids)]
        expect = -(-n // MOONCAKE_BLOCK_TOKENS)
        if len(ids) != expect:
            raise _err(p, line, f"hash_ids has {len(ids)} ids but input_length {n} needs "
                       f"ceil({n}/{MOONCAKE_BLOCK_TOKENS}) = {expect} (one id per "
                       f"{MOONCAKE_BLOCK_TOKENS}-token block)", field="hash_ids",
                       value=len(ids))
        if prev_ts is not None and ts < prev_ts[0]:
            raise _err(p, line, f"timestamp {_shown(row['timestamp'])} is earlier than "
                       f"{prev_ts[0]:g} on line {prev_ts[1]}; rows must be in arrival "
                       f"order (the replay admits them in file order)",
                       field="timestamp", value=_json_safe(row["timestamp"]))
        prev_ts = (ts, line)
        segs = [(1 + h, 0, min(MOONCAKE_BLOCK_TOKENS, n - i * MOONCAKE_BLOCK_TOKENS))
                for i, h in enumerate(ids)]
        out.append(TraceRequest(f"mc-{k:06d}", ts, n, o, OUTPUT_BASE + k, segs,
                                hash_ids=ids))
    return out


AZURE_COLUMNS = ("TIMESTAMP", "ContextTokens", "GeneratedTokens")
_INT_TEXT = re.compile(r"\s*[+-]?[0-9]+\s*")


def _azure_int(path: Path, line: int, name: str, text: str, minimum: int) -> int:
    if not _INT_TEXT.fullmatch(text) or int(text[:24]) < minimum:
        raise _bad(path, line, name, text, f"an integer >= {minimum}")
    if len(text.strip()) > 20 or int(text) > MAX_TOKENS:  # checked before int(5,000 digits)
        raise _bad(path, line, name, text, f"an integer in [{minimum}, {MAX_TOKENS}]")
    return int(text)


def read_azure(path: str | Path) -> list[TraceRequest]:
    """Azure LLM inference trace CSV (``TIMESTAMP,ContextTokens,GeneratedTokens``, a
    header row first; other columns are ignored).

    ``TIMESTAMP`` is ISO 8601 (``2023-11-16 18:15:46.6805900``; a timestamp without a
    UTC offset is taken as UTC), not before the previous row's; ``ContextTokens`` an
    integer >= 1, ``GeneratedTokens`` an integer >= 0.  Arrival times are in ms from the
    first row.  Raises ConfigError naming the line, column, value and what is valid.
    """
    p = check_path(path, "trace")
    out: list[TraceRequest] = []
    texts = (t for _, t in _lines(p))
    reader = csv.reader(texts)
    header: list[str] | None = None
    cols: list[int] = []
    t0: datetime | None = None
    prev: tuple[datetime, int] | None = None
    try:
        for row in reader:
            line = reader.line_num
            if not row or not any(c.strip() for c in row):
                continue
            if header is None:
                header = [c.strip() for c in row]
                missing = [c for c in AZURE_COLUMNS if c not in header]
                if missing:
                    raise _err(p, line, f"missing column(s) {', '.join(missing)}: an "
                               f"Azure trace CSV starts with the header row "
                               f"{','.join(AZURE_COLUMNS)} (found {_shown(row)})",
                               field="header", value=_shown(row))
                cols = [header.index(c) for c in AZURE_COLUMNS]
                continue
            if len(row) < len(header):
                raise _err(p, line, f"the row has {len(row)} fields but the header has "
                           f"{len(header)} ({','.join(header)})", field="row",
                           value=_shown(row))
            ts_text, n_text, o_text = (row[i] for i in cols)
            try:
                ts = datetime.fromisoformat(ts_text.strip())
            except ValueError as exc:
                raise _bad(p, line, "TIMESTAMP", ts_text, "an ISO 8601 date and time "
                           "such as 2023-11-16 18:15:46.6805900") from exc
            if ts.tzinfo is None:
                ts = ts.replace(tzinfo=timezone.utc)
            n = _azure_int(p, line, "ContextTokens", n_text, 1)
            o = _azure_int(p, line, "GeneratedTokens", o_text, 0)
            if prev is not None and ts < prev[0]:
                raise _err(p, line, f"TIMESTAMP {ts_text.strip()} is earlier than the "
                           f"one on line {prev[1]}; rows must be in arrival order (the "
                           f"replay admits them in file order)", field="TIMESTAMP",
                           value=ts_text)
            prev = (ts, line)
            t0 = ts if t0 is None else t0
            k = len(out)
            ms = (ts - t0).total_seconds() * 1000.0
            out.append(TraceRequest(f"az-{k:06d}", ms, n, o, OUTPUT_BASE + k,
                                    [(UNIQUE_BASE + k, 0, n)]))
    except csv.Error as exc:
        raise _err(p, reader.line_num, f"not a valid CSV row ({exc})") from exc
    if header is None:
        raise _err(p, None, f"the file is empty; an Azure trace CSV starts with the header "
                   f"row {','.join(AZURE_COLUMNS)}", field="header")
    return out


_KVCORE_FIELDS = "output_len and either prompt_token_ids or prompt_len"
#: largest kvcore JSONL prefix_id whose stream (1 + id) stays below the unique streams
MAX_PREFIX_ID = 999_998


def read_kvcore_jsonl(path: str | Path) -> list[TraceRequest]:
    """kvcore JSONL (see the module docstring).

    Checked per row: ``output_len`` an integer >= 0; ``prompt_token_ids`` a non-empty
    list of integers >= 0 (and equal in length to ``prompt_len`` if both are given), or
    ``prompt_len`` an integer >= 1 with optional ``prefix_id`` (null or an integer in
    ``[0, MAX_PREFIX_ID]``), ``prefix_len`` (an integer in ``[0, prompt_len]``, > 0
    only with a ``prefix_id``) and ``unique_len`` (``prompt_len - prefix_len``);
    ``id`` a non-empty string or an integer, unique in the file; ``arrival`` a finite
    number >= 0, not below the previous row's.  Raises ConfigError naming the line, the
    field, the value and what is valid.
    """
    p = check_path(path, "trace")
    out: list[TraceRequest] = []
    seen_ids: dict[str, int] = {}
    prev_arrival: tuple[float, int] | None = None
    for line, row in _json_rows(p, "kvcore trace"):
        k = line - 1
        o = _int_field(p, line, "output_len",
                       _need(p, line, row, "output_len", "kvcore trace", _KVCORE_FIELDS), 0,
                       MAX_TOKENS)
        if "id" in row:
            rid_raw = row["id"]
            if not (_is_int(rid_raw) or (isinstance(rid_raw, str) and rid_raw)):
                raise _bad(p, line, "id", rid_raw, "a non-empty string or an integer")
            rid = str(rid_raw)
        else:
            rid = f"req-{k:06d}"
        if rid in seen_ids:
            raise _err(p, line, f"id {rid!r} repeats the id of line {seen_ids[rid]}; "
                       f"request ids must be unique", field="id", value=rid)
        seen_ids[rid] = line
        if "arrival" in row:
            arrival = _time_field(p, line, "arrival", row["arrival"])
            if prev_arrival is not None and arrival < prev_arrival[0]:
                raise _err(p, line, f"arrival {_shown(row['arrival'])} is earlier than "
                           f"{prev_arrival[0]:g} on line {prev_arrival[1]}; rows must be "
                           f"in arrival order (the replay admits them in file order)",
                           field="arrival", value=_json_safe(row["arrival"]))
            prev_arrival = (arrival, line)
        else:
            arrival = float(k)
        if "prompt_token_ids" in row:
            toks_raw = row["prompt_token_ids"]
            if not isinstance(toks_raw, list) or not toks_raw:
                raise _bad(p, line, "prompt_token_ids", toks_raw,
                           "a non-empty list of token ids (a prompt has at least 1 token)")
            toks = [_int_field(p, line, f"prompt_token_ids[{i}]", t, 0, MAX_TOKEN_ID)
                    for i, t in enumerate(toks_raw)]
            if "prompt_len" in row and row["prompt_len"] != len(toks):
                raise _bad(p, line, "prompt_len", row["prompt_len"],
                           f"the length of prompt_token_ids, {len(toks)}")
            out.append(TraceRequest(rid, arrival, len(toks), o, 2000000 + k,
                                    token_ids=toks))
            continue
        n = _int_field(p, line, "prompt_len",
                       _need(p, line, row, "prompt_len", "kvcore trace", _KVCORE_FIELDS), 1,
                       MAX_TOKENS)
        pid = row.get("prefix_id")
        if pid is not None:
            pid = _int_field(p, line, "prefix_id", pid, 0, MAX_PREFIX_ID)
        plen = row.get("prefix_len", 0)
        plen = 0 if plen is None else _int_field(p, line, "prefix_len", plen, 0, n)
        if plen and pid is None:
            raise _err(p, line, f"prefix_len {plen} needs a prefix_id (an integer naming "
                       f"the shared prefix); use prefix_len 0 for no shared prefix",
                       field="prefix_id", value=None)
        if "unique_len" in row and row["unique_len"] != n - plen:
            raise _bad(p, line, "unique_len", row["unique_len"],
                       f"prompt_len - prefix_len = {n - plen}")
        segs = []
        if plen:
            segs.append((1 + pid, 0, plen))  # type: ignore[operator]
        if n - plen:
            segs.append((1000000 + k, 0, n - plen))
        out.append(TraceRequest(rid, arrival, n, o, 2000000 + k, segs))
    return out


def _detect(p: Path) -> str:
    """Trace format of ``p`` from its name (``.csv``) or its first non-blank line."""
    base = p.with_suffix("") if p.suffix.lower() == ".gz" else p
    if base.suffix.lower() == ".csv":
        return "azure"
    first = next((t for _, t in _lines(p) if t.strip()), None)
    if first is None:
        return "kvcore"
    try:
        row = json.loads(first)
    except RecursionError:
        raise _err(p, 1, "not valid JSON (nested too deeply)") from None
    except ValueError:
        if "TIMESTAMP" in [c.strip() for c in first.split(",")]:
            return "azure"
        raise _err(p, None, f"the first line is neither JSON (Mooncake or kvcore JSONL) "
                   f"nor an Azure CSV header ({_shown(first.strip())}); pass "
                   f"--trace-format mooncake, azure or kvcore", field="trace_format",
                   value="auto") from None
    if isinstance(row, dict) and ("hash_ids" in row or "input_length" in row):
        return "mooncake"
    return "kvcore"


TRACE_FORMATS = ("auto", "mooncake", "azure", "kvcore")


def read_trace(path: str | Path, fmt: str = "auto") -> list[TraceRequest]:
    """Read a trace; ``fmt`` is ``auto`` (by extension and first row), ``mooncake``,
    ``azure`` or ``kvcore``.  Raises ConfigError on a missing, unreadable, corrupt,
    non-UTF-8 or empty file and on any malformed row (the message names the line, the
    field, the value and what is valid)."""
    p = check_path(path, "trace")
    readers = {"mooncake": read_mooncake, "azure": read_azure, "kvcore": read_kvcore_jsonl}
    if not isinstance(fmt, str) or (fmt != "auto" and fmt not in readers):
        raise ConfigError(f"unknown trace format {shorten(fmt)}; known: "
                          + ", ".join(TRACE_FORMATS), field="trace_format",
                          value=shorten(fmt))
    if p.is_dir():
        raise ConfigError(f"trace file {str(p)!r} is a directory, not a trace file",
                          field="trace", value=str(p))
    if not p.exists():
        raise ConfigError(f"trace file {str(p)!r} does not exist", field="trace",
                          value=str(p))
    if not p.is_file():  # a pipe, FIFO or device: readable once, so read it into memory
        _spool(p)
    if fmt == "auto":
        fmt = _detect(p)
    out = readers[fmt](p)
    if not out:
        raise _err(p, None, f"the trace has no requests (read as {fmt})")
    return out


def mooncake_ideal_hit_ratio(requests: Sequence[TraceRequest]) -> float:
    """Infinite-cache hit ratio at 512-token granularity, from the hash ids alone:
    sum over requests (in order) of ``min(leading ids seen before x 512, input_len)``
    over the sum of input lengths (the trace README's definition)."""
    requests = check_items(requests, TraceRequest, "requests")
    seen: set[int] = set()
    hit = total = 0
    for r in requests:
        ids = r.hash_ids or []
        m = 0
        for h in ids:
            if h not in seen:
                break
            m += 1
        hit += min(m * MOONCAKE_BLOCK_TOKENS, r.prompt_len)
        total += r.prompt_len
        seen.update(ids)
    return hit / total if total else 0.0
