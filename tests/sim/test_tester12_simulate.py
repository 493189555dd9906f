"""tester12's findings on ``kvcore simulate`` and the kvcore.sim API (TESTER12_FINDINGS.md:
F0, F1, F7 (serving_metrics), F8, F9, F10, F11, F13, F17): each rule with generated
cases, expected values from vLLM 0.32 or the project's bad-input rule (ConfigError
naming the field; on the CLI one line, exit 2)."""

from __future__ import annotations

import dataclasses
import json
import math
import os
import re
import socket
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kvcore_cli_support import assert_clean_error, run_cli
from kvcore_plugin_needs import skip_unless_served

import kvcore
from kvcore.errors import ConfigError

ROOT = Path(__file__).resolve().parents[2]  # the checkout (or tests/packaging's copy)
#: the folder holding the kvcore package in use (a checkout or a venv's site-packages)
PKG_PARENT = Path(kvcore.__file__).resolve().parents[1]
SMALL = ["--dataset-name", "random", "--num-prompts", "3", "--random-input-len", "16",
         "--random-output-len", "4"]
B = ["simulate", "llama-3.1-8b", "--gpu", "H100", *SMALL]
VLLM_ARG_UTILS = next(iter(sorted((ROOT / ".venv-vllm" / "lib").glob(
    "python3*/site-packages/vllm/engine/arg_utils.py"))), None) if (
    ROOT / ".venv-vllm").is_dir() else None

BAD_NUMBERS = [-1, -0.5, 0, math.nan, math.inf, -math.inf, "1", None, True, [1]]


def _json(capsys: Any, argv: list[str]) -> dict[str, Any]:
    rc, out, err = run_cli(capsys, [*argv, "--json"])
    assert rc == 0, err + out
    return json.loads(out)  # type: ignore[no-any-return]


def _err(capsys: Any, argv: list[str], *words: str) -> str:
    rc, _, err = run_cli(capsys, argv)
    assert_clean_error(rc, err, *words)
    return err


def _same_run(a: dict[str, Any], b: dict[str, Any]) -> None:
    a = {k: v for k, v in a.items() if k != "wall_seconds"}
    b = {k: v for k, v in b.items() if k != "wall_seconds"}
    assert a == b


# ---- F10: --gpu with --kv-cache-memory and --num-blocks -------------------------------

@pytest.mark.parametrize("memory", ["1GiB", "20GiB"])
@pytest.mark.parametrize("blocks", [300, 9000])
def test_gpu_with_budget_and_block_count_runs_on_the_block_count(capsys, memory, blocks):
    """vLLM's num_gpu_blocks_override wins over the budget (as without --gpu): the run
    has exactly N blocks, whatever --kv-cache-memory says."""
    out = _json(capsys, [*B, "--max-model-len", "4096", "--kv-cache-memory", memory,
                         "--num-blocks", str(blocks)])
    assert out["num_blocks"] == blocks and out["completed"] == 3


def test_gpu_with_budget_and_too_few_blocks_names_num_blocks(capsys):
    _err(capsys, [*B, "--kv-cache-memory", "1GiB", "--num-blocks", "5"], "--num-blocks 5")


# ---- F1: --seed and arrival_times' seed ------------------------------------------------

BAD_SEEDS = st.one_of(st.integers(max_value=-1), st.integers(min_value=2**32),
                      st.floats(allow_nan=True), st.text(max_size=4), st.none(),
                      st.booleans(), st.just([0]))


@settings(max_examples=60, deadline=None)
@given(seed=BAD_SEEDS, rate=st.sampled_from([math.inf, 10.0]))
def test_arrival_times_refuses_a_seed_numpy_cannot_take(seed, rate):
    """numpy's RandomState (vLLM's np.random.seed(--seed)) takes [0, 2**32 - 1]: any
    other seed is a ConfigError naming seed, with or without a finite rate."""
    from kvcore.sim.workload import arrival_times

    with pytest.raises(ConfigError, match="seed") as e:
        arrival_times(5, rate, 1.0, seed)
    assert e.value.extra["field"] == "seed"


@settings(max_examples=30, deadline=None)
@given(seed=BAD_SEEDS)
def test_random_dataset_refuses_a_seed_vllm_cannot_take(seed):
    from kvcore.sim.workload import random_dataset

    with pytest.raises(ConfigError, match="seed") as e:
        random_dataset(3, 8, 2, seed=seed)
    assert e.value.extra["field"] == "seed"


@pytest.mark.parametrize("seed", [0, 1, 2**31, 2**32 - 1])
def test_arrival_times_takes_numpys_whole_range(seed):
    np = pytest.importorskip("numpy")
    from kvcore.sim.workload import arrival_times

    got = arrival_times(4, 10.0, 1.0, seed)
    gaps = np.random.RandomState(seed).gamma(1.0, 0.1, size=4).cumsum()
    assert got == pytest.approx(list(gaps * (4 / 10.0) / gaps[-1]))


@pytest.mark.parametrize("seed", ["4294967296", "-1", "1k", "1.5", "abc", "", "2**32",
                                  "99999999999999999999999"])
@pytest.mark.parametrize("rate", [[], ["--request-rate", "5"]])
def test_cli_seed_out_of_range_is_one_line(capsys, seed, rate):
    _err(capsys, [*B, *rate, "--seed", seed], "seed", "4,294,967,295")


def test_cli_seed_at_the_top_of_the_range_runs(capsys):
    out = _json(capsys, [*B, "--request-rate", "5", "--seed", str(2**32 - 1)])
    assert out["seed"] == 2**32 - 1 and out["completed"] == 3


# ---- F9: Ray --address -----------------------------------------------------------------

BAD_ADDRESSES = ["", " ", "foo", "foo:", ":6379", "host:0", "host:65536", "host:abc",
                 "host:-1", "http://host:1", "ray://", "a b:1", "[::1", "::1:6379",
                 "host/x:1", "127.0.0.1:1\n", "ray://h:99999"]


@pytest.mark.parametrize("address", BAD_ADDRESSES)
def test_bad_address_forms_name_address(address):
    from kvcore.sim.backends import check_ray_address, run_tasks

    with pytest.raises(ConfigError, match="--address") as e:
        check_ray_address(address, probe=False)
    assert e.value.extra["field"] == "address"
    with pytest.raises(ConfigError) as e:  # before any task runs or Ray is imported
        run_tasks(abs, [1], backend="ray", address=address)
    assert e.value.extra["field"] == "address"


@settings(max_examples=40, deadline=None)
@given(port=st.one_of(st.integers(max_value=0), st.integers(min_value=65536)),
       client=st.booleans())
def test_ports_outside_1_65535_are_refused(port, client):
    from kvcore.sim.backends import check_ray_address

    with pytest.raises(ConfigError, match="65535"):
        check_ray_address(f"{'ray://' if client else ''}10.0.0.1:{port}", probe=False)


@pytest.mark.parametrize("address", [5, None, b"auto", ["auto"]])
def test_a_non_string_address_is_refused(address):
    from kvcore.sim.backends import check_ray_address

    with pytest.raises(ConfigError) as e:
        check_ray_address(address)
    assert e.value.extra["field"] == "address"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class _Server:
    """A one-connection TCP server on 127.0.0.1 that answers ``reply`` and closes."""

    def __init__(self, reply: bytes) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(4)
        self.port = self.sock.getsockname()[1]
        self.reply = reply
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        self.sock.settimeout(10)
        try:
            conn, _ = self.sock.accept()
        except OSError:
            return
        with conn:
            conn.settimeout(5)
            try:
                conn.recv(64)
                conn.sendall(self.reply)
            except OSError:
                pass

    def close(self) -> None:
        self.sock.close()
        self.thread.join(5)


@pytest.mark.parametrize("client", [False, True])
def test_unreachable_address_is_refused_before_ray_init(monkeypatch, client):
    """Nothing listening: one ConfigError naming address; ray.init is never called (its
    connect retries took minutes)."""
    ray = pytest.importorskip("ray")
    from kvcore.sim.backends import run_tasks

    monkeypatch.setattr(ray, "is_initialized", lambda: False)
    monkeypatch.setattr(ray, "init", lambda **kw: pytest.fail("ray.init was called"))
    address = f"{'ray://' if client else ''}127.0.0.1:{_free_port()}"
    with pytest.raises(ConfigError, match="cannot connect to a Ray cluster") as e:
        run_tasks(abs, [1, 2], backend="ray", address=address)
    assert e.value.extra["field"] == "address"


@pytest.mark.parametrize("reply", [b"", b"SSH-2.0-OpenSSH_9.6\r\n",
                                   b"HTTP/1.1 400 Bad Request\r\n\r\n"])
def test_a_server_that_is_not_grpc_is_refused(reply):
    """A listening port whose server does not answer the HTTP/2 preface with a SETTINGS
    frame (RFC 9113 3.4) is no Ray GCS / client server."""
    from kvcore.sim.backends import check_ray_address

    srv = _Server(reply)
    try:
        with pytest.raises(ConfigError, match="not a Ray") as e:
            check_ray_address(f"127.0.0.1:{srv.port}")
        assert e.value.extra["field"] == "address"
    finally:
        srv.close()


def test_an_http2_server_passes_the_probe():
    """The server preface of HTTP/2 (a SETTINGS frame: length 0, type 0x4, flags 0,
    stream 0) is what a gRPC server such as Ray's GCS answers."""
    from kvcore.sim.backends import check_ray_address

    srv = _Server(b"\x00\x00\x00\x04\x00\x00\x00\x00\x00")
    try:
        check_ray_address(f"127.0.0.1:{srv.port}")
    finally:
        srv.close()


@pytest.mark.parametrize("exc", [ConnectionError("Could not find any running Ray"),
                                 RuntimeError("Maybe you called ray.init twice"),
                                 ValueError("Ray Client requires pip package ray[client]"),
                                 TimeoutError("timed out")])
def test_ray_init_errors_become_one_config_error(monkeypatch, exc):
    ray = pytest.importorskip("ray")
    from kvcore.sim.backends import run_tasks

    def boom(**kw):
        raise exc

    monkeypatch.setattr(ray, "is_initialized", lambda: False)
    monkeypatch.setattr(ray, "init", boom)
    with pytest.raises(ConfigError, match="cannot connect to a Ray cluster") as e:
        run_tasks(abs, [1, 2], backend="ray", address="local")
    assert e.value.extra["field"] == "address"
    assert "\n" not in e.value.message


def test_auto_without_a_cluster_is_one_config_error(monkeypatch):
    pytest.importorskip("ray")
    import ray._private.services as services

    from kvcore.sim.backends import check_ray_address

    def none_found(addr, temp_dir=None):
        raise ConnectionError("Could not find any running Ray instance.")

    monkeypatch.setattr(services, "canonicalize_bootstrap_address", none_found)
    with pytest.raises(ConfigError, match="no running cluster found") as e:
        check_ray_address("auto")
    assert e.value.extra["field"] == "address"


def test_workers_with_a_cluster_address_is_refused():
    """--workers sizes a local Ray; a cluster uses its own CPUs (ray.init refuses
    num_cpus when connecting): not silently ignored."""
    from kvcore.sim.backends import run_tasks

    with pytest.raises(ConfigError) as e:
        run_tasks(abs, [1], backend="ray", address="10.0.0.1:6379", workers=2)
    assert e.value.extra["field"] == "workers"


@pytest.mark.parametrize("address", ["foo", "auto:1", "ray://", "127.0.0.1:0"])
def test_cli_bad_address_is_one_line(capsys, address):
    pytest.importorskip("ray")
    _err(capsys, [*B, "--replicas", "1,2", "--backend", "ray", "--address", address],
         "--address")


def test_cli_unreachable_address_is_one_line(capsys, monkeypatch):
    ray = pytest.importorskip("ray")
    monkeypatch.setattr(ray, "init", lambda **kw: pytest.fail("ray.init was called"))
    _err(capsys, [*B, "--replicas", "1,2", "--backend", "ray", "--address",
                  f"127.0.0.1:{_free_port()}"], "--address", "cannot connect")


# ---- F11: vLLM's spellings ---------------------------------------------------------------

ALIASES = [(["--no-enable-prefix-caching"], ["--no-prefix-caching"]),
           (["--tensor-parallel-size", "2"], ["--tp", "2"]),
           (["-tp", "2"], ["--tp", "2"]),
           (["--pipeline-parallel-size", "2"], ["--pp", "2"]),
           (["-pp", "2"], ["--pp", "2"]),
           (["--num-gpu-blocks-override", "9000"], ["--num-blocks", "9000"]),
           (["--kv-cache-memory-bytes", "8G"], ["--kv-cache-memory", "8G"])]


@pytest.mark.parametrize("vllm,kvcore_flags", ALIASES)
def test_vllm_spellings_run_as_kvcores(capsys, vllm, kvcore_flags):
    base = [*B, "--max-model-len", "4096"]
    _same_run(_json(capsys, [*base, *vllm]), _json(capsys, [*base, *kvcore_flags]))


@pytest.mark.skipif(VLLM_ARG_UTILS is None, reason="vLLM's source is not here")
@pytest.mark.parametrize("flag", ["--tensor-parallel-size", "-tp",
                                  "--pipeline-parallel-size", "-pp",
                                  "--num-gpu-blocks-override", "--enable-prefix-caching",
                                  "--kv-cache-memory-bytes"])
def test_the_aliases_are_vllms_flags(flag):
    """Each alias is spelled as vllm/engine/arg_utils.py@0.32 spells it (the
    --no-enable-prefix-caching form comes from its BooleanOptionalAction)."""
    text = VLLM_ARG_UTILS.read_text(encoding="utf-8")
    assert f'"{flag}"' in text
    from kvcore.cli import build_parser

    sub = next(a for a in build_parser()._actions if hasattr(a, "choices")
               and isinstance(a.choices, dict) and "simulate" in a.choices)
    assert flag in sub.choices["simulate"]._option_string_actions


def test_prefix_caching_on_and_off_together_is_refused(capsys):
    _err(capsys, [*B, "--enable-prefix-caching", "--no-enable-prefix-caching"],
         "--enable-prefix-caching", "--no-enable-prefix-caching")


def _close_typos(flag: str) -> st.SearchStrategy[str]:
    """One character of ``flag`` after its ``--no-`` dropped, doubled or replaced."""
    head, tail = flag[:5], flag[5:]

    def edit(args: tuple[int, int, str]) -> str:
        kind, i, c = args
        i %= len(tail)
        if kind == 0:
            return head + tail[:i] + tail[i + 1:]
        if kind == 1:
            return head + tail[:i] + tail[i] + tail[i:]
        return head + tail[:i] + c + tail[i + 1:]

    return st.tuples(st.integers(0, 2), st.integers(0, 60),
                     st.sampled_from("abcdefghijklmnopqrstuvwxyz-")).map(edit)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data(), command=st.sampled_from(["plan", "simulate", "tune"]))
def test_a_no_flag_is_never_hinted_as_its_opposite(data, command):
    """A mistyped --no-X never gets "did you mean --X" (which turns the setting on)."""
    from kvcore.cli import build_parser, suggest_flags

    flag = data.draw(st.sampled_from(["--no-enable-prefix-caching",
                                      "--no-enable-chunked-prefill",
                                      "--no-prefix-caching"]))
    typo = data.draw(_close_typos(flag))
    sub = next(a for a in build_parser()._actions if hasattr(a, "choices")
               and isinstance(a.choices, dict) and command in a.choices).choices[command]
    if typo in sub._option_string_actions:
        return
    hint = suggest_flags([typo], sub)
    for named in re.findall(r"did you mean (\S+) ", hint):
        assert named.startswith("--no-"), (typo, hint)


# ---- F13: the Mamba-blocks ceiling states the real limit ------------------------------

@pytest.mark.parametrize("seqs", [700, 760, 1024, 1483, 1484, 2048, 4096])
def test_mamba_align_ceiling_is_vllms_one_block_per_sequence(seqs):
    """vLLM 0.32 refuses to start when max_num_seqs exceeds the KV-cache block count, one
    Mamba block per decode sequence in every cache mode, align included
    (vllm/config/compilation.py@0.32, the FULL-cudagraph check: ``max_num_reqs >
    kv_cache_config.num_blocks``).  The ceiling is there exactly then, and gives that
    count as the limit."""
    from kvcore.deploy.budget import plan_on_gpu

    skip_unless_served("mamba2-2.7b")
    c = plan_on_gpu("mamba2-2.7b", gpu="H200", max_model_len=4096, max_num_seqs=seqs,
                    enable_prefix_caching=True, mamba_cache_mode="align",
                    raise_if_not_fits=False)
    vnb = (c.stats.vllm_own_layout or {}).get("num_blocks") or c.num_blocks
    found = [x for x in c.stats.ceilings if x["kind"] == "mamba_blocks"]
    assert bool(found) == (seqs > vnb), (seqs, vnb, found)
    if found:
        assert found[0]["limit"] == vnb
        assert f"max_num_seqs ({seqs}) exceeds the Mamba cache blocks ({vnb})" in \
            found[0]["message"]
        assert f"--max-num-seqs {vnb} or less" in found[0]["message"]


def test_mamba_align_within_the_blocks_runs_on_the_cli(capsys):
    # tester 12's F13 command: 1,024 sequences and 1,483 blocks: vLLM 0.32 starts it
    skip_unless_served("mamba2-2.7b")
    code, out, err = run_cli(capsys, [
        "simulate", "mamba2-2.7b", "--max-model-len", "4096", "--gpu", "H200",
        "--dataset-name", "random", "--num-prompts", "8", "--random-input-len", "300",
        "--random-output-len", "20", "--random-prefix-len", "600",
        "--enable-prefix-caching", "--json"])
    assert code == 0, err
    assert "exceeds the Mamba cache blocks" not in err


# ---- F8: RooflineTimeModel / Efficiency / roofline_for ----------------------------------

@pytest.fixture(scope="module")
def kv():
    return kvcore.plan_model("llama-3.1-8b", kv_cache_memory_bytes=4 << 30,
                             max_model_len=4096)


@pytest.fixture(scope="module")
def roofline(kv):
    from kvcore.sim.timing import roofline_for

    return roofline_for("llama-3.1-8b", kv, gpu="H100")


RATES = ("peak_flops", "hbm_bytes_per_s", "link_bytes_per_s")
FIGURES = ("dense_weight_bytes", "expert_bytes", "flops_per_token",
           "expert_flops_per_token", "lm_head_flops", "q_heads_per_rank")
COUNTS = ("num_experts", "experts_per_token", "hidden_size", "num_layers",
          "num_moe_layers", "tensor_parallel_size", "pipeline_parallel_size", "act_bytes")


@settings(max_examples=80, deadline=None)
@given(name=st.sampled_from(RATES), bad=st.sampled_from(BAD_NUMBERS + [1e400, -1e-30]))
def test_rates_must_be_finite_and_positive(roofline, name, bad):
    with pytest.raises(ConfigError, match=name) as e:
        dataclasses.replace(roofline, **{name: bad})
    assert e.value.extra["field"] == name


@settings(max_examples=80, deadline=None)
@given(name=st.sampled_from(FIGURES),
       bad=st.sampled_from([-1, -1e-9, math.nan, math.inf, "1", None, True]))
def test_figures_must_be_finite_and_non_negative(roofline, name, bad):
    with pytest.raises(ConfigError, match=name):
        dataclasses.replace(roofline, **{name: bad})


@settings(max_examples=80, deadline=None)
@given(name=st.sampled_from(COUNTS),
       bad=st.sampled_from([-5, -1, 1.5, 2.0, math.nan, "2", None, True]))
def test_counts_must_be_integers(roofline, name, bad):
    with pytest.raises(ConfigError, match=name):
        dataclasses.replace(roofline, **{name: bad})


@pytest.mark.parametrize("name,bad", [("memory_type", "sram"), ("memory_type", "HBM3"),
                                      ("memory_type", None), ("compute_dtype", "int3"),
                                      ("compute_dtype", "fp16"), ("name", 5),
                                      ("efficiency", {"compute": 0.5}),
                                      ("efficiency", None), ("experts_per_token", 9)])
def test_enumerated_fields_and_types(roofline, name, bad):
    kw = {name: bad, "num_experts": 8} if name == "experts_per_token" else {name: bad}
    with pytest.raises(ConfigError) as e:
        dataclasses.replace(roofline, **kw)
    assert e.value.extra["field"] == name


@pytest.mark.parametrize("override", [{"peak_flops": -1}, {"hbm_bytes_per_s": 0},
                                      {"hbm_bytes_per_s": math.nan}, {"num_layers": -5},
                                      {"memory_type": "sram"}, {"compute_dtype": "int3"},
                                      {"roofline_p": 1e-300}, {"roofline_p": 0.01},
                                      {"efficiency": {"compute": 0.5}},
                                      {"kv_cache_dtype": "fp9"}, {"compute": 10},
                                      {"memory_hbm3": 50}])
def test_roofline_for_refuses_the_findings_overrides(kv, override):
    from kvcore.sim.timing import roofline_for

    with pytest.raises(ConfigError) as e:
        roofline_for("llama-3.1-8b", kv, gpu="H100", **override)
    assert e.value.extra["field"] == next(iter(override))


FRACTIONS = ("compute", "memory", "memory_hbm3", "memory_gddr", "moe_memory",
             "moe_compute", "compute_fp8", "compute_gddr")


@settings(max_examples=80, deadline=None)
@given(name=st.sampled_from(FRACTIONS),
       bad=st.one_of(st.floats(min_value=1.0, exclude_min=True, allow_infinity=False),
                     st.floats(max_value=0.0)))
def test_fractions_of_the_peak_are_in_0_1(name, bad):
    """Efficiency's docstring: compute / memory* / moe_* are fractions of the peak, and
    compute_fp8 / compute_gddr factors that reach less of it: (0, 1]."""
    from kvcore.sim.timing import Efficiency

    with pytest.raises(ConfigError, match=re.escape("(0, 1]")):
        Efficiency(**{name: bad})


@settings(max_examples=40, deadline=None)
@given(p=st.one_of(st.floats(max_value=1.0, exclude_max=True), st.just(math.inf)))
def test_roofline_p_below_one_is_refused(p):
    """p < 1 makes (c**p + m**p) ** (1/p) exceed c + m (and overflow as p -> 0)."""
    from kvcore.sim.timing import Efficiency

    with pytest.raises(ConfigError, match="roofline_p"):
        Efficiency(roofline_p=p)


def test_every_fit_grid_value_and_fitted_set_is_valid():
    """The fits' grids (kvcore.sim.accuracy _GRID, _GRID_V5) and the named coefficient
    sets stay valid under the checks (compute_hbm3 up to 2.0, a factor capped at 1)."""
    from kvcore.sim import accuracy
    from kvcore.sim.timing import DEFAULT_EFFICIENCY

    for grid in (accuracy._GRID, accuracy._GRID_V5):
        for name, values in grid.items():
            for v in values:
                dataclasses.replace(DEFAULT_EFFICIENCY, **{name: v})
    for name in dir(accuracy):
        if name.endswith("_EFFICIENCY"):
            dataclasses.replace(getattr(accuracy, name))


@settings(max_examples=40, deadline=None)
@given(eff=st.fixed_dictionaries({
    **{n: st.floats(1e-3, 1.0) for n in FRACTIONS},
    "compute_hbm3": st.floats(1e-3, 4.0), "roofline_p": st.floats(1.0, 200.0),
    "step_s": st.floats(0.0, 1e-2)}),
    reqs=st.lists(st.tuples(st.integers(1, 600), st.integers(0, 3000), st.booleans()),
                  min_size=1, max_size=8),
    gpu=st.sampled_from(["H100", "A100-80GB", "L40S"]))
def test_valid_efficiencies_give_a_finite_positive_step(kv, eff, reqs, gpu):
    from kvcore.sim.timing import (
        DEFAULT_EFFICIENCY,
        ScheduledRequest,
        describe_batch,
        roofline_for,
    )

    m = roofline_for("llama-3.1-8b", kv, gpu=gpu,
                     efficiency=dataclasses.replace(DEFAULT_EFFICIENCY, **eff))
    t = m.step_time(describe_batch(kv, [ScheduledRequest(n, c, p) for n, c, p in reqs]))
    assert type(t) is float and math.isfinite(t) and t > 0


# ---- F7: serving_metrics' goodput and percentiles ---------------------------------------

@pytest.fixture(scope="module")
def engine_result():
    from kvcore.runtime import KVCacheManager
    from kvcore.sim.engine import SimRequest, run_engine
    from kvcore.sim.timing import ConstantTimeModel
    from kvcore.sim.workload import random_dataset

    cfg = kvcore.plan_model("llama-3.1-8b", kv_cache_memory_bytes=2 << 30,
                            max_model_len=2048)
    mgr = KVCacheManager(cfg, max_model_len=2048, enable_caching=True,
                         max_num_batched_tokens=2048)
    return run_engine(mgr, [SimRequest(r) for r in random_dataset(4, 32, 4)],
                      ConstantTimeModel(0.01), max_num_seqs=8, max_num_batched_tokens=2048,
                      max_model_len=2048)


VLLM_GOODPUT = ("ttft", "tpot", "e2el")  # vllm/benchmarks/serve.py VALID_NAMES


@settings(max_examples=60, deadline=None)
@given(key=st.text(min_size=0, max_size=8).filter(lambda k: k not in VLLM_GOODPUT))
def test_unknown_goodput_key_is_named_with_vllms_names(engine_result, key):
    from kvcore.sim import serving_metrics

    with pytest.raises(ConfigError) as e:
        serving_metrics(engine_result, goodput={key: 10.0})
    assert e.value.extra["field"] == "goodput"
    assert repr(key)[:20] in e.value.message or len(repr(key)) > 60
    assert all(n in e.value.message for n in VLLM_GOODPUT)


@settings(max_examples=40, deadline=None)
@given(key=st.sampled_from(VLLM_GOODPUT),
       bad=st.sampled_from([-1, -1e-9, math.nan, -math.inf, "x", "10", None, True, [1]]))
def test_bad_goodput_values_are_refused(engine_result, key, bad):
    """vLLM refuses a negative SLO (check_goodput_args) and a non-number (parse_goodput);
    NaN would silently fail every request."""
    from kvcore.sim import serving_metrics

    with pytest.raises(ConfigError) as e:
        serving_metrics(engine_result, goodput={key: bad})
    assert e.value.extra["field"] == "goodput"


@pytest.mark.parametrize("bad", [["ttft:10"], "ttft:10", 10, ("ttft", 10)])
def test_goodput_must_be_a_dict(engine_result, bad):
    from kvcore.sim import serving_metrics

    with pytest.raises(ConfigError) as e:
        serving_metrics(engine_result, goodput=bad)
    assert e.value.extra["field"] == "goodput"


@pytest.mark.parametrize("key", VLLM_GOODPUT)
def test_an_slo_everything_meets_gives_the_request_throughput(engine_result, key):
    """good requests = all completed when the SLO is inf (vLLM's comparison s >= v)."""
    from kvcore.sim import serving_metrics

    m = serving_metrics(engine_result, goodput={key: math.inf})
    assert m["request_goodput"] == m["request_throughput"] > 0


@pytest.mark.parametrize("bad", ["99", "", 99, [], [101], [-1], [math.nan], [True],
                                 [50, "90"], None, {99}])
def test_bad_percentiles_are_refused(engine_result, bad):
    from kvcore.sim import serving_metrics
    from kvcore.sim.metrics import client_queue_metrics

    with pytest.raises(ConfigError) as e:
        serving_metrics(engine_result, percentiles=bad)
    assert e.value.extra["field"] == "percentiles"
    with pytest.raises(ConfigError):
        client_queue_metrics(engine_result.requests, max_concurrency=2, percentiles=bad,
                             selected=["client_queue_time"])


@settings(max_examples=20, deadline=None)
@given(ps=st.lists(st.sampled_from([0, 25.5, 50, 90, 99, 99.9, 100]), min_size=1,
                   max_size=4, unique=True))
def test_percentiles_name_their_keys(engine_result, ps):
    from kvcore.sim import serving_metrics

    m = serving_metrics(engine_result, percentiles=ps)
    for p in ps:
        word = str(int(p)) if int(p) == p else str(p)
        assert f"p{word}_ttft_ms" in m


def test_client_queue_selected_must_be_a_list(engine_result):
    from kvcore.sim.metrics import client_queue_metrics

    with pytest.raises(ConfigError) as e:
        client_queue_metrics(engine_result.requests, max_concurrency=2,
                             selected="client_queue_time")
    assert e.value.extra["field"] == "selected"


# ---- F0: python -m kvcore ------------------------------------------------------------------

def test_python_dash_m_kvcore_runs_the_cli():
    env = {**os.environ, "PYTHONPATH": str(PKG_PARENT)}
    ok = subprocess.run([sys.executable, "-m", "kvcore", "simulate", "--help"],
                        capture_output=True, text=True, env=env, timeout=120)
    assert ok.returncode == 0 and "usage: kvcore simulate" in ok.stdout
    bad = subprocess.run([sys.executable, "-m", "kvcore", "simulate", "llama-3.1-8b",
                          *SMALL, "--seed", "-1"], capture_output=True, text=True,
                         env=env, timeout=120)
    assert_clean_error(bad.returncode, bad.stderr, "seed")


# ---- F17: counts are not tokens; empty values; the quantization note --------------------

COUNT_FLAGS = [("--num-prompts", "num_prompts"), ("--seed", "seed"),
               ("--max-concurrency", "max_concurrency"),
               ("--max-num-seqs", "max_num_seqs"), ("--tp", "tensor_parallel_size"),
               ("--pp", "pipeline_parallel_size"), ("--num-blocks", "num_blocks"),
               ("--replicas", "replicas"), ("--workers", "workers"),
               ("--prefix-repetition-num-prefixes", "prefix_repetition_num_prefixes")]


@pytest.mark.parametrize("flag,field", COUNT_FLAGS)
@pytest.mark.parametrize("value", ["1.5", "2K", "1k", "abc", "", "1e3", "1,,2", "0x10"])
def test_counts_are_plain_integers_not_tokens(capsys, flag, field, value):
    """vLLM's --num-prompts, --seed, --max-concurrency, --max-num-seqs, -tp, -pp,
    --num-gpu-blocks-override are type=int (no suffix, no decimal); kvcore's counts
    alike; the message names the field and does not call the count tokens."""
    err = _err(capsys, [*B, flag, value], field)
    assert "tokens" not in err


@pytest.mark.parametrize("flag,field,big", [("--replicas", "replicas", "5000"),
                                            ("--max-num-seqs", "max_num_seqs",
                                             "1000000000"),
                                            ("--num-prompts", "num_prompts", "2000000")])
def test_count_bounds_are_not_tokens(capsys, flag, field, big):
    err = _err(capsys, [*B, flag, big], field)
    assert "tokens" not in err


def test_limit_is_a_plain_count(capsys, tmp_path):
    p = tmp_path / "t.jsonl"
    p.write_text('{"output_len": 5, "prompt_len": 100}\n')
    for value in ("0", "-5", "1.5", "1k"):
        _err(capsys, ["simulate", "llama-3.1-8b", "--trace", str(p), "--num-blocks",
                      "4000", "--max-model-len", "4096", "--limit", value], "limit")


@pytest.mark.parametrize("argv,flag", [(["--plot", ""], "--plot"),
                                       (["--replicas", "2", "--router", ""], "--router"),
                                       (["--replicas", "2", "--router", " "], "--router"),
                                       (["--router", "round-robin,,least-loaded"],
                                        "--router"),
                                       (["--router", ","], "--router"),
                                       (["--time-model", ""], "--time-model"),
                                       (["--save-result", "--result-dir", ""],
                                        "--result-dir"),
                                       (["--save-result", "--result-filename", ""],
                                        "--result-filename"),
                                       (["--save-result", "--label", ""], "--label")])
def test_empty_values_are_refused_not_ignored(capsys, tmp_path, monkeypatch, argv, flag):
    monkeypatch.chdir(tmp_path)  # nothing is written, but a save would land here
    _err(capsys, [*B, *argv], flag)
    assert not list(tmp_path.iterdir())


def test_an_unmodelled_quant_method_is_noted(capsys, tmp_path):
    cfg = json.loads((PKG_PARENT / "kvcore" / "models" / "configs" / "llama-3.1-8b.json")
                     .read_text())
    cfg["quantization_config"] = {"quant_method": "bogus"}
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    out = _json(capsys, ["simulate", str(tmp_path / "config.json"), "--gpu", "H100",
                         *SMALL])
    assert "quant_method 'bogus' is not modelled" in (out.get("note") or "")


# ---- the other public entry points of these files -----------------------------------------

TRACE = ROOT / "tests" / "data" / "tester1_mooncake_conversation_150.jsonl"


@pytest.mark.parametrize("kw,field", [({"sample_every": 0}, "sample_every"),
                                      ({"sample_every": -1}, "sample_every"),
                                      ({"sample_every": "x"}, "sample_every"),
                                      ({"sample_every": 1.5}, "sample_every"),
                                      ({"progress": 5}, "progress"),
                                      ({"limit": 0}, "limit"), ({"limit": -5}, "limit"),
                                      ({"limit": True}, "limit"),
                                      ({"max_num_seqs": 1.9}, "max_num_seqs"),
                                      ({"enable_prefix_caching": "off"},
                                       "enable_prefix_caching")])
def test_simulate_api_refuses_bad_arguments(kw, field):
    from kvcore.sim.command import simulate

    with pytest.raises(ConfigError) as e:
        simulate("llama-3.1-8b", str(TRACE), num_blocks=4000, max_model_len=8192, **kw)
    assert e.value.extra["field"] == field


@settings(max_examples=30, deadline=None)
@given(n=st.integers(1, 6), extra=st.integers(-3, 3).filter(bool))
def test_with_arrivals_never_drops_requests(n, extra):
    from kvcore.sim.workload import random_dataset, with_arrivals

    reqs = random_dataset(n, 8, 2)
    with pytest.raises(ConfigError) as e:
        with_arrivals(reqs, [0.0] * max(0, n + extra))
    assert e.value.extra["field"] == "times"


@pytest.mark.parametrize("bad", [-1.0, math.nan, math.inf, "1", None, True])
def test_with_arrivals_refuses_a_bad_time(bad):
    from kvcore.sim.workload import random_dataset, with_arrivals

    with pytest.raises(ConfigError):
        with_arrivals(random_dataset(2, 8, 2), [0.0, bad])


@pytest.mark.parametrize("args,field", [((-1,), "gpu_memory_bytes"),
                                        (("80GiB",), "gpu_memory_bytes"),
                                        ((1.5e11,), "gpu_memory_bytes"),
                                        ((80 << 30, None), "gpu_name")])
def test_vllm_serve_defaults_refuses_bad_arguments(args, field):
    from kvcore.sim.command import vllm_serve_defaults

    with pytest.raises(ConfigError) as e:
        vllm_serve_defaults(*args)
    assert e.value.extra["field"] == field


@pytest.mark.parametrize("gib,name,expected", [(80, "H100", (1024, 8192)),
                                               (80, "A100-80GB", (256, 2048)),
                                               (141, "H200", (1024, 8192)),
                                               (192, "B200", (1024, 16384)),
                                               (48, "L40S", (256, 2048))])
def test_vllm_serve_defaults_are_vllms(gib, name, expected):
    """EngineArgs._set_default_max_num_seqs_and_batched_tokens_args (serve): >= 160 GiB
    (1024, 16384); >= 70 GiB and not A100 (1024, 8192); else (256, 2048)."""
    from kvcore.sim.command import vllm_serve_defaults

    assert vllm_serve_defaults(gib << 30, name) == expected


@pytest.mark.parametrize("bad", ["ttft", 5, ["ttft", 5]])
def test_select_percentile_metrics_refuses_a_string(bad):
    from kvcore.sim.command import select_percentile_metrics

    with pytest.raises(ConfigError) as e:
        select_percentile_metrics({"mean_ttft_ms": 1.0}, bad)
    assert e.value.extra["field"] == "percentile_metrics"


def test_a_run_that_takes_no_time_has_no_throughput_figures():
    """tester12 F8 (related): ConstantTimeModel(0.0) finishes requests at t = 0; the
    figures are refused (not "completed 4, request_throughput 0.0")."""
    from kvcore.runtime import KVCacheManager
    from kvcore.sim import serving_metrics
    from kvcore.sim.engine import SimRequest, run_engine
    from kvcore.sim.timing import ConstantTimeModel
    from kvcore.sim.workload import random_dataset

    cfg = kvcore.plan_model("llama-3.1-8b", kv_cache_memory_bytes=2 << 30,
                            max_model_len=2048)
    mgr = KVCacheManager(cfg, max_model_len=2048, max_num_batched_tokens=2048)
    res = run_engine(mgr, [SimRequest(r) for r in random_dataset(4, 32, 4)],
                     ConstantTimeModel(0.0), max_num_seqs=8, max_num_batched_tokens=2048,
                     max_model_len=2048)
    with pytest.raises(ConfigError) as e:
        serving_metrics(res)
    assert e.value.extra["field"] == "duration"
