"""Kernel tests run the Triton kernels on CPU through the interpreter; the variable must
be set before triton is first imported."""

import importlib.util
import os

# the runtime debug switch (KVCacheManager check_invariants: whole-state check after
# every call, pools up to 4,096 blocks) is on in the test suite
os.environ.setdefault("KVCORE_CHECK_INVARIANTS", "1")

if importlib.util.find_spec("triton") is not None:
    os.environ.setdefault("TRITON_INTERPRET", "1")
else:  # no triton: the dispatchers pick the torch references; Triton tests skip
    os.environ["TRITON_INTERPRET"] = "0"
