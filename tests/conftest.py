"""Shared fixtures of the core tests."""

from __future__ import annotations

from pathlib import Path

import pytest

# the suite's environment (invariant checks on, no hypothesis deadline, Triton kernels
# under the interpreter on CPU), set before anything imports triton
from kvcore.testing import configure_test_environment  # noqa: E402

configure_test_environment()

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


