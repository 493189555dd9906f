"""Every public function of kvcore raises a KVCoreError subclass on bad arguments (issue #24,
item 3): a generated test calls each name of ``kvcore.__all__`` and the documented public
functions of kvcore.deploy, kvcore.planning, kvcore.grouping and kvcore.units with
wrong types and values (every parameter of the signature given, so that no error is
Python's own arity TypeError); only success or a KVCoreError may come out.

The runtime entry points (KVCacheManager, block_tables, slot_mapping, state_indices,
Request, KVCacheBlocks) belong to another branch of the same issue; they are covered
here too (their argument checks landed with the runtime's, issue #24 item 3).
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kvcore_api_fuzz import BAD, FUZZ_SETTINGS, call_badly

import kvcore
import kvcore.deploy
import kvcore.grouping
import kvcore.planning
import kvcore.units
from kvcore.errors import KVCoreError

#: markers and plain data in __all__ (not functions that take user input)
SKIP = {"__version__", "hookimpl", "hookspec", "KVCoreError", "ConfigError",
        "MissingPluginError", "NotEnoughMemoryError", "PluginConflictError",
        "PluginError", "SpecError", "SpecMergeError", "UnknownDtypeError",
        "UnknownKVCacheDtypeError", "UnknownModelTypeError", "KVCacheSpec",
        "AttentionSpec", "SpecType", "get_registry",
        # an Enum: called with several values it is Enum's functional API (a new
        # enum), not a lookup; the lookup is tested below
        "KVQuantMode"}

#: owned by the runtime branch (rt24): covered, not required to pass here
RUNTIME = {"KVCacheManager", "block_tables", "slot_mapping", "state_indices",
           "KVCacheBlocks", "Request"}

#: documented public functions beside kvcore.__all__ (modules' own __all__)
MODULE_NAMES = [(kvcore.deploy, n) for n in kvcore.deploy.__all__] + \
    [(kvcore.planning, n) for n in ("plan", "plan_from_specs_file", "plan_to_dict",
                                    "format_bytes")] + \
    [(kvcore.grouping, n) for n in ("group_layers", "normalize_specs", "check_layer_specs",
                                    "unify_page_sizes", "blocks_per_request",
                                    "padding_per_request", "bytes_per_block_of")] + \
    [(kvcore.units, n) for n in ("bound", "check_int", "parse_size", "parse_length",
                                 "length_arg", "size_arg")]


def _targets() -> list[Any]:
    out = []
    for name in kvcore.__all__:
        if name in SKIP:
            continue
        out.append(pytest.param(getattr(kvcore, name), id=f"kvcore.{name}"))
    for mod, name in MODULE_NAMES:
        out.append(pytest.param(getattr(mod, name), id=f"{mod.__name__}.{name}"))
    return out


@pytest.mark.parametrize("fn", _targets())
@settings(max_examples=25, **FUZZ_SETTINGS)
@given(values=st.lists(BAD, min_size=1, max_size=6),
       which=st.lists(st.booleans(), min_size=1, max_size=6))
def test_bad_arguments_raise_kvcore_errors(fn: Any, values: list[Any],
                                           which: list[bool]) -> None:
    call_badly(fn, values, which, argparse_types=True)


# ---- the cases -----------------------------------------------------------------------

def _llama_plan() -> Any:
    return kvcore.plan_model("llama-3.1-8b", kv_cache_memory_bytes=32 << 30)


def test_plan_to_dict_none() -> None:
    with pytest.raises(KVCoreError, match="plan_to_dict"):
        kvcore.plan_to_dict(None)  # type: ignore[arg-type]


@pytest.mark.parametrize("value", [1.5, -1, True, "8GiB", 10 ** 400, [1.5]])
def test_group_layers_kv_cache_memory_bytes(value: Any) -> None:
    specs = {"l0": kvcore.FullAttentionSpec(block_size=16, num_kv_heads=8, head_size=128,
                                            dtype="bfloat16")}
    with pytest.raises(KVCoreError, match="kv_cache_memory_bytes"):
        kvcore.group_layers(specs, kv_cache_memory_bytes=value)


def test_plan_stats_iterate_and_index() -> None:
    """``list(plan.stats)`` gives its keys, as a mapping does (it raised KeyError: 0)."""
    stats = _llama_plan().stats
    keys = list(stats)
    assert "max_concurrency" in keys
    assert dict(stats.items())["max_concurrency"] == stats["max_concurrency"]


@pytest.mark.parametrize("value", [None, -1, "fp9", 1.5, [], "NONE"])
def test_kv_quant_mode_lookup(value: Any) -> None:
    with pytest.raises(KVCoreError, match="KVQuantMode"):
        kvcore.KVQuantMode(value)
    assert kvcore.KVQuantMode("nvfp4") is kvcore.KVQuantMode.NVFP4
