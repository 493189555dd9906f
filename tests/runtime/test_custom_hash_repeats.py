"""tester T5: a custom block hash whose digests repeat along one prompt (it passes the
probe) never puts one block several times in a request's table.

The rule: a table holds a block once (each position its own K/V); a custom hash that
makes the hit list repeat a block is refused with a ConfigError naming ``hash`` at
get_computed_blocks, before any state changes, and the manager stays usable.
Generated: prompts of repeated block contents (runs, padding, repeated system prompts)
of drawn lengths, hashes of the family (trailing bytes only, keyed on the tokens), and a
well-formed custom hash that must never be refused.
"""

from __future__ import annotations

import hashlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kvcore import FullAttentionSpec, KVCacheManager, plan
from kvcore.errors import ConfigError

BS = 4
CFG = plan({"l0": FullAttentionSpec(block_size=BS, num_kv_heads=1, head_size=8)},
           max_model_len=512, num_gpu_blocks_override=400)


def tail_only(d: bytes) -> bytes:  # ignores the parent: repeats for repeated blocks
    return hashlib.sha256(d[-8:]).digest()


def tokens_only(d: bytes) -> bytes:  # the block's 4 int64 tokens only, no parent
    return hashlib.sha256(d[-32:]).digest()


def whole(d: bytes) -> bytes:  # a well-formed custom hash
    return hashlib.blake2b(d, digest_size=16).digest()


def _serve(mgr, rid, prompt):
    r = mgr.make_request(rid, prompt, max_tokens=2)
    hit, n = mgr.get_computed_blocks(r)
    mgr.allocate_slots(r, len(prompt) - n, n, hit)
    r.num_computed_tokens = len(prompt)
    return r, None


PROMPTS = st.lists(st.sampled_from([[1] * BS, [2] * BS, [1, 2, 3, 4]]), min_size=2,
                   max_size=12).map(lambda blocks: [t for b in blocks for t in b])


@settings(max_examples=60, deadline=None, derandomize=True)
@given(PROMPTS, PROMPTS, st.sampled_from([tail_only, tokens_only, whole]))
def test_a_table_never_holds_a_block_twice(first, second, fn):
    mgr = KVCacheManager(CFG, max_model_len=512, hash=fn, check_invariants=True)
    a, _ = _serve(mgr, "a", first)
    mgr.free(a)
    b = mgr.make_request("b", second + [9], max_tokens=2)
    try:
        hit, n = mgr.get_computed_blocks(b)
    except ConfigError as e:
        assert fn is not whole  # a well-formed hash is never refused
        assert e.extra.get("field") == "hash"
        assert fn.__name__ in str(e)
        # nothing changed: the manager still serves a fresh request
        c, _ = _serve(mgr, "c", [7, 7, 7, 7, 8])
        mgr.free(c)
        return
    ids = [blk.block_id for blk in hit.blocks[0] if not blk.is_null]
    assert len(ids) == len(set(ids))
    mgr.allocate_slots(b, len(second) + 1 - n, n, hit)
    if fn is whole:  # the rule of a correct hash: the hit is the common whole blocks
        common = 0
        while common + BS <= min(len(first), len(second)) and \
                first[common:common + BS] == second[common:common + BS]:
            common += BS
        assert n == min(common, len(second))  # the last token is never a hit (len+1)


def test_the_tester_example_is_refused():
    mgr = KVCacheManager(CFG, max_model_len=512,
                         hash=lambda d: hashlib.sha256(d[-8:]).digest())
    a, _ = _serve(mgr, "a", [1] * 16)
    mgr.free(a)
    b = mgr.make_request("b", [1] * 16 + [2], max_tokens=4)
    with pytest.raises(ConfigError) as e:
        mgr.get_computed_blocks(b)
    assert e.value.extra.get("field") == "hash" and "blocks 0 and 1" in str(e.value)
