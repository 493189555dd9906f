"""State-shape calculators with tensor-parallel sharding.  Expected values are worked
out by hand from the formulas of vLLM mamba_utils.py and the configs' numbers."""

import json
import math
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kvcore_mamba.shapes import (
    extra_groups_for_head_shards,
    gated_delta_net_state_shapes,
    kda_layer_indices,
    kda_state_dtypes,
    kda_state_shapes,
    kda_state_shapes_from_dims,
    linear_attention_state_shapes,
    mamba1_state_shapes,
    mamba2_state_shapes,
    ssm_state_dtype,
)

from kvcore.errors import ConfigError

DATA = Path(__file__).parent / "data"


def test_mamba1_jamba_dims():
    # Jamba-v0.1: d_inner = 2 x 4096, d_state 16, d_conv 4
    assert mamba1_state_shapes(d_inner=8192, d_state=16, d_conv=4) == ((3, 8192), (8192, 16))
    assert mamba1_state_shapes(d_inner=8192, d_state=16, d_conv=4, tp=4) == \
        ((3, 2048), (2048, 16))
    with pytest.raises(ConfigError, match="d_inner = 8192 is not divisible by "
                                          "tensor_parallel_size 3"):
        mamba1_state_shapes(d_inner=8192, d_state=16, d_conv=4, tp=3)


def test_mamba2_nemotron_h_56b():
    # 256 heads x 64 = 16384 channels, 8 groups x 256 state: conv 16384 + 2 x 8 x 256
    kw = dict(d_inner=256 * 64, n_groups=8, n_heads=256, head_dim=64, d_state=256,
              d_conv=4)
    assert mamba2_state_shapes(**kw) == ((3, 20480), (256, 64, 256))
    assert mamba2_state_shapes(**kw, tp=8) == ((3, 2560), (32, 64, 256))
    # vLLM's helper alone would raise 8 groups to 16 at tp 16 ...
    assert extra_groups_for_head_shards(8, 16) == 8
    # ... but vLLM 0.32's MambaMixer2 asserts n_groups % tp == 0 or n_groups == 1
    # (vllm/model_executor/layers/mamba/mamba_mixer2.py:319): tp 16 does not start
    with pytest.raises(ConfigError, match="n_groups 8 .*tensor_parallel_size 16.*1, 2, 4, 8"):
        mamba2_state_shapes(**kw, tp=16)


def test_mamba2_single_group_and_speculative_window():
    # mamba2-2.7b: d_inner 5120, 80 heads x 64, 1 group, d_state 128
    kw = dict(d_inner=5120, n_groups=1, n_heads=80, head_dim=64, d_state=128, d_conv=4)
    assert mamba2_state_shapes(**kw) == ((3, 5376), (80, 64, 128))
    # tp 4: group replicated to 4 -> (5120 + 2 x 4 x 128) / 4 = 1536
    assert mamba2_state_shapes(**kw, tp=4) == ((3, 1536), (20, 64, 128))
    # two draft tokens lengthen the conv window by two rows
    assert mamba2_state_shapes(**kw, num_spec=2)[0] == (5, 5376)
    with pytest.raises(ConfigError, match="mamba_num_heads"):
        mamba2_state_shapes(**{**kw, "n_heads": 81}, tp=2)


def test_gated_delta_net_qwen3_next():
    # 16 key heads x 128, 32 value heads x 128: conv 2 x 16 x 128 + 32 x 128 = 8192
    kw = dict(num_k_heads=16, num_v_heads=32, head_k_dim=128, head_v_dim=128,
              conv_kernel=4)
    assert gated_delta_net_state_shapes(**kw) == ((3, 8192), (32, 128, 128))
    assert gated_delta_net_state_shapes(**kw, tp=4) == ((3, 2048), (8, 128, 128))
    assert gated_delta_net_state_shapes(**kw, num_spec=1)[0] == (4, 8192)
    with pytest.raises(ConfigError, match="linear_num_value_heads"):
        gated_delta_net_state_shapes(**{**kw, "num_v_heads": 30}, tp=4)


def test_kda_kimi_k3_from_config():
    cfg = json.loads((DATA / "kimi-k3.aiconfigurator.json").read_text())
    # 96 heads x 128, kernel 4: conv 3 x 96 x 128 = 36864 channels
    assert kda_state_shapes(cfg) == ((3, 36864), (96, 128, 128))
    assert kda_state_shapes(cfg, tp=8) == ((3, 4608), (12, 128, 128))
    assert kda_state_shapes(cfg["text_config"], num_speculative_tokens=2)[0] == (5, 36864)
    assert kda_state_dtypes(cfg) == ("bfloat16", "float32")
    idx = kda_layer_indices(cfg)
    assert len(idx) == 69 and idx[:4] == [0, 1, 2, 4] and idx[-1] == 90
    # bytes per layer per request: 3 x 36864 x 2 + 96 x 128 x 128 x 4
    shapes = kda_state_shapes(cfg)
    assert math.prod(shapes[0]) * 2 + math.prod(shapes[1]) * 4 == 6_512_640
    with pytest.raises(ConfigError, match="linear_attn_config"):
        kda_state_shapes({"model_type": "kimi_k3"})


def test_kda_separate_key_heads():
    assert kda_state_shapes_from_dims(num_heads=8, head_dim=64, num_k_heads=4,
                                      head_k_dim=32) == ((3, 8 * 64 + 2 * 4 * 32), (8, 64, 64))


def test_linear_attention():
    assert linear_attention_state_shapes(num_heads=64, head_dim=128, tp=8) == ((8, 128, 128),)
    with pytest.raises(ConfigError):
        linear_attention_state_shapes(num_heads=64, head_dim=128, tp=3)


@pytest.mark.parametrize("raw,default,expected", [
    ({}, None, "bfloat16"),                                   # model dtype
    ({}, "float32", "float32"),                               # Nemotron-H default
    ({"mamba_ssm_cache_dtype": "float32"}, None, "float32"),  # Nemotron-3 Nano
    ({"mamba_ssm_dtype": "float32"}, None, "float32"),        # Qwen3.5
    ({"mamba_ssm_cache_dtype": "auto"}, "float32", "bfloat16"),
    ({"mamba_ssm_cache_dtype": "bf16"}, "float32", "bfloat16"),
])
def test_ssm_state_dtype(raw, default, expected):
    assert ssm_state_dtype(raw, "bfloat16", default) == expected


def test_ssm_state_dtype_unknown():
    with pytest.raises(ConfigError, match="mamba_ssm_dtype"):
        ssm_state_dtype({"mamba_ssm_dtype": "float7"}, "bfloat16")


@settings(max_examples=80, deadline=None)
@given(heads=st.integers(1, 16), head_dim=st.sampled_from([16, 64]),
       groups=st.sampled_from([1, 2, 4, 8]), d_state=st.sampled_from([16, 128]),
       tp=st.sampled_from([1, 2, 4, 8]))
def test_mamba2_shards_cover_the_full_state(heads, head_dim, groups, d_state, tp):
    """Summed over ranks, the SSM state is the full one; the conv channels are the full
    ones plus the B/C groups replicated when tp does not divide n_groups (only with one
    group: vLLM 0.32's MambaMixer2 asserts n_groups % tp == 0 or n_groups == 1,
    mamba_mixer2.py:319; the refusal is tested in test_mamba2_groups_tp.py)."""
    if groups != 1 and groups % tp:
        return
    kw = dict(d_inner=heads * tp * head_dim, n_groups=groups, n_heads=heads * tp,
              head_dim=head_dim, d_state=d_state, d_conv=4)
    full_conv, full_ssm = mamba2_state_shapes(**kw)
    conv, ssm = mamba2_state_shapes(**kw, tp=tp)
    assert ssm[0] * tp == full_ssm[0] and ssm[1:] == full_ssm[1:]
    g_eff = groups if groups % tp == 0 else tp
    assert conv[1] * tp == full_conv[1] + 2 * (g_eff - groups) * d_state
    assert conv[0] == full_conv[0] == 3


@settings(max_examples=50, deadline=None)
@given(hk=st.integers(1, 8), ratio=st.integers(1, 4), dk=st.sampled_from([64, 128]),
       tp=st.sampled_from([1, 2, 4]), spec=st.integers(0, 3))
def test_gated_delta_net_shards_sum_to_full(hk, ratio, dk, tp, spec):
    kw = dict(num_k_heads=hk * tp, num_v_heads=hk * tp * ratio, head_k_dim=dk,
              head_v_dim=dk, conv_kernel=4, num_spec=spec)
    (fc, fs), (c, s) = gated_delta_net_state_shapes(**kw), \
        gated_delta_net_state_shapes(**kw, tp=tp)
    assert c[1] * tp == fc[1] and s[0] * tp == fs[0] and c[0] == 3 + spec
