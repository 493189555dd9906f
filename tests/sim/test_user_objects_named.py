"""tester T6: a user's step-time model or router that raises is named.

The rule (README: every hook call is guarded; as a custom block hash's error): an
exception raised by ``time_model.step_time`` or ``router.route`` -- any type, SystemExit
included -- becomes a KVCoreError naming the object (field ``time_model`` / ``router``)
and the exception, from run_engine, run_fleet and run_workload; a router class passed
instead of an instance is refused naming it; numeric returns are numbers whatever their
type (np.float32 step times, np.int64 replica indices), bool is not.
Generated: the exception type, the step at which it is raised, the entry point.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kvcore.errors import ConfigError, KVCoreError
from kvcore.kv_cache_config import KVCacheConfig, KVCacheGroupSpec
from kvcore.runtime import KVCacheManager
from kvcore.sim.engine import SimRequest, run_engine
from kvcore.sim.fastsim import Workload, run_workload
from kvcore.sim.fleet import run_fleet
from kvcore.sim.timing import ConstantTimeModel
from kvcore.sim.traces import TraceRequest
from kvcore.specs import FullAttentionSpec

SETTINGS = settings(max_examples=40, deadline=None, derandomize=True)
CFG = KVCacheConfig(num_blocks=400, kv_cache_tensors=(), max_model_len=2048,
                    kv_cache_groups=(KVCacheGroupSpec(("l0",), FullAttentionSpec(
                        block_size=16, num_kv_heads=2, head_size=64)),))
ERRORS = [ZeroDivisionError("division by zero"), KeyError("x"), TypeError("bad"),
          RuntimeError("boom"), SystemExit(2), AssertionError("no"), ValueError("v")]
BASE = ConstantTimeModel(step_s=0.01, token_s=1e-5)


def _reqs(n=6):
    return [SimRequest(TraceRequest(f"r{i}", 5.0 * i, 40, 4, 7 + i,
                                    token_ids=list(range(1, 41)))) for i in range(n)]


class FailingModel:
    def __init__(self, exc, at):
        self.exc, self.at, self.calls = exc, at, 0

    def step_time(self, batch):
        self.calls += 1
        if self.calls > self.at:
            raise self.exc
        return BASE.step_time(batch)


def _run(entry, tm=BASE, router="round-robin"):
    if entry == "run_engine":
        return run_engine(KVCacheManager(CFG), _reqs(), tm, max_num_seqs=4,
                          max_num_batched_tokens=256)
    if entry == "run_fleet":
        return run_fleet(CFG, _reqs(), tm, replicas=2, router=router, max_num_seqs=4,
                         max_num_batched_tokens=256)
    return run_workload(tm, CFG, Workload(40, 4, 6), max_num_seqs=4,
                        max_num_batched_tokens=256)


@SETTINGS
@given(st.sampled_from(ERRORS), st.integers(0, 5),
       st.sampled_from(["run_engine", "run_fleet", "run_workload"]))
def test_a_raising_time_model_is_named(exc, at, entry):
    with pytest.raises(ConfigError) as e:
        _run(entry, FailingModel(exc, at))
    assert e.value.extra.get("field") == "time_model"
    assert "FailingModel" in str(e.value) and type(exc).__name__ in str(e.value)


class FailingRouter:
    name = "failing"

    def __init__(self, exc, at):
        self.exc, self.at, self.calls = exc, at, 0

    def route(self, request, view):
        self.calls += 1
        if self.calls > self.at:
            raise self.exc
        return 0


@SETTINGS
@given(st.sampled_from(ERRORS), st.integers(0, 5))
def test_a_raising_router_is_named(exc, at):
    with pytest.raises(ConfigError) as e:
        _run("run_fleet", router=FailingRouter(exc, at))
    assert e.value.extra.get("field") == "router"
    assert "failing" in str(e.value) and type(exc).__name__ in str(e.value)


def test_a_router_class_is_refused_naming_it():
    with pytest.raises(ConfigError) as e:
        _run("run_fleet", router=FailingRouter)
    assert e.value.extra.get("field") == "router" and "FailingRouter()" in str(e.value)


def test_kvcore_errors_of_a_model_pass_unchanged():
    class Own:
        def step_time(self, batch):
            raise KVCoreError("the model's own message", field="own")

    with pytest.raises(KVCoreError) as e:
        _run("run_engine", Own())
    assert e.value.extra.get("field") == "own"


@SETTINGS
@given(st.sampled_from(["float32", "float64", "float16"]),
       st.sampled_from(["run_engine", "run_fleet"]))
def test_numpy_step_times_are_numbers(dtype, entry):
    np = pytest.importorskip("numpy")
    t = getattr(np, dtype)

    class Typed:
        def step_time(self, batch):
            return t(0.0078125)  # exact in every float width

    class Plain:
        def step_time(self, batch):
            return 0.0078125

    a, b = _run(entry, Typed()), _run(entry, Plain())
    if entry == "run_fleet":
        assert a.assignment == b.assignment
        a, b = a.replicas[0], b.replicas[0]
    assert (a.steps, a.preemptions) == (b.steps, b.preemptions) and a.steps > 0


def test_a_bool_step_time_is_refused():
    class Yes:
        def step_time(self, batch):
            return True

    with pytest.raises(ConfigError) as e:
        _run("run_engine", Yes())
    assert e.value.extra.get("field") == "step_time"
