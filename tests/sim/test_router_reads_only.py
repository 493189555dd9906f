"""A router reads the request it routes; it does not change it (fresh tester T7 of stop
39: a router that set ``request.prompt_len = 1`` made the fleet report 8 input tokens
for 8 x 100 prefilled, and ``output_len = 1`` cut every request to one token).  Any
field the run serves or reports that a router rewrites is a ConfigError naming the
router and the field; the built-in routers route as before."""

from __future__ import annotations

import random

import pytest

import kvcore
from kvcore.errors import ConfigError
from kvcore.sim.engine import SimRequest
from kvcore.sim.fleet import fleet_metrics, router_names, run_fleet
from kvcore.sim.timing import ConstantTimeModel
from kvcore.sim.traces import TraceRequest
from kvcore.specs import FullAttentionSpec


def _cfg():
    return kvcore.plan({"l0": FullAttentionSpec(block_size=16, num_kv_heads=8,
                                                head_size=128)},
                       max_model_len=4096, num_gpu_blocks_override=2000)


def _reqs(seed=0, n=8):
    rng = random.Random(seed)
    return [SimRequest(TraceRequest(f"r{i}", 10.0 * i, p, rng.randrange(2, 9), i,
                                    segments=[(i % 3, 0, p)]))
            for i, p in enumerate(rng.randrange(20, 200) for _ in range(n))]


REWRITES = {
    "prompt_len": lambda r: setattr(r, "prompt_len", 1),
    "output_len": lambda r: setattr(r, "output_len", 1),
    "arrival": lambda r: setattr(r, "arrival", r.arrival + 5.0),
    "request_id": lambda r: setattr(r, "request_id", "other"),
    "block_hashes": lambda r: r.request.block_hashes.append(b"x" * 32),
    "all_token_ids": lambda r: r.request.all_token_ids.append(7),
}


@pytest.mark.parametrize("field", sorted(REWRITES))
@pytest.mark.parametrize("seed", range(3))
def test_a_router_that_rewrites_the_request_is_named(field, seed):
    class Rewriter:
        name = "rewriter"

        def route(self, request, view):
            REWRITES[field](request)
            return 0

    with pytest.raises(ConfigError) as exc:
        run_fleet(_cfg(), _reqs(seed), ConstantTimeModel(), replicas=2, router=Rewriter(),
                  max_num_seqs=4, max_num_batched_tokens=512)
    assert exc.value.extra["field"] == "router"
    assert "rewriter" in str(exc.value) and field in str(exc.value)


@pytest.mark.parametrize("router", router_names())
def test_the_built_in_routers_read_only(router):
    reqs = _reqs(1, 12)
    m = fleet_metrics(run_fleet(_cfg(), reqs, ConstantTimeModel(), replicas=2,
                                router=router, max_num_seqs=4,
                                max_num_batched_tokens=512))
    assert m["completed"] == 12
    assert m["total_input_tokens"] == sum(r.prompt_len for r in reqs)
