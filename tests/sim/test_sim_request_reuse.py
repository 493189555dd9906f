"""A SimRequest is used by one run, once (fresh tester, T7): the same list passed to a
second ``run_engine`` (a fresh manager) carried the first run's state and the engine
stopped with a bare RuntimeError; one request twice in a list, or two of one id, gave a
cache-hit RequestError naming neither.  Rule: a ConfigError naming the index and id,
before any step; fresh SimRequests of the same traces give the same figures."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import kvcore.sim as sim
from kvcore import FullAttentionSpec, KVCacheManager, plan
from kvcore.errors import ConfigError
from kvcore.sim.timing import ConstantTimeModel

CFG = plan({"l0": FullAttentionSpec(block_size=16, num_kv_heads=8, head_size=128)},
           max_model_len=2048, num_gpu_blocks_override=400)


def _run(reqs):
    return sim.run_engine(KVCacheManager(CFG, max_model_len=2048), reqs,
                          ConstantTimeModel(), max_num_seqs=4, max_num_batched_tokens=512)


@settings(max_examples=20, deadline=None)
@given(n=st.integers(1, 8), dup=st.integers(0, 7), seed=st.integers(0, 100))
def test_reuse_and_duplicates_are_named(n, dup, seed):
    traces = sim.random_dataset(n, input_len=64, output_len=4, seed=seed)
    first = [sim.SimRequest(t) for t in traces]
    m1 = sim.serving_metrics(_run(first))
    with pytest.raises(ConfigError) as e:  # the same objects again
        _run(first)
    assert "already run" in str(e.value)
    again = sim.serving_metrics(_run([sim.SimRequest(t) for t in traces]))
    assert again == m1  # fresh SimRequests of the same traces: the same run
    fresh = [sim.SimRequest(t) for t in traces]
    k = dup % n
    with pytest.raises(ConfigError) as e:  # one object twice
        _run(fresh + [fresh[k]])
    assert f"requests[{n}]" in str(e.value) and repr(traces[k].request_id) in str(e.value)
    with pytest.raises(ConfigError):  # two objects, one id
        _run([sim.SimRequest(t) for t in traces] + [sim.SimRequest(traces[k])])


def test_a_fleet_names_them_too():
    from kvcore.sim.fleet import run_fleet

    traces = sim.random_dataset(6, input_len=64, output_len=4, seed=1)
    reqs = [sim.SimRequest(t) for t in traces]
    run_fleet(CFG, reqs, ConstantTimeModel(), replicas=2, router="round-robin", max_num_seqs=4,
              max_num_batched_tokens=512)
    with pytest.raises(ConfigError):
        run_fleet(CFG, reqs, ConstantTimeModel(), replicas=2, router="round-robin", max_num_seqs=4,
                  max_num_batched_tokens=512)
