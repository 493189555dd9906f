"""The MLA planner vectors (copied from /work/shared/vectors/planner into data/vectors)
through kvcore.planning, compared as the vectors README says; and the adapters' layouts
planned with the same budgets."""

import json
import math
from collections import Counter
from pathlib import Path

import pytest

from kvcore import plan_model
from kvcore.planning import plan_from_specs_file, plan_to_dict

VECTORS = sorted((Path(__file__).parent / "data" / "vectors").glob("*.json"))
CONFIGS = Path(__file__).parent / "data" / "configs"


def group_key(g):
    return (g["type"], g["block_size"], g["page_size_bytes"], g["num_layers"])


def matches(expected_group, got_group):
    for field, value in zip(("type", "block_size", "page_size_bytes", "num_layers"),
                            got_group):
        ok = [expected_group[field]] + list(expected_group.get("accept", {}).get(field, []))
        if value not in ok:
            return False
    return True


def compare(expected, got):
    for key in ("num_blocks", "kv_cache_capacity_tokens", "max_model_len",
                "bytes_per_token"):
        if key in expected:
            assert got[key] == expected[key], key
    if "max_concurrency" in expected:
        assert math.isclose(got["max_concurrency"], expected["max_concurrency"],
                            rel_tol=1e-6)
    if "estimated_max_model_len" in expected and got.get("estimated_max_model_len"):
        assert got["estimated_max_model_len"] == expected["estimated_max_model_len"]
    if "groups" in expected:
        remaining = [group_key(g) for g in got["groups"]]
        for eg in expected["groups"]:
            hit = next((g for g in remaining if matches(eg, g)), None)
            assert hit is not None, (eg, remaining)
            remaining.remove(hit)
        assert not remaining, remaining


@pytest.mark.parametrize("path", VECTORS, ids=[p.stem for p in VECTORS])
def test_planner_vector(path):
    vec = json.loads(path.read_text())
    got = plan_to_dict(plan_from_specs_file(vec["input"]))
    compare(vec["expected"], got)


def test_vectors_present():
    assert {p.stem for p in VECTORS} == {"deepseek-v3", "deepseek-v32-fp8-ds-mla"}


@pytest.mark.parametrize("vector,config,kv_dtype", [
    ("deepseek-v3", "deepseek-v3", "auto"),
    ("deepseek-v32-fp8-ds-mla", "deepseek-v3", "fp8_ds_mla"),
])
def test_model_plan_equals_vector(vector, config, kv_dtype):
    """`kvcore plan deepseek-v3` (the adapter) gives the vector's groups and numbers at
    the vector's budget."""
    vec = json.loads((Path(__file__).parent / "data" / "vectors" / f"{vector}.json")
                     .read_text())
    o = vec["input"]["options"]
    got = plan_to_dict(plan_model(
        CONFIGS / f"{config}.json", kv_cache_memory_bytes=o["kv_cache_memory_bytes"],
        max_model_len=o["max_model_len"], max_num_batched_tokens=o["max_num_batched_tokens"],
        kv_cache_dtype=kv_dtype))
    compare(vec["expected"], got)


def test_deepseek_v32_with_indexers_is_one_group():
    """V3.2 with its 61 indexer caches: mla_attention and mla_indexer share one group
    (same block size 64), so one block id takes 61 x (41,984 + 8,448) B."""
    got = plan_to_dict(plan_model(
        CONFIGS / "deepseek-v3.2.json", kv_cache_memory_bytes=40_000_000_000,
        max_model_len=32768, kv_cache_dtype="fp8_ds_mla"))
    assert len(got["groups"]) == 1
    g = got["groups"][0]
    assert g["num_layers"] == 122 and g["block_size"] == 64
    assert got["bytes_per_block"] == 61 * (41_984 + 8_448)
    assert got["num_blocks"] == 40_000_000_000 // (61 * (41_984 + 8_448))


def test_glm52_plan_groups():
    got = plan_to_dict(plan_model(CONFIGS / "glm-5.2.aiconfigurator.json",
                                  kv_cache_memory_bytes=40_000_000_000,
                                  max_model_len=32768))
    kinds = Counter()
    for g in got["groups"]:
        for name in g["layer_names"]:
            kinds["indexer" if name.endswith("indexer.k_cache") else "mla"] += 1
    assert kinds == {"mla": 78, "indexer": 21}
    assert got["bytes_per_block"] == 78 * 73_728 + 21 * 8_448


@pytest.mark.parametrize("layout", [None, "BLHNC"])
def test_deepseek_v4_kernel_views_fit_their_tensors(layout):
    """Every V4 layer's kernel view [num_blocks, storage_block_size, entry] fits the
    bytes the plan gives it; a view built from the logical block size (256 tokens)
    would not (128x the raw page for ratio 128)."""
    kw = {"kv_cache_layout": layout} if layout else {}
    config = plan_model(CONFIGS / "deepseek-v4-flash.aiconfigurator.json",
                        kv_cache_memory_bytes=40_000_000_000, max_model_len=32768, **kw)
    n = config.num_blocks
    specs = {name: g.spec_of(name) for g in config.kv_cache_groups for name in g.layer_names}
    checked = 0
    for t in config.kv_cache_tensors:
        page = t.size // n
        for name in t.shared_by:
            s = specs[name]
            nb, per_block, _ = s.kv_cache_shape(n)
            assert (nb, per_block) == (n, s.storage_block_size)
            assert per_block * s.entry_bytes <= page, name
            if s.compress_ratio == 128:  # block 256 -> 2 entries (the search may scale it)
                assert per_block == s.block_size // 128
                assert s.block_size * s.entry_bytes == 128 * s.raw_page_size_bytes > page
            checked += 1
    assert checked == len(specs) == 167
