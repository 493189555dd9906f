"""Mamba ``all`` mode beside attention groups of several block sizes (issue 24, item
7): the state group's block size is the memory-minimal valid one.

Valid (the rule's constraints, from the issue and the runtime): a multiple of the SSM
chunk (``mamba_chunk_size``: in ``all`` mode a state must exist at every block
boundary), and one that keeps prefix hits as fine as the attention groups and the chunk
allow (hits land on multiples of the lcm of the caching groups' block sizes, so the
state block must not raise ``lcm(attention block sizes, chunk)``).  Memory of a
candidate ``b``: ``cdiv(max_model_len, b)`` state blocks per request (plus the
speculative ones), each one padded page.  The expected choice is found by brute force
over every candidate up to ``max_model_len`` (and past it), not by the planner's
code.  Before the fix the state kept its own 16-token block: 35x the state blocks of
the best choice on the issue's kind of layout."""

from __future__ import annotations

import math

import hypothesis.strategies as st
from hypothesis import assume, given, settings
from kvcore_mamba.spec import MambaSpec

from kvcore import FullAttentionSpec, SlidingWindowSpec, plan

SMALL = settings(max_examples=40, deadline=None)


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


def _brute_force(attn: set[int], chunk: int, mml: int, spec_blocks: int
                 ) -> tuple[int, set[int]]:
    """(the fewest state blocks per request over the valid candidates, the valid
    candidates reaching it)."""
    finest = math.lcm(*attn, chunk)
    valid = [b for b in range(1, 2 * max(mml, finest) + 1)
             if b % chunk == 0 and math.lcm(*attn, b) == finest]
    cost = {b: _cdiv(mml, b) + spec_blocks for b in valid}
    best = min(cost.values())
    return best, {b for b, c in cost.items() if c == best}


@SMALL
@given(heads=st.lists(st.sampled_from([1, 2, 3, 4, 6, 8]), min_size=2, max_size=3,
                      unique=True),
       sliding=st.booleans(), head_size=st.sampled_from([64, 128]),
       chunk=st.sampled_from([None, 16, 32, 48, 64]),
       mml=st.sampled_from([2048, 8192, 32768]), n_mamba=st.integers(1, 4),
       spec_tokens=st.sampled_from([0, 0, 1, 2]))
def test_state_block_is_memory_minimal_beside_several_attention_block_sizes(
        heads, sliding, head_size, chunk, mml, n_mamba, spec_tokens):
    layers: dict = {}
    for i, h in enumerate(heads):
        if sliding and i:
            layers[f"s{i}"] = SlidingWindowSpec(block_size=16, num_kv_heads=h,
                                                head_size=head_size, sliding_window=1024)
        else:
            layers[f"f{i}"] = FullAttentionSpec(block_size=16, num_kv_heads=h,
                                                head_size=head_size)
    for i in range(n_mamba):
        layers[f"m{i}"] = MambaSpec(block_size=16, shapes=((4, 1024), (16, 64, 64)),
                                    dtypes=("bfloat16", "float32"),
                                    mamba_cache_mode="all", mamba_chunk_size=chunk)
    p = plan(layers, max_model_len=mml, kv_cache_memory_bytes=64 * 2 ** 30,
             mamba_cache_mode="all", num_speculative_tokens=spec_tokens)
    groups = p.kv_cache_groups
    attn = {g.block_size for g in groups if g.kind != "mamba"}
    assume(len(attn) > 1)  # the case of the issue: several attention block sizes
    states = [g for g in groups if g.kind == "mamba"]
    assert states
    for g in states:
        b = g.block_size
        align = chunk or 1
        assert b % align == 0, (b, chunk)
        assert all(b % a == 0 for a in attn), (b, attn)  # compatible with every group
        best, argmin = _brute_force(attn, align, mml, g.spec.num_speculative_blocks)
        got = _cdiv(mml, b) + g.spec.num_speculative_blocks
        assert got == best, f"state block {b}: {got} blocks per request; the best " \
                            f"valid choice {sorted(argmin)} needs {best} (attention {attn})"
        assert b in argmin


def test_the_issue_layout_takes_the_lcm_of_the_attention_blocks():
    """Full attention of 8 and 1 KV heads and a sliding window (two attention block
    sizes after page unification) beside four Mamba states in ``all`` mode."""
    layers = {"f0": FullAttentionSpec(block_size=16, num_kv_heads=8, head_size=128),
              "s0": SlidingWindowSpec(block_size=16, num_kv_heads=1, head_size=128,
                                      sliding_window=1024)}
    for i in range(4):
        layers[f"m{i}"] = MambaSpec(block_size=16, shapes=((4, 1024), (16, 64, 64)),
                                    dtypes=("bfloat16", "float32"),
                                    mamba_cache_mode="all")
    p = plan(layers, max_model_len=8192, kv_cache_memory_bytes=40 * 2 ** 30,
             mamba_cache_mode="all")
    attn = sorted({g.block_size for g in p.kv_cache_groups if g.kind != "mamba"})
    states = {g.block_size for g in p.kv_cache_groups if g.kind == "mamba"}
    assert len(attn) == 2 and states == {math.lcm(*attn)}
    # 16-token state blocks (the old choice) would need cdiv(8192, 16) = 512 per request
    assert _cdiv(8192, states.pop()) * 10 < 512
