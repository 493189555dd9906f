"""tester T11: KVCORE_CHECK_INVARIANTS is parsed as strictly as kvcore's other switches.

The rule (plugins.env_flag, plus ``all``): 1 / true / yes / on turn the debug switch on
(pools up to ENV_CHECK_MAX_BLOCKS), all on for any pool, 0 / false / no / off / empty
off, any case and surrounding blanks; anything else is a ConfigError naming the
variable and the value (a user who sets the switch must not run unchecked).
Generated: spellings of each, and other text.
"""

from __future__ import annotations

import os
from contextlib import contextmanager

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kvcore import FullAttentionSpec, KVCacheManager, plan
from kvcore.errors import ConfigError

CFG = plan({"l0": FullAttentionSpec(block_size=16, num_kv_heads=1, head_size=8)},
           max_model_len=256, num_gpu_blocks_override=64)
ON, OFF = ["1", "true", "yes", "on"], ["", "0", "false", "no", "off"]


@contextmanager
def _env(value):
    old = os.environ.get("KVCORE_CHECK_INVARIANTS")
    os.environ["KVCORE_CHECK_INVARIANTS"] = value
    try:
        yield
    finally:
        if old is None:
            os.environ.pop("KVCORE_CHECK_INVARIANTS", None)
        else:
            os.environ["KVCORE_CHECK_INVARIANTS"] = old


def _case(text, upper, pad):
    return f"{pad}{text.upper() if upper else text}{pad}"


@settings(max_examples=60, deadline=None, derandomize=True)
@given(st.sampled_from(ON + OFF + ["all"]), st.booleans(), st.sampled_from(["", " "]))
def test_switch_values(text, upper, pad):
    with _env(_case(text, upper, pad)):
        assert KVCacheManager(CFG, max_model_len=256).check_invariants is (text not in OFF)


@settings(max_examples=60, deadline=None, derandomize=True)
@given(st.text(min_size=1, max_size=8).filter(
    lambda t: t.strip().lower() not in ON + OFF + ["all"] and "\x00" not in t))
def test_other_values_are_refused(text):
    with _env(text):
        with pytest.raises(ConfigError) as e:
            KVCacheManager(CFG, max_model_len=256)
    assert e.value.extra.get("field") == "KVCORE_CHECK_INVARIANTS"
