"""Test-suite setup shared by kvcore's tests, its plugins' and third-party spec plugins'.

Call :func:`configure_test_environment` at the top of a ``conftest.py``, before anything
imports triton::

    from kvcore.testing import configure_test_environment

    configure_test_environment()

It imports neither torch nor triton (only :mod:`importlib.util` looks for triton), so a
core-only install can call it.
"""

from __future__ import annotations

import importlib.util
import os

__all__ = ["configure_test_environment", "HYPOTHESIS_PROFILE"]

#: the hypothesis settings profile :func:`configure_test_environment` loads
HYPOTHESIS_PROFILE = "kvcore-no-deadline"


def configure_test_environment() -> None:
    """Set the environment kvcore's test suites run in.  Idempotent; variables the user
    already set are kept (except ``TRITON_INTERPRET`` without triton, below).

    - ``KVCORE_CHECK_INVARIANTS=1``: every ``KVCacheManager`` call is followed by the
      whole-state check (pools of at most 4,096 blocks; kvcore.runtime.manager).
    - hypothesis (when installed) loads the profile ``kvcore-no-deadline``: no
      per-example deadline (hypothesis's default is 200 ms), so no test depends on the
      machine's speed.
    - ``TRITON_INTERPRET=1`` when triton is installed: the Triton kernels run on CPU
      tensors through the interpreter, and the tests compare them with the torch
      references.  Triton reads it when it is first imported, hence before that.
      Without triton it is set to ``0``: the dispatchers pick the torch references and
      the Triton tests skip.
    """
    os.environ.setdefault("KVCORE_CHECK_INVARIANTS", "1")
    try:
        from hypothesis import settings
    except ImportError:  # hypothesis is a test extra
        pass
    else:
        settings.register_profile(HYPOTHESIS_PROFILE, deadline=None)
        settings.load_profile(HYPOTHESIS_PROFILE)
    if importlib.util.find_spec("triton") is not None:
        os.environ.setdefault("TRITON_INTERPRET", "1")
    else:
        os.environ["TRITON_INTERPRET"] = "0"
