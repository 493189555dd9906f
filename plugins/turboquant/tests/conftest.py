"""Kernel tests run the Triton kernels on CPU through the interpreter; the variable must
be set before triton is first imported."""

import importlib.util
import os

if importlib.util.find_spec("triton") is not None:
    os.environ.setdefault("TRITON_INTERPRET", "1")
else:  # no triton: the dispatchers pick the torch references; Triton tests skip
    os.environ["TRITON_INTERPRET"] = "0"
