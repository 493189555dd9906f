"""Mamba cache modes as vLLM 0.32 runs them (tester 2's findings 5, 6 and 7;
:mod:`kvcore.sim.modes`), on every path: ``kvcore simulate`` (clocked, fleet and the
clockless replay), ``kvcore tune`` and the Python API.

vLLM 0.32 (paths relative to site-packages/vllm/ of /work/main/.venv-vllm):

* config/cache.py:63 ``MambaCacheMode = Literal["align", "none"]``: the serve parser
  refuses ``all`` ("invalid choice: 'all' (choose from 'align', 'none')");
* config/model.py ``is_prefix_caching_supported``: generative hybrid models -> True,
  so prefix caching is on by default (engine/arg_utils.py
  ``_set_default_chunked_prefill_and_prefix_caching_args``);
* model_executor/models/config.py:685-705 ``MambaModelConfig.verify_and_update_config``
  (called for every hybrid through ``HybridAttentionMambaModelConfig``,
  config/vllm.py:2661): prefix caching on and mode none -> align; prefix caching off
  and mode not none -> none.

The differential check against vLLM's own parser and ``MambaModelConfig`` is
integrations/vllm/tests/test_tune_lines_vs_vllm.py.
"""

from __future__ import annotations

import json
import shlex
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kvcore_cli_support import run_cli as _run  # noqa: E402
from kvcore_cli_support import run_json as _json

from kvcore.errors import ConfigError
from kvcore.sim.modes import resolve_mamba_cache_mode

pytest.importorskip("kvcore_mamba")

SMALL = ["--gpu", "H100", "--dataset", "random"]


def _vllm_rule(mode: str | None, prefix_caching: bool) -> str:
    """MambaModelConfig.verify_and_update_config, transcribed (the mode a hybrid runs;
    ``None``: the flag not given, CacheConfig's default "none")."""
    m = mode or "none"
    if prefix_caching:
        return "align" if m == "none" else m
    return "none" if m != "none" else m


@settings(max_examples=60, deadline=None)
@given(st.sampled_from([None, "none", "align"]), st.booleans(), st.booleans())
def test_resolve_follows_vllms_mamba_model_config(mode: str | None, pc: bool,
                                                  has_mamba: bool) -> None:
    run, note = resolve_mamba_cache_mode(mode, pc, has_mamba)
    if has_mamba:
        assert run == _vllm_rule(mode, pc)
        assert (note is not None) == (mode is not None and mode != run)
    else:
        assert run == "none" and note is None


@pytest.mark.parametrize("mode", ["all", "ALL", "aligned", "", "None"])
def test_modes_vllm_refuses_are_refused(mode: str) -> None:
    with pytest.raises(ConfigError) as e:
        resolve_mamba_cache_mode(mode, True, True)
    assert e.value.extra["field"] == "mamba_cache_mode"
    assert "align" in e.value.message and "none" in e.value.message


# ---- 5 ------------------------------------------------------------------------------

def test_f5_mamba_cache_mode_all_is_not_a_vllm_0_32_value(capsys: Any) -> None:
    """(Tester 2, finding 5.)  kvcore tune ranked an ``all`` candidate first and printed
    ``vllm serve state-spaces/mamba2attn-2.7b ... --mamba-cache-mode all``; kvcore
    simulate accepted it too.  Both refuse it now (exit 2 naming mamba_cache_mode)."""
    code, out, err = _run(capsys, [
        "tune", "mamba2attn-2.7b", *SMALL, "--random-input-len", "256",
        "--random-output-len", "16", "--num-prompts", "12", "--random-prefix-len", "512",
        "--max-concurrency", "4", "--max-model-len", "4096", "--tp", "1",
        "--mamba-cache-mode", "all,align", "--max-num-seqs", "64",
        "--max-num-batched-tokens", "2048", "--json"])
    assert code == 2 and "mamba_cache_mode" in (err + out)
    code, out, err = _run(capsys, ["simulate", "mamba2attn-2.7b", *SMALL, "--num-prompts",
                                   "4", "--random-input-len", "64", "--random-output-len",
                                   "4", "--max-model-len", "4096", "--mamba-cache-mode",
                                   "all"])
    assert code == 2 and "all" in err and "align" in err
    assert len(err.strip().splitlines()) == 1


@pytest.mark.parametrize("model", ["qwen3-next-80b-a3b-thinking", "mamba2attn-2.7b",
                                   "llama-3.1-8b"])
@pytest.mark.parametrize("cmd", ["simulate", "tune"])
def test_all_is_refused_on_every_command(capsys: Any, model: str, cmd: str) -> None:
    argv = [cmd, model, *SMALL, "--num-prompts", "2", "--random-input-len", "16",
            "--random-output-len", "2", "--max-model-len", "4096",
            "--mamba-cache-mode", "align,all" if cmd == "tune" else "all"]
    code, out, err = _run(capsys, argv)
    assert code == 2 and "mamba_cache_mode" in err + out, err + out
    assert "align" in err + out


# ---- 6 ------------------------------------------------------------------------------

QWEN3_NEXT = ["qwen3-next-80b-a3b-thinking", *SMALL, "--tp", "4", "--max-model-len", "8192",
              "--max-num-seqs", "64"]


@pytest.mark.parametrize("prefix,inp,conc", [(2048, 256, 2), (1024, 512, 1), (3000, 100, 3)])
def test_f6_hybrid_default_is_vllm_align_mode(capsys: Any, prefix: int, inp: int,
                                              conc: int) -> None:
    """(Tester 2, finding 6.)  `vllm serve MODEL` runs a hybrid in align mode (prefix
    caching on by default, then none -> align), so kvcore simulate without
    --mamba-cache-mode simulates what --mamba-cache-mode align simulates (before:
    mode none, qwen3-next TP 4 mean TTFT 68.8 ms vs 111.1 ms with align); an explicit
    ``none`` with prefix caching on runs align too, as in vLLM, and says so."""
    argv = ["simulate", *QWEN3_NEXT, "--num-prompts", "8", "--random-input-len", str(inp),
            "--random-output-len", "8", "--random-prefix-len", str(prefix),
            "--max-concurrency", str(conc)]
    default = _json(capsys, argv)
    align = _json(capsys, [*argv, "--mamba-cache-mode", "align"])
    none = _json(capsys, [*argv, "--mamba-cache-mode", "none"])
    for k in ("mean_ttft_ms", "duration", "prefix_hit_ratio", "steps"):
        assert default[k] == pytest.approx(align[k], rel=1e-9), k
        assert none[k] == pytest.approx(align[k], rel=1e-9), k
    assert default["mamba_cache_mode"] == "align"
    assert "runs as align" in none["note"]


@pytest.mark.parametrize("seed", [0, 1])
def test_prefix_caching_off_runs_mode_none(capsys: Any, seed: int) -> None:
    """vLLM: prefix caching off and mode align -> none (a warning); both simulate the
    same and nothing hits the prefix cache."""
    argv = ["simulate", *QWEN3_NEXT, "--num-prompts", "6", "--random-input-len", "128",
            "--random-output-len", "4", "--random-prefix-len", "1024", "--max-concurrency",
            "2", "--seed", str(seed), "--no-prefix-caching"]
    off = _json(capsys, argv)
    off_align = _json(capsys, [*argv, "--mamba-cache-mode", "align"])
    assert off["mamba_cache_mode"] == off_align["mamba_cache_mode"] == "none"
    assert off["prefix_hit_ratio"] == off_align["prefix_hit_ratio"] == 0
    assert off["mean_ttft_ms"] == pytest.approx(off_align["mean_ttft_ms"], rel=1e-12)
    assert "runs as none" in off_align["note"]


def test_fleet_and_replay_follow_the_rule(capsys: Any, tmp_path: Path) -> None:
    """The same rule on the fleet path (--replicas) and on the clockless replay."""
    argv = ["simulate", *QWEN3_NEXT, "--num-prompts", "6", "--random-input-len", "128",
            "--random-output-len", "4", "--random-prefix-len", "1024", "--replicas", "2"]
    d, a = _json(capsys, argv), _json(capsys, [*argv, "--mamba-cache-mode", "align"])
    assert d["prefix_hit_ratio"] == a["prefix_hit_ratio"] and d["mean_ttft_ms"] == \
        pytest.approx(a["mean_ttft_ms"], rel=1e-12)
    trace = tmp_path / "t.jsonl"
    trace.write_text("".join(json.dumps({"timestamp": 10 * i, "input_length": 2048,
                                         "output_length": 4, "hash_ids": [1, 2, 3, 9 + i]})
                             + "\n" for i in range(6)))
    base = ["simulate", "qwen3-next-80b-a3b-thinking", "--trace", str(trace),
            "--kv-cache-memory", "20GiB", "--max-model-len", "8192", "--tp", "4"]
    d, a = _json(capsys, base), _json(capsys, [*base, "--mamba-cache-mode", "align"])
    assert d["mamba_cache_mode"] == a["mamba_cache_mode"] == "align"
    for k in ("prefix_hit_tokens", "num_blocks", "block_size", "steps", "preempted"):
        assert d[k] == a[k], k
    off = _json(capsys, [*base, "--no-prefix-caching"])
    assert off["mamba_cache_mode"] == "none" and off["prefix_hit_tokens"] == 0


# ---- 7 ------------------------------------------------------------------------------

def test_f7_tune_line_for_mamba_none_runs_align_in_vllm(capsys: Any) -> None:
    """(Tester 2, finding 7.)  tune ranked a "mamba none, prefix on" candidate
    (simulated without Mamba prefix caching) and printed a line vLLM runs in align
    mode.  Now each candidate's mode is the one vLLM runs: align exactly when the line
    leaves prefix caching on."""
    code, out, err = _run(capsys, [
        "tune", "qwen3-next-80b-a3b-thinking", *SMALL, "--random-input-len", "256",
        "--random-output-len", "8", "--num-prompts", "8", "--random-prefix-len", "1024",
        "--max-concurrency", "2", "--max-model-len", "8192", "--tp", "4",
        "--max-num-seqs", "64", "--max-num-batched-tokens", "8192", "--kv-cache-dtype",
        "auto", "--json"])
    assert code == 0, err
    d = json.loads(out)
    cands = [d["best"], *d["runner_ups"]]
    assert any(c["config"]["mamba_cache_mode"] == "none" for c in cands)
    assert d["candidates"] == 2  # (none, align) x (prefix on, off) -> what vLLM runs
    for c in cands:
        a = shlex.split(c["vllm_serve"])
        vllm_runs_align = "--no-enable-prefix-caching" not in a
        assert vllm_runs_align == (c["config"]["mamba_cache_mode"] == "align"), \
            (c["config"], c["vllm_serve"])
        if "--mamba-cache-mode" in a:
            assert a[a.index("--mamba-cache-mode") + 1] in ("align", "none")


@settings(max_examples=30, deadline=None)
@given(model=st.sampled_from(["qwen3-next-80b-a3b-thinking", "nemotron-h-56b-base-8k",
                              "mamba2attn-2.7b", "llama-3.1-8b"]),
       pcs=st.lists(st.booleans(), min_size=1, max_size=2, unique=True),
       modes=st.lists(st.sampled_from(["none", "align"]), min_size=1, max_size=2,
                      unique=True),
       dtypes=st.lists(st.sampled_from(["auto", "fp8"]), min_size=1, max_size=2,
                       unique=True))
def test_generated_candidates_are_what_vllm_runs(model: str, pcs: list[bool],
                                                 modes: list[str], dtypes: list[str]
                                                 ) -> None:
    """Over generated searches: one candidate per configuration vLLM can run (the
    rewritten combinations merged), each with the mode vLLM's rule gives, and its
    line names no mode vLLM refuses."""
    from kvcore.sim.modes import default_prefix_caching, mamba_layout
    from kvcore.sim.tune import candidates, vllm_command

    cands = candidates(model, "H100-SXM", tp=[1], max_num_batched_tokens=[2048],
                       max_num_seqs=[16], block_size=[None], kv_cache_dtype=dtypes,
                       prefix_caching=pcs, mamba_cache_mode=modes, workload={},
                       goodput={})
    has_mamba = mamba_layout(model)[0]
    expect = {(d, pc, _vllm_rule(m, pc) if has_mamba else "none")
              for d in dtypes for pc in pcs for m in modes}
    got = [(c["kv_cache_dtype"], c["enable_prefix_caching"], c["mamba_cache_mode"])
           for c in cands]
    assert sorted(got) == sorted(expect)
    for c in cands:
        a = shlex.split(vllm_command(model, c,
                                     prefix_caching_default=default_prefix_caching(model)))
        mode = a[a.index("--mamba-cache-mode") + 1] if "--mamba-cache-mode" in a else "none"
        assert mode == c["mamba_cache_mode"]


@pytest.mark.parametrize("pc", [True, False])
def test_python_api_simulate_once_runs_vllms_mode(pc: bool) -> None:
    """kvcore.sim.tune.simulate_once (the Python API under tune, any backend): a config
    given straight to it is simulated with the mode vLLM runs, and its result says so;
    ``all`` (and a block size CUDA backends refuse) come back as an error entry."""
    from kvcore.sim.tune import simulate_once

    base = dict(model="qwen3-next-80b-a3b-thinking", gpu="H100", tensor_parallel_size=4,
                max_num_batched_tokens=2048, max_num_seqs=16, block_size=None,
                kv_cache_dtype="auto", enable_prefix_caching=pc, max_model_len=8192,
                workload=dict(input_len=64, output_len=2, num_prompts=3, prefix_len=600),
                goodput={})
    want = _vllm_rule(None, pc)
    res = [simulate_once({**base, "mamba_cache_mode": m}) for m in ("none", "align")]
    assert [r["config"]["mamba_cache_mode"] for r in res] == [want, want]
    assert res[0]["figures"] == res[1]["figures"]
    for bad in ({"mamba_cache_mode": "all"}, {"block_size": 24}):
        r = simulate_once({**base, "mamba_cache_mode": "align", **bad})
        assert "figures" not in r and next(iter(bad)) in r["error"]


def test_attention_free_models_default_to_prefix_caching_off(capsys: Any) -> None:
    """vllm/config/model.py ``is_prefix_caching_supported``: attention-free generative
    models (Mamba2ForCausalLM is ``IsAttentionFree``, model_executor/models/mamba2.py)
    default to prefix caching off, so mode none; ``--enable-prefix-caching`` turns it
    on and vLLM then runs align.  tune prints the flag when it differs from that
    default."""
    from kvcore.sim.modes import default_prefix_caching
    from kvcore.sim.tune import vllm_command

    argv = ["simulate", "mamba2-2.7b", *SMALL, "--num-prompts", "3", "--random-input-len",
            "64", "--random-output-len", "4", "--max-model-len", "4096", "--max-num-seqs",
            "64", "--max-concurrency", "1"]
    d = _json(capsys, argv)
    off = _json(capsys, [*argv, "--no-prefix-caching"])
    on = _json(capsys, [*argv, "--enable-prefix-caching"])
    assert d["mamba_cache_mode"] == off["mamba_cache_mode"] == "none"
    assert d["mean_ttft_ms"] == off["mean_ttft_ms"]
    assert on["mamba_cache_mode"] == "align"
    assert not default_prefix_caching("mamba2-2.7b")
    assert default_prefix_caching("qwen3-next-80b-a3b-thinking")
    cfg = {"tensor_parallel_size": 1, "enable_prefix_caching": True,
           "mamba_cache_mode": "align"}
    line = vllm_command("mamba2-2.7b", cfg, prefix_caching_default=False)
    assert "--enable-prefix-caching" in line.split()
    cfg = {**cfg, "enable_prefix_caching": False, "mamba_cache_mode": "none"}
    assert "prefix-caching" not in vllm_command("mamba2-2.7b", cfg,
                                                prefix_caching_default=False)
    code, _, err = _run(capsys, [*argv, "--enable-prefix-caching", "--no-prefix-caching"])
    assert code == 2 and "enable_prefix_caching" in err
