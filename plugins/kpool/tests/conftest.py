"""kvcore-kpool tests: kvcore.testing sets the environment (the invariant checks on,
no hypothesis deadline, the Triton kernels under the interpreter on CPU) before anything
imports triton."""

from kvcore.testing import configure_test_environment

configure_test_environment()
