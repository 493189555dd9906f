"""Shared fixtures of the core tests."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

# Kernel tests compare Triton (interpreted on the CPU) against the torch references;
# the interpreter must be chosen before triton is imported.
os.environ.setdefault("TRITON_INTERPRET", "1")
# the runtime debug switch (KVCacheManager check_invariants: whole-state check after
# every call, pools up to 4,096 blocks) is on in the test suite
os.environ.setdefault("KVCORE_CHECK_INVARIANTS", "1")

# no test depends on the machine's speed (issue 24, item 8): hypothesis's per-example
# deadline (200 ms by default) is off for every test, also those without settings
try:
    from hypothesis import settings as _hyp_settings

    _hyp_settings.register_profile("kvcore-no-deadline", deadline=None)
    _hyp_settings.load_profile("kvcore-no-deadline")
except ImportError:  # hypothesis is a test extra
    pass

from kvcore_test_state import StateSpec  # noqa: E402

from kvcore import hookimpl  # noqa: E402
from kvcore.registry import SpecType  # noqa: E402

DATA = Path(__file__).parent / "data"


class _StatePlugin:
    @hookimpl
    def kvcore_spec_types(self) -> list[SpecType]:
        return [SpecType(StateSpec, "test_state", None)]


@pytest.fixture
def state_spec():
    """Registers the test-only ``test_state`` kind for one test; yields its class."""
    from kvcore import plugins

    name = plugins.register(_StatePlugin(), name="test-state-plugin",
                            distribution="kvcore-tests")
    try:
        yield StateSpec
    finally:
        plugins.unregister(name)


@pytest.fixture
def cli(capsys):
    """Run the kvcore CLI in-process: returns (exit code, stdout, stderr)."""
    from kvcore.cli import main

    def run(*argv: str) -> tuple[int, str, str]:
        code = main(list(argv))
        out, err = capsys.readouterr()
        return code, out, err

    return run


def has_module(name: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(name) is not None


