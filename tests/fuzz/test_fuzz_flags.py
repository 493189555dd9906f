"""Fuzz every ``kvcore plan`` and ``kvcore simulate`` flag (issue 15).

Flags are discovered from the parser (so flags added later are fuzzed too); each example
gives one to three of them values drawn from integers (up to 400 digits), floats,
unit and suffix forms, comma lists, unicode text and a list of known-bad spellings.
A value that is malformed by the flag's documented rule (lengths: digits with vLLM's
k/K/m/M/g/G/t/T suffixes, ``auto`` / ``-1`` for --max-model-len; sizes: whole bytes or a
number with a unit; fractions in (0, 1] for --gpu-memory-utilization; choices) must be
refused.  Path flags (--specs, --csv, --plot, --trace) get paths inside a temporary
folder only.  Outcome classes: tests/fuzz/fuzz_support.py.
"""

from __future__ import annotations

import json
import re
import tempfile
from pathlib import Path

import pytest
from fuzz_support import check, examples
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kvcore.cli import _command_parser, build_parser

WORK = Path(tempfile.mkdtemp(prefix="kvcore-fuzz-flags-"))
MODELS = ["llama-3.1-8b", "deepseek-v3", "qwen3-next-80b-a3b-thinking", "whisper-tiny",
          "gpt-oss-20b"]
PATH_FLAGS = {"--specs", "--csv", "--plot", "--trace"}
#: lengths and counts (vLLM's human_readable_int rule): flag -> smallest valid value
LENGTH_FLAGS = {"--max-model-len": 1, "--block-size": 1, "--tp": 1, "--pp": 1,
                "--max-num-batched-tokens": 1, "--max-num-encoder-input-tokens": 0,
                "--num-speculative-tokens": 0, "--kernel-block-size": 1,
                "--num-gpu-blocks-override": 1, "--dp": 1, "--num-blocks": 2,
                "--max-num-seqs": 1, "--limit": 0}
SIZE_FLAGS = {"--kv-cache-memory", "--gpu-memory", "--overhead"}
SPECIALS = ["", " ", "auto", "AUTO", "-1", "0", "-0", "1", "0.9", "1.5", "1e3", "1e400",
            "9" * 400, "-" + "9" * 400, "128K", "128k", "1.5K", "25.6k", "20GiB", "20G",
            "20 parsecs", "nan", "inf", "-inf", "0x10", "1_000", "５", "٣", "\x00",
            "1,2", "1,,2", ",", "1,2,3,4", "20GiB,10GiB", "a" * 5000, "bogus",
            "fp8", "bfloat16", "turboquant_k3v4_nc", "0.5", "1.0", "2", "LBNHC", "H100"]
_LEN = re.compile(r"\s*([0-9]+(?:\.[0-9]+)?)([kKmMgGtT]?)\s*")
_MULT = {"": 1, "k": 10**3, "m": 10**6, "g": 10**9, "t": 10**12, "K": 1 << 10,
         "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}


def _options(command: str) -> dict[str, object]:
    parser = _command_parser(build_parser(), command)
    return {a.option_strings[-1]: a for a in parser._actions
            if a.option_strings and a.nargs is None and a.option_strings[0] != "-h"}


PLAN = _options("plan")
SIMULATE = _options("simulate")


def length_is_invalid(flag: str, value: str) -> bool:
    """vLLM's rule, written from its documentation: digits, optionally with one suffix
    letter; a decimal only with a lower-case (decimal) suffix; the result whole and at
    least the flag's minimum; at most 2^40."""
    if "," in value and flag in ("--tp", "--pp", "--max-model-len"):
        return False  # sweeps: each item is checked, not labelled here
    if flag == "--max-model-len" and value.strip().lower() in ("auto", "-1"):
        return False
    m = _LEN.fullmatch(value)
    if not m:
        return True
    number, suffix = m.groups()
    if "." in number and (suffix == "" or suffix.isupper()):
        return True
    whole, _, frac = number.partition(".")
    num = int(whole) * _MULT[suffix] + (int(frac) * _MULT[suffix] // 10 ** len(frac)
                                        if frac else 0)
    if frac and (int(frac) * _MULT[suffix]) % 10 ** len(frac):
        return True
    return num < LENGTH_FLAGS[flag] or num > 1 << 40


def size_is_invalid(value: str) -> bool:
    """Sizes are bytes or take units: a bare fraction (0.9) and text without a number
    are refused."""
    if "," in value:
        return False
    text = value.strip()
    if not re.search(r"[0-9]", text):
        return True
    bare = re.fullmatch(r"[0-9]*\.[0-9]+", text)
    return bool(bare and float(text) != int(float(text)))


def is_invalid(flag: str, value: str, action: object) -> bool:
    choices = getattr(action, "choices", None)
    if choices:
        return value not in choices
    if flag in LENGTH_FLAGS:
        return length_is_invalid(flag, value)
    if flag in SIZE_FLAGS:
        return size_is_invalid(value)
    if flag == "--gpu-memory-utilization" and "," not in value:
        try:
            f = float(value)
        except ValueError:
            return True
        return not 0 < f <= 1
    if flag == "--kv-cache-dtype":
        return not re.fullmatch(r"[A-Za-z0-9_]+", value.strip() or "-")
    return False


values = st.one_of(
    st.integers(-10**12, 10**12).map(str),
    st.integers(-10**400, 10**400).map(str),
    st.floats().map(repr),
    st.text(st.characters(blacklist_categories=("Cs",)), max_size=12),
    st.sampled_from(SPECIALS),
    st.tuples(st.integers(0, 10**7), st.sampled_from(
        list(_MULT) + ["B", "KiB", "MiB", "GiB", "GB", "TB", " GiB", "iB"])).map(
        lambda t: f"{t[0]}{t[1]}"),
)


def _argv(command: str, flags: list[tuple[str, str, bool]], model: str) -> list[str]:
    argv = [command, model]
    given_flags = {f for f, _, _ in flags}
    if command == "plan":
        base = {"--max-model-len": "4096", "--kv-cache-memory": "20GiB"}
    else:
        trace = WORK / "trace.jsonl"
        if not trace.exists():
            trace.write_text("".join(json.dumps({"prompt_len": 64 + 16 * i, "output_len": 8})
                                     + "\n" for i in range(6)))
        argv += ["--trace", str(trace)]
        base = {"--max-model-len": "4096", "--num-blocks": "3000"}
    for flag, value in base.items():
        if flag not in given_flags:
            argv += [flag, value]
    for flag, value, equals in flags:
        argv += [f"{flag}={value}"] if equals else [flag, value]
    return argv


@pytest.mark.parametrize("command, options", [("plan", PLAN), ("simulate", SIMULATE)],
                         ids=["plan", "simulate"])
@settings(max_examples=examples(150), deadline=None, derandomize=True,
          suppress_health_check=list(HealthCheck))
@given(data=st.data())
def test_flags(command, options, data):
    names = sorted(f for f in options if f not in PATH_FLAGS)
    chosen = data.draw(st.lists(st.sampled_from(names), min_size=1, max_size=3,
                                unique=True), label="flags")
    flags = []
    invalid = []
    for flag in chosen:
        value = data.draw(values, label=flag)
        if value.startswith("-") and not value[1:2].isdigit():
            value = "x" + value  # '--tp --json' is argparse's business, not the flag's
        flags.append((flag, value, data.draw(st.booleans(), label="=")))
        if is_invalid(flag, value, options[flag]):
            invalid.append(f"{flag} {value!r}")
    model = data.draw(st.sampled_from(MODELS if command == "plan" else MODELS[:1]))
    argv = _argv(command, flags, model)
    if data.draw(st.booleans(), label="json"):
        argv.append("--json")
    check(f"{command} flags", argv, invalid=bool(invalid), why=", ".join(invalid))


@pytest.mark.parametrize("flag", ["--csv", "--plot", "--specs"])
@pytest.mark.parametrize("name", ["", "missing/dir/out", "x" * 5000, "a\x00b", ".",
                                  "out.unknownext", "nested"])
def test_path_flags(flag, name, tmp_path):
    """Path flags with unusable paths: one line, exit 2, or a written file; inside a
    temporary folder only."""
    (tmp_path / "nested").mkdir()
    path = str(tmp_path / name) if name else ""
    check("plan path flags", ["plan", "llama-3.1-8b", "--max-model-len", "4096",
                              "--kv-cache-memory", "20GiB", flag, path])


@settings(max_examples=examples(100), deadline=None, derandomize=True,
          suppress_health_check=list(HealthCheck))
@given(model=st.one_of(
    st.text(st.characters(blacklist_categories=("Cs",)), max_size=40),
    st.text(st.characters(blacklist_categories=("Cs",)), max_size=120).map(lambda t: "o/" + t),
    st.sampled_from(["", ".", "org/name", "org/name@main", "org/-x-", "a" * 5000,
                     "LLAMA-3.1-8B", "llama-3.1-8b.json", "x/" * 200, "org/name@" + "r" * 300,
                     "meta-llama/Llama-3.1-8B", "deepseek-ai/DeepSeek-V3"])))
def test_model_argument(model):
    """MODEL: an embedded name, a path, an HF id or junk (offline: no download)."""
    import os

    if model.startswith("/dev") or model.startswith("-"):
        return  # devices, and what argparse reads as flags
    old = os.environ.get("HF_HUB_OFFLINE")
    os.environ["HF_HUB_OFFLINE"] = "1"
    try:
        check("plan MODEL", ["plan", model, "--max-model-len", "4096", "--kv-cache-memory",
                             "20GiB", "--json"])
    finally:
        if old is None:
            os.environ.pop("HF_HUB_OFFLINE", None)
        else:
            os.environ["HF_HUB_OFFLINE"] = old
