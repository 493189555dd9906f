"""Every integer flag of every ``kvcore`` subcommand is bounded (tester A, F1).

The rule: an integer too large for its field (2**64, a 400-digit number) is bad input:
one line, exit 2, naming the flag, never a traceback from numpy (``kvcore tune
--random-input-len 2**64`` was ``ValueError: high is out of bounds for int64``).

The flags are discovered from the parsers (plan, simulate, tune, calibrate and
``python -m kvcore.sim.accuracy``), so a flag added later with a plain ``type=int`` is
caught: a flag is an integer flag when it reads ``"1"`` as an int.  Each one gets
generated huge and very negative integers (hypothesis, derandomized); the parsed value
must be refused or hold only integers within 2**50 (the largest of kvcore's bounds,
:data:`kvcore.units.MAX_BYTES`).  The whole command then runs for the integer flags of
tune and simulate with 2**64 under the fuzz oracle (tests/fuzz/fuzz_support.py).
"""

from __future__ import annotations

import argparse
import contextlib
import io
from typing import Any

import pytest
from fuzz_support import check, examples
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kvcore.cli import _command_parser, build_parser

#: the largest bound kvcore has (kvcore.units.MAX_BYTES, 1 PiB)
LIMIT = 1 << 50
#: what each command needs besides the flag under test (parsing only)
BASE = {"plan": ["llama-3.1-8b"], "simulate": ["llama-3.1-8b"],
        "tune": ["llama-3.1-8b", "--gpu", "H100", "--dataset", "random"],
        "calibrate": ["llama-3.1-8b", "r.json", "--gpu", "H100"],
        "accuracy": []}


def _parsers() -> dict[str, argparse.ArgumentParser]:
    from kvcore.sim.accuracy import _parser

    root = build_parser()
    out = {c: _command_parser(root, c) for c in ("plan", "simulate", "tune", "calibrate")}
    out["accuracy"] = _parser()
    return out


PARSERS = _parsers()


def _parse(command: str, argv: list[str]) -> Any:
    """The parsed namespace, or None when the parser refused (exit 2)."""
    with contextlib.redirect_stderr(io.StringIO()), contextlib.redirect_stdout(io.StringIO()):
        try:
            ns, _ = PARSERS[command].parse_known_args([*BASE[command], *argv])
        except SystemExit as exc:
            assert exc.code == 2, (command, argv, exc.code)
            return None
    return ns


def _ints(value: Any) -> list[int]:
    if isinstance(value, bool):
        return []
    if isinstance(value, int):
        return [value]
    if isinstance(value, (list, tuple)):
        return [i for v in value for i in _ints(v)]
    return []


def _int_flags() -> list[tuple[str, str, str]]:
    """(command, flag, dest) of every option that reads "1" as an integer."""
    found = []
    for command, parser in PARSERS.items():
        for a in parser._actions:
            if not a.option_strings or a.nargs == 0 or a.option_strings[0] == "-h":
                continue
            flag = next(o for o in a.option_strings if o.startswith("--"))
            ns = _parse(command, [flag, "1"])
            if ns is not None and _ints(getattr(ns, a.dest, None)):
                found.append((command, flag, a.dest))
    return found


INT_FLAGS = _int_flags()


def test_the_discovery_finds_the_flags_of_every_command() -> None:
    flags = {(c, f) for c, f, _ in INT_FLAGS}
    for want in [("tune", "--random-input-len"), ("tune", "--random-output-len"),
                 ("tune", "--num-prompts"), ("tune", "--seed"), ("tune", "--top"),
                 ("tune", "--tp"), ("simulate", "--ramp-up-end-rps"),
                 ("plan", "--max-num-seqs"), ("calibrate", "--rounds"),
                 ("accuracy", "--workers")]:
        assert want in flags, want


huge = st.one_of(st.integers(LIMIT + 1, 10**400), st.integers(-10**400, -LIMIT - 1),
                 st.sampled_from([2**63, 2**64, -(2**63) - 1, 2**64 - 1]))


@pytest.mark.parametrize("command, flag, dest", INT_FLAGS,
                         ids=[f"{c}{f}" for c, f, _ in INT_FLAGS])
@settings(max_examples=examples(12), deadline=None, derandomize=True,
          suppress_health_check=list(HealthCheck))
@given(n=huge, equals=st.booleans(), listed=st.booleans())
def test_an_integer_flag_refuses_huge_values(command: str, flag: str, dest: str, n: int,
                                             equals: bool, listed: bool) -> None:
    text = f"1,{n}" if listed else str(n)  # a comma list's items are bounded too
    argv = [f"{flag}={text}"] if equals else [flag, text]
    ns = _parse(command, argv)
    if ns is not None:
        bad = [i for i in _ints(getattr(ns, dest)) if abs(i) > LIMIT]
        assert not bad, f"{command} {flag} {text[:40]} parsed to {bad[0]} (unbounded)"


_RUN_BASE = {
    "tune": ["tune", "llama-3.1-8b", "--gpu", "H100", "--dataset", "random",
             "--num-prompts", "5", "--tp", "1", "--kv-cache-dtype", "auto",
             "--max-num-seqs", "64", "--max-num-batched-tokens", "2048",
             "--backend", "serial", "--fast"],
    "simulate": ["simulate", "llama-3.1-8b", "--dataset", "random", "--num-prompts", "5",
                 "--random-input-len", "64", "--random-output-len", "4",
                 "--num-blocks", "3000", "--max-model-len", "4096"],
}
_RUN_FLAGS = [(c, f) for c, f, _ in INT_FLAGS if c in _RUN_BASE]


@pytest.mark.parametrize("command, flag", _RUN_FLAGS, ids=[c + f for c, f in _RUN_FLAGS])
@pytest.mark.parametrize("value", [str(2**64), str(-(2**64)), "9" * 400])
def test_the_command_refuses_a_huge_integer_in_one_line(command: str, flag: str,
                                                         value: str) -> None:
    argv = [*_RUN_BASE[command], flag, value]
    if flag.startswith("--ramp-up"):
        argv += ["--ramp-up-strategy", "linear"]
    o = check(f"{command} int flags", argv, invalid=True, why=f"{flag} {value[:30]}")
    assert flag in o.err, o.err


@settings(max_examples=examples(30), deadline=None, derandomize=True,
          suppress_health_check=list(HealthCheck))
@given(n=huge.filter(lambda n: n > 0), which=st.sampled_from(["start", "end"]))
def test_check_ramp_up_bounds_the_rates_on_the_api_path(n: int, which: str) -> None:
    """The Python API's ramp-up check (kvcore.sim.workload.check_ramp_up) bounds the
    rates as the flags do (a rate too large for a float was an OverflowError)."""
    from kvcore.errors import ConfigError
    from kvcore.sim.workload import check_ramp_up

    start, end = (n, n) if which == "start" else (1, n)
    with pytest.raises(ConfigError) as info:
        check_ramp_up("linear", start, end)
    assert info.value.to_dict()["field"] == f"ramp_up_{which}_rps"
