"""Encoder-decoder prefix caching (issue 24, item 5): a decoder's K/V depends on its
encoder input (the cross-attention of every layer below), so a prefix hit is allowed
only between requests with the same encoder input (``encoder_id`` and
``num_encoder_tokens``) and the same decoder prompt prefix.

The reference is brute force over the requests run so far: the expected hit of a new
request is the longest run of whole blocks (at most ``num_tokens - 1`` tokens) that it
shares with an earlier request of the same identified encoder input; 0 for a request
whose encoder input has no identity, and encoder and decoder-only requests never share.
The pool is large enough that nothing is evicted, so the manager must find exactly
that.  Checked on Whisper's real plan (decoder self-attention + cross-attention)."""

from __future__ import annotations

import hypothesis.strategies as st
from hypothesis import given, settings

from kvcore import plan_model
from kvcore.runtime import KVCacheManager

SMALL = settings(max_examples=40, deadline=None)

AUDIO = st.one_of(st.none(), st.sampled_from(["clip-a", "clip-b", b"\x01", 7, "7"]))
#: (encoder_id, num_encoder_tokens, prefix index, prefix cut, private tail length)
REQUEST = st.tuples(AUDIO, st.sampled_from([0, 1500, 1499, 64]), st.integers(0, 2),
                    st.integers(0, 80), st.integers(0, 20))


def _whisper() -> KVCacheManager:
    cfg = plan_model("whisper-tiny", kv_cache_memory_bytes=2 ** 30, max_model_len=448)
    return KVCacheManager(cfg, max_model_len=448)


def _bs(mgr: KVCacheManager) -> int:
    return mgr.hash_block_size


def _shared_blocks(a: list[int], b: list[int], bs: int) -> int:
    n = 0
    while (n + 1) * bs <= min(len(a), len(b)) and a[n * bs:(n + 1) * bs] == \
            b[n * bs:(n + 1) * bs]:
        n += 1
    return n


@SMALL
@given(reqs=st.lists(REQUEST, min_size=2, max_size=10))
def test_hits_only_with_the_same_encoder_input(reqs):
    mgr = _whisper()
    bs = _bs(mgr)
    prefixes = [[(31 * i + 7 * j) % 5000 + 1 for j in range(96)] for i in range(3)]
    done: list[tuple[object, int, list[int]]] = []
    for k, (audio, enc, p, cut, tail) in enumerate(reqs):
        toks = prefixes[p][:cut] + [9000 + k] * tail or [1]
        r = mgr.make_request(f"r{k}", toks, num_encoder_tokens=enc, encoder_id=audio)
        want = 0
        if audio is not None or not enc:
            for a2, e2, t2 in done:
                same = (type(a2) is type(audio) and a2 == audio and e2 == enc) \
                    if enc else (e2 == 0)
                if same:
                    want = max(want, _shared_blocks(toks, t2, bs))
        want = min(want * bs, (len(toks) - 1) // bs * bs)
        hit, n = mgr.get_computed_blocks(r)
        assert n == want, (k, audio, enc, n, want)
        assert mgr.allocate_slots(r, r.num_tokens - n, n, hit) is not None
        r.num_computed_tokens = r.num_tokens
        mgr.free(r)
        done.append((audio, enc, toks))


@SMALL
@given(audio=st.sampled_from(["x", "y"]), other=st.sampled_from(["x2", 5, b"x"]),
       n_blocks=st.integers(2, 6), enc=st.sampled_from([1500, 100]))
def test_different_audio_same_prompt_never_hits(audio, other, n_blocks, enc):
    """The issue's case: the same decoder prompt over other audio, or over the same
    audio at another length, or with no identity at all, reuses nothing; the same
    audio and prompt reuses every whole block but the one holding the last token."""
    mgr = _whisper()
    bs = _bs(mgr)
    prompt = list(range(1, n_blocks * bs + 1))
    first = mgr.make_request("a", prompt, num_encoder_tokens=enc, encoder_id=audio)
    mgr.allocate_slots(first, len(prompt))
    first.num_computed_tokens = len(prompt)
    mgr.free(first)
    for rid, kw in (("other", dict(encoder_id=other, num_encoder_tokens=enc)),
                    ("shorter", dict(encoder_id=audio, num_encoder_tokens=enc - 1)),
                    ("unidentified", dict(num_encoder_tokens=enc)),
                    ("no-encoder", {})):
        assert mgr.get_computed_blocks(mgr.make_request(rid, prompt, **kw))[1] == 0, rid
    same = mgr.make_request("same", prompt, num_encoder_tokens=enc, encoder_id=audio)
    assert mgr.get_computed_blocks(same)[1] == (n_blocks - 1) * bs


def test_unidentified_encoder_blocks_are_never_hit_by_decoder_only_requests():
    mgr = _whisper()
    bs = _bs(mgr)
    prompt = list(range(1, 4 * bs + 1))
    a = mgr.make_request("a", prompt, num_encoder_tokens=1500)
    mgr.allocate_slots(a, len(prompt))
    a.num_computed_tokens = len(prompt)
    mgr.free(a)
    assert mgr.get_computed_blocks(mgr.make_request("b", prompt))[1] == 0
    assert mgr.get_computed_blocks(mgr.make_request("c", prompt,
                                                    num_encoder_tokens=1500))[1] == 0
