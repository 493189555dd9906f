"""A specs file's unknown keys and empty pipeline stages are errors (F10).

Valid top-level keys are ``options`` and ``layers`` (docs/DESIGN.md section 5); the
options are ``kvcore.planning.SPECS_FILE_OPTIONS``.  Keys are generated (hypothesis):
any key outside the set is refused with a message naming it, where it is and the valid
keys; a stage with no layers is refused naming the stage.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kvcore.errors import ConfigError
from kvcore.planning import SPECS_FILE_OPTIONS, plan_from_specs_file

LAYER = {"type": "full_attention", "block_size": 16, "num_kv_heads": 8, "head_size": 128,
         "dtype": "bfloat16"}
SETTINGS = settings(max_examples=60, deadline=None, derandomize=True)


def _data() -> dict:
    return {"options": {"max_model_len": 4096, "kv_cache_memory_bytes": 1 << 30},
            "layers": {"l0": dict(LAYER), "l1": dict(LAYER)}}


keys = st.text(st.characters(min_codepoint=33, max_codepoint=126), min_size=1, max_size=20)


@SETTINGS
@given(keys)
def test_unknown_top_level_key_refused(key):
    data = _data()
    if key in ("options", "layers"):
        plan_from_specs_file(data)  # the valid keys still plan
        return
    data[key] = {}
    with pytest.raises(ConfigError) as e:
        plan_from_specs_file(data)
    msg = str(e.value)
    assert repr(key) in msg and "specs file" in msg
    assert "valid keys: layers, options" in msg


@SETTINGS
@given(keys)
def test_unknown_option_refused(key):
    if key in SPECS_FILE_OPTIONS:
        return
    data = _data()
    data["options"][key] = 1
    with pytest.raises(ConfigError) as e:
        plan_from_specs_file(data)
    msg = str(e.value)
    assert repr(key) in msg and "options" in msg and "max_model_len" in msg


@pytest.mark.parametrize("typo,meant", [("optionz", "options"), ("layer", "layers"),
                                        ("Options", "options")])
def test_top_level_typo_did_you_mean(typo, meant):
    data = _data()
    data[typo] = data.pop(meant)
    data.setdefault("options", {"max_model_len": 4096})
    data.setdefault("layers", {"l0": dict(LAYER)})
    with pytest.raises(ConfigError, match=f"did you mean '{meant}'"):
        plan_from_specs_file(data)


@SETTINGS
@given(st.integers(2, 5), st.data())
def test_empty_stage_refused(n_stages, draw):
    data = _data()
    names = [f"l{i}" for i in range(4)]
    data["layers"] = {n: dict(LAYER) for n in names}
    empty = draw.draw(st.integers(0, n_stages - 1))
    stages: list[list[str]] = [[] for _ in range(n_stages)]
    full = [i for i in range(n_stages) if i != empty]
    for j, n in enumerate(names):
        stages[full[j % len(full)]].append(n)
    data["options"]["stages"] = stages
    with pytest.raises(ConfigError) as e:
        plan_from_specs_file(data)
    assert f"stages[{empty}] is empty" in str(e.value)


def test_cli_names_the_file_exit_2(tmp_path):
    data = _data()
    data["optionz"] = {}
    f = tmp_path / "s.json"
    f.write_text(json.dumps(data))
    r = subprocess.run([sys.executable, "-m", "kvcore", "plan", "--specs", str(f)],
                       capture_output=True, text=True)
    assert r.returncode == 2
    assert "Traceback" not in r.stderr
    assert str(f) in r.stderr and "'optionz'" in r.stderr and "did you mean 'options'" in r.stderr


@SETTINGS
@given(keys)
def test_routing_vector_unknown_key_refused(key):
    """kvcore's own routing-vector format has fixed keys (kvcore/routing/vectors.py)."""
    from pathlib import Path

    from kvcore.routing import vectors

    src = Path(__file__).parent / "data" / "routing_vectors" / "sliding.json"
    d = json.loads(src.read_text())
    if key in d:
        return
    d[key] = 0
    with pytest.raises(ConfigError) as e:
        vectors.load(d)
    assert repr(key) in str(e.value) and "valid keys" in str(e.value)
