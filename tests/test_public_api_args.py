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

import inspect
import math
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import kvcore
import kvcore.deploy
import kvcore.grouping
import kvcore.planning
import kvcore.units
from kvcore.errors import KVCoreError


class _Opaque:
    """An object of no type any kvcore function takes."""

    def __repr__(self) -> str:
        return "<opaque>"


#: wrong types and values: none of them is a valid spec, config, size or count for any
#: parameter (a valid value may still come out where a parameter takes anything, e.g. a
#: name; the call must then succeed)
BAD = st.sampled_from([
    None, -1, 0, 1.5, -1.5, math.nan, math.inf, True, "", "x", " ", "1.5B", "-3",
    [], [1], [None], {}, {"a": 1}, {"type": None}, (), b"x", _Opaque(), 10 ** 400, -(10 ** 400),
    2 ** 63, complex(1, 1), frozenset({1}),
])

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


def _params(fn: Any) -> list[inspect.Parameter]:
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):
        return []
    return [p for p in sig.parameters.values()
            if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]


def _call(fn: Any, values: list[Any], which: list[bool]) -> None:
    """Call ``fn`` with every required parameter and the chosen optional ones."""
    args: list[Any] = []
    kwargs: dict[str, Any] = {}
    for i, p in enumerate(_params(fn)):
        v = values[i % len(values)]
        required = p.default is p.empty
        if not required and not which[i % len(which)]:
            continue
        if p.kind == p.POSITIONAL_ONLY:
            args.append(v)
        else:
            kwargs[p.name] = v
    try:
        result = fn(*args, **kwargs)
        if callable(result) and getattr(result, "__name__", "") in (
                "convert", "parse", "length_arg", "size_arg"):  # argparse types
            result(values[0] if isinstance(values[0], str) else "x")
    except KVCoreError:
        pass
    except Exception as exc:  # noqa: BLE001 - the assertion under test
        import argparse

        if isinstance(exc, argparse.ArgumentTypeError):  # the argparse types' contract
            return
        raise AssertionError(
            f"{getattr(fn, '__qualname__', fn)}(*{args!r}, **{kwargs!r}) raised "
            f"{type(exc).__name__}: {exc}") from exc


@pytest.mark.parametrize("fn", _targets())
@settings(max_examples=25, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow])
@given(values=st.lists(BAD, min_size=1, max_size=6),
       which=st.lists(st.booleans(), min_size=1, max_size=6))
def test_bad_arguments_raise_kvcore_errors(fn: Any, values: list[Any],
                                           which: list[bool]) -> None:
    _call(fn, values, which)


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
