"""Issue 24, item 3 (runtime part): the kernel-table helpers, ``Request`` and the
manager's constructor raise a KVCoreError subclass naming the argument for values of the
wrong type, never a TypeError / AttributeError from inside (found: ``block_tables(5)``,
``slot_mapping(t, 5, 16)``, ``Request(mm_features=5)``, ``KVCacheManager(cfg,
hash=[1])``).  Values are generated; valid inputs of the same shapes still work."""

from __future__ import annotations

import hypothesis.strategies as st
import pytest
from helpers_runtime import config, full
from hypothesis import given, settings

from kvcore.errors import ConfigError, KVCoreError, RequestError
from kvcore.runtime import KVCacheManager, Request
from kvcore.runtime.kernel_tables import (
    block_table_ids,
    block_tables,
    request_block_tables,
    slot_mapping,
    state_indices,
)

SMALL = settings(max_examples=60, deadline=None)

#: values that are not a sequence of anything (scalars, None, objects, strings)
NOT_A_SEQUENCE = st.one_of(st.integers(), st.floats(), st.none(), st.booleans(),
                           st.text(max_size=4), st.binary(max_size=4),
                           st.just(object()), st.just(1 + 2j))
#: entries that are neither a block nor an int id
NOT_AN_ENTRY = st.one_of(st.floats(), st.text(min_size=1, max_size=3), st.booleans(),
                         st.just(object()), st.lists(st.integers(), max_size=2))


@SMALL
@given(bad=NOT_A_SEQUENCE)
def test_block_tables_refuse_a_non_sequence(bad):
    for fn in (block_tables, state_indices):
        with pytest.raises(KVCoreError) as e:
            fn(bad)
        assert e.value.extra["field"] == "tables"
    with pytest.raises(KVCoreError) as e:
        block_tables([bad])
    assert e.value.extra["field"] == "block_table"
    with pytest.raises(KVCoreError) as e:
        block_table_ids(bad)
    assert e.value.extra["field"] == "block_table"


@SMALL
@given(entry=NOT_AN_ENTRY, pos=st.integers(0, 3))
def test_block_tables_refuse_bad_entries(entry, pos):
    table = [1, 2, 3]
    table.insert(pos, entry)
    with pytest.raises(KVCoreError) as e:
        block_tables([table])
    assert e.value.extra["field"] == "block_table"


@SMALL
@given(bad=NOT_A_SEQUENCE, bs=st.integers(1, 64))
def test_slot_mapping_refuses_bad_positions_and_tables(bad, bs):
    with pytest.raises(KVCoreError) as e:
        slot_mapping([1, 2], bad, bs)
    assert e.value.extra["field"] == "positions"
    with pytest.raises(KVCoreError) as e:
        slot_mapping(bad, [0, 1], bs)
    assert e.value.extra["field"] == "block_table"


@SMALL
@given(ids=st.lists(st.integers(0, 1000), min_size=1, max_size=6), bs=st.integers(1, 32),
       data=st.data())
def test_slot_mapping_valid_inputs_follow_the_formula(ids, bs, data):
    """vLLM's slot_mapping: ``block_id * block_size + position % block_size``; -1 for
    the null block (id 0) and past the table."""
    n = len(ids) * bs
    positions = data.draw(st.lists(st.integers(0, n + bs), max_size=10))
    got = slot_mapping(ids, positions, bs)
    for p, s in zip(positions, got):
        i = p // bs
        want = ids[i] * bs + p % bs if i < len(ids) and ids[i] > 0 else -1
        assert s == want


def test_request_block_tables_refuse_bad_arguments():
    m = KVCacheManager(config(10, full()), max_model_len=64)
    for bad in (5, None, "abc"):
        with pytest.raises(KVCoreError):
            request_block_tables(m, bad)
    with pytest.raises(KVCoreError) as e:
        request_block_tables(m, [3.5])
    assert e.value.extra["field"] == "requests"
    with pytest.raises(KVCoreError) as e:
        request_block_tables(object(), ["a"])
    assert e.value.extra["field"] == "manager"
    assert request_block_tables(m, ["nobody"], width=2) == [[-1, -1]]


BAD_MM = st.one_of(
    NOT_A_SEQUENCE.filter(lambda v: v is not None),
    st.lists(NOT_A_SEQUENCE, min_size=1, max_size=2),                  # not triples
    st.tuples(st.integers(max_value=-1), st.integers(0, 9), st.text()).map(lambda t: [t]),
    st.tuples(st.integers(0, 9), st.integers(max_value=-1), st.text()).map(lambda t: [t]),
    st.tuples(st.floats(), st.integers(0, 9), st.text()).map(lambda t: [t]),
    st.tuples(st.integers(0, 9), st.integers(0, 9),
              st.one_of(st.none(), st.lists(st.integers(), max_size=2),
                        st.just(object()))).map(lambda t: [t]),
    st.one_of(st.lists(st.integers(0, 9), min_size=2, max_size=2),
              st.lists(st.integers(0, 9), min_size=4, max_size=4)).map(lambda t: [tuple(t)]),
)


@SMALL
@given(bad=BAD_MM)
def test_request_refuses_bad_mm_features(bad):
    with pytest.raises(RequestError) as e:
        Request("a", [1, 2, 3], mm_features=bad)
    assert e.value.extra["field"] == "mm_features"


@SMALL
@given(feats=st.lists(st.tuples(st.integers(0, 40), st.integers(0, 20),
                                st.one_of(st.text(max_size=5), st.integers(),
                                          st.floats(allow_nan=False))), max_size=3))
def test_request_accepts_valid_mm_features(feats):
    r = Request("a", list(range(48)), mm_features=feats)
    assert r.mm_hashes == [f[2] for f in feats]


@SMALL
@given(bad=st.one_of(st.integers(), st.floats(), st.lists(st.integers(), max_size=2),
                     st.just(object()), st.booleans()))
def test_request_refuses_bad_lora_name_and_salt(bad):
    for name in ("lora_name", "cache_salt"):
        with pytest.raises(RequestError) as e:
            Request("a", [1, 2, 3], **{name: bad})
        assert e.value.extra["field"] == name


@SMALL
@given(bad=st.one_of(st.lists(st.integers(), max_size=2), st.integers(), st.none(),
                     st.text(max_size=6).filter(lambda s: s not in ("sha256",
                                                                   "sha256_128")),
                     st.dictionaries(st.text(max_size=2), st.integers(), max_size=1)))
def test_manager_and_request_refuse_a_bad_hash(bad):
    with pytest.raises(ConfigError) as e:
        KVCacheManager(config(10, full()), max_model_len=64, hash=bad)
    assert e.value.extra["field"] == "hash"
    with pytest.raises(ConfigError) as e:
        Request("a", [1, 2, 3], hash=bad)
    assert e.value.extra["field"] == "hash"


@SMALL
@given(bad=st.one_of(st.booleans(), st.lists(st.integers(), max_size=2), st.just(object()),
                     st.dictionaries(st.text(max_size=2), st.integers(), max_size=1)))
def test_request_refuses_a_bad_encoder_id(bad):
    with pytest.raises(RequestError) as e:
        Request("a", [1, 2, 3], num_encoder_tokens=10, encoder_id=bad)
    assert e.value.extra["field"] == "encoder_id"
