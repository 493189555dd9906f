"""Rules behind tester1's simulator / tune findings (TESTER1.md 1, 4, 5, 12-16, 18, 19),
each checked on generated cases, not only the reported example.

References: vLLM 0.32 ``vllm/config/scheduler.py`` (``verify_max_model_len``:
max_num_batched_tokens >= max_num_seqs; long_prefill_token_threshold <=
max_model_len), ``vllm/benchmarks/serve.py`` (``check_goodput_args`` refuses only
values < 0; one-second buckets of max_output_tokens_per_s / max_concurrent_requests),
``vllm/benchmarks/datasets`` (output lengths clamped to >= 1), numpy.percentile (p in
[0, 100]) and the house rules (bad input: one line, exit 2, naming the field).
"""

from __future__ import annotations

import json
import math
import random
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kvcore_cli_support import assert_clean_error as _clean_error  # noqa: E402
from kvcore_cli_support import run_cli as _run

import kvcore
from kvcore.cli import build_parser
from kvcore.errors import ConfigError

SIM = ["simulate", "llama-3.1-8b", "--gpu", "H100", "--dataset", "random",
       "--num-prompts", "8", "--random-input-len", "64", "--random-output-len", "8"]
TUNE = ["tune", "llama-3.1-8b", "--gpu", "H100", "--dataset", "random",
        "--random-input-len", "128", "--num-prompts", "8", "--backend", "serial",
        "--max-model-len", "4096", "--tp", "1", "--kv-cache-dtype", "auto",
        "--max-num-batched-tokens", "2048", "--max-num-seqs", "16"]


# ---- 1. peak buckets: only the seconds that hold events ---------------------------------
class _R:
    """A finished request: sent at ``sent``, tokens ``rel`` seconds after it (the
    engine's token_times count from the send)."""

    def __init__(self, sent: float, rel: list[float]) -> None:
        self.sent, self.token_times = sent, rel
        self.finish = sent + rel[-1]


def _peaks_reference(done: list[_R]) -> tuple[float, int]:
    """vLLM's definition, one slot per second (small spans only)."""
    t0 = min(r.sent for r in done)
    n = int(math.ceil(max(r.finish for r in done) - t0)) + 1
    tok = [0] * n
    for r in done:
        for t in r.token_times:
            tok[int((r.sent - t0) + t)] += 1
    conc = [sum(1 for r in done if int(r.sent - t0) <= b
                <= int((r.sent - t0) + r.token_times[-1])) for b in range(n)]
    return float(max(tok)), max(conc)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.floats(0, 50), st.lists(st.floats(0, 5), min_size=1,
                                                      max_size=4)), min_size=1, max_size=8),
       st.sampled_from([0.0, 1e6, 1e12]))
def test_peaks_match_the_per_second_definition(reqs: Any, offset: float) -> None:
    from kvcore.sim.metrics import _peaks

    done = []
    for sent, gaps in reqs:
        t, times = 0.0, []
        for g in gaps:
            t += g
            times.append(t)
        done.append(_R(sent, times))
    ref = _peaks_reference(done)
    got = _peaks(done)
    assert (got["max_output_tokens_per_s"], got["max_concurrent_requests"]) == ref
    if offset:  # the same run shifted far away: same answer, no per-second allocation
        far = [_R(r.sent + offset, r.token_times) for r in done]
        far[0] = _R(0.0, [1.0])  # one request at 0, the others 10^6..10^12 s later
        g2 = _peaks(far)
        assert g2["max_concurrent_requests"] >= 1


@pytest.mark.parametrize("rate", ["1e-9", "1e-6"])
def test_slow_request_rate_runs(capsys: Any, rate: str) -> None:
    rc, out, err = _run(capsys, [*SIM, "--request-rate", rate, "--json"])
    assert rc == 0, err
    d = json.loads(out)
    assert d["completed"] == 8 and d["max_concurrent_requests"] == 1


def test_trace_with_far_timestamp_runs(capsys: Any, tmp_path: Path) -> None:
    trace = tmp_path / "far.jsonl"
    trace.write_text(
        '{"timestamp": 0, "input_length": 100, "output_length": 10, "hash_ids": [0]}\n'
        '{"timestamp": 1e15, "input_length": 100, "output_length": 10, "hash_ids": [0]}\n')
    rc, out, err = _run(capsys, ["simulate", "llama-3.1-8b", "--gpu", "H100", "--trace",
                                 str(trace), "--max-model-len", "4096", "--json"])
    assert rc == 0, err
    assert json.loads(out)["completed"] == 2


# ---- 4. a run where no request can be served is an error naming the limit -------------
@pytest.mark.parametrize("seed", range(3))
def test_all_rejected_names_max_model_len(capsys: Any, seed: int) -> None:
    rng = random.Random(seed)
    isl, osl = rng.randint(40, 400), rng.randint(1, 40)
    mml = rng.randint(16, isl)  # below every prompt + output (range ratio 0)
    rc, _, err = _run(capsys, ["simulate", "llama-3.1-8b", "--gpu", "H100", "--dataset",
                               "random", "--num-prompts", "4", "--random-input-len",
                               str(isl), "--random-output-len", str(osl),
                               "--max-model-len", str(mml)])
    _clean_error(rc, err, "max_model_len", str(mml), str(isl + osl))


def test_tune_where_no_candidate_serves_is_an_error(capsys: Any) -> None:
    rc, _, err = _run(capsys, [*TUNE[:-4], "--random-output-len", "8",
                               "--max-model-len", "16"])
    _clean_error(rc, err, "max_model_len")


def test_check_some_served_names_the_limit() -> None:
    from kvcore.sim.engine import SimRequest, check_some_served
    from kvcore.sim.workload import random_dataset

    reqs = [SimRequest(r) for r in random_dataset(3, input_len=100, output_len=10)]
    check_some_served([], max_model_len=1)  # nothing given: nothing to refuse
    check_some_served(reqs, max_model_len=4096)  # not run yet: none rejected
    with pytest.raises(ConfigError) as e:  # past max_model_len: known before a run
        check_some_served(reqs, max_model_len=109)
    assert e.value.extra["field"] == "max_model_len" and "110" in e.value.message
    check_some_served(reqs, max_model_len=110)
    for r in reqs:
        r.rejected = True
    with pytest.raises(ConfigError) as e:
        check_some_served(reqs, max_model_len=50)
    assert e.value.extra["field"] == "max_model_len"
    with pytest.raises(ConfigError) as e:
        check_some_served(reqs, max_model_len=4096, num_blocks=3, block_size=16)
    assert e.value.extra["field"] == "num_blocks" and "3 blocks" in e.value.message


# ---- 5. what vLLM's SchedulerConfig refuses ------------------------------------------
def _vllm_refuses(seqs: int, mnbt: int, mml: int, lpt: int) -> bool:
    return mnbt < seqs or lpt > mml


@settings(max_examples=80, deadline=None)
@given(st.integers(1, 4096), st.integers(1, 8192), st.integers(1, 8192),
       st.integers(0, 8192))
def test_scheduler_limits_as_vllm(seqs: int, mnbt: int, mml: int, lpt: int) -> None:
    from kvcore.sim.engine import check_scheduler_limits

    if _vllm_refuses(seqs, mnbt, mml, lpt):
        with pytest.raises(ConfigError) as e:
            check_scheduler_limits(seqs, mnbt, mml, lpt)
        assert e.value.extra["field"] in ("max_num_batched_tokens",
                                          "long_prefill_token_threshold")
    else:
        check_scheduler_limits(seqs, mnbt, mml, lpt)


def test_scheduler_limits_differential_against_vllm() -> None:
    """The same cases through vLLM's own SchedulerConfig (skipped without vLLM)."""
    sc = pytest.importorskip("vllm.config.scheduler")
    from kvcore.sim.engine import check_scheduler_limits

    rng = random.Random(0)
    for _ in range(40):
        seqs, mnbt = rng.randint(1, 512), rng.randint(1, 1024)
        mml, lpt = rng.randint(64, 1024), rng.choice([0, rng.randint(1, 2048)])
        try:
            sc.SchedulerConfig(max_num_seqs=seqs, max_num_batched_tokens=mnbt,
                               max_model_len=mml, enable_chunked_prefill=True,
                               long_prefill_token_threshold=lpt, is_encoder_decoder=False)
            theirs = False
        except ValueError:
            theirs = True
        try:
            check_scheduler_limits(seqs, mnbt, mml, lpt)
            ours = False
        except ConfigError:
            ours = True
        assert ours == theirs, (seqs, mnbt, mml, lpt)


def test_simulate_refuses_mnbt_below_max_num_seqs(capsys: Any) -> None:
    rc, _, err = _run(capsys, [*SIM, "--max-num-batched-tokens", "1",
                               "--max-model-len", "4096"])
    _clean_error(rc, err, "max_num_batched_tokens", "max_num_seqs")


def test_fleet_refuses_mnbt_below_max_num_seqs(capsys: Any) -> None:
    rc, _, err = _run(capsys, [*SIM, "--max-num-batched-tokens", "8", "--max-num-seqs",
                               "16", "--max-model-len", "4096", "--replicas", "2"])
    _clean_error(rc, err, "max_num_batched_tokens")


def test_tune_refuses_and_skips_mnbt_below_max_num_seqs(capsys: Any) -> None:
    from kvcore.sim.tune import candidates

    rc, _, err = _run(capsys, [*TUNE[:-4], "--random-output-len", "8",
                               "--max-num-batched-tokens", "1", "--max-num-seqs", "16"])
    _clean_error(rc, err, "max_num_batched_tokens")
    cands = candidates("m", "H100", tp=[1], max_num_batched_tokens=[64, 256, 2048],
                       max_num_seqs=[16, 128, 1024], block_size=[None],
                       kv_cache_dtype=["auto"], prefix_caching=[True],
                       mamba_cache_mode=["none"], workload={}, goodput={})
    pairs = {(c["max_num_batched_tokens"], c["max_num_seqs"]) for c in cands}
    assert pairs == {(b, s) for b in (64, 256, 2048) for s in (16, 128, 1024) if b >= s}


# ---- 12. the Python API refuses bad input with KVCoreErrors ---------------------------
def _mgr_and_reqs() -> tuple[Any, Any]:
    from kvcore.runtime import KVCacheManager
    from kvcore.sim.engine import SimRequest
    from kvcore.sim.workload import random_dataset

    cfg = kvcore.plan_model("llama-3.1-8b", kv_cache_memory_bytes=2**30,
                            max_model_len=4096)
    mgr = KVCacheManager(cfg, max_model_len=4096, enable_caching=True,
                         max_num_batched_tokens=2048)
    return mgr, [SimRequest(r) for r in random_dataset(4, input_len=64, output_len=4)]


class _StrTime:
    def step_time(self, batch: Any) -> Any:
        return "0.01"


@pytest.mark.parametrize("case", ["requests None", "raw TraceRequest", "no step_time",
                                  "str step time", "max_model_len 0", "max_steps -1",
                                  "mnbt < seqs", "threshold > max_model_len"])
def test_run_engine_bad_arguments(case: str) -> None:
    from kvcore.sim import timing
    from kvcore.sim.engine import run_engine
    from kvcore.sim.workload import random_dataset

    mgr, reqs = _mgr_and_reqs()
    tm: Any = timing.ConstantTimeModel(step_s=0.01)
    kw: dict[str, Any] = {"max_num_seqs": 4, "max_num_batched_tokens": 2048}
    if case == "requests None":
        reqs = None
    elif case == "raw TraceRequest":
        reqs = random_dataset(2, input_len=8, output_len=2)
    elif case == "no step_time":
        tm = object()
    elif case == "str step time":
        tm = _StrTime()
    elif case == "max_model_len 0":
        kw["max_model_len"] = 0
    elif case == "max_steps -1":
        kw["max_steps"] = -1
    elif case == "mnbt < seqs":
        kw["max_num_seqs"] = 4096
    else:
        kw["long_prefill_token_threshold"] = 5000
    with pytest.raises(kvcore.KVCoreError):
        run_engine(mgr, reqs, tm, **kw)


@settings(max_examples=40, deadline=None)
@given(st.one_of(st.floats(max_value=-1e-12), st.just(float("nan")),
                 st.just(float("inf")), st.text(max_size=3), st.none(), st.booleans()))
def test_constant_time_model_refuses_bad_seconds(v: Any) -> None:
    from kvcore.sim.timing import ConstantTimeModel

    for field in ("step_s", "token_s"):
        with pytest.raises(kvcore.KVCoreError, match=field):
            ConstantTimeModel(**{field: v})


def test_roofline_for_applies_the_tp_head_rule() -> None:
    from kvcore.sim import timing

    cfg = kvcore.plan_model("llama-3.1-8b", kv_cache_memory_bytes=2**30,
                            max_model_len=4096)
    for tp in (3, 5, 6, 7, 64):  # 32 heads, 8 KV heads: none of these divides
        with pytest.raises(kvcore.KVCoreError, match="tensor_parallel_size"):
            timing.roofline_for("llama-3.1-8b", cfg, gpu="H100", tensor_parallel_size=tp)
    for tp in (0, -1, True):
        with pytest.raises(kvcore.KVCoreError, match="tensor_parallel_size"):
            timing.roofline_for("llama-3.1-8b", cfg, gpu="H100", tensor_parallel_size=tp)


def test_helpers_refuse_bad_input() -> None:
    from kvcore.sim import metrics, timing

    cfg = kvcore.plan_model("llama-3.1-8b", kv_cache_memory_bytes=2**30,
                            max_model_len=4096)
    for call in (lambda: timing.describe_batch(None, []),
                 lambda: timing.describe_batch(cfg, [1, 2]),  # type: ignore[list-item]
                 lambda: metrics.serving_metrics(None)):
        with pytest.raises(kvcore.KVCoreError):
            call()


@settings(max_examples=60, deadline=None)
@given(st.lists(st.floats(-1e6, 1e6), min_size=1, max_size=20),
       st.floats(-1000, 1000, allow_nan=False))
def test_percentile_as_numpy(xs: list[float], p: float) -> None:
    np = pytest.importorskip("numpy")
    from kvcore.sim.metrics import percentile

    if 0 <= p <= 100:
        assert percentile(xs, p) == pytest.approx(float(np.percentile(xs, p)),
                                                  rel=1e-9, abs=1e-6)
    else:
        with pytest.raises(ConfigError):
            percentile(xs, p)


@settings(max_examples=40, deadline=None)
@given(st.dictionaries(st.sampled_from(["ttft", "tpot", "e2el"]),
                       st.floats(0, 1e6, allow_nan=False), min_size=1))
def test_parse_goodput_one_string_or_a_list(slo: dict[str, float]) -> None:
    from kvcore.sim.metrics import parse_goodput
    from kvcore.sim.tune import parse_goodput as tune_parse

    items = [f"{k}:{v!r}" for k, v in slo.items()]
    assert parse_goodput(" ".join(items)) == pytest.approx(slo)
    assert parse_goodput(items) == pytest.approx(slo)
    assert tune_parse(items) == pytest.approx(slo)  # tune takes what simulate takes


# ---- 13. replicas built lazily, counts bounded -----------------------------------------
def test_counts_have_plausibility_bounds() -> None:
    from kvcore.sim.command import MAX_NUM_PROMPTS, MAX_REPLICAS

    for flag, bound in (("--num-prompts", MAX_NUM_PROMPTS), ("--replicas", MAX_REPLICAS)):
        build_parser().parse_args([*SIM, flag, str(bound)])
        with pytest.raises(SystemExit) as e:
            build_parser().parse_args([*SIM, flag, str(bound + 1)])
        assert e.value.code == 2


@pytest.mark.parametrize("replicas,n", [(1, 3), (64, 3), (512, 5)])
def test_fleet_builds_only_the_replicas_it_routes_to(monkeypatch: Any, replicas: int,
                                                     n: int) -> None:
    import kvcore.runtime as runtime
    from kvcore.sim import fleet
    from kvcore.sim.engine import SimRequest
    from kvcore.sim.timing import ConstantTimeModel
    from kvcore.sim.workload import random_dataset

    built: list[int] = []
    real = runtime.KVCacheManager

    class Counting(real):  # type: ignore[misc, valid-type]
        def __init__(self, *a: Any, **k: Any) -> None:
            built.append(1)
            super().__init__(*a, **k)

    monkeypatch.setattr(runtime, "KVCacheManager", Counting)
    cfg = kvcore.plan_model("llama-3.1-8b", kv_cache_memory_bytes=2**30,
                            max_model_len=4096)
    res = fleet.run_fleet(cfg, [SimRequest(r) for r in random_dataset(n, 64, 4)],
                          ConstantTimeModel(), replicas=replicas, router="round-robin",
                          max_num_seqs=16, max_num_batched_tokens=2048)
    assert len(built) == min(replicas, n)
    assert len(res.replicas) == replicas and len(res.busy_seconds) == replicas
    assert sum(1 for r in res.requests if r.finish >= 0) == n
    m = fleet.fleet_metrics(res)
    assert m["completed"] == n and sum(m["requests_per_replica"]) == n


# ---- 14. flags a mode ignores are errors naming the flag -------------------------------
def _trace(tmp_path: Path) -> Path:
    trace = tmp_path / "t.jsonl"
    trace.write_text("".join(
        f'{{"timestamp": {i * 100}, "input_length": 600, "output_length": 4, '
        f'"hash_ids": [0, {i + 1}]}}\n' for i in range(6)))
    return trace


@pytest.mark.parametrize("flag", [["--replicas", "2"], ["--goodput", "ttft:10"],
                                  ["--router", "least-loaded"], ["--event-delay", "1"],
                                  ["--max-concurrency", "2"], ["--request-rate", "3"],
                                  ["--gpu", "H100"], ["--save-result"]])
def test_replay_refuses_clocked_only_flags(capsys: Any, tmp_path: Path, flag: list[str]
                                           ) -> None:
    rc, _, err = _run(capsys, ["simulate", "llama-3.1-8b", "--kv-cache-memory", "2GiB",
                               "--max-model-len", "4096", "--trace", str(_trace(tmp_path)),
                               "--scheduler", "replay", *flag])
    _clean_error(rc, err, flag[0], "replay")


@pytest.mark.parametrize("flag", [["--random-input-len", "64"], ["--num-prompts", "3"],
                                  ["--random-range-ratio", "0.5"]])
def test_dataset_flags_need_the_dataset(capsys: Any, tmp_path: Path, flag: list[str]
                                        ) -> None:
    rc, _, err = _run(capsys, ["simulate", "llama-3.1-8b", "--gpu", "H100",
                               "--max-model-len", "4096", "--trace", str(_trace(tmp_path)),
                               *flag])
    _clean_error(rc, err, flag[0], "--dataset random")


# ---- 15. tune accepts what vLLM accepts ------------------------------------------------
def test_tune_accepts_output_len_zero_and_goodput_zero(capsys: Any) -> None:
    rc, out, err = _run(capsys, [*TUNE, "--random-output-len", "0", "--json"])
    assert rc == 0, err
    # vLLM's check_goodput_args accepts 0 ms; no TTFT meets it, so tune says nothing
    # meets the SLO (tester 2's finding 11), not that the flag is bad
    rc, out, err = _run(capsys, [*TUNE, "--random-output-len", "8", "--goodput",
                                 "ttft:0", "tpot:50", "--json"])
    assert rc == 2 and "no candidate meets the SLO" in err + out, err + out
    rc, out, err = _run(capsys, [*TUNE, "--random-output-len", "8", "--goodput",
                                 "ttft:60000", "tpot:50", "--json"])
    assert rc == 0, err
    assert json.loads(out)["goodput_slo_ms"] == {"ttft": 60000.0, "tpot": 50.0}


# ---- 16. the printed vllm serve command names a loadable model -------------------------
def test_serve_model_is_the_hf_id_of_every_embedded_config(tmp_path: Path) -> None:
    from kvcore.models.embedded import CONFIG_DIR, embedded_names, hf_model_id
    from kvcore.sim.tune import serve_model

    table = (CONFIG_DIR / "SOURCES.md").read_text(encoding="utf-8")
    ids = 0
    for name in embedded_names():
        hf = hf_model_id(name)
        got = serve_model(name)
        if hf is None:
            assert got == name
            continue
        ids += 1
        owner, repo = hf.split("/")
        assert owner and repo and got == hf and f"| {hf} |" in table
    assert ids >= 20
    assert serve_model("gemma-3-27b-it") == "google/gemma-3-27b-it"
    cfg = tmp_path / "m" / "config.json"
    cfg.parent.mkdir()
    cfg.write_text("{}")
    assert serve_model(str(cfg)) == str(cfg.parent)  # vLLM loads a folder, not a file
    assert serve_model(str(cfg.parent)) == str(cfg.parent)


def test_tune_prints_the_hf_id(capsys: Any) -> None:
    rc, out, err = _run(capsys, ["tune", "gemma-3-27b-it", "--gpu", "H100", "--dataset",
                                 "random", "--random-input-len", "512",
                                 "--random-output-len", "16", "--num-prompts", "8",
                                 "--max-concurrency", "4", "--tp", "1",
                                 "--max-num-batched-tokens", "2048", "--max-num-seqs", "16",
                                 "--kv-cache-dtype", "auto", "--max-model-len", "4096",
                                 "--backend", "serial", "--json"])
    assert rc == 0, err
    assert json.loads(out)["best"]["vllm_serve"].split()[2] == "google/gemma-3-27b-it"


# ---- 18, 19. num_blocks named; the defaults run -----------------------------------------
@pytest.mark.parametrize("blocks", ["3", "100", "4000"])
def test_num_blocks_too_small_names_num_blocks(capsys: Any, blocks: str) -> None:
    rc, _, err = _run(capsys, [*SIM, "--num-blocks", blocks])  # max_model_len 131072
    _clean_error(rc, err, "num_blocks", f"--num-blocks {blocks}", "8193")
    assert "no tensor-parallel size fits" not in err


def test_defaults_run_without_a_gpu_and_say_the_cap(capsys: Any) -> None:
    rc, out, err = _run(capsys, ["simulate", "llama-3.1-8b", "--dataset", "random",
                                 "--num-prompts", "4", "--random-input-len", "64",
                                 "--random-output-len", "8", "--json"])
    assert rc == 0, err
    d = json.loads(out)
    # 16 GiB / 2 MiB a block = 8192 blocks, one the null block: 8191 x 16 tokens
    assert d["max_model_len"] == 8191 * 16 and "capped" in d["note"]
    assert d["completed"] == 4


def test_replay_defaults_run_and_all_rejected_is_an_error(capsys: Any, tmp_path: Path
                                                          ) -> None:
    trace = _trace(tmp_path)  # 6 requests of 600 + 4 tokens
    rc, out, err = _run(capsys, ["simulate", "llama-3.1-8b", "--trace", str(trace),
                                 "--json"])
    assert rc == 0, err
    d = json.loads(out)
    assert d["max_model_len"] == 8191 * 16 and "capped" in d["note"]
    for mml in (64, 600, 603):  # every request needs 604 tokens
        rc, _, err = _run(capsys, ["simulate", "llama-3.1-8b", "--trace", str(trace),
                                   "--kv-cache-memory", "1GiB", "--max-model-len",
                                   str(mml)])
        _clean_error(rc, err, "max_model_len", "604")


def test_python_api_counts_are_bounded() -> None:
    from kvcore.sim.fleet import MAX_REPLICAS, run_fleet
    from kvcore.sim.timing import ConstantTimeModel
    from kvcore.sim.workload import MAX_NUM_PROMPTS, arrival_times, random_dataset

    for n in (MAX_NUM_PROMPTS + 1, 10**12):
        with pytest.raises(ConfigError, match="num_prompts"):
            random_dataset(n)
        with pytest.raises(ConfigError, match="num_prompts"):
            arrival_times(n, 1.0)
    cfg = kvcore.plan_model("llama-3.1-8b", kv_cache_memory_bytes=2**30,
                            max_model_len=4096)
    for n in (0, MAX_REPLICAS + 1, 10**12):
        with pytest.raises(ConfigError, match="replicas"):
            run_fleet(cfg, [], ConstantTimeModel(), replicas=n, router="round-robin",
                      max_num_seqs=16, max_num_batched_tokens=2048)


@pytest.mark.parametrize("flag", [["--random-input-len", "64"], ["--num-prompts", "3"],
                                  ["--random-output-len", "4"]])
def test_tune_dataset_flags_need_the_dataset(capsys: Any, tmp_path: Path,
                                            flag: list[str]) -> None:
    rc, _, err = _run(capsys, ["tune", "llama-3.1-8b", "--gpu", "H100", "--trace",
                               str(_trace(tmp_path)), "--backend", "serial", "--tp", "1",
                               *flag])
    _clean_error(rc, err, flag[0], "--dataset random")


def test_tune_limit_needs_a_trace_and_num_prompts_is_bounded(capsys: Any) -> None:
    rc, _, err = _run(capsys, [*TUNE, "--limit", "3"])
    _clean_error(rc, err, "--limit")
    rc, _, err = _run(capsys, [*TUNE[:8], "--num-prompts", "100000000", *TUNE[10:]])
    _clean_error(rc, err, "--num-prompts", "1,000,000")


@pytest.mark.parametrize("flag", [["--limit", "3"], ["--save-detailed"],
                                  ["--address", "localhost:6379"]])
def test_clocked_flags_that_need_another_flag(capsys: Any, flag: list[str]) -> None:
    rc, _, err = _run(capsys, [*SIM, "--max-model-len", "4096", *flag])
    _clean_error(rc, err, flag[0])


# ---- fresh tester T1 (stop 39): a trace spanning years runs, with a note --------------
@pytest.mark.parametrize("last_ms", [1e11, 1e15, 1e300])
def test_trace_spanning_more_than_a_month_runs_with_a_note(capsys: Any, tmp_path: Path,
                                                            last_ms: float) -> None:
    trace = tmp_path / "far.jsonl"
    trace.write_text(
        '{"timestamp": 0, "input_length": 100, "output_length": 10, "hash_ids": [0]}\n'
        f'{{"timestamp": {last_ms!r}, "input_length": 100, "output_length": 10, '
        '"hash_ids": [0]}\n')
    rc, out, err = _run(capsys, ["simulate", "llama-3.1-8b", "--gpu", "H100", "--trace",
                                 str(trace), "--max-model-len", "4096", "--json"])
    assert rc == 0, err
    rep = json.loads(out)
    assert rep["completed"] == 2
    assert "days" in rep["note"] and "milliseconds" in rep["note"]


def test_a_trace_within_a_month_has_no_span_note(capsys: Any, tmp_path: Path) -> None:
    trace = tmp_path / "near.jsonl"
    trace.write_text(
        '{"timestamp": 0, "input_length": 100, "output_length": 10, "hash_ids": [0]}\n'
        '{"timestamp": 2.6e9, "input_length": 100, "output_length": 10, "hash_ids": [0]}\n')
    rc, out, err = _run(capsys, ["simulate", "llama-3.1-8b", "--gpu", "H100", "--trace",
                                 str(trace), "--max-model-len", "4096", "--json"])
    assert rc == 0, err
    assert "days" not in (json.loads(out).get("note") or "")


# ---- fresh tester T12 (stop 39): a long clocked run off a terminal prints progress ----
def test_long_clocked_run_off_a_terminal_prints_plain_progress(monkeypatch: Any) -> None:
    import argparse
    import io
    import sys

    from kvcore.sim import command

    err = io.StringIO()
    monkeypatch.setattr(sys, "stderr", err)  # not a terminal
    args = argparse.Namespace(json=False)
    n = command.PLAIN_PROGRESS_MIN_REQUESTS
    cb, bar = command._progress(args, n)
    assert bar is None and callable(cb)
    for done in range(1, n + 1, 97):
        cb(done)
    cb(n)
    lines = err.getvalue().splitlines()
    assert 15 <= len(lines) <= 21 and lines[-1].strip() == f"{n}/{n} requests"
    # short runs and --json stay silent
    assert command._progress(args, n - 1) == (None, None)
    assert command._progress(argparse.Namespace(json=True), n) == (None, None)
