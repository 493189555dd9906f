"""benchmarks/gpu/run_all.py on the CPU (--device cpu --quick): the harness, the core's
benchmarks and the plugin contract (both entry forms, a missing module, a failing
entry)."""

from __future__ import annotations

import importlib.util
import json
import os
import sys
import types
from pathlib import Path

import pytest
from kvcore_watchdog import run_watched

pytest.importorskip("torch")

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "gpu" / "run_all.py"


def load_script():
    spec = importlib.util.spec_from_file_location("kvcore_run_all", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def test_cpu_quick_run_writes_json(tmp_path):
    out = tmp_path / "bench.json"
    env = {**os.environ, "TRITON_INTERPRET": "0"}  # CPU: the torch references
    proc = run_watched(
        [sys.executable, str(SCRIPT), "--device", "cpu", "--quick", "--plugins", "none",
         "--verify", "--out", str(out)], capture_output=True, text=True, env=env)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "verify: skipped" in proc.stdout  # no Triton path on a CPU without interpreter
    assert "GB/s" in proc.stdout and "% of copy" in proc.stdout
    data = json.loads(out.read_text())
    assert data["copy_bandwidth_gb_per_s"] > 0 and data["quick"] is True
    rows = {r["name"]: r for r in data["results"]}
    assert {"reshape_and_cache[auto]", "reshape_and_cache[int8_per_token_head]",
            "gather_cache[auto]", "copy_blocks[raw pages]"} <= set(rows)
    assert all(r["error"] is None and r["gb_per_s"] > 0 for r in rows.values())
    # quick store shape: 64 tokens x 2 heads x (32 + 32) channels, bf16 in and out
    # (2 + 2 B), plus 8 B of slot_mapping per token
    assert rows["reshape_and_cache[auto]"]["bytes_moved"] == 64 * 2 * 64 * 4 + 64 * 8
    # int8 per token-head: 1 B out per value, plus 4 B scales for K and for V
    assert rows["reshape_and_cache[int8_per_token_head]"]["bytes_moved"] == \
        64 * 2 * 64 * 3 + 64 * 8 + 64 * 2 * 2 * 4


def test_plugin_contract_forms_and_tolerance(tmp_path, monkeypatch):
    import torch

    run_all = load_script()
    buf = torch.zeros(1024)

    class Entry:  # form 1, harness-timed object
        name = "fake_copy"
        kind = "copy"

        @staticmethod
        def setup(device, quick):
            return (lambda: buf.add_(1)), 2 * buf.numel() * 4

    def self_timed(device, tokens=16384, repeats=20):  # form 2
        return {"seconds_per_call": 0.5, "bytes_moved": 10**9, "backend": "torch",
                "tokens": tokens}

    def broken(device, quick):
        raise RuntimeError("boom")

    fake = types.ModuleType("kvcore_fakeplug.benchmarks")
    fake.BENCHMARKS = [Entry(), {"name": "fake_dict", "setup": broken}]
    monkeypatch.setitem(sys.modules, "kvcore_fakeplug", types.ModuleType("kvcore_fakeplug"))
    monkeypatch.setitem(sys.modules, "kvcore_fakeplug.benchmarks", fake)
    fake2 = types.ModuleType("kvcore_fakeplug2.benchmarks")
    fake2.BENCHMARKS = {"fake_self_timed": self_timed}
    monkeypatch.setitem(sys.modules, "kvcore_fakeplug2",
                        types.ModuleType("kvcore_fakeplug2"))
    monkeypatch.setitem(sys.modules, "kvcore_fakeplug2.benchmarks", fake2)

    out = tmp_path / "b.json"
    code = run_all.main(["--device", "cpu", "--quick", "--plugins",
                         "fakeplug,fakeplug2,nosuchplug", "--filter", "fake",
                         "--out", str(out)])
    assert code == 0
    data = json.loads(out.read_text())
    assert data["sources"]["nosuchplug"] == "no benchmarks module"
    rows = {r["name"]: r for r in data["results"]}
    assert rows["fake_copy"]["bytes_moved"] == 8192 and rows["fake_copy"]["gb_per_s"] > 0
    assert rows["fake_copy"]["kind"] == "copy" and buf[0].item() > 0  # it really ran
    assert "boom" in rows["fake_dict"]["error"]
    st = rows["fake_self_timed"]
    assert st["gb_per_s"] == pytest.approx(2.0)  # 1e9 B in 0.5 s
    assert st["extra"]["tokens"] == 256  # --quick passes small sizes it accepts


@pytest.mark.skipif(importlib.util.find_spec("triton") is None, reason="no triton")
def test_verify_reports_triton_equal_to_reference_in_the_interpreter():
    import torch

    from kvcore.ops.benchmarks import verify

    checks = verify(torch.device("cpu"), quick=True)
    assert [c[0] for c in checks] == ["auto", "float32", "fp8", "fp8_e5m2",
                                      "int8_per_token_head", "fp8_per_token_head"]
    assert all(ok for _, ok, _ in checks), checks
