"""Fuzz suite setup: the tally of inputs and outcomes per surface is printed at the end
of the session (the figures for the issue note).  ``KVCORE_FUZZ_EXAMPLES=N`` sets every
fuzz test's example count (default: a bounded CI run of about a minute)."""

from __future__ import annotations

from fuzz_support import tally_lines


def pytest_terminal_summary(terminalreporter, exitstatus, config):  # noqa: ARG001
    lines = tally_lines()
    if lines:
        terminalreporter.section("kvcore fuzz tally (inputs and outcomes per surface)")
        for line in lines:
            terminalreporter.write_line(line)
