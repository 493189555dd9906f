"""kvcore-rswa tests.  TRITON_INTERPRET must be set before triton is imported so that
the Triton kernels run on the CPU."""

import importlib.util
import os

# the runtime debug switch (KVCacheManager check_invariants: whole-state check after
# every call, pools up to 4,096 blocks) is on in the test suite
os.environ.setdefault("KVCORE_CHECK_INVARIANTS", "1")

# no test depends on the machine's speed (issue 24, item 8): hypothesis's per-example
# deadline (200 ms by default) is off for every test, also those without settings
try:
    from hypothesis import settings as _hyp_settings

    _hyp_settings.register_profile("kvcore-no-deadline", deadline=None)
    _hyp_settings.load_profile("kvcore-no-deadline")
except ImportError:  # hypothesis is a test extra
    pass

if importlib.util.find_spec("triton") is not None:
    os.environ.setdefault("TRITON_INTERPRET", "1")
else:  # no triton: the dispatchers pick the torch references; Triton tests skip
    os.environ["TRITON_INTERPRET"] = "0"
