"""kvcore-mamba tests: kvcore.testing sets the environment (the invariant checks on,
no hypothesis deadline, the Triton kernels under the interpreter on CPU) before anything
imports triton."""

from kvcore.testing import configure_test_environment

configure_test_environment()

from pathlib import Path  # noqa: E402

import pytest  # noqa: E402

DATA = Path(__file__).parent / "data"


@pytest.fixture
def data_dir() -> Path:
    return DATA
