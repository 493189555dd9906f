"""Test setup for kvcore-mamba.  TRITON_INTERPRET must be set before triton is imported
so the Triton kernels run on CPU tensors."""

import importlib.util
import os

# the runtime debug switch (KVCacheManager check_invariants: whole-state check after
# every call, pools up to 4,096 blocks) is on in the test suite
os.environ.setdefault("KVCORE_CHECK_INVARIANTS", "1")

if importlib.util.find_spec("triton") is not None:
    os.environ.setdefault("TRITON_INTERPRET", "1")
else:  # no triton: the dispatchers pick the torch references; Triton tests skip
    os.environ["TRITON_INTERPRET"] = "0"

from pathlib import Path  # noqa: E402

import pytest  # noqa: E402

DATA = Path(__file__).parent / "data"


@pytest.fixture
def data_dir() -> Path:
    return DATA
