"""Fleet simulation (kvcore.sim.fleet): one replica is run_engine token for token;
routers see only delayed KV events and their own bookkeeping; prefix-aware routing on
spaced requests reaches the single-cache hit ratio computed by hand; an attention-only
router believes in prefixes a hybrid lost; routers load through ``kvcore.routers``; the
CLI's fleet flags and their bad values."""

from __future__ import annotations

import json
import random

import pytest

from kvcore.errors import ConfigError
from kvcore.kv_cache_config import KVCacheConfig, KVCacheGroupSpec
from kvcore.runtime import KVCacheManager
from kvcore.sim.engine import SimRequest, run_engine
from kvcore.sim.fleet import (
    ROUTERS_ENTRY_POINT_GROUP,
    fleet_metrics,
    load_router,
    router_names,
    run_fleet,
)
from kvcore.sim.timing import ConstantTimeModel
from kvcore.sim.traces import TraceRequest
from kvcore.specs import FullAttentionSpec, SlidingWindowSpec

TM = ConstantTimeModel(step_s=0.01, token_s=1e-5)


def _full(bs=16):
    return FullAttentionSpec(block_size=bs, num_kv_heads=2, head_size=64)


def _swa(w, bs=16):
    return SlidingWindowSpec(block_size=bs, num_kv_heads=2, head_size=64, sliding_window=w)


def _cfg(blocks, *specs, mml=4096):
    return KVCacheConfig(num_blocks=blocks, kv_cache_tensors=(), max_model_len=mml,
                         kv_cache_groups=tuple(KVCacheGroupSpec((f"l{i}",), s)
                                               for i, s in enumerate(specs)))


def _trace(prefixes, n, *, seed, gap_ms, suffix=(1, 40), out=(1, 8)):
    """``n`` requests, each one of ``prefixes`` (token lists) plus a unique suffix."""
    rng = random.Random(seed)
    reqs, which = [], []
    for i in range(n):
        k = rng.randrange(len(prefixes))
        toks = list(prefixes[k]) + [100_000 + 1000 * i + j
                                    for j in range(rng.randrange(*suffix))]
        reqs.append(TraceRequest(f"r{i}", i * gap_ms, len(toks), rng.randrange(*out),
                                 7 + i, token_ids=toks))
        which.append(k)
    return reqs, which


def _prefixes(k, lengths, seed=0):
    rng = random.Random(seed)
    return [[rng.randrange(1, 30000) for _ in range(rng.choice(lengths))]
            for _ in range(k)]


# ---- one replica is the engine ------------------------------------------------------------
@pytest.mark.parametrize("specs, conc", [((_full(),), None), ((_full(),), 6),
                                         ((_full(), _swa(64)), 4)])
def test_one_replica_is_run_engine(specs, conc):
    cfg = _cfg(90, *specs)
    reqs, _ = _trace(_prefixes(3, [200, 500]), 40, seed=1, gap_ms=15, out=(20, 150))
    a = [SimRequest(r) for r in reqs]
    b = [SimRequest(r) for r in reqs]
    ref = run_engine(KVCacheManager(cfg, max_num_batched_tokens=256), a, TM,
                     max_num_seqs=8, max_num_batched_tokens=256, max_concurrency=conc)
    got = run_fleet(cfg, b, TM, replicas=1, router="round-robin", max_num_seqs=8,
                    max_num_batched_tokens=256, max_concurrency=conc)
    r0 = got.replicas[0]
    assert (r0.steps, r0.preemptions, r0.prefix_hit_tokens) == \
        (ref.steps, ref.preemptions, ref.prefix_hit_tokens)
    assert ref.preemptions > 0  # the tight pool does preempt
    assert ref.prefix_hit_tokens > 0
    for x, y in zip(a, b):
        assert (x.sent, x.token_times, x.num_cached_tokens, x.rejected) == \
            (y.sent, y.token_times, y.num_cached_tokens, y.rejected)


# ---- routers ---------------------------------------------------------------------------------
def test_round_robin_and_least_loaded_spread_requests():
    cfg = _cfg(2000, _full())
    reqs, _ = _trace(_prefixes(2, [64]), 40, seed=2, gap_ms=1)
    res = run_fleet(cfg, [SimRequest(r) for r in reqs], TM, replicas=4,
                    router="round-robin", max_num_seqs=8, max_num_batched_tokens=512)
    assert res.assignment == [i % 4 for i in range(40)]
    m = fleet_metrics(res)
    assert m["requests_per_replica"] == [10, 10, 10, 10] and m["request_imbalance"] == 1.0
    res = run_fleet(cfg, [SimRequest(r) for r in reqs], TM, replicas=4,
                    router="least-loaded", max_num_seqs=8, max_num_batched_tokens=512)
    counts = fleet_metrics(res)["requests_per_replica"]
    assert max(counts) - min(counts) <= 2


def _ideal_hits(reqs, which, prefixes, bs):
    """Hit tokens of a single infinite prefix cache, by hand: the first request of a
    prefix misses; a later one hits the prefix's whole blocks (the suffixes are unique,
    so nothing past the prefix matches), at most prompt - 1 tokens."""
    seen, hits = set(), 0
    for r, k in zip(reqs, which):
        if k in seen:
            hits += min(r.prompt_len - 1, len(prefixes[k])) // bs * bs
        seen.add(k)
    return hits


@pytest.mark.parametrize("seed", [0, 1])
def test_prefix_aware_reaches_the_single_cache_hit_ratio(seed):
    """Requests far apart (each finishes before the next arrives): prefix-aware routing
    sends every request of a prefix where the prefix is, so the fleet hits as one
    infinite cache would; round robin re-computes each prefix on every replica."""
    cfg = _cfg(4000, _full())
    pre = _prefixes(6, [100, 300, 700], seed=seed)
    reqs, which = _trace(pre, 36, seed=seed, gap_ms=2000)
    ideal = _ideal_hits(reqs, which, pre, 16)
    total = sum(r.prompt_len for r in reqs)
    out = {}
    for router in ("round-robin", "prefix-aware"):
        res = run_fleet(cfg, [SimRequest(r) for r in reqs], TM, replicas=4,
                        router=router, max_num_seqs=8, max_num_batched_tokens=1024)
        out[router] = fleet_metrics(res)
    assert out["prefix-aware"]["prefix_hit_ratio"] == pytest.approx(ideal / total)
    assert out["round-robin"]["prefix_hit_ratio"] < out["prefix-aware"]["prefix_hit_ratio"]
    # the group-aware index predicted exactly the hits the replicas gave
    assert out["prefix-aware"]["router_predicted_hit_ratio"] == pytest.approx(ideal / total)


def test_attention_only_router_believes_in_lost_prefixes():
    """Full + sliding window, a pool so small that windows' blocks are evicted while
    the full group's stay: the attention-only router predicts hits the replicas cannot
    give (predicted > actual); the group-aware one predicts what it gets."""
    cfg = _cfg(100, _full(16), _swa(32, 16), mml=2048)
    pre = _prefixes(6, [400, 600], seed=4)
    reqs, _ = _trace(pre, 60, seed=4, gap_ms=400, suffix=(60, 200), out=(1, 4))
    got = {}
    for router in ("prefix-aware", "prefix-aware-attention-only"):
        res = run_fleet(cfg, [SimRequest(r) for r in reqs], TM, replicas=2,
                        router=router, max_num_seqs=4, max_num_batched_tokens=512)
        got[router] = fleet_metrics(res)
    ga, ao = got["prefix-aware"], got["prefix-aware-attention-only"]
    assert ao["router_predicted_hit_ratio"] > ao["prefix_hit_ratio"]
    assert ga["router_predicted_hit_ratio"] == pytest.approx(ga["prefix_hit_ratio"])


def test_event_delay_hides_recent_prefixes():
    """With events arriving later than the next request, prefix-aware routing cannot
    see where a prefix was just computed and hits less than with no delay."""
    cfg = _cfg(4000, _full())
    pre = _prefixes(4, [300, 600], seed=5)
    reqs, _ = _trace(pre, 40, seed=5, gap_ms=300)
    hit = {}
    for delay in (0.0, 60.0):
        res = run_fleet(cfg, [SimRequest(r) for r in reqs], TM, replicas=4,
                        router="prefix-aware", max_num_seqs=8, max_num_batched_tokens=1024,
                        event_delay_s=delay)
        hit[delay] = fleet_metrics(res)["prefix_hit_ratio"]
    assert hit[60.0] < hit[0.0]


# ---- plugins and bad input -------------------------------------------------------------
def test_routers_load_by_name_and_through_entry_points(monkeypatch):
    from kvcore.sim import fleet

    assert router_names()[:4] == ["round-robin", "least-loaded", "prefix-aware",
                                  "prefix-aware-attention-only"]

    class Always0:
        name = "always-0"
        uses_index = uses_attention_index = False

        def route(self, request, view):
            return 0

    class EP:
        value = "thirdparty:Always0"

        def load(self):
            return Always0

    monkeypatch.setattr(fleet, "_entry_points", lambda: {"always-0": EP()})
    assert ROUTERS_ENTRY_POINT_GROUP == "kvcore.routers"
    assert "always-0" in router_names()
    cfg = _cfg(1000, _full())
    reqs, _ = _trace(_prefixes(2, [64]), 10, seed=3, gap_ms=5)
    res = run_fleet(cfg, [SimRequest(r) for r in reqs], TM, replicas=3, router="always-0",
                    max_num_seqs=8, max_num_batched_tokens=512)
    assert set(res.assignment) == {0} and fleet_metrics(res)["completed"] == 10
    with pytest.raises(ConfigError) as e:
        load_router("nope")
    assert e.value.extra["field"] == "router" and "round-robin" in str(e.value)


@pytest.mark.parametrize("kw, field", [({"replicas": 0}, "replicas"),
                                       ({"event_delay_s": -1.0}, "event_delay_s"),
                                       ({"event_delay_s": float("inf")}, "event_delay_s"),
                                       ({"max_concurrency": 0}, "max_concurrency"),
                                       ({"router": "bogus"}, "router")])
def test_bad_fleet_arguments(kw, field):
    cfg = _cfg(100, _full())
    reqs, _ = _trace(_prefixes(1, [32]), 3, seed=0, gap_ms=1)
    args = dict(replicas=2, router="round-robin", max_num_seqs=4,
                max_num_batched_tokens=256) | kw
    with pytest.raises(ConfigError) as e:
        run_fleet(cfg, [SimRequest(r) for r in reqs], TM, **args)
    assert e.value.extra["field"] == field


def test_a_router_choosing_no_replica_is_an_error():
    class Bad:
        name = "bad"
        uses_index = uses_attention_index = False

        def route(self, request, view):
            return view.num_replicas

    cfg = _cfg(100, _full())
    reqs, _ = _trace(_prefixes(1, [32]), 2, seed=0, gap_ms=1)
    with pytest.raises(ConfigError) as e:
        run_fleet(cfg, [SimRequest(r) for r in reqs], TM, replicas=2, router=Bad(),
                  max_num_seqs=4, max_num_batched_tokens=256)
    assert e.value.extra["field"] == "router"


# ---- the CLI ----------------------------------------------------------------------------------
FLEET = ["simulate", "llama-3.1-8b", "--dataset", "random", "--num-prompts", "24",
         "--random-input-len", "300", "--random-output-len", "8", "--random-prefix-len",
         "200", "--max-model-len", "4096", "--kv-cache-memory", "1GiB", "--request-rate",
         "50"]


def test_cli_fleet_json_and_text(capsys, tmp_path):
    from kvcore.cli import main

    assert main([*FLEET, "--replicas", "3", "--router", "prefix-aware", "--event-delay",
                 "0.05", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["replicas"] == 3 and out["router"] == "prefix-aware"
    assert out["event_delay_s"] == 0.05 and out["completed"] == 24
    assert sum(out["requests_per_replica"]) == 24 and len(out["per_replica"]) == 3
    for k in ("mean_ttft_ms", "p99_ttft_ms", "mean_tpot_ms", "p99_tpot_ms",
              "prefix_hit_ratio", "request_imbalance", "busy_imbalance"):
        assert k in out, k
    assert main([*FLEET, "--replicas", "2"]) == 0
    text = capsys.readouterr().out
    assert "2 replicas, router round-robin" in text and "Requests per replica:" in text


@pytest.mark.parametrize("flags", [["--replicas", "0"], ["--router", "nope"],
                                   ["--event-delay", "-1"], ["--event-delay", "inf"],
                                   ["--replicas", "two"]])
def test_cli_bad_fleet_flags_one_line_exit_2(capsys, flags):
    from kvcore.cli import main

    assert main([*FLEET, *flags]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "Traceback" not in err[0]


def test_step_series_are_thinned_but_usage_figures_are_exact(monkeypatch):
    """A long run keeps at most MAX_SAMPLES points per replica; the mean and peak KV
    usage come from the exact time integral, the same however thin the series."""
    from kvcore.sim import fleet

    cfg = _cfg(400, _full())
    reqs, _ = _trace(_prefixes(3, [100]), 30, seed=6, gap_ms=20, out=(10, 40))
    figs = []
    for cap in (10**9, 8):
        monkeypatch.setattr(fleet, "MAX_SAMPLES", cap)
        res = run_fleet(cfg, [SimRequest(r) for r in reqs], TM, replicas=2,
                        router="least-loaded", max_num_seqs=4, max_num_batched_tokens=256)
        assert all(len(r.step_end) < min(cap, 10**6) for r in res.replicas)
        m = fleet_metrics(res)
        figs.append((m["mean_kv_usage"], m["peak_kv_usage"], m["mean_ttft_ms"]))
    assert figs[0] == figs[1] and figs[0][1] > 0


def test_the_readme_fleet_command_runs(capsys, monkeypatch):
    """The README's fleet example, as written there."""
    import re
    import shlex
    from pathlib import Path

    from kvcore.cli import main

    root = Path(__file__).resolve().parents[2]
    readme = root / "README.md"
    if not readme.exists():
        pytest.skip("README absent (packaging copy of tests/)")
    blocks = re.findall(r"```bash\n(kvcore simulate .*?)```", readme.read_text(), re.S)
    block = next((b for b in blocks if "--replicas" in b), None)
    assert block, "README has no fleet example"
    argv = shlex.split(block.replace("\\\n", " "))[1:]
    monkeypatch.chdir(root)
    assert main(argv) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["replicas"] == 4 and out["router"] == "prefix-aware"
    assert out["completed"] + out["failed"] == 100 and out["prefix_hit_ratio"] > 0
