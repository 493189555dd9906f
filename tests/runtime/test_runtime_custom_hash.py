"""A custom block hash is checked (fresh tester, T11): one returning a str, an int or
None gave a raw TypeError; one returning ``b""`` or a single byte made different prompts
hit each other and put one block twice in a request's table.

Rule: a clear ConfigError naming ``hash`` where the manager is made; the pool never
maps another prompt's block.  A digest must be bytes of at least 8 bytes (vLLM's
shortest block hash, xxhash's 64 bits), deterministic, and not one digest for two
inputs.
"""

from __future__ import annotations

import hashlib
import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kvcore import FullAttentionSpec, KVCacheManager, plan
from kvcore.errors import ConfigError

CFG = plan({"l0": FullAttentionSpec(block_size=16, num_kv_heads=8, head_size=128)},
           max_model_len=2048, num_gpu_blocks_override=400)


def _blake(b: bytes) -> bytes:
    return hashlib.blake2b(b, digest_size=16).digest()


@settings(max_examples=60, deadline=None)
@given(out=st.one_of(st.text(max_size=40), st.integers(), st.none(),
                     st.binary(max_size=7), st.lists(st.integers(0, 255), max_size=40)))
def test_a_digest_that_is_not_bytes_of_8_or_more_is_refused(out):
    with pytest.raises(ConfigError) as e:
        KVCacheManager(CFG, max_model_len=2048, hash=lambda b: out)
    assert e.value.extra.get("field") == "hash"


@pytest.mark.parametrize("fn", [lambda b: b"x" * 32,  # one digest for every input
                                lambda b: b[:8],  # the probes share their first 8 bytes
                                (lambda c: lambda b: next(c).to_bytes(8, "little"))(
                                    itertools.count()),  # not deterministic
                                lambda b: 1 / 0])
def test_degenerate_or_failing_hashes_are_refused(fn):
    with pytest.raises(ConfigError) as e:
        KVCacheManager(CFG, max_model_len=2048, hash=fn)
    assert e.value.extra.get("field") == "hash"


@settings(max_examples=30, deadline=None)
@given(a=st.lists(st.integers(0, 1000), min_size=17, max_size=80),
       b=st.lists(st.integers(0, 1000), min_size=17, max_size=80))
def test_a_good_custom_hash_hits_exactly_what_sha256_hits(a, b):
    hits = []
    for h in ("sha256", _blake, lambda x: bytearray(_blake(x))):
        m = KVCacheManager(CFG, max_model_len=2048, hash=h, check_invariants=True)
        r = m.make_request("a", a)
        m.allocate_slots(r, len(a))
        r.num_computed_tokens = len(a)
        m.free(r)
        _, n = m.get_computed_blocks(m.make_request("b", b))
        hits.append(n)
    shared = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
    want = min(shared, len(b) - 1, len(a)) // 16 * 16
    assert hits == [want] * 3
