"""kvcore_vllm's public functions with arguments of the wrong type or range raise a
KVCoreError subclass naming the argument (issue 24, item 3), never an AttributeError or
TypeError from inside; generated values, vLLM 0.32 installed.  Valid arguments of the
same call still work (the last test)."""

from __future__ import annotations

import hypothesis.strategies as st
import kvcore_vllm
import pytest
from hypothesis import given, settings
from kvcore_vllm.harness import Workload, make_scheduler
from kvcore_vllm.manager import unsupported_reason
from kvcore_vllm.planner import plan_options

from kvcore.errors import KVCoreError

SMALL = settings(max_examples=25, deadline=None)

WRONG = st.one_of(st.none(), st.integers(), st.floats(), st.text(max_size=4),
                  st.booleans(), st.lists(st.integers(), max_size=2),
                  st.dictionaries(st.text(max_size=2), st.integers(), max_size=2),
                  st.just(object()))


@pytest.fixture(scope="module")
def cfg():
    s = make_scheduler(Workload.shared_prefixes(0, layers=[("full", {})],
                                                max_model_len=256, num_blocks=32))
    return s.kv_cache_config, s.block_size


def _raises(fn, *a, **kw):
    try:
        fn(*a, **kw)
    except KVCoreError as e:
        return e
    raise AssertionError(f"{fn.__name__} accepted {a!r:.100} {kw!r:.100}")


@SMALL
@given(bad=WRONG)
def test_spec_and_config_functions_refuse_wrong_types(bad):
    for fn in (kvcore_vllm.to_vllm_spec, kvcore_vllm.from_vllm_spec,
               kvcore_vllm.to_vllm_config, kvcore_vllm.from_vllm_config, plan_options):
        _raises(fn, bad)
    _raises(unsupported_reason, bad, hash_block_size=16)


@SMALL
@given(bad=WRONG)
def test_planner_refuses_wrong_types(bad):
    _raises(kvcore_vllm.get_kv_cache_configs, bad, [{}], [1 << 30])
    e = _raises(kvcore_vllm.get_kv_cache_configs, bad, bad, bad)
    assert e.extra["field"] in ("vllm_config", "kv_cache_specs", "available_memory")


MANAGER_ARGS = ["kv_cache_config", "max_model_len", "scheduler_block_size",
                "hash_block_size", "max_in_flight_tokens", "enable_caching", "use_eagle",
                "num_prefill_lookahead", "log_stats", "enable_kv_cache_events",
                "dcp_world_size", "pcp_world_size", "watermark"]


@SMALL
@given(arg=st.sampled_from(MANAGER_ARGS), bad=WRONG)
def test_manager_refuses_wrong_argument_types(cfg, arg, bad):
    vcfg, bs = cfg
    kw = dict(kv_cache_config=vcfg, max_model_len=256, scheduler_block_size=bs,
              hash_block_size=bs)
    flags = ("enable_caching", "use_eagle", "log_stats", "enable_kv_cache_events")
    valid = (isinstance(bad, bool) if arg in flags
             else bad is None if arg == "max_in_flight_tokens"
             else isinstance(bad, (int, float)) and not isinstance(bad, bool)
             and 0 <= bad < 1 if arg == "watermark"
             else False)
    if arg in ("max_model_len", "scheduler_block_size", "hash_block_size",
               "max_in_flight_tokens", "num_prefill_lookahead", "dcp_world_size",
               "pcp_world_size") and type(bad) is int:
        return  # an int in range is valid here; ranges: the next test
    if valid:
        return
    kw[arg] = bad
    e = _raises(kvcore_vllm.KVCacheManager, **kw)
    assert e.extra["field"] == arg, (arg, e)


@pytest.mark.parametrize("arg, value", [("max_model_len", 0), ("scheduler_block_size", -16),
                                        ("hash_block_size", 0), ("dcp_world_size", 0),
                                        ("num_prefill_lookahead", -1),
                                        ("watermark", 1.5), ("watermark", -0.1)])
def test_manager_refuses_out_of_range_counts(cfg, arg, value):
    vcfg, bs = cfg
    kw = dict(kv_cache_config=vcfg, max_model_len=256, scheduler_block_size=bs,
              hash_block_size=bs)
    kw[arg] = value
    assert _raises(kvcore_vllm.KVCacheManager, **kw).extra["field"] == arg


def test_manager_refuses_unknown_arguments(cfg):
    vcfg, bs = cfg
    e = _raises(kvcore_vllm.KVCacheManager, vcfg, 256, bs, bs, no_such_argument=1)
    assert e.extra["field"] == "arguments"


def test_valid_arguments_still_build(cfg):
    vcfg, bs = cfg
    m = kvcore_vllm.KVCacheManager(vcfg, 256, bs, bs, watermark=0.01, use_eagle=True)
    assert m.usage == 0.0
    kcfg = kvcore_vllm.from_vllm_config(vcfg, max_model_len=256)
    assert kvcore_vllm.to_vllm_config(kcfg).num_blocks == vcfg.num_blocks
