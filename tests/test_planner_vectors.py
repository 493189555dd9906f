"""The planner vectors (copied from shared/vectors/planner) through
``kvcore.planning.plan_from_specs_file``, compared by the rules of their README.

Vectors whose layers are of plugin kinds are checked in tests/integration/."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kvcore.errors import NotEnoughMemoryError
from kvcore.planning import plan_from_specs_file, plan_to_dict

VECTORS = sorted((Path(__file__).parent / "data" / "planner").glob("*.json"))
CORE_KINDS = {"full_attention", "sliding_window", "chunked_local_attention",
              "cross_attention", "encoder_only_attention", "sink_full_attention"}


def load(path: Path) -> dict:
    return json.loads(path.read_text())


def is_core(vector: dict) -> bool:
    return all(layer["type"] in CORE_KINDS for layer in vector["input"]["layers"].values())


def group_key(g: dict) -> tuple:
    return (g["type"], g["block_size"], g["page_size_bytes"], g["num_layers"])


def groups_match(got: list[dict], expected: list[dict]) -> bool:
    """Same multiset of (type, block_size, page_size_bytes, num_layers), with each
    expected group's ``accept`` alternatives counted as matches."""
    remaining = [group_key(g) for g in got]
    for exp in expected:
        options = [group_key(exp)]
        for field, values in exp.get("accept", {}).items():
            for v in values:
                alt = dict(exp, **{field: v})
                options.append(group_key(alt))
        for opt in options:
            if opt in remaining:
                remaining.remove(opt)
                break
        else:
            return False
    return not remaining


def check_vector(vector: dict) -> None:
    expected = vector["expected"]
    if expected.get("error"):
        with pytest.raises(NotEnoughMemoryError) as e:
            plan_from_specs_file(vector["input"])
        for key in ("min_kv_cache_memory_bytes", "estimated_max_model_len"):
            if key in expected:
                assert e.value.extra[key] == expected[key]
                assert str(expected[key]) in str(e.value)
        return
    out = plan_to_dict(plan_from_specs_file(vector["input"]))
    for key in ("num_blocks", "kv_cache_capacity_tokens", "max_model_len", "bytes_per_token"):
        if key in expected:
            assert out[key] == expected[key], key
    if "groups" in expected:
        assert groups_match(out["groups"], expected["groups"]), \
            ([group_key(g) for g in out["groups"]], expected["groups"])
    if "max_concurrency" in expected:
        assert out["max_concurrency"] == pytest.approx(expected["max_concurrency"], rel=1e-6)
    if "estimated_max_model_len" in expected:
        assert out["estimated_max_model_len"] == expected["estimated_max_model_len"]


@pytest.mark.parametrize("path", [p for p in VECTORS if is_core(load(p))],
                         ids=lambda p: p.stem)
def test_core_vector(path):
    check_vector(load(path))


def test_core_vectors_present():
    names = {p.stem for p in VECTORS if is_core(load(p))}
    assert {"llama3-8b", "gemma3-12b", "gpt-oss-20b", "llama4-scout", "whisper-large-v3",
            "edge-not-enough-memory", "edge-pipeline-parallel",
            "edge-swa-page-padding"} <= names
