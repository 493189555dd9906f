"""Kernel tests: Triton runs in its interpreter on the CPU.

``TRITON_INTERPRET`` must be set before triton is first imported, hence here, at the
top of the conftest.  (The tests use CPU tensors; on a GPU machine the compiled kernels
are checked by ``benchmarks/gpu/run_all.py --verify``.)  Test modules that need torch start with
``pytest.importorskip("torch")``, so the core-only environment (no torch, no triton)
skips them cleanly; tests that need triton carry a ``skipif`` on it.
"""

from __future__ import annotations

import os

os.environ.setdefault("TRITON_INTERPRET", "1")
