"""Every public function and class of kvcore.sim and kvcore.routing raises a KVCoreError
subclass on bad arguments, as the core's do (tests/test_public_api_args.py).

Each name of the modules' ``__all__`` (so names exported later are covered too) is
called with every required parameter and a random choice of the optional ones, each
given a wrong type or value; only success or a KVCoreError may come out.  Found by
this test when it was written: 58 names raised TypeError, AttributeError or
OverflowError (``read_trace([None])``, ``SimRequest("x")``,
``PrefixAwareRouter(pending_ttl_s=-10**400)``, ``format_summary(b"x")`` ...).
"""

from __future__ import annotations

import inspect
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kvcore_api_fuzz import BAD, FUZZ_SETTINGS, call_badly, module_targets, params

from kvcore.errors import KVCoreError

MODULES = ["kvcore.sim", "kvcore.sim.calibrate", "kvcore.sim.fleet", "kvcore.sim.timing",
           "kvcore.sim.tune", "kvcore.sim.fastsim", "kvcore.sim.datasets",
           "kvcore.sim.metrics", "kvcore.sim.speculative", "kvcore.sim.engine",
           "kvcore.sim.modes", "kvcore.sim.backends", "kvcore.sim.traces",
           "kvcore.sim.workload", "kvcore.routing"]
#: the CLI's entry points (argparse does their checking) and plain markers
SKIP = {"add_subparser", "run", "main"}

TARGETS = module_targets(MODULES, SKIP)


def test_targets_found() -> None:
    ids = {p.id for p in TARGETS}
    assert {"kvcore.sim.read_trace", "kvcore.sim.run_engine", "kvcore.sim.SimRequest",
            "kvcore.sim.fleet.PrefixAwareRouter", "kvcore.sim.calibrate.calibrate",
            "kvcore.routing.ResidencyIndex"} <= ids
    assert len(ids) > 60


@pytest.mark.parametrize("fn", TARGETS)
@settings(max_examples=30, **FUZZ_SETTINGS)
@given(values=st.lists(BAD, min_size=1, max_size=8),
       which=st.lists(st.booleans(), min_size=1, max_size=8))
def test_bad_arguments_raise_kvcore_errors(fn: Any, values: list[Any],
                                           which: list[bool]) -> None:
    call_badly(fn, values, which)


# ---- the cases found, with the message each now gives ------------------------------------

def test_read_trace_of_a_list_names_the_field() -> None:
    from kvcore.sim import read_trace

    with pytest.raises(KVCoreError, match="trace = .* must be a file path"):
        read_trace([None])  # type: ignore[arg-type]


def test_sim_request_of_text_names_trace_request() -> None:
    from kvcore.sim import SimRequest

    with pytest.raises(KVCoreError, match="must be a TraceRequest"):
        SimRequest("x")


def test_router_huge_ttl_is_a_config_error() -> None:
    from kvcore.sim.fleet import PrefixAwareRouter

    with pytest.raises(KVCoreError, match="pending_ttl_s"):
        PrefixAwareRouter(pending_ttl_s=-(10 ** 400))


def test_with_arrivals_huge_time() -> None:
    from kvcore.sim import random_dataset, with_arrivals

    reqs = random_dataset(2, 16, 4)
    with pytest.raises(KVCoreError, match=r"times\[1\]"):
        with_arrivals(reqs, [0.0, 10 ** 400])


def test_with_arrivals_takes_numpy_times() -> None:
    np = pytest.importorskip("numpy")
    from kvcore.sim import random_dataset, with_arrivals

    reqs = with_arrivals(random_dataset(2, 16, 4), np.array([0, 2], dtype=np.int64))
    assert [r.arrival_ms for r in reqs] == [0.0, 2000.0]


def test_replay_refuses_a_non_manager() -> None:
    from kvcore.sim import replay

    with pytest.raises(KVCoreError, match="must be a KVCacheManager"):
        replay([None], [], max_running=1)


# ---- methods of the objects users hold ---------------------------------------------------

def _cfg() -> Any:
    import kvcore

    return kvcore.plan_model("llama-3.1-8b", kv_cache_memory_bytes=1 << 30,
                             max_model_len=4096)


def _index() -> Any:
    from kvcore.routing import ResidencyIndex

    idx = ResidencyIndex(_cfg())
    idx.add_replica(0)
    return idx


def _manager() -> Any:
    from kvcore.runtime import KVCacheManager

    return KVCacheManager(_cfg(), enable_caching=True)


def _engine() -> Any:
    from kvcore.sim import Engine
    from kvcore.sim.timing import ConstantTimeModel

    return Engine(_manager(), ConstantTimeModel(0.01), max_num_seqs=4,
                  max_num_batched_tokens=256)


def _router() -> Any:
    from kvcore.sim.fleet import PrefixAwareRouter

    return PrefixAwareRouter()


def _acceptance() -> Any:
    from kvcore.sim.speculative import SpecAcceptanceModel

    return SpecAcceptanceModel([0.5, 0.3])


def _roofline() -> Any:
    from kvcore.models.config import load_model_config
    from kvcore.models.embedded import embedded_config_path
    from kvcore.sim.timing import roofline_for

    return roofline_for(load_model_config(embedded_config_path("llama-3.1-8b")), _cfg(),
                        gpu="H100")


MAKERS = {"ResidencyIndex": _index, "KVCacheManager": _manager,
          "BlockPool": lambda: _manager().block_pool, "Engine": _engine,
          "PrefixAwareRouter": _router, "SpecAcceptanceModel": _acceptance,
          "RooflineTimeModel": _roofline}


def _methods() -> list[Any]:
    out = []
    for cls_name, make in MAKERS.items():
        obj = make()
        for name in dir(obj):
            if name.startswith("_"):
                continue
            attr = getattr(obj, name, None)
            if callable(attr) and not inspect.isclass(attr) and params(attr):
                out.append(pytest.param(make, name, id=f"{cls_name}.{name}"))
    return out


METHODS = _methods()


def test_methods_found() -> None:
    ids = {p.id for p in METHODS}
    assert {"BlockPool.cache_full_blocks", "BlockPool.free_blocks",
            "ResidencyIndex.block_hashes", "Engine.add_request",
            "PrefixAwareRouter.route", "RooflineTimeModel.step_time"} <= ids


@pytest.mark.parametrize(("make", "name"), METHODS)
@settings(max_examples=20, **FUZZ_SETTINGS)
@given(values=st.lists(BAD, min_size=1, max_size=8),
       which=st.lists(st.booleans(), min_size=1, max_size=8))
def test_methods_raise_kvcore_errors(make: Any, name: str, values: list[Any],
                                     which: list[bool]) -> None:
    call_badly(getattr(make(), name), values, which, label=name)


def test_pool_cache_full_blocks_refuses_a_freed_block_unchanged() -> None:
    """A plugin's manager caching a block it freed: refused, the cache unchanged."""
    mgr = _manager()
    pool = mgr.block_pool
    blocks = pool.get_new_blocks(2)
    pool.free_blocks(blocks[::-1])
    before = {g: dict(c) for g, c in enumerate(pool.cached)}
    with pytest.raises(KVCoreError, match="not held"):
        pool.cache_full_blocks(blocks, [b"h0", b"h1"], 0, 2, 0)
    assert {g: dict(c) for g, c in enumerate(pool.cached)} == before
    assert all(b.block_hash is None for b in blocks)


def test_pool_negative_group_is_refused() -> None:
    pool = _manager().block_pool
    with pytest.raises(KVCoreError, match="group_id"):
        pool.get_cached_block(b"x", -1)


def test_huge_rates_and_draft_counts_are_refused() -> None:
    """Tester 17: arrival_times(5, 10**400) and length_rates(2.0, 10**400) raised
    OverflowError; length_rates(2.0, 10**9) built a billion-entry tuple."""
    from kvcore.sim.speculative import length_rates
    from kvcore.sim.workload import arrival_times

    with pytest.raises(KVCoreError, match="request_rate"):
        arrival_times(5, 10 ** 400)
    for k in (10 ** 400, 10 ** 9):
        with pytest.raises(KVCoreError, match="num_speculative_tokens"):
            length_rates(2.0, k)
    np = pytest.importorskip("numpy")
    assert length_rates(2.5, np.int64(3)) == (1.0, 0.5, 0.0)  # vLLM's rates
