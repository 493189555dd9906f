"""CLI input rules of issue #24 ("Why", CLI bullets): each bad input is one line naming it,
exit 2, on every path (single plan, sweep, --csv, weights that do not fit)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

ROOT = Path(__file__).resolve().parents[1]

def _known() -> set[str]:
    from kvcore.registry import get_registry

    return {n.lower() for n in get_registry().kv_cache_dtypes} | {"auto", "float8_e4m3fn",
                                                                 "float8_e5m2"}


#: a kv_cache_dtype no scheme has: generated names (letters, digits, underscore) that are
#: not known, checked against the registry's own list of names
UNKNOWN_DTYPE = st.from_regex(r"[a-z][a-z0-9_]{1,10}", fullmatch=True).filter(
    lambda n: n not in _known() and not n.startswith(("turboquant", "kpool", "fp8_ds")))


@pytest.mark.parametrize("extra", [
    ["--gpu", "L40S"],                              # weights do not fit: dtype first
    ["--gpu", "L40S", "--csv", "{tmp}/x.csv"],      # a sweep with --csv
    ["--gpu", "L40S,H100-SXM"],                     # a comma sweep
    ["--gpu", "H200", "--tp", "8,16"],
    ["--gpu-memory", "80GiB", "--json"]])
@settings(max_examples=5, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(dtype=UNKNOWN_DTYPE)
def test_unknown_kv_cache_dtype_is_an_error_everywhere(cli: Any, tmp_path: Path,
                                                       extra: list[str], dtype: str) -> None:
    argv = ["plan", "deepseek-v3", "--kv-cache-dtype", dtype] + \
        [a.replace("{tmp}", str(tmp_path)) for a in extra]
    code, out, err = cli(*argv)
    assert code == 2
    text = err + out
    assert "kv_cache_dtype" in text and dtype in text
    assert "does not fit" not in text
    assert not (tmp_path / "x.csv").exists()


@pytest.mark.parametrize("size,hint", [("80", "80GiB"), ("16", "16GiB"), ("1000", "1000GB"),
                                       ("1.5B", "1.5GB"), ("0.5B", "0.5GB"),
                                       ("512MiB", "GiB")])
def test_gpu_memory_units(cli: Any, size: str, hint: str) -> None:
    """`--gpu-memory 80` is 80 bytes (no GPU has that: the smallest in the catalog has
    22.5 GiB); `1.5B` is not a whole number of bytes (it was 1 byte)."""
    code, out, err = cli("plan", "llama-3.1-8b", "--gpu-memory", size)
    assert code == 2
    assert hint in err
    assert len(err.strip().splitlines()) == 1


@pytest.mark.parametrize("size", ["1.5GB", "80GiB", "24G", "1GiB"])
def test_gpu_memory_plausible_sizes_are_read(cli: Any, size: str) -> None:
    code, out, err = cli("plan", "llama-3.1-8b", "--gpu-memory", size, "--json")
    assert "below any GPU" not in out + err and "whole number" not in out + err


@pytest.mark.parametrize("overhead", ["0", "1GiB", "0B"])
def test_overhead_needs_a_gpu_whatever_its_value(cli: Any, overhead: str) -> None:
    """`--overhead 0` was ignored without a GPU while `1GiB` was an error."""
    code, out, err = cli("plan", "llama-3.1-8b", "--overhead", overhead)
    assert code == 2 and "--overhead" in err


def test_overhead_zero_with_a_gpu_is_used(cli: Any) -> None:
    code, out, err = cli("plan", "llama-3.1-8b", "--gpu", "L40S", "--overhead", "0",
                         "--json")
    assert code == 0
    assert json.loads(out)["overhead_bytes"] == 0


@pytest.mark.parametrize("target", ["/dev/stdout", "-"])
def test_csv_to_stdout_with_json_is_refused(cli: Any, target: str) -> None:
    """Refused (rather than CSV written into the JSON): stdout stays one JSON document."""
    code, out, err = cli("plan", "llama-3.1-8b", "--gpu", "L40S", "--csv", target, "--json")
    assert code == 2
    doc = json.loads(out)
    assert doc["error"]["field"] == "csv"


@pytest.mark.parametrize("value", ["-1", "0", '"16"', "2.5", "true"])
def test_whisper_bad_max_target_positions(cli: Any, tmp_path: Path, value: str) -> None:
    from kvcore.models.embedded import embedded_config_path

    path = embedded_config_path("whisper-tiny")
    assert path is not None
    data = json.loads(path.read_text())
    data["max_target_positions"] = json.loads(value)
    (tmp_path / "config.json").write_text(json.dumps(data))
    for extra in ([], ["--gpu", "L40S"]):
        code, out, err = cli("plan", str(tmp_path / "config.json"), "--max-model-len",
                             "4096", *extra)
        assert code == 2 and "max_target_positions" in err


@pytest.mark.parametrize("digits", [400, 4000])
def test_huge_numbers_are_clear_errors(cli: Any, tmp_path: Path, digits: int) -> None:
    """10**400 in an index or in bits: a ConfigError naming it, never "a kvcore bug"."""
    from kvcore.models.embedded import embedded_config_path

    path = embedded_config_path("llama-3.1-8b")
    assert path is not None
    data = json.loads(path.read_text())
    big = "1" + "0" * digits
    (tmp_path / "config.json").write_text(json.dumps(data))
    (tmp_path / "model.safetensors.index.json").write_text(
        f'{{"metadata": {{"total_size": {big}}}}}')
    code, out, err = cli("plan", str(tmp_path), "--gpu", "H100-SXM")
    assert code == 2 and "total_size" in err and "bug" not in err
    (tmp_path / "model.safetensors.index.json").unlink()
    data["quantization_config"] = {"quant_method": "gptq", "group_size": 128}
    (tmp_path / "config.json").write_text(json.dumps(data)[:-1] + ', "x": 0}')
    text = (tmp_path / "config.json").read_text().replace(
        '"quant_method": "gptq"', f'"quant_method": "gptq", "bits": {big}')
    (tmp_path / "config.json").write_text(text)
    code, out, err = cli("plan", str(tmp_path), "--gpu", "H100-SXM")
    assert code == 2 and "bits" in err and "bug" not in err


# ---- a plugin interrupted while loading ----------------------------------------------------

def _fake_plugin(tmp_path: Path, body: str) -> dict[str, str]:
    pkg = tmp_path / "site"
    (pkg / "kvcore_fakeint").mkdir(parents=True)
    (pkg / "kvcore_fakeint" / "__init__.py").write_text(textwrap.dedent(body))
    info = pkg / "kvcore_fakeint-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: kvcore-fakeint\n"
                                   "Version: 0.1\n")
    from kvcore.plugins import ENTRY_POINT_GROUP

    (info / "entry_points.txt").write_text(f"[{ENTRY_POINT_GROUP}]\nfakeint = "
                                           f"kvcore_fakeint\n")
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(pkg), env.get("PYTHONPATH", "")])
    env.pop("KVCORE_DISABLE_PLUGIN_AUTOLOAD", None)
    env.pop("KVCORE_PLUGINS", None)
    return env


def test_plugin_raising_keyboard_interrupt_while_loading(tmp_path: Path) -> None:
    """Ctrl-C during plugin loading still aborts (exit 130, as for SIGINT), with one line
    naming the plugin being loaded (it said nothing)."""
    env = _fake_plugin(tmp_path, "raise KeyboardInterrupt\n")
    proc = subprocess.run([sys.executable, "-m", "kvcore.cli", "plan", "llama-3.1-8b"],
                          capture_output=True, text=True, env=env, cwd=tmp_path)
    assert proc.returncode == 130
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert "fakeint" in lines[0] and "kvcore-fakeint" in lines[0]
    assert "Traceback" not in proc.stderr


def test_plugin_raising_other_errors_is_skipped_with_a_warning(tmp_path: Path) -> None:
    env = _fake_plugin(tmp_path, "raise RuntimeError('boom')\n")
    proc = subprocess.run([sys.executable, "-m", "kvcore.cli", "plan", "llama-3.1-8b",
                           "--json"], capture_output=True, text=True, env=env, cwd=tmp_path)
    assert proc.returncode == 0
    assert "fakeint" in proc.stderr and "Traceback" not in proc.stderr
