"""MambaManager in none / align / all modes, driven through kvcore's KVCacheManager,
with the cases of issue 7 (block 528, 2,200-token prompts, chunks of at most 2,048)."""

import pytest
from kvcore_mamba.manager import MambaManager, align_prefill_chunk
from kvcore_mamba.spec import MambaSpec

from kvcore.kv_cache_config import KVCacheConfig, KVCacheGroupSpec
from kvcore.planning import plan
from kvcore.registry import get_registry
from kvcore.runtime import KVCacheManager
from kvcore.specs import FullAttentionSpec

BS = 528
PROMPT = 2200
BUDGET = 2048


def state(mode, spec_blocks=0, block_size=BS, chunk=264):
    """A Mamba2-like state; its SSM kernel materialises states every ``chunk`` tokens
    (264 divides the 528-token block, so ``all`` mode keeps every boundary)."""
    return MambaSpec(block_size=block_size, shapes=((3, 64), (4, 16, 16)),
                     dtypes=("bfloat16", "float32"), mamba_cache_mode=mode,
                     num_speculative_blocks=spec_blocks, mamba_chunk_size=chunk)


def config(mode, num_blocks=2200, spec_blocks=0):
    """4 groups: one full attention, three Mamba (the issue's layout)."""
    attn = FullAttentionSpec(block_size=BS, num_kv_heads=1, head_size=64)
    groups = [KVCacheGroupSpec(("model.layers.3.self_attn.attn",), attn)]
    for i in range(3):
        groups.append(KVCacheGroupSpec((f"model.layers.{i}.mamba",),
                                       state(mode, spec_blocks)))
    return KVCacheConfig(num_blocks=num_blocks, kv_cache_tensors=(),
                         kv_cache_groups=tuple(groups), max_model_len=32768)


def prefill(mgr, req, mode, chunks=None, lookahead=0):
    """Admit and prefill a request in chunks of at most BUDGET tokens (aligned to block
    boundaries in align mode, as vLLM's scheduler does); returns the hit length."""
    hit_blocks, hit = mgr.get_computed_blocks(req)
    total = len(req.all_token_ids)
    done, first = hit, True
    while done < total:
        n = min(BUDGET, total - done)
        if mode == "align":
            n = align_prefill_chunk(done, n, total, BS)
        if chunks is not None:
            chunks.append(n)
        if first:
            out = mgr.allocate_slots(req, n, num_new_computed_tokens=hit,
                                     new_computed_blocks=hit_blocks,
                                     num_lookahead_tokens=lookahead)
            first = False
        else:
            out = mgr.allocate_slots(req, n, num_lookahead_tokens=lookahead)
        assert out is not None
        done += n
        req.num_computed_tokens = done
        for m in mgr.managers[1:]:
            real = [b for b in m.get_blocks(req.request_id) if not b.is_null]
            # resident state blocks: 2 + S in align mode, 1 + S in none mode
            bound = {"align": 2, "none": 1}.get(mode)
            if bound is not None:
                assert len(real) <= bound + m.num_spec
    return hit


def cached_positions(mgr, req, gid):
    cache = mgr.block_pool.cached[gid]
    return [i for i, h in enumerate(req.block_hashes) if h in cache]


def two_prompts(shared):
    first = list(range(PROMPT))
    second = list(range(shared)) + list(range(10**6, 10**6 + PROMPT - shared))
    return first, second


def test_registered_manager_class():
    assert get_registry().manager_class("mamba") is MambaManager


def test_align_chunks_and_checkpoints():
    mgr = KVCacheManager(config("align"), max_model_len=32768)
    r1 = mgr.make_request("r1", list(range(PROMPT)))
    chunks = []
    assert prefill(mgr, r1, "align", chunks) == 0
    assert chunks == [1584, 528, 88]
    for gid in (1, 2, 3):
        # checkpoints at 1,584 and 2,112 tokens = the ends of blocks 2 and 3
        assert cached_positions(mgr, r1, gid) == [2, 3]
        table = mgr.managers[gid].get_blocks("r1")
        # the step that read the 2,112 state still holds it: 2 real blocks
        assert len(table) == 5 and [b.is_null for b in table] == [True] * 3 + [False] * 2
    assert cached_positions(mgr, r1, 0) == [0, 1, 2, 3]


@pytest.mark.parametrize("mode,shared,expected", [
    ("align", 1600, 1584),  # checkpoint at 1,584 lies in the shared prefix
    ("align", 1500, 0),     # checkpoints at 1,584 / 2,112 lie in unique tokens
    ("all", 1500, 1056),    # every boundary kept: 1,056 = 2 blocks
    ("all", 1600, 1584),
])
def test_second_request_hits(mode, shared, expected):
    mgr = KVCacheManager(config(mode), max_model_len=32768)
    p1, p2 = two_prompts(shared)
    r1 = mgr.make_request("r1", p1)
    prefill(mgr, r1, mode)
    mgr.free(r1)
    r2 = mgr.make_request("r2", p2)
    hit = prefill(mgr, r2, mode)
    assert hit == expected
    if expected:
        i = expected // BS - 1
        for gid in (1, 2, 3):
            table = mgr.managers[gid].get_blocks("r2")
            assert all(b.is_null for b in table[:i]) or mode == "all"
    mgr.free(r2)
    assert mgr.usage == 0.0


def test_second_request_while_first_is_running():
    mgr = KVCacheManager(config("align"), max_model_len=32768)
    p1, p2 = two_prompts(1600)
    r1 = mgr.make_request("r1", p1)
    prefill(mgr, r1, "align")
    r2 = mgr.make_request("r2", p2)
    assert prefill(mgr, r2, "align") == 1584


def test_none_mode_turns_prefix_caching_off():
    mgr = KVCacheManager(config("none", spec_blocks=2), max_model_len=32768)
    assert not mgr.enable_caching
    p1, p2 = two_prompts(2000)
    r1 = mgr.make_request("r1", p1)
    prefill(mgr, r1, "none")
    for gid in (1, 2, 3):
        assert len(mgr.managers[gid].get_blocks("r1")) == 1 + 2
    r2 = mgr.make_request("r2", p2)
    assert mgr.get_computed_blocks(r2)[1] == 0


def test_align_decode_moves_the_state_block_and_frees_the_previous_one():
    mgr = KVCacheManager(config("align", spec_blocks=1), max_model_len=32768)
    # speculative decoding: one draft slot of lookahead each step, as vLLM passes it
    r = mgr.make_request("r", list(range(BS - 1)))
    prefill(mgr, r, "align", lookahead=1)
    m = mgr.managers[1]
    table = m.get_blocks("r")
    assert len(table) == 2 and not table[0].is_null  # running block + 1 speculative
    run0, spec0 = table[0], table[1]
    # decode token BS: still block 0 -> nothing new
    r.append_output_token_ids(7)
    assert mgr.allocate_slots(r, 1, num_lookahead_tokens=1).blocks[1] == []
    r.num_computed_tokens += 1
    # token BS + 1 enters block 1: a new running block, the speculative block moves along
    r.append_output_token_ids(8)
    new = mgr.allocate_slots(r, 1, num_lookahead_tokens=1).blocks[1]
    r.num_computed_tokens += 1
    table = m.get_blocks("r")
    assert len(new) == 1 and table[1] is new[0] and table[2] is spec0 and table[0] is run0
    assert run0.block_hash is not None  # block 0 was full: its state is a checkpoint
    # next step frees the previous running block (it stays cached)
    r.append_output_token_ids(9)
    mgr.allocate_slots(r, 1, num_lookahead_tokens=1)
    assert m.get_blocks("r")[0].is_null and run0.ref_cnt == 0
    assert mgr.block_pool.get_cached_block(run0.block_hash, 1) is run0


def test_all_or_nothing_when_blocks_run_out():
    mgr = KVCacheManager(config("all", num_blocks=12), max_model_len=32768)
    r = mgr.make_request("r", list(range(PROMPT)))
    free = mgr.num_free_blocks
    # 2,048 tokens: 4 attention blocks + 3 x 4 state blocks = 16 > 11 free
    assert mgr.allocate_slots(r, 2048) is None
    assert mgr.num_free_blocks == free
    assert all(not m.get_blocks("r") for m in mgr.managers)


def test_align_prefill_chunk_rule():
    assert align_prefill_chunk(0, 2048, 2200, 528) == 1584
    assert align_prefill_chunk(1584, 616, 2200, 528) == 528
    assert align_prefill_chunk(2112, 88, 2200, 528) == 88
    assert align_prefill_chunk(0, 100, 2200, 528) == 100  # under one block: as is
    assert align_prefill_chunk(0, 2048, 2200, 528, use_eagle=True) == 1584


def test_issue_plan_69_blocks_per_request():
    # 4 attention + 12 Mamba layers (align, block 528) -> 4 groups of 4 layers
    specs = {}
    for i in range(16):
        if i % 4 == 3:
            specs[f"model.layers.{i}.self_attn.attn"] = FullAttentionSpec(
                block_size=BS, num_kv_heads=1, head_size=64)
        else:
            specs[f"model.layers.{i}.mamba"] = state("align")
    cfg = plan(specs, max_model_len=32768, num_gpu_blocks_override=2200,
               mamba_cache_mode="align")
    assert len(cfg.kv_cache_groups) == 4
    assert sorted(g.kind for g in cfg.kv_cache_groups) == ["full_attention"] + ["mamba"] * 3
    assert {g.block_size for g in cfg.kv_cache_groups} == {BS}
    # 3 x 2 + cdiv(32768, 528) = 69 blocks per request; 2200 / 69 = 31.88
    assert cfg.stats["max_concurrency"] == pytest.approx(2200 / 69, rel=1e-9)
    assert round(cfg.stats["max_concurrency"], 2) == 31.88
    assert cfg.stats["blocks_per_request"] == 69
    # int(2200 x 32768 / 69) = int(1,044,776.8)
    assert cfg.stats["kv_cache_capacity_tokens"] == 1_044_776


def test_none_mode_runtime_on_the_jamba_plan():
    # the jamba-v0.1 vector's plan (mamba block 32,768 tokens, attention 144): one
    # state block per request in each Mamba group, whatever the length
    import json
    from pathlib import Path

    from kvcore.planning import plan_from_specs_file

    vec = json.loads((Path(__file__).parent / "data" / "jamba-v0.1.json").read_text())
    cfg = plan_from_specs_file(vec["input"])
    mgr = KVCacheManager(cfg, max_model_len=32768)
    assert not mgr.enable_caching
    r = mgr.make_request("r", list(range(10_000)))
    assert mgr.allocate_slots(r, 8192) is not None
    r.num_computed_tokens = 8192
    assert mgr.allocate_slots(r, 10_000 - 8192) is not None
    sizes = {g.kind: [] for g in cfg.kv_cache_groups}
    for g, m in zip(cfg.kv_cache_groups, mgr.managers):
        sizes[g.kind].append(len(m.get_blocks("r")))
    assert sizes["mamba"] == [1] * 7
    assert sizes["full_attention"] == [-(-10_000 // 144)]  # 70 blocks
    # per request at 10,000 tokens: 7 + 70 of the 8,476 usable blocks
    assert mgr.block_pool.num_held_blocks() == 77
