"""`kvcore plan` plans a Mamba hybrid in the cache mode vLLM 0.32 runs it with.

vLLM 0.32 turns prefix caching on by default for generative hybrids (config/model.py
``is_prefix_caching_supported``), and ``MambaModelConfig.verify_and_update_config``
(model_executor/models/config.py:685-705) then sets ``mamba_cache_mode`` ``align``; in
``align`` the state's block size is the attention block size (vllm/platforms/
interface.py ``update_block_size_for_backend``).  With ``none`` (kvcore plan's default
before this) the state's block is the whole ``max_model_len``: a layout ``vllm serve``
does not build.  The same rule is :func:`kvcore.sim.modes.resolve_mamba_cache_mode`,
which simulate and tune follow (tests/sim/test_sim_modes.py): plan and the simulator
now agree on every model.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kvcore_cli_support import run_json

import kvcore
from kvcore.models.planner import vllm_mamba_cache_mode
from kvcore.sim.modes import mamba_layout, resolve_mamba_cache_mode

pytest.importorskip("kvcore_mamba")

HYBRIDS = ["qwen3-next-80b-a3b-thinking", "nemotron-h-56b-base-8k"]
MODELS = HYBRIDS + ["llama-3.1-8b", "mamba2-2.7b"]


def _block_sizes(plan: dict) -> dict[str, set[int]]:
    out: dict[str, set[int]] = {}
    for g in plan["groups"]:
        out.setdefault(g["type"], set()).add(g["block_size"])
    return out


def _plan_json(capsys, *argv: str) -> dict:
    data = run_json(capsys, ["plan", *argv])
    return data[0] if isinstance(data, list) else data


@pytest.mark.parametrize("model", HYBRIDS)
def test_hybrid_default_is_align_as_vllm_runs_it(capsys, model):
    plan = _plan_json(capsys, model, "--max-model-len", "8192", "--kv-cache-memory", "8GiB")
    sizes = _block_sizes(plan)
    # align: the state's block is the attention block, not the 8,192-token context
    assert sizes["mamba"] == sizes["full_attention"] and max(sizes["mamba"]) < 8192
    assert any("mamba cache mode align" in n for n in plan["notes"])
    # the same as asking for align; none still plans one state per request
    same = _plan_json(capsys, model, "--max-model-len", "8192", "--kv-cache-memory", "8GiB",
                      "--mamba-cache-mode", "align")
    assert same["num_blocks"] == plan["num_blocks"]
    none = _plan_json(capsys, model, "--max-model-len", "8192", "--kv-cache-memory", "8GiB",
                      "--mamba-cache-mode", "none")
    assert _block_sizes(none)["mamba"] == {8192}
    assert not any("mamba cache mode" in n for n in none["notes"])


@pytest.mark.parametrize("model", HYBRIDS)
def test_without_prefix_caching_the_default_is_none(capsys, model):
    plan = _plan_json(capsys, model, "--max-model-len", "8192", "--kv-cache-memory", "8GiB",
                      "--no-prefix-caching")
    assert _block_sizes(plan)["mamba"] == {8192}


def test_older_engine_profiles_keep_none(capsys):
    # the rule is vLLM 0.32's; from which release vLLM switches is not known, so an
    # older profile plans as before
    plan = _plan_json(capsys, "nemotron-h-56b-base-8k", "--gpu", "H100-SXM", "--tp", "2",
                      "--max-model-len", "8192", "--engine", "vllm==0.25.1",
                      "--max-num-seqs", "64")
    assert _block_sizes(plan)["mamba"] == {8192}
    new = _plan_json(capsys, "nemotron-h-56b-base-8k", "--gpu", "H100-SXM", "--tp", "2",
                     "--max-model-len", "8192", "--max-num-seqs", "64")
    assert max(_block_sizes(new)["mamba"]) < 8192


@settings(max_examples=24, deadline=None)
@given(model=st.sampled_from(MODELS), pc=st.booleans(), tp=st.sampled_from([1, 2]))
def test_plan_and_the_simulator_resolve_the_same_mode(model, pc, tp):
    # differential: the planner's rule against the simulator's (both vLLM 0.32's)
    has_mamba, has_attention = mamba_layout(model)
    want, _ = resolve_mamba_cache_mode(None, pc, has_mamba and has_attention)
    assert vllm_mamba_cache_mode(model, pc, tensor_parallel_size=tp) == want
    cfg = kvcore.plan_model(model, kv_cache_memory_bytes=8 << 30, max_model_len=4096,
                            mamba_cache_mode=None, enable_prefix_caching=pc,
                            tensor_parallel_size=tp)
    mamba = [g.spec for g in cfg.kv_cache_groups if g.spec.kind == "mamba"]
    assert [s.mamba_cache_mode for s in mamba] == [want] * len(mamba)
    if want == "none":  # one state per request: the block is the whole context
        assert all(s.block_size == 4096 for s in mamba)


@pytest.mark.parametrize("bad", ["yes", 1, None])
def test_the_api_checks_prefix_caching_before_resolving(bad):
    with pytest.raises(kvcore.KVCoreError) as e:
        kvcore.plan_model("nemotron-h-56b-base-8k", kv_cache_memory_bytes=8 << 30,
                          max_model_len=4096, mamba_cache_mode=None,
                          enable_prefix_caching=bad)
    assert "enable_prefix_caching" in str(e.value)
