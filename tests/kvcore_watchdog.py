"""Hang watchdogs that do not depend on the machine's speed (issue 24, item 8).

No test may fail because the machine is slow or loaded.  A check that must catch a
true hang (an unbounded loop over a count such as ``n_layer: 10**30``) uses one of:

* :func:`cpu_watchdog`: a limit on the **CPU time this process spends** inside the
  block (``ITIMER_PROF``: user + system time of the process).  Other jobs on the machine
  do not consume this process's CPU time, so a loaded machine does not bring the limit
  closer; the default, :data:`HANG_CPU_SECONDS`, is far above (>= 10x) what any honest
  call takes on a slow CPU.
* :func:`run_watched`: ``subprocess.run`` with a generous wall-clock limit (a child's
  CPU time cannot interrupt it) whose failure says it is a hang watchdog.

Both fail with a message saying the limit is a watchdog for true hangs, not a speed
requirement (speed is measured in ``benchmarks/``).
"""

from __future__ import annotations

import contextlib
import signal
import subprocess
from collections.abc import Iterator
from typing import Any

#: CPU seconds one in-process call may take before it is called a hang.  The slowest
#: honest fuzz input measured takes well under 2 s of CPU; 60 s is 30x that.
HANG_CPU_SECONDS = 60.0

#: wall-clock seconds a child process may take before it is called a hang (the
#: subprocesses of the tests take seconds to a minute; a loaded machine several times
#: that)
HANG_WALL_SECONDS = 1800.0


class Hang(Exception):
    """A call ran past its watchdog (a true hang: see the module docstring)."""


def hang_message(what: str, limit: float, clock: str) -> str:
    return (f"{what}: no answer within {limit:g} s of {clock}. This is a hang "
            f"watchdog, not a speed limit: it is >= 10x what an honest run takes even "
            f"on a slow or loaded machine, so the call most likely loops without bound "
            f"(e.g. over a count that was not bounded before the loop)")


@contextlib.contextmanager
def cpu_watchdog(seconds: float = HANG_CPU_SECONDS, what: str = "call") -> Iterator[None]:
    """Raise :class:`Hang` inside the block once it has used ``seconds`` of this
    process's CPU time (not wall-clock time).  Main thread only (signals)."""
    def on_prof(signum: int, frame: Any) -> None:
        raise Hang(hang_message(what, seconds, "this process's CPU time"))

    old = signal.signal(signal.SIGPROF, on_prof)
    signal.setitimer(signal.ITIMER_PROF, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_PROF, 0)
        signal.signal(signal.SIGPROF, old)


def run_watched(cmd: Any, *, timeout: float = HANG_WALL_SECONDS,
                **kw: Any) -> subprocess.CompletedProcess[Any]:
    """``subprocess.run(cmd, timeout=timeout, **kw)``; a timeout fails with
    :func:`hang_message` (the child is killed by ``subprocess.run``)."""
    try:
        return subprocess.run(cmd, timeout=timeout, **kw)
    except subprocess.TimeoutExpired:
        shown = " ".join(map(str, cmd)) if isinstance(cmd, (list, tuple)) else str(cmd)
        raise AssertionError(hang_message(f"subprocess {shown[:200]}", timeout,
                                          "wall-clock time")) from None
