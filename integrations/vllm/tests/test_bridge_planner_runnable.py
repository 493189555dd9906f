"""The bridge's planner returns configs vLLM 0.32's own managers run (issue 22, item 4).

``kvcore_vllm.get_kv_cache_configs`` (used with ``KVCORE_VLLM_PLANNER=1``) must hand vLLM
groups its own ``KVCacheManager`` builds and manages correctly, or refuse with a
ConfigError.  Reference (vLLM 0.32, ``vllm.v1.engine.core``): the engine core passes the
planned configs through ``generate_scheduler_kv_cache_config`` (a
``UniformTypeKVCacheSpecs`` group becomes its first layer's spec) and builds
``KVCacheManager`` from that; ``UniformTypeKVCacheSpecs.is_uniform_type`` is vLLM's rule
for one group.

Cases: every embedded hybrid model (sliding / chunked / Mamba / MLA mixes) at four
(max_num_batched_tokens, max_model_len) pairs, and seeded random layer mixes.
"""

from __future__ import annotations

import os
import random
from typing import Any

import pytest

from kvcore.errors import ConfigError, SpecError

os.environ.setdefault("VLLM_ALLOW_LONG_MAX_MODEL_LEN", "1")

HYBRID_MODELS = ["gpt-oss-20b", "gpt-oss-120b", "gemma-2-2b-it", "gemma-3-27b-it",
                 "gemma-4-26b-a4b", "llama-4-scout-17b-16e-instruct", "mamba2attn-2.7b",
                 "nemotron-3-nano-30b-a3b", "qwen3-next-80b-a3b-thinking",
                 "qwen3.5-35b-a3b", "kimi-k3"]
SHAPES = [(8192, 8192), (2048, 4096), (2048, 1024), (512, 32768)]


def _vllm_config(max_num_batched_tokens: int, max_model_len: int, mamba: bool,
                 block_size: int = 16) -> Any:
    from kvcore_vllm.harness import _model_dir
    from vllm.config import CacheConfig, ModelConfig, SchedulerConfig, VllmConfig
    from vllm.v1.core.single_type_kv_cache_manager import register_all_kvcache_specs

    mc = ModelConfig(model=_model_dir(), skip_tokenizer_init=True,
                     max_model_len=max_model_len, dtype="bfloat16")
    cc = CacheConfig(block_size=block_size, enable_prefix_caching=True,
                     mamba_cache_mode="align" if mamba else "none")
    sc = SchedulerConfig(max_num_batched_tokens=max_num_batched_tokens, max_num_seqs=64,
                         max_model_len=max_model_len, is_encoder_decoder=False,
                         enable_chunked_prefill=True)
    vc = VllmConfig(model_config=mc, cache_config=cc, scheduler_config=sc)
    register_all_kvcache_specs(vc)
    cc.kv_cache_layout = "LBNHC"
    return vc


def _build_vllm_manager(vc: Any, configs: list[Any]) -> Any:
    """What vLLM's engine core does with planned configs: the scheduler's view, its
    block sizes, vLLM's own KVCacheManager; then one request's blocks allocated."""
    from vllm import SamplingParams
    from vllm.utils.hashing import sha256
    from vllm.v1.core import kv_cache_utils
    from vllm.v1.core.kv_cache_manager import KVCacheManager
    from vllm.v1.request import Request

    kcfg = kv_cache_utils.generate_scheduler_kv_cache_config(configs)
    sched_bs, hash_bs = kv_cache_utils.resolve_kv_cache_block_sizes(kcfg, vc)
    max_len = vc.model_config.max_model_len
    mgr = KVCacheManager(kcfg, max_len, sched_bs, hash_bs, enable_caching=True)
    kv_cache_utils.init_none_hash(sha256)
    n = min(300, max_len - 8)
    req = Request("r0", list(range(1, n + 1)), SamplingParams(max_tokens=4), None,
                  block_hasher=kv_cache_utils.get_request_block_hasher(hash_bs, sha256))
    blocks, hit = mgr.get_computed_blocks(req)[:2]
    assert mgr.allocate_slots(req, n - hit, hit, blocks) is not None
    return mgr


def _plan(vc: Any, specs: dict[str, Any], budget: int) -> list[Any]:
    from kvcore_vllm.planner import get_kv_cache_configs

    return get_kv_cache_configs(vc, [specs], [budget])


@pytest.mark.parametrize("name", HYBRID_MODELS)
def test_embedded_hybrids_plan_configs_vllm_runs(name: str) -> None:
    from kvcore_vllm.planner import check_vllm_runnable
    from kvcore_vllm.specs import to_vllm_spec

    from kvcore.models import load_model_config
    from kvcore.models.config import CacheConfig
    from kvcore.models.planner import layer_specs_for

    specs = {n: to_vllm_spec(s)
             for n, s in layer_specs_for(load_model_config(name), CacheConfig()).items()}
    mamba = any(type(s).__name__ == "MambaSpec" for s in specs.values())
    for mnbt, max_len in SHAPES:
        vc = _vllm_config(mnbt, max_len, mamba)
        configs = _plan(vc, specs, 8 << 30)
        for c in configs:
            check_vllm_runnable(c, vc)
        _build_vllm_manager(vc, configs)


def test_a_group_of_sliding_and_full_layers_is_refused() -> None:
    """vLLM's rule: sliding and full layers are not one type (is_uniform_type False);
    such a group would be managed as its first layer's kind."""
    import torch
    from kvcore_vllm.planner import check_vllm_runnable
    from vllm.v1.kv_cache_interface import (
        FullAttentionSpec,
        KVCacheConfig,
        KVCacheGroupSpec,
        SlidingWindowSpec,
        UniformTypeKVCacheSpecs,
    )

    common = dict(block_size=16, num_kv_heads=2, head_size=64, dtype=torch.bfloat16)
    layers = {"l0": SlidingWindowSpec(sliding_window=128, **common),
              "l1": FullAttentionSpec(**common)}
    group = KVCacheGroupSpec(layer_names=list(layers), kv_cache_spec=UniformTypeKVCacheSpecs(
        block_size=16, kv_cache_specs=layers))
    vc = _vllm_config(2048, 4096, False)
    with pytest.raises(ConfigError, match="KVCORE_VLLM=1"):
        check_vllm_runnable(KVCacheConfig(num_blocks=100, kv_cache_tensors=[],
                                          kv_cache_groups=[group]), vc)


@pytest.mark.parametrize("seed", range(40))
def test_random_hybrids_plan_configs_vllm_runs(seed: int) -> None:
    """Seeded layer mixes (sliding windows of several sizes, full, chunked; block sizes
    16 / 32; tight to ample budgets): whenever vLLM's own planner plans, the bridge
    returns a config vLLM's own manager builds and allocates from, with a max
    concurrency never below vLLM's (tester 15: two windows in one kvcore group made
    the bridge refuse what vLLM serves; it now plans vLLM's layout there)."""
    import torch
    from vllm.v1.kv_cache_interface import (
        ChunkedLocalAttentionSpec,
        FullAttentionSpec,
        SlidingWindowSpec,
    )

    rng = random.Random(2200 + seed)
    bs = rng.choice([16, 32])
    windows = rng.sample([64, 128, 512, 1024, 4096], rng.randrange(1, 3))
    chunk = rng.choice([256, 1024])
    specs: dict[str, Any] = {}
    for i in range(rng.randrange(2, 24)):
        heads = rng.choice([1, 2, 4, 8])
        common = dict(block_size=bs, num_kv_heads=heads, head_size=64, dtype=torch.bfloat16)
        r = rng.random()
        if r < 0.4:
            specs[f"model.layers.{i}.attn"] = FullAttentionSpec(**common)
        elif r < 0.9:
            specs[f"model.layers.{i}.attn"] = SlidingWindowSpec(
                sliding_window=rng.choice(windows), **common)
        else:
            specs[f"model.layers.{i}.attn"] = ChunkedLocalAttentionSpec(
                attention_chunk_size=chunk, **common)
    kinds = {type(s).__name__ for s in specs.values()}
    if {"SlidingWindowSpec", "ChunkedLocalAttentionSpec"} <= kinds:
        specs = {n: s for n, s in specs.items()
                 if type(s).__name__ != "ChunkedLocalAttentionSpec"}
    mnbt, max_len = rng.choice(SHAPES)
    vc = _vllm_config(mnbt, max_len, False, bs)
    page = sum(s.page_size_bytes for s in specs.values())
    budget = page * (max_len // bs + 2) * rng.choice([2, 8, 64])
    import copy
    import warnings

    from vllm.v1.core import kv_cache_utils

    try:
        theirs = kv_cache_utils.get_kv_cache_configs(copy.deepcopy(vc), [specs], [budget])
    except (ValueError, AssertionError, NotImplementedError):
        theirs = None  # vLLM refuses: kvcore may plan or refuse
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            configs = _plan(vc, specs, budget)
    except SpecError:
        pytest.skip("a kind the bridge does not convert")
    except (ConfigError, ValueError):
        assert theirs is None, "vLLM plans this; the bridge must too"
        return
    _build_vllm_manager(vc, configs)
    if theirs is not None:
        ours_c = kv_cache_utils.get_max_concurrency_for_kv_cache_config(vc, configs[0])
        their_c = kv_cache_utils.get_max_concurrency_for_kv_cache_config(vc, theirs[0])
        assert ours_c >= their_c * (1 - 1e-9), (ours_c, their_c)


def test_two_windows_in_one_group_plan_vllms_layout() -> None:
    """Tester 15's case (seed 5): layers alternating full / sliding, windows 256 and
    512, 4 KV heads of 256, block 32: kvcore packs both windows in one group, which
    vLLM's managers do not run; the bridge warns and returns vLLM's own plan."""
    import torch
    from vllm.v1.core import kv_cache_utils
    from vllm.v1.kv_cache_interface import FullAttentionSpec, SlidingWindowSpec

    common = dict(block_size=32, num_kv_heads=4, head_size=256, dtype=torch.bfloat16)
    windows = [256, 512, 512, 512, 512, 256, 256, 512]  # the sliding layers', in order
    specs: dict[str, Any] = {}
    for i in range(16):
        specs[f"model.layers.{i}.attn"] = (
            FullAttentionSpec(**common) if i % 2 else
            SlidingWindowSpec(sliding_window=windows[i // 2], **common))
    vc = _vllm_config(2048, 4096, False, 32)
    budget = sum(s.page_size_bytes for s in specs.values()) * 600
    theirs = kv_cache_utils.get_kv_cache_configs(vc, [specs], [budget])
    with pytest.warns(UserWarning, match="vLLM's own layout"):
        ours = _plan(vc, specs, budget)
    assert ours[0].num_blocks == theirs[0].num_blocks
    assert [sorted(g.layer_names) for g in ours[0].kv_cache_groups] == \
        [sorted(g.layer_names) for g in theirs[0].kv_cache_groups]
    _build_vllm_manager(vc, ours)
