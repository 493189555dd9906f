"""tester12's findings on ``kvcore tune`` and its Python API (kvcore/sim/tune.py): F2, F3,
F4, F5, F6, F7 (simulate_once / candidates), F12 (tune), F14, F15, F16, F18.

The rules tested, on every path (the CLI and ``candidates`` / ``simulate_once`` /
``tune`` / ``vllm_command``), each over a family of generated or parametrized values:

- bad input raises ConfigError naming the field (the CLI: one line, exit 2; a bad
  ``simulate_once`` config comes back as an ``error`` entry naming the field, the
  3badb59 convention for ``enable_chunked_prefill``);
- a printed ``vllm serve`` line is one vLLM 0.32 accepts and a shell splits as meant:
  its ``--kv-cache-dtype`` is one of ``CacheDType`` (vllm/config/cache.py, read from the
  installed source when present), every argument shell-quoted;
- lengths take vLLM's suffixes (``human_readable_int``: 8k = 8,000, 8K = 8,192) and
  ``--max-model-len -1`` / ``auto`` is vLLM's "the longest that fits";
- with chunked prefill off and no ``--max-num-batched-tokens`` vLLM 0.32 runs
  ``max(max_model_len, the serve default)`` (EngineArgs, arg_utils.py), a candidate
  tune searches.
"""

from __future__ import annotations

import ast
import glob
import json
import math
import os
import shlex
import subprocess
import tempfile
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kvcore_cli_support import assert_clean_error, run_cli

from kvcore.errors import ConfigError
from kvcore.models.embedded import embedded_config_path
from kvcore.sim.tune import (
    VLLM_KV_CACHE_DTYPES,
    candidates,
    check_vllm_kv_cache_dtype,
    simulate_once,
    tune,
    vllm_command,
)

TRACE = "tests/data/tester1_mooncake_conversation_150.jsonl"
TRACE_LEN = sum(1 for line in open(TRACE) if line.strip())  # noqa: SIM115

#: one small candidate (llama-3.1-8b on H100, 5 random prompts 64 / 8)
BASE: dict[str, Any] = {
    "model": "llama-3.1-8b", "gpu": "H100", "tensor_parallel_size": 1,
    "pipeline_parallel_size": 1, "max_num_batched_tokens": 2048, "max_num_seqs": 8,
    "block_size": None, "kv_cache_dtype": "auto", "enable_prefix_caching": True,
    "mamba_cache_mode": None, "enable_chunked_prefill": True, "max_model_len": 4096,
    "workload": {"input_len": 64, "output_len": 8, "num_prompts": 5, "prefix_len": 0,
                 "max_concurrency": None, "request_rate": math.inf, "burstiness": 1.0,
                 "seed": 0},
    "goodput": {}, "sim": "engine"}

#: ``kvcore tune`` of one candidate on that workload
TUNE = ["tune", "llama-3.1-8b", "--gpu", "H100", "--tp", "1", "--dataset-name", "random",
        "--num-prompts", "5", "--random-input-len", "64", "--random-output-len", "8",
        "--max-num-seqs", "8", "--backend", "serial"]

CAND_KW: dict[str, Any] = dict(tp=[1], max_num_batched_tokens=[2048], max_num_seqs=[8],
                               block_size=[None], kv_cache_dtype=["auto"],
                               prefix_caching=[True], mamba_cache_mode=["none"],
                               workload=BASE["workload"], goodput={}, max_model_len=4096)

#: the embedded Llama-3.1-8B config.json (from the installed package: the tests also run
#: from a copy of tests/ in a core-only venv)
_LLAMA_CONFIG = embedded_config_path("llama-3.1-8b")
assert _LLAMA_CONFIG is not None

NAN = float("nan")
INF = float("inf")


def _vllm_source() -> Path | None:
    # the vLLM venv of this checkout (integrations/vllm/ci_venv.py makes it)
    root = Path(__file__).resolve().parents[2]
    hits = sorted(glob.glob(str(root / ".venv-vllm" / "lib" / "python3*" / "site-packages"
                                / "vllm")))
    try:
        import vllm  # noqa: F401

        return Path(vllm.__file__).parent
    except ImportError:
        return Path(hits[0]) if hits else None


def _cache_dtypes_from_vllm() -> list[str] | None:
    """``CacheDType``'s values as vLLM 0.32's vllm/config/cache.py spells them."""
    src = _vllm_source()
    if src is None or not (src / "config" / "cache.py").is_file():
        return None
    tree = ast.parse((src / "config" / "cache.py").read_text())
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(
                isinstance(t, ast.Name) and t.id == "CacheDType" for t in node.targets):
            sub = node.value
            assert isinstance(sub, ast.Subscript)
            elts = sub.slice.elts if isinstance(sub.slice, ast.Tuple) else [sub.slice]
            return [e.value for e in elts if isinstance(e, ast.Constant)]
    return None


def _vllm_python() -> str | None:
    """A Python that imports vLLM 0.32 (its EngineArgs parser checks printed lines)."""
    src = _vllm_source()
    if src is None:
        return None
    py = src.parents[3] / "bin" / "python"
    return str(py) if py.exists() else None


def _err(res: dict[str, Any], field: str) -> None:
    """A simulate_once error entry naming ``field``."""
    assert "figures" not in res, res
    assert field in res["error"], res["error"]
    assert res.get("field") == field, res


def _cli(capsys: Any, argv: list[str]) -> tuple[int, str, str]:
    return run_cli(capsys, argv)


def _best_line(out: str) -> list[str]:
    lines = [ln.strip() for ln in out.splitlines() if ln.strip().startswith("vllm serve")]
    assert lines, out
    return shlex.split(lines[0])


# ---- F3 / F5: --kv-cache-dtype as vLLM 0.32 spells it ----------------------------------

def test_vllm_dtype_list_is_vllms_cachedtype() -> None:
    got = _cache_dtypes_from_vllm()
    if got is None:
        pytest.skip("vLLM's source (vllm/config/cache.py) is not installed here")
    assert list(VLLM_KV_CACHE_DTYPES) == got


_NOT_VLLM = ["bf16", "half", "fp16", "float", "float32", "fp32", "turboquant_k2v2",
             "turboquant_k2v4_nc", "fp9", "int4", "fp8-e4m3"]


@settings(max_examples=40)
@given(name=st.one_of(
    st.sampled_from(_NOT_VLLM),
    st.sampled_from(VLLM_KV_CACHE_DTYPES).map(str.upper),
    st.sampled_from(VLLM_KV_CACHE_DTYPES).map(str.title),
    st.sampled_from(VLLM_KV_CACHE_DTYPES).map(lambda s: s + "x"),
    st.text(min_size=1, max_size=8)))
def test_a_dtype_vllm_does_not_name_is_refused_on_every_path(name: str) -> None:
    if name in VLLM_KV_CACHE_DTYPES:
        return
    with pytest.raises(ConfigError) as exc:
        check_vllm_kv_cache_dtype(name)
    assert exc.value.extra["field"] == "kv_cache_dtype"
    with pytest.raises(ConfigError) as exc:
        candidates("llama-3.1-8b", "H100", **{**CAND_KW, "kv_cache_dtype": ["auto", name]})
    assert exc.value.extra["field"] == "kv_cache_dtype"
    with pytest.raises(ConfigError):
        vllm_command("llama-3.1-8b", {**BASE, "kv_cache_dtype": name})


@pytest.mark.parametrize("name", ["bf16", "half", "float32", "AUTO", "FP8",
                                  "turboquant_k2v2", "turboquant_k2v4_nc"])
def test_tune_cli_refuses_a_dtype_vllm_serve_refuses(capsys: Any, name: str) -> None:
    rc, out, err = _cli(capsys, [*TUNE, "--kv-cache-dtype", f"auto,{name}"])
    assert_clean_error(rc, err, "--kv-cache-dtype", name)
    assert "vllm serve" not in out


@pytest.mark.parametrize("name", VLLM_KV_CACHE_DTYPES)
def test_every_vllm_dtype_is_printed_verbatim(name: str) -> None:
    cmd = shlex.split(vllm_command("llama-3.1-8b", {**BASE, "kv_cache_dtype": name}))
    assert cmd[cmd.index("--kv-cache-dtype") + 1] == name


@pytest.mark.parametrize("text", ["", " ", ",", "auto,", ",fp8", "auto,,fp8", "auto, ,fp8"])
def test_empty_dtype_items_name_kv_cache_dtype(capsys: Any, text: str) -> None:
    rc, _, err = _cli(capsys, [*TUNE, "--kv-cache-dtype", text])
    assert_clean_error(rc, err, "--kv-cache-dtype", "comma list")
    assert "max-num-batched-tokens" not in err and "max_num_seqs" not in err


@pytest.mark.parametrize("bad", ["auto", "fp8", "", [], (), None, 7, {"auto": 1}])
def test_candidates_takes_a_list_of_dtypes_not_a_string(bad: Any) -> None:
    with pytest.raises(ConfigError) as exc:
        candidates("llama-3.1-8b", "H100", **{**CAND_KW, "kv_cache_dtype": bad})
    assert exc.value.extra["field"] == "kv_cache_dtype"


# ---- F2: enable_prefix_caching True / False only ------------------------------------

_BAD_FLAGS = ["off", "on", "False", "True", "0", "", 0, 1, None, [False], 0.0]


@pytest.mark.parametrize("bad", _BAD_FLAGS)
def test_bad_prefix_caching_is_named_on_every_path(bad: Any) -> None:
    with pytest.raises(ConfigError) as exc:
        candidates("llama-3.1-8b", "H100", **{**CAND_KW, "prefix_caching": [True, bad]})
    assert exc.value.extra["field"] == "enable_prefix_caching"
    _err(simulate_once({**BASE, "enable_prefix_caching": bad}), "enable_prefix_caching")
    with pytest.raises(ConfigError) as exc:
        vllm_command("llama-3.1-8b", {**BASE, "enable_prefix_caching": bad})
    assert exc.value.extra["field"] == "enable_prefix_caching"
    with pytest.raises(ConfigError):
        tune([{**BASE, "enable_prefix_caching": bad}], objective="output_throughput",
             backend="serial", progress=False)


def test_prefix_caching_off_runs_off_and_is_printed() -> None:
    # a shared 256-token prefix: with caching on later prompts hit the cache (shorter
    # TTFT); with False they do not, and the line says --no-enable-prefix-caching
    wl = {**BASE["workload"], "input_len": 32, "prefix_len": 256, "num_prompts": 12,
          "max_concurrency": 1}
    on = simulate_once({**BASE, "workload": wl, "enable_prefix_caching": True})
    off = simulate_once({**BASE, "workload": wl, "enable_prefix_caching": False})
    assert off["figures"]["mean_ttft_ms"] > on["figures"]["mean_ttft_ms"]
    (c,) = candidates("llama-3.1-8b", "H100", **{**CAND_KW, "prefix_caching": [False]})
    assert "--no-enable-prefix-caching" in shlex.split(vllm_command("llama-3.1-8b", c))


# ---- F4: the vllm serve line is shell-quoted -------------------------------------------

@settings(max_examples=25)
@given(name=st.text(alphabet=" ab'\"$;&|()*#!~\\", min_size=1, max_size=12))
def test_model_path_survives_the_shell(name: str) -> None:
    cfg = _LLAMA_CONFIG.read_text()
    with tempfile.TemporaryDirectory() as tmp:
        d = Path(tmp) / f"m{name}"
        d.mkdir()
        (d / "config.json").write_text(cfg)
        for model in (str(d / "config.json"), str(d)):
            cmd = shlex.split(vllm_command(model, BASE))
            assert cmd[:3] == ["vllm", "serve", str(d)]
            assert cmd[3] == "--tensor-parallel-size"


def test_tune_cli_prints_a_spaced_path_quoted(capsys: Any, tmp_path: Path) -> None:
    d = tmp_path / "my model"
    d.mkdir()
    (d / "config.json").write_text(_LLAMA_CONFIG
                                   .read_text())
    rc, out, err = _cli(capsys, [*TUNE[:1], str(d / "config.json"), *TUNE[2:],
                                 "--kv-cache-dtype", "auto", "--max-num-batched-tokens",
                                 "2048"])
    assert rc == 0, err
    assert _best_line(out)[2] == str(d)


# ---- F6: --max-model-len -1 (vLLM's auto: the longest that fits) ---------------------

@pytest.mark.parametrize("value", ["-1", "auto"])
def test_tune_plans_max_model_len_auto(capsys: Any, value: str) -> None:
    rc, out, err = _cli(capsys, [*TUNE, "--kv-cache-dtype", "auto",
                                 "--max-num-batched-tokens", "2048", "--max-model-len",
                                 value])
    assert rc == 0, err
    assert "long_prefill_token_threshold" not in out + err
    cmd = _best_line(out)
    assert cmd[cmd.index("--max-model-len") + 1] == "-1"  # vLLM's human_readable_int_or_auto


def test_simulate_once_plans_max_model_len_auto() -> None:
    res = simulate_once({**BASE, "max_model_len": -1})
    assert res["figures"]["completed"] == BASE["workload"]["num_prompts"]


@pytest.mark.parametrize("bad", [0, -2, -5, "0", "abc", "4x", 1.5, NAN, INF, True, [4096]])
def test_bad_max_model_len_is_named(capsys: Any, bad: Any) -> None:
    _err(simulate_once({**BASE, "max_model_len": bad}), "max_model_len")
    with pytest.raises(ConfigError) as exc:
        candidates("llama-3.1-8b", "H100", **{**CAND_KW, "max_model_len": bad})
    assert exc.value.extra["field"] == "max_model_len"
    if isinstance(bad, (int, str)) and not isinstance(bad, bool):
        rc, _, err = _cli(capsys, [*TUNE, "--kv-cache-dtype", "auto", "--max-model-len",
                                   str(bad)])
        assert_clean_error(rc, err, "max-model-len")


# ---- F7: simulate_once / candidates fields ------------------------------------------

_BAD_FIELDS = [
    ("tensor_parallel_size", v) for v in ("abc", "1", 1.7, 1.0, True, 0, -1, NAN, None)] + [
    ("pipeline_parallel_size", v) for v in ("2", 1.5, False, 0)] + [
    ("max_num_batched_tokens", v) for v in (NAN, INF, 1.5, 2048.0, True, -1, 0, "abc",
                                            [2048])] + [
    ("max_num_seqs", v) for v in (1.9, 8.0, True, 0, -5, "8", None)] + [
    ("block_size", v) for v in (16.0, True, 0, "16")] + [
    ("kv_cache_dtype", v) for v in (None, 8, "", ["auto"])] + [
    ("enable_chunked_prefill", v) for v in ("off", 0, None)] + [
    ("goodput", v) for v in ({"ttft": "abc"}, {"foo": 10}, ["ttft:10"], "ttft:10",
                             {"ttft": -5}, {"ttft": NAN}, {"ttft": INF}, {"ttft": True},
                             {"TTFT": 10})] + [
    ("sim", v) for v in ("bogus", None, 1, "Engine", "")] + [
    ("gpu", v) for v in ("NOPE", None, 3)]


@pytest.mark.parametrize(("field", "bad"), _BAD_FIELDS)
def test_simulate_once_names_a_bad_field(field: str, bad: Any) -> None:
    _err(simulate_once({**BASE, field: bad}), field)


@pytest.mark.parametrize("bad", ["10", NAN, -1, 0, True, None, -INF])
def test_simulate_once_names_a_bad_request_rate(bad: Any) -> None:
    _err(simulate_once({**BASE, "workload": {**BASE["workload"], "request_rate": bad}}),
         "request_rate")


def test_simulate_once_refuses_unknown_config_keys() -> None:
    _err(simulate_once({**BASE, "enable_prefix_cache": False}), "config")


_CAND_BAD = [
    ("tp", [0], "tensor_parallel_size"), ("tp", ["2"], "tensor_parallel_size"),
    ("tp", [1.5], "tensor_parallel_size"), ("tp", [True], "tensor_parallel_size"),
    ("tp", 1, "tensor_parallel_size"), ("tp", [], "tensor_parallel_size"),
    ("pp", [0], "pipeline_parallel_size"),
    ("max_num_seqs", [-5], "max_num_seqs"), ("max_num_seqs", [8.0], "max_num_seqs"),
    ("max_num_batched_tokens", [NAN], "max_num_batched_tokens"),
    ("max_num_batched_tokens", ["8x"], "max_num_batched_tokens"),
    ("max_num_batched_tokens", 2048, "max_num_batched_tokens"),
    ("block_size", [16.0], "block_size"), ("block_size", [24], "block_size"),
    ("max_model_len", "4x", "max_model_len"), ("max_model_len", 0, "max_model_len"),
    ("sim", "bogus", "sim"), ("goodput", {"foo": 1}, "goodput"),
    ("goodput", {"ttft": -1}, "goodput"), ("chunked_prefill", ["off"],
                                           "enable_chunked_prefill"),
    ("mamba_cache_mode", ["all"], "mamba_cache_mode"),
    ("mamba_cache_mode", "none", "mamba_cache_mode"),
    ("workload", None, "workload")]


@pytest.mark.parametrize(("kw", "bad", "field"), _CAND_BAD)
def test_candidates_names_a_bad_argument(kw: str, bad: Any, field: str) -> None:
    with pytest.raises(ConfigError) as exc:
        candidates("llama-3.1-8b", "H100", **{**CAND_KW, kw: bad})
    assert exc.value.extra["field"] == field


@pytest.mark.parametrize("gpu", ["NOPE", "", None, 7])
def test_candidates_names_a_bad_gpu(gpu: Any) -> None:
    with pytest.raises(ConfigError) as exc:
        candidates("llama-3.1-8b", gpu, **CAND_KW)
    assert exc.value.extra["field"] == "gpu"


@settings(max_examples=30)
@given(mml=st.integers(1, 999), suffix=st.sampled_from(["k", "K"]))
def test_api_lengths_take_vllms_suffixes(mml: int, suffix: str) -> None:
    # vLLM's human_readable_int: lower case powers of 1000, upper case of 1024
    want = mml * (1000 if suffix == "k" else 1024)
    (c,) = candidates("llama-3.1-8b", "H100", **{**CAND_KW, "max_model_len":
                                                  f"{mml}{suffix}",
                                                  "max_num_batched_tokens":
                                                  [f"{mml}{suffix}"]})
    assert c["max_model_len"] == want and c["max_num_batched_tokens"] == want


def test_tune_objective_goodput_needs_an_slo() -> None:
    for g in ({}, None):
        with pytest.raises(ConfigError) as exc:
            tune([{**BASE, "goodput": g}], objective="goodput", backend="serial",
                 progress=False)
        assert exc.value.extra["field"] == "goodput"
    for bad in ([], (), "x", None, {}):
        with pytest.raises(ConfigError) as exc:
            tune(bad, objective="output_throughput", backend="serial", progress=False)
        assert exc.value.extra["field"] == "configs"


# ---- F12: tune lengths with vLLM's suffixes; the refusal's own field -----------------

@pytest.mark.parametrize(("text", "want"), [("8k", 8000), ("8K", 8192), ("4.5k", 4500),
                                            ("4096", 4096)])
def test_tune_lengths_take_vllms_suffixes(capsys: Any, text: str, want: int) -> None:
    rc, out, err = _cli(capsys, [*TUNE, "--kv-cache-dtype", "auto", "--max-model-len", text,
                                 "--max-num-batched-tokens", text])
    assert rc == 0, err
    cmd = _best_line(out)
    assert cmd[cmd.index("--max-model-len") + 1] == str(want)
    assert cmd[cmd.index("--max-num-batched-tokens") + 1] == str(want)


@pytest.mark.parametrize("bad", ["8x", "1.5", "-1", "0", "2048,", "4.5K", "k"])
def test_tune_bad_mnbt_lengths(capsys: Any, bad: str) -> None:
    rc, _, err = _cli(capsys, [*TUNE, "--kv-cache-dtype", "auto",
                               "--max-num-batched-tokens", bad])
    assert_clean_error(rc, err, "--max-num-batched-tokens")


@pytest.mark.parametrize(("argv", "field"), [
    (["--tp", "3"], "tensor_parallel_size"),
    (["--max-model-len", "200000"], "max_model_len")])
def test_tune_json_error_names_the_refused_field(capsys: Any, argv: list[str],
                                                 field: str) -> None:
    rc, out, _ = _cli(capsys, [*TUNE, "--kv-cache-dtype", "auto", "--max-num-batched-tokens",
                               "2048", *argv, "--json"])
    assert rc == 2
    err = json.loads(out)["error"]
    assert err["field"] == field and err["field"] != "gpu"


# ---- F14 / F18: --limit and workload fields -------------------------------------------

_TRACE_TUNE = ["tune", "llama-3.1-8b", "--gpu", "H100", "--tp", "1", "--kv-cache-dtype",
               "auto", "--max-num-seqs", "64", "--max-num-batched-tokens", "2048",
               "--prefix-caching", "on", "--backend", "serial", "--trace", TRACE]


@pytest.mark.parametrize("limit", ["0", "-1", "-5", str(-TRACE_LEN)])
def test_tune_limit_below_one_is_refused(capsys: Any, limit: str) -> None:
    rc, out, err = _cli(capsys, [*_TRACE_TUNE, "--limit", limit])
    assert_clean_error(rc, err, "--limit", limit)
    assert "vllm serve" not in out


@pytest.mark.parametrize("limit", [0, -1, -5, True, False, 1.5, "3", NAN])
def test_simulate_once_limit_is_named(limit: Any) -> None:
    wl = {"trace": TRACE, "trace_format": "auto", "limit": limit}
    _err(simulate_once({**BASE, "max_model_len": None, "workload": wl}), "limit")


def test_simulate_once_limit_takes_the_first_n() -> None:
    res = simulate_once({**BASE, "max_model_len": None, "max_num_seqs": 8,
                         "workload": {"trace": TRACE, "limit": 3}})
    assert res["figures"]["completed"] + res["figures"].get("failed", 0) == 3


@pytest.mark.parametrize(("wl", "field"), [
    ({}, "num_prompts"),
    ({"input_len": 64, "output_len": 8}, "num_prompts"),
    ({"num_prompts": 3, "output_len": 8}, "input_len"),
    ({"num_prompts": 3, "input_len": 8}, "output_len"),
    ({"num_prompts": 3, "input_len": 0, "output_len": 8}, "input_len"),
    ({"num_prompts": 3, "input_len": 8, "output_len": 8, "bogus": 1}, "workload"),
    ({"num_prompts": 3, "input_len": 8, "output_len": 8, "limit": 2}, "limit"),
    ({"num_prompts": 1.5, "input_len": 8, "output_len": 8}, "num_prompts"),
    ({"num_prompts": 3, "input_len": 8, "output_len": 8, "seed": -1}, "seed"),
    ({"num_prompts": 3, "input_len": 8, "output_len": 8, "seed": 1 << 32,
      "request_rate": 5.0}, "seed"),
    # vLLM refuses every seed >= 2**32 (np.random.seed), with or without a rate
    ({"num_prompts": 3, "input_len": 8, "output_len": 8, "seed": 1 << 32}, "seed"),
    ({"num_prompts": 3, "input_len": 8, "output_len": 8, "seed": (1 << 40) + 7,
      "max_concurrency": 2}, "seed"),
    ({"num_prompts": 3, "input_len": 8, "output_len": 8, "max_concurrency": 0},
     "max_concurrency"),
    ({"dataset": "sharegpt", "dataset_opts": {}}, "num_prompts"),
    ({"dataset": "sharegpt"}, "dataset_opts"),
    ({"dataset": "nope", "dataset_opts": {"num_prompts": 3}}, "dataset"),
    ({"dataset_opts": {"num_prompts": 3}}, "dataset"),
    ({"dataset": "prefix_repetition", "dataset_opts": {"num_prompts": 3, "foo": 1}},
     "dataset_opts"),
    ({"trace": 5}, "trace"),
    ("random", "workload"),
])
def test_simulate_once_names_a_bad_workload(wl: Any, field: str) -> None:
    _err(simulate_once({**BASE, "workload": wl}), field)


def test_simulate_once_dataset_opts_take_vllms_defaults() -> None:
    res = simulate_once({**BASE, "workload": {
        "dataset": "prefix_repetition",
        "dataset_opts": {"num_prompts": 20, "prefix_repetition_output_len": 4}}})
    assert res["figures"]["completed"] == 20  # vLLM's 10 prefixes x 20 // 10 prompts


# ---- F15: HF ids; input length 0 with a prefix ---------------------------------------

def test_tune_takes_an_hf_id(capsys: Any, monkeypatch: Any) -> None:
    pytest.importorskip("huggingface_hub")  # kvcore[hf]: ids need it, as in plan
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    rc, out, err = _cli(capsys, [*TUNE[:1], "meta-llama/Llama-3.1-8B", *TUNE[2:],
                                 "--kv-cache-dtype", "auto", "--max-num-batched-tokens",
                                 "2048"])
    assert rc == 0, err
    assert _best_line(out)[:3] == ["vllm", "serve", "meta-llama/Llama-3.1-8B"]


@pytest.mark.parametrize("prefix", [1, 37, 100])
def test_tune_input_len_0_with_a_prefix(capsys: Any, prefix: int) -> None:
    # vLLM's rule: prefix + the shortest input >= 1 (random_dataset implements it)
    argv = [*TUNE, "--kv-cache-dtype", "auto", "--max-num-batched-tokens", "2048",
            "--random-input-len", "0", "--random-prefix-len", str(prefix),
            "--prefix-caching", "on", "--json"]
    rc, out, err = _cli(capsys, argv)
    assert rc == 0, err
    assert json.loads(out)["best"]["figures"]["request_throughput"] > 0


@pytest.mark.parametrize("argv", [["--random-input-len", "0"],
                                  ["--random-input-len", "0", "--random-prefix-len", "0"],
                                  ["--random-input-len", "-1", "--random-prefix-len", "5"]])
def test_tune_empty_prompts_refused(capsys: Any, argv: list[str]) -> None:
    rc, _, err = _cli(capsys, [*TUNE, "--kv-cache-dtype", "auto", *argv])
    assert_clean_error(rc, err, "input")


# ---- F16: chunked prefill off at vLLM's own max_num_batched_tokens ---------------------

def _serve_default_mnbt(gpu: str) -> int:
    """vLLM 0.32's serve default (EngineArgs, OPENAI_API_SERVER): >= 160 GiB 16384; >=
    70 GiB and not an A100 8192; else 2048."""
    from kvcore.deploy.gpus import get_gpu

    g = get_gpu(gpu)
    gib = g.memory_bytes / (1 << 30)
    return 16384 if gib >= 160 else 8192 if gib >= 70 and "a100" not in g.name.lower() \
        else 2048


@pytest.mark.parametrize(("mml", "chunked"), [(None, "off"), (None, "both"), ("2048", "off"),
                                              ("32k", "off")])
def test_tune_chunked_off_searches_vllms_default(capsys: Any, mml: str | None,
                                                 chunked: str) -> None:
    from kvcore.models.config import load_model_config

    argv = [*TUNE, "--kv-cache-dtype", "auto", "--chunked-prefill", chunked, "--json"]
    if mml:
        argv += ["--max-model-len", mml]
    rc, out, err = _cli(capsys, argv)
    assert rc == 0, err
    d = json.loads(out)
    offs = [e for e in [d["best"], *d["runner_ups"]]
            if not e["config"]["enable_chunked_prefill"]]
    assert offs, d
    model_len = (load_model_config("llama-3.1-8b").max_position_embeddings if mml is None
                 else {"2048": 2048, "32k": 32000}[mml])
    want = max(model_len, _serve_default_mnbt("H100"))  # arg_utils.py, chunked off
    got = {e["config"]["max_num_batched_tokens"] for e in offs}
    assert want in got
    for e in offs:
        cmd = shlex.split(e["vllm_serve"])
        assert "--no-enable-chunked-prefill" in cmd
        assert int(cmd[cmd.index("--max-num-batched-tokens") + 1]) >= model_len
    for f in d["failed"]:  # whole messages, not cut mid-word
        assert not f["error"].endswith("SchedulerConfi)")


def test_chunked_off_refusal_is_whole_and_says_what_to_pass(capsys: Any) -> None:
    rc, _, err = _cli(capsys, [*TUNE, "--kv-cache-dtype", "auto", "--chunked-prefill",
                               "off", "--max-num-batched-tokens", "2048,8192"])
    assert_clean_error(rc, err, "131072", "max_num_batched_tokens")
    assert "(SchedulerConfig)" in err


def test_simulate_once_none_mnbt_is_vllms_default() -> None:
    for chunked, mml, want in ((True, 4096, 8192), (False, 4096, 8192),
                               (False, 20000, 20000), (False, None, 131072)):
        res = simulate_once({**BASE, "max_num_batched_tokens": None, "max_model_len": mml,
                             "enable_chunked_prefill": chunked})
        assert res["config"]["max_num_batched_tokens"] == want, res


# ---- the printed lines parsed by vLLM 0.32's own EngineArgs parser ---------------------

def test_vllm_parses_the_printed_lines(tmp_path: Path) -> None:
    py = _vllm_python()
    if py is None:
        pytest.skip("no Python with vLLM 0.32 installed")
    d = tmp_path / "my 'model' $x"
    d.mkdir()
    (d / "config.json").write_text(_LLAMA_CONFIG
                                   .read_text())
    lines = [vllm_command(str(d / "config.json"), {**BASE, "kv_cache_dtype": dt,
                                                   "enable_prefix_caching": False,
                                                   "max_model_len": mml,
                                                   "enable_chunked_prefill": False})
             for dt in VLLM_KV_CACHE_DTYPES for mml in (-1, 8000)]
    script = (
        "import json, shlex, sys\n"
        "from vllm.engine.arg_utils import EngineArgs\n"
        "from vllm.utils.argparse_utils import FlexibleArgumentParser\n"
        "p = EngineArgs.add_cli_args(FlexibleArgumentParser())\n"
        "out = []\n"
        "for line in json.load(sys.stdin):\n"
        "    a = shlex.split(line)\n"
        "    ns = p.parse_args(['--model', a[2], *a[3:]])\n"
        "    out.append([ns.model, ns.kv_cache_dtype, ns.max_model_len,\n"
        "                ns.enable_prefix_caching, ns.enable_chunked_prefill])\n"
        "print(json.dumps(out))\n")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    proc = subprocess.run([py, "-c", script], input=json.dumps(lines), text=True,
                          capture_output=True, timeout=300, env=env, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    want = [[str(d), dt, mml, False, False] for dt in VLLM_KV_CACHE_DTYPES
            for mml in (-1, 8000)]
    assert got == want


# ---- the same rules on tune's other paths ---------------------------------------------

@pytest.mark.parametrize(("field", "bad"), [
    ("tensor_parallel_size", "abc"), ("tensor_parallel_size", 1.7), ("max_num_seqs", True),
    ("block_size", 16.0), ("max_num_batched_tokens", NAN), ("max_model_len", "4x"),
    ("max_model_len", 0), ("enable_chunked_prefill", "off")])
def test_vllm_command_refuses_what_it_cannot_print(field: str, bad: Any) -> None:
    with pytest.raises(ConfigError) as exc:
        vllm_command("llama-3.1-8b", {**BASE, field: bad})
    assert exc.value.extra["field"] == field


@pytest.mark.parametrize("model", [None, "", "  ", 5, ["llama-3.1-8b"]])
def test_a_bad_model_argument_is_named(model: Any) -> None:
    with pytest.raises(ConfigError) as exc:
        vllm_command(model, BASE)
    assert exc.value.extra["field"] == "model"
    with pytest.raises(ConfigError) as exc:
        candidates(model, "H100", **CAND_KW)
    assert exc.value.extra["field"] == "model"
    _err(simulate_once({**BASE, "model": model}), "model")


@pytest.mark.parametrize("text", ["", ",", "none,", "align,,none"])
def test_tune_empty_mamba_mode_items_are_refused(capsys: Any, text: str) -> None:
    rc, _, err = _cli(capsys, [*TUNE, "--kv-cache-dtype", "auto", "--mamba-cache-mode", text])
    assert_clean_error(rc, err, "--mamba-cache-mode")


@pytest.mark.parametrize(("ilen", "ratio"), [(1, "0.99"), (1, "0.5"), (3, "0.7")])
def test_tune_range_ratio_giving_empty_prompts_is_refused_once(capsys: Any, ilen: int,
                                                               ratio: str) -> None:
    # floor(ilen * (1 - ratio)) == 0 with no prefix: vLLM refuses (an empty prompt)
    rc, _, err = _cli(capsys, [*TUNE, "--kv-cache-dtype", "auto", "--random-input-len",
                               str(ilen), "--random-range-ratio", ratio])
    assert_clean_error(rc, err, "random_input_len")
    assert "no candidate" not in err
