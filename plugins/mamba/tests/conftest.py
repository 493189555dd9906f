"""Test setup for kvcore-mamba.  TRITON_INTERPRET must be set before triton is imported
so the Triton kernels run on CPU tensors."""

import os

os.environ.setdefault("TRITON_INTERPRET", "1")

from pathlib import Path  # noqa: E402

import pytest  # noqa: E402

DATA = Path(__file__).parent / "data"


@pytest.fixture
def data_dir() -> Path:
    return DATA
