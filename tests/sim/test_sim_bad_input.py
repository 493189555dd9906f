"""Bad input to ``kvcore simulate`` and the trace readers.

The rule: every bad input gives ONE line naming the field (and the trace line), the
value and what is valid; exit status 2; ``{"error": {...}}`` under ``--json``; never a
Python traceback.  Each case below is a defect a reviewer reproduced (a traceback from
inside the replay, a silent 0-request run, a budget the user never gave...).
Expected figures are hand arithmetic from the formats (Mooncake: one hash id per
512-token block; llama-3.1-8b: 32 layers x 8 KV heads x 128 x 2 B x (K, V) = 128 KiB a
token, 2 MiB a 16-token block).
"""

from __future__ import annotations

import argparse
import gzip
import json
import string
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import kvcore
from kvcore.cli import build_parser
from kvcore.cli import main as cli_main
from kvcore.errors import ConfigError
from kvcore.sim.replay import Job
from kvcore.sim.traces import TraceRequest, read_azure, read_trace

MC_OK = '{"timestamp": 0, "input_length": 1000, "output_length": 10, "hash_ids": [1, 2]}\n'
AZ_HEAD = "TIMESTAMP,ContextTokens,GeneratedTokens\n"
AZ_ROW = "2023-11-16 18:15:46.6805900,100,10\n"


def run_cli(capsys, argv):
    """(exit status, stdout, stderr) of ``kvcore argv`` run in-process."""
    code = cli_main(argv)
    cap = capsys.readouterr()
    return code, cap.out, cap.err


def assert_one_line_error(capsys, argv, *needles, field=None):
    """Exit 2, one stderr line holding every needle, no traceback; then the same
    command with --json gives {"error": {...}} (with ``field`` if given) on stdout."""
    code, out, err = run_cli(capsys, argv)
    assert code == 2, (out, err)
    assert "Traceback" not in err and "Traceback" not in out
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("kvcore simulate: error: ")
    for n in needles:
        assert n in lines[0], (n, lines[0])
    code, out, err = run_cli(capsys, [*argv, "--json"])
    assert code == 2 and "Traceback" not in err
    obj = json.loads(out)
    assert set(obj) == {"error"}
    e = obj["error"]
    assert e["message"] == lines[0][len("kvcore simulate: error: "):]
    if field is not None:
        assert e["field"] == field, e
    return e


def sim(trace, *extra):
    return ["simulate", "qwen3-8b", "--trace", str(trace), "--num-blocks", "4000",
            "--max-model-len", "8192", *extra]


# ---- 1 + 2: every field of every format, checked inside the error handling ----------
BAD_ROWS = [
    # (file name, content, needles, field)
    ("ts_str.jsonl", MC_OK.replace('"timestamp": 0', '"timestamp": "abc"'),
     (":1:", "timestamp", '"abc"', ">= 0"), "timestamp"),
    ("ts_null.jsonl", MC_OK.replace('"timestamp": 0', '"timestamp": null'),
     (":1:", "timestamp", "null"), "timestamp"),
    ("ts_nan.jsonl", MC_OK.replace('"timestamp": 0', '"timestamp": NaN'),
     ("timestamp", "NaN", "finite"), "timestamp"),
    ("mc_zero_in.jsonl", '{"timestamp": 0, "input_length": 0, "output_length": 10, '
     '"hash_ids": []}\n', (":1:", "input_length", "got 0", ">= 1"), "input_length"),
    ("mc_neg_in.jsonl", '{"timestamp": 0, "input_length": -5, "output_length": 10, '
     '"hash_ids": []}\n', ("input_length", "got -5", ">= 1"), "input_length"),
    ("mc_neg_out.jsonl", MC_OK.replace('"output_length": 10', '"output_length": -10'),
     ("output_length", "got -10", ">= 0"), "output_length"),
    ("mc_bool.jsonl", MC_OK.replace('"output_length": 10', '"output_length": true'),
     ("output_length", "got true", "integer"), "output_length"),
    # 1000 tokens = 2 blocks of 512 (ceil(1000/512) = 2), not 3
    ("mc_hash_count.jsonl", MC_OK.replace("[1, 2]", "[1, 2, 3]"),
     ("hash_ids has 3 ids", "input_length 1000", "ceil(1000/512) = 2"), "hash_ids"),
    ("mc_hash_float.jsonl", MC_OK.replace("[1, 2]", "[1, 2.5]"),
     ("hash_ids[1]", "2.5", "integer"), "hash_ids[1]"),
    ("mc_hash_neg.jsonl", MC_OK.replace("[1, 2]", "[-1, 2]"),
     ("hash_ids[0]", "-1"), "hash_ids[0]"),
    ("mc_hash_str.jsonl", MC_OK.replace("[1, 2]", '"12"'), ("hash_ids", "list"),
     "hash_ids"),
    ("mc_missing.jsonl", MC_OK + '{"timestamp": 5, "output_length": 1, "hash_ids": [1]}\n',
     (":2:", "missing field 'input_length'"), "input_length"),
    ("mc_unsorted.jsonl", MC_OK.replace('"timestamp": 0', '"timestamp": 100') + MC_OK,
     (":2:", "timestamp 0 is earlier than 100 on line 1", "arrival order"), "timestamp"),
    ("mc_not_obj.jsonl", MC_OK + "[1, 2]\n", (":2:", "JSON object"), None),
    ("kv_pid_str.jsonl", '{"output_len": 5, "prompt_len": 100, "prefix_id": "abc", '
     '"prefix_len": 50}\n', (":1:", "prefix_id", '"abc"', "integer"), "prefix_id"),
    ("kv_empty_toks.jsonl", '{"output_len": 5, "prompt_token_ids": []}\n',
     ("prompt_token_ids", "[]", "at least 1 token"), "prompt_token_ids"),
    ("kv_neg_tok.jsonl", '{"output_len": 5, "prompt_token_ids": [3, -2]}\n',
     ("prompt_token_ids[1]", "-2", ">= 0"), "prompt_token_ids[1]"),
    ("kv_zero_len.jsonl", '{"output_len": 5, "prompt_len": 0}\n',
     ("prompt_len", "got 0", ">= 1"), "prompt_len"),
    ("kv_neg_out.jsonl", '{"output_len": -1, "prompt_len": 10}\n',
     ("output_len", "got -1", ">= 0"), "output_len"),
    ("kv_str_num.jsonl", '{"output_len": "5", "prompt_len": 10}\n',
     ("output_len", '"5"', "integer"), "output_len"),
    ("kv_neg_plen.jsonl", '{"output_len": 5, "prompt_len": 100, "prefix_id": 1, '
     '"prefix_len": -50}\n', ("prefix_len", "-50", "[0, 100]"), "prefix_len"),
    ("kv_plen_gt.jsonl", '{"output_len": 5, "prompt_len": 100, "prefix_id": 1, '
     '"prefix_len": 101}\n', ("prefix_len", "101", "[0, 100]"), "prefix_len"),
    ("kv_plen_no_pid.jsonl", '{"output_len": 5, "prompt_len": 100, "prefix_len": 10}\n',
     ("prefix_len 10 needs a prefix_id",), "prefix_id"),
    ("kv_unique.jsonl", '{"output_len": 5, "prompt_len": 100, "prefix_id": 1, '
     '"prefix_len": 10, "unique_len": 80}\n', ("unique_len", "80", "= 90"), "unique_len"),
    ("kv_arrival.jsonl", '{"output_len": 5, "prompt_len": 10, "arrival": "x"}\n',
     ("arrival", '"x"'), "arrival"),
    ("kv_dup.jsonl", '{"id": "a", "output_len": 5, "prompt_len": 10}\n' * 2,
     (":2:", "id 'a'", "line 1", "unique"), "id"),
    ("kv_bad_json.jsonl", '{"output_len": 5, "prompt_len": 10}\n{bad\n',
     (":2:", "not valid JSON"), None),
    ("az_zero.csv", AZ_HEAD + "2023-11-16 18:15:46.6805900,0,0\n",
     (":2:", "ContextTokens", '"0"', ">= 1"), "ContextTokens"),
    ("az_neg.csv", AZ_HEAD + "2023-11-16 18:15:46.6805900,-100,10\n",
     ("ContextTokens", '"-100"'), "ContextTokens"),
    ("az_neg_out.csv", AZ_HEAD + "2023-11-16 18:15:46.6805900,100,-3\n",
     ("GeneratedTokens", '"-3"', ">= 0"), "GeneratedTokens"),
    ("az_float.csv", AZ_HEAD + "2023-11-16 18:15:46.6805900,10.5,3\n",
     ("ContextTokens", '"10.5"', "integer"), "ContextTokens"),
    ("az_badts.csv", AZ_HEAD + "yesterday,10,10\n", (":2:", "TIMESTAMP", '"yesterday"',
                                                     "ISO 8601"), "TIMESTAMP"),
    ("az_short.csv", AZ_HEAD + "2023-11-16 18:15:46.6805900,10\n",
     (":2:", "2 fields", "header has 3"), None),
]


@pytest.mark.parametrize("name,content,needles,field", BAD_ROWS,
                         ids=[c[0] for c in BAD_ROWS])
def test_bad_rows_are_one_line_errors(capsys, tmp_path, name, content, needles, field):
    p = tmp_path / name
    p.write_text(content)
    e = assert_one_line_error(capsys, sim(p), f"{p}:" if ":" in needles[0] else str(p),
                              *needles, field=field)
    assert e["type"] == "ConfigError" and e["trace"] == str(p)
    if needles[0].startswith(":"):
        assert e["line"] == int(needles[0].strip(":"))


def test_job_refuses_an_empty_prompt():
    """A TraceRequest built by hand (not by a reader) with no prompt token cannot reach
    allocate_slots (which requires num_new_tokens > 0)."""
    with pytest.raises(ConfigError, match="prompt_len must be >= 1"):
        Job(TraceRequest("r", 0.0, 0, 5, 7))
    with pytest.raises(ConfigError, match="output_len"):
        Job(TraceRequest("r", 0.0, 3, -1, 7, token_ids=[1, 2, 3]))


# ---- 3: Azure timestamps and header -------------------------------------------------
def test_azure_naive_and_aware_timestamps_mix_as_utc(tmp_path):
    p = tmp_path / "tz.csv"
    p.write_text(AZ_HEAD + "2023-11-16 18:15:46+00:00,100,10\n"
                 "2023-11-16 18:15:47,100,10\n"          # naive = UTC: +1 s
                 "2023-11-16 19:15:48.5+01:00,100,10\n"  # 18:15:48.5 UTC: +2.5 s
                 "2023-11-16T18:15:49Z,100,10\n")        # +3 s
    reqs = read_azure(p)
    assert [r.arrival_ms for r in reqs] == pytest.approx([0.0, 1000.0, 2500.0, 3000.0])


def test_azure_timestamps_going_back_are_an_error(capsys, tmp_path):
    p = tmp_path / "back.csv"
    p.write_text(AZ_HEAD + "2023-11-16 18:15:47,100,10\n2023-11-16 18:15:46,100,10\n")
    assert_one_line_error(capsys, sim(p), f"{p}:3:", "TIMESTAMP", "line 2",
                          field="TIMESTAMP")


def test_azure_without_header_names_the_missing_columns(capsys, tmp_path):
    p = tmp_path / "nohdr.csv"
    p.write_text(AZ_ROW * 3)
    assert_one_line_error(capsys, sim(p), f"{p}:1:", "TIMESTAMP", "ContextTokens",
                          "GeneratedTokens", "header", field="header")
    empty = tmp_path / "empty.csv"
    empty.write_text("")
    assert_one_line_error(capsys, sim(empty), "empty", "TIMESTAMP,ContextTokens,"
                          "GeneratedTokens", field="header")


def test_azure_header_with_bom_and_extra_columns_reads(tmp_path):
    p = tmp_path / "bom.csv"
    p.write_bytes(("\ufeffTIMESTAMP,Extra,ContextTokens,GeneratedTokens\n"
                   "2023-11-16 18:15:46.6805900,x,100,10\n").encode())
    (r,) = read_trace(p)
    assert (r.prompt_len, r.output_len) == (100, 10)


def test_empty_trace_is_an_error(capsys, tmp_path):
    p = tmp_path / "blank.jsonl"
    p.write_text("\n\n")
    assert_one_line_error(capsys, sim(p), "no requests")


# ---- 4: gzip, encoding, missing file ------------------------------------------------
def test_gz_that_is_not_gzip(capsys, tmp_path):
    p = tmp_path / "t.jsonl.gz"
    p.write_text(MC_OK)
    assert_one_line_error(capsys, sim(p), str(p), "not gzip-compressed", field="trace")


def test_truncated_gzip(capsys, tmp_path):
    data = gzip.compress((MC_OK * 200).encode())
    p = tmp_path / "t.jsonl.gz"
    p.write_bytes(data[: len(data) // 2])
    assert_one_line_error(capsys, sim(p), str(p), "truncated gzip", field="trace")


def test_gzip_is_read_by_its_magic_bytes(tmp_path):
    p = tmp_path / "t.jsonl"  # gzip data without the .gz name
    p.write_bytes(gzip.compress(MC_OK.encode()))
    (r,) = read_trace(p)
    assert r.prompt_len == 1000 and r.hash_ids == [1, 2]


@pytest.mark.parametrize("name", ["bin.jsonl", "bin.csv", "bin.jsonl.gz"])
def test_non_utf8_trace(capsys, tmp_path, name):
    raw = MC_OK.encode() + b'{"timestamp": 1, "x": "\xff\xfe"}\n'
    if name.startswith("bin.csv"):
        raw = AZ_HEAD.encode() + b"2023-11-16 18:15:46,1\xe9,1\n"
    p = tmp_path / name
    p.write_bytes(gzip.compress(raw) if name.endswith(".gz") else raw)
    assert_one_line_error(capsys, sim(p), f"{p}:2:", "not UTF-8", field="trace")


def test_missing_trace_and_folder_as_trace(capsys, tmp_path):
    assert_one_line_error(capsys, sim(tmp_path / "none.jsonl"), "does not exist",
                          field="trace")
    assert_one_line_error(capsys, sim(tmp_path), "is a directory", field="trace")


def test_first_line_neither_json_nor_csv(capsys, tmp_path):
    p = tmp_path / "t.txt"
    p.write_text("hello\n")
    assert_one_line_error(capsys, sim(p), "neither JSON", "--trace-format",
                          field="trace_format")


# ---- 5: --plot ------------------------------------------------------------------------
def _no_replay(monkeypatch):
    """Make planning or replaying fail the test: the checks must come first."""
    replay_mod = sys.modules["kvcore.sim.replay"]  # kvcore.sim.replay is also a function

    def boom(*a, **k):
        raise AssertionError("planned or replayed before checking --plot")

    monkeypatch.setattr(kvcore, "plan_model", boom)
    monkeypatch.setattr(replay_mod, "replay", boom)


def test_plot_into_a_missing_folder_fails_before_replaying(capsys, tmp_path, monkeypatch):
    pytest.importorskip("matplotlib")
    p = tmp_path / "t.jsonl"
    p.write_text(MC_OK)
    _no_replay(monkeypatch)
    bad = tmp_path / "nonexistent" / "dir" / "x.png"
    assert_one_line_error(capsys, sim(p, "--plot", str(bad)), "does not exist",
                          str(bad.parent), field="plot")
    assert_one_line_error(capsys, sim(p, "--plot", str(tmp_path)), "is a folder",
                          field="plot")
    assert_one_line_error(capsys, sim(p, "--plot", str(tmp_path / "x.nosuchfmt")),
                          ".nosuchfmt", ".png", field="plot")


def test_plot_without_matplotlib_names_the_install(capsys, tmp_path, monkeypatch):
    p = tmp_path / "t.jsonl"
    p.write_text(MC_OK)
    _no_replay(monkeypatch)
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import raises ImportError
    monkeypatch.setitem(sys.modules, "matplotlib.pyplot", None)
    e = assert_one_line_error(capsys, sim(p, "--plot", str(tmp_path / "x.png")),
                              "pip install matplotlib", "kvcore[plot]", field="plot")
    assert e["value"] == "matplotlib"


# ---- 6: budgets -------------------------------------------------------------------
@pytest.fixture
def plan_spy(monkeypatch):
    calls = []
    real = kvcore.plan_model

    def spy(*a, **k):
        calls.append(k)
        return real(*a, **k)

    monkeypatch.setattr(kvcore, "plan_model", spy)
    return calls


def test_default_budget_is_named_with_the_flags_that_fix_it(capsys, tmp_path, plan_spy):
    p = tmp_path / "t.jsonl"
    p.write_text('{"output_len": 5, "prompt_len": 100}\n')
    # llama-3.1-8b: 131072 tokens x 128 KiB = 16 GiB = 8192 blocks of 2 MiB, plus the
    # null block: 16 GiB + 2 MiB -> 16.01 GiB rounded up; 16 GiB holds 8192 - 1 usable
    # blocks = 131056 tokens.
    # (nothing sized: the run caps max_model_len at 131056 and says so, TESTER1 19;
    # an explicit --max-model-len beyond the default budget is the error)
    e = assert_one_line_error(
        capsys, ["simulate", "llama-3.1-8b", "--trace", str(p), "--max-model-len",
                 "131072"],
        "default KV-cache budget of 16 GiB", "131072",
        "--kv-cache-memory 16.01GiB", "--max-model-len 131056", field="kv_cache_memory")
    assert e["type"] == "NotEnoughMemoryError"
    assert e["min_kv_cache_memory_bytes"] == (8192 + 1) * 2 * 1024 * 1024
    # (the first plan of the run; kvcore.sim.modes' layout probe, a 1 TiB plan cached
    # per model, may come before it)
    assert [c for c in plan_spy if c["kv_cache_memory_bytes"] != 1 << 40][0][
        "kv_cache_memory_bytes"] == 16 << 30
    # an explicit budget is named as given
    assert_one_line_error(
        capsys, ["simulate", "llama-3.1-8b", "--trace", str(p), "--kv-cache-memory",
                 "1GiB"], "--kv-cache-memory 1GiB", "--max-model-len 8176",
        field="kv_cache_memory")  # 1 GiB = 512 blocks, 511 usable x 16 = 8176


def test_num_blocks_is_the_override_and_the_message_names_it(capsys, tmp_path, plan_spy):
    p = tmp_path / "t.jsonl"
    p.write_text('{"output_len": 5, "prompt_len": 100}\n')
    argv = ["simulate", "llama-3.1-8b", "--trace", str(p), "--num-blocks", "2"]
    e = assert_one_line_error(capsys, argv, "--num-blocks 2", "--num-blocks 8193",
                              "--max-model-len 16", field="num_blocks")
    assert "budget" not in e["message"] and "16 GiB" not in e["message"]
    assert plan_spy[0]["num_gpu_blocks_override"] == 2
    assert plan_spy[0]["kv_cache_memory_bytes"] is None
    # enough blocks: runs (8193 blocks hold one 131072-token request)
    code, out, err = run_cli(capsys, [*argv[:-1], "8193", "--json"])
    assert code == 0 and json.loads(out)["num_blocks"] == 8193


@pytest.mark.parametrize("flag,value,field", [("--num-blocks", "1", "num_blocks"),
                                              ("--num-blocks", "0", "num_blocks"),
                                              ("--limit", "-1", "limit"),
                                              ("--max-num-seqs", "0", "max_num_seqs")])
def test_bad_numeric_options(capsys, tmp_path, flag, value, field):
    p = tmp_path / "t.jsonl"
    p.write_text(MC_OK)
    argv = ["simulate", "qwen3-8b", "--trace", str(p), "--max-model-len", "8192", flag,
            value]
    assert_one_line_error(capsys, argv, field, value, field=field)


# ---- 7: the parser class --------------------------------------------------------------
def test_simulate_parser_is_of_the_cli_parser_class():
    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    assert type(sub.choices["simulate"]) is type(parser)


# ---- fuzz: any row either reads into a valid request or is a one-line ConfigError ----
JSONISH = st.one_of(st.none(), st.booleans(), st.integers(-3, 1200),
                    st.floats(allow_nan=True, allow_infinity=True),
                    st.text(string.printable, max_size=3),
                    st.lists(st.integers(-2, 4), max_size=4))


def _check_or_error(path):
    try:
        reqs = read_trace(path)
    except ConfigError as exc:
        assert "\n" not in exc.message and exc.message.startswith(str(path))
        json.dumps(exc.to_dict())  # the --json form serializes
        return
    for r in reqs:
        assert r.prompt_len >= 1 and r.output_len >= 0
        assert len(r.prompt_token_ids()) == r.prompt_len


FUZZ = settings(max_examples=60, deadline=None,
                suppress_health_check=[HealthCheck.function_scoped_fixture])


@FUZZ
@given(ts=JSONISH, n=JSONISH, o=JSONISH, ids=JSONISH)
def test_fuzz_mooncake_rows(tmp_path, ts, n, o, ids):
    p = tmp_path / "f.jsonl"
    p.write_text(json.dumps({"timestamp": ts, "input_length": n, "output_length": o,
                             "hash_ids": ids}) + "\n")
    _check_or_error(p)


@FUZZ
@given(fields=st.dictionaries(st.sampled_from(["output_len", "prompt_len", "prefix_id",
                                               "prefix_len", "prompt_token_ids", "id",
                                               "arrival", "unique_len"]), JSONISH))
def test_fuzz_kvcore_rows(tmp_path, fields):
    p = tmp_path / "f.jsonl"
    p.write_text(json.dumps(fields) + "\n")
    _check_or_error(p)


CSV_CELL = st.text(string.printable.replace("\n", "").replace("\r", ""), max_size=8)


@FUZZ
@given(cells=st.lists(st.lists(st.one_of(CSV_CELL, st.integers(-3, 50).map(str)),
                               min_size=0, max_size=4), max_size=3))
def test_fuzz_azure_rows(tmp_path, cells):
    p = tmp_path / "f.csv"
    p.write_text(AZ_HEAD + "".join(",".join(r) + "\n" for r in cells))
    _check_or_error(p)


@FUZZ
@given(raw=st.binary(max_size=120), suffix=st.sampled_from([".jsonl", ".csv",
                                                            ".jsonl.gz"]))
def test_fuzz_bytes(tmp_path, raw, suffix):
    p = tmp_path / f"f{suffix}"
    p.write_bytes(raw)
    _check_or_error(p)
    if suffix == ".jsonl.gz" and raw:  # and cut gzip streams
        data = gzip.compress(raw)
        p.write_bytes(data[: len(data) * 2 // 3])
        _check_or_error(p)


def test_readers_accept_the_reference_rows(tmp_path):
    """The formats' own examples still read (no over-strict check)."""
    p = tmp_path / "mc.jsonl"
    p.write_text('{"timestamp": 0, "input_length": 6758, "output_length": 500, '
                 '"hash_ids": [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13]}\n')
    (r,) = read_trace(p)  # ceil(6758/512) = 14 ids
    assert (r.prompt_len, r.output_len, len(r.hash_ids)) == (6758, 500, 14)
    p = tmp_path / "kv.jsonl"
    p.write_text('{"id": "req-00002", "prompt_len": 2901, "prefix_id": null, '
                 '"prefix_len": 0, "unique_len": 2901, "output_len": 64}\n'
                 '{"id": 7, "prompt_token_ids": [5, 6], "prompt_len": 2, "output_len": 0}\n')
    a, b = read_trace(p)
    assert (a.request_id, a.prompt_len, b.request_id, b.prompt_len) == \
        ("req-00002", 2901, "7", 2)
    assert Path(p).exists()
