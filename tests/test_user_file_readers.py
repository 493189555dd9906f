"""Every reader of a user's file: JSON nested too deeply and files without end
(tester A, F4 and F5).

The rules: bad input is one line, exit 2, naming the file ("not valid JSON (nested too
deeply)"), never the CLI's last resort "this is a kvcore bug" (a RecursionError out of
``json.loads``: traces, ShareGPT datasets); no reader takes a file into memory without
a bound (``--trace /dev/zero`` filled the machine's RAM).

Generated inputs (hypothesis, derandomized): nesting depths from just past the
interpreter's recursion limit to 200,000, of lists or objects, as the whole file, as the
second line of a JSONL file or as a field of an otherwise valid row, fed to every
reader: ``simulate --trace`` / ``plan --workload`` / ``tune --trace``, ShareGPT
``--dataset-path``, ``calibrate`` results and ``--efficiency``, ``plan --specs``, a
config.json as MODEL, the flags that take JSON text (``--speculative-config``,
``--random-range-ratio``, dotted ``--speculative-config.method``), and the Python
readers (``read_trace``, ``read_bench_results``, ``load_measurements``,
``kvcore.routing.vectors.load``, ``read_json_file``).  ``/dev/zero`` goes to every path
reader with the byte caps lowered to 1 MiB (the same code path as the real 0.5-1 GiB).
"""

from __future__ import annotations

import importlib.util
import json
import os
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kvcore_cli_support import assert_clean_error, run_cli

from kvcore.errors import ConfigError

DATA = Path(__file__).parent / "data"
TOKENIZER = DATA / "datasets" / "tiny_tokenizer"
RESULT = DATA / "bench_results" / "do-solutions-phase0" / "rate-1.0.json"
ROW = '{"prompt_len": 64, "output_len": 4}'


def _nested(depth: int, kind: str) -> str:
    return ("[" * depth + "]" * depth) if kind == "list" else \
        ('{"a":' * depth + "1" + "}" * depth)


def _too_deep(depth: int, kind: str) -> bool:
    """Whether this interpreter's JSON parser refuses the nesting (RecursionError)."""
    try:
        json.loads(_nested(depth, kind))
    except RecursionError:
        return True
    return False


def _text(depth: int, kind: str, where: str, base: str = ROW) -> str:
    deep = _nested(depth, kind)
    if where == "whole":
        return deep + "\n"
    if where == "second line":
        return base + "\n" + deep + "\n"
    if base == "{}":
        return '{"x": ' + deep + "}\n"
    return base[:-1] + ', "x": ' + deep + "}\n"  # a field of a valid row


#: (name, argv with FILE for the file, the file's base content)
CLI_READERS = [
    ("simulate --trace", ["simulate", "llama-3.1-8b", "--trace", "FILE", "--num-blocks",
                          "4000"], ROW),
    ("plan --workload", ["plan", "llama-3.1-8b", "--workload", "FILE", "--kv-cache-memory",
                         "20GiB"], ROW),
    ("tune --trace", ["tune", "llama-3.1-8b", "--gpu", "H100", "--trace", "FILE", "--tp",
                      "1", "--backend", "serial"], ROW),
    ("sharegpt", ["simulate", "llama-3.1-8b", "--dataset", "sharegpt", "--dataset-path",
                  "FILE", "--tokenizer", str(TOKENIZER), "--num-prompts", "2"], "[]"),
    ("calibrate result", ["calibrate", "llama-3.1-8b", "FILE", "--gpu", "H200",
                          "--rounds", "1", "--terms", "step_s"],
     RESULT.read_text().strip()),
    ("simulate --efficiency", ["simulate", "llama-3.1-8b", "--dataset", "random",
                               "--num-prompts", "2", "--gpu", "H100", "--efficiency", "FILE"],
     "{}"),
    ("plan --specs", ["plan", "--specs", "FILE"], "{}"),
    ("plan MODEL", ["plan", "FILE", "--kv-cache-memory", "20GiB"], "{}"),
]

#: from just past the Python recursion limit (the C parser's own limit may be higher: such
#: files parse) to far past any
#: the readers of one JSON value per line (JSONL traces, --append-result files)
JSONL = {"simulate --trace", "plan --workload", "tune --trace", "calibrate result"}
depths = st.one_of(st.integers(sys.getrecursionlimit() + 100, 200_000),
                   st.sampled_from([100_000, 200_000]))


@pytest.mark.parametrize("name, argv, base", CLI_READERS, ids=[r[0] for r in CLI_READERS])
@settings(max_examples=6, deadline=None, derandomize=True,
          suppress_health_check=list(HealthCheck))
@given(depth=depths, kind=st.sampled_from(["list", "object"]),
       where=st.sampled_from(["whole", "second line", "field"]), as_json=st.booleans())
def test_a_deeply_nested_file_is_one_line(name: str, argv: list[str], base: str,
                                          depth: int, kind: str, where: str,
                                          as_json: bool, tmp_path_factory: Any,
                                          capsys: Any) -> None:
    if name == "sharegpt" and importlib.util.find_spec("tokenizers") is None and \
            importlib.util.find_spec("transformers") is None:
        pytest.skip("ShareGPT counts tokens with a tokenizer (not in the core-only venv)")
    if not base.startswith("{"):
        where = "whole"  # a JSON list file: the nesting is the file
    if where == "second line" and name not in JSONL:
        where = "field"  # one JSON document: a second line is "Extra data"
    path = tmp_path_factory.mktemp("deep") / ("trace.jsonl" if "trace" in name or
                                              "workload" in name else "f.json")
    path.write_text(_text(depth, kind, where, base))
    args = [str(path) if a == "FILE" else a for a in argv] + (["--json"] if as_json else [])
    rc, out, err = run_cli(capsys, args)
    # past the parser's limit: "nested too deeply"; within it, the reader's own verdict
    # (a run, or its one-line error), never the CLI's last resort
    deep = _too_deep(depth, kind)
    assert "kvcore bug" not in out + err and "Traceback" not in out + err, out + err
    if rc == 0 and not deep:
        return
    if as_json:
        assert rc == 2, out + err
        got = json.loads(out)["error"]
        assert not deep or "nested too deeply" in got["message"], got
    else:
        assert_clean_error(rc, err, *([str(path), "nested too deeply"] if deep else []))


@pytest.mark.parametrize("argv", [
    ["--speculative-config", "DEEP"], ["--random-range-ratio", "DEEP"],
    ["--speculative-config.method", "DEEP"]], ids=["speculative", "range-ratio", "dotted"])
@settings(max_examples=4, deadline=None, derandomize=True,
          suppress_health_check=list(HealthCheck))
@given(depth=depths, kind=st.sampled_from(["list", "object"]))
def test_a_deeply_nested_flag_is_one_line(argv: list[str], depth: int, kind: str,
                                          capsys: Any) -> None:
    deep = _nested(depth, kind)
    rc, _, err = run_cli(capsys, ["simulate", "llama-3.1-8b", "--dataset", "random",
                                  "--num-prompts", "2",
                                  *[deep if a == "DEEP" else a for a in argv]])
    assert_clean_error(rc, err)


def _api_readers() -> list[tuple[str, Any]]:
    from kvcore.models.config import read_json_file
    from kvcore.routing.vectors import load as load_vector
    from kvcore.sim.accuracy import load_measurements
    from kvcore.sim.calibrate import load_efficiency, read_bench_results
    from kvcore.sim.traces import read_trace

    return [("read_trace", read_trace), ("read_bench_results", read_bench_results),
            ("load_measurements", load_measurements), ("vectors.load", load_vector),
            ("load_efficiency", load_efficiency), ("read_json_file", read_json_file)]


API_READERS = _api_readers()


@pytest.mark.parametrize("name, read", API_READERS, ids=[r[0] for r in API_READERS])
@settings(max_examples=5, deadline=None, derandomize=True,
          suppress_health_check=list(HealthCheck))
@given(depth=depths, kind=st.sampled_from(["list", "object"]))
def test_the_python_readers_raise_config_error(name: str, read: Any, depth: int,
                                               kind: str, tmp_path_factory: Any) -> None:
    path = tmp_path_factory.mktemp("api") / "f.json"
    path.write_text(_nested(depth, kind))
    if _too_deep(depth, kind):
        with pytest.raises(ConfigError, match="nested too deeply"):
            read(path)
    else:  # parsed: the reader's own verdict, a value or a ConfigError
        try:
            read(path)
        except ConfigError:
            pass


# ---- F5: files without end ----------------------------------------------------------

@pytest.fixture
def small_caps(monkeypatch: Any) -> None:
    """The byte caps at 1 MiB (the code path of the real ones, without reading 1 GiB)."""
    import kvcore.models.config as config
    import kvcore.sim.calibrate as calibrate
    import kvcore.userfiles as userfiles

    for mod, names in ((userfiles, ("MAX_FILE_BYTES", "MAX_DATA_BYTES", "MAX_LINE_BYTES")),
                       (calibrate, ("MAX_FILE_BYTES",)), (config, ("MAX_JSON_BYTES",))):
        for n in names:
            monkeypatch.setattr(mod, n, 1 << 20)


ZERO_READERS = CLI_READERS + [
    ("burstgpt", ["simulate", "llama-3.1-8b", "--dataset", "burstgpt", "--dataset-path",
                  "FILE", "--num-prompts", "2"], ""),
    ("tokenizer", ["simulate", "llama-3.1-8b", "--dataset", "sharegpt", "--dataset-path",
                   str(DATA / "datasets" / "sharegpt_tiny.json"), "--tokenizer", "FILE",
                   "--num-prompts", "2"], ""),
]


@pytest.mark.skipif(not os.path.exists("/dev/zero"), reason="no /dev/zero")
@pytest.mark.parametrize("name, argv, base", ZERO_READERS, ids=[r[0] for r in ZERO_READERS])
def test_dev_zero_is_refused_in_one_line(name: str, argv: list[str], base: str,
                                         small_caps: None, capsys: Any) -> None:
    if name == "sharegpt" and importlib.util.find_spec("tokenizers") is None and \
            importlib.util.find_spec("transformers") is None:
        pytest.skip("ShareGPT counts tokens with a tokenizer (not in the core-only venv)")
    from kvcore_watchdog import cpu_watchdog

    args = ["/dev/zero" if a == "FILE" else a for a in argv]
    with cpu_watchdog(60, f"kvcore {name} /dev/zero"):
        rc, _, err = run_cli(capsys, args)
    assert_clean_error(rc, err, "/dev/zero")


def test_a_trace_line_without_end_is_refused(small_caps: None, tmp_path: Path,
                                             capsys: Any) -> None:
    path = tmp_path / "t.jsonl"
    path.write_text(ROW + "\n" + " " * (2 << 20))  # a 2 MiB line past the 1 MiB cap
    rc, _, err = run_cli(capsys, ["simulate", "llama-3.1-8b", "--trace", str(path),
                                  "--num-blocks", "4000"])
    assert_clean_error(rc, err, f"{path}:2")


def test_the_caps_leave_real_files_alone(tmp_path: Path) -> None:
    """Real files are far below the caps: the tiny ShareGPT file and a result read."""
    from kvcore.sim.calibrate import read_bench_results
    from kvcore.userfiles import MAX_DATA_BYTES, MAX_FILE_BYTES

    assert MAX_DATA_BYTES >= 642 << 20  # ShareGPT_V3_unfiltered_cleaned_split.json
    assert MAX_FILE_BYTES >= 30 << 20   # a --save-detailed result of 100,000 requests
    assert read_bench_results(RESULT)[0]["completed"] == 300
