"""One rule for integer arguments at kvcore's public entry points (leftover F9).

The rule (kvcore.units.as_int): any integral number that is not bool is the equal
Python int -- a numpy integer gives the same result as the plain int and nothing numpy
is kept in what comes back -- while bool, floats and text are refused with a
KVCoreError that names the field.

Generated (hypothesis, derandomized): an entry point of the table below, a numpy
integer dtype holding its plain value, and a bad value of another type.  The expected
result of a numpy call is the rule's: the result of the same call with the plain int.
"""

from __future__ import annotations

import dataclasses
import math

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kvcore.errors import KVCoreError

try:  # the core-only install has no numpy: the numpy tests skip, the bad-type ones run
    import numpy as np
except ImportError:  # pragma: no cover - exercised by the core-only venv
    np = None

SETTINGS = settings(max_examples=60, deadline=None, derandomize=True,
                    suppress_health_check=[HealthCheck.too_slow])
DTYPES = ["int64", "int32", "int16", "uint16", "uint32", "uint64", "intp"]
BAD = [True, False, 2.0, 1.5, "4", "x"]
GiB = 1 << 30


def _no_numpy(obj, depth=0):
    """Nothing numpy in ``obj`` (dicts, lists, tuples, dataclasses walked)."""
    if depth > 6:
        return True
    if np is not None and isinstance(obj, np.generic):
        return False
    if isinstance(obj, dict):
        return all(_no_numpy(k, depth + 1) and _no_numpy(v, depth + 1)
                   for k, v in obj.items())
    if isinstance(obj, (list, tuple)):
        return all(_no_numpy(v, depth + 1) for v in obj[:200])
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return all(_no_numpy(getattr(obj, f.name, None), depth + 1)
                   for f in dataclasses.fields(obj))
    return True


# ---- the entry points: name -> (field, plain value, call(value) -> comparable result) ----

def _block_tables(v):
    from kvcore.runtime.kernel_tables import block_tables

    return block_tables([[1, 2], [3]], width=v)


def _request_block_tables(v):
    from kvcore.kv_cache_config import KVCacheConfig, KVCacheGroupSpec
    from kvcore.runtime import KVCacheManager
    from kvcore.runtime.kernel_tables import request_block_tables
    from kvcore.specs import FullAttentionSpec, SlidingWindowSpec

    cfg = KVCacheConfig(num_blocks=64, kv_cache_tensors=(), max_model_len=1024,
                        kv_cache_groups=(
                            KVCacheGroupSpec(("a",), FullAttentionSpec(
                                block_size=16, num_kv_heads=2, head_size=64)),
                            KVCacheGroupSpec(("b",), SlidingWindowSpec(
                                block_size=16, num_kv_heads=2, head_size=64,
                                sliding_window=32))))
    return request_block_tables(KVCacheManager(cfg), ["none"], group_id=v, width=4)


def _block_hasher(v):
    from kvcore.runtime.hashing import BlockHasher

    h = BlockHasher(v)
    return h.block_size


def _attention_block_size(v):
    from kvcore.deploy.gpus import check_attention_block_size

    try:
        check_attention_block_size(v, "H100")
    except KVCoreError as e:
        return str(e)
    return None


def _compute_budget(field):
    def call(v):
        from kvcore.deploy.budget import compute_budget

        b = compute_budget("llama-3.1-8b", gpu="H100", max_model_len=8192,
                           **{field: v})
        return b.kv_cache_memory_bytes, b.stage_budgets, b.ledger
    return call


def _engine_ledger(field):
    def call(v):
        from kvcore.deploy.engines import engine_ledger
        from kvcore.deploy.weights import estimate_weights
        from kvcore.models.config import load_model_config

        cfg = load_model_config("llama-3.1-8b")
        kw = dict(gpu_memory_bytes=80 * GiB, max_model_len=8192)
        kw[field] = v
        return engine_ledger(cfg, estimate_weights(cfg), **kw)
    return call


def _plan_on_gpu(field):
    def call(v):
        from kvcore.deploy import plan_model

        kw = dict(gpu="H100", max_model_len=8192)
        kw[field] = v
        c = plan_model("llama-3.1-8b", **kw)
        return (c.num_blocks, [g.spec for g in c.kv_cache_groups], c.max_model_len,
                c.stats.get("max_concurrency"))
    return call


def _planner(field):
    def call(v):
        from kvcore.models.planner import plan_model

        kw = dict(kv_cache_memory_bytes=20 * GiB, max_model_len=8192)
        kw[field] = v
        c = plan_model("llama-3.1-8b", **kw)
        return (c.num_blocks, [g.spec for g in c.kv_cache_groups], c.max_model_len,
                c.stats.get("max_concurrency"))
    return call


def _sweep(v):
    from kvcore.deploy.sweep import sweep

    rows = sweep("llama-3.1-8b", gpu="H100", tensor_parallel_size=[v],
                 max_model_len=8192, progress=False)
    return [{k: x for k, x in r.items() if k != "plan"} for r in rows]


def _plot_lengths(v):
    from kvcore.deploy.sweep import plot_lengths

    return plot_lengths("llama-3.1-8b", v)


def _workload_from_requests(field):
    def call(v):
        from kvcore.serving import workload_from_requests

        if field == "workload":
            return workload_from_requests([(v, 32, 0), (100, v, 8)])
        return workload_from_requests([(128, 32, 0), (100, 16, 8)], **{field: v})
    return call


def _plan_context(v):
    from kvcore.specs import PlanContext

    return PlanContext(max_model_len=v)


def _cdiv(field):
    def call(v):
        from kvcore.specs import cdiv

        return cdiv(v, 7) if field == "a" else cdiv(100, v)
    return call


def _field_int(v):
    from kvcore.models.config import field_int

    return field_int({"num_hidden_layers": v}, "num_hidden_layers")


def _fast_workload(field):
    def call(v):
        from kvcore.sim.fastsim import Workload

        kw = dict(input_len=64, output_len=8, num_prompts=4)
        kw[field] = v
        return Workload(**kw)
    return call


def _small_config(num_blocks=400):
    from kvcore.kv_cache_config import KVCacheConfig, KVCacheGroupSpec
    from kvcore.specs import FullAttentionSpec

    return KVCacheConfig(num_blocks=num_blocks, kv_cache_tensors=(), max_model_len=2048,
                         kv_cache_groups=(KVCacheGroupSpec(("l0",), FullAttentionSpec(
                             block_size=16, num_kv_heads=2, head_size=64)),))


def _run_workload(field):
    def call(v):
        from kvcore.sim.fastsim import Workload, run_workload
        from kvcore.sim.timing import ConstantTimeModel

        kw = dict(max_num_seqs=4, max_num_batched_tokens=256, kv_capacity_tokens=4096)
        kw[field] = v
        return run_workload(ConstantTimeModel(step_s=0.01, token_s=1e-5), _small_config(),
                            Workload(64, 8, 6), **kw)
    return call


def _random_dataset(field):
    def call(v):
        from kvcore.sim.workload import random_dataset

        kw = dict(num_prompts=5, input_len=64, output_len=8, prefix_len=4, seed=3)
        kw[field] = v
        return random_dataset(**kw)
    return call


def _arrival_times(field):
    def call(v):
        from kvcore.sim.workload import arrival_times

        kw = dict(n=6, request_rate=2.0, seed=1)
        if field in ("ramp_up_start_rps", "ramp_up_end_rps"):
            kw = dict(n=6, request_rate=math.inf, seed=1, ramp_up_strategy="linear",
                      ramp_up_start_rps=1, ramp_up_end_rps=4)
        kw[field] = v
        return arrival_times(**kw)
    return call


def _serve_defaults(v):
    from kvcore.sim.command import vllm_serve_defaults

    return vllm_serve_defaults(v, "H100")


def _run_fleet(field):
    def call(v):
        from kvcore.kv_cache_config import KVCacheConfig, KVCacheGroupSpec
        from kvcore.sim.engine import SimRequest
        from kvcore.sim.fleet import run_fleet
        from kvcore.sim.timing import ConstantTimeModel
        from kvcore.sim.traces import TraceRequest
        from kvcore.specs import FullAttentionSpec

        cfg = KVCacheConfig(num_blocks=400, kv_cache_tensors=(), max_model_len=2048,
                            kv_cache_groups=(KVCacheGroupSpec(("l0",), FullAttentionSpec(
                                block_size=16, num_kv_heads=2, head_size=64)),))
        reqs = [SimRequest(TraceRequest(f"r{i}", 5.0 * i, 40 + i, 4, 7 + i,
                                        token_ids=list(range(1, 41 + i))))
                for i in range(8)]
        kw = dict(replicas=2, max_num_seqs=4, max_num_batched_tokens=256)
        kw[field] = v
        res = run_fleet(cfg, reqs, ConstantTimeModel(step_s=0.01, token_s=1e-5),
                        router="round-robin", **kw)
        return res.assignment, [(r.steps, r.preemptions) for r in res.replicas]
    return call


def _scheduled_request(field):
    def call(v):
        from kvcore.sim.timing import ScheduledRequest

        kw = dict(num_new_tokens=16, num_computed_tokens=32, is_prefill=True)
        kw[field] = v
        return ScheduledRequest(**kw)
    return call


def _roofline_for(field):
    def call(v):
        from kvcore.sim.timing import roofline_for

        return roofline_for("llama-3.1-8b", gpu="H100", **{field: v})
    return call


def _roofline_field(field):
    def call(v):
        from kvcore.sim.timing import roofline_for

        base = roofline_for("llama-3.1-8b", gpu="H100")
        return dataclasses.replace(base, **{field: v})
    return call


def _run_tasks(v):
    from kvcore.sim.backends import run_tasks

    return run_tasks(abs, [-1, -2, 3], backend="serial", workers=v, progress=False)


def _bench_row(field):
    def call(v):
        from kvcore.sim.calibrate import bench_result_row

        res = {"completed": 16, "total_input_tokens": 16 * 128,
               "total_output_tokens": 16 * 32, "request_rate": "inf",
               "max_concurrency": 4, "burstiness": 1.0, "output_throughput": 480.0,
               "median_ttft_ms": 40.0, "median_tpot_ms": 7.0}
        kw = dict(model="llama-3.1-8b", gpu="H100", max_model_len=8192)
        kw[field] = v
        return bench_result_row(res, **kw)
    return call


def _lengths(fn_name, field):
    def call(v):
        from kvcore.sim import accuracy

        if fn_name == "sharegpt":
            kw = dict(num_prompts=20, mean_output_len=100, input_len=200, seed=2)
            kw[field] = v
            return accuracy.sharegpt_output_lengths(**kw)
        kw = dict(num_prompts=20, mean_output_len=50, output_len_max=128, seed=2)
        kw[field] = v
        return accuracy.eos_output_lengths(**kw)
    return call


def _iid_rates(v):
    from kvcore.sim.speculative import iid_rates

    return iid_rates(0.7, v)


def _spec_config(v):
    from kvcore.sim.speculative import parse_speculative_config

    return parse_speculative_config({"method": "ngram", "num_speculative_tokens": v,
                                     "prompt_lookup_max": 4})


def _check_int_minimum(v):
    from kvcore.units import check_int

    return check_int(5, "block_size", minimum=v), check_int(5, "block_size", maximum=v + 9)


def _block_pool(v):
    from kvcore.runtime.block_pool import BlockPool

    pool = BlockPool(16, num_groups=v)
    return pool.num_blocks, len(pool.cached)


def _cache_full_blocks(field):
    def call(v):
        from kvcore.runtime.block_pool import BlockPool

        pool = BlockPool(16)
        blocks = pool.get_new_blocks(3)
        hashes = [bytes([i]) * 32 for i in range(1, 7)]
        kw = dict(num_cached=0, num_full=3, stride=2)
        kw[field] = v
        pool.cache_full_blocks(blocks, hashes, kw["num_cached"], kw["num_full"], 0,
                               kw["stride"])
        return [(h[0], getattr(pool.get_cached_block(h, 0), "block_id", None))
                for h in hashes]
    return call


def _request(field):
    def call(v):
        from kvcore.runtime.hashing import Request

        kw = dict(max_tokens=8, block_size=4)
        if field == "offset":
            kw["mm_features"] = [(v, 4, "img")]
        else:
            kw[field] = v
        r = Request("r", list(range(1, 11)), **kw)
        return r.max_tokens, r.block_hashes, r.mm_features
    return call


def _extra_keys(field):
    def call(v):
        from kvcore.runtime.hashing import block_extra_keys

        kw = dict(start=0, end=16)
        kw[field] = v
        return block_extra_keys(kw["start"], kw["end"], lora_name="x",
                                mm_features=[(4, 4, "img")])
    return call


def _prefix_router(v):
    from kvcore.sim.fleet import PrefixAwareRouter

    return PrefixAwareRouter(max_pending_blocks=v).max_pending_blocks


#: name -> (field the error names, plain value, call, whether bad types are refused)
CASES = {
    "block_tables.width": ("width", 3, _block_tables, True),
    "check_int.minimum": ("minimum", 1, _check_int_minimum, True),
    "BlockPool.num_groups": ("num_groups", 2, _block_pool, True),
    "cache_full_blocks.num_full": ("num_full", 2, _cache_full_blocks("num_full"), True),
    "cache_full_blocks.stride": ("stride", 2, _cache_full_blocks("stride"), True),
    "Request.max_tokens": ("max_tokens", 8, _request("max_tokens"), True),
    "Request.block_size": ("block_size", 4, _request("block_size"), True),
    "Request.mm_features.offset": ("mm_features", 2, _request("offset"), True),
    "block_extra_keys.end": ("end", 16, _extra_keys("end"), True),
    "PrefixAwareRouter.max_pending_blocks": ("max_pending_blocks", 64, _prefix_router,
                                             True),
    "request_block_tables.group_id": ("group_id", 1, _request_block_tables, True),
    "BlockHasher.block_size": ("block_size", 16, _block_hasher, True),
    # not an int: left to the planner, which names it (the check passes it by)
    "check_attention_block_size": ("block_size", 24, _attention_block_size, False),
    "compute_budget.tensor_parallel_size": ("tensor_parallel_size", 2,
                                            _compute_budget("tensor_parallel_size"), True),
    "compute_budget.max_num_seqs": ("max_num_seqs", 128, _compute_budget("max_num_seqs"),
                                    True),
    "compute_budget.max_num_batched_tokens": (
        "max_num_batched_tokens", 4096, _compute_budget("max_num_batched_tokens"), True),
    "engine_ledger.gpu_memory_bytes": ("gpu_memory_bytes", 80 * GiB,
                                       _engine_ledger("gpu_memory_bytes"), True),
    "engine_ledger.tensor_parallel_size": ("tensor_parallel_size", 2,
                                           _engine_ledger("tensor_parallel_size"), True),
    "engine_ledger.max_num_seqs": ("max_num_seqs", 64, _engine_ledger("max_num_seqs"),
                                   True),
    "plan_on_gpu.max_model_len": ("max_model_len", 4096, _plan_on_gpu("max_model_len"),
                                  True),
    "plan_on_gpu.max_num_seqs": ("max_num_seqs", 64, _plan_on_gpu("max_num_seqs"), True),
    "plan_on_gpu.num_gpu_blocks_override": (
        "num_gpu_blocks_override", 1000, _plan_on_gpu("num_gpu_blocks_override"), True),
    "plan_on_gpu.data_parallel_size": ("data_parallel_size", 2,
                                       _plan_on_gpu("data_parallel_size"), True),
    "planner.max_num_batched_tokens": ("max_num_batched_tokens", 4096,
                                       _planner("max_num_batched_tokens"), True),
    "planner.max_model_len": ("max_model_len", 4096, _planner("max_model_len"), True),
    "planner.num_gpu_blocks_override": ("num_gpu_blocks_override", 900,
                                        _planner("num_gpu_blocks_override"), True),
    "sweep.tensor_parallel_size": ("tensor_parallel_size", 2, _sweep, True),
    "plot_lengths.max_model_len": ("max_model_len", 5000, _plot_lengths, False),
    "workload_from_requests.max_num_seqs": (
        "max_num_seqs", 32, _workload_from_requests("max_num_seqs"), True),
    "workload_from_requests.max_classes": (
        "max_classes", 1, _workload_from_requests("max_classes"), True),
    "workload_from_requests.requests": ("workload", 64,
                                        _workload_from_requests("workload"), True),
    "PlanContext.max_model_len": ("max_model_len", 4096, _plan_context, True),
    "cdiv.a": ("a", 100, _cdiv("a"), True),
    "cdiv.b": ("b", 7, _cdiv("b"), True),
    "field_int": ("num_hidden_layers", 32, _field_int, True),
    "Workload.input_len": ("input_len", 64, _fast_workload("input_len"), True),
    "Workload.max_concurrency": ("max_concurrency", 2, _fast_workload("max_concurrency"),
                                 True),
    "run_workload.max_num_seqs": ("max_num_seqs", 3, _run_workload("max_num_seqs"), True),
    "run_workload.kv_capacity_tokens": ("kv_capacity_tokens", 2048,
                                        _run_workload("kv_capacity_tokens"), True),
    "random_dataset.num_prompts": ("num_prompts", 5, _random_dataset("num_prompts"),
                                   True),
    "random_dataset.input_len": ("random_input_len", 64, _random_dataset("input_len"),
                                 True),
    "random_dataset.seed": ("seed", 3, _random_dataset("seed"), True),
    "arrival_times.n": ("num_prompts", 6, _arrival_times("n"), True),
    "arrival_times.seed": ("seed", 11, _arrival_times("seed"), True),
    "arrival_times.ramp_up_end_rps": ("ramp_up_end_rps", 4,
                                      _arrival_times("ramp_up_end_rps"), True),
    "vllm_serve_defaults": ("gpu_memory_bytes", 80 * GiB, _serve_defaults, True),
    "run_fleet.replicas": ("replicas", 2, _run_fleet("replicas"), True),
    "run_fleet.max_num_seqs": ("max_num_seqs", 3, _run_fleet("max_num_seqs"), True),
    "ScheduledRequest.num_new_tokens": ("num_new_tokens", 16,
                                        _scheduled_request("num_new_tokens"), True),
    "roofline_for.tensor_parallel_size": ("tensor_parallel_size", 2,
                                          _roofline_for("tensor_parallel_size"), True),
    "RooflineTimeModel.num_layers": ("num_layers", 32, _roofline_field("num_layers"),
                                     True),
    "run_tasks.workers": ("workers", 2, _run_tasks, True),
    "bench_result_row.tensor_parallel_size": (
        "tensor_parallel_size", 2, _bench_row("tensor_parallel_size"), True),
    "bench_result_row.block_size": ("block_size", 32, _bench_row("block_size"), True),
    "sharegpt_output_lengths.num_prompts": (
        "num_prompts", 20, _lengths("sharegpt", "num_prompts"), True),
    "sharegpt_output_lengths.seed": ("seed", 5, _lengths("sharegpt", "seed"), False),
    "eos_output_lengths.output_len_max": (
        "output_len_max", 128, _lengths("eos", "output_len_max"), True),
    "iid_rates.k": ("num_speculative_tokens", 3, _iid_rates, True),
    "speculative_config.num_speculative_tokens": ("num_speculative_tokens", 3,
                                                  _spec_config, True),
}
#: values a reader takes as ints by its own documented rule: config.json's integral
#: floats (JSON ``4096.0``); vLLM's pydantic lax mode for --speculative-config
#: (``2.0`` and ``"4"`` are ints there, and so in kvcore)
LAX = {"field_int": (2.0,), "speculative_config.num_speculative_tokens": (2.0, "4")}
NAMES = sorted(CASES)
REFUSING = [n for n in NAMES if CASES[n][3]]


@pytest.fixture(scope="module")
def plain_results():
    return {}


def _plain(cache, name):
    if name not in cache:
        field, value, call, _ = CASES[name]
        cache[name] = call(value)
    return cache[name]


@SETTINGS
@given(st.sampled_from(NAMES), st.sampled_from(DTYPES))
def test_numpy_int_gives_the_plain_int_result(plain_results, name, dtype):
    pytest.importorskip("numpy")
    dtype = getattr(np, dtype)
    field, value, call, _ = CASES[name]
    if value > np.iinfo(dtype).max:
        return
    got = call(dtype(value))
    assert got == _plain(plain_results, name), name
    assert _no_numpy(got), f"{name}: a numpy value kept in {got!r}"[:300]


@SETTINGS
@given(st.sampled_from(REFUSING), st.sampled_from(BAD))
def test_bad_types_are_refused_naming_the_field(name, bad):
    field, value, call, _ = CASES[name]
    if bad in LAX.get(name, ()):
        return  # an integral float a JSON reader takes as the int (the rule's exception)
    with pytest.raises(KVCoreError) as e:
        call(bad)
    where = f"{e.value} {e.value.extra.get('field', '')}"
    assert field in where, (name, bad, str(e.value))


def test_a_router_may_answer_a_numpy_int():
    pytest.importorskip("numpy")
    """A router's replica index (np.argmin of a load vector, say) is an int too."""
    from kvcore.kv_cache_config import KVCacheConfig, KVCacheGroupSpec
    from kvcore.sim.engine import SimRequest
    from kvcore.sim.fleet import run_fleet
    from kvcore.sim.timing import ConstantTimeModel
    from kvcore.sim.traces import TraceRequest
    from kvcore.specs import FullAttentionSpec

    class Alternate:
        name = "alternate"
        uses_index = False
        uses_attention_index = False

        def __init__(self, wrap):
            self.i, self.wrap = 0, wrap

        def route(self, request, view):
            self.i += 1
            return self.wrap(self.i % 2)

    cfg = KVCacheConfig(num_blocks=400, kv_cache_tensors=(), max_model_len=2048,
                        kv_cache_groups=(KVCacheGroupSpec(("l0",), FullAttentionSpec(
                            block_size=16, num_kv_heads=2, head_size=64)),))

    def run(router):
        reqs = [SimRequest(TraceRequest(f"r{i}", 5.0 * i, 40, 4, 7 + i,
                                        token_ids=list(range(1, 41))))
                for i in range(6)]
        return run_fleet(cfg, reqs, ConstantTimeModel(step_s=0.01, token_s=1e-5),
                         replicas=2, router=router, max_num_seqs=4,
                         max_num_batched_tokens=256).assignment

    want = [1, 0, 1, 0, 1, 0]  # the rule: replica i % 2 for the i-th (1-based) request
    assert run(Alternate(int)) == want
    got = run(Alternate(np.int64))
    assert got == want and all(type(k) is int for k in got)
    with pytest.raises(KVCoreError) as e:
        run(Alternate(lambda k: bool(k)))
    assert e.value.extra.get("field") == "router"


NARROW = ["int8", "uint8", "int16", "uint16", "int32", "uint32"]


@settings(max_examples=30, deadline=None, derandomize=True)
@given(st.sampled_from(["max_num_seqs", "tensor_parallel_size", "max_num_batched_tokens",
                        "data_parallel_size"]),
       st.sampled_from(NARROW), st.integers(1, 4096),
       st.sampled_from(["plan_model", "compute_budget"]))
def test_narrow_numpy_ints_never_reach_the_budget_arithmetic(field, dtype, value, entry):
    """tester T2: np.int32(512) max_num_seqs overflowed int32 in engine_ledger (the
    sampler term max_num_seqs x vocab x 4), np.int8(2) tp likewise; the rule: the
    equal plain int's result, whatever the width."""
    import kvcore

    pytest.importorskip("numpy")
    dtype = getattr(np, dtype)
    if field in ("tensor_parallel_size", "data_parallel_size"):
        value = 1 << (value % 4)  # 1, 2, 4, 8: sizes the model splits into
    if field == "max_num_batched_tokens":
        value = max(value, 1024)  # >= the default max_num_seqs (vLLM refuses fewer)
    if field == "max_num_seqs":
        value = min(value, 2048)
    if value > np.iinfo(dtype).max:
        return

    def run(v):
        try:
            if entry == "plan_model":
                c = kvcore.plan_model("llama-3.1-8b", gpu="H100", max_model_len=8192,
                                      **{field: v})
                return c.num_blocks, c.stats.get("max_concurrency")
            b = kvcore.compute_budget("llama-3.1-8b", gpu="H100", max_model_len=8192,
                                      **{field: v})
            return b.kv_cache_memory_bytes, b.ledger
        except KVCoreError as e:  # e.g. a batch below max_num_seqs: the same refusal
            return type(e).__name__, str(e).replace(repr(v), str(value))

    assert run(dtype(value)) == run(value)


REAL_DTYPES = ["float16", "float32", "float64", "int32"]
#: values every float width holds exactly, so the numpy value equals the plain float
EXACT = [0.5, 0.75, 0.875, 0.25, 0.0078125]


@settings(max_examples=40, deadline=None, derandomize=True)
@given(st.sampled_from(["gpu_memory_utilization", "step_s", "percentile",
                        "event_delay_s"]),
       st.sampled_from(REAL_DTYPES), st.sampled_from(EXACT))
def test_numpy_reals_give_the_plain_float_result(field, dtype, value):
    """as_real's rule for real arguments: a numpy real (np.float32(0.5)) is the equal
    float; bool is refused naming the field."""
    pytest.importorskip("numpy")
    t = getattr(np, dtype)
    if dtype == "int32":
        value = 1.0  # an integer is a real too

    def call(v):
        if field == "gpu_memory_utilization":
            from kvcore.deploy.budget import compute_budget

            return compute_budget("llama-3.1-8b", gpu="H100",
                                  gpu_memory_utilization=v).kv_cache_memory_bytes
        if field == "step_s":
            from kvcore.sim.timing import ConstantTimeModel

            m = ConstantTimeModel(step_s=v, token_s=v)
            return m.step_s, m.token_s
        if field == "percentile":
            from kvcore.sim.metrics import percentile

            return percentile([1.0, 2.0, 4.0, 8.0], v if isinstance(v, bool) else v * 100)
        return _run_fleet_delay(v)

    got = call(t(value))
    assert got == call(float(value)) and _no_numpy(got)
    with pytest.raises(KVCoreError) as e:
        call(True)
    assert field in f"{e.value} {e.value.extra.get('field', '')}"


def _run_fleet_delay(delay):
    from kvcore.sim.engine import SimRequest
    from kvcore.sim.fleet import run_fleet
    from kvcore.sim.timing import ConstantTimeModel
    from kvcore.sim.traces import TraceRequest

    reqs = [SimRequest(TraceRequest(f"r{i}", 5.0 * i, 40, 4, 7 + i,
                                    token_ids=list(range(1, 41)))) for i in range(4)]
    res = run_fleet(_small_config(), reqs, ConstantTimeModel(step_s=0.01, token_s=1e-5),
                    replicas=2, router="round-robin", max_num_seqs=4,
                    max_num_batched_tokens=256, event_delay_s=delay)
    return res.assignment, [(r.steps, r.preemptions) for r in res.replicas]
