"""Fuzz every field each adapter reads, for every embedded config (issue 15).

For each embedded config a baseline ``kvcore plan --json`` is run with kvcore's typed
field readers recording what they read (``kvcore.models.config.READ_HOOK``).  Then each
example mutates one field of a copy of the config and plans it again:

* a field read through a typed reader set to a value of the wrong type, out of range
  (0 or negative where a positive int is needed), or huge (10^30, beyond every bound)
  must be refused: exit 2 with one line (exit 0 is a silent acceptance);
* any top-level field removed, set to a huge int, to null, or to junk: exit 0 with a
  sane plan or exit 2 with one line;

never a traceback or a hang (tests/fuzz/fuzz_support.py).
"""

from __future__ import annotations

import json
import shutil
import tempfile
from pathlib import Path

import pytest
from fuzz_support import check, examples, run_cli
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kvcore_plugin_needs import skip_unless_served

from kvcore.models import config as config_module
from kvcore.models.embedded import CONFIG_DIR, embedded_names

NAMES = embedded_names()
WORK = Path(tempfile.mkdtemp(prefix="kvcore-fuzz-configs-"))
ARGS = ["--json", "--max-model-len", "auto", "--kv-cache-memory", "80GiB"]
# auto: the longest that fits, at most the model's own length (a fixed 4096 is above
# Whisper's 448, which vLLM and kvcore refuse)

#: invalid values per kind of typed read: (value, description)
_WRONG = {
    "int": [("abc", "a string"), ([1], "a list"), ({"a": 1}, "an object"),
            (True, "a boolean"), (2.5, "a fraction"), (10**30, "huge")],
    "str": [(5, "an int"), ([], "a list"), ({}, "an object"), (True, "a boolean"),
            ("", "empty")],
    "bool": [("yes", "a string"), (1, "an int"), (0, "an int"), ([], "a list"),
             ({}, "an object")],
    "dict": [(5, "an int"), ("x", "a string"), ([], "a list"), (True, "a boolean")],
    "list": [(5, "an int"), ("x", "a string"), ({}, "an object"), (True, "a boolean")],
}
_JUNK = [None, 10**30, -1, 0, "", {}, [], "junk", 1.5, True, "9" * 400]


def _file(name: str) -> Path:
    from kvcore.models.embedded import embedded_config_path

    path = embedded_config_path(name)
    assert path is not None
    return path


def _write(name: str, data: dict, tag: str) -> Path:
    """The mutated config as a file beside a copy of its companion (hf_quant_config)."""
    src = _file(name)
    folder = WORK / f"{name}-{tag}"
    folder.mkdir(exist_ok=True)
    for companion in CONFIG_DIR.glob(src.name.split(".")[0] + "*.hf_quant_config.*"):
        shutil.copy(companion, folder / companion.name)
    path = folder / src.name
    path.write_text(json.dumps(data))
    return path


_READS: dict[str, dict[str, tuple[str, int | None]]] = {}


def typed_reads(name: str) -> dict[str, tuple[str, int | None]]:
    """{field path: (kind, smallest minimum)} read by typed readers when planning the
    unmodified config."""
    if name not in _READS:
        seen: dict[str, tuple[str, int | None]] = {}

        def hook(kind: str, field: str, minimum: int | None) -> None:
            if "[" in field:
                return  # list entries (layer_types[3]) are checked by their list
            old = seen.get(field)
            if old is None:
                seen[field] = (kind, minimum)
            elif old[0] == kind and minimum is not None and old[1] is not None:
                seen[field] = (kind, min(old[1], minimum))

        config_module.READ_HOOK = hook
        try:
            out = run_cli(["plan", str(_file(name)), *ARGS])
        finally:
            config_module.READ_HOOK = None
        assert out.code == 0, (name, out.out[-500:], out.err[-500:])
        _READS[name] = seen
    return _READS[name]


def _mutated(data: dict, field: str, value: object) -> dict | None:
    """``data`` with ``field`` (``a`` or ``a.b``) set to ``value`` where the merged
    config reads it (top level and text_config), or None when the parent is absent."""
    out = json.loads(json.dumps(data))
    parts = field.split(".")
    if len(parts) == 2:
        parent = out.get(parts[0])
        if not isinstance(parent, dict):
            return None
        parent[parts[1]] = value
        text = out.get("text_config")
        if isinstance(text, dict) and isinstance(text.get(parts[0]), dict):
            text[parts[0]][parts[1]] = value
        return out
    out[field] = value
    text = out.get("text_config")
    if isinstance(text, dict) and field in text:
        text[field] = value
    return out


def mutations(name: str) -> list[tuple[str, object, bool, str]]:
    """(field, value or a removal, must fail, why) for one config."""
    data = json.loads(_file(name).read_text())
    out: list[tuple[str, object, bool, str]] = []
    for field, (kind, minimum) in sorted(typed_reads(name).items()):
        values = list(_WRONG[kind])
        if kind == "int" and minimum is not None:
            if minimum > -7:
                values.append((-7, "negative"))
            if minimum > 0:
                values.append((0, "zero"))
        for value, what in values:
            out.append((field, value, True, f"{field} {what} ({kind} field)"))
    keys = set(data) | set(data.get("text_config") or {})
    for key in sorted(keys):
        out.append((key, "<removed>", False, ""))
        for junk in _JUNK:
            out.append((key, junk, False, ""))
    return out


@pytest.mark.parametrize("name", NAMES)
def test_baseline_plans(name):
    """Every embedded config plans with the fuzz suite's flags (the fuzz baseline)."""
    skip_unless_served(name)
    assert typed_reads(name), f"{name}: no field read through the typed readers"


@pytest.mark.parametrize("name", NAMES)
@settings(max_examples=examples(25), deadline=None, derandomize=True,
          suppress_health_check=list(HealthCheck))
@given(data=st.data())
def test_mutated_field(name, data):
    skip_unless_served(name)
    cases = mutations(name)
    field, value, must_fail, why = data.draw(st.sampled_from(cases), label="mutation")
    raw = json.loads(_file(name).read_text())
    if value == "<removed>":
        mutated = json.loads(json.dumps(raw))
        mutated.pop(field, None)
        if isinstance(mutated.get("text_config"), dict):
            mutated["text_config"].pop(field, None)
    else:
        mutated = _mutated(raw, field, value)
        if mutated is None:
            return
    path = _write(name, mutated, "m")
    check("config fields", ["plan", str(path), *ARGS], invalid=must_fail, why=why)


@pytest.mark.parametrize("name", NAMES)
def test_every_typed_field_refuses_wrong_types(name):
    """The deterministic part: every typed field of the config, every wrong kind of
    value, exit 2 (so the CI run covers each field, not a sample)."""
    skip_unless_served(name)
    raw = json.loads(_file(name).read_text())
    for field, value, must_fail, why in mutations(name):
        if not must_fail:
            continue
        mutated = _mutated(raw, field, value)
        if mutated is None:
            continue
        path = _write(name, mutated, "t")
        check("config fields (typed, every one)", ["plan", str(path), *ARGS],
              invalid=True, why=why)
