"""Every ``--json`` output is strict JSON (tester A, F2).

The rule: what kvcore prints under ``--json`` (and writes with ``--save-result``) is
RFC 8259 JSON; a non-finite figure is the string ``"inf"`` / ``"-inf"`` / ``"nan"``, as
``vllm bench serve`` writes ``"request_rate": "inf"``, never the bare ``Infinity`` that
strict parsers refuse (``--burstiness inf`` printed ``"burstiness": Infinity``).

Generated flag values (hypothesis, derandomized) for the number flags of simulate and
tune (``inf``, huge and tiny numbers, ordinary ones), the other commands' --json as
they are; every output is parsed with a parser that refuses the bare constants
(tests/fuzz/fuzz_support.py ``strict_loads``, also used by the fuzz oracle for every
fuzz test).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from fuzz_support import check, examples, strict_loads
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

SIM = ["simulate", "llama-3.1-8b", "--dataset", "random", "--num-prompts", "6",
       "--random-input-len", "64", "--random-output-len", "4", "--num-blocks", "3000",
       "--max-model-len", "4096"]
TUNE = ["tune", "llama-3.1-8b", "--gpu", "H100", "--dataset", "random", "--num-prompts",
        "5", "--tp", "1", "--kv-cache-dtype", "auto", "--max-num-seqs", "64",
        "--max-num-batched-tokens", "2048", "--backend", "serial", "--fast"]
numbers = st.one_of(st.sampled_from(["inf", "Infinity", "1e308", "1e-300", "0.5", "1", "5",
                                     "100"]),
                    st.floats(min_value=1e-6, max_value=1e6).map(repr))


@settings(max_examples=examples(25), deadline=None, derandomize=True,
          suppress_health_check=list(HealthCheck))
@given(command=st.sampled_from(["simulate", "tune"]), rate=numbers, burst=numbers,
       conc=st.one_of(st.none(), st.sampled_from(["1", "4"])))
def test_the_json_output_is_strict(command: str, rate: str, burst: str,
                                   conc: str | None) -> None:
    argv = [*(SIM if command == "simulate" else TUNE), "--request-rate", rate,
            "--burstiness", burst, "--json"]
    if conc:
        argv += ["--max-concurrency", conc]
    check(f"{command} strict json", argv)  # the oracle parses with strict_loads


@pytest.mark.parametrize("argv", [["gpus", "--json"], ["models", "--json"],
                                  ["plugins", "--json"],
                                  ["plan", "llama-3.1-8b", "--gpu", "H100", "--json"],
                                  ["plan", "llama-3.1-8b", "--gpu", "H100,A100", "--json"]],
                         ids=lambda a: " ".join(a[:3]))
def test_the_other_commands_print_strict_json(argv: list[str]) -> None:
    o = check("strict json", argv)
    strict_loads(o.out)


def test_save_result_is_strict(tmp_path: Path) -> None:
    check("strict json", [*SIM, "--request-rate", "inf", "--burstiness", "inf",
                          "--save-result", "--result-dir", str(tmp_path),
                          "--result-filename", "r.json"])
    data = strict_loads((tmp_path / "r.json").read_text())
    assert data["request_rate"] == "inf"
    assert json.loads(json.dumps(data)) == data


def test_inf_is_written_as_vllm_writes_it() -> None:
    from kvcore.userfiles import dumps_json

    got: Any = strict_loads(dumps_json({"a": float("inf"), "b": [float("-inf"),
                                                               float("nan"), 1.5]}))
    assert got == {"a": "inf", "b": ["-inf", "nan", 1.5]}
