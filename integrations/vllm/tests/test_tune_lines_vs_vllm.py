"""Every ``vllm serve`` line ``kvcore tune`` can print is one vLLM 0.32 takes as it is and
runs as kvcore simulated it (tester 2's findings 5, 7, 10).

* vLLM's own serve parser (``EngineArgs.add_cli_args``) parses the line, and each
  searched knob reads back as the candidate's value;
* vLLM's own ``MambaModelConfig.verify_and_update_config``
  (vllm/model_executor/models/config.py), fed the parsed cache settings, leaves the
  Mamba cache mode the candidate was simulated with (vLLM turns ``none`` into
  ``align`` with prefix caching on and ``align`` into ``none`` with it off);
* the block size is one vLLM's CUDA attention backends split into kernel blocks
  (vllm/v1/worker/utils.py ``_block_size_is_supported`` with FlashAttention's
  ``[MultipleOf(16)]``).

Candidates are generated (hypothesis) over the tuner's knobs with
:func:`kvcore.sim.tune.candidates` (no simulation), and one real ``kvcore tune`` run on a
hybrid is checked line by line.
"""

from __future__ import annotations

import json
import shlex
from types import SimpleNamespace
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kvcore.errors import ConfigError
from kvcore.sim.modes import default_prefix_caching, mamba_layout
from kvcore.sim.tune import candidates, vllm_command

#: (kvcore name, has Mamba layers) -- the hybrids run MambaModelConfig through
#: HybridAttentionMambaModelConfig (vllm/config/vllm.py), llama never
MODELS = ["qwen3-next-80b-a3b-thinking", "nemotron-h-56b-base-8k", "llama-3.1-8b"]


@pytest.fixture(scope="module")
def parser() -> Any:
    from vllm.engine.arg_utils import EngineArgs
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    return EngineArgs.add_cli_args(FlexibleArgumentParser())


def _vllm_runs(parser: Any, line: str, model: str) -> tuple[Any, str | None]:
    """(parsed namespace, the Mamba cache mode vLLM runs, or None without Mamba
    layers) for a printed line."""
    from vllm.config.cache import CacheConfig
    from vllm.model_executor.models.config import MambaModelConfig

    argv = shlex.split(line)
    assert argv[:2] == ["vllm", "serve"]
    ns = parser.parse_args(["--model", argv[2], *argv[3:]])
    if not mamba_layout(model)[0]:
        return ns, None
    # enable_prefix_caching None: vLLM's default, on for hybrid generative models
    # (vllm/config/model.py is_prefix_caching_supported: attn_type "hybrid" -> True)
    pc = True if ns.enable_prefix_caching is None else ns.enable_prefix_caching
    cc = CacheConfig(block_size=ns.block_size or 16, mamba_cache_mode=ns.mamba_cache_mode,
                     enable_prefix_caching=pc)
    vcfg = SimpleNamespace(model_config=SimpleNamespace(architecture=model,
                                                        max_model_len=8192),
                           cache_config=cc,
                           scheduler_config=SimpleNamespace(enable_chunked_prefill=(
                               ns.enable_chunked_prefill is not False)))
    MambaModelConfig.verify_and_update_config(vcfg)
    return ns, cc.mamba_cache_mode


def _check(parser: Any, model: str, cand: dict[str, Any], line: str) -> None:
    ns, mode = _vllm_runs(parser, line, model)
    assert ns.tensor_parallel_size == cand["tensor_parallel_size"]
    assert ns.max_num_batched_tokens == cand["max_num_batched_tokens"]
    assert ns.max_num_seqs == cand["max_num_seqs"]
    assert ns.kv_cache_dtype == cand["kv_cache_dtype"]
    assert ns.block_size == cand["block_size"]
    if ns.block_size is not None:
        assert ns.block_size % 16 == 0  # FlashAttention's MultipleOf(16)
    pc = ns.enable_prefix_caching
    assert (default_prefix_caching(model) if pc is None else pc) == \
        cand["enable_prefix_caching"]
    # enable_chunked_prefill None: vLLM's default, on
    assert (ns.enable_chunked_prefill is not False) == cand["enable_chunked_prefill"]
    if mode is not None:
        assert mode == cand["mamba_cache_mode"], (line, cand)


@settings(max_examples=25, deadline=None)
@given(model=st.sampled_from(MODELS),
       tp=st.lists(st.sampled_from([1, 2, 4, 8]), min_size=1, max_size=2, unique=True),
       mnbt=st.lists(st.sampled_from([512, 2048, 8192]), min_size=1, max_size=2,
                     unique=True),
       seqs=st.lists(st.sampled_from([16, 64, 256]), min_size=1, max_size=2, unique=True),
       bs=st.lists(st.sampled_from([None, 16, 32, 64, 528]), min_size=1, max_size=2,
                   unique=True),
       dtypes=st.lists(st.sampled_from(["auto", "fp8"]), min_size=1, max_size=2,
                       unique=True),
       pcs=st.lists(st.booleans(), min_size=1, max_size=2, unique=True),
       modes=st.lists(st.sampled_from(["none", "align"]), min_size=1, max_size=2,
                      unique=True),
       cps=st.lists(st.booleans(), min_size=1, max_size=2, unique=True))
def test_generated_candidates_print_lines_vllm_runs_as_simulated(
        parser: Any, model: str, tp: list[int], mnbt: list[int], seqs: list[int],
        bs: list[int | None], dtypes: list[str], pcs: list[bool], modes: list[str],
        cps: list[bool]) -> None:
    cands = candidates(model, "H100-SXM", tp=tp, max_num_batched_tokens=mnbt,
                       max_num_seqs=seqs, block_size=bs, kv_cache_dtype=dtypes,
                       prefix_caching=pcs, mamba_cache_mode=modes, workload={},
                       goodput={}, max_model_len=8192, chunked_prefill=cps)
    keys = [tuple(sorted((k, str(v)) for k, v in c.items())) for c in cands]
    assert len(keys) == len(set(keys))  # combinations vLLM rewrites are merged
    for c in cands:
        _check(parser, model, c, vllm_command(model, c, prefix_caching_default=
                                              default_prefix_caching(model)))


@pytest.mark.parametrize("bad", [{"mamba_cache_mode": ["all"]}, {"block_size": [7]},
                                 {"block_size": [24, 16]}])
def test_values_vllm_refuses_are_refused(parser: Any, bad: dict[str, Any]) -> None:
    kw: dict[str, Any] = dict(tp=[1], max_num_batched_tokens=[2048], max_num_seqs=[16],
                              block_size=[None], kv_cache_dtype=["auto"],
                              prefix_caching=[True], mamba_cache_mode=["align"],
                              workload={}, goodput={})
    kw.update(bad)
    with pytest.raises(ConfigError) as e:
        candidates("qwen3-next-80b-a3b-thinking", "H100-SXM", **kw)
    assert e.value.extra["field"] in ("mamba_cache_mode", "block_size")
    if "mamba_cache_mode" in bad:  # vLLM's parser refuses it too
        with pytest.raises(SystemExit):
            parser.parse_args(["--model", "m", "--mamba-cache-mode", "all"])


def test_a_real_tune_run_prints_only_lines_vllm_runs_as_simulated(parser: Any,
                                                                  capsys: Any) -> None:
    from kvcore.cli import main

    model = "qwen3-next-80b-a3b-thinking"
    rc = main(["tune", model, "--gpu", "H100", "--dataset", "random",
               "--random-input-len", "128", "--random-output-len", "4", "--num-prompts",
               "4", "--random-prefix-len", "512", "--max-concurrency", "2",
               "--max-model-len", "8192", "--tp", "4", "--max-num-seqs", "16",
               "--max-num-batched-tokens", "2048", "--kv-cache-dtype", "auto,fp8",
               "--backend", "serial", "--json"])
    out = json.loads(capsys.readouterr().out)
    assert rc == 0
    entries = [out["best"], *out["runner_ups"]]
    assert len(entries) == 4  # 2 dtypes x prefix on/off; mode follows prefix caching
    for e in entries:
        _check(parser, model, {**e["config"], "block_size": e["config"]["block_size"]},
               e["vllm_serve"])


@settings(max_examples=40, deadline=None)
@given(mnbt=st.lists(st.sampled_from([256, 1024, 4096, 8192, 16384]), min_size=1,
                     max_size=3, unique=True),
       seqs=st.lists(st.sampled_from([64, 512, 2048]), min_size=1, max_size=2, unique=True),
       mml=st.sampled_from([2048, 8192, 16384]),
       cps=st.lists(st.booleans(), min_size=1, max_size=2, unique=True))
def test_candidates_are_the_scheduler_configs_vllm_starts(
        mnbt: list[int], seqs: list[int], mml: int, cps: list[bool]) -> None:
    # a (max_num_batched_tokens, max_num_seqs, chunked prefill) combination is a
    # candidate exactly when vLLM 0.32's SchedulerConfig accepts it at that max_model_len
    from vllm.config import SchedulerConfig

    def vllm_starts(b: int, s: int, cp: bool) -> bool:
        try:
            SchedulerConfig(max_num_batched_tokens=b, max_num_seqs=s, max_model_len=mml,
                            is_encoder_decoder=False, enable_chunked_prefill=cp)
        except Exception:  # pydantic's ValidationError / vLLM's ValueError
            return False
        return True

    cands = candidates("llama-3.1-8b", "H100-SXM", tp=[1], max_num_batched_tokens=mnbt,
                       max_num_seqs=seqs, block_size=[None], kv_cache_dtype=["auto"],
                       prefix_caching=[True], mamba_cache_mode=["none"], workload={},
                       goodput={}, max_model_len=mml, chunked_prefill=cps)
    got = {(c["max_num_batched_tokens"], c["max_num_seqs"], c["enable_chunked_prefill"])
           for c in cands}
    assert got == {(b, s, cp) for b in mnbt for s in seqs for cp in cps
                   if vllm_starts(b, s, cp)}
