"""Shared helpers of the CLI tests: run ``kvcore`` in-process and read what it printed.

Tests import them by name (``from kvcore_cli_support import run_cli``); the tests/
folder is on ``sys.path`` through its conftest.py, as for kvcore_watchdog.
"""

from __future__ import annotations

import json
from typing import Any

from kvcore.cli import main

__all__ = ["run_cli", "run_json", "assert_clean_error"]


def run_cli(capsys: Any, argv: list[str]) -> tuple[int, str, str]:
    """``(exit status, stdout, stderr)`` of ``kvcore ARGV`` (pytest's ``capsys``)."""
    code = main(argv)
    cap = capsys.readouterr()
    return code, cap.out, cap.err


def run_json(capsys: Any, argv: list[str]) -> dict[str, Any]:
    """The object ``kvcore ARGV --json`` printed; fails unless it exited 0."""
    code, out, err = run_cli(capsys, [*argv, "--json"])
    assert code == 0, err + out
    return json.loads(out)  # type: ignore[no-any-return]


def assert_clean_error(rc: int, err: str, *words: str) -> None:
    """The bad-input rule: exit 2, one line on stderr, no traceback, naming ``words``."""
    assert rc == 2, err
    assert "Traceback" not in err and "kvcore bug" not in err, err
    assert len(err.strip().splitlines()) == 1, err
    for w in words:
        assert w in err, (w, err)
