"""decode_context_parallel_size must divide tensor_parallel_size (fresh tester, T12):
vLLM 0.32's ParallelConfig (vllm/config/parallel.py:592-596) raises "tp_size must be
divisible by dcp_size" when prefill context parallelism is off (kvcore models none),
since DCP reuses the TP ranks; kvcore planned a DCP of 3 at TP 1 with three times the
max concurrency, exit 0."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import kvcore
from kvcore import FullAttentionSpec
from kvcore.errors import KVCoreError
from kvcore.specs import PlanContext


@settings(max_examples=100, deadline=None)
@given(tp=st.integers(1, 64), dcp=st.integers(1, 64))
def test_plan_context_refuses_a_dcp_that_does_not_divide_tp(tp, dcp):
    if tp % dcp == 0:
        ctx = PlanContext(max_model_len=4096, tensor_parallel_size=tp,
                          decode_context_parallel_size=dcp)
        assert ctx.decode_context_parallel_size == dcp
    else:
        with pytest.raises(KVCoreError) as e:
            PlanContext(max_model_len=4096, tensor_parallel_size=tp,
                        decode_context_parallel_size=dcp)
        assert e.value.extra.get("field") == "decode_context_parallel_size"
        assert str(tp) in str(e.value) and str(dcp) in str(e.value)


def test_plan_refuses_it_and_the_cli_says_one_line(tmp_path, capsys):
    layers = {"a": FullAttentionSpec(block_size=16, num_kv_heads=8, head_size=128)}
    with pytest.raises(KVCoreError):
        kvcore.plan(layers, kv_cache_memory_bytes=8 << 30, max_model_len=8192,
                    decode_context_parallel_size=3)
    spec = tmp_path / "s.json"
    spec.write_text('{"options": {"kv_cache_memory_bytes": 8000000000, "max_model_len": '
                    '8192, "decode_context_parallel_size": 3}, "layers": {"a": {"type": '
                    '"full_attention", "block_size": 16, "num_kv_heads": 8, '
                    '"head_size": 128, "dtype": "bfloat16"}}}')
    from kvcore.cli import main

    try:
        rc = main(["plan", "--specs", str(spec)])
    except SystemExit as e:
        rc = e.code
    assert rc == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "decode_context_parallel_size" in err[0]
