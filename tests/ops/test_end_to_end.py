"""End to end: plan -> allocate_tensors -> KVCacheManager block tables -> write tokens
through the kernels -> paged decode attention == dense attention over the original K/V.

Three plans (kvcore.planning.plan): full attention only, sliding window only, and a
hybrid one whose full-attention and sliding-window layers share tensors block by block
(a block id given to two groups at once would corrupt the other group's K/V and show up
here).  Requests share a prefix, so the second one reads K/V it never wrote (a prefix
cache hit), and the sliding-window groups drop blocks that leave the window.
"""

from __future__ import annotations

import math

import pytest

torch = pytest.importorskip("torch")

from kvcore.ops import (  # noqa: E402
    allocate_tensors,
    dense_attention_ref,
    gather_cache,
    paged_decode_attention_ref,
    reshape_and_cache,
)
from kvcore.planning import plan  # noqa: E402
from kvcore.runtime import KVCacheManager  # noqa: E402
from kvcore.specs import FullAttentionSpec, SlidingWindowSpec  # noqa: E402

BLOCK, HEADS, D, WINDOW = 4, 2, 16, 7
MAX_LEN = 64
PROMPTS = {
    "a": list(range(100, 115)),                      # 15 tokens
    "b": list(range(100, 112)) + list(range(200, 203)),  # shares a's first 12 (3 blocks)
    "c": list(range(300, 306)),                      # 6 tokens
}
DECODE_STEPS = 4

FP8_SCALES = (0.02, 0.03)  # per-tensor k_scale, v_scale


def fake_quant(x, kv_dtype, which):
    """What the cache should hold, dequantized, by the documented formulas (kvcore.ops
    .cache): per-token-head int8 ``round_half_even(x x (1 / s)) x s`` with ``s = max|x| /
    127`` over a head's channels; per-tensor fp8 ``fp8_e4m3(x x (1 / scale)) x scale``
    (saturating at 448).  (x x (1/s) rather than x / s: the two differ on ties, which
    bfloat16 inputs make common, e.g. x = max|x| / 2.)"""
    x = x.float()
    if kv_dtype == "int8_per_token_head":
        s = x.abs().amax(-1, keepdim=True) / 127
        inv = 1.0 / torch.where(s > 0, s, 1.0)
        return torch.where(s > 0, torch.round(x * inv).clamp(-127, 127) * s, 0.0)
    if kv_dtype == "fp8":
        scale = torch.tensor(FP8_SCALES[which], dtype=torch.float32)
        inv = 1.0 / scale
        return (x * inv).clamp(-448, 448).to(torch.float8_e4m3fn).float() * scale
    return x


# max |paged - dense| allowed: float32 summation order only (the dense side attends over
# fake_quant(K/V), so quantization error is not part of the comparison)
TOLERANCE = {"auto": 1e-5, "int8_per_token_head": 1e-5, "fp8": 1e-5}


def layer_specs(kind: str, kv_dtype: str) -> dict:
    """``hybrid``: equal pages; ``hybrid_scaled``: the sliding layers' page is half the
    full layers' (the planner doubles their block size); ``hybrid_padded``: a 2:3 page
    ratio (the planner pads, or plans every layer as full attention)."""
    full_heads, sw_heads = {"hybrid_scaled": (2, 1), "hybrid_padded": (3, 2)}.get(
        kind, (HEADS, HEADS))

    def full():
        return FullAttentionSpec(block_size=BLOCK, num_kv_heads=full_heads, head_size=D,
                                 kv_cache_dtype=kv_dtype)

    def sliding():
        return SlidingWindowSpec(block_size=BLOCK, num_kv_heads=sw_heads, head_size=D,
                                 kv_cache_dtype=kv_dtype, sliding_window=WINDOW)

    pattern = "FF" if kind == "full" else "SS" if kind == "sliding" else "SFSF"
    return {f"model.layers.{i}.self_attn.attn": full() if c == "F" else sliding()
            for i, c in enumerate(pattern)}


def scales_of(layer, kv_dtype):
    if layer.key_scale is not None:
        return layer.key_scale, layer.value_scale
    return FP8_SCALES if kv_dtype == "fp8" else (1.0, 1.0)


CASES = [(kind, dt) for kind in ("full", "sliding", "hybrid")
         for dt in ("auto", "int8_per_token_head", "fp8")]
CASES += [("hybrid_scaled", "auto"), ("hybrid_padded", "auto")]


@pytest.mark.parametrize(("kind", "kv_dtype"), CASES)
def test_plan_allocate_write_read_attend(kind, kv_dtype):
    torch.manual_seed(0)
    cfg = plan(layer_specs(kind, kv_dtype), max_model_len=MAX_LEN,
               num_gpu_blocks_override=48, max_num_batched_tokens=32)
    # the planned specs (block sizes may have been raised, pages padded)
    specs = {n: grp.spec_of(n) for grp in cfg.kv_cache_groups for n in grp.layer_names}
    if kind == "hybrid":
        assert len(cfg.kv_cache_groups) == 2
        assert all(len(t.shared_by) == 2 for t in cfg.kv_cache_tensors)
    if kind == "hybrid_scaled":
        assert {s.kind: s.block_size for s in specs.values()} == {
            "full_attention": BLOCK, "sliding_window": 2 * BLOCK}
    if kind == "hybrid_padded":
        # the 2:3 page ratio: sliding pages padded, or every layer planned as full
        # attention in one packed group (the window kept for the attention mask)
        sw = [s for n, s in specs.items() if n.split(".")[2] in ("0", "2")]
        assert all(s.page_size_padded is not None or (
            s.kind == "full_attention" and s.sliding_window == WINDOW) for s in sw)
    caches = allocate_tensors(cfg, "cpu")
    group_of = {n: g for g, grp in enumerate(cfg.kv_cache_groups) for n in grp.layer_names}
    mgr = KVCacheManager(cfg, max_model_len=MAX_LEN, enable_caching=True,
                         max_num_batched_tokens=32)

    # the "model": K/V of every token of every request in every layer (b's prefix K/V
    # equal a's: same tokens at the same positions)
    total = {r: len(p) + DECODE_STEPS for r, p in PROMPTS.items()}
    kv = {}
    for name in specs:
        for r in PROMPTS:
            kv[name, r] = [torch.randn(total[r], specs[name].num_kv_heads, D,
                                       dtype=torch.bfloat16) * 2 for _ in range(2)]
        for i in range(2):
            kv[name, "b"][i][:12] = kv[name, "a"][i][:12]

    def slots(table, positions, block_size):
        t = torch.tensor(table, dtype=torch.long)
        p = torch.tensor(positions, dtype=torch.long)
        return t[p // block_size] * block_size + p % block_size

    def write(req_ids, positions):
        """Write the given (request, position) tokens of every layer, one call per layer."""
        for name in specs:
            layer = caches[name]
            sm = torch.cat([slots(mgr.get_block_ids(reqs[r])[group_of[name]], [p],
                                  specs[name].block_size)
                            for r, p in zip(req_ids, positions)])
            k = torch.stack([kv[name, r][0][p] for r, p in zip(req_ids, positions)])
            v = torch.stack([kv[name, r][1][p] for r, p in zip(req_ids, positions)])
            ks, vs = scales_of(layer, kv_dtype)
            reshape_and_cache(k, v, layer.key, layer.value, sm, kv_dtype, ks, vs)

    # ---- prefill (admission one after another, as in one scheduler step) ----
    reqs = {r: mgr.make_request(r, p, max_tokens=DECODE_STEPS) for r, p in PROMPTS.items()}
    for r, req in reqs.items():
        blocks, hit = mgr.get_computed_blocks(req)
        if r == "b":
            # a's first 12 tokens, cut to a multiple of every group's block size
            lcm = math.lcm(*(g.block_size for g in cfg.kv_cache_groups))
            assert hit == 12 // lcm * lcm > 0
        n = len(PROMPTS[r])
        assert mgr.allocate_slots(req, n - hit, hit, blocks) is not None
        write([r] * (n - hit), list(range(hit, n)))
        req.num_computed_tokens = n

    # ---- decode steps: one token per request, then attention for it ----
    order = list(PROMPTS)
    for _ in range(DECODE_STEPS):
        positions = []
        for r in order:
            req = reqs[r]
            req.append_output_token_ids(1000 + req.num_computed_tokens)
            assert mgr.allocate_slots(req, 1) is not None
            positions.append(req.num_computed_tokens)
        write(order, positions)
        seq_lens = torch.tensor([p + 1 for p in positions])
        for name, spec in specs.items():
            layer = caches[name]
            tables = [mgr.get_block_ids(reqs[r])[group_of[name]] for r in order]
            width = max(len(t) for t in tables)
            table = torch.tensor([t + [0] * (width - len(t)) for t in tables])
            q = torch.randn(len(order), 2 * spec.num_kv_heads, D)  # GQA, 2 per KV head
            # a sliding layer planned as full attention still attends over its window
            window = getattr(spec, "sliding_window", None)
            ks, vs = scales_of(layer, kv_dtype)
            got = paged_decode_attention_ref(q, layer.key, layer.value, table, seq_lens,
                                             kv_cache_dtype=kv_dtype, k_scale=ks,
                                             v_scale=vs, sliding_window=window)
            for i, r in enumerate(order):
                n = positions[i] + 1
                want = dense_attention_ref(q[i:i + 1],
                                           fake_quant(kv[name, r][0][:n], kv_dtype, 0),
                                           fake_quant(kv[name, r][1][:n], kv_dtype, 1),
                                           sliding_window=window)
                err = (got[i] - want[0]).abs().max().item()
                assert err <= TOLERANCE[kv_dtype], (name, r, n, err)
        for r, p in zip(order, positions):
            reqs[r].num_computed_tokens = p + 1

    # full-attention layers: every token reads back through the block table
    # (gather_cache); sliding-window groups freed the blocks that left the window
    for name, spec in specs.items():
        tables = [mgr.get_block_ids(reqs[r])[group_of[name]] for r in order]
        if spec.kind == "sliding_window":
            assert 0 in tables[0]  # a's early blocks were replaced by the null block
            continue
        width = max(len(t) for t in tables)
        table = torch.tensor([t + [0] * (width - len(t)) for t in tables])
        lens = torch.tensor([total[r] for r in order])
        layer = caches[name]
        ks, vs = scales_of(layer, kv_dtype)
        k, v = gather_cache(layer.key, layer.value, table, lens, kv_dtype, ks, vs,
                            out_dtype=torch.float32)
        want_k = torch.cat([fake_quant(kv[name, r][0], kv_dtype, 0) for r in order])
        want_v = torch.cat([fake_quant(kv[name, r][1], kv_dtype, 1) for r in order])
        torch.testing.assert_close(k, want_k, rtol=1e-6, atol=1e-6)
        torch.testing.assert_close(v, want_v, rtol=1e-6, atol=1e-6)
    for req in reqs.values():
        mgr.free(req)
    assert mgr.usage == 0.0
