"""Issue 13 (runtime safety), the Mamba half: items 1, 3, 4 and 6, each as the issue's
example plus generated cases checked against :mod:`mamba_shadow` (a model of what the
state kernels read and write).

* item 1: with speculative tokens (lookahead 0 on a request's first allocation, then
  ``num_speculative_tokens``, as vLLM's scheduler passes it) the block holding a
  request's only state is never freed while it is read, never handed to another group,
  and ``state_block()`` is never the null block;
* item 3: no state block is published for a boundary no chunk ended on;
* item 4: ``align_prefill_chunk`` / the ``max_prefill_chunk_tokens`` hook end a chunk on
  the boundary whose state will be cached (EAGLE included);
* item 6: ``mamba_chunk_size`` sets the block-size alignment of ``all`` mode; the
  planner rounds block sizes up to it and the runtime refuses a misaligned one.
"""

from __future__ import annotations

import random

import hypothesis.strategies as st
import pytest
from hypothesis import given, settings
from kvcore_mamba.manager import MambaManager, align_prefill_chunk, last_checkpoint_position
from kvcore_mamba.spec import MambaSpec
from mamba_shadow import MambaShadow

from kvcore.errors import ConfigError, KVCoreError
from kvcore.kv_cache_config import KVCacheConfig, KVCacheGroupSpec
from kvcore.planning import plan
from kvcore.runtime import KVCacheManager
from kvcore.specs import FullAttentionSpec

SMALL = settings(max_examples=40, deadline=None)


def issue_config(mode, num_speculative_tokens=2):
    layers = {"attn": FullAttentionSpec(block_size=4, num_kv_heads=1, head_size=8),
              "ssm": MambaSpec(block_size=4, shapes=((1, 4), (1, 2, 2)),
                               dtypes=("bfloat16", "float32"), mamba_cache_mode=mode)}
    return plan(layers, max_model_len=64, num_gpu_blocks_override=40,
                mamba_cache_mode=mode, num_speculative_tokens=num_speculative_tokens)


# ---- item 1: the issue's example ---------------------------------------------------------

@pytest.mark.parametrize("mode", ["align", "all"])
def test_issue_state_block_survives_the_first_speculative_step(mode):
    mgr = KVCacheManager(issue_config(mode), max_model_len=64)
    attn, ssm = mgr.managers
    r = mgr.make_request("A", [1, 2, 3, 4, 5])
    mgr.allocate_slots(r, 5)
    st_block = ssm.state_block("A")
    r.num_computed_tokens = 5
    r.append_output_token_ids(7)
    mgr.allocate_slots(r, 3, num_lookahead_tokens=2)
    assert st_block not in attn.req_to_blocks["A"]
    # the state after 5 tokens is still held by this request and is still its state
    assert st_block.ref_cnt == 1 and st_block in ssm.req_to_blocks["A"]
    assert ssm.state_block("A") is st_block  # block of token 7 = block 1, as token 4


@pytest.mark.parametrize("mode", ["align", "all"])
def test_issue_decode_without_drafts_keeps_a_real_state_block(mode):
    mgr = KVCacheManager(issue_config(mode), max_model_len=64)
    ssm = mgr.managers[1]
    r = mgr.make_request("A", [1, 2, 3, 4, 5])
    mgr.allocate_slots(r, 5)
    held = ssm.state_block("A")
    r.num_computed_tokens = 5
    r.append_output_token_ids(7)
    # no drafts this step: one new token, with or without lookahead slots
    for lookahead in (0, 2):
        assert mgr.allocate_slots(r, 1, num_lookahead_tokens=lookahead) is not None
        sb = ssm.state_block("A")
        assert sb is not None and not sb.is_null and sb is held


def test_lookahead_does_not_move_the_state():
    """The state layer is sized by the main model's tokens: the same step with and
    without lookahead slots gives the same Mamba table."""
    tables = []
    for lookahead in (0, 2):
        mgr = KVCacheManager(issue_config("align"), max_model_len=64)
        r = mgr.make_request("A", list(range(1, 8)))
        mgr.allocate_slots(r, 7, num_lookahead_tokens=lookahead)
        tables.append(len(mgr.managers[1].get_blocks("A")))
    assert tables[0] == tables[1] == 2 + 2  # [null, running] + 2 speculative


# ---- the generated driver ----------------------------------------------------------------

def _config(mode, bs, spec, num_blocks, chunk):
    attn = FullAttentionSpec(block_size=bs, num_kv_heads=1, head_size=8)
    kw = {"mamba_chunk_size": chunk} if chunk else {}
    mamba = MambaSpec(block_size=bs, shapes=((2, 8),), dtypes=("float32",),
                      mamba_cache_mode=mode, num_speculative_blocks=spec, **kw)
    return KVCacheConfig(num_blocks=num_blocks, kv_cache_tensors=(),
                         kv_cache_groups=(KVCacheGroupSpec(("a",), attn),
                                          KVCacheGroupSpec(("m",), mamba)),
                         max_model_len=4096)


def drive(seed, mode, bs, spec, num_blocks, chunk, use_cap, steps=300, eagle=False):
    """Random requests sharing prefixes, chunked prefill (capped by the manager hook
    or not), decode with 0..spec drafts and random acceptance, same-step admissions,
    frees and preemptions; the shadow checks every call."""
    rng = random.Random(seed)
    mgr = KVCacheManager(_config(mode, bs, spec, num_blocks, chunk), max_model_len=4096,
                         use_eagle=eagle)
    sh = MambaShadow(mgr, 1)
    base = [rng.randrange(4) for _ in range(12 * bs)]
    live: dict[str, dict] = {}
    n_req = 0
    stats = {"alloc": 0, "refused": 0, "hits": 0}
    for _ in range(steps):
        # a step: every live request gets at most one allocation, then the kernels run
        scheduled = []
        if len(live) < 4 and rng.random() < 0.5:
            n_req += 1
            shared = rng.randrange(0, len(base))
            length = rng.randrange(shared + 1, shared + 4 * bs + 2)
            prompt = base[:shared] + [1000 * n_req + j for j in range(length - shared)]
            req = mgr.make_request(f"r{n_req}", prompt, max_tokens=64)
            sh.learn_hashes(req)
            live[req.request_id] = {"req": req, "first": True}
        for rid in list(live):
            st_ = live[rid]
            req = st_["req"]
            hit_blocks = None
            hit = 0
            if st_["first"]:
                hit_blocks, hit = mgr.get_computed_blocks(req)
                sh.check_hit(req, hit_blocks, hit)
            c = req.num_computed_tokens + hit
            total = len(req.all_token_ids)
            if c < total - 1 or (st_["first"] and c < total):
                n = rng.randrange(1, 3 * bs + 2)
                n = min(n, total - c)
                if use_cap:
                    n = mgr.max_prefill_chunk_tokens(req, n, hit)
                drafts = 0
            else:  # decode: the last sampled token plus 0..spec drafts
                drafts = rng.randrange(spec + 1)
                n = 1 + drafts
            lookahead = 0 if st_["first"] else spec
            sh.before(req, c, hit_blocks if hit else None)
            kw = dict(num_new_computed_tokens=hit, new_computed_blocks=hit_blocks) \
                if st_["first"] and hit else {}
            snap = [list(m.get_blocks(rid)) for m in mgr.managers]
            out = mgr.allocate_slots(req, n, num_lookahead_tokens=lookahead, **kw)
            if out is None:
                stats["refused"] += 1
                assert [list(m.get_blocks(rid)) for m in mgr.managers] == snap
                if st_["first"]:
                    del live[rid]  # not admitted
                continue
            stats["alloc"] += 1
            stats["hits"] += bool(hit)
            st_["first"] = False
            sh.after_allocate(req, c, min(c + n, 4096))
            scheduled.append((rid, c, n, drafts))
        # a request admitted in the same step hits only states already written
        sh.check_published()
        # the step runs; drafts are accepted at random
        for rid, c, n, drafts in scheduled:
            req = live[rid]["req"]
            accepted = rng.randrange(1, drafts + 2) if drafts else n
            # the engine keeps all_token_ids = num_computed_tokens + 1 once a step
            # reaches the end of the known tokens (accepted drafts + one sampled)
            for _ in range(c + accepted + 1 - len(req.all_token_ids)):
                req.append_output_token_ids(rng.randrange(4))
            sh.learn_hashes(req)
            req.num_computed_tokens = c + accepted
            sh.ran(req, accepted)
        sh.check_published()
        # finish or preempt some requests
        for rid in list(live):
            req = live[rid]["req"]
            if req.num_computed_tokens > 40 * bs or rng.random() < 0.08:
                mgr.free(req)
                del live[rid]
            elif rng.random() < 0.03:  # preemption: freed, recomputed from scratch
                mgr.free(req)
                req.num_computed_tokens = 0
                live[rid]["first"] = True
        sh.check_published()
    for rid in list(live):
        mgr.free(live[rid]["req"])
    sh.check_published()
    assert mgr.num_free_blocks == num_blocks - 1
    return stats


@SMALL
@given(seed=st.integers(0, 2**31), mode=st.sampled_from(["none", "align", "all"]),
       bs=st.sampled_from([2, 4, 8]), spec=st.integers(0, 3),
       chunk=st.sampled_from([None, 1, 2]), use_cap=st.booleans(),
       eagle=st.booleans(), tight=st.booleans())
def test_generated_steps_keep_every_state_read_held_and_valid(seed, mode, bs, spec, chunk,
                                                              use_cap, eagle, tight):
    drive(seed, mode, bs, spec, 40 if tight else 400, chunk, use_cap, steps=60,
          eagle=eagle)


def test_driver_seeds_exercise_hits_and_refusals():
    """A few fixed seeds long enough to hit the cache and run out of blocks."""
    hits = refused = 0
    for seed in range(4):
        for mode in ("align", "all"):
            s = drive(seed, mode, 4, 2, 60, 2, use_cap=seed % 2 == 0, steps=200)
            hits += s["hits"]
            refused += s["refused"]
    assert hits > 0 and refused > 0


# ---- item 3: never publish a boundary no chunk ended on ----------------------------------

def _all_mode(bs, chunk=None, num_blocks=64):
    attn = FullAttentionSpec(block_size=bs, num_kv_heads=1, head_size=8)
    mamba = MambaSpec(block_size=bs, shapes=((2, 8),), dtypes=("float32",),
                      mamba_cache_mode="all", mamba_chunk_size=chunk)
    return KVCacheManager(KVCacheConfig(
        num_blocks=num_blocks, kv_cache_tensors=(),
        kv_cache_groups=(KVCacheGroupSpec(("a",), attn), KVCacheGroupSpec(("m",), mamba)),
        max_model_len=8192), max_model_len=8192)


@pytest.mark.parametrize("chunk", [None, 256])
def test_issue_all_mode_does_not_publish_boundary_2048_of_chunks_1866_1160(chunk):
    mgr = _all_mode(2048, chunk)
    prompt = list(range(3026))
    r = mgr.make_request("r", prompt)
    mgr.allocate_slots(r, 1866)
    r.num_computed_tokens = 1866
    mgr.allocate_slots(r, 1160)
    r.num_computed_tokens = 3026
    mgr.free(r)
    # block 0's state is the one at 1,866: nothing is published for boundary 2,048
    assert mgr.managers[1].pool.get_cached_block(r.block_hashes[0], 1) is None
    r2 = mgr.make_request("r2", prompt[:2100] + [10**6] * 50)
    blocks, n = mgr.get_computed_blocks(r2)
    assert n == 0


def test_all_mode_publishes_boundaries_the_kernel_materialises():
    """A chunk from 0 with 256-token SSM chunks writes the state at every block
    boundary it crosses; a chunk starting at 1,866 crosses 2,048 at 182 tokens, which is
    no SSM chunk end, so that boundary is not published."""
    mgr = _all_mode(512, 256)
    r = mgr.make_request("r", list(range(3000)))
    mgr.allocate_slots(r, 1866)
    r.num_computed_tokens = 1866
    mgr.allocate_slots(r, 1134)
    r.num_computed_tokens = 3000
    mgr.free(r)
    cache = mgr.block_pool.cached[1]
    published = [i for i in range(len(r.block_hashes) // 1)
                 if r.block_hashes[i] in cache]
    assert published == [0, 1, 2]  # 512, 1,024, 1,536: boundaries of the first chunk


def test_block_is_published_only_after_its_step_ran():
    """A request admitted in the same step as the chunk that writes a checkpoint does
    not hit it (the state is not computed yet); after the step it does."""
    mgr = _all_mode(4, None)
    p = list(range(9))
    r1 = mgr.make_request("r1", p)
    mgr.allocate_slots(r1, 8)  # ends on boundary 8: the checkpoint of block 1
    r2 = mgr.make_request("r2", p)
    assert mgr.get_computed_blocks(r2)[1] == 0
    r1.num_computed_tokens = 8
    mgr.allocate_slots(r1, 1)
    assert mgr.get_computed_blocks(r2)[1] == 8


# ---- item 4: the chunk cap ---------------------------------------------------------------

def test_issue_eagle_chunk_ends_on_the_published_boundary():
    assert align_prefill_chunk(364, 1636, 2000, 1600, use_eagle=True) == 1236
    assert align_prefill_chunk(1600, 400, 2000, 1600, use_eagle=True) == 400


def test_chunk_rule_examples():
    # 2,200 tokens, block 528, budget 2,048 (vLLM's example)
    assert align_prefill_chunk(0, 2048, 2200, 528) == 1584
    assert align_prefill_chunk(1584, 616, 2200, 528) == 528
    assert align_prefill_chunk(2112, 88, 2200, 528) == 88
    assert last_checkpoint_position(2000, 1600, use_eagle=True) == 0
    assert last_checkpoint_position(3200, 1600) == 1600


@settings(max_examples=300, deadline=None)
@given(bs=st.integers(1, 64), prompt=st.integers(1, 600), eagle=st.booleans(),
       budgets=st.lists(st.integers(1, 200), min_size=1, max_size=40))
def test_chunks_end_on_every_cacheable_boundary_they_cross(bs, prompt, eagle, budgets):
    """Driving a prefill with the rule: every chunk end before the prompt end that can
    be block-aligned is; a chunk starting inside a block never runs past the block's
    end; the last cacheable boundary is a chunk end whenever a chunk crosses it."""
    last = last_checkpoint_position(prompt, bs, eagle)
    done, i, ends = 0, 0, []
    while done < prompt:
        want = min(budgets[i % len(budgets)], prompt - done)
        i += 1
        n = align_prefill_chunk(done, want, prompt, bs, eagle)
        assert 1 <= n <= want
        end = done + n
        if done % bs and end > (done // bs + 1) * bs:
            pytest.fail(f"chunk {done}->{end} runs past the end of block {done // bs}")
        assert not done < last < end, f"chunk {done}->{end} crosses {last}"
        if end < prompt and end // bs * bs > done:
            assert end % bs == 0
        ends.append(end)
        done = end
    if last and any(e >= last for e in ends):
        assert last in ends or last == 0


def test_manager_hook_caps_chunks_for_any_group():
    mgr = KVCacheManager(issue_config("align", 0), max_model_len=64)
    r = mgr.make_request("A", list(range(30)))
    # block 4: 30 tokens; a 13-token chunk ends at the boundary 12
    assert mgr.max_prefill_chunk_tokens(r, 13) == 12
    # past the prompt (decode) nothing is cut; a plain model never cuts
    r.num_computed_tokens = 30
    r.append_output_token_ids(1)
    assert mgr.max_prefill_chunk_tokens(r, 3) == 3
    plain = plan({"a": FullAttentionSpec(block_size=4, num_kv_heads=1, head_size=8)},
                 max_model_len=64, num_gpu_blocks_override=40)
    m2 = KVCacheManager(plain, max_model_len=64)
    assert m2.max_prefill_chunk_tokens(m2.make_request("B", list(range(30))), 13) == 13


def test_eagle_manager_hook():
    cfg = KVCacheConfig(
        num_blocks=40, kv_cache_tensors=(), max_model_len=4096,
        kv_cache_groups=(KVCacheGroupSpec(("a",), FullAttentionSpec(
            block_size=1600, num_kv_heads=1, head_size=8)), KVCacheGroupSpec(
            ("m",), MambaSpec(block_size=1600, shapes=((2, 8),), dtypes=("float32",),
                              mamba_cache_mode="align"))))
    mgr = KVCacheManager(cfg, max_model_len=4096, use_eagle=True)
    r = mgr.make_request("A", list(range(2000)))
    assert mgr.max_prefill_chunk_tokens(r, 1636, 364) == 1236


# ---- item 6: block size vs the SSM chunk ---------------------------------------------------

def test_issue_block_800_with_256_token_chunks_is_rounded_up():
    spec = MambaSpec(block_size=800, shapes=((3, 64), (4, 16, 16)),
                     dtypes=("bfloat16", "float32"), mamba_cache_mode="all",
                     mamba_chunk_size=256)
    assert spec.block_size_alignment == 256
    cfg = plan({"ssm": spec}, max_model_len=8192, num_gpu_blocks_override=100)
    assert cfg.kv_cache_groups[0].spec.block_size == 1024


@SMALL
@given(bs=st.integers(1, 2000), chunk=st.sampled_from([64, 128, 256]),
       mode=st.sampled_from(["align", "all"]), attn_block=st.sampled_from([16, 32, 64]))
def test_planned_all_mode_blocks_are_multiples_of_the_chunk(bs, chunk, mode, attn_block):
    spec = MambaSpec(block_size=bs, shapes=((3, 64), (4, 16, 16)),
                     dtypes=("bfloat16", "float32"), mamba_cache_mode=mode,
                     mamba_chunk_size=chunk)
    big = FullAttentionSpec(block_size=attn_block, num_kv_heads=64, head_size=256)
    for layers in ({"ssm": spec},
                   {"a": FullAttentionSpec(block_size=attn_block, num_kv_heads=1,
                                           head_size=8), "ssm": spec},
                   {"a": big, "ssm": spec}):  # the attention page is the larger
        try:
            cfg = plan(layers, max_model_len=8192, num_gpu_blocks_override=4000,
                       mamba_cache_mode=mode)
        except KVCoreError as e:  # a clear error naming the block size is also fine
            assert "mamba_chunk_size" in str(e)
            continue
        for g in cfg.kv_cache_groups:
            if g.spec.kind == "mamba" and mode == "all":
                assert g.spec.block_size % chunk == 0
        KVCacheManager(cfg, max_model_len=8192)  # the runtime accepts it


def test_runtime_refuses_misaligned_all_mode_block():
    spec = MambaSpec(block_size=800, shapes=((2, 8),), dtypes=("float32",),
                     mamba_cache_mode="all", mamba_chunk_size=256)
    cfg = KVCacheConfig(num_blocks=10, kv_cache_tensors=(), max_model_len=4096,
                        kv_cache_groups=(KVCacheGroupSpec(("m",), spec),))
    with pytest.raises(ConfigError, match="mamba_chunk_size 256"):
        KVCacheManager(cfg, max_model_len=4096)
    with pytest.raises(KVCoreError, match="multiple of mamba_chunk_size"):
        spec.check_block_size()
    with pytest.raises(KVCoreError, match="e.g. 768"):
        spec.check_block_size(528)
    assert MambaManager is not None


@pytest.mark.parametrize("name,chunk", [
    ("nemotron-h-56b-base-8k.json", 128),   # chunk_size in the config
    ("mamba2-2.7b.json", 256),              # mamba_ssm schema: Mamba2's default
    ("qwen3-next-80b-a3b-thinking.json", 64),  # gated DeltaNet: FLA's chunk
])
def test_chunk_size_from_configs(data_dir, name, chunk):
    from kvcore_mamba.adapters import mamba_layer_specs

    from kvcore.models.config import CacheConfig, load_model_config

    mc = load_model_config(data_dir / name)
    specs = mamba_layer_specs(mc, CacheConfig(mamba_cache_mode="all"))
    chunks = {s.mamba_chunk_size for s in specs.values() if s.kind == "mamba"}
    assert chunks == {chunk}


@pytest.mark.parametrize("mode", ["align", "all"])
def test_state_of_a_table_taken_out_without_free_does_not_leak(mode):
    """An engine that takes a request's tables out of ``req_to_blocks`` and frees the
    blocks later itself (a deferred free, as kvcore-vllm's ``pop_blocks_for_free``)
    and then admits the request again under the same id gets a fresh state layout."""
    mgr = KVCacheManager(issue_config(mode), max_model_len=64)
    ssm = mgr.managers[1]
    r = mgr.make_request("A", list(range(1, 11)))
    mgr.allocate_slots(r, 10)
    r.num_computed_tokens = 10
    r.append_output_token_ids(3)
    mgr.allocate_slots(r, 1, num_lookahead_tokens=2)
    popped = [m.req_to_blocks.pop("A") for m in mgr.managers]
    for m in mgr.managers:
        m.num_cached_blocks.pop("A", None)
        m.num_skipped_blocks.pop("A", None)
    for table in popped:
        mgr.block_pool.free_blocks(list(reversed(table)))
    r2 = mgr.make_request("A", list(range(1, 7)))
    assert mgr.allocate_slots(r2, 6) is not None
    table = ssm.get_blocks("A")
    assert len(table) == 2 + 2 and table[0].is_null and not table[1].is_null
    assert ssm.state_block("A") is table[1]
    r2.num_computed_tokens = 6
    r2.append_output_token_ids(4)
    assert mgr.allocate_slots(r2, 1, num_lookahead_tokens=2) is not None
    assert ssm.state_block("A") is table[1] and table[1].ref_cnt == 1


def test_mamba1_has_no_chunk_and_a_config_value_wins():
    from kvcore_mamba.adapters import mamba_layer_specs

    from kvcore.models.config import CacheConfig, parse_model_config

    base = {"model_type": "mamba", "hidden_size": 64, "num_hidden_layers": 2,
            "vocab_size": 100}
    specs = mamba_layer_specs(parse_model_config(base), CacheConfig(mamba_cache_mode="all"))
    assert {s.mamba_chunk_size for s in specs.values()} == {None}
    m2 = {"model_type": "mamba2", "hidden_size": 64, "num_hidden_layers": 2,
          "num_heads": 2, "head_dim": 64, "n_groups": 1, "vocab_size": 100,
          "chunk_size": 512}
    specs = mamba_layer_specs(parse_model_config(m2), CacheConfig(mamba_cache_mode="all"))
    assert {s.mamba_chunk_size for s in specs.values()} == {512}
