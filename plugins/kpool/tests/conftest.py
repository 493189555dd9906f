"""kvcore-kpool tests.  TRITON_INTERPRET must be set before triton is imported so that
the Triton kernels run on the CPU."""

import importlib.util
import os

if importlib.util.find_spec("triton") is not None:
    os.environ.setdefault("TRITON_INTERPRET", "1")
else:  # no triton: the dispatchers pick the torch references; Triton tests skip
    os.environ["TRITON_INTERPRET"] = "0"
