"""Cases from public bug reports (issue 5), each with its whole kind of fault."""

from __future__ import annotations

import itertools

import pytest
from helpers_runtime import config, cross, full, swa

from kvcore.runtime import KVCacheManager
from kvcore.runtime.block_pool import AllBlocksCleared
from kvcore.runtime.hashing import ROOT_HASH, block_extra_keys, hash_block_tokens
from kvcore.specs import PlanContext


def run_to_completion(mgr, req, num_outputs=1, out_tok=7):
    """Admit (with prefix lookup), compute the prompt, decode, free."""
    hit, n = mgr.get_computed_blocks(req)
    assert mgr.allocate_slots(req, req.num_tokens - n, n, hit) is not None
    req.num_computed_tokens = req.num_tokens
    for _ in range(num_outputs):
        req.append_output_token_ids(out_tok)
        assert mgr.allocate_slots(req, 1) is not None
        req.num_computed_tokens += 1
    mgr.free(req)
    return n


# ---- 1. eviction order: empty blocks are reused before cached ones -------------------
def test_block_size_4_new_request_never_takes_cached_blocks():
    mgr = KVCacheManager(config(7, full(4)), max_model_len=64)  # 6 usable blocks
    a = mgr.make_request("A", list(range(100, 110)))
    b = mgr.make_request("B", list(range(200, 210)))
    for r in (a, b):
        hit, n = mgr.get_computed_blocks(r)
        assert n == 0
        mgr.allocate_slots(r, 10, 0, hit)
        r.num_computed_tokens = 10
        mgr.free(r)
    c = mgr.make_request("C", list(range(300, 307)))
    assert mgr.allocate_slots(c, 7) is not None
    again = mgr.make_request("A2", list(range(100, 110)))
    _, n = mgr.get_computed_blocks(again)
    assert n == 8  # both full blocks of A (the lookup stops at (10 - 1) // 4 = 2 blocks)


def test_unhashed_blocks_always_reused_before_any_cached_block():
    """The kind: whenever free blocks without a hash exist, allocation takes them."""
    mgr = KVCacheManager(config(41, full(4)), max_model_len=256)
    pool = mgr.block_pool
    reqs = [mgr.make_request(f"r{i}", [1000 * i + t for t in range(4 * i + 3)])
            for i in range(1, 6)]
    for r in reqs:
        mgr.allocate_slots(r, r.num_tokens)
        r.num_computed_tokens = r.num_tokens
        mgr.free(r)
    n_unhashed = sum(1 for b in pool.free_queue if b.block_hash is None)
    cached_before = {b.block_id for b in pool.free_queue if b.block_hash is not None}
    new = mgr.make_request("new", list(range(50000, 50000 + 4 * n_unhashed)))
    blocks = mgr.allocate_slots(new, new.num_tokens)
    assert blocks is not None
    taken = {b.block_id for b in blocks.blocks[0]}
    assert not taken & cached_before


# ---- 2. extra keys are tagged by source ---------------------------------------------
def test_lora_and_cache_salt_with_equal_strings_do_not_share_blocks():
    mgr = KVCacheManager(config(64, full(16)), max_model_len=256)
    prompt = list(range(1, 49))
    first = mgr.make_request("lora", prompt, lora_name="X")
    assert run_to_completion(mgr, first) == 0
    second = mgr.make_request("salt", prompt, cache_salt="X")
    _, n = mgr.get_computed_blocks(second)
    assert n == 0
    # the same adapter does hit: (48 - 1) // 16 = 2 blocks
    third = mgr.make_request("lora2", prompt, lora_name="X")
    assert mgr.get_computed_blocks(third)[1] == 32
    plain = mgr.make_request("plain", prompt)
    assert mgr.get_computed_blocks(plain)[1] == 0


def test_every_pair_of_extra_key_sources_hashes_differently():
    toks = list(range(16))
    sources = ["lora", "salt", "mm"]
    digests = {s: hash_block_tokens(lambda b: __import__("hashlib").sha256(b).digest(),
                                    ROOT_HASH, toks, [(s, "X")]) for s in sources}
    for a, b in itertools.combinations(sources, 2):
        assert digests[a] != digests[b]
    # a value may not leak into the tag either: ("lora","X") vs two keys
    two = hash_block_tokens(lambda b: __import__("hashlib").sha256(b).digest(), ROOT_HASH,
                            toks, [("lora", "X"), ("salt", "X")])
    assert two not in digests.values()


def test_cache_salt_only_keys_the_first_block_and_mm_keys_overlapping_blocks():
    keys0 = block_extra_keys(0, 16, cache_salt="s", mm_features=[(20, 10, "img")])
    keys1 = block_extra_keys(16, 32, cache_salt="s", mm_features=[(20, 10, "img")])
    keys2 = block_extra_keys(32, 48, cache_salt="s", mm_features=[(20, 10, "img")])
    assert keys0 == [("salt", "s")]
    assert keys1 == [("mm", "img")]
    assert keys2 == []


def test_different_images_at_same_placeholders_miss():
    mgr = KVCacheManager(config(64, full(16)), max_model_len=256)
    prompt = list(range(1, 49))
    a = mgr.make_request("a", prompt, mm_features=[(16, 16, "img-a")])
    run_to_completion(mgr, a)
    b = mgr.make_request("b", prompt, mm_features=[(16, 16, "img-b")])
    assert mgr.get_computed_blocks(b)[1] == 16  # block 0 only, before the image


# ---- 3. hybrid + EAGLE: drop one block once, not once per group per round ----------
def test_full_plus_sliding_window_eagle_resend_320_tokens_hits_304():
    """vLLM 0.32's hybrid rule (issue 24 item 6; integrations/vllm/tests/
    test_runtime_eagle_vs_vllm.py checks it against vLLM itself): each EAGLE group
    matches one block past the candidate (319 + 16 tokens, capped at the 320 hashed)
    and drops its last matched block: 320 -> 304, the same as without EAGLE here (the
    prompt's last block is recomputed anyway).  (vLLM's old per-round drop fell to 0;
    kvcore's earlier rule, no margin, gave 288.)"""
    mgr = KVCacheManager(config(200, full(16), swa(128, 16)), max_model_len=1024,
                         use_eagle=True)
    prompt = list(range(1000, 1320))
    a = mgr.make_request("a", prompt)
    run_to_completion(mgr, a, num_outputs=3)  # decodes free blocks that left the window
    b = mgr.make_request("b", prompt)
    hit, n = mgr.get_computed_blocks(b)
    assert n == 304
    full_ids, swa_ids = hit.get_block_ids()
    assert len(full_ids) == len(swa_ids) == 19 and 0 not in full_ids
    # the window before token 304 (cdiv(127, 16) = 8 blocks) is real, the rest null
    assert swa_ids[:11] == [0] * 11 and 0 not in swa_ids[11:]
    assert mgr.allocate_slots(b, 320 - n, n, hit) is not None
    # a sibling that extends the prompt matches all 20 blocks, then drops one
    c = mgr.make_request("c", prompt + [7] * 40)
    assert mgr.get_computed_blocks(c)[1] == 304


def test_eagle_without_window_drops_exactly_one_block():
    # one group: vLLM's UnitaryKVCacheCoordinator searches up to 319 tokens and drops
    # (288); two groups: its hybrid search takes one block of margin first (304)
    for specs, expected in (((full(16),), 288), ((full(16), full(16)), 304),
                            ((swa(128, 16),), 288)):
        mgr = KVCacheManager(config(200, *specs), max_model_len=1024, use_eagle=True)
        prompt = list(range(1000, 1320))
        run_to_completion(mgr, mgr.make_request("a", prompt))
        assert mgr.get_computed_blocks(mgr.make_request("b", prompt))[1] == expected
        mgr2 = KVCacheManager(config(200, *specs), max_model_len=1024)
        run_to_completion(mgr2, mgr2.make_request("a", prompt))
        assert mgr2.get_computed_blocks(mgr2.make_request("b", prompt))[1] == 304


# ---- 4. reset_prefix_cache ---------------------------------------------------------
def test_reset_prefix_cache_with_running_request():
    mgr = KVCacheManager(config(11, full(16)), max_model_len=256, enable_events=True)
    p1 = list(range(1, 34))
    run_to_completion(mgr, mgr.make_request("p1", p1), num_outputs=0)
    running = mgr.make_request("run", list(range(500, 540)))
    assert mgr.allocate_slots(running, 40) is not None
    running.num_computed_tokens = 40
    assert len(mgr.get_block_ids(running)[0]) == 3
    free_before = mgr.num_free_blocks
    mgr.take_events()

    assert mgr.reset_prefix_cache() is False
    assert mgr.num_free_blocks == free_before
    assert running.num_computed_tokens == 40
    assert mgr.take_events() == []
    assert mgr.get_computed_blocks(mgr.make_request("p1b", p1))[1] == 32

    assert mgr.reset_prefix_cache(reset_running_requests=True) is True
    assert running.num_computed_tokens == 0
    assert mgr.get_block_ids(running) == ([],)
    assert mgr.usage == 0.0 and mgr.num_free_blocks == 10
    assert any(isinstance(e, AllBlocksCleared) for e in mgr.take_events())
    for prompt in (p1, list(range(500, 540))):
        assert mgr.get_computed_blocks(mgr.make_request("x", prompt))[1] == 0
    stats = mgr.prefix_cache_stats()
    assert stats.reset is True


def test_reset_prefix_cache_idle_returns_true_and_clears():
    mgr = KVCacheManager(config(11, full(16)), max_model_len=256)
    p = list(range(1, 34))
    run_to_completion(mgr, mgr.make_request("p", p), num_outputs=0)
    assert mgr.reset_prefix_cache() is True
    assert mgr.get_computed_blocks(mgr.make_request("q", p))[1] == 0
    assert all(b.block_hash is None for b in mgr.block_pool.blocks)


# ---- 5. cross-attention sized by the request's encoder length ------------------------
@pytest.mark.parametrize("encoder_tokens,expected", [(1500, 94), (100, 7), (16, 1)])
def test_cross_attention_blocks_follow_the_request_encoder_length(encoder_tokens, expected):
    mgr = KVCacheManager(config(2000, full(16), cross(16)), max_model_len=448,
                         max_num_batched_tokens=8192)
    req = mgr.make_request("w", [50258, 50259, 50359, 50363],
                           num_encoder_tokens=encoder_tokens)
    out = mgr.allocate_slots(req, 4)
    assert out is not None
    self_ids, cross_ids = mgr.get_block_ids(req)
    assert len(self_ids) == 1
    assert len(cross_ids) == expected  # cdiv(encoder_tokens, 16), never 8192 / 16 = 512
    # decoding never grows the cross table
    req.num_computed_tokens = 4
    for t in range(40):
        req.append_output_token_ids(t)
        assert mgr.allocate_slots(req, 1) is not None
        req.num_computed_tokens += 1
    assert len(mgr.get_block_ids(req)[1]) == expected
    mgr.free(req)
    assert mgr.usage == 0.0


def test_cross_attention_spec_sizes_by_longest_request_encoder_input():
    spec = cross(16)
    ctx = PlanContext(max_model_len=448, max_num_batched_tokens=8192,
                      max_num_encoder_input_tokens=1500)
    assert spec.max_num_blocks_per_req(ctx) == 94


def test_cross_attention_does_not_disable_decoder_prefix_caching():
    """Same audio (encoder_id) and decoder prompt: the decoder's blocks hit; other
    audio, or no identity for it, never (issue 24, item 5: the decoder's K/V depends
    on the encoder input)."""
    mgr = KVCacheManager(config(400, full(16), cross(16)), max_model_len=448)
    prompt = list(range(1, 40))
    run_to_completion(mgr, mgr.make_request("a", prompt, num_encoder_tokens=1500,
                                            encoder_id="audio-1"))
    b = mgr.make_request("b", prompt, num_encoder_tokens=1500, encoder_id="audio-1")
    hit, n = mgr.get_computed_blocks(b)
    assert n == 32
    assert mgr.allocate_slots(b, 39 - n, n, hit) is not None
    assert len(mgr.get_block_ids(b)[1]) == 94
    for kw in ({"encoder_id": "audio-2"}, {"encoder_id": None}, {"encoder_id": 1},
               {"encoder_id": "audio-1", "num_encoder_tokens": 1499}):
        kw = {"num_encoder_tokens": 1500, **kw}
        assert mgr.get_computed_blocks(mgr.make_request("c", prompt, **kw))[1] == 0, kw
