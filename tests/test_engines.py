"""kvcore.deploy.engines / ceilings: engine profiles, the per-rank ledger, the ceilings, and
the acceptance check on public vLLM start-up logs (tests/data/vllm_logs, tests/vllm_logs.py).

Expected values come from vLLM's code (get_batch_defaults@0.32, the MXFP4 round-up rule),
from vLLM's own logs, or from vLLM's rules restated (one Mamba block per sequence)."""

from __future__ import annotations

import importlib.util
import json
import statistics
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kvcore_cli_support import run_cli as _t3_run  # noqa: E402
from kvcore_plugin_needs import skip_unless_served
from vllm_logs import error, load_cases, predict

from kvcore.cli import main as cli_main
from kvcore.deploy.budget import compute_budget, plan_on_gpu
from kvcore.deploy.ceilings import logged_figures
from kvcore.deploy.engines import PROFILES, batch_defaults, get_engine
from kvcore.deploy.gpus import get_gpu
from kvcore.errors import ConfigError

GIB = 1 << 30


# ---- profiles -----------------------------------------------------------------------------

@pytest.mark.parametrize("spec,name", [
    ("vllm==0.4.0", "vllm==0.4"), ("vllm==0.5.4", "vllm==0.4"), ("vllm==0.6.4", "vllm==0.4"),
    ("vllm==0.6.5", "vllm==0.6.5"), ("vllm==0.7.3", "vllm==0.6.5"), ("vllm==0.8.5", "vllm==0.8"),
    ("vllm==0.10.1", "vllm==0.9"), ("vllm==0.20.2", "vllm==0.9"), ("vllm==0.21.0", "vllm==0.21"),
    ("vllm==0.32", "vllm==0.32"), ("vllm==0.10.1.1", "vllm==0.9"), (None, "vllm==0.32")])
def test_releases_map_to_their_generation(spec, name):
    p = get_engine(spec)
    assert p.name == name
    assert p.first <= (p.version if p.version != (0, 0, 0) else p.first) <= p.last


#: vLLM's releases 0.4.0 ... 0.32.0 as PyPI lists them (``pip index versions vllm``,
#: 2026-12), written out here independently of kvcore's table
PYPI_RELEASES = """0.4.0 0.4.0.post1 0.4.1 0.4.2 0.4.3 0.5.0 0.5.0.post1 0.5.1 0.5.2 0.5.3
0.5.3.post1 0.5.4 0.5.5 0.6.0 0.6.1 0.6.1.post1 0.6.1.post2 0.6.2 0.6.3 0.6.3.post1 0.6.4
0.6.4.post1 0.6.5 0.6.6 0.6.6.post1 0.7.0 0.7.1 0.7.2 0.7.3 0.8.0 0.8.1 0.8.2 0.8.3 0.8.4
0.8.5 0.8.5.post1 0.9.0 0.9.0.1 0.9.1 0.9.2 0.10.0 0.10.1 0.10.1.1 0.10.2 0.11.0 0.11.1
0.11.2 0.12.0 0.13.0 0.14.0 0.14.1 0.15.0 0.15.1 0.16.0 0.17.0 0.17.1 0.18.0 0.18.1 0.19.0
0.19.1 0.20.0 0.20.1 0.20.2 0.21.0 0.22.0 0.22.1 0.23.0 0.24.0 0.25.0 0.25.1 0.26.0 0.27.0
0.27.1 0.28.0 0.29.0 0.30.0 0.31.0 0.32.0""".split()
_RELEASED3 = {tuple(int(x) for x in r.split(".post")[0].split(".")[:3]) for r in PYPI_RELEASES
              if len(r.split(".post")[0].split(".")) == 3}


@settings(max_examples=80, deadline=None, derandomize=True)
@given(major=st.integers(0, 3), minor=st.integers(0, 60), patch=st.integers(0, 9))
def test_every_release_maps_to_one_profile_or_an_error_naming_them(major, minor, patch):
    """A released version (PyPI's list) maps to the one profile covering it; any other
    X.Y.Z (never released, or released without a profile) is a ConfigError naming
    --engine, the value and the profiles."""
    v = (major, minor, patch)
    covering = [p for p in PROFILES if p.first <= v <= p.last]
    spec = f"vllm=={major}.{minor}.{patch}"
    if v in _RELEASED3:
        assert len(covering) == 1 and get_engine(spec).name == covering[0].name
    else:
        with pytest.raises(ConfigError) as exc:
            get_engine(spec)
        msg = str(exc.value)
        assert all(p.name in msg for p in PROFILES)
        assert msg.startswith(f"--engine {spec!r}") and "0.4.0 to 0.32.0" in msg
        assert exc.value.extra.get("field") == "engine"


@pytest.mark.parametrize("bad", ["sglang==0.4", "vllm", "vllm==x.y", "vllm==0.3.3", 0.32])
def test_a_bad_engine_is_a_config_error_naming_the_profiles(bad):
    with pytest.raises(ConfigError) as exc:
        get_engine(bad)
    assert "vllm==0.32" in str(exc.value) and exc.value.extra.get("field") == "engine"


@settings(max_examples=40, deadline=None)
@given(gib=st.integers(8, 300), usage=st.sampled_from(["serve", "offline"]),
       a100=st.booleans())
def test_032_batch_defaults_are_get_batch_defaults(gib, usage, a100):
    """vllm/engine/arg_utils.py@0.32 get_batch_defaults: >= 160 GiB 16384/16384 tokens and
    1024 seqs; >= 70 GiB and not A100: 8192 (serve) / 16384 (offline), 1024; else 2048 /
    8192, 256."""
    class Dev:
        name = "A100-80GB" if a100 else "X"
        device_name = "NVIDIA A100-SXM4-80GB" if a100 else "NVIDIA X"
    tokens, seqs, _ = batch_defaults(get_engine("vllm==0.32"), gpu=Dev(),
                                     memory_bytes=gib * GIB, usage=usage)
    if gib >= 160:
        expected = (16384, 1024)
    elif gib >= 70 and not a100:
        expected = (8192 if usage == "serve" else 16384, 1024)
    else:
        expected = (2048 if usage == "serve" else 8192, 256)
    assert (tokens, seqs) == expected
    # vllm#34936 (arg_utils.py@0.32): --performance-mode throughput doubles both
    # defaults; balanced and interactivity leave them
    for mode, k in (("balanced", 1), ("interactivity", 1), ("throughput", 2)):
        t, s_, _ = batch_defaults(get_engine("vllm==0.32"), gpu=Dev(),
                                  memory_bytes=gib * GIB, usage=usage,
                                  performance_mode=mode)
        assert (t, s_) == (k * expected[0], k * expected[1])


def test_throughput_mode_takes_the_doubled_batch_from_the_budget():
    """vLLM 0.32 profiles max_num_batched_tokens tokens and samples max_num_seqs rows;
    doubling both (throughput mode) grows those two ledger lines and shrinks the KV
    budget by exactly their growth; given flags are not doubled (vLLM doubles only
    what the user left unset)."""
    def ledger(**kw):
        return compute_budget("llama-3.1-8b", gpu="H100", **kw).ledger

    base, thr = ledger(), ledger(performance_mode="throughput")
    assert (thr.max_num_batched_tokens, thr.max_num_seqs) == (16384, 2048)
    assert (base.max_num_batched_tokens, base.max_num_seqs) == (8192, 1024)
    # sampler: rows x vocab 128,256 x 8 B (float32 logits + probabilities)
    assert thr.sampler_bytes - base.sampler_bytes == 1024 * 128256 * 8
    grew = (thr.activation_bytes - base.activation_bytes
            + thr.sampler_bytes - base.sampler_bytes)
    assert grew > 0 and base.kv_cache_memory_bytes - thr.kv_cache_memory_bytes == grew
    given = ledger(performance_mode="throughput", max_num_batched_tokens=4096,
                   max_num_seqs=64)
    assert (given.max_num_batched_tokens, given.max_num_seqs) == (4096, 64)


@pytest.mark.parametrize("argv, words", [
    (["--gpu", "H100", "--performance-mode", "throughput", "--engine", "vllm==0.14.1"],
     ["--performance-mode throughput", "vllm==0.32"]),
    (["--performance-mode", "throughput"], ["--performance-mode", "need(s) a GPU"]),
    (["--gpu", "H100", "--performance-mode", "fast"], ["--performance-mode", "throughput"]),
])
def test_performance_mode_bad_input_is_one_line(capsys, argv, words):
    assert cli_main(["plan", "llama-3.1-8b", *argv]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err
    for w in words:
        assert w in err, (w, err)


def test_performance_mode_api_values_are_checked():
    from kvcore.deploy.engines import check_performance_mode

    for bad in ("Throughput", "", None, 1, True):
        with pytest.raises(ConfigError) as e:
            check_performance_mode(bad)
        assert e.value.extra["field"] == "performance_mode"
    with pytest.raises(ConfigError):
        plan_on_gpu("llama-3.1-8b", gpu="H100", performance_mode="max")


def test_v0_profiles_a_whole_max_model_len_batch_and_v1_its_token_budget():
    """V0 (no chunked prefill) profiles max(max_model_len, 2048) tokens; past 32K chunked
    prefill is on (512 tokens before 0.6.5, 2048 after vllm#10544); V1 ignores
    max_model_len."""
    h100 = get_gpu("H100-SXM")
    v0 = get_engine("vllm==0.5.4")
    assert batch_defaults(v0, gpu=h100, memory_bytes=h100.memory_bytes,
                          max_model_len=20000)[0] == 20000
    assert batch_defaults(v0, gpu=h100, memory_bytes=h100.memory_bytes,
                          max_model_len=1000)[0] == 2048
    assert batch_defaults(v0, gpu=h100, memory_bytes=h100.memory_bytes,
                          max_model_len=131072)[0] == 512
    assert batch_defaults(get_engine("vllm==0.7.2"), gpu=h100, memory_bytes=h100.memory_bytes,
                          max_model_len=131072)[0] == 2048
    assert batch_defaults(get_engine("vllm==0.10.1"), gpu=h100,
                          memory_bytes=h100.memory_bytes, max_model_len=131072)[0] == 8192
    l4 = get_gpu("L4")
    assert batch_defaults(get_engine("vllm==0.8.5"), gpu=l4, memory_bytes=l4.memory_bytes,
                          usage="offline")[0] == 8192


# ---- the ledger -----------------------------------------------------------------------------

@settings(max_examples=25, deadline=None)
@given(engine=st.sampled_from([p.name for p in PROFILES]),
       model=st.sampled_from(["llama-3.1-8b", "qwen3-30b-a3b", "gpt-oss-20b"]),
       gpu=st.sampled_from(["H100-SXM", "L40S", "H200", "A100-80GB"]),
       tp=st.sampled_from([1, 2, 4]), util=st.floats(0.5, 0.98), eager=st.booleans())
def test_the_ledger_adds_up_and_the_budget_uses_it(engine, model, gpu, tp, util, eager):
    b = compute_budget(model, gpu=gpu, engine=engine, tensor_parallel_size=tp,
                       gpu_memory_utilization=util, cuda_graphs=not eager)
    led = b.ledger
    usable, *terms, kv = led.lines
    assert usable.name == "usable memory" and kv.name == "KV budget"
    assert kv.bytes == usable.bytes - sum(t.bytes for t in terms)
    assert b.kv_cache_memory_bytes == led.kv_cache_memory_bytes == kv.bytes
    assert all(line.rule and line.source for line in led.lines)
    graphs = next(t for t in terms if t.name == "CUDA graphs")
    # CUDA-graph memory is taken from the budget from 0.21 on, never with --enforce-eager
    assert (graphs.bytes > 0) == (led.engine.first >= (0, 21, 0) and not eager)


def test_mxfp4_padding_matches_the_logged_weights_of_gpt_oss_120b():
    """'Model loading took 65.9651 GiB' (vllm#23278, 0.10.1, H100, Marlin: hidden 2880 ->
    3072, intermediate 2880 -> 2944) and '64.38 GiB' (vllm#33155, 0.14.1, Triton)."""
    for engine, logged in (("vllm==0.10.1", 65.9651), ("vllm==0.14.1", 64.38)):
        led = compute_budget("gpt-oss-120b", gpu="H100-SXM", engine=engine).ledger
        loaded = (led.weights_bytes + led.padding_bytes) / GIB
        assert abs(loaded - logged) / logged < 0.01, (engine, loaded)
    # no padding before 0.10.1, nor on Ampere (gpt-oss-20b loads 12.88 GiB on a 3090)
    assert compute_budget("gpt-oss-120b", gpu="H100-SXM",
                          engine="vllm==0.10.0").ledger.padding_bytes == 0
    led = compute_budget("gpt-oss-20b", gpu_memory_bytes=int(23.58 * GIB),
                         engine="vllm==0.10.1").ledger
    assert abs((led.weights_bytes + led.padding_bytes) / GIB - 12.8848) < 0.1


def test_non_torch_grows_with_tp_on_nvlink_and_barely_on_pcie():
    """V0 logs: 3.58 GiB at TP2 on H100 (vllm#10511), 0.25 GiB at TP2 on RTX 4090
    (vllm#13061)."""
    h = compute_budget("llama-3.1-8b", gpu="H100-SXM", tensor_parallel_size=2,
                       engine="vllm==0.6.5").ledger.non_torch_bytes / GIB
    r = compute_budget("llama-3.1-8b", gpu="RTX-4090", tensor_parallel_size=2,
                       engine="vllm==0.6.5").ledger.non_torch_bytes / GIB
    assert abs(h - 3.58) < 0.1 and abs(r - 0.25) < 0.1


@settings(max_examples=30, deadline=None)
@given(gpu=st.sampled_from(["H100-SXM", "A100-80GB", "A100-40GB", "RTX-4090", "L40S"]),
       tp=st.sampled_from([1, 2, 4, 8]), disabled=st.booleans(),
       engine=st.sampled_from(["vllm==0.6.5", "vllm==0.10.1", "vllm==0.32"]))
def test_custom_all_reduce_off_leaves_nccls_share_only(gpu, tp, disabled, engine):
    """Where vLLM logs 'Custom allreduce is disabled' (TP across nodes, no P2P, or
    --disable-custom-all-reduce) the non-torch line carries NCCL's 0.05 GiB (vllm#13061,
    2x RTX 4090), not the 3.3 GiB of NVLink custom all-reduce (vllm#10511); the
    dennislee22/vLLM-benchmarking A100 TP2 logs keep 12.02 / 31.83 GiB."""
    def nt(off):
        return compute_budget("llama-3.1-8b", gpu=gpu, tensor_parallel_size=tp,
                              engine=engine, disable_custom_all_reduce=off
                              ).ledger.non_torch_bytes
    base = int(0.25 * GIB)
    got = nt(disabled)
    if tp == 1:
        assert got == base
    elif disabled or gpu in ("RTX-4090", "L40S"):
        assert got == base + int(0.05 * GIB)
    else:
        assert got == base + int(3.3 * GIB)
    assert nt(True) <= nt(False)


@settings(max_examples=20, deadline=None)
@given(seqs=st.integers(1, 1024), model=st.sampled_from(["llama-3.1-8b", "qwen2.5-7b"]))
def test_native_sampler_adds_the_sort_buffers(seqs, model):
    """apply_top_k_top_p (v1/sample/ops/topk_topp_sampler.py@0.32) sorts the float32
    logits when FlashInfer's sampler is missing: values 4 B + int64 indices 8 B + two
    bool masks + softmax/cumsum 4 B = 18 B per logit, on the dummy run's rows."""
    kw = dict(gpu="A100-80GB", engine="vllm==0.10.1", max_num_seqs=seqs,
              max_num_batched_tokens=8192)
    fi = compute_budget(model, **kw).ledger
    nat = compute_budget(model, flashinfer_sampler=False, **kw).ledger
    from kvcore.models.config import load_model_config

    vocab = load_model_config(model).raw["vocab_size"]
    assert nat.sampler_bytes - fi.sampler_bytes == min(seqs, 8192) * vocab * 18
    assert nat.kv_cache_memory_bytes == fi.kv_cache_memory_bytes - \
        (nat.sampler_bytes - fi.sampler_bytes)


@pytest.mark.parametrize("bad", [1, "yes", None])
def test_bad_all_reduce_or_sampler_flag_is_a_config_error(bad):
    for name in ("disable_custom_all_reduce", "flashinfer_sampler"):
        with pytest.raises(ConfigError) as exc:
            compute_budget("llama-3.1-8b", gpu="H100-SXM", **{name: bad})
        assert name in str(exc.value)


# ---- ceilings on real configs ----------------------------------------------------------------

def _ceilings(config, kind):
    return [c for c in config.stats.ceilings if c["kind"] == kind]


@pytest.mark.parametrize("model,gpu,tp,max_len", [
    ("nemotron-h-56b-base-8k", "H100-SXM", 2, 8192),
    ("qwen3-next-80b-a3b-thinking", "H100-SXM", 4, 262144)])
def test_mamba_blocks_below_max_num_seqs_fail_the_start_from_019(model, gpu, tp, max_len):
    """vllm#49064 / #38270: 'max_num_seqs (1024) exceeds available Mamba cache blocks (N)
    ... lower max_num_seqs to at most N': one Mamba block per decode sequence."""
    skip_unless_served(model)
    base = plan_on_gpu(model, gpu=gpu, tensor_parallel_size=tp, max_model_len=max_len,
                       raise_if_not_fits=False)
    # the Mamba blocks vLLM has are those of vLLM's own layout (not kvcore's search)
    blocks = base.stats.vllm_own_layout["num_blocks"]
    assert 0 < blocks
    # (kvcore's layout may have fewer blocks of another size: its floor is vLLM's
    # max concurrency, not its block count)
    assert (base.stats.max_concurrency or 0) >= \
        (base.stats.vllm_own_layout["max_concurrency"] or 0) * (1 - 1e-9)
    for seqs, engine in ((blocks + 1, "vllm==0.25.1"), (blocks, "vllm==0.25.1"),
                         (blocks + 1, "vllm==0.18.0")):
        # max_num_batched_tokens >= max_num_seqs: vLLM's SchedulerConfig refuses less
        c = plan_on_gpu(model, gpu=gpu, tensor_parallel_size=tp, max_model_len=max_len,
                        engine=engine, max_num_seqs=seqs, raise_if_not_fits=False,
                        **({"max_num_batched_tokens": seqs} if seqs > 8192 else {}))
        vnb = c.stats.vllm_own_layout["num_blocks"]
        found = _ceilings(c, "mamba_blocks")
        if seqs <= vnb:
            assert not found
        else:
            assert found and found[0]["limit"] == vnb
            assert found[0]["fatal"] is (engine == "vllm==0.25.1")
            assert f"--max-num-seqs {vnb}" in found[0]["message"]


@settings(max_examples=12, deadline=None)
@given(max_len=st.sampled_from([4096, 8192, 32768, 131072, 262144]),
       util=st.sampled_from([0.8, 0.9, 0.95]), tp=st.sampled_from([4, 8]))
def test_vllm_own_layout_beside_kvcores(max_len, util, tp):
    """vLLM's layout (its unification rule: groups of the smallest bucket's size, one
    unified page; kv_cache_utils.py@0.32): num_blocks = budget // the largest group's
    page bytes (get_kv_cache_config_from_groups), an attention group needs
    cdiv(max_model_len, block_size) blocks per request and a Mamba group 1; for
    Qwen3-Next (3 Mamba : 1 attention, 12 layers a bucket) 4 groups; kvcore's search
    may pick another layout (at short lengths it does), never one that scores lower."""
    skip_unless_served("qwen3-next-80b-a3b-thinking")
    c = plan_on_gpu("qwen3-next-80b-a3b-thinking", gpu="H100-SXM", tensor_parallel_size=tp,
                    max_model_len=max_len, gpu_memory_utilization=util,
                    raise_if_not_fits=False)
    vl = c.stats.vllm_own_layout
    if not c.stats.fits:
        assert vl is None or vl["num_blocks"] is not None
        return
    assert vl["num_groups"] == 4
    assert vl["num_blocks"] == c.stats.kv_cache_memory_bytes // vl["bytes_per_block"]
    if vl["same_as_kvcore"]:
        assert vl["num_blocks"] == c.num_blocks
    # kvcore's search never scores below vLLM's own layout (it is the baseline)
    assert (c.stats.max_concurrency or 0) >= (vl["max_concurrency"] or 0) * (1 - 0.005)
    for g in vl["groups"]:
        want = 1 if g["kind"] == "mamba" else -(-max_len // g["block_size"])
        assert g["blocks_per_request"] == want


def test_vllm_own_layout_differs_on_nemotron_h_and_the_mamba_ceiling_follows_vllm():
    """Nemotron-H 56B at TP2: kvcore's search groups the layers otherwise than vLLM's rule,
    which keeps 9-10 layers a group (7 groups, 120 blocks).  What vLLM does at start
    follows its layout, not kvcore's: 1024 default seqs > 120 blocks fails from 0.19,
    and the fix names 120."""
    skip_unless_served("nemotron-h-56b-base-8k")
    c = plan_on_gpu("nemotron-h-56b-base-8k", gpu="H100-SXM", tensor_parallel_size=2,
                    max_model_len=8192, engine="vllm==0.25.1", raise_if_not_fits=False)
    vl = c.stats.vllm_own_layout
    assert not vl["same_as_kvcore"] and vl["num_groups"] == 7
    assert vl["num_blocks"] != c.num_blocks
    m = _ceilings(c, "mamba_blocks")
    assert m and m[0]["fatal"] and m[0]["limit"] == vl["num_blocks"]
    assert "vLLM's own layout" in m[0]["message"]
    # the log's figures are vLLM's: int(max_concurrency x max_model_len) on its layout
    # (kv_cache_utils.py@0.32 _report_kv_cache_config), before 0.21 its blocks // groups
    lf = logged_figures(c, "vllm==0.25.1")
    assert lf["gpu_kv_cache_size_tokens"] == int(vl["max_concurrency"] * 8192)
    lf0 = logged_figures(c, "vllm==0.10.1")
    attn = min(g["block_size"] for g in vl["groups"] if g["kind"] != "mamba")
    assert lf0["gpu_kv_cache_size_tokens"] == vl["num_blocks"] // vl["num_groups"] * attn


@pytest.mark.parametrize("model,tp", [("qwen3.5-35b-a3b", 2),
                                      ("deepseek-v4-flash.aiconfigurator", 4)])
def test_inflated_block_sizes_warn_that_short_prompts_never_hit(model, tp):
    """vllm#40696 / #54504: hybrid unification raises block_size past typical prompts; a
    prompt of L tokens can reuse floor((L-1)/B) x B tokens only."""
    skip_unless_served(model)
    c = plan_on_gpu(model, gpu="H200", tensor_parallel_size=tp, max_model_len=65536,
                    raise_if_not_fits=False)
    sizes = [g.spec.block_size for g in c.kv_cache_groups if "Mamba" not in
             type(g.spec).__name__]
    found = _ceilings(c, "block_size")
    assert max(sizes) >= 512 and found and found[0]["limit"] == max(sizes)
    assert not found[0]["fatal"]
    assert not _ceilings(plan_on_gpu("llama-3.1-8b", gpu="H200"), "block_size")


def test_mamba_align_with_prefix_caching_warns_about_short_shared_prefixes():
    skip_unless_served("qwen3.5-35b-a3b")
    c = plan_on_gpu("qwen3.5-35b-a3b", gpu="H200", tensor_parallel_size=2,
                    max_model_len=65536, mamba_cache_mode="align", raise_if_not_fits=False)
    assert _ceilings(c, "mamba_align")
    c = plan_on_gpu("qwen3.5-35b-a3b", gpu="H200", tensor_parallel_size=2,
                    max_model_len=65536, raise_if_not_fits=False)
    assert not _ceilings(c, "mamba_align")


def test_swa_admission_reserve_caps_concurrency_on_a_small_pool():
    """vllm#54703: each running request holds cdiv(window, block) + 1 sliding-window
    blocks (gpt-oss: window 128, block 16 -> 9)."""
    c = plan_on_gpu("gpt-oss-20b", gpu_memory_bytes=17 * GIB, max_model_len=8192,
                    gpu_memory_utilization=0.95, max_num_seqs=512, raise_if_not_fits=False)
    found = _ceilings(c, "swa_reserve")
    assert c.num_blocks and found
    assert found[0]["limit"] == c.num_blocks // (128 // 16 + 1) < 512
    roomy = plan_on_gpu("gpt-oss-20b", gpu="H100-SXM", max_model_len=8192, max_num_seqs=512)
    assert not _ceilings(roomy, "swa_reserve")


def test_longest_max_model_len_that_starts_is_named_when_it_does_not_fit():
    c = plan_on_gpu("llama-3.1-8b", gpu_memory_bytes=int(23.58 * GIB), engine="vllm==0.6.4",
                    max_model_len=29000, raise_if_not_fits=False)
    found = _ceilings(c, "max_model_len")
    assert c.stats.fits is False and found and found[0]["fatal"]


def test_logged_figures_are_computed_as_each_release_does():
    """V0: # GPU blocks x block_size; V1 < 0.21: num_blocks // groups x block_size; 0.21+:
    int(max_concurrency x max_model_len) (vllm#51041 quotes the code)."""
    c = plan_on_gpu("gpt-oss-20b", gpu="H100-SXM", max_model_len=32768)
    g = len(c.kv_cache_groups)
    bs = min(x.spec.block_size for x in c.kv_cache_groups)
    assert logged_figures(c, "vllm==0.10.1")["gpu_kv_cache_size_tokens"] == \
        c.num_blocks // g * bs
    assert logged_figures(c, "vllm==0.32")["gpu_kv_cache_size_tokens"] == \
        int(c.stats.max_concurrency * 32768)
    assert logged_figures(c, "vllm==0.6.5")["gpu_kv_cache_size_tokens"] == c.num_blocks * bs


# ---- acceptance: public start-up logs ----------------------------------------------------------

CASES = load_cases()
TESTER_C = "pre-registered blind (tester C)"  # the "added" of tester C's round


def test_the_log_set_is_split_and_sourced():
    sets = {c["set"] for c in CASES}
    assert sets == {"calibration", "heldout"}
    # a URL, or (where the search index did not name the repository) a source line
    assert all((c.get("url") or "").startswith("https://") or c.get("source") for c in CASES)
    assert sum(c["set"] == "heldout" for c in CASES) >= 8


@pytest.mark.parametrize("case", [c for c in CASES if c["set"] == "calibration"],
                         ids=lambda c: c["id"])
def test_calibration_logs(case):
    p = predict(case)
    assert p.fits == case["started"], p.reasons
    e = error(case, p)
    assert e is None or e <= 0.05, (e, p.kv_gib)


_NEEDS_PLUGINS = pytest.mark.skipif(
    importlib.util.find_spec("kvcore_mamba") is None or importlib.util.find_spec("kvcore_mla") is None,
    reason="the held-out logs include hybrid models (the core-only venv has no plugins)")


#: held-out logs whose start kvcore calls wrongly, each with its reason (the rule was
#: "all but one" until tester C's blind round of stop 37 found the second; a fix or a
#: new miss changes this set, and docs/ENGINE_PROFILES.md with it)
HELDOUT_VERDICT_MISSES = {
    "33155-gptoss120b-h100-0141": "vLLM 0.14.1 did not start gpt-oss-120b on one H100; "
                                  "kvcore's budget leaves 5.21 GiB",
    "17469-qwen3-30b-a3b-4xa10-tp4-085": "vLLM 0.8.5 allocated the KV cache, then ran "
                                         "out of memory capturing CUDA graphs (4x A10 TP4, "
                                         "MoE); kvcore's pre-0.21 graph estimate, 0.81 GiB, "
                                         "fits in the 2.2 GiB left, so no ceiling fires",
}


@_NEEDS_PLUGINS
def test_heldout_verdicts_are_right_but_the_named_misses():
    held = [c for c in CASES if c["set"] == "heldout"]
    disagree = {c["id"] for c in held if predict(c).fits != c["started"]}
    assert disagree == set(HELDOUT_VERDICT_MISSES), disagree
    assert len(held) - len(disagree) >= 27


@_NEEDS_PLUGINS
def test_heldout_budget_errors_are_the_documented_ones():
    """The per-log errors docs/ENGINE_PROFILES.md reports (they could move either way)."""
    held = [c for c in CASES if c["set"] == "heldout"]
    errs = {c["id"]: error(c, predict(c)) for c in held}
    assert errs["10517-llama31-8b-3090-29k"] < 0.05
    assert errs["10517-llama31-8b-3090-35k"] < 0.05


@_NEEDS_PLUGINS
def test_heldout_median_error_is_the_measured_one():
    """Held-out median over the logs with a figure (docs/ENGINE_PROFILES.md): 4.1 % over
    15 logs at eng23b's last commit, 7 of them above 5 % (vllm#17122 25 %, vllm#21348
    LMCache 44 %, vllm#27508 112 %, the two kubesimplify 0.27.1 logs 26 / 33 %, two
    L40S V1 0.8.5 logs 5.2-5.3 %).  The set lost the four pre-registered TP>1 logs
    whose first errors led to the custom all-reduce / native-sampler rules (moved to
    calibration); see the next test for the first figures.  Tester C's blind round
    (2026-12-03) added 10 held-out logs: 4.1 % over all 25, 3.9 % over those 10."""
    held = [c for c in CASES if c["set"] == "heldout"]
    errs = {c["id"]: e for c in held if (e := error(c, predict(c))) is not None}
    assert len(errs) >= 25
    assert statistics.median(errs.values()) <= 0.05
    blind = {c["id"] for c in CASES if TESTER_C in c.get("added", "")}
    assert sum(e > 0.05 for i, e in errs.items() if i not in blind) == 7
    # tester C's blind round (10 logs, docs/ENGINE_PROFILES.md): the same 5 % line; above
    # it: vllm#17469 8.3 % (the A10 TP4 verdict miss), vllm#50722 6.1 % and the MI300X
    # Gemma-3 8.6 % (multimodal encoder profiling not in the activations), the OCI A10 V0
    # 6.9 % (the 0.25 GiB non-torch floor against a logged 0.05), the RTX 5090 Qwen3-8B
    # 5.6 % (native sampler; vLLM's own boots differ by 7.7 % there)
    assert len(blind) == 10 and statistics.median(errs[i] for i in blind) <= 0.05
    assert {i for i in blind if errs[i] > 0.05} == {
        "17469-qwen3-30b-a3b-4xa10-tp4-085", "50722-qwen35-35b-a3b-80g-tp4-085",
        "rocm-gemma3-27b-mi300x", "oci-llama31-8b-a10-131k-v0", "ta-qwen3-8b-5090-092"}


@_NEEDS_PLUGINS
def test_preregistered_logs_carry_their_first_figure():
    """Every log added after the first pass says when it was added and what kvcore said
    first, before any rule looked at it; a moved log says why.  The first figures'
    median over the 14 with a figure: 5.2 % (the 10 still held out: 4.1 %); over tester
    C's 10 blind logs (pre-registered at ff485b0 on branch testerC, rules of 80d9521):
    2.0 %."""
    added = [c for c in CASES if "added" in c]
    assert len(added) >= 15
    for c in added:
        f = c["first_kvcore"]
        assert f and {"kv_gib", "fits", "error", "at"} <= set(f), c["id"]
        assert (c["set"] == "calibration") == ("moved" in c), c["id"]
    first = [c["first_kvcore"]["error"] for c in added
             if c["first_kvcore"]["error"] is not None and TESTER_C not in c["added"]]
    assert len(first) >= 14
    assert abs(statistics.median(first) - 0.052) < 0.005, sorted(first)
    blind = [c["first_kvcore"]["error"] for c in added if TESTER_C in c["added"]]
    assert len(blind) == 10 and None not in blind
    assert abs(statistics.median(blind) - 0.020) < 0.005, sorted(blind)
    still = [e for c in added if c["set"] == "heldout"
             and (e := error(c, predict(c))) is not None]
    assert len(still) >= 10 and statistics.median(still) <= 0.05


def test_a_not_fit_names_the_longest_max_model_len_that_starts_and_it_starts():
    """vLLM's 'Based on the available memory, the estimated maximum model length is N'
    (_check_enough_kv_cache_memory): kvcore names N before the start, and N plans."""
    from kvcore.errors import NotEnoughMemoryError

    kw = dict(gpu="H100-SXM", engine="vllm==0.11.0", gpu_memory_utilization=0.95,
              max_num_batched_tokens=1024)
    with pytest.raises(NotEnoughMemoryError) as exc:
        plan_on_gpu("gpt-oss-120b", **kw)
    import re

    m = re.search(r"--max-model-len (\d+)", exc.value.message)
    assert m, exc.value.message
    longest = int(m.group(1))
    assert plan_on_gpu("gpt-oss-120b", max_model_len=longest, **kw).stats.fits
    c = plan_on_gpu("gpt-oss-120b", raise_if_not_fits=False, **kw)
    found = _ceilings(c, "max_model_len")
    assert found and found[0]["limit"] == longest and found[0]["fatal"]


def test_cli_prints_vllms_own_layout_and_json_carries_it(capsys):
    """`kvcore plan --gpu` shows vLLM's layout beside kvcore's, `--json` carries it, and
    `--disable-custom-all-reduce` (vLLM's flag) reaches the ledger."""
    import json

    from kvcore.cli import main

    skip_unless_served("nemotron-h-56b-base-8k")
    argv = ["plan", "nemotron-h-56b-base-8k", "--gpu", "H100-SXM", "--tp", "2",
            "--max-model-len", "8192", "--engine", "vllm==0.25.1"]
    api = plan_on_gpu("nemotron-h-56b-base-8k", gpu="H100-SXM", tensor_parallel_size=2,
                      max_model_len=8192, engine="vllm==0.25.1",
                      raise_if_not_fits=False).stats.vllm_own_layout
    # 1024: the default seqs on >= 70 GiB GPUs at 0.25 (vllm#49064 / kaito#2319 logs):
    # a fatal ceiling is a not-fit, so the CLI exits 2 as a not-fit does, naming it
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "does not start" in err and (
        f"max_num_seqs (1024) exceeds the Mamba cache blocks ({api['num_blocks']})") in err
    argv += ["--max-num-seqs", str(api["num_blocks"])]  # the largest that starts
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert f"vLLM's own layout: {api['num_groups']} groups" in out
    assert "kvcore's layout differs" in out
    api = plan_on_gpu("nemotron-h-56b-base-8k", gpu="H100-SXM", tensor_parallel_size=2,
                      max_model_len=8192, engine="vllm==0.25.1",
                      max_num_seqs=api["num_blocks"]).stats.vllm_own_layout
    main(argv + ["--json"])
    data = json.loads(capsys.readouterr().out)
    plan = data[0] if isinstance(data, list) else data
    assert plan["vllm_own_layout"] == json.loads(json.dumps(api))
    main(["plan", "llama-3.1-8b", "--gpu", "H100-SXM", "--tp", "2", "--explain",
          "--disable-custom-all-reduce"])
    out = capsys.readouterr().out
    assert "custom all-reduce disabled" in out
    assert "the same as kvcore's" in out


@pytest.mark.parametrize("model,tp,max_len", [
    ("nemotron-h-56b-base-8k", 2, 8192), ("qwen3-next-80b-a3b-thinking", 4, 65536),
    ("llama-3.1-8b", 1, 32768), ("gemma-3-27b-it.transformers-4.56-resaved", 2, 32768)])
def test_vllm_own_layout_agrees_with_the_planners_vllm_layout(model, tp, max_len):
    """Two implementations of vLLM's layout: kvcore.deploy.ceilings.vllm_layout (the
    deploy path) and the planner's PlanStats.vllm_layout (branch plan22): same groups,
    same max concurrency (vLLM's figure)."""
    skip_unless_served(model)
    c = plan_on_gpu(model, gpu="H100-SXM", tensor_parallel_size=tp, max_model_len=max_len,
                    raise_if_not_fits=False)
    mine, theirs = c.stats.vllm_own_layout, c.stats.vllm_layout
    if mine is None or theirs is None:
        pytest.skip("no budget: the plan does not fit")
    f = theirs.figures
    assert mine["num_groups"] == f.num_groups
    assert mine["max_concurrency"] == pytest.approx(f.guarantee, rel=1e-9)


@pytest.mark.parametrize("model", ["gpt-oss-20b", "gemma-3-27b-it",
                                   "qwen3-next-80b-a3b-thinking", "nemotron-h-56b-base-8k",
                                   "llama-4-scout-17b-16e-instruct"])
def test_vllm_own_layout_is_the_planners_vllm_layout(model):
    """One model of vLLM's layout (kvcore.grouping.vllm_layout_of): the start-up figures'
    layout (``stats.vllm_own_layout``) and the planner's baseline (``stats.vllm_layout``)
    have the same groups and block sizes, and vLLM's max concurrency
    (num_blocks / blocks per request, get_max_concurrency_for_kv_cache_config)
    is the baseline's guarantee (both at TP 4, max_model_len 8,192).  That layout is checked against vLLM 0.32's own planner
    in integrations/vllm/tests/test_vllm_layout_vs_vllm.py."""
    skip_unless_served(model)
    # max_num_seqs 256: vLLM 0.32's default 1,024 is above Nemotron-H's Mamba blocks at
    # TP 4 (a start vLLM refuses: the fatal ceiling), and the layouts are the subject here
    c = plan_on_gpu(model, gpu="H100-SXM", tensor_parallel_size=4, max_model_len=8192,
                    max_num_seqs=256, raise_if_not_fits=False)
    own, base = c.stats.vllm_own_layout, c.stats.vllm_layout
    assert c.stats.fits
    assert own is not None and base is not None
    assert own["num_groups"] == base.figures.num_groups
    assert sorted({g["block_size"] for g in own["groups"]}) == \
        sorted(set(base.figures.block_sizes))
    assert base.figures.guarantee is not None
    assert own["max_concurrency"] == pytest.approx(base.figures.guarantee, rel=1e-12)


# ---- --explain on a plan that does not fit -------------------------------------------
# The not-fit error says "--explain itemises it": with --explain the ledger it could not
# meet is printed (stdout) before the one-line error (stderr, exit 2), and its lines add
# up: usable memory - every term = the (negative) KV budget.

@pytest.mark.parametrize("model, gpu, extra", [
    ("gpt-oss-120b", "H100", ["--max-model-len", "32768", "--engine", "vllm==0.10.2"]),
    ("llama-3.1-8b", "L4", ["--max-model-len", "131072"]),
    ("qwen3-30b-a3b", "RTX-4090", ["--max-model-len", "8192"]),
    ("qwen3-8b", "L4", ["--max-model-len", "40960"]),
    ("llama-3.1-8b", "A10", ["--max-model-len", "131072", "--engine", "vllm==0.11.0"]),
])
def test_explain_itemises_the_budget_a_plan_could_not_meet(capsys, model, gpu, extra):
    from kvcore.cli import main

    code = main(["plan", model, "--gpu", gpu, *extra, "--explain"])
    cap = capsys.readouterr()
    assert code == 2
    err = [ln for ln in cap.err.splitlines() if ln.strip()]
    assert len(err) == 1 and "does not" in err[0] and "Traceback" not in cap.err, cap.err
    assert "memory ledger per rank" in cap.out
    lines = [ln for ln in cap.out.splitlines() if ln.startswith("  ")]
    assert lines[0].lstrip().startswith("usable memory")
    assert lines[-1].lstrip().startswith("= KV budget")
    # without --explain: the one line only
    code = main(["plan", model, "--gpu", gpu, *extra])
    cap = capsys.readouterr()
    assert code == 2 and cap.out == "" and len(cap.err.strip().splitlines()) == 1


def test_not_fit_error_carries_the_ledger_in_json(capsys):
    import json

    from kvcore.cli import main

    code = main(["plan", "llama-3.1-8b", "--gpu", "L4", "--max-model-len", "131072",
                 "--json"])
    err = json.loads(capsys.readouterr().out)["error"]
    assert code == 2 and err["type"] == "NotEnoughMemoryError"
    names = [ln["name"] for ln in err["ledger"]["lines"]]
    assert names[0] == "usable memory" and names[-1] == "KV budget"
    total = err["ledger"]["lines"]
    assert total[-1]["bytes"] == total[0]["bytes"] - sum(x["bytes"] for x in total[1:-1])


# ---- one source of truth: the not-fit error / --json / --explain (tester 3, finding 4) --

_ITEMISED_EXCLUDED = ("usable memory", "weights per rank", "KV budget")


@settings(max_examples=25, deadline=None)
@given(st.sampled_from(["llama-3.1-8b", "deepseek-v3", "gpt-oss-120b", "qwen3-8b",
                        "qwen3-30b-a3b", "gemma-3-27b-it"]),
       st.sampled_from(["H100", "L40S", "A100-80GB", "RTX-4090"]),
       st.sampled_from([0.2, 0.5, 0.9, 0.95]), st.sampled_from([1, 2, 8]))
def test_overhead_and_cap_are_the_ledgers_lines(model: str, gpu: str, util: float,
                                                tp: int) -> None:
    """vLLM's cap is requested_memory = CUDA total x gpu_memory_utilization
    (gpu_worker.py@0.32) and its KV budget that cap minus weights and the profiled
    overhead: kvcore's overhead_bytes (JSON, error) must be the ledger's itemised lines
    summed, its cap the ledger's usable line, whether or not the plan fits."""
    import contextlib
    import io
    import json

    from kvcore_plugin_needs import missing_distributions


    if missing_distributions(model):  # the core-only venv: a plugin's model
        return
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = cli_main(["plan", model, "--gpu", gpu, "--tp", str(tp),
                         "--gpu-memory-utilization", str(util), "--explain", "--json"])
    text = out.getvalue() or err.getvalue()
    if code == 2 and '"ledger"' not in text:
        return  # refused before any ledger (e.g. TP does not divide the heads)
    d = json.loads(text)
    src = d["error"] if code == 2 else d
    ledger = src["ledger"]
    lines = {ln["name"]: ln["bytes"] for ln in ledger["lines"]}
    itemised = sum(b for n, b in lines.items() if n not in _ITEMISED_EXCLUDED)
    assert src["overhead_bytes"] == itemised
    assert lines["KV budget"] == lines["usable memory"] - lines["weights per rank"] - itemised
    if code == 2 and "exceed" in src["message"]:
        from kvcore.planning import format_bytes

        assert f"overhead {format_bytes(itemised)}" in src["message"]
        assert f"exceed {format_bytes(lines['usable memory'])}" in src["message"]


# ---- moved from tests/test_tester3_findings.py (tester 3's findings, fixed) -----------

# 4 ---------------------------------------------------------------------------------
@pytest.mark.parametrize("argv", [
    ["plan", "deepseek-v3", "--gpu", "H100"],
    ["plan", "llama-3.1-8b", "--gpu", "H100", "--gpu-memory-utilization", "0.2"],
    ["plan", "gpt-oss-120b", "--gpu", "L40S"],
])
def test_f4_explain_not_fit_error_matches_its_ledger(capsys: Any, argv: list[str]) -> None:
    """`kvcore plan M --explain` on a plan that does not fit prints the ledger and the
    error "weights W + overhead O (--explain itemises it) = T per GPU exceed C (GPU
    memory x u)".  The itemised overhead (activations + sampler + non-torch + CUDA
    graphs) must sum to O and C must be the ledger's 'usable memory'; on deepseek-v3 the
    ledger says 4.60 GiB / 71.27 GiB while the error says 5.02 GiB / 71.68 GiB (the
    ~0.41 GiB between the CUDA total vLLM logs and the catalog's is added to both
    sides of the error only)."""
    skip_unless_served(argv[1])
    code, out, err = _t3_run(capsys, [*argv, "--explain", "--json"])
    assert code == 2
    e = json.loads(out or err)["error"]
    lines = {ln["name"]: ln["bytes"] for ln in e["ledger"]["lines"]}
    itemised = sum(b for n, b in lines.items()
                   if n not in ("usable memory", "weights per rank", "KV budget"))
    assert e["overhead_bytes"] == itemised
    assert e["weights_bytes"] == lines["weights per rank"]
