"""``kvcore tune`` (issue 21 item 5): the search, its ranking and the vLLM command line.

Flag spellings are vLLM 0.32's (``vllm/engine/arg_utils.py``: ``--tensor-parallel-size``,
``--max-num-batched-tokens``, ``--max-num-seqs``, ``--block-size``,
``--kv-cache-dtype``, ``--mamba-cache-mode``, ``--no-enable-prefix-caching``,
``--max-model-len``, ``--pipeline-parallel-size``); where vLLM is importable the
printed command is parsed by vLLM's own EngineArgs parser.
"""

from __future__ import annotations

import json
import shlex

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kvcore.cli import main
from kvcore.errors import ConfigError
from kvcore.sim.tune import parse_goodput, vllm_command

VLLM_FLAGS = {"--tensor-parallel-size", "--max-num-batched-tokens", "--max-num-seqs",
              "--block-size", "--kv-cache-dtype", "--mamba-cache-mode",
              "--no-enable-prefix-caching", "--max-model-len", "--pipeline-parallel-size"}

ARGS = ["tune", "llama-3.1-8b", "--gpu", "H100", "--dataset", "random",
        "--random-input-len", "512", "--random-output-len", "32", "--num-prompts", "40",
        "--max-concurrency", "16", "--goodput", "ttft:400", "tpot:40", "--tp", "1,2",
        "--max-num-batched-tokens", "1024,4096", "--max-num-seqs", "16",
        "--kv-cache-dtype", "auto,fp8", "--max-model-len", "4096", "--backend", "serial",
        "--json"]


@pytest.fixture(scope="module")
def tuned(capsys_module=None):
    import io
    from contextlib import redirect_stdout

    buf = io.StringIO()
    with redirect_stdout(buf):
        rc = main(ARGS)
    assert rc == 0
    return json.loads(buf.getvalue())


def test_best_and_runner_ups(tuned):
    assert tuned["candidates"] == 2 * 2 * 1 * 2
    entries = [tuned["best"], *tuned["runner_ups"]]
    scores = [e["figures"]["goodput_per_gpu"] for e in entries]
    assert scores == sorted(scores, reverse=True)
    for e in entries:
        f = e["figures"]
        assert f["goodput_per_gpu"] == pytest.approx(f["request_goodput"] / f["num_gpus"])
        assert f["request_goodput"] <= f["request_throughput"] + 1e-9


def test_command_line_uses_vllm_flags(tuned):
    cmd = shlex.split(tuned["best"]["vllm_serve"])
    assert cmd[:3] == ["vllm", "serve", "meta-llama/Llama-3.1-8B"]  # the HF id (SOURCES.md)
    flags = {w for w in cmd if w.startswith("--")}
    assert flags <= VLLM_FLAGS
    c = tuned["best"]["config"]
    assert cmd[cmd.index("--max-num-seqs") + 1] == str(c["max_num_seqs"])
    assert cmd[cmd.index("--kv-cache-dtype") + 1] == c["kv_cache_dtype"]


def test_vllm_parses_the_command(tuned):
    pytest.importorskip("vllm.engine.arg_utils")
    from vllm.engine.arg_utils import EngineArgs
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    parser = EngineArgs.add_cli_args(FlexibleArgumentParser())
    cmd = shlex.split(tuned["best"]["vllm_serve"])
    ns = parser.parse_args(["--model", cmd[2], *cmd[3:]])
    c = tuned["best"]["config"]
    assert ns.max_num_seqs == c["max_num_seqs"]
    assert ns.tensor_parallel_size == c["tensor_parallel_size"]


def test_vllm_command_spelling():
    cfg = {"tensor_parallel_size": 2, "pipeline_parallel_size": 1,
           "max_num_batched_tokens": 8192, "max_num_seqs": 256, "block_size": 16,
           "kv_cache_dtype": "fp8", "mamba_cache_mode": "align",
           "enable_prefix_caching": False, "max_model_len": None}
    assert vllm_command("m", cfg) == (
        "vllm serve m --tensor-parallel-size 2 --max-num-batched-tokens 8192 "
        "--max-num-seqs 256 --block-size 16 --kv-cache-dtype fp8 --mamba-cache-mode align "
        "--no-enable-prefix-caching")


@settings(max_examples=40, deadline=None)
@given(st.dictionaries(st.sampled_from(["ttft", "tpot", "e2el"]),
                       st.floats(0.001, 1e6, allow_nan=False), min_size=1))
def test_goodput_round_trip(slo):
    assert parse_goodput([f"{k}:{v!r}" for k, v in slo.items()]) == pytest.approx(slo)


# (ttft:inf is not here: vLLM's check_goodput_args refuses only values < 0, and tune
# parses --goodput as kvcore simulate and vLLM do)
@pytest.mark.parametrize("item", ["ttft", "ttft:", "ttft:-1", "itl:50", "tpot:abc",
                                  "ttft:nan"])
def test_bad_goodput(item):
    with pytest.raises(ConfigError) as e:
        parse_goodput([item])
    assert e.value.extra["field"] == "goodput"


def test_cli_bad_input_one_line(capsys):
    rc = main(["tune", "llama-3.1-8b", "--gpu", "H100", "--dataset", "random",
               "--goodput", "ttft:abc"])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and "--goodput" in err[0]


def test_docs_example_runs(capsys):
    from pathlib import Path

    path = Path(__file__).resolve().parents[2] / "docs" / "SIM_TIMING.md"
    if not path.exists():  # the packaging checks run a copy of tests/ only
        pytest.skip("docs/ is not beside this copy of the tests")
    doc = path.read_text()
    line = next(ln for ln in doc.splitlines() if ln.startswith("kvcore tune "))
    argv = shlex.split(line)[1:] + ["--backend", "serial", "--json"]
    assert main(argv) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["best"]["vllm_serve"].startswith("vllm serve meta-llama/Llama-3.1-8B ")
