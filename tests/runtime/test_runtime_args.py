"""Issue 13, second round (an adversarial tester's findings): every public entry point
of :class:`KVCacheManager` checks its arguments BEFORE any state changes, and a cache
hit passed to ``allocate_slots`` must be a current hit of this request.

Rules tested (each with generated cases):

* a count that is not an int (float, str, None, bool) or is negative, or computed + new
  tokens past ``max_model_len`` (only lookahead slots are capped, vLLM 0.32's
  ``kv_cache_manager.allocate_slots``), is a RequestError naming the argument, and the
  free count, every block table, ``num_computed_tokens`` and ``check_consistency()``
  are unchanged;
* ``num_new_tokens == 0`` without a hit to adopt is refused for every kind (vLLM raises
  ValueError: "num_new_tokens must be greater than 0 when there are no computed tokens
  to adopt");
* a hit whose blocks were evicted and reused, another prompt's hit, or a hit length
  that does not match the blocks is refused;
* the constructor, ``free``, ``get_computed_blocks``, ``get_block_ids``,
  ``max_prefill_chunk_tokens``, ``reset_prefix_cache`` and ``make_request`` refuse
  wrong types / ranges with a KVCoreError naming the argument.
"""

from __future__ import annotations

import random

import hypothesis.strategies as st
import pytest
from hypothesis import given, settings

from kvcore.errors import ConfigError, KVCoreError, RequestError
from kvcore.planning import plan
from kvcore.runtime import KVCacheManager
from kvcore.specs import FullAttentionSpec, SlidingWindowSpec

SMALL = settings(max_examples=40, deadline=None)
MAX_LEN = 64


def _cfg(max_model_len=MAX_LEN, blocks=30, kind="full"):
    layers = {"l0": FullAttentionSpec(block_size=4, num_kv_heads=1, head_size=8)}
    if kind == "full+sliding":
        layers["l1"] = SlidingWindowSpec(block_size=4, num_kv_heads=1, head_size=8,
                                         sliding_window=8)
    return plan(layers, max_model_len=max_model_len, num_gpu_blocks_override=blocks)


def _manager(kind="full", **kw):
    return KVCacheManager(_cfg(kind=kind), max_model_len=MAX_LEN, check_invariants=True,
                          **kw)


def _state(m, reqs):
    m.check_consistency()
    return (m.num_free_blocks, [m.get_block_ids(r) for r in reqs],
            [r.num_computed_tokens for r in reqs])


BAD_COUNTS = st.one_of(st.floats(allow_nan=True, allow_infinity=True),
                       st.text(max_size=3), st.none(), st.booleans(),
                       st.integers(max_value=-1), st.just([1]))


@pytest.mark.parametrize("kind", ["full", "full+sliding"])
@pytest.mark.parametrize("running", [False, True])
@given(arg=st.sampled_from(["num_new_tokens", "num_new_computed_tokens",
                            "num_lookahead_tokens", "full_sequence_must_fit"]),
       value=BAD_COUNTS)
@SMALL
def test_bad_allocate_slots_argument_changes_nothing(kind, running, arg, value):
    if arg == "full_sequence_must_fit" and (value is True or value is False):
        value = "no"
    m = _manager(kind)
    r = m.make_request("A", list(range(1, 10)))
    other = m.make_request("B", [7] * 6)
    assert m.allocate_slots(other, 6) is not None
    if running:
        assert m.allocate_slots(r, 9) is not None
        r.num_computed_tokens = 9
        r.append_output_token_ids(5)
    kw = {"num_new_tokens": 1}
    kw[arg] = value
    before = _state(m, [r, other])
    with pytest.raises(RequestError) as e:
        m.allocate_slots(r, **kw)
    assert arg in str(e.value)
    assert _state(m, [r, other]) == before


@pytest.mark.parametrize("kind", ["full", "full+sliding"])
@given(nc=st.one_of(st.integers(max_value=-1), st.floats(), st.just("3")),
       running=st.booleans())
@SMALL
def test_bad_num_computed_tokens_changes_nothing(kind, nc, running):
    m = _manager(kind)
    r = m.make_request("A", list(range(1, 10)))
    if running:
        assert m.allocate_slots(r, 9) is not None
    r.num_computed_tokens = nc
    before = (m.num_free_blocks, m.get_block_ids(r))
    with pytest.raises(RequestError, match="num_computed_tokens"):
        m.allocate_slots(r, 1)
    assert (m.num_free_blocks, m.get_block_ids(r)) == before
    m.check_consistency()


@pytest.mark.parametrize("kind", ["full", "full+sliding"])
@given(prompt=st.integers(1, MAX_LEN + 40), extra=st.integers(0, 10 ** 6),
       lookahead=st.integers(0, 50))
@SMALL
def test_past_max_model_len_refused_only_lookahead_capped(kind, prompt, extra,
                                                          lookahead):
    """vLLM's rule: computed + new tokens must fit max_model_len; lookahead slots are
    capped at it."""
    m = _manager(kind)
    r = m.make_request("A", list(range(1, prompt + 1)))
    n = prompt + extra
    free = m.num_free_blocks
    if n > MAX_LEN:
        with pytest.raises(RequestError, match="max_model_len"):
            m.allocate_slots(r, n, num_lookahead_tokens=lookahead)
        assert m.num_free_blocks == free and m.get_block_ids(r)[0] == []
    else:
        out = m.allocate_slots(r, n, num_lookahead_tokens=lookahead)
        assert out is not None
        # full attention: ceil(min(n + lookahead, max_model_len) / block_size) blocks
        assert len(m.get_block_ids(r)[0]) == -(-min(n + lookahead, MAX_LEN) // 4)


def test_issue_examples_past_max_model_len():
    m = _manager()
    r = m.make_request("A", list(range(1, 65)))  # a full-length prompt
    assert m.allocate_slots(r, 64) is not None
    r.num_computed_tokens = 64
    r.append_output_token_ids(3)
    with pytest.raises(RequestError, match="max_model_len 64"):
        m.allocate_slots(r, 1)      # was: empty success
    r2 = m.make_request("B", list(range(1, 70)))  # 69 tokens
    with pytest.raises(RequestError, match="max_model_len"):
        m.allocate_slots(r2, 69)    # was: 16 blocks
    r3 = m.make_request("C", [1, 2, 3])
    with pytest.raises(RequestError, match="max_model_len"):
        m.allocate_slots(r3, 10 ** 6)
    assert m.get_block_ids(r2) == ([],) and m.get_block_ids(r3) == ([],)


@pytest.mark.parametrize("kind", ["full", "full+sliding"])
def test_zero_new_tokens_refused_for_every_kind(kind):
    m = _manager(kind)
    r = m.make_request("A", list(range(1, 10)))
    with pytest.raises(RequestError, match="num_new_tokens must be > 0"):
        m.allocate_slots(r, 0)
    assert m.allocate_slots(r, 9) is not None
    r.num_computed_tokens = 9
    before = _state(m, [r])
    with pytest.raises(RequestError, match="num_new_tokens must be > 0"):
        m.allocate_slots(r, 0)
    assert _state(m, [r]) == before


def test_numpy_ints_accepted():
    np = pytest.importorskip("numpy")
    m = _manager()
    r = m.make_request("A", list(range(1, 10)))
    assert m.allocate_slots(r, np.int64(9), np.int32(0)) is not None
    assert len(m.get_block_ids(r)[0]) == 3


# ---- hits -----------------------------------------------------------------------------

def _cfg9():
    return plan({"l0": FullAttentionSpec(block_size=4, num_kv_heads=1, head_size=8)},
                max_model_len=12, num_gpu_blocks_override=9)


def test_issue_example_stale_hit_refused():
    m = KVCacheManager(_cfg9(), max_model_len=12, check_invariants=True)
    a = m.make_request("A", list(range(1, 10)))
    assert m.allocate_slots(a, 9) is not None
    m.free(a)
    a2 = m.make_request("A2", list(range(1, 10)))
    hit, n = m.get_computed_blocks(a2)
    assert hit.get_block_ids() == ([1, 2],) and n == 8
    b, c = m.make_request("B", [7] * 8), m.make_request("C", [8] * 12)
    assert m.allocate_slots(b, 8) is not None and m.allocate_slots(c, 12) is not None
    d = m.make_request("D", [9] * 5)
    assert m.allocate_slots(d, 5) is not None
    m.free(d)
    before = _state(m, [a2, b, c])
    with pytest.raises(RequestError, match="no longer cached"):
        m.allocate_slots(a2, 1, n, hit)
    assert _state(m, [a2, b, c]) == before


@given(seed=st.integers(0, 10 ** 6))
@SMALL
def test_foreign_or_mismatched_hits_refused(seed):
    rng = random.Random(seed)
    m = _manager()
    toks = [rng.randrange(1, 50) for _ in range(13)]
    a = m.make_request("A", toks)
    assert m.allocate_slots(a, 13) is not None
    m.free(a)
    hit, n = m.get_computed_blocks(m.make_request("A2", toks))
    assert n == 12
    other = list(toks)
    other[rng.randrange(0, 12)] += 100  # differs inside the hit
    b = m.make_request("B", other)
    before = _state(m, [b])
    with pytest.raises(RequestError, match="new_computed_blocks"):
        m.allocate_slots(b, 1, n, hit)       # another prompt's blocks
    bad_n = rng.choice([k for k in range(0, 14) if k != n])
    b2 = m.make_request("B2", toks)
    with pytest.raises(RequestError, match="new_computed_blocks"):
        m.allocate_slots(b2, 13 - min(bad_n, 12), bad_n, hit)  # wrong length
    assert _state(m, [b]) == before


def test_claimed_computed_tokens_without_blocks_refused():
    m = _manager()
    r = m.make_request("A", list(range(1, 10)))
    with pytest.raises(RequestError, match="new_computed_blocks"):
        m.allocate_slots(r, 1, 8)
    assert m.num_free_blocks == 29 and m.get_block_ids(r) == ([],)
    r2 = m.make_request("A2", list(range(1, 10)))
    assert m.get_computed_blocks(r2)[1] == 0  # nothing was published under A's hashes


# ---- other entry points ---------------------------------------------------------------

@pytest.mark.parametrize("bad", [None, 5, 1.5, object()])
def test_request_arguments_checked(bad):
    m = _manager()
    r = m.make_request("A", [1, 2, 3])
    assert m.allocate_slots(r, 3) is not None
    before = _state(m, [r])
    for call in (lambda: m.free(bad), lambda: m.get_computed_blocks(bad),
                 lambda: m.allocate_slots(bad, 1), lambda: m.get_block_ids(bad),
                 lambda: m.max_prefill_chunk_tokens(bad, 1)):
        with pytest.raises(RequestError, match="request"):
            call()
    with pytest.raises(RequestError):
        m.get_computed_blocks("A")
    assert _state(m, [r]) == before
    m.free("unknown")  # tolerated, as vLLM's req_to_blocks.pop(request_id, [])
    assert _state(m, [r]) == before


@pytest.mark.parametrize("value", ["no", 1, 0, None, "yes"])
def test_reset_prefix_cache_strict_bool(value):
    m = _manager()
    r = m.make_request("A", [1, 2, 3, 4, 5])
    assert m.allocate_slots(r, 5) is not None
    before = _state(m, [r])
    with pytest.raises(RequestError, match="reset_running_requests"):
        m.reset_prefix_cache(value)
    assert _state(m, [r]) == before


@pytest.mark.parametrize("kw,field", [
    ({"max_model_len": 0}, "max_model_len"), ({"max_model_len": -5}, "max_model_len"),
    ({"max_model_len": "64"}, "max_model_len"), ({"max_model_len": 64.0}, "max_model_len"),
    ({"max_model_len": 10 ** 9}, "max_model_len"),
    ({"max_num_batched_tokens": -1}, "max_num_batched_tokens"),
    ({"max_num_batched_tokens": 0}, "max_num_batched_tokens"),
    ({"max_num_encoder_input_tokens": -1}, "max_num_encoder_input_tokens"),
    ({"use_eagle": "no"}, "use_eagle"), ({"enable_caching": 1}, "enable_caching"),
    ({"enable_events": None}, "enable_events"),
    ({"check_invariants": "yes"}, "check_invariants"),
])
def test_constructor_arguments_checked(kw, field):
    with pytest.raises(ConfigError, match=field):
        KVCacheManager(_cfg(), **kw)


@given(n=st.one_of(st.integers(max_value=-1), st.floats(), st.text(max_size=2)),
       which=st.booleans())
@SMALL
def test_max_prefill_chunk_tokens_checked(n, which):
    m = _manager()
    r = m.make_request("A", [1, 2, 3])
    name = "num_new_tokens" if which else "num_new_computed_tokens"
    with pytest.raises(RequestError, match=name):
        m.max_prefill_chunk_tokens(r, n, 0) if which else \
            m.max_prefill_chunk_tokens(r, 3, n)


@pytest.mark.parametrize("args,kw,field", [
    ((5, [1]), {}, "request_id"), (("", [1]), {}, "request_id"),
    (("A", []), {}, "prompt_token_ids"),
    (("A", [1]), {"max_tokens": -1}, "max_tokens"),
    (("A", [1]), {"max_tokens": 2.0}, "max_tokens"),
    (("A", [1]), {"num_encoder_tokens": -5}, "num_encoder_tokens"),
])
def test_make_request_checked(args, kw, field):
    with pytest.raises(KVCoreError, match=field):
        _manager().make_request(*args, **kw)


# ---- cross attention: the encoder limit holds on every call -----------------------------

@given(enc=st.one_of(st.integers(1501, 10 ** 6), st.integers(max_value=-1), st.floats(),
                     st.just("200")))
@SMALL
def test_encoder_tokens_changed_after_admission_refused(enc):
    from kvcore.specs import CrossAttentionSpec

    layers = {"dec.self": FullAttentionSpec(block_size=32, num_kv_heads=1, head_size=64),
              "dec.cross": CrossAttentionSpec(block_size=32, num_kv_heads=1,
                                              head_size=64)}
    cfg = plan(layers, max_model_len=448, max_num_encoder_input_tokens=1500,
               num_gpu_blocks_override=400)
    m = KVCacheManager(cfg, max_model_len=448, check_invariants=True)
    r = m.make_request("A", [1, 2, 3], num_encoder_tokens=100)
    assert m.allocate_slots(r, 3) is not None
    r.num_computed_tokens = 3
    r.append_output_token_ids(9)
    r.num_encoder_tokens = enc
    before = _state(m, [r])
    with pytest.raises(RequestError, match="num_encoder_tokens"):
        m.allocate_slots(r, 1)
    assert _state(m, [r]) == before


# ---- Mamba (when the plugin is installed) -----------------------------------------------

@pytest.mark.parametrize("mode", ["align", "all", "none"])
@given(value=BAD_COUNTS, arg=st.sampled_from(["num_new_tokens", "nc"]))
@SMALL
def test_mamba_bad_counts_change_nothing(mode, value, arg):
    mamba = pytest.importorskip("kvcore_mamba")
    layers = {"attn": FullAttentionSpec(block_size=4, num_kv_heads=1, head_size=8),
              "ssm": mamba.MambaSpec(block_size=4, shapes=((1, 4), (1, 2, 2)),
                                     dtypes=("bfloat16", "float32"),
                                     mamba_cache_mode=mode)}
    cfg = plan(layers, max_model_len=64, num_gpu_blocks_override=40,
               mamba_cache_mode=mode)
    m = KVCacheManager(cfg, max_model_len=64, check_invariants=True)
    r = m.make_request("A", list(range(1, 10)))
    before = _state(m, [r])
    with pytest.raises(RequestError, match="num_new_tokens|num_computed_tokens"):
        if arg == "nc":
            r.num_computed_tokens = value if value is not None else -8
            m.allocate_slots(r, 9)
        else:
            m.allocate_slots(r, value)
    r.num_computed_tokens = 0
    assert _state(m, [r]) == before


# ---- a hand-built packed group mixing kinds ---------------------------------------------

@given(window=st.integers(1, 64), chunk=st.sampled_from([8, 16, 32]),
       other=st.sampled_from(["full", "chunked", "sliding"]),
       base=st.sampled_from(["sliding", "chunked"]))
@SMALL
def test_windowed_group_with_a_layer_of_another_kind_refused(window, chunk, other, base):
    from kvcore.kv_cache_config import KVCacheConfig, KVCacheGroupSpec
    from kvcore.specs import ChunkedLocalAttentionSpec

    def make(kind):
        if kind == "full":
            return FullAttentionSpec(block_size=4, num_kv_heads=1, head_size=8)
        if kind == "sliding":
            return SlidingWindowSpec(block_size=4, num_kv_heads=1, head_size=8,
                                     sliding_window=window)
        return ChunkedLocalAttentionSpec(block_size=4, num_kv_heads=1, head_size=8,
                                         attention_chunk_size=chunk)

    spec = make(base)
    group = KVCacheGroupSpec(("a", "b"), spec, layer_specs=(spec, make(other)))
    cfg = KVCacheConfig(num_blocks=40, kv_cache_tensors=(), kv_cache_groups=(group,))
    if other == base:
        KVCacheManager(cfg, max_model_len=64)  # same kind: the group's rule serves both
        return
    with pytest.raises(ConfigError, match=r"layer_specs|b \("):
        KVCacheManager(cfg, max_model_len=64)


def test_full_group_may_hold_windowed_layers():
    """The planner's promotion: windowed layers kept as full attention share a table."""
    from kvcore.kv_cache_config import KVCacheConfig, KVCacheGroupSpec

    full = FullAttentionSpec(block_size=4, num_kv_heads=1, head_size=8)
    swa = SlidingWindowSpec(block_size=4, num_kv_heads=1, head_size=8, sliding_window=8)
    group = KVCacheGroupSpec(("a", "b"), full, layer_specs=(full, swa))
    cfg = KVCacheConfig(num_blocks=40, kv_cache_tensors=(), kv_cache_groups=(group,))
    m = KVCacheManager(cfg, max_model_len=64, check_invariants=True)
    r = m.make_request("A", list(range(1, 31)))
    assert m.allocate_slots(r, 30) is not None
    assert 0 not in m.get_block_ids(r)[0]  # every block kept (8 real blocks)
    assert len(m.get_block_ids(r)[0]) == 8


# ---- kernel tables: numpy ints are ints, anything else a KVCoreError ---------------------

@given(ids=st.lists(st.integers(0, 2 ** 31 - 1), max_size=8),
       dtype=st.sampled_from(["int64", "int32", "uint16"]))
@SMALL
def test_block_table_ids_accept_numpy_ints(ids, dtype):
    np = pytest.importorskip("numpy")
    from kvcore.runtime.kernel_tables import block_table_ids

    dtype = getattr(np, dtype)
    ids = [i % 60000 for i in ids]
    # the kernel convention: -1 for the null block 0, the id otherwise
    assert block_table_ids([dtype(i) for i in ids]) == [i if i > 0 else -1 for i in ids]


@given(bad=st.one_of(st.floats(), st.text(max_size=2), st.booleans(), st.none()))
@SMALL
def test_slot_mapping_bad_position_is_kvcore_error(bad):
    from kvcore.runtime.kernel_tables import slot_mapping

    with pytest.raises(KVCoreError, match="positions"):
        slot_mapping([3, 4], [0, bad], 4)
    # slot = id * block_size + position % block_size
    assert slot_mapping([3, 4], [5, 0], 4) == [4 * 4 + 1, 3 * 4]
    np = pytest.importorskip("numpy")
    assert slot_mapping([3, 4], [np.int64(5), 0], 4) == [4 * 4 + 1, 3 * 4]
