"""``python -m kvcore.sim.accuracy``'s command line: argparse, --help, one-line errors
(exit 2) naming the flag (tester 3, finding 3; house rule of COMMON.md)."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st


@pytest.mark.parametrize("argv,word", [(["--only"], "only"), (["--added"], "added"),
                                       (["--data"], "data"),
                                       (["--data", "/nonexistent/kvcore-t3"], "data"),
                                       (["--bogus-flag", "--added", "v99"], "bogus"),
                                       (["--onyl", "x", "--added", "v99"], "onyl")])
def test_f3_accuracy_cli_bad_flags_one_line_exit_2(capsys: Any, argv: list[str],
                                                   word: str) -> None:
    """`python -m kvcore.sim.accuracy` parses argv by hand: a flag without its value
    raises IndexError, a missing --data folder FileNotFoundError (tracebacks, exit 1),
    and unknown or misspelt flags are silently ignored.  House rule: one line naming the
    flag, exit 2."""
    from kvcore.sim import accuracy

    try:
        code = accuracy.main(argv)
    except SystemExit as e:  # argparse's way of saying exit 2 is fine
        code = int(e.code or 0)
    except Exception as exc:  # noqa: BLE001 - the finding
        pytest.fail(f"{argv}: {type(exc).__name__}: {exc}")
    err = capsys.readouterr().err.strip()
    assert code == 2
    assert word in err, err


def test_f3b_accuracy_help_prints_usage(capsys: Any) -> None:
    """`python -m kvcore.sim.accuracy --help` ran the whole table (> 60 s of CPU on the
    shared machine); with --only NOPE it prints 'no measurement row matches'.  --help
    must print the usage and exit 0 without evaluating anything."""
    from kvcore.sim import accuracy

    try:
        code = accuracy.main(["--help", "--only", "NOPE-no-such-row"])
    except SystemExit as e:  # argparse's way
        code = int(e.code or 0)
    out = capsys.readouterr()
    assert code == 0, out.err
    assert "usage" in (out.out + out.err).lower()



@settings(max_examples=30, deadline=None)
@given(st.lists(st.sampled_from(["--only", "--added", "--data", "--fit", "--fast",
                                 "--bogus", "-x", "--only=", "--onyl", "x", "v3"]),
                min_size=1, max_size=4))
def test_accuracy_cli_never_tracebacks(argv: list[str]) -> None:
    """Any mix of flags either is a valid command line or exits 2 with one line; the
    bad ones are checked by argparse before any row is simulated.  Valid lines are not
    run here (they evaluate rows): only the parse is checked."""
    import contextlib
    import io

    from kvcore.sim import accuracy

    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            accuracy._parser().parse_args(argv)
    except SystemExit as e:
        assert e.code == 2
        assert len(err.getvalue().strip().splitlines()) == 1
