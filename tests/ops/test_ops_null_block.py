"""Issue 13 item 5: the null block never reaches a kernel as a block it may touch.

The runtime's tables hold the null block (id 0, shared by every request) where a layer
reads nothing (sliding windows, align-mode Mamba tables, ...).  The kernel-facing
builder (:mod:`kvcore.runtime.kernel_tables`) maps it to -1, and every core kernel
skips ids < 0: writers leave block 0 bit for bit as it was, readers never read it (block
0 is filled with NaN here: a read would show).  Triton paths run in the interpreter
(``TRITON_INTERPRET=1`` from the conftest).
"""

from __future__ import annotations

import importlib.util

import pytest

torch = pytest.importorskip("torch")

from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from kvcore.kv_cache_config import KVCacheConfig, KVCacheGroupSpec  # noqa: E402
from kvcore.ops import (  # noqa: E402
    copy_blocks,
    dense_attention_ref,
    gather_cache,
    paged_decode_attention_ref,
    reshape_and_cache,
)
from kvcore.runtime import (  # noqa: E402
    KVCacheManager,
    block_table_ids,
    block_tables,
    request_block_tables,
    slot_mapping,
    state_indices,
)
from kvcore.specs import SlidingWindowSpec  # noqa: E402

needs_triton = pytest.mark.skipif(importlib.util.find_spec("triton") is None,
                                  reason="triton is not installed")
IMPLS = ["ref", pytest.param("triton", marks=needs_triton)]
BS, NB, H, D = 4, 10, 2, 8
#: the issue's align-mode table: two null entries, then block 7
TABLE = [0, 0, 7]

KV_DTYPES = {"auto": torch.bfloat16, "float32": torch.float32,
             "fp8": torch.float8_e4m3fn, "int8_per_token_head": torch.int8,
             "fp8_per_token_head": torch.float8_e4m3fn}


def _caches(kv_dtype, fill):
    dt = KV_DTYPES[kv_dtype]
    kc = torch.full((NB, BS, H, D), fill, dtype=torch.float32).to(dt)
    vc = torch.full((NB, BS, H, D), fill, dtype=torch.float32).to(dt)
    if "per_token_head" in kv_dtype:
        ks = torch.full((NB, BS, H), 1.0)
        vs = torch.full((NB, BS, H), 1.0)
    else:
        ks, vs = 1.0, 1.0
    return kc, vc, ks, vs


def _bits(t):
    return t.view(torch.uint8) if t.element_size() == 1 else t.view(torch.int16) \
        if t.element_size() == 2 else t.view(torch.int32)


# ---- the builder ---------------------------------------------------------------------

def test_builder_maps_the_null_block_to_minus_one():
    assert block_table_ids(TABLE) == [-1, -1, 7]
    assert block_tables([TABLE, [3]]) == [[-1, -1, 7], [3, -1, -1]]
    t = block_tables([TABLE, [3]], as_tensor=True)
    assert t.dtype == torch.int32 and t.tolist() == [[-1, -1, 7], [3, -1, -1]]
    assert slot_mapping(TABLE, range(12), BS) == [-1] * 8 + [28, 29, 30, 31]
    assert slot_mapping(TABLE, [12, 13], BS) == [-1, -1]  # past the table: padding
    assert state_indices([[0, 5, 6]], width=4) == [[-1, 5, 6, -1]]


@settings(max_examples=100, deadline=None)
@given(tables=st.lists(st.lists(st.integers(0, 50), max_size=8), min_size=1, max_size=5),
       bs=st.integers(1, 16))
def test_builder_rule(tables, bs):
    """-1 exactly where the runtime holds the null block; slots follow vLLM's
    ``block_id x block_size + offset``."""
    rows = block_tables(tables, as_tensor=True)
    for table, row in zip(tables, rows.tolist()):
        assert row[:len(table)] == [b if b else -1 for b in table]
        assert all(x == -1 for x in row[len(table):])
        slots = slot_mapping(table, range(len(table) * bs), bs)
        for p, s in enumerate(slots):
            b = table[p // bs]
            assert s == (b * bs + p % bs if b else -1)


def test_builder_on_a_live_sliding_window_table():
    """A sliding-window request whose early blocks left the window: the runtime holds
    the null block there; the kernel table has -1 and the slots of live tokens."""
    spec = SlidingWindowSpec(block_size=BS, num_kv_heads=1, head_size=8, sliding_window=5)
    cfg = KVCacheConfig(num_blocks=20, kv_cache_tensors=(), max_model_len=64,
                        kv_cache_groups=(KVCacheGroupSpec(("l",), spec),))
    mgr = KVCacheManager(cfg, max_model_len=64)
    r = mgr.make_request("r", list(range(10)))
    mgr.allocate_slots(r, 10)
    r.num_computed_tokens = 10
    r.append_output_token_ids(1)
    mgr.allocate_slots(r, 1)
    blocks = mgr.managers[0].get_blocks("r")
    assert blocks[0].is_null  # tokens 0..3 left the window
    row = request_block_tables(mgr, [r])[0]
    assert row[0] == -1 and all(x > 0 for x in row[1:])


# ---- writers -------------------------------------------------------------------------

@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("kv_dtype", list(KV_DTYPES))
def test_reshape_and_cache_leaves_the_null_block_alone(impl, kv_dtype):
    torch.manual_seed(0)
    kc, vc, ks, vs = _caches(kv_dtype, 0.5)
    before = [_bits(kc[0]).clone(), _bits(vc[0]).clone()]
    slots = slot_mapping(TABLE, range(12), BS, as_tensor=True)
    key = torch.randn(12, H, D).to(torch.bfloat16 if kv_dtype != "float32"
                                   else torch.float32)
    reshape_and_cache(key, key, kc, vc, slots, kv_dtype, ks, vs, impl=impl)
    assert torch.equal(_bits(kc[0]), before[0]) and torch.equal(_bits(vc[0]), before[1])
    if torch.is_tensor(ks) and ks.dim() == 3:
        assert torch.equal(ks[0], torch.ones(BS, H))
    # the live tokens went to block 7
    assert not torch.equal(_bits(kc[7]), _bits(torch.full_like(kc[7], 0.5)))


@pytest.mark.parametrize("impl", IMPLS)
def test_copy_blocks_skips_pairs_with_the_null_block(impl):
    cache = torch.arange(NB * 6, dtype=torch.float32).reshape(NB, 6)
    want = cache.clone()
    ids = block_table_ids(TABLE)
    # copy-on-write pairs taken from kernel tables: (7 -> null), (null -> 3), (7 -> 5)
    copy_blocks([cache], [[ids[2], ids[0]], [ids[1], 3], [7, 5]], impl=impl)
    want[5] = want[7]
    assert torch.equal(cache, want)


# ---- readers -------------------------------------------------------------------------

@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("kv_dtype", ["auto", "float32", "fp8", "int8_per_token_head"])
def test_gather_never_reads_the_null_block(impl, kv_dtype):
    kc, vc, ks, vs = _caches(kv_dtype, 1.0)
    if kc.dtype.is_floating_point and kc.element_size() > 1:
        kc[0] = float("nan")
        vc[0] = float("nan")
    if torch.is_tensor(ks) and ks.dim() == 3:
        ks[0] = float("nan")
        vs[0] = float("nan")
    table = block_tables([TABLE], as_tensor=True)
    k, v = gather_cache(kc, vc, table, torch.tensor([12]), kv_dtype, ks, vs, impl=impl)
    assert k.shape[0] == 12
    assert torch.equal(k[:8].float(), torch.zeros(8, H, D))  # null positions: zeros
    assert torch.isfinite(k.float()).all() and torch.isfinite(v.float()).all()
    assert (k[8:].float() != 0).all()  # block 7 is read


def test_paged_decode_attention_leaves_null_positions_out():
    torch.manual_seed(1)
    kc = torch.randn(NB, BS, H, D)
    vc = torch.randn(NB, BS, H, D)
    kc[0] = float("nan")
    vc[0] = float("nan")
    q = torch.randn(1, H, D)
    table = block_tables([TABLE], as_tensor=True)
    out = paged_decode_attention_ref(q, kc, vc, table, torch.tensor([11]))
    # equal to dense attention over the live positions 8..10 only
    k = kc[7, :3].reshape(3, H, D)
    v = vc[7, :3].reshape(3, H, D)
    want = dense_attention_ref(q, k, v, causal=False)
    assert torch.allclose(out, want, atol=1e-5)
    # every position null: zeros, not NaN
    none = paged_decode_attention_ref(q, kc, vc, torch.tensor([[-1, -1]]),
                                      torch.tensor([6]))
    assert torch.equal(none, torch.zeros_like(none))
