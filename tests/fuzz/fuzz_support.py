"""The fuzz suite's oracle: run ``kvcore`` in-process and classify the outcome.

Outcome classes (issue 15, "Must show"):

* exit 0 with a sane plan (under ``--json``: an object whose integers fit in 64 bits and
  whose floats are finite, num_blocks / max_model_len plausible);
* exit 2 with one line (one JSON object ``{"error": {...}}`` under ``--json``);

never a traceback (an exception out of :func:`kvcore.cli.main`, or "Traceback" in the
output), a hang (a run past :data:`HANG_SECONDS` of this process's CPU time: a
watchdog that machine load cannot trip, tests/kvcore_watchdog.py), an "internal error"
line (the CLI's last resort), or exit 0 on an input the case marks invalid.

Example counts: each test uses ``examples(default)``; ``KVCORE_FUZZ_EXAMPLES=N``
overrides every default (the long run: ``KVCORE_FUZZ_EXAMPLES=2000 pytest tests/fuzz``).
Every run adds to :data:`TALLY` (inputs and outcomes per surface), printed at the end of
the session by ``conftest.py``.
"""

from __future__ import annotations

import contextlib
import io
import json
import math
import os
import time
import warnings
from collections import Counter, defaultdict
from dataclasses import dataclass
from typing import Any

from kvcore_watchdog import HANG_CPU_SECONDS, Hang, cpu_watchdog

#: CPU seconds one run may take before it is a hang (a watchdog on this process's CPU
#: time, so a loaded machine does not trip it: tests/kvcore_watchdog.py)
HANG_SECONDS = HANG_CPU_SECONDS

#: surface -> Counter of outcomes ("exit 0", "exit 2", ...)
TALLY: dict[str, Counter[str]] = defaultdict(Counter)


def examples(default: int) -> int:
    """The example count of a fuzz test: ``KVCORE_FUZZ_EXAMPLES`` or ``default``."""
    return int(os.environ.get("KVCORE_FUZZ_EXAMPLES") or default)


def deadline(seconds: float = HANG_SECONDS) -> Any:
    """The hang watchdog around one run: :class:`Hang` after ``seconds`` of this
    process's CPU time (never wall-clock time: issue 24, item 8)."""
    return cpu_watchdog(seconds, "kvcore run")


@dataclass
class Outcome:
    code: int
    out: str
    err: str
    seconds: float

    @property
    def error_lines(self) -> list[str]:
        """stderr lines other than warnings (``kvcore: warning: ...``)."""
        return [line for line in self.err.splitlines()
                if line.strip() and not line.startswith("kvcore: warning:")]


def run_cli(argv: list[str]) -> Outcome:
    """``kvcore argv`` in-process; stdout and stderr captured; a hang raises Hang."""
    from kvcore.cli import main

    out, err = io.StringIO(), io.StringIO()
    start = time.perf_counter()
    with deadline(), warnings.catch_warnings(), contextlib.redirect_stdout(out), \
            contextlib.redirect_stderr(err):
        warnings.simplefilter("default")
        code = main(argv)
    return Outcome(code, out.getvalue(), err.getvalue(), time.perf_counter() - start)


def _no_constant(token: str) -> Any:
    raise AssertionError(f"not RFC 8259 JSON: the bare token {token} (write \"inf\" / "
                         f"\"nan\" as vllm bench serve does)")


def strict_loads(text: str) -> Any:
    """``json.loads`` refusing ``Infinity`` / ``-Infinity`` / ``NaN`` (strict parsers
    do): kvcore's --json output is RFC 8259 JSON."""
    return json.loads(text, parse_constant=_no_constant)


def _walk(value: Any, path: str = "") -> None:
    if isinstance(value, bool) or value is None or isinstance(value, str):
        return
    if isinstance(value, int):
        assert -(1 << 63) <= value < (1 << 63), f"{path}: {value} does not fit in 64 bits"
    elif isinstance(value, float):
        assert math.isfinite(value), f"{path}: {value} is not finite"
    elif isinstance(value, dict):
        for k, v in value.items():
            _walk(v, f"{path}.{k}")
    elif isinstance(value, list):
        for i, v in enumerate(value):
            _walk(v, f"{path}[{i}]")


def check_plan_json(data: Any) -> None:
    """A plan printed by ``kvcore plan --json`` (or a list of them, a sweep) is sane."""
    if isinstance(data, list):
        for row in data:
            check_plan_json(row)
        return
    assert isinstance(data, dict), data
    _walk(data)
    if "groups" in data:
        assert isinstance(data["groups"], list) and data["groups"], "a plan without groups"
    mml = data.get("max_model_len")
    if mml is not None:
        assert isinstance(mml, int) and 1 <= mml <= 1 << 32, f"max_model_len {mml}"
    nb = data.get("num_blocks")
    if nb is not None:
        assert isinstance(nb, int) and 2 <= nb <= 1 << 40, f"num_blocks {nb}"
    for key in ("bytes_per_token", "bytes_per_block"):  # compressed layers: fractional
        v = data.get(key)
        if v is not None:
            assert isinstance(v, (int, float)) and not isinstance(v, bool) and v >= 0, \
                f"{key} {v}"


def check(surface: str, argv: list[str], *, invalid: bool = False,
          why: str = "") -> Outcome:
    """Run ``argv`` and assert the outcome classes; ``invalid``: the input is invalid,
    so exit 0 is a silent acceptance.  Adds the outcome to TALLY[surface]."""
    shown = " ".join(a if len(a) < 80 else a[:60] + "..." for a in argv)
    try:
        o = run_cli(argv)
    except Hang:
        TALLY[surface]["hang"] += 1
        raise AssertionError(f"hang: kvcore {shown}: no answer within {HANG_SECONDS:g} "
                             f"s of CPU time (a watchdog for true hangs, >= 10x an "
                             f"honest run; wall-clock time and machine load do not "
                             f"count)") from None
    except BaseException as exc:  # an exception out of main() is a traceback
        TALLY[surface]["traceback"] += 1
        raise AssertionError(f"traceback ({type(exc).__name__}: {exc}) from kvcore "
                             f"{shown}") from exc
    text = o.out + o.err
    as_json = "--json" in argv
    try:
        assert "Traceback" not in text, f"traceback printed: {text[-1500:]}"
        assert "kvcore bug" not in text and "InternalError" not in text, \
            f"internal error: {text[-600:]}"
        assert o.code in (0, 2), f"exit {o.code}: {text[-600:]}"
        if o.code == 0:
            assert not invalid, f"exit 0 on invalid input ({why}): kvcore {shown}"
            if as_json and o.out.strip():
                check_plan_json(strict_loads(o.out))
        else:
            if as_json:
                lines = [line for line in o.out.splitlines() if line.strip()]
                assert len(lines) == 1, f"not one JSON line: {o.out[-600:]}"
                payload = strict_loads(lines[0])
                assert set(payload) == {"error"} and payload["error"]["message"], payload
                assert len(payload["error"]["message"]) < 2000
            else:
                assert len(o.error_lines) == 1, f"not one line: {o.err[-800:]}"
                assert len(o.error_lines[0]) < 2000, "an uncut message"
    except AssertionError:
        TALLY[surface]["failed"] += 1
        raise
    TALLY[surface][f"exit {o.code}"] += 1
    return o


def tally_lines() -> list[str]:
    lines = []
    for surface in sorted(TALLY):
        c = TALLY[surface]
        total = sum(c.values())
        parts = ", ".join(f"{k} {v}" for k, v in sorted(c.items()))
        lines.append(f"{surface}: {total} inputs ({parts})")
    return lines
