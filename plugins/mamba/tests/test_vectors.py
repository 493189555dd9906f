"""The planner vectors with Mamba layers (copied from shared/vectors/planner), run
through kvcore's planner and compared as the vectors README says."""

import json
from pathlib import Path

import pytest

from kvcore.planning import plan_from_specs_file, plan_to_dict

DATA = Path(__file__).parent / "data"
VECTORS = ["jamba-v0.1.json"]


def _key(g):
    return (g["type"], g["block_size"], g["page_size_bytes"], g["num_layers"])


def _matches(exp, got):
    accept = exp.get("accept", {})
    for field in ("type", "block_size", "page_size_bytes", "num_layers"):
        if got[field] != exp[field] and got[field] not in accept.get(field, []):
            return False
    return True


@pytest.mark.parametrize("name", VECTORS)
def test_vector(name):
    vec = json.loads((DATA / name).read_text())
    exp = vec["expected"]
    out = plan_to_dict(plan_from_specs_file(vec["input"]))
    for field in ("num_blocks", "kv_cache_capacity_tokens", "max_model_len",
                  "bytes_per_token"):
        if field in exp:
            assert out[field] == exp[field], field
    if "max_concurrency" in exp:
        assert abs(out["max_concurrency"] - exp["max_concurrency"]) <= \
            1e-6 * abs(exp["max_concurrency"])
    if "estimated_max_model_len" in exp and out.get("estimated_max_model_len") is not None:
        assert out["estimated_max_model_len"] == exp["estimated_max_model_len"]
    got = [{"type": g["type"], "block_size": g["block_size"],
            "page_size_bytes": g["page_size_bytes"], "num_layers": len(g["layer_names"])}
           for g in out["groups"]]
    remaining = list(got)
    for e in sorted(exp["groups"], key=_key):
        hit = next((g for g in remaining if _matches(e, g)), None)
        assert hit is not None, f"expected group {e} not in {got}"
        remaining.remove(hit)
    assert not remaining, f"unexpected groups {remaining}"


def test_jamba_vector_figures():
    # the vector's own notes: attention block 16 -> 144, state page padded to 589,824 B
    vec = json.loads((DATA / "jamba-v0.1.json").read_text())
    cfg = plan_from_specs_file(vec["input"])
    blocks = {g.kind: g.block_size for g in cfg.kv_cache_groups}
    assert blocks == {"full_attention": 144, "mamba": 32768}
    assert {g.page_size_bytes for g in cfg.kv_cache_groups} == {589_824}
    assert cfg.num_blocks == 20_000_000_000 // (4 * 589_824)
