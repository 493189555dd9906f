"""Every typed flag of every ``kvcore`` command refuses a bad value the same way.

The rule (bad-input rule of the developers' brief): one line, ``kvcore CMD: error:``,
naming the flag and the value, exit 2, no traceback.  The flags are discovered from
the parser, so a flag added later is checked too.  A converter that raises kvcore's
``ConfigError`` (a ValueError) without turning it into argparse's
``ArgumentTypeError`` made argparse print its generic "invalid _utilization value"
(the converter's private function name, and no valid range): ``kvcore calibrate
--gpu-memory-utilization 0`` did (tester finding).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kvcore.cli import build_parser

BAD = ["abc", "", " ", "nan", "-1", "0", "-0", "1e400", "9" * 400, "-" + "9" * 400,
       "1.5", "inf", "-inf", "\x00", "1,2", ",", "0.0001", "0x10", "５", "20 parsecs"]
#: argparse's own converters name the Python type; those are descriptive enough
_GENERIC = re.compile(r"invalid (\S+) value")


def _typed_options() -> list[tuple[str, str]]:
    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    out = []
    for cmd, sp in sub.choices.items():
        for a in sp._actions:
            if (a.option_strings and a.type is not None and a.type is not str
                    and a.nargs in (None, "?")):
                out.append((cmd, a.option_strings[0]))
    return out


OPTIONS = _typed_options()


def _parse(cmd: str, flag: str, value: str) -> tuple[int | None, str]:
    parser = build_parser()
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        try:
            parser.parse_args([cmd, "llama-3.1-8b", f"{flag}={value}"]
                              if cmd not in ("plugins", "models", "gpus")
                              else [cmd, f"{flag}={value}"])
        except SystemExit as e:
            return int(e.code or 0), err.getvalue()
    return None, err.getvalue()


def test_options_were_found() -> None:
    cmds = {c for c, _ in OPTIONS}
    assert {"plan", "simulate", "tune", "calibrate"} <= cmds
    assert ("calibrate", "--gpu-memory-utilization") in OPTIONS


def _check(cmd: str, flag: str, value: str) -> None:
    code, text = _parse(cmd, flag, value)
    if code is None:
        return  # accepted by the parser; later checks are the command's
    lines = [ln for ln in text.strip().splitlines() if ln.strip()]
    assert code == 2, (cmd, flag, value, text)
    assert "Traceback" not in text
    last = lines[-1]
    assert last.startswith(f"kvcore {cmd}: error:"), last
    m = _GENERIC.search(last)
    assert not (m and m.group(1).startswith("_")), f"{cmd} {flag}={value!r}: {last}"


@pytest.mark.parametrize(("cmd", "flag"), OPTIONS)
def test_bad_values_give_one_usage_line(cmd: str, flag: str) -> None:
    for value in BAD:
        _check(cmd, flag, value)


@settings(max_examples=150, deadline=None)
@given(st.sampled_from(OPTIONS),
       st.one_of(st.text(max_size=8), st.floats().map(repr),
                 st.integers(-10**30, 10**30).map(str)))
def test_generated_values_give_one_usage_line(opt: tuple[str, str], value: str) -> None:
    _check(opt[0], opt[1], value)


def test_calibrate_utilization_names_the_range() -> None:
    code, text = _parse("calibrate", "--gpu-memory-utilization", "1.5")
    assert code == 2
    assert "(0, 1]" in text and "1.5" in text
