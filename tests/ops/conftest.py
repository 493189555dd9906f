"""Kernel tests: Triton runs in its interpreter on the CPU (set before triton loads).

Test modules that need torch call ``pytest.importorskip("torch")`` so that the core-only
environment (no torch) skips them cleanly; triton-only tests use :data:`needs_triton`.
"""

from __future__ import annotations

import os

os.environ.setdefault("TRITON_INTERPRET", "1")

import importlib.util  # noqa: E402

import pytest  # noqa: E402

HAS_TORCH = importlib.util.find_spec("torch") is not None
HAS_TRITON = importlib.util.find_spec("triton") is not None

needs_triton = pytest.mark.skipif(not (HAS_TORCH and HAS_TRITON),
                                  reason="torch and triton are not installed")
