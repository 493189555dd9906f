"""tester T16: kvcore.plan_from_specs_file takes the file's path too.

The rule: a str / os.PathLike is read as ``kvcore plan --specs FILE`` reads it and gives
the plan of its parsed object (the path then names the file in errors); anything that is
neither a path nor a JSON object is a ConfigError naming what was passed and what would
be valid.  Generated: specs files of drawn layer counts and block sizes, spelled as a
str or a Path; values of other types.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kvcore.errors import ConfigError
from kvcore.planning import plan_from_specs_file, plan_to_dict


def _doc(n_layers, block_size):
    layer = {"type": "full_attention", "block_size": block_size, "num_kv_heads": 8,
             "head_size": 128, "dtype": "bfloat16"}
    return {"options": {"max_model_len": 4096, "kv_cache_memory_bytes": 1 << 30},
            "layers": {f"l{i}": dict(layer) for i in range(n_layers)}}


@settings(max_examples=20, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.integers(1, 6), st.sampled_from([16, 32, 64]), st.sampled_from([str, Path]))
def test_a_path_plans_as_its_parsed_object(tmp_path, n, bs, spell):
    doc = _doc(n, bs)
    f = tmp_path / f"s{n}_{bs}.json"
    f.write_text(json.dumps(doc))
    assert plan_to_dict(plan_from_specs_file(spell(f))) == plan_to_dict(
        plan_from_specs_file(doc))


def test_errors_name_the_file(tmp_path):
    f = tmp_path / "bad.json"
    f.write_text(json.dumps({**_doc(1, 16), "optionz": {}}))
    with pytest.raises(ConfigError) as e:
        plan_from_specs_file(str(f))
    assert str(f) in str(e.value)
    with pytest.raises(ConfigError) as e:
        plan_from_specs_file(str(tmp_path / "missing.json"))
    assert "missing.json" in str(e.value)


@pytest.mark.parametrize("value", [3, None, b"/tmp/s.json", ["options"], 2.5, ""])
def test_other_types_are_named(value):
    with pytest.raises(ConfigError) as e:
        plan_from_specs_file(value)
    msg = str(e.value)
    assert "path" in msg and ("JSON object" in msg or "not a path" in msg)
