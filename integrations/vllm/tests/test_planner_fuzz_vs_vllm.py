"""A bounded, seeded slice of the differential planner fuzz (issue 14), in-process.

``scripts/fuzz_vs_vllm.py`` draws random layer sets over every kind both libraries have
and runs vLLM 0.32's planner through ``../shared/vllm-reference/oracle.py``.  CI cannot
read that folder, so this test reuses the script's generator (``random_case``), its
kvcore side (``to_kvcore`` / ``plan_kvcore``) and its rule (``compare``), and runs
vLLM's own planner in this process on the same layers converted by
:func:`kvcore_vllm.to_vllm_spec`:

* vLLM: ``kv_cache_utils.get_kv_cache_configs`` on a ``VllmConfig`` with the case's
  options, max concurrency by ``get_max_concurrency_for_kv_cache_config`` (the figure
  the fuzzer compares);
* kvcore: ``kvcore.plan`` from the case's specs file (the fuzzer's ``plan_kvcore``).

Rule: whenever vLLM plans, kvcore plans, and kvcore's max concurrency (or, with
``max_model_len -1``, its length) is >= vLLM's; layouts where vLLM's plan is unsafe
(sink layers: vLLM reserves no sink blocks) are counted apart; kinds ``to_vllm_spec``
cannot convert are skipped with a count.  ``KVCORE_FUZZ_VLLM_N`` raises the number of
layouts (default 60); fewer than 30 compared layouts fail the test.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import os
import random
import sys
import types
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from kvcore.errors import SpecError

ROOT = Path(__file__).resolve().parents[3]
N_LAYOUTS = int(os.environ.get("KVCORE_FUZZ_VLLM_N", "60"))
MIN_COMPARED = 30
SEED = 14


def _fuzzer() -> types.ModuleType:
    path = ROOT / "scripts" / "fuzz_vs_vllm.py"
    spec = importlib.util.spec_from_file_location("kvcore_fuzz_vs_vllm", path)
    assert spec is not None and spec.loader is not None, path
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    return mod


def _vllm_config(opts: dict[str, Any], first_block_size: int) -> Any:
    """A VllmConfig with the case's options; the model config is a stand-in holding
    the fields ``get_kv_cache_configs`` reads."""
    import torch
    from vllm.config import CacheConfig, SchedulerConfig, VllmConfig
    from vllm.v1.core.single_type_kv_cache_manager import register_all_kvcache_specs

    max_len = opts["max_model_len"]
    vc = VllmConfig(
        cache_config=CacheConfig(block_size=first_block_size,
                                 enable_prefix_caching=opts.get("enable_prefix_caching",
                                                                True)),
        scheduler_config=SchedulerConfig.default_factory(
            max_model_len=max(max_len, 1),
            max_num_batched_tokens=opts["max_num_batched_tokens"]))
    upper = opts.get("max_model_len_limit", 1 << 20)
    vc.model_config = types.SimpleNamespace(
        max_model_len=upper if max_len == -1 else max_len,
        original_max_model_len=max_len,
        hf_config=types.SimpleNamespace(model_type="llama"), dtype=torch.bfloat16,
        architecture="Stand-in", use_mla=False)
    sc = vc.scheduler_config
    sc.async_scheduling = False
    sc.disable_hybrid_kv_cache_manager = bool(opts.get("disable_hybrid_kv_cache_manager"))
    if opts.get("max_num_encoder_input_tokens") is not None:
        sc.max_num_encoder_input_tokens = opts["max_num_encoder_input_tokens"]
    vc.cache_config.mamba_cache_mode = "none"
    vc.cache_config.kv_cache_layout = opts.get("kv_cache_layout", "LBNHC")
    register_all_kvcache_specs(vc)
    return vc


def _align_hybrid(specs: dict[str, Any], kernel_block: int) -> None:
    """vLLM's ``Platform._align_hybrid_block_size`` (vllm/platforms/interface.py) on
    built specs: attention block size raised to a multiple of ``kernel_block`` whose
    page is >= the Mamba page; Mamba pages padded to it (mamba_cache_mode none)."""
    from vllm.utils.math_utils import cdiv
    from vllm.v1.kv_cache_interface import AttentionSpec, MambaSpec

    attn = [s for s in specs.values() if isinstance(s, AttentionSpec)]
    mamba = [s for s in specs.values() if isinstance(s, MambaSpec)]
    if not attn or not mamba:
        return
    per_token = dataclasses.replace(attn[0], block_size=1).page_size_bytes
    mamba_page = max(dataclasses.replace(m, page_size_padded=None).page_size_bytes
                     for m in mamba)
    cur = attn[0].block_size
    align = max(kernel_block, cur)
    new_block = max(cur, align * cdiv(mamba_page, align * per_token))
    attn_page = new_block * per_token
    for name, s in list(specs.items()):
        if isinstance(s, AttentionSpec) and s.block_size == cur:
            specs[name] = dataclasses.replace(s, block_size=new_block)
        elif isinstance(s, MambaSpec) and attn_page != mamba_page:
            specs[name] = dataclasses.replace(s, page_size_padded=attn_page)


def _run_vllm(specs_file: dict[str, Any]) -> dict[str, Any]:
    """vLLM 0.32's plan summary of a kvcore specs file (the oracle's fields the fuzzer's
    ``compare`` reads), or {"error": ...}; raises SpecError for a kind to_vllm_spec
    cannot convert."""
    from kvcore_vllm import to_vllm_spec
    from vllm.v1.core import kv_cache_utils as kcu

    from kvcore.specs import KVCacheSpec

    opts = specs_file["options"]
    specs = {n: to_vllm_spec(KVCacheSpec.from_dict(d))
             for n, d in specs_file["layers"].items()}
    vc = _vllm_config(opts, next(iter(specs.values())).block_size)
    if "kernel_block_size" in opts:
        _align_hybrid(specs, opts["kernel_block_size"])
    try:
        cfg = kcu.get_kv_cache_configs(vc, [specs], [opts["kv_cache_memory_bytes"]])[0]
    except Exception as e:  # vLLM's planner raises many types; the fuzzer sorts them
        return {"error": {"type": type(e).__name__, "message": str(e)}}
    out: dict[str, Any] = {"resolved": {"max_model_len_after":
                                        vc.model_config.max_model_len}}
    out["max_concurrency"] = (kcu.get_max_concurrency_for_kv_cache_config(vc, cfg)
                              if cfg.kv_cache_groups else None)
    return out


def test_kvcore_plans_whenever_vllm_does_with_no_lower_concurrency():
    fz = _fuzzer()
    rng = random.Random(SEED)
    counts: Counter[str] = Counter()
    skipped: Counter[str] = Counter()
    fails = []
    for i in range(N_LAYOUTS):
        case = fz.random_case(random.Random(rng.getrandbits(64)), f"ci{SEED}_{i:05d}")
        specs_file = fz.to_kvcore(case)
        try:
            vllm = _run_vllm(specs_file)
        except SpecError as e:
            skipped[f"{e.__class__.__name__}: {str(e)[:80]}"] += 1
            continue
        kv = fz.plan_kvcore(specs_file)
        outcome, detail, gain = fz.compare(case, vllm, kv)
        counts[outcome] += 1
        if outcome == "FAIL":
            fails.append(f"{case['name']} ({case['family']}): {detail}")
    compared = counts["ok"] + counts["FAIL"]
    summary = (f"{N_LAYOUTS} layouts (seed {SEED}): {dict(counts)}; "
               f"skipped {sum(skipped.values())} {dict(skipped)}")
    print(summary)
    assert not fails, summary + "\n" + "\n".join(fails[:15])
    if compared < MIN_COMPARED:
        pytest.fail(f"only {compared} layouts compared against vLLM (< {MIN_COMPARED}); "
                    + summary)


def test_in_process_vllm_side_reads_vllm_plan():
    """The vLLM side is vLLM's figure, not a default: 4 full-attention layers, block
    16, 8 KV heads x 128, bf16 (page 16 x 8 x 128 x 2 x 2 = 65,536 B a layer), a budget
    of 1,000 blocks of all 4 layers (+5 B), max_model_len 4,096 -> vLLM's
    ``num_blocks / cdiv(max_model_len, block_size)`` = 1000 / 256."""
    layer = {"type": "full_attention", "block_size": 16, "num_kv_heads": 8,
             "head_size": 128, "dtype": "bfloat16"}
    specs_file = {"options": {"max_model_len": 4096, "max_num_batched_tokens": 2048,
                              "kv_cache_memory_bytes": 1000 * 4 * 65536 + 5},
                  "layers": {f"model.layers.{i}.attn": dict(layer) for i in range(4)}}
    out = _run_vllm(specs_file)
    assert "error" not in out, out
    assert out["max_concurrency"] == pytest.approx(1000 / 256)


def test_chunked_pair_of_two_pages_not_below_vllm():
    """Found by this fuzz (seed 14, layout 873 of 1,000; was 8.843 vs vLLM's 8.846):
    chunked-local layers of one block and chunk size share one table, as in vLLM's
    ``UniformTypeKVCacheSpecs``.
    Two chunked-local layers (chunk 128, block 16, bf16): 1 x 64 (4,096 B pages)
    and 4 x 128 (32,768 B), 44,363,742 B, max_model_len 4,096, 2,048 batched tokens.
    vLLM 0.32 packs them in one group of 36,864 B blocks: 1,203 blocks, 136 a request
    (cdiv(min(128 + 2048, 4096), 16)) -> 1203 / 136 = 8.8456 requests."""
    fz = _fuzzer()
    common = {"type": "chunked_local_attention", "attention_chunk_size": 128,
              "block_size": 16, "dtype": "bfloat16"}
    specs_file = {"options": {"max_model_len": 4096, "max_num_batched_tokens": 2048,
                              "kv_cache_memory_bytes": 44363742},
                  "layers": {"model.layers.0.attn": dict(common, num_kv_heads=1,
                                                         head_size=64),
                             "model.layers.1.attn": dict(common, num_kv_heads=4,
                                                         head_size=128)}}
    assert _run_vllm(specs_file)["max_concurrency"] == pytest.approx(1203 / 136)
    kv = fz.plan_kvcore(specs_file)
    assert kv["max_concurrency"] >= 1203 / 136 * (1 - 1e-9), kv


SIM_LAYOUTS = int(os.environ.get("KVCORE_FUZZ_SIM_N", "14"))
SIM_KINDS = {"full_attention", "sliding_window", "chunked_local_attention"}
SIM_MAX_LEN = 4096  # longer cases cost minutes of simulated decode steps
SIM_REQUESTS = 8


def test_fuzz_layouts_served_no_slower_than_vllms():
    """Issue 22, item 5: on the fuzzer's random attention layouts, vLLM's own plan (its
    planner's KVCacheConfig, converted by ``from_vllm_config``) and kvcore's plan (judged
    by the simulator) are both served in the clocked simulator on the default workload
    of the case (8 requests, max_model_len <= 4,096, a 10 ms step: the time counts steps, plus the measured
    CPU per request and group): kvcore's is never slower.  ``KVCORE_FUZZ_SIM_N``
    layouts are drawn (default 14); those with other kinds or that vLLM refuses are
    skipped; at least 5 must be compared."""
    from kvcore_vllm import to_vllm_spec
    from kvcore_vllm.specs import from_vllm_config
    from vllm.v1.core import kv_cache_utils as kcu

    from kvcore.errors import NotEnoughMemoryError
    from kvcore.plan_serving import sim_judge, simulate_plan
    from kvcore.planning import plan_from_specs_file
    from kvcore.serving import CPU_US_PER_REQUEST_STEP, default_workload
    from kvcore.sim.timing import ConstantTimeModel
    from kvcore.specs import KVCacheSpec

    fz = _fuzzer()
    rng = random.Random(SEED + 22)
    a, b = CPU_US_PER_REQUEST_STEP["vllm_scheduler"]
    compared = 0
    fails = []
    for i in range(SIM_LAYOUTS):
        case = fz.random_case(random.Random(rng.getrandbits(64)), f"sim{SEED}_{i:05d}")
        specs_file = fz.to_kvcore(case)
        opts = specs_file["options"]
        if {d["type"] for d in specs_file["layers"].values()} - SIM_KINDS or \
                not 0 < opts.get("max_model_len", 0) <= SIM_MAX_LEN or \
                "kv_cache_memory_bytes" not in opts \
                or isinstance(opts["kv_cache_memory_bytes"], list) or \
                opts.get("pipeline_parallel_size", 1) != 1:
            continue
        specs = {n: to_vllm_spec(KVCacheSpec.from_dict(d))
                 for n, d in specs_file["layers"].items()}
        vc = _vllm_config(opts, next(iter(specs.values())).block_size)
        try:
            vcfg = kcu.get_kv_cache_configs(vc, [specs], [opts["kv_cache_memory_bytes"]])[0]
            ours = plan_from_specs_file(specs_file, judge=sim_judge(
                None, max_requests=SIM_REQUESTS, max_requests_cap=SIM_REQUESTS))
        except (NotEnoughMemoryError, ValueError, AssertionError):
            continue
        theirs = from_vllm_config(vcfg, max_model_len=opts["max_model_len"])
        theirs.stats.plan_context = ours.stats.plan_context
        wl = default_workload(opts["max_model_len"], opts["max_num_batched_tokens"])
        tm = ConstantTimeModel(step_s=0.01)
        t_ours, _ = simulate_plan(ours, wl, tm, (a + b * len(ours.kv_cache_groups)) * 1e-6,
                                  SIM_REQUESTS)
        t_theirs, _ = simulate_plan(theirs, wl, tm,
                                    (a + b * len(theirs.kv_cache_groups)) * 1e-6,
                                    SIM_REQUESTS)
        compared += 1
        if t_ours > t_theirs * (1 + 1e-9):
            fails.append(f"{case['name']}: kvcore {t_ours:.3f} s > vLLM {t_theirs:.3f} s "
                         f"({len(ours.kv_cache_groups)} vs {len(theirs.kv_cache_groups)} "
                         f"groups)")
    assert not fails, "\n".join(fails)
    print(f"{compared} layouts served and compared")
    assert compared >= 5, f"only {compared} layouts compared"
