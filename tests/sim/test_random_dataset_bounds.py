"""tester T3: kvcore.sim.random_dataset's lengths are bounded as the CLI's flags are
(kvcore.units.bound: 2**32 tokens), and numpy numbers are numbers (F9's rule).

The rule: a length above its bound is a ConfigError naming the field (never numpy's
bare "high is out of bounds for int64", never a 2**62-token prompt); at or below it the
dataset is vLLM's random dataset (range ratio 0: every prompt is prefix + input tokens,
every output ``output_len``).  Generated: lengths on both sides of the bound, in Python
and numpy types; arrival_times' counts and rates in numpy types.
"""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kvcore.errors import ConfigError
from kvcore.sim.workload import arrival_times, random_dataset

BOUND = 2 ** 32
SETTINGS = settings(max_examples=60, deadline=None, derandomize=True)
LENGTH = st.one_of(st.integers(1, 4096), st.integers(BOUND - 2, BOUND + 2),
                   st.integers(BOUND + 3, 2 ** 80))
FIELDS = {"input_len": "random_input_len", "output_len": "random_output_len",
          "prefix_len": "random_prefix_len"}


@SETTINGS
@given(st.sampled_from(sorted(FIELDS)), LENGTH)
def test_lengths_are_bounded_as_the_flags(field, value):
    kw = dict(input_len=16, output_len=4, prefix_len=0)
    kw[field] = value
    if value > BOUND:
        with pytest.raises(ConfigError) as e:
            random_dataset(2, **kw)
        assert e.value.extra.get("field") == FIELDS[field]
        assert "4,294,967,296" in str(e.value)
        return
    reqs = random_dataset(2, **kw)
    assert [r.prompt_len for r in reqs] == [kw["prefix_len"] + kw["input_len"]] * 2
    assert [r.output_len for r in reqs] == [kw["output_len"]] * 2


@SETTINGS
@given(st.sampled_from(["int64", "int32", "uint32", "uint16"]), st.integers(1, 60),
       st.integers(1, 9), st.integers(0, 100))
def test_numpy_numbers_give_the_plain_results(dtype, length, n, seed):
    np = pytest.importorskip("numpy")
    t = getattr(np, dtype)
    assert random_dataset(t(n), input_len=t(length), output_len=t(4), seed=t(seed)) == \
        random_dataset(n, input_len=length, output_len=4, seed=seed)
    assert arrival_times(t(n), request_rate=np.float32(2.0), burstiness=np.float64(1.0),
                         seed=t(seed)) == arrival_times(n, 2.0, 1.0, seed)
    assert arrival_times(t(n), math.inf) == [0.0] * n
