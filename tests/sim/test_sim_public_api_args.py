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

import importlib
import inspect
import math
import typing
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kvcore.errors import KVCoreError


class _Opaque:
    def __repr__(self) -> str:
        return "<opaque>"


BAD = st.sampled_from([
    None, -1, 0, 1.5, -1.5, math.nan, math.inf, -math.inf, True, "", "x", " ", "1.5B",
    "-3", [], [1], [None], ["x"], {}, {"a": 1}, {"type": None}, (), b"x", _Opaque(),
    10 ** 400, -(10 ** 400), 2 ** 63, complex(1, 1), frozenset({1}),
])

MODULES = ["kvcore.sim", "kvcore.sim.calibrate", "kvcore.sim.fleet", "kvcore.sim.timing",
           "kvcore.sim.tune", "kvcore.sim.fastsim", "kvcore.sim.datasets",
           "kvcore.sim.metrics", "kvcore.sim.speculative", "kvcore.sim.engine",
           "kvcore.sim.modes", "kvcore.sim.backends", "kvcore.sim.traces",
           "kvcore.sim.workload", "kvcore.routing"]
#: the CLI's entry points (argparse does their checking) and plain markers
SKIP = {"add_subparser", "run", "main"}


def _targets() -> list[Any]:
    out = []
    for mod_name in MODULES:
        mod = importlib.import_module(mod_name)
        for name in getattr(mod, "__all__", ()):
            obj = getattr(mod, name, None)
            if name in SKIP or not callable(obj):
                continue
            if isinstance(obj, type) and (issubclass(obj, BaseException)
                                          or getattr(obj, "_is_protocol", False)):
                continue
            if isinstance(obj, typing._GenericAlias):  # type: ignore[attr-defined]
                continue
            out.append(pytest.param(obj, id=f"{mod_name}.{name}"))
    return out


TARGETS = _targets()


def test_targets_found() -> None:
    ids = {p.id for p in TARGETS}
    assert {"kvcore.sim.read_trace", "kvcore.sim.run_engine", "kvcore.sim.SimRequest",
            "kvcore.sim.fleet.PrefixAwareRouter", "kvcore.sim.calibrate.calibrate",
            "kvcore.routing.ResidencyIndex"} <= ids
    assert len(ids) > 60


def _params(fn: Any) -> list[inspect.Parameter]:
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):
        return []
    return [p for p in sig.parameters.values()
            if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]


@pytest.mark.parametrize("fn", TARGETS)
@settings(max_examples=30, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow])
@given(values=st.lists(BAD, min_size=1, max_size=8),
       which=st.lists(st.booleans(), min_size=1, max_size=8))
def test_bad_arguments_raise_kvcore_errors(fn: Any, values: list[Any],
                                           which: list[bool]) -> None:
    args: list[Any] = []
    kwargs: dict[str, Any] = {}
    for i, p in enumerate(_params(fn)):
        v = values[i % len(values)]
        if p.default is not p.empty and not which[i % len(which)]:
            continue
        if p.kind == p.POSITIONAL_ONLY:
            args.append(v)
        else:
            kwargs[p.name] = v
    try:
        fn(*args, **kwargs)
    except KVCoreError:
        pass
    except Exception as exc:  # noqa: BLE001 - the assertion under test
        raise AssertionError(f"{getattr(fn, '__qualname__', fn)}(*{args!r}, "
                             f"**{kwargs!r}) raised {type(exc).__name__}: {exc}") from exc


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
            if callable(attr) and not inspect.isclass(attr) and _params(attr):
                out.append(pytest.param(make, name, id=f"{cls_name}.{name}"))
    return out


METHODS = _methods()


def test_methods_found() -> None:
    ids = {p.id for p in METHODS}
    assert {"BlockPool.cache_full_blocks", "BlockPool.free_blocks",
            "ResidencyIndex.block_hashes", "Engine.add_request",
            "PrefixAwareRouter.route", "RooflineTimeModel.step_time"} <= ids


@pytest.mark.parametrize(("make", "name"), METHODS)
@settings(max_examples=20, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow])
@given(values=st.lists(BAD, min_size=1, max_size=8),
       which=st.lists(st.booleans(), min_size=1, max_size=8))
def test_methods_raise_kvcore_errors(make: Any, name: str, values: list[Any],
                                     which: list[bool]) -> None:
    fn = getattr(make(), name)
    kwargs: dict[str, Any] = {}
    args: list[Any] = []
    for i, p in enumerate(_params(fn)):
        v = values[i % len(values)]
        if p.default is not p.empty and not which[i % len(which)]:
            continue
        if p.kind == p.POSITIONAL_ONLY:
            args.append(v)
        else:
            kwargs[p.name] = v
    try:
        fn(*args, **kwargs)
    except KVCoreError:
        pass
    except Exception as exc:  # noqa: BLE001 - the assertion under test
        raise AssertionError(f"{name}(*{args!r}, **{kwargs!r}) raised "
                             f"{type(exc).__name__}: {exc}") from exc


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
