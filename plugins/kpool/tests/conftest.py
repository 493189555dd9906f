"""kvcore-kpool tests.  TRITON_INTERPRET must be set before triton is imported so that
the Triton kernels run on the CPU."""

import os

os.environ.setdefault("TRITON_INTERPRET", "1")
