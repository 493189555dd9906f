"""describe_batch: KV bytes read / written and attention pairs per kind, against a
brute-force oracle that lists, for every new token, the keys it attends to (the union of
those keys is what a layer reads; their count is the pairs), and against the page sizes
the references give (vLLM ``kv_cache_interface.py``; the MLA records of kvcore_mla's
module docstring: 1,152 B bf16, 656 B fp8_ds_mla per token)."""

from __future__ import annotations

import random
from types import SimpleNamespace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kvcore.sim.timing import ScheduledRequest, describe_batch
from kvcore.specs import (
    ChunkedLocalAttentionSpec,
    CrossAttentionSpec,
    EncoderOnlyAttentionSpec,
    FullAttentionSpec,
    SinkFullAttentionSpec,
    SlidingWindowSpec,
)


def _cfg(*groups):
    return SimpleNamespace(kv_cache_groups=tuple(
        SimpleNamespace(spec=spec, layer_names=tuple(f"l{i}" for i in range(n)))
        for spec, n in groups))


def _keys(kind: str, p: int, w: int | None = None, chunk: int | None = None) -> range:
    """Positions the query at position p attends to (causal)."""
    if kind == "window":
        return range(max(0, p - w + 1), p + 1)  # type: ignore[operator]
    if kind == "chunk":
        return range((p // chunk) * chunk, p + 1)  # type: ignore[operator]
    return range(0, p + 1)


def _oracle(kind: str, reqs, **kw) -> tuple[int, int]:
    read = pairs = 0
    for r in reqs:
        seen: set[int] = set()
        for p in range(r.num_computed_tokens, r.num_computed_tokens + r.num_new_tokens):
            ks = _keys(kind, p, **kw)
            seen.update(ks)
            pairs += len(ks)
        read += len(seen)
    return read, pairs


reqs_st = st.lists(st.tuples(st.integers(1, 300), st.integers(0, 3000)), min_size=1,
                   max_size=12)


@settings(max_examples=60, deadline=None)
@given(reqs_st, st.integers(1, 700), st.integers(1, 700), st.sampled_from([16, 32]))
def test_kinds_against_the_oracle(raw, window, chunk, block_size):
    reqs = [ScheduledRequest(n, c, c == 0) for n, c in raw]
    full = FullAttentionSpec(block_size=block_size, num_kv_heads=8, head_size=128)
    swa = SlidingWindowSpec(block_size=block_size, num_kv_heads=4, head_size=64,
                            sliding_window=window)
    cla = ChunkedLocalAttentionSpec(block_size=block_size, num_kv_heads=2, head_size=128,
                                    attention_chunk_size=chunk)
    b = describe_batch(_cfg((full, 3), (swa, 5), (cla, 2)), reqs)
    g_full, g_swa, g_cla = b.groups
    new = sum(r.num_new_tokens for r in reqs)
    for g, spec, layers, kind, kw in (
            (g_full, full, 3, "full", {}), (g_swa, swa, 5, "window", {"w": window}),
            (g_cla, cla, 2, "chunk", {"chunk": chunk})):
        per_tok = spec.num_kv_heads * spec.head_size * 2 * 2  # K + V, bf16
        read, pairs = _oracle(kind, reqs, **kw)
        assert g.kv_bytes_read == read * per_tok * layers
        assert g.kv_bytes_written == new * per_tok * layers
        assert g.attention_pairs == pairs * layers
        assert g.num_block_tables == len(reqs)
        assert (g.qk_dim, g.v_dim) == (spec.head_size, spec.head_size)


def test_window_and_chunk_by_hand():
    # a decode at context 5,000 under a 4,096 window reads 4,096 tokens (window - 1 + 1)
    swa = SlidingWindowSpec(block_size=16, num_kv_heads=1, head_size=1, sliding_window=4096)
    b = describe_batch(_cfg((swa, 1)), [ScheduledRequest(1, 5000, False)])
    assert b.groups[0].kv_bytes_read == 4096 * 4
    # a Llama-4 local layer (chunk 8,192) at position 10,000 reads 10,001 - 8,192 tokens
    cla = ChunkedLocalAttentionSpec(block_size=16, num_kv_heads=1, head_size=1,
                                    attention_chunk_size=8192)
    b = describe_batch(_cfg((cla, 1)), [ScheduledRequest(1, 10000, False)])
    assert b.groups[0].kv_bytes_read == (10001 - 8192) * 4


def test_quantized_pages_count_their_scales():
    # fp8 K/V: 1 byte per value; int8_per_token_head adds a float32 scale per token per
    # head for K and for V (kvcore.quant): 128 + 4 bytes each
    fp8 = FullAttentionSpec(block_size=16, num_kv_heads=8, head_size=128,
                            kv_cache_dtype="fp8")
    b = describe_batch(_cfg((fp8, 1)), [ScheduledRequest(1, 99, False)])
    assert b.groups[0].kv_bytes_read == 100 * 8 * 256
    q = FullAttentionSpec(block_size=16, num_kv_heads=8, head_size=128,
                          kv_cache_dtype="int8_per_token_head")
    b = describe_batch(_cfg((q, 1)), [ScheduledRequest(1, 99, False)])
    assert b.groups[0].kv_bytes_read == 100 * q.real_page_size_bytes // 16
    assert q.real_page_size_bytes // 16 > 8 * 256


def test_mla_records():
    mla = pytest.importorskip("kvcore_mla.specs")
    bf16 = mla.MLAAttentionSpec(block_size=64, num_kv_heads=1, head_size=576)
    ds = mla.MLAAttentionSpec(block_size=64, num_kv_heads=1, head_size=576,
                              kv_cache_dtype="fp8_ds_mla")
    reqs = [ScheduledRequest(1, 999, False)]
    assert describe_batch(_cfg((bf16, 61)), reqs).groups[0].kv_bytes_read == \
        1000 * 1152 * 61
    g = describe_batch(_cfg((ds, 61)), reqs).groups[0]
    assert g.kv_bytes_read == 1000 * 656 * 61  # 41,984 B per 64-token page
    assert (g.qk_dim, g.v_dim) == (576, 512)
    # DeepSeek-V4 compressed layer: block 256, ratio 128: 1,728 B padded page per 256
    # tokens; one key per 128 tokens in the attention pairs
    v4 = mla.MLAAttentionSpec(block_size=256, num_kv_heads=1, head_size=512,
                              kv_cache_dtype="fp8_ds_mla", model_version="deepseek_v4",
                              compress_ratio=128)
    g = describe_batch(_cfg((v4, 1)), [ScheduledRequest(1, 25599, False)]).groups[0]
    assert g.kv_bytes_read == int(25600 * 1728 / 256)
    assert g.attention_pairs == 25600 // 128


def test_state_cross_encoder_sink():
    mamba = pytest.importorskip("kvcore_mamba.spec")
    st_spec = mamba.MambaSpec(block_size=4096, shapes=((3, 8192), (64, 64, 128)),
                              dtypes=("bfloat16", "float32"))
    state = 3 * 8192 * 2 + 64 * 64 * 128 * 4
    cross = CrossAttentionSpec(block_size=16, num_kv_heads=20, head_size=64)
    enc = EncoderOnlyAttentionSpec(block_size=16, num_kv_heads=4, head_size=64)
    sink = SinkFullAttentionSpec(block_size=16, num_kv_heads=1, head_size=1, sink_len=4)
    reqs = [ScheduledRequest(7, 0, True, num_encoder_tokens=1500),
            ScheduledRequest(1, 40, False, num_encoder_tokens=1500),
            ScheduledRequest(1, 9, False)]
    g_m, g_x, g_e, g_s = describe_batch(
        _cfg((st_spec, 2), (cross, 4), (enc, 3), (sink, 1)), reqs).groups
    assert g_m.kv_bytes_read == g_m.kv_bytes_written == 3 * 2 * state
    assert g_m.attention_pairs == 0
    per_tok = 20 * 64 * 2 * 2
    assert g_x.kv_bytes_read == 2 * 1500 * per_tok * 4
    assert g_x.kv_bytes_written == 1500 * per_tok * 4  # only the first step writes it
    assert g_x.num_block_tables == 2
    assert g_x.attention_pairs == (7 + 1) * 1500 * 4
    assert (g_e.kv_bytes_read, g_e.kv_bytes_written, g_e.num_block_tables) == (0, 0, 0)
    assert g_s.kv_bytes_read == (7 + 41 + 10 + 3 * 4) * 4


def test_planned_config_and_cache_by_identity():
    import kvcore

    cfg = kvcore.plan_model("llama-3.1-8b", kv_cache_memory_bytes=20 << 30,
                            max_model_len=8192)
    rng = random.Random(0)
    reqs = [ScheduledRequest(rng.randint(1, 64), rng.randint(0, 4000), False)
            for _ in range(50)]
    a = describe_batch(cfg, reqs)
    b = describe_batch(cfg, reqs)
    assert a == b
    g = a.groups[0]
    # Llama-3.1-8B: 32 layers x 8 KV heads x 128 x (K + V) x 2 B = 131,072 B per token
    assert g.kv_bytes_read == sum(r.num_computed_tokens + r.num_new_tokens
                                  for r in reqs) * 131072


# ---- the step's values validate their fields (tester 2, finding 8) ---------------------
# House rule: bad input is a KVCoreError naming the field, the value and the valid
# range.  A negative token count gave a step shorter than the empty one (negative bytes
# and FLOPs: qwen3-30b-a3b 1.52 ms against 2.72 ms for no request at all).

@pytest.mark.parametrize("new,computed", [(-100, 0), (-1, 50), (1, -10), (0, -1)])
def test_scheduled_request_refuses_negative_tokens(new, computed):
    """Tester 2's cases, through describe_batch and the roofline as they were found."""
    import kvcore
    from kvcore.errors import KVCoreError
    from kvcore.sim.timing import roofline_for

    kvc = kvcore.plan_model("qwen3-30b-a3b", kv_cache_memory_bytes=20 << 30,
                            max_model_len=32768)
    m = roofline_for("qwen3-30b-a3b", kvc, gpu="H100")
    field = "num_new_tokens" if new < 0 else "num_computed_tokens"
    with pytest.raises(KVCoreError, match=field):
        m.step_time(describe_batch(kvc, [ScheduledRequest(new, computed, True)]))


_SR_FIELDS = ("num_new_tokens", "num_computed_tokens", "num_encoder_tokens")
_BAD_COUNTS = st.one_of(st.integers(max_value=-1), st.floats(allow_nan=True),
                        st.booleans(), st.text(max_size=3), st.none())


@settings(max_examples=80, deadline=None)
@given(st.sampled_from(_SR_FIELDS), _BAD_COUNTS, st.integers(0, 10**6),
       st.integers(0, 10**6))
def test_scheduled_request_names_the_bad_field(field, bad, a, b):
    from kvcore.errors import ConfigError

    kw = {"num_new_tokens": a, "num_computed_tokens": b, "is_prefill": True,
          "num_encoder_tokens": 0}
    ScheduledRequest(**kw)  # the valid neighbour builds
    kw[field] = bad
    with pytest.raises(ConfigError, match=field) as exc:
        ScheduledRequest(**kw)
    assert ">= 0" in str(exc.value) and repr(bad)[:20] in str(exc.value)


@pytest.mark.parametrize("bad", [1, "yes", None, 0.0])
def test_scheduled_request_is_prefill_is_a_bool(bad):
    from kvcore.errors import ConfigError

    with pytest.raises(ConfigError, match="is_prefill"):
        ScheduledRequest(1, 0, bad)


_GIO = ("group_id", "num_layers", "kv_bytes_read", "kv_bytes_written",
        "num_block_tables", "attention_pairs", "qk_dim", "v_dim", "num_kv_heads")


@settings(max_examples=60, deadline=None)
@given(st.sampled_from(_GIO), _BAD_COUNTS)
def test_group_io_names_the_bad_field(field, bad):
    from kvcore.errors import ConfigError
    from kvcore.sim.timing import GroupIO

    kw = dict.fromkeys(_GIO, 1)
    GroupIO(kind="full_attention", **kw)
    kw[field] = bad
    with pytest.raises(ConfigError, match=field):
        GroupIO(kind="full_attention", **kw)
    with pytest.raises(ConfigError, match="kind"):
        GroupIO(kind=3, **dict.fromkeys(_GIO, 1))  # type: ignore[arg-type]


def test_batch_checks_its_elements_and_keeps_tuples():
    from kvcore.errors import ConfigError
    from kvcore.sim.timing import Batch, GroupIO

    sr = ScheduledRequest(3, 5, True)
    g = GroupIO(0, "full_attention", 2, 10, 4, 1)
    b = Batch([sr], [g])  # lists become tuples
    assert b.requests == (sr,) and b.groups == (g,) and b.num_tokens == 3
    for kw, field in (({"requests": [(3, 5, True)]}, "requests"),
                      ({"requests": None}, "requests"),
                      ({"requests": (), "groups": [object()]}, "groups")):
        with pytest.raises(ConfigError, match=field):
            Batch(**kw)
