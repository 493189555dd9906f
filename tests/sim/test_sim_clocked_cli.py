"""``kvcore simulate`` with the clock: the issue's done-when commands, the figures
``vllm bench serve --save-result`` names, --plot, and bad input to the new flags (one
line, exit 2; generated cases)."""

from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kvcore.cli import main as cli_main

VLLM_KEYS = ["duration", "completed", "total_input_tokens", "total_output_tokens",
             "request_throughput", "output_throughput", "total_token_throughput",
             "request_goodput"] + [f"{s}_{m}_ms" for m in ("ttft", "tpot", "itl", "e2el")
                                   for s in ("mean", "median", "std", "p99")]
KVCORE_KEYS = ["kv_usage", "prefix_hit_ratio", "preemptions", "steps", "mean_kv_usage",
               "peak_kv_usage", "time_model"]
DONE_WHEN = ["simulate", "llama-3.1-8b", "--gpu", "H100", "--dataset", "random",
             "--random-input-len", "1024", "--random-output-len", "128", "--num-prompts",
             "500"]


def _json(capsys, argv):
    code = cli_main(argv)
    cap = capsys.readouterr()
    assert code == 0, cap.err
    return json.loads(cap.out)


@pytest.mark.parametrize("load", [["--max-concurrency", "64"], ["--request-rate", "10"]])
def test_done_when_commands(capsys, load):
    """The issue's commands; the first is the README's example (its 500 requests and
    512000 input tokens are asserted here)."""
    out = _json(capsys, [*DONE_WHEN, *load, "--json"])
    for k in VLLM_KEYS + KVCORE_KEYS:
        assert k in out, k
    assert out["completed"] == 500 and out["failed"] == 0
    assert out["total_input_tokens"] == 500 * 1024  # range ratio 0: every prompt 1024
    assert out["total_output_tokens"] == 500 * 128
    assert out["gpu"] == "H100-SXM" and out["max_num_batched_tokens"] == 8192
    assert "placeholder" not in out["time_model"]  # --gpu: the roofline model
    assert out["output_throughput"] == pytest.approx(64000 / out["duration"])
    if "--request-rate" in load:
        # open loop at 10 req/s: the last request is sent at 500 / 10 = 50 s
        assert out["duration"] > 50 and out["request_throughput"] < 10
    else:
        assert out["max_concurrency"] == 64


def test_text_summary_and_plot(capsys, tmp_path):
    pytest.importorskip("matplotlib")
    png = tmp_path / "sim.png"
    code = cli_main(["simulate", "llama-3.1-8b", "--dataset", "random", "--num-prompts",
                     "40", "--random-input-len", "200", "--random-output-len", "20",
                     "--max-model-len", "4096", "--kv-cache-memory", "1GiB",
                     "--random-prefix-len", "100", "--request-rate", "20", "--goodput",
                     "ttft:50", "tpot:20", "--plot", str(png)])
    out = capsys.readouterr().out
    assert code == 0
    assert out.splitlines()[0] == "============ Serving Benchmark Result ============"
    assert "Request goodput (req/s):" in out and "Prefix-hit ratio (%):" in out
    assert "placeholder" in out  # the constant step-time model says what it is
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_trace_timestamps_drive_the_clock(capsys, tmp_path):
    # two requests 3 s apart in a kvcore JSONL trace (arrival in ms)
    p = tmp_path / "t.jsonl"
    p.write_text('{"prompt_len": 50, "output_len": 3, "arrival": 1000}\n'
                 '{"prompt_len": 50, "output_len": 3, "arrival": 4000}\n')
    out = _json(capsys, ["simulate", "llama-3.1-8b", "--trace", str(p), "--max-model-len",
                         "4096", "--num-blocks", "300", "--scheduler", "vllm", "--json"])
    # constant 10 ms steps: 3 steps each, the second request sent at 3 s
    assert out["completed"] == 2
    assert out["duration"] == pytest.approx(3.0 + 3 * 0.01)
    assert out["mean_ttft_ms"] == pytest.approx(10.0)


def test_bare_trace_keeps_the_replay(capsys, tmp_path):
    p = tmp_path / "t.jsonl"
    p.write_text('{"prompt_len": 50, "output_len": 3}\n')
    out = _json(capsys, ["simulate", "llama-3.1-8b", "--trace", str(p), "--max-model-len",
                         "4096", "--num-blocks", "300", "--json"])
    assert "peak_usage" in out and "mean_ttft_ms" not in out and out["max_num_seqs"] == 64


BASE = ["simulate", "llama-3.1-8b", "--dataset", "random", "--num-prompts", "3",
        "--random-input-len", "20", "--random-output-len", "3", "--max-model-len", "4096",
        "--num-blocks", "300"]


def _one_line_error(capsys, argv, field=None):
    code = cli_main(argv)
    cap = capsys.readouterr()
    assert code == 2, (cap.out, cap.err)
    assert "Traceback" not in cap.err
    lines = cap.err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("kvcore simulate: error: "), cap.err
    code = cli_main([*argv, "--json"])
    cap = capsys.readouterr()
    assert code == 2
    err = json.loads(cap.out)["error"]
    if field is not None:
        assert err.get("field") == field, err
    return lines[0]


@pytest.mark.parametrize("extra,needle", [
    (["--request-rate", "0"], "request_rate"), (["--request-rate", "nan"], "request_rate"),
    (["--burstiness", "-1"], "burstiness"), (["--max-concurrency", "0"], "max_concurrency"),
    (["--goodput", "ttft"], "KEY:VALUE"), (["--goodput", "foo:1"], "foo"),
    (["--random-range-ratio", "1"], "random_range_ratio"),
    (["--num-prompts", "0"], "num_prompts"), (["--gpu", "NoSuchGPU"], "NoSuchGPU"),
    (["--time-model", "nosuch"], "nosuch"), (["--trace", "x.jsonl"], "not both"),
    (["--gpu-memory-utilization", "0.9"], "--gpu"),
    (["--metric-percentiles", "101"], "metric_percentiles"),
    (["--metric-percentiles", "50,x"], "metric_percentiles")])
def test_bad_clock_flags(capsys, extra, needle):
    assert needle in _one_line_error(capsys, [*BASE, *extra])


def test_metric_percentiles_as_vllm_names_them(capsys):
    out = _json(capsys, [*BASE, "--metric-percentiles", "50,90,99.9", "--json"])
    for m in ("ttft", "tpot", "itl", "e2el"):
        assert {f"p50_{m}_ms", f"p90_{m}_ms", f"p99.9_{m}_ms"} <= set(out)
        assert f"p99_{m}_ms" not in out
        assert out[f"p50_{m}_ms"] == pytest.approx(out[f"median_{m}_ms"])


def test_burstiness_on_a_trace_needs_a_rate(capsys, tmp_path):
    p = tmp_path / "t.jsonl"
    p.write_text('{"prompt_len": 50, "output_len": 3}\n')
    line = _one_line_error(capsys, ["simulate", "llama-3.1-8b", "--trace", str(p),
                                    "--max-model-len", "4096", "--num-blocks", "300",
                                    "--burstiness", "2"], field="burstiness")
    assert "--request-rate" in line


TEXT = st.one_of(st.sampled_from(["0", "-1", "inf", "nan", "1e400", "", "1.5", "abc",
                                  "3", "ttft:", ":5", "tpot:1:2"]),
                 st.text("0123456789.-:eEinfa", max_size=6))
FLAGS = ["--request-rate", "--burstiness", "--max-concurrency", "--goodput",  # (not
         # --num-prompts: a generated 999999 would make a long run)
         "--random-range-ratio", "--random-input-len",
         "--random-prefix-len", "--long-prefill-token-threshold", "--seed",
         "--metric-percentiles"]


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                  HealthCheck.function_scoped_fixture])
@given(st.lists(st.tuples(st.sampled_from(FLAGS), TEXT), min_size=1, max_size=3))
def test_fuzz_clock_flags(capsys, pairs):
    """Any values: a run (exit 0, JSON figures) or one line and exit 2, never a
    traceback."""
    argv = [*BASE]
    for flag, value in pairs:
        argv += [flag, value] if not value.startswith("-") else [f"{flag}={value}"]
    code = cli_main([*argv, "--json"])
    cap = capsys.readouterr()
    assert "Traceback" not in cap.err and "Traceback" not in cap.out
    assert code in (0, 2), (argv, cap.err)
    obj = json.loads(cap.out)
    if code == 0:
        assert obj["completed"] + obj["failed"] <= obj["num_prompts"]
    else:
        assert set(obj) == {"error"}


DATA = __import__("pathlib").Path(__file__).parent / "data"


def test_mooncake_timestamps_are_the_arrivals(capsys):
    # the first 200 rows of the conversation trace span 72 s (row 200: timestamp 72000)
    out = _json(capsys, ["simulate", "llama-3.1-8b", "--trace",
                         str(DATA / "mooncake_conversation_trace.jsonl.gz"), "--limit",
                         "200", "--kv-cache-memory", "80GiB", "--max-model-len", "131072",
                         "--scheduler", "vllm", "--json"])
    assert out["completed"] == 200 and out["num_prompts"] == 200
    assert out["duration"] > 72.0
    assert out["request_rate"] is None  # the trace's own clock
    # conversations share prefixes; never above the slice's ideal (infinite cache at
    # 512-token granularity, 5.93 % for these 200 rows)
    assert 0.0 < out["prefix_hit_ratio"] <= 0.0593


def test_azure_with_a_rate_replaces_the_timestamps(capsys):
    out = _json(capsys, ["simulate", "llama-3.1-8b", "--trace",
                         str(DATA / "azure_code_head200.csv"), "--limit", "50",
                         "--kv-cache-memory", "40GiB", "--max-model-len", "32768",
                         "--request-rate", "5", "--seed", "1", "--json"])
    assert out["completed"] == 50 and out["request_rate"] == 5.0
    assert out["duration"] > 50 / 5  # the last request is sent at n / rate = 10 s
    assert out["prefix_hit_ratio"] == 0.0  # Azure prompts are unique


def test_make_time_model_uses_the_roofline_factory_when_present(monkeypatch):
    """The contract with kvcore.sim.timing: --gpu selects roofline_for(model_config,
    kv_cache_config, gpu=..., tensor_parallel_size=...) once it exists; --time-model
    names one; otherwise the constant placeholder, which the note calls one."""
    import argparse

    from kvcore.sim import command, timing

    args = argparse.Namespace(gpu="H100", time_model=None, tensor_parallel_size=2,
                              pipeline_parallel_size=1)
    calls = []

    def roofline_for(model_config, kv_cache_config, **kw):
        calls.append((model_config, kv_cache_config, kw))
        return timing.ConstantTimeModel(step_s=0.5)

    monkeypatch.delattr(timing, "roofline_for", raising=False)
    m = command.make_time_model(args, "MC", "KV")
    assert isinstance(m, timing.ConstantTimeModel) and m.step_s == command.PLACEHOLDER_STEP_S
    assert "placeholder" in command.time_model_note(args, m)
    monkeypatch.setattr(timing, "roofline_for", roofline_for, raising=False)
    m = command.make_time_model(args, "MC", "KV")
    assert m.step_s == 0.5
    assert calls == [("MC", "KV", {"gpu": "H100", "tensor_parallel_size": 2})]
    args.time_model = "constant"
    assert command.make_time_model(args, "MC", "KV") == timing.ConstantTimeModel()


def test_save_result_as_vllm_names_and_fills_it(capsys, tmp_path):
    out = _json(capsys, [*BASE, "--max-concurrency", "2", "--save-result", "--save-detailed",
                         "--result-dir", str(tmp_path / "res"), "--json"])
    (f,) = (tmp_path / "res").iterdir()
    # vLLM: {label}-{request_rate}qps-concurrency{N}-{model}-{date}.json
    assert f.name.startswith("kvcore-simulate-infqps-concurrency2-llama-3.1-8b-")
    assert out["result_file"] == str(f)
    saved = json.loads(f.read_text())
    assert saved["completed"] == 3 and saved["backend"] == "kvcore-simulate"
    assert saved["input_lens"] == [20, 20, 20] and saved["output_lens"] == [3, 3, 3]
    assert len(saved["itls"]) == 3 and all(len(x) == 2 for x in saved["itls"])
    assert saved["mean_ttft_ms"] == pytest.approx(out["mean_ttft_ms"])
    named = tmp_path / "mine.json"
    _json(capsys, [*BASE, "--save-result", "--result-filename", str(named), "--json"])
    assert "input_lens" not in json.loads(named.read_text())  # not --save-detailed


def test_save_result_into_a_file_path_fails_before_the_run(capsys, tmp_path):
    f = tmp_path / "afile"
    f.write_text("x")
    line = _one_line_error(capsys, [*BASE, "--save-result", "--result-dir", str(f)],
                           field="result_dir")
    assert "is a file" in line


# ---- --time-model NAME gets what it needs (tester 2, finding 12) -----------------------
# ``--time-model roofline`` crashed (TypeError: roofline_for() missing 'model_config'):
# make_time_model called every named factory with no options.

@pytest.mark.parametrize("gpu", [["--gpu", "H100"], ["--gpu", "A100-80GB"], []])
def test_time_model_roofline_by_name(capsys, gpu):
    """With --gpu, --time-model roofline is the default model (the same figures);
    without, one line, exit 2, naming --gpu."""
    argv = ["simulate", "llama-3.1-8b", "--dataset", "random", "--num-prompts", "4",
            "--random-input-len", "64", "--random-output-len", "4", "--max-model-len",
            "4096", *gpu]
    if not gpu:
        argv += ["--kv-cache-memory", "20GiB"]
    code = cli_main([*argv, "--time-model", "roofline", "--json"])
    cap = capsys.readouterr()
    if gpu:
        assert code == 0, cap.err
        named = json.loads(cap.out)
        assert cli_main([*argv, "--json"]) == 0
        default = json.loads(capsys.readouterr().out)
        for k in ("mean_ttft_ms", "mean_tpot_ms", "duration"):
            assert named[k] == pytest.approx(default[k], rel=1e-12), k
    else:
        assert code == 2  # under --json the one-line error is {"error": ...}
        err = json.loads(cap.out)["error"]
        assert err["type"] == "ConfigError" and "--gpu" in err["message"]
        assert err["field"] == "gpu"
        assert cli_main(argv + ["--time-model", "roofline"]) == 2
        plain = capsys.readouterr().err
        assert "--gpu" in plain and len(plain.strip().splitlines()) == 1


_OPTS = {"constant": ({"step_s", "token_s"}, set()),
         "roofline": (None, {"model_config", "gpu"})}


@settings(max_examples=40, deadline=None)
@given(st.sampled_from(sorted(_OPTS)), st.sets(st.sampled_from(
    ["model_config", "gpu", "step_s", "tensor_parallel_size", "bogus"]), max_size=4))
def test_load_time_model_options_are_config_errors(name, keys):
    """load_time_model's contract (its docstring): missing or unknown options are a
    ConfigError naming them, never a TypeError; with what the factory needs it builds.
    The option sets are the factories' documented signatures (ConstantTimeModel's
    fields; roofline_for's model_config and gpu, then any keyword)."""
    from kvcore.errors import ConfigError
    from kvcore.sim.timing import load_time_model, time_model_options

    accepted, required = _OPTS[name]
    got_acc, got_req = time_model_options(name)
    assert got_req == required and (got_acc is None) == (accepted is None)
    values = {"model_config": "llama-3.1-8b", "gpu": "H100", "step_s": 0.02,
              "tensor_parallel_size": 1, "bogus": 1}
    opts = {k: values[k] for k in keys}
    missing = required - keys
    unknown = keys - accepted if accepted is not None else set()
    if missing or unknown:
        with pytest.raises(ConfigError) as exc:
            load_time_model(name, **opts)
        for k in missing | unknown:
            assert k in str(exc.value)
    elif name == "roofline" and "bogus" in keys:
        # roofline_for takes any Efficiency field (step_s) and refuses the rest
        with pytest.raises(ConfigError, match="bogus"):
            load_time_model(name, **opts)
    else:
        assert callable(load_time_model(name, **opts).step_time)


def test_time_model_entry_point_gets_the_run_context_it_names(monkeypatch):
    """A kvcore.time_models entry point receives, by parameter name, the run's context
    it asks for (here model_config and gpu); one it cannot get is a ConfigError naming
    the flag."""
    import argparse

    from kvcore.errors import ConfigError
    from kvcore.sim import command, timing

    seen = {}

    def factory(model_config, gpu, step_s=0.5):
        seen.update(model_config=model_config, gpu=gpu)
        return timing.ConstantTimeModel(step_s=step_s)

    class EP:
        name, value = "mine", "pkg:factory"

        def load(self):
            return factory

    import importlib.metadata as md

    monkeypatch.setattr(md, "entry_points", lambda group=None: [EP()]
                        if group == timing.TIME_MODELS_ENTRY_POINT_GROUP else [])
    args = argparse.Namespace(gpu="H100", time_model="mine", tensor_parallel_size=1,
                              pipeline_parallel_size=1)
    m = command.make_time_model(args, "MC", "KV")
    assert m.step_s == 0.5 and seen == {"model_config": "MC", "gpu": "H100"}
    args.gpu = None
    with pytest.raises(ConfigError, match="--gpu"):
        command.make_time_model(args, "MC", "KV")
