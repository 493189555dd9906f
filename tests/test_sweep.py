"""kvcore.deploy.sweep and the plan CLI's GPU flags: every combination, one table, CSV, JSON, PNG."""

from __future__ import annotations

import csv
import itertools
import json

import pytest
from kvcore_plugin_needs import skip_unless_served

from kvcore.cli import main
from kvcore.deploy.budget import compute_budget
from kvcore.deploy.sweep import sweep
from kvcore.errors import ConfigError

TPS, DTYPES, LENS = [1, 2, 4, 8], ["auto", "fp8", "nvfp4"], ["8K", "32K", "128K"]


def test_sweep_rows_cover_every_combination():
    rows = sweep("llama-3.1-8b", gpu="H100", tensor_parallel_size=TPS,
                 kv_cache_dtype=DTYPES, max_model_len=LENS)
    assert len(rows) == 36
    got = {(r["tensor_parallel_size"], r["kv_cache_dtype"], r["max_model_len"]) for r in rows}
    assert got == set(itertools.product(TPS, DTYPES, [8192, 32768, 131072]))
    for r in rows:
        b = compute_budget("llama-3.1-8b", gpu="H100", tensor_parallel_size=r[
            "tensor_parallel_size"])
        assert r["kv_cache_memory_bytes"] == b.kv_cache_memory_bytes
        assert r["weights_bytes"] == b.weights.per_rank_bytes and r["fits"] is True
    by = {(r["tensor_parallel_size"], r["kv_cache_dtype"], r["max_model_len"]): r
          for r in rows}
    # the same budget holds twice the blocks at fp8 (half the bytes per token)
    a, f = by[(1, "auto", 8192)], by[(1, "fp8", 8192)]
    assert abs(f["num_blocks"] / a["num_blocks"] - 2) < 0.01
    # concurrency falls as the length grows
    assert by[(2, "auto", 8192)]["max_concurrency"] > by[(2, "auto", 131072)][
        "max_concurrency"]


def test_a_row_that_does_not_fit_says_so_and_the_sweep_goes_on():
    rows = sweep("qwen3-8b", gpu=["L4", "H100"], max_model_len="40K")  # its longest
    l4, h100 = rows
    assert l4["fits"] is False and "does not fit" in l4["error"]
    assert l4["min_tensor_parallel_size_that_fits"] == 2
    assert h100["fits"] is True and h100["num_blocks"] > 0


def test_bad_axis_value_fails_before_planning():
    with pytest.raises(ConfigError, match="gpu"):
        sweep("qwen3-8b", gpu=["H100", "nope"])
    with pytest.raises(ConfigError, match="max_model_len"):
        sweep("qwen3-8b", max_model_len=["8K", "1.5K"])


def test_cli_sweep_prints_one_table_and_writes_csv_json_png(tmp_path, capsys):
    pytest.importorskip("matplotlib")
    csv_path, png = tmp_path / "sweep.csv", tmp_path / "sweep.png"
    argv = ["plan", "llama-3.1-8b", "--gpu", "H100-SXM", "--tp", "1,2,4,8",
            "--kv-cache-dtype", "auto,fp8,nvfp4", "--max-model-len", "8K,32K,128K"]
    assert main(argv + ["--csv", str(csv_path), "--plot", str(png)]) == 0
    out = capsys.readouterr().out
    assert out.count("36 plans") == 1 and out.count("┏") == 1  # one table
    for head in ("TP", "KV dtype", "max_model_len", "weights/rank", "KV budget/rank",
                 "blocks", "max concurrency", "longest context", "fits?"):
        assert head in out
    rows = list(csv.DictReader(csv_path.open()))
    assert len(rows) == 36 and {r["kv_cache_dtype"] for r in rows} == set(DTYPES)
    from PIL import Image

    with Image.open(png) as im:
        assert im.format == "PNG" and im.size[0] > 600 and im.size[1] > 400
    assert main(argv + ["--json"]) == 0
    plans = json.loads(capsys.readouterr().out)
    assert isinstance(plans, list) and len(plans) == 36
    assert all(p["gpu"]["name"] == "H100-SXM" and p["fits"] is True for p in plans)
    assert {"weights_bytes", "weights_bytes_total", "weights_source", "overhead_bytes",
            "gpu_memory_utilization", "min_tensor_parallel_size_that_fits",
            "kv_cache_memory_bytes", "num_blocks"} <= set(plans[0])


def test_cli_single_plan_on_a_gpu_json_and_text(capsys):
    assert main(["plan", "llama-3.1-8b", "--gpu", "h100", "--gpu-memory-utilization",
                 "0.95", "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert isinstance(d, dict) and d["fits"] is True
    assert d["gpu"] == {"name": "H100-SXM", "memory_bytes": 81559 << 20}
    assert d["gpu_memory_utilization"] == 0.95 and d["weights_source"] == "config"
    b = compute_budget("llama-3.1-8b", gpu="H100-SXM", gpu_memory_utilization=0.95)
    assert d["kv_cache_memory_bytes"] == b.kv_cache_memory_bytes
    assert main(["plan", "llama-3.1-8b", "--gpu-memory", "24GB", "--max-model-len",
                 "8K"]) == 0
    assert "fits: yes" in capsys.readouterr().out


def test_cli_does_not_fit_is_one_line_exit_2(capsys):
    skip_unless_served("deepseek-v3")
    assert main(["plan", "deepseek-v3", "--gpu", "H100-SXM", "--tp", "8"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "--tp 16" in err
    assert main(["plan", "deepseek-v3", "--gpu", "H100-SXM", "--tp", "8", "--json"]) == 2
    e = json.loads(capsys.readouterr().out)["error"]
    assert e["fits"] is False and e["min_tensor_parallel_size_that_fits"] == 16
    assert {"type", "message", "weights_bytes"} <= set(e)


def test_cli_kv_cache_memory_still_wins_and_checks_the_sum(capsys):
    assert main(["plan", "llama-3.1-8b", "--gpu", "H100", "--kv-cache-memory", "20GiB",
                 "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["kv_cache_memory_bytes"] == 20 << 30 and d["fits"] is True
    assert main(["plan", "llama-3.1-8b", "--gpu", "H100", "--kv-cache-memory", "70GiB"]) == 2
    assert "given KV budget" in capsys.readouterr().err


@pytest.mark.parametrize("argv,needle", [
    (["--gpu", "H999"], "unknown GPU"),
    (["--gpu-memory-utilization", "1.5"], "gpu-memory-utilization"),
    (["--gpu-memory-utilization", "x"], "gpu-memory-utilization"),
    (["--gpu", "H100", "--overhead", "-1GiB"], "overhead"),
    (["--tp", "1,x"], "tensor_parallel_size"),
])
def test_cli_bad_gpu_flags(argv, needle, capsys):
    assert main(["plan", "llama-3.1-8b", *argv]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and needle in err


def test_kvcore_gpus_lists_the_catalog(capsys):
    assert main(["gpus", "--json"]) == 0
    gpus = json.loads(capsys.readouterr().out)["gpus"]
    assert {g["name"] for g in gpus} >= {"H100-SXM", "H200", "MI355X", "RTX-4090"}
    assert all(g["memory_bytes"] > 0 and g["source"] for g in gpus)
    assert main(["gpus"]) == 0
    assert "H100-SXM" in capsys.readouterr().out


def test_plot_without_matplotlib_names_the_extra(monkeypatch, tmp_path, capsys):
    import sys

    monkeypatch.setitem(sys.modules, "matplotlib", None)
    assert main(["plan", "qwen3-8b", "--tp", "1,2", "--plot", str(tmp_path / "x.png")]) == 2
    assert "kvcore[plot]" in capsys.readouterr().err


def test_kvcore_sweep_is_the_python_api_and_needs_no_torch():
    import subprocess
    import sys

    code = ("import sys, kvcore; rows = kvcore.sweep('qwen3-8b', gpu='H200', "
            "tensor_parallel_size=[1, 2]); assert [r['fits'] for r in rows] == [True, True];"
            " assert 'torch' not in sys.modules and 'matplotlib' not in sys.modules; "
            "print('ok')")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.stdout.strip() == "ok", out.stderr


def test_plan_text_for_people(capsys):
    """Issue #16 item 5: window, KV heads and head size per group; a precise bytes-per-
    token label for sliding layers; which concurrency figure to plan with; long names are
    never cut when the output is not a terminal."""
    assert main(["plan", "gemma-3-27b-it", "--kv-cache-memory", "20GiB", "--max-model-len",
                 "32K"]) == 0
    out = capsys.readouterr().out
    for head in ("window", "KV heads", "head size"):
        assert head in out
    assert "sliding_window" in out and "1,024" in out  # Gemma-3's window, unbroken
    assert "stop growing at their window" in out
    assert "plan with this one" in out
    assert main(["plan", "llama-3.1-8b", "--kv-cache-memory", "4GiB", "--max-model-len",
                 "8K"]) == 0
    out = capsys.readouterr().out
    assert "all layers grow with the context" in out
    assert max(len(line) for line in out.splitlines()) < 200


def test_progress_bar_appears_only_after_a_second(monkeypatch):
    import sys

    sweep_module = sys.modules["kvcore.deploy.sweep"]  # kvcore.deploy.sweep is the function

    started = []

    class Recorder:
        def __init__(self, total, done):
            started.append((total, done))

        def advance(self):
            started.append("advance")

        def close(self):
            started.append("close")

    clock = iter(range(0, 1000, 2))  # each reading 2 s later than the one before
    monkeypatch.setattr(sweep_module, "_Progress", Recorder)
    monkeypatch.setattr(sweep_module.time, "monotonic", lambda: next(clock))
    sweep("qwen3-8b", tensor_parallel_size=[1, 2, 4], progress=True)
    assert started[0] == (3, 1) and started[-1] == "close" and "advance" in started
    started.clear()
    monkeypatch.setattr(sweep_module.time, "monotonic", lambda: 0.0)  # fast sweep
    sweep("qwen3-8b", tensor_parallel_size=[1, 2, 4], progress=True)
    assert started == []


def test_cli_sweeps_memory_utilization_and_pp(tmp_path, capsys):
    path = tmp_path / "s.csv"
    assert main(["plan", "llama-3.1-8b", "--gpu-memory", "80GB,141GB",
                 "--gpu-memory-utilization", "0.8,0.9", "--pp", "1,2",
                 "--max-model-len", "8k", "--csv", str(path)]) == 0
    rows = list(csv.DictReader(path.open()))
    assert len(rows) == 8
    assert {int(r["gpu_memory_bytes"]) for r in rows} == {80 * 10**9, 141 * 10**9}
    assert {r["max_model_len"] for r in rows} == {"8000"}  # k = 1,000 (vLLM)
    by = {(r["gpu_memory_bytes"], r["gpu_memory_utilization"], r["pipeline_parallel_size"]): r
          for r in rows}
    more = by[(str(141 * 10**9), "0.9", "1")]
    less = by[(str(80 * 10**9), "0.8", "1")]
    assert int(more["num_blocks"]) > int(less["num_blocks"])
    out = capsys.readouterr().out
    assert "GPU memory" in out and "util" in out and "PP" in out


def test_dp_multiplies_gpus_not_per_rank_memory(capsys):
    base = ["plan", "qwen3-30b-a3b", "--gpu", "H100", "--tp", "2", "--max-model-len", "32K",
            "--json"]
    assert main(base) == 0
    one = json.loads(capsys.readouterr().out)
    assert main(base + ["--dp", "4"]) == 0
    four = json.loads(capsys.readouterr().out)
    assert one["num_gpus"] == 2 and four["num_gpus"] == 8
    assert four["weights_bytes"] == one["weights_bytes"]
    assert main(base + ["--dp", "4", "--enable-expert-parallel"]) == 0
    ep = json.loads(capsys.readouterr().out)
    assert ep["weights_bytes"] < one["weights_bytes"]  # experts split over 8 ranks, not 2


# ---- adversarial findings on #16: invalid input is an error, not a row -------------------

from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from kvcore.errors import KVCoreError, NotEnoughMemoryError  # noqa: E402

LLAMA_HEADS = 32  # llama-3.1-8b: num_attention_heads 32, num_key_value_heads 8


@settings(max_examples=15, deadline=None)
@given(st.integers(2, 200).filter(lambda n: LLAMA_HEADS % n))
def test_a_tp_that_does_not_divide_the_heads_fails_the_sweep(tp):
    # the rule: only a row that does not FIT stays a row; an invalid value raises
    with pytest.raises(ConfigError, match="tensor_parallel_size"):
        sweep("llama-3.1-8b", gpu="H100", tensor_parallel_size=[1, tp])


@pytest.mark.parametrize("kwargs,name", [
    ({"tensor_parallel_size": "1,2"}, "tensor_parallel_size"),
    ({"tensor_parallel_size": [1.5]}, "tensor_parallel_size"),
    ({"tensor_parallel_size": {1, 2}}, "tensor_parallel_size"),
    ({"tensor_parallel_size": []}, "tensor_parallel_size"),
    ({"tensor_parallel_size": [True]}, "tensor_parallel_size"),
    ({"pipeline_parallel_size": [0]}, "pipeline_parallel_size"),
    ({"gpu_memory_utilization": [0]}, "gpu_memory_utilization"),
    ({"gpu_memory_utilization": [1.5]}, "gpu_memory_utilization"),
    ({"kv_cache_dtype": ["auto", "fp7"]}, "kv_cache_dtype"),
    ({"kv_cache_dtype": [8]}, "kv_cache_dtype"),
    ({"max_model_len": []}, "max_model_len"),
    ({"gpu_memory_bytes": 80 * 2**30}, "gpu_memory_bytes"),   # with gpu= too
    ({"tensor_paralel_size": 2}, "tensor_paralel_size"),      # a mistyped keyword
])
def test_python_sweep_refuses_malformed_axes_naming_the_argument(kwargs, name):
    with pytest.raises(KVCoreError, match=name):
        sweep("llama-3.1-8b", gpu="H100", **kwargs)


def test_python_sweep_needs_a_model_and_a_gpu_for_gpu_keywords():
    with pytest.raises(ConfigError, match="model"):
        sweep(None, gpu="H100")
    for kw in ({"overhead_bytes": 2**30}, {"data_parallel_size": 4},
               {"gpu_memory_utilization": 0.5}, {"enable_expert_parallel": True}):
        with pytest.raises(ConfigError, match="needs a GPU"):
            sweep("llama-3.1-8b", kv_cache_memory_bytes=2**34, **kw)


@pytest.mark.parametrize("argv,needle", [
    (["--gpu", "H100", "--kv-cache-dtype", "auto,fp7"], "fp7"),
    (["--gpu", "H100", "--tp", "1,3"], "tensor_parallel_size 3"),
    (["--gpu", "H100", "--tp", "1,3", "--json"], "tensor_parallel_size 3"),
    (["--kv-cache-memory", "16GiB", "--kv-cache-dtype", "fp8,nope"], "nope"),
    (["--gpu-memory-utilization", "0.5", "--overhead", "1GiB", "--dp", "4"], "need"),
    (["--gpu-memory-utilization", "0.5"], "--gpu-memory-utilization"),
    (["--overhead", "1GiB", "--kv-cache-memory", "10GiB"], "--overhead"),
    (["--dp", "2"], "--dp"),
    (["--enable-expert-parallel", "--tp", "1,2"], "--enable-expert-parallel"),
    (["--gpu", "H100", "--gpu-memory", "80GB"], "not both"),
    (["--gpu", "H100,L4", "--gpu-memory", "80GB"], "not both"),
])
def test_cli_invalid_values_in_a_sweep_exit_2_with_one_line(argv, needle, capsys):
    assert main(["plan", "llama-3.1-8b", *argv]) == 2
    captured = capsys.readouterr()
    text = captured.out if "--json" in argv else captured.err
    if "--json" in argv:
        assert needle in json.loads(text)["error"]["message"]
    else:
        assert len(text.strip().splitlines()) == 1 and needle in text


@settings(max_examples=20, deadline=None)
@given(st.sampled_from(["--tp", "--pp", "--dp"]),
       st.one_of(st.integers(1, 64).map(lambda n: f"{n}{'kKmM'[n % 4]}"),
                 st.sampled_from(["2.0", "0", "-1", "1e3", "two", "", "1_0", "٣"])))
def test_cli_counts_are_plain_positive_integers(flag, text):
    import contextlib
    import io

    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        code = main(["plan", "llama-3.1-8b", "--gpu", "H100", flag, text])
    assert code == 2
    assert "is not a count" in err.getvalue() and "tokens" not in err.getvalue()


def test_cli_tp_1k_is_not_a_thousand(capsys):
    assert main(["plan", "llama-3.1-8b", "--gpu", "H100", "--tp", "1k"]) == 2
    assert "not a count" in capsys.readouterr().err


def test_a_row_that_does_not_fit_keeps_exit_0_and_says_why(capsys):
    # utilization 1e-9 is a valid fraction: that row does not fit and the table says why
    assert main(["plan", "llama-3.1-8b", "--gpu", "H100",
                 "--gpu-memory-utilization", "0.9,1e-9"]) == 0
    out = capsys.readouterr().out
    assert "NO" in out and "does not fit" in out and "exceed" in out


def test_rows_fill_gpu_memory_overhead_and_the_default_length(tmp_path):
    rows = sweep("llama-3.1-8b", gpu=["H100-SXM", "L4"])
    # nvidia-smi memory.total of the H100 80GB HBM3: 81,559 MiB (kvcore.deploy.gpus cites it)
    assert rows[0]["gpu_memory_bytes"] == 81559 * 2**20
    assert all(r["overhead_bytes"] and r["overhead_bytes"] > 0 for r in rows)
    # L4 (24 GB) cannot hold 131,072 tokens beside 16 GB of weights: the unswept length
    # column still shows the model's length (max_position_embeddings 131,072)
    assert [r["max_model_len"] for r in rows] == [131072, 131072]
    path = tmp_path / "s.csv"
    from kvcore.deploy.sweep import write_csv

    write_csv(sweep("llama-3.1-8b", gpu_memory_bytes=[40 * 2**30, 80 * 2**30]), path)
    got = list(csv.DictReader(path.open()))
    assert [r["gpu_memory_bytes"] for r in got] == [str(40 * 2**30), str(80 * 2**30)]
    assert all(r["gpu"] and r["overhead_bytes"] for r in got)


def test_auto_length_is_shown_as_auto(capsys):
    assert main(["plan", "llama-3.1-8b", "--gpu", "H100", "--max-model-len",
                 "auto,8k"]) == 0
    out = capsys.readouterr().out
    assert "auto" in out and "-1" not in out


def test_not_fitting_rows_are_not_enough_memory_errors():
    rows = sweep("llama-3.1-8b", gpu_memory_bytes=[2 * 2**30, 80 * 2**30])
    assert rows[0]["fits"] is False and rows[0]["error_type"] == NotEnoughMemoryError.__name__
    assert rows[1]["fits"] is True


def test_plan_json_has_the_gpu_names_without_a_gpu_too(capsys):
    from kvcore.deploy.sweep import GPU_JSON_KEYS

    assert main(["plan", "llama-3.1-8b", "--json", "--kv-cache-memory", "20GiB",
                 "--tp", "2", "--max-model-len", "8192"]) == 0
    plain = json.loads(capsys.readouterr().out)
    assert set(GPU_JSON_KEYS) <= set(plain)
    assert plain["gpu"] is None and plain["gpu_memory_utilization"] is None
    assert main(["plan", "llama-3.1-8b", "--json", "--gpu", "H100", "--tp", "2",
                 "--max-model-len", "8192"]) == 0
    on_gpu = json.loads(capsys.readouterr().out)
    assert set(GPU_JSON_KEYS) <= set(on_gpu) and on_gpu["num_gpus"] == 2


def test_a_layer_name_that_is_not_a_str_is_named():
    from kvcore import FullAttentionSpec, plan

    spec = FullAttentionSpec(block_size=16, num_kv_heads=8, head_size=128)
    for key in (1, None, ("a",), 2.5):
        with pytest.raises(ConfigError, match="layer names must be str"):
            plan({key: spec}, max_model_len=1024, kv_cache_memory_bytes=10**9)


class _Terminal(__import__("io").StringIO):
    def isatty(self) -> bool:
        return True


@settings(max_examples=25, deadline=None)
@given(st.integers(40, 160),
       st.lists(st.tuples(st.text("abcdefgh_-0123456789", min_size=1, max_size=24),
                          st.integers(0, 10**15)), min_size=1, max_size=4),
       st.integers(1, 9))
def test_tables_never_cut_a_figure_or_a_name(width, rows, ncols):
    # the rule: every cell appears whole on one line, at any terminal width
    import os
    from unittest import mock

    from kvcore.deploy.sweep import print_wide_table

    headers = ["name"] + [f"figure {i}" for i in range(ncols)]
    cells = [[name] + [f"{n * (i + 1):,}" for i in range(ncols)] for name, n in rows]
    out = _Terminal()
    with mock.patch.dict(os.environ, {"COLUMNS": str(width)}):
        print_wide_table("t", headers, cells, left=(0,), file=out)
    lines = out.getvalue().splitlines()
    assert all(len(line) <= max(width, 1) for line in lines[1:] if "\x1b" not in line)
    for row in cells:
        for cell in row:
            assert any(cell in line for line in lines), (cell, out.getvalue())
    for h in headers:
        assert any(h in line for line in lines)


def test_whole_bytes_per_token_is_an_int_in_json(capsys):
    assert main(["plan", "llama-3.1-8b", "--kv-cache-memory", "20GiB", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    # 32 layers x 8 KV heads x 128 x (K + V) x 2 bytes = 131,072, an int
    assert out["bytes_per_token"] == 131072 and isinstance(out["bytes_per_token"], int)
    from kvcore.models.planner import plan_model

    stats = plan_model("llama-3.1-8b", kv_cache_memory_bytes=2**35).stats.to_dict()
    assert isinstance(stats["bytes_per_token"], int)


def test_encoder_only_auto_length_says_why_once(tmp_path, capsys):
    layer = {"type": "encoder_only_attention", "block_size": 16, "num_kv_heads": 8,
             "head_size": 64}
    path = tmp_path / "enc.json"
    path.write_text(json.dumps({"options": {"kv_cache_memory_bytes": 10**9},
                                "layers": {"l0": layer, "l1": layer}}))
    assert main(["plan", "--specs", str(path), "--max-model-len", "-1", "--json"]) == 0
    notes = json.loads(capsys.readouterr().out)["notes"]
    assert sum("KV cache" in n for n in notes) == 1
    assert any("search cap" in n for n in notes)


def test_line_styles_are_distinct_combinations():
    from kvcore.deploy.sweep import line_style

    styles = [line_style(i) for i in range(320)]
    assert len(set(styles)) == 320          # 10 colours x 8 markers x 4 linestyles
    assert len({s[0] for s in styles[:10]}) == 10


def test_a_single_plan_plots_a_curve_over_context_lengths(tmp_path, monkeypatch):
    pytest.importorskip("matplotlib")
    import sys

    sw = sys.modules["kvcore.deploy.sweep"]  # the module (kvcore.deploy.sweep is also the function)

    seen = {}
    monkeypatch.setattr(sw, "plot", lambda rows, path, title="": seen.update(rows=rows))
    assert main(["plan", "llama-3.1-8b", "--gpu", "H100",
                 "--plot", str(tmp_path / "p.png")]) == 0
    lengths = sorted(r["max_model_len"] for r in seen["rows"])
    # powers of two from 1,024 up to max_position_embeddings 131,072
    assert lengths == [1 << k for k in range(10, 18)]
    conc = [r["max_concurrency"] for r in sorted(seen["rows"], key=lambda r: r[
        "max_model_len"])]
    assert conc == sorted(conc, reverse=True) and conc[0] > conc[-1]
