"""RSWAManager inside kvcore.runtime.KVCacheManager.

The issue's case: a 1,000-token prompt, block 16, window 128, then 10,000 generated
tokens: the blocks held never exceed cdiv(1000, 16) + cdiv(128, 16) + 2 = 73, and the
attention reads, through the manager's block table, exactly the prompt plus the last
128 generated tokens, each from the slot where that token's K/V was written."""

from __future__ import annotations

import dataclasses
import importlib.util
import math

import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from kvcore_rswa import RSWASpec
from kvcore_rswa.kernels import rswa_decode_attention_triton, rswa_visible_slots

from kvcore.planning import plan
from kvcore.runtime import KVCacheManager
from kvcore.specs import FullAttentionSpec, cdiv

#: the Triton check inside the issue case runs only where triton is installed
HAS_TRITON = importlib.util.find_spec("triton") is not None


def make_manager(window=128, block=16, num_blocks=80, layers=2, max_model_len=16384,
                 enable_caching=True):
    specs = {f"model.layers.{i}.self_attn": RSWASpec(
        block_size=block, num_kv_heads=1, head_size=16, dtype="float32",
        rswa_window=window) for i in range(layers)}
    cfg = plan(specs, max_model_len=max_model_len, kv_cache_memory_bytes=1 << 30)
    assert [g.kind for g in cfg.kv_cache_groups] == ["rswa"]
    # fewer blocks than one full-attention request of max_model_len: planning refuses
    # that (R-SWA plans as full attention), the runtime is what is tested here
    cfg = dataclasses.replace(cfg, num_blocks=num_blocks)
    return KVCacheManager(cfg, max_model_len=max_model_len, enable_caching=enable_caching)


def tokens(n, seed):
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, 50_000, (n,), generator=g).tolist()


def test_issue_case_1000_prompt_10000_generated():
    P, B, W, GEN = 1000, 16, 128, 10_000
    bound = cdiv(P, B) + cdiv(W, B) + 2            # 73
    # 80 blocks (79 usable): full attention would need cdiv(11000, 16) = 688
    mgr = make_manager(window=W, block=B, num_blocks=80)
    req = mgr.make_request("r", tokens(P, 0), max_tokens=GEN)
    hit, n = mgr.get_computed_blocks(req)
    assert n == 0
    assert mgr.allocate_slots(req, P) is not None
    # what each physical slot holds: the position whose K/V was written there
    content = torch.full((80, B), -1, dtype=torch.int64)
    content_py = [[-1] * B for _ in range(80)]
    # per-position keys/values for the kernel check (1 KV head, 16 channels)
    g = torch.Generator().manual_seed(1)
    kv_k = torch.randn(P + GEN, 1, 16, generator=g)
    kv_v = torch.randn(P + GEN, 1, 16, generator=g)
    kc = torch.full((80, B, 1, 16), float("nan"))
    vc = torch.full((80, B, 1, 16), float("nan"))

    def write(table, start, end):
        for pos in range(start, end):
            b = table[pos // B]
            assert b != 0
            assert b != 0, f"position {pos} is being written into the null block"
            content[b, pos % B] = pos
            content_py[b][pos % B] = pos
            kc[b, pos % B] = kv_k[pos]
            vc[b, pos % B] = kv_v[pos]

    write(mgr.get_block_ids(req)[0], 0, P)
    req.num_computed_tokens = P
    req.append_output_token_ids(7)
    max_held = 0
    checkpoints = {P + W, P + GEN - 1}   # the Triton interpreter is slow: two
    for step in range(GEN):
        q = req.num_computed_tokens                       # position computed now
        assert mgr.allocate_slots(req, 1) is not None, f"no room at position {q}"
        table = mgr.get_block_ids(req)[0]
        held = sum(1 for b in table if b != 0)
        max_held = max(max_held, held)
        assert held <= bound, (q, held)
        write(table, q, q + 1)
        # the window's keys: in kept blocks, each in the slot it was written to
        for k in range(max(P, q - W + 1), q + 1):
            b = table[k // B]
            assert b != 0 and content_py[b][k % B] == k, (q, k)
        want = list(range(P)) + list(range(max(P, q - W + 1), q + 1))
        if q in checkpoints or step % 500 == 0:
            # everything the kernel reads for the query at q, and where from
            bt = torch.tensor(table, dtype=torch.int32)
            pos, bids, offs = rswa_visible_slots(bt, q + 1, P, W, B)
            assert pos.tolist() == want
            assert int((bids == 0).sum()) == 0, "a visible position maps to the null block"
            assert torch.equal(content[bids, offs], pos), "a kept slot was overwritten"
        if q in checkpoints and HAS_TRITON:  # (skipped cleanly without triton)
            # the Triton kernel through the same table, freed blocks poisoned
            live = set(table)
            for b in range(80):
                if b not in live or b == 0:
                    kc[b] = float("nan")
                    vc[b] = float("nan")
            query = torch.randn(1, 2, 16, generator=g)
            out = rswa_decode_attention_triton(
                query, kc, vc, bt.view(1, -1), torch.tensor([q + 1]), torch.tensor([P]), W)
            kk, vv = kv_k[want].repeat_interleave(2, 1), kv_v[want].repeat_interleave(2, 1)
            s = torch.einsum("hd,nhd->hn", query[0], kk) / math.sqrt(16)
            dense = torch.einsum("hn,nhd->hd", torch.softmax(s, -1), vv)
            torch.testing.assert_close(out[0], dense, atol=2e-5, rtol=2e-5)
        req.num_computed_tokens += 1
        req.append_output_token_ids(step % 1000)
    # the prompt (63 blocks) plus a window spanning 9 blocks is reached
    assert max_held == 72
    mgr.free(req)
    assert mgr.usage == 0.0


def test_prefix_cache_offers_prompt_blocks_only():
    P, B, W = 1000, 16, 128
    mgr = make_manager(window=W, block=B, num_blocks=400)
    prompt = tokens(P, 2)
    a = mgr.make_request("a", prompt, max_tokens=600)
    mgr.allocate_slots(a, P)
    a.num_computed_tokens = P
    for i in range(500):                 # 500 generated tokens, positions 1000..1499
        a.append_output_token_ids(i)
        assert mgr.allocate_slots(a, 1) is not None
        a.num_computed_tokens += 1
    # same prompt: the 62 full prompt blocks hit (992 tokens; block 62 is partial)
    b = mgr.make_request("b", prompt)
    hit, n = mgr.get_computed_blocks(b)
    assert n == 992
    # a next turn whose prompt is a's whole history: generated blocks were never
    # cached (their K/V saw only the window), so the hit stops at the same 992
    c = mgr.make_request("c", list(a.all_token_ids) + tokens(100, 3))
    hit, n = mgr.get_computed_blocks(c)
    assert n == 992
    mgr.free(a)
    hit, n = mgr.get_computed_blocks(c)
    assert n == 992


def test_full_attention_would_cache_the_history():
    # control for the test above: the same run with full attention hits 1,488 tokens
    specs = {"l0": FullAttentionSpec(block_size=16, num_kv_heads=1, head_size=16)}
    cfg = plan(specs, max_model_len=4096, kv_cache_memory_bytes=1 << 30,
               num_gpu_blocks_override=400)
    mgr = KVCacheManager(cfg, max_model_len=4096)
    a = mgr.make_request("a", tokens(1000, 2))
    mgr.allocate_slots(a, 1000)
    a.num_computed_tokens = 1000
    for i in range(500):
        a.append_output_token_ids(i)
        mgr.allocate_slots(a, 1)
        a.num_computed_tokens += 1
    c = mgr.make_request("c", list(a.all_token_ids) + tokens(100, 3))
    assert mgr.get_computed_blocks(c)[1] == 1488


def test_allocation_is_all_or_nothing_and_counts_freed_gap():
    # 12 usable blocks, prompt 32 (2 blocks), window 16, block 16.  Positions 32 and
    # 48 take the last 2 free blocks; from position 64 on, each new block is only
    # available because the same step frees the gap's oldest block (the check counts
    # blocks freed by skipping before deciding)
    mgr = make_manager(window=16, block=16, num_blocks=13)
    r = mgr.make_request("r", tokens(32, 4))
    assert mgr.allocate_slots(r, 32) is not None
    r.num_computed_tokens = 32
    other = mgr.make_request("o", tokens(16 * 8, 5))
    assert mgr.allocate_slots(other, 16 * 8) is not None    # 8 more: 10 held, 2 free
    for i in range(64):
        r.append_output_token_ids(i)
        assert mgr.allocate_slots(r, 1) is not None, i
        r.num_computed_tokens += 1
    # last step computed position 95: it sees 80..95 (block 5), so blocks 2-4 are
    # freed and nulled; prompt blocks 0-1 kept; 1 block free again
    table = mgr.get_block_ids(r)[0]
    assert table[2:5] == [0, 0, 0] and 0 not in table[:2] + table[5:] and len(table) == 6
    assert mgr.num_free_blocks == 1
    # a request needing more than what is free gets None and changes nothing
    before = (mgr.num_free_blocks, mgr.get_block_ids(r))
    big = mgr.make_request("big", tokens(16 * 5, 6))
    assert mgr.allocate_slots(big, 16 * 5) is None
    assert (mgr.num_free_blocks, mgr.get_block_ids(r)) == before


@settings(max_examples=25, deadline=None)
@given(prompt=st.integers(1, 70), window=st.integers(1, 50),
       block=st.sampled_from([1, 4, 8, 16]), steps=st.lists(st.integers(1, 4), max_size=60))
def test_property_visible_positions_always_kept(prompt, window, block, steps):
    mgr = make_manager(window=window, block=block, num_blocks=2000, layers=1)
    req = mgr.make_request("r", tokens(prompt, prompt))
    assert mgr.allocate_slots(req, prompt) is not None
    written = {}
    table = mgr.get_block_ids(req)[0]
    for pos in range(prompt):
        written[(table[pos // block], pos % block)] = pos
    req.num_computed_tokens = prompt
    req.append_output_token_ids(1)
    for k in steps:                         # k new tokens per step (speculative-like)
        q0 = req.num_computed_tokens
        req.append_output_token_ids([1] * (k - 1)) if k > 1 else None
        assert mgr.allocate_slots(req, k) is not None
        table = mgr.get_block_ids(req)[0]
        for pos in range(q0, q0 + k):
            assert table[pos // block] != 0
            written[(table[pos // block], pos % block)] = pos
        for q in range(q0, q0 + k):         # every query of the step sees its keys
            for key in range(q + 1):
                if key < prompt or q - key < window:
                    b = table[key // block]
                    assert b != 0 and written[(b, key % block)] == key
        held = sum(1 for b in table if b != 0)
        assert held <= cdiv(prompt, block) + cdiv(window - 1 + k, block) + 1 or \
            held <= cdiv(q0 + k, block)
        req.num_computed_tokens += k
        req.append_output_token_ids(2)
    mgr.free(req)
    assert mgr.usage == 0.0


def test_resumed_request_never_hits_past_its_prompt():
    """A preempted request is resumed with its own output in its token list.  Blocks
    another request cached as *prompt* may hold the same tokens, but their K/V saw the
    whole prefix while this request's output positions must see only the window: the
    hit stops at this request's last whole prompt block."""
    B = 16
    mgr = make_manager(block=B, num_blocks=400)
    history = tokens(1000, 7)
    x = mgr.make_request("x", history)          # caches 62 prompt blocks
    mgr.allocate_slots(x, 1000)
    x.num_computed_tokens = 1000
    r = mgr.make_request("r", history[:500])    # prompt 500 tokens (31 whole blocks)
    for t in history[500:]:                     # its output equals x's prompt tail
        r.append_output_token_ids(t)
    assert r.num_prompt_tokens == 500 and len(r.all_token_ids) == 1000
    _, n = mgr.get_computed_blocks(r)
    assert n == 496                              # not 992
