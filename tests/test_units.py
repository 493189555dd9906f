"""kvcore.units: sizes, lengths (vLLM's suffixes), bounds and cut messages.

Expected values come from the issue text (#15, #16), the unit definitions (SI and IEC)
and vLLM 0.32's ``human_readable_int`` (checked differentially when the reference venv
is there)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kvcore_watchdog import run_watched

from kvcore.errors import ConfigError, KVCoreError
from kvcore.units import (
    MAX_BYTES,
    MAX_TOKENS,
    check_int,
    parse_length,
    parse_size,
    shorten,
    shorten_message,
)

VLLM_PY = Path(__file__).resolve().parents[1] / ".vllm-ref" / "venv" / "bin" / "python"


@pytest.mark.parametrize("text, value", [
    ("20GiB", 20 * 2**30), ("20GB", 20 * 10**9), ("1.5 GiB", 3 * 2**29), ("4e9", 4 * 10**9),
    ("8000000000", 8 * 10**9), ("512MiB", 2**29), ("20G", 20 * 2**30), ("20g", 20 * 10**9),
    ("2K", 2048), ("2k", 2000), ("1 tib", 2**40), ("0", 0), ("4.5e9", 4_500_000_000),
])
def test_sizes(text, value):
    assert parse_size(text) == value


@pytest.mark.parametrize("text, fragment", [
    ("0.9", "--gpu-memory-utilization"), ("1.5", "whole number of bytes"),
    ("-1GB", "negative"), ("20 parsecs", "unknown unit"), ("GB", "cannot read"),
    ("1.5G", "binary one-letter"), ("1e400", "too large"), ("2PiB", "too large"),
    ("nan", "cannot read"), ("inf", "cannot read"),
])
def test_bad_sizes(text, fragment):
    with pytest.raises(ConfigError, match="kv_cache_memory") as e:
        parse_size(text)
    assert fragment in e.value.message


@pytest.mark.parametrize("text, value", [
    ("128K", 131_072), ("128k", 128_000), ("25.6k", 25_600), ("1M", 2**20),
    ("1m", 10**6), ("8192", 8192), (" 4k ", 4000), ("2G", 2**31),
])
def test_lengths(text, value):
    assert parse_length(text) == value


def test_length_auto_only_where_allowed():
    assert parse_length("auto", allow_auto=True) == parse_length("-1", allow_auto=True) == -1
    for bad in ("auto", "-1", "0", "1.5K", "1e3", "0.5", "1_000", "9" * 400, "5G"):
        with pytest.raises(ConfigError, match="max_model_len"):
            parse_length(bad)


@settings(max_examples=200, deadline=None)
@given(n=st.integers(0, 10**6), suffix=st.sampled_from(["", "k", "K", "m", "M"]))
def test_lengths_rule(n, suffix):
    mult = {"": 1, "k": 1000, "K": 1024, "m": 10**6, "M": 2**20}[suffix]
    expected = n * mult
    if 1 <= expected <= MAX_TOKENS:
        assert parse_length(f"{n}{suffix}") == expected
    else:
        with pytest.raises(ConfigError):
            parse_length(f"{n}{suffix}")


@settings(max_examples=200, deadline=None)
@given(n=st.integers(0, 2**60), unit=st.sampled_from(
    [("", 1), ("B", 1), ("KB", 10**3), ("MiB", 2**20), ("GiB", 2**30), ("GB", 10**9),
     ("G", 2**30), ("g", 10**9), ("TiB", 2**40)]))
def test_sizes_rule(n, unit):
    name, mult = unit
    if n * mult <= MAX_BYTES:
        assert parse_size(f"{n}{name}") == n * mult
    else:
        with pytest.raises(ConfigError, match="too large"):
            parse_size(f"{n}{name}")


@settings(max_examples=300, deadline=None)
@given(text=st.text(max_size=40))
def test_any_text_is_a_value_or_a_config_error(text):
    for parse in (parse_size, parse_length):
        try:
            value = parse(text)
        except ConfigError as exc:
            assert len(exc.message) < 400
        else:
            assert isinstance(value, int) and 0 <= value <= MAX_BYTES


@pytest.mark.skipif(not VLLM_PY.exists(), reason="vLLM reference venv not installed")
def test_lengths_match_vllm():
    cases = ["1k", "1K", "25.6k", "128K", "128k", "1M", "2m", "3g", "1G", "8192", "1.5m",
             "1t", "12", "0.5k", "7.25k", "64K", "4096"]
    code = ("import json,sys\nfrom vllm.utils.argparse_utils import human_readable_int\n"
            "print(json.dumps([human_readable_int(c) for c in json.loads(sys.argv[1])]))")
    out = run_watched([str(VLLM_PY), "-c", code, json.dumps(cases)], capture_output=True,
                         text=True)
    if out.returncode:
        pytest.skip(f"vLLM reference did not run: {out.stderr[-300:]}")
    theirs = json.loads(out.stdout)
    ours = [parse_length(c, maximum=2**50) for c in cases]
    assert ours == theirs


def test_check_int_names_field_and_bounds():
    assert check_int(5, "block_size") == 5
    np = pytest.importorskip("numpy")
    assert check_int(np.int64(7), "block_size") == 7
    for bad, frag in ((True, "must be a positive int"), ("5", "must be a positive int"),
                      (0, "positive"), (10**400, "implausibly large"), (2.5, "int")):
        with pytest.raises(ConfigError, match="block_size") as e:
            check_int(bad, "block_size")
        assert frag in e.value.message
    assert check_int(4096.0, "max_position_embeddings", allow_integral_float=True) == 4096


def test_long_values_are_cut():
    long = "9" * 5000
    assert len(shorten(long)) < 100 and "5,000 characters" in shorten(long)
    msg = shorten_message(f"field x = {long} is bad")
    assert len(msg) < 150 and msg.startswith("field x = 999") and msg.endswith("is bad")
    err = KVCoreError(f"value {long}", value=long)
    assert len(err.message) < 150 and len(err.to_dict()["value"]) < 150
    assert "digits" in shorten(10**5000)
