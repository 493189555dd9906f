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

Any of them may be gzip-compressed (``.gz``).

Output tokens of request ``k`` are ``tok(2000000 + k, j)`` (kvcore JSONL, as in the
conformance workload) or ``tok(OUTPUT_BASE + k, j)`` (the other formats), never equal
to a prompt stream.
"""

from __future__ import annotations

import csv
import gzip
import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

from kvcore.errors import ConfigError
from kvcore.sim.tokens import stream_tokens

__all__ = [
    "TraceRequest",
    "MOONCAKE_BLOCK_TOKENS",
    "read_trace",
    "read_mooncake",
    "read_azure",
    "read_kvcore_jsonl",
    "mooncake_ideal_hit_ratio",
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


def _open(path: Path):  # type: ignore[no-untyped-def]
    """Text handle of a trace file; ``.gz`` files are decompressed on the fly."""
    if path.suffix == ".gz":
        return gzip.open(path, "rt", newline="")
    return path.open(newline="")


def _bad(path: Path, line: int, msg: str) -> ConfigError:
    return ConfigError(f"{path}:{line}: {msg}", field="trace", value=str(path))


def read_mooncake(path: str | Path) -> list[TraceRequest]:
    """Mooncake FAST'25 trace JSONL (``timestamp``, ``input_length``,
    ``output_length``, ``hash_ids``; ``len(hash_ids) == ceil(input_length / 512)``)."""
    p = Path(path)
    out: list[TraceRequest] = []
    with _open(p) as f:
        for k, line in enumerate(f):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
                n = int(row["input_length"])
                ids = [int(h) for h in row["hash_ids"]]
                o = int(row["output_length"])
            except (ValueError, KeyError, TypeError) as exc:
                raise _bad(p, k + 1, f"not a Mooncake row ({exc})") from exc
            if len(ids) != -(-n // MOONCAKE_BLOCK_TOKENS):
                raise _bad(p, k + 1, f"{len(ids)} hash_ids for input_length {n} (expected "
                           f"ceil({n}/512) = {-(-n // 512)})")
            segs = [(1 + h, 0, min(MOONCAKE_BLOCK_TOKENS, n - i * MOONCAKE_BLOCK_TOKENS))
                    for i, h in enumerate(ids)]
            out.append(TraceRequest(f"mc-{k:06d}", float(row.get("timestamp", 0)), n, o,
                                    OUTPUT_BASE + k, segs, hash_ids=ids))
    return out


def read_azure(path: str | Path) -> list[TraceRequest]:
    """Azure LLM inference trace CSV (``TIMESTAMP,ContextTokens,GeneratedTokens``)."""
    p = Path(path)
    out: list[TraceRequest] = []
    t0: datetime | None = None
    with _open(p) as f:
        for k, row in enumerate(csv.DictReader(f)):
            try:
                ts = datetime.fromisoformat(row["TIMESTAMP"].strip()[:26])
                n = int(row["ContextTokens"])
                o = int(row["GeneratedTokens"])
            except (ValueError, KeyError, TypeError) as exc:
                raise _bad(p, k + 2, f"not an Azure trace row ({exc})") from exc
            t0 = ts if t0 is None else t0
            ms = (ts - t0).total_seconds() * 1000.0
            out.append(TraceRequest(f"az-{k:06d}", ms, n, o, OUTPUT_BASE + k,
                                    [(UNIQUE_BASE + k, 0, n)]))
    return out


def read_kvcore_jsonl(path: str | Path) -> list[TraceRequest]:
    """kvcore JSONL (see the module docstring)."""
    p = Path(path)
    out: list[TraceRequest] = []
    with _open(p) as f:
        for k, line in enumerate(f):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
                o = int(row["output_len"])
                rid = str(row.get("id", f"req-{k:06d}"))
                arrival = float(row.get("arrival", k))
                if "prompt_token_ids" in row:
                    toks = [int(t) for t in row["prompt_token_ids"]]
                    out.append(TraceRequest(rid, arrival, len(toks), o, 2000000 + k,
                                            token_ids=toks))
                    continue
                n = int(row["prompt_len"])
                pid = row.get("prefix_id")
                plen = int(row.get("prefix_len", 0) or 0) if pid is not None else 0
            except (ValueError, KeyError, TypeError) as exc:
                raise _bad(p, k + 1, f"not a kvcore trace row ({exc}); need output_len "
                           f"and prompt_token_ids or prompt_len") from exc
            if plen > n:
                raise _bad(p, k + 1, f"prefix_len {plen} > prompt_len {n}")
            segs = []
            if plen:
                segs.append((1 + int(pid), 0, plen))
            segs.append((1000000 + k, 0, n - plen))
            out.append(TraceRequest(rid, arrival, n, o, 2000000 + k, segs))
    return out


def read_trace(path: str | Path, fmt: str = "auto") -> list[TraceRequest]:
    """Read a trace; ``fmt`` is ``auto`` (by extension and first row), ``mooncake``,
    ``azure`` or ``kvcore``.  Raises ConfigError on a malformed file."""
    p = Path(path)
    if not p.is_file():
        raise ConfigError(f"trace file {str(p)!r} does not exist", field="trace",
                          value=str(p))
    if fmt == "auto":
        base = p.with_suffix("") if p.suffix == ".gz" else p
        if base.suffix.lower() == ".csv":
            fmt = "azure"
        else:
            with _open(p) as f:
                first = next((ln for ln in f if ln.strip()), "{}")
            try:
                row = json.loads(first)
            except ValueError as exc:
                raise ConfigError(f"{p}: first line is not JSON ({exc})", field="trace",
                                  value=str(p)) from exc
            fmt = "mooncake" if isinstance(row, dict) and "hash_ids" in row else "kvcore"
    readers = {"mooncake": read_mooncake, "azure": read_azure, "kvcore": read_kvcore_jsonl}
    if fmt not in readers:
        raise ConfigError(f"unknown trace format {fmt!r}; known: auto, "
                          + ", ".join(readers), field="trace_format", value=fmt)
    return readers[fmt](p)


def mooncake_ideal_hit_ratio(requests: Sequence[TraceRequest]) -> float:
    """Infinite-cache hit ratio at 512-token granularity, from the hash ids alone:
    sum over requests (in order) of ``min(leading ids seen before x 512, input_len)``
    over the sum of input lengths (the trace README's definition)."""
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
