"""Reference attention: hand-computed cases, paged == dense."""

from __future__ import annotations

import math

import pytest

torch = pytest.importorskip("torch")

from kvcore.ops import (  # noqa: E402
    dense_attention_ref,
    paged_decode_attention_ref,
    reshape_and_cache_ref,
)


def test_dense_by_hand():
    # two keys, logits q.k / sqrt(2): [0, 2 / sqrt(2)]; softmax weights by hand
    q = torch.tensor([[[1.0, 1.0]]])
    k = torch.tensor([[[0.0, 0.0]], [[1.0, 1.0]]])
    v = torch.tensor([[[10.0]], [[20.0]]])
    w1 = 1 / (1 + math.exp(-math.sqrt(2)))
    out = dense_attention_ref(q, k, v)
    assert out.item() == pytest.approx(10 * (1 - w1) + 20 * w1, rel=1e-6)
    # window 1: the query (position 1) sees only itself
    assert dense_attention_ref(q, k, v, sliding_window=1).item() == pytest.approx(20.0)
    # causal: a query at position 0 sees only key 0
    assert dense_attention_ref(q, k, v, q_start=0).item() == pytest.approx(10.0)


def test_gqa_head_mapping():
    # 4 query heads over 2 KV heads: query heads 0, 1 read KV head 0; 2, 3 read head 1
    k = torch.zeros(1, 2, 2)
    v = torch.tensor([[[1.0], [2.0]]])
    out = dense_attention_ref(torch.randn(1, 4, 2), k, v)
    assert out.flatten().tolist() == pytest.approx([1.0, 1.0, 2.0, 2.0])


@pytest.mark.parametrize("window", [None, 5])
def test_paged_decode_equals_dense(window):
    torch.manual_seed(0)
    bs, heads, d = 4, 2, 8
    lens = [9, 3, 14]
    kc = torch.zeros(16, bs, heads, d)
    vc = torch.zeros(16, bs, heads, d)
    perm = torch.randperm(15) + 1  # block ids 1..15, scattered
    table = torch.zeros(3, 4, dtype=torch.long)
    ks, vs, nxt = [], [], 0
    for b, n in enumerate(lens):
        nblk = -(-n // bs)
        table[b, :nblk] = perm[nxt:nxt + nblk]
        nxt += nblk
        k, v = torch.randn(n, heads, d), torch.randn(n, heads, d)
        pos = torch.arange(n)
        reshape_and_cache_ref(k, v, kc, vc, table[b][pos // bs] * bs + pos % bs)
        ks.append(k)
        vs.append(v)
    q = torch.randn(3, 4, d)
    out = paged_decode_attention_ref(q, kc, vc, table, torch.tensor(lens),
                                     sliding_window=window)
    for b in range(3):
        want = dense_attention_ref(q[b:b + 1], ks[b], vs[b], sliding_window=window)
        torch.testing.assert_close(out[b], want[0])
