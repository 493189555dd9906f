"""The hang watchdogs of the tests count CPU time (in-process) or use a generous limit
(subprocesses), so no test depends on the machine's speed (issue 24, item 8)."""

from __future__ import annotations

import sys
import time

import pytest
from kvcore_watchdog import Hang, cpu_watchdog, run_watched


def test_cpu_watchdog_catches_a_busy_loop_and_says_it_is_a_watchdog():
    with pytest.raises(Hang) as e:
        with cpu_watchdog(0.2, "busy loop"):
            while True:
                pass
    assert "watchdog, not a speed limit" in str(e.value) and "busy loop" in str(e.value)


def test_cpu_watchdog_ignores_time_the_process_does_not_spend():
    """Waiting (as a process does while other jobs hold the CPU) uses no CPU time of
    this process, so the watchdog does not trip however long it lasts."""
    with cpu_watchdog(0.05):
        time.sleep(0.3)


def test_run_watched_names_a_hang():
    with pytest.raises(AssertionError) as e:
        run_watched([sys.executable, "-c", "import time; time.sleep(30)"], timeout=0.5)
    assert "hang watchdog" in str(e.value)
    assert run_watched([sys.executable, "-c", "print(1)"], capture_output=True,
                       text=True).stdout.strip() == "1"
