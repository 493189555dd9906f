"""The harness of the public-API argument tests: call a public name with generated wrong
values and require success or a KVCoreError (the brief's bad-input rule on the Python API).

Used by tests/test_public_api_args.py (``kvcore.__all__`` and the core modules' documented
functions), tests/test_module_api_args.py (the other core modules' ``__all__``) and
tests/sim/test_sim_public_api_args.py (kvcore.sim, kvcore.routing and the methods of the
objects users hold).  Tests import it by name (``from kvcore_api_fuzz import call_badly``);
the tests/ folder is on ``sys.path`` through its conftest.py, as for kvcore_cli_support.
"""

from __future__ import annotations

import argparse
import importlib
import inspect
import math
import types
import typing
from collections.abc import Iterable
from typing import Any

import pytest
from hypothesis import HealthCheck
from hypothesis import strategies as st

from kvcore.errors import KVCoreError

__all__ = ["BAD", "FUZZ_SETTINGS", "Opaque", "call_badly", "module_targets", "params"]


class Opaque:
    """An object of no type any kvcore function takes."""

    def __repr__(self) -> str:
        return "<opaque>"


#: wrong types and values: none of them is a valid spec, config, size, path or count for
#: any parameter (where a parameter takes anything, e.g. a name, a value may be valid: the
#: call must then succeed)
BAD = st.sampled_from([
    None, -1, 0, 1.5, -1.5, math.nan, math.inf, -math.inf, True, "", "x", " ", "1.5B",
    "-3", [], [1], [None], ["x"], {}, {"a": 1}, {"type": None}, (), b"x", Opaque(),
    10 ** 400, -(10 ** 400), 2 ** 63, complex(1, 1), frozenset({1}),
])

#: hypothesis settings of the generated calls: reproducible (derandomize), no deadline
#: (no test depends on the machine's speed)
FUZZ_SETTINGS = dict(deadline=None, derandomize=True,
                     suppress_health_check=[HealthCheck.too_slow])

#: what argparse ``type=`` callables are named (a factory returning one is called again)
_ARGPARSE_TYPES = ("convert", "parse", "length_arg", "size_arg")


def module_targets(modules: Iterable[str], skip: Iterable[str] = ()) -> list[Any]:
    """A ``pytest.param`` (id ``module.name``) for each callable of each module's
    ``__all__``, less exceptions, protocols, type aliases and the names in ``skip``
    (given as ``name`` or ``module.name``)."""
    skip = set(skip)
    out = []
    for mod_name in modules:
        mod = importlib.import_module(mod_name)
        for name in getattr(mod, "__all__", ()):
            obj = getattr(mod, name, None)
            if name in skip or f"{mod_name}.{name}" in skip or not callable(obj):
                continue
            if isinstance(obj, type) and (issubclass(obj, BaseException)
                                          or getattr(obj, "_is_protocol", False)):
                continue
            if isinstance(obj, (types.GenericAlias,
                                typing._GenericAlias)):  # type: ignore[attr-defined]
                continue  # a type alias (Judge), not a call
            out.append(pytest.param(obj, id=f"{mod_name}.{name}"))
    return out


def params(fn: Any) -> list[inspect.Parameter]:
    """``fn``'s named parameters (no ``*args`` / ``**kw``); [] where it has no signature."""
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):
        return []
    return [p for p in sig.parameters.values()
            if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]


def call_badly(fn: Any, values: list[Any], which: list[bool], label: str | None = None,
               *, argparse_types: bool = False) -> None:
    """Call ``fn`` with every required parameter and the optional ones ``which`` picks
    (cycled), each given the next of ``values`` (cycled): so no error is Python's own
    arity TypeError.  Success or a KVCoreError passes; with ``argparse_types`` an
    argparse ``type=`` callable may raise ArgumentTypeError (its contract), and one a
    factory returns is called again.  Anything else fails the test with the call that
    raised it (named ``label``, default the function's qualified name)."""
    args: list[Any] = []
    kwargs: dict[str, Any] = {}
    for i, p in enumerate(params(fn)):
        v = values[i % len(values)]
        if p.default is not p.empty and not which[i % len(which)]:
            continue
        if p.kind == p.POSITIONAL_ONLY:
            args.append(v)
        else:
            kwargs[p.name] = v
    try:
        result = fn(*args, **kwargs)
        if argparse_types and callable(result) and \
                getattr(result, "__name__", "") in _ARGPARSE_TYPES:
            result(values[0] if isinstance(values[0], str) else "x")
    except KVCoreError:
        pass
    except Exception as exc:  # noqa: BLE001 - the assertion under test
        if argparse_types and isinstance(exc, argparse.ArgumentTypeError):
            return
        name = label or getattr(fn, "__qualname__", repr(fn))
        raise AssertionError(f"{name}(*{args!r}, **{kwargs!r}) raised "
                             f"{type(exc).__name__}: {exc}") from exc
