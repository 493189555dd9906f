"""Differential check against vLLM 0.32's planner without vLLM installed.

``tests/data/planner_oracle`` holds random layouts of ``scripts/fuzz_vs_vllm.py``
(``--n 40 --seed 7 --save-fixtures``): ``NAME.json`` is the case as vLLM's reference
oracle (``../shared/vllm-reference/oracle.py``) read it, ``NAME.expected.json`` what
vLLM's ``get_kv_cache_configs`` answered (trimmed), ``NAME.kvcore.txt`` the same layers
as a kvcore specs file.  The rule of issue 14: kvcore plans whenever vLLM plans and its
max concurrency is never lower (with ``max_model_len -1``: its length is never shorter),
except where vLLM's plan is unsafe (sink blocks it does not reserve); where vLLM raises,
kvcore's plan must hold its own invariants.  Regenerate the expected answers with
``.vllm-ref/venv/bin/python ../shared/vllm-reference/oracle.py --all DIR`` on a copy.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kvcore.errors import NotEnoughMemoryError
from kvcore.planning import plan_from_specs_file

DATA = Path(__file__).parent / "data" / "planner_oracle"
CASES = sorted(p.name[: -len(".kvcore.txt")] for p in DATA.glob("*.kvcore.txt"))
PLUGIN_KINDS = {"mla_attention": "kvcore_mla", "sliding_window_mla": "kvcore_mla",
                "mamba": "kvcore_mamba"}


def test_the_fixture_set_covers_the_kinds():
    kinds = set()
    for name in CASES:
        spec = json.loads((DATA / f"{name}.kvcore.txt").read_text())
        kinds |= {layer["type"] for layer in spec["layers"].values()}
    assert len(CASES) >= 30
    assert {"full_attention", "sliding_window", "chunked_local_attention",
            "cross_attention", "sink_full_attention", "mla_attention", "mamba"} <= kinds


@pytest.mark.parametrize("name", CASES)
def test_kvcore_plans_at_least_as_well_as_vllm(name):
    specs = json.loads((DATA / f"{name}.kvcore.txt").read_text())
    vllm = json.loads((DATA / f"{name}.expected.json").read_text())
    for layer in specs["layers"].values():
        if layer["type"] in PLUGIN_KINDS:
            pytest.importorskip(PLUGIN_KINDS[layer["type"]])
    opts = specs["options"]
    sink = any(layer["type"] == "sink_full_attention" for layer in specs["layers"].values())
    try:
        config = plan_from_specs_file(specs)
    except NotEnoughMemoryError:
        # only where vLLM cannot plan either, or plans without reserving sink blocks
        assert "error" in vllm or sink, vllm.get("max_concurrency")
        return
    # kvcore's own invariants (also where vLLM raises)
    names = sorted(n for g in config.kv_cache_groups for n in g.layer_names)
    assert names == sorted(set(specs["layers"]) - set(config.stats.skipped_layers))
    assert config.num_blocks * config.bytes_per_block <= opts["kv_cache_memory_bytes"]
    assert config.blocks_per_request + 1 + config.num_reserved_blocks <= config.num_blocks
    if "error" in vllm:
        return
    if opts["max_model_len"] == -1:
        assert config.max_model_len >= vllm["resolved"]["max_model_len_after"]
    elif vllm.get("max_concurrency") is not None:
        assert config.max_concurrency >= vllm["max_concurrency"] * (1 - 1e-9)
