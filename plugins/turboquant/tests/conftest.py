"""Kernel tests run the Triton kernels on CPU through the interpreter; the variable must
be set before triton is first imported."""

import os

os.environ.setdefault("TRITON_INTERPRET", "1")
