"""State shapes and dtypes of recurrent layers, per tensor-parallel rank.

Pure functions on ints (no torch).  Shapes are in elements; the conv state is stored
``(state_len, dim)`` (vLLM's default "SD" layout: the TP-sharded channel axis innermost,
so a speculative shift of the window is a shift along axis 0).  Formulas follow vLLM
``vllm/model_executor/layers/mamba/mamba_utils.py`` (``MambaStateShapeCalculator``,
``MambaStateDtypeCalculator``), which mirror the model code they cite below.

======================  ===================================================  ==============================
layer                   conv state                                           recurrent state
======================  ===================================================  ==============================
Mamba1                  (d_conv - 1, d_inner / tp)                           (d_inner / tp, d_state)
Mamba2                  (d_conv - 1 + spec, (d_inner + 2 G d_state) / tp)    (n_heads / tp, head_dim, d_state)
gated DeltaNet          (k - 1 + spec, (2 Hk dk + Hv dv) / tp)               (Hv / tp, dv, dk)
KDA (Kimi)              (k - 1 + spec, (H d + 2 Hk dk) / tp)                 (H / tp, d, d)
linear attention        --                                                   (H / tp, d, d)
======================  ===================================================  ==============================

``G`` is ``n_groups`` raised to ``tp`` when ``tp`` does not divide it (each rank needs
the B/C groups of its heads: vLLM ``extra_groups_for_head_shards``); ``spec`` is the
number of speculative tokens (the conv window keeps their inputs too).  Sources of the
models: Mamba (Gu & Dao 2023; ``mamba_ssm.modules.mamba_simple``), Mamba2 (Dao & Gu
2024; ``mamba_ssm.modules.mamba2``), gated DeltaNet (Yang et al. 2024; HF
``modeling_qwen3_next.Qwen3NextGatedDeltaNet``), KDA (Kimi Linear, Moonshot 2025; vLLM
``kda.py``), lightning/linear attention (MiniMax-01; vLLM ``linear_attn.py``).

Dtypes: the conv state takes the model dtype; the recurrent (SSM) state takes
``mamba_ssm_cache_dtype`` / ``mamba_ssm_dtype`` from the config when set, else the
model dtype, except KDA (float32, vLLM ``kda_state_dtype``) and Nemotron-H (float32 when
the config names none: vLLM ``NemotronHForCausalLMConfig.DEFAULT_MAMBA_SSM_CACHE_DTYPE``).
"""

from __future__ import annotations

from typing import Any

from kvcore.dtypes import normalize_dtype
from kvcore.errors import ConfigError, UnknownDtypeError
from kvcore.models.config import ConfigView

__all__ = [
    "Shape",
    "divide",
    "check_mamba2_groups",
    "extra_groups_for_head_shards",
    "mamba1_state_shapes",
    "mamba2_state_shapes",
    "gated_delta_net_state_shapes",
    "kda_state_shapes_from_dims",
    "linear_attention_state_shapes",
    "ssm_state_dtype",
    "kda_state_shapes",
    "kda_state_dtypes",
    "kda_layer_indices",
]

Shape = tuple[int, ...]


def divide(n: int, tp: int, what: str) -> int:
    """``n / tp``; raises ConfigError naming ``what`` when ``tp`` does not divide ``n``."""
    if tp < 1:
        raise ConfigError(f"tensor_parallel_size must be >= 1, got {tp}",
                          field="tensor_parallel_size", value=tp)
    if n % tp:
        raise ConfigError(
            f"{what} = {n} is not divisible by tensor_parallel_size {tp}; valid sizes "
            f"divide {n}", field=what, value=n, tensor_parallel_size=tp)
    return n // tp


def extra_groups_for_head_shards(n_groups: int, tp: int) -> int:
    """Groups added so each rank holds the B/C groups its heads use: 0 when ``tp``
    divides ``n_groups``, else ``tp - n_groups`` (vLLM; meant for n_groups == 1)."""
    return 0 if n_groups % tp == 0 else tp - n_groups


def check_mamba2_groups(n_groups: int, n_heads: int, tp: int) -> None:
    """vLLM 0.32's MambaMixer2 rules (mamba_mixer2.py:314-322): ``tp`` divides the
    heads, and ``tp`` divides ``n_groups`` unless ``n_groups == 1`` (only one group is
    replicated over the ranks).  Raises ConfigError naming n_groups, the TP and the valid
    TPs."""
    if tp < 1:
        raise ConfigError(f"tensor_parallel_size must be >= 1, got {tp}",
                          field="tensor_parallel_size", value=tp)
    if n_groups == 1 or n_groups % tp == 0:
        return
    valid = [t for t in range(1, n_groups + 1) if n_groups % t == 0 and n_heads % t == 0]
    raise ConfigError(
        f"mamba2 n_groups {n_groups} is not divisible by tensor_parallel_size {tp} and "
        f"is not 1 (vLLM 0.32 asserts this in MambaMixer2); valid tensor_parallel_size: "
        f"{', '.join(map(str, valid))}", field="tensor_parallel_size", value=tp,
        n_groups=n_groups, valid=valid)


def mamba1_state_shapes(*, d_inner: int, d_state: int, d_conv: int, tp: int = 1
                        ) -> tuple[Shape, Shape]:
    """Mamba1: conv ``(d_conv - 1, d_inner / tp)``, SSM ``(d_inner / tp, d_state)``.

    ``d_inner`` = expand x d_model (Jamba ``mamba_expand x hidden_size``).  Raises
    ConfigError when ``tp`` does not divide ``d_inner``.
    """
    d = divide(d_inner, tp, "d_inner")
    return (d_conv - 1, d), (d, d_state)


def mamba2_state_shapes(*, d_inner: int, n_groups: int, n_heads: int, head_dim: int,
                        d_state: int, d_conv: int, tp: int = 1, num_spec: int = 0
                        ) -> tuple[Shape, Shape]:
    """Mamba2: conv ``(d_conv - 1 + num_spec, (d_inner + 2 G d_state) / tp)``, SSM
    ``(n_heads / tp, head_dim, d_state)``; the conv channels are x, B and C (Mamba2's
    ``conv1d`` over ``d_inner + 2 ngroups d_state``).  Raises ConfigError when ``tp``
    does not divide the heads or the conv channels, and when ``n_groups`` is neither 1
    nor divisible by ``tp`` (vLLM 0.32 asserts it in MambaMixer2.__init__,
    vllm/model_executor/layers/mamba/mamba_mixer2.py:314-322)."""
    check_mamba2_groups(n_groups, n_heads, tp)
    groups = n_groups + extra_groups_for_head_shards(n_groups, tp)
    conv_dim = d_inner + 2 * groups * d_state
    return ((d_conv - 1 + num_spec, divide(conv_dim, tp, "mamba2 conv_dim")),
            (divide(n_heads, tp, "mamba_num_heads"), head_dim, d_state))


def gated_delta_net_state_shapes(*, num_k_heads: int, num_v_heads: int, head_k_dim: int,
                                 head_v_dim: int, conv_kernel: int, tp: int = 1,
                                 num_spec: int = 0) -> tuple[Shape, Shape]:
    """Gated DeltaNet (Qwen3-Next, Qwen3.5): conv over q, k, v:
    ``(conv_kernel - 1 + num_spec, (2 Hk dk + Hv dv) / tp)``; recurrent state
    ``(Hv / tp, dv, dk)`` (one dv x dk matrix per value head)."""
    conv_dim = 2 * num_k_heads * head_k_dim + num_v_heads * head_v_dim
    return ((conv_kernel - 1 + num_spec, divide(conv_dim, tp, "gated DeltaNet conv_dim")),
            (divide(num_v_heads, tp, "linear_num_value_heads"), head_v_dim, head_k_dim))


def kda_state_shapes_from_dims(*, num_heads: int, head_dim: int, conv_kernel: int = 4,
                               tp: int = 1, num_spec: int = 0,
                               num_k_heads: int | None = None,
                               head_k_dim: int | None = None) -> tuple[Shape, Shape]:
    """Kimi Delta Attention: conv over q, k, v
    ``(conv_kernel - 1 + num_spec, (H d + 2 Hk dk) / tp)``; recurrent
    ``(H / tp, d, d)`` (vLLM ``kda_state_shape``)."""
    hk = num_heads if num_k_heads is None else num_k_heads
    dk = head_dim if head_k_dim is None else head_k_dim
    conv_dim = num_heads * head_dim + 2 * hk * dk
    return ((conv_kernel - 1 + num_spec, divide(conv_dim, tp, "KDA conv_dim")),
            (divide(num_heads, tp, "linear_attn_config.num_heads"), head_dim, head_dim))


def linear_attention_state_shapes(*, num_heads: int, head_dim: int, tp: int = 1
                                  ) -> tuple[Shape]:
    """Plain (lightning) linear attention: one ``(H / tp, d, d)`` KV state."""
    return ((divide(num_heads, tp, "num_attention_heads"), head_dim, head_dim),)


def _dtype(value: Any, field: str) -> str:
    try:
        return normalize_dtype(value)
    except UnknownDtypeError as exc:
        raise ConfigError(f"field {field!r}: {exc}", field=field, value=repr(value)) from exc


def _view(config: ConfigView | dict[str, Any]) -> ConfigView:
    if isinstance(config, ConfigView):
        return config
    if not isinstance(config, dict):
        raise ConfigError(f"a config must be a dict, got {type(config).__name__}")
    return ConfigView(config)


def ssm_state_dtype(config: ConfigView | dict[str, Any], model_dtype: str,
                    default: str | None = None, *, override: str | None = None) -> str:
    """The recurrent-state dtype: ``override`` (vLLM ``--mamba-ssm-cache-dtype``), else
    ``mamba_ssm_cache_dtype`` or ``mamba_ssm_dtype`` from the config (``auto`` =
    ``model_dtype``), else ``default``, else ``model_dtype``.  Raises ConfigError for an
    unknown dtype name or a field that is not a string."""
    v = _view(config)
    for key, value in (("mamba_ssm_cache_dtype", override),
                       ("mamba_ssm_cache_dtype", v.get_str("mamba_ssm_cache_dtype", None)),
                       ("mamba_ssm_dtype", v.get_str("mamba_ssm_dtype", None))):
        if value is not None:
            if str(value).lower() == "auto":
                return normalize_dtype(model_dtype)
            return _dtype(value, key)
    return normalize_dtype(default if default is not None else model_dtype)


# ---- Kimi (KDA) helpers for the adapter that owns kimi_k3 / kimi_linear ---------------

def _text(config: ConfigView | dict[str, Any]) -> ConfigView:
    return _view(config).merged_with("text_config")


def _linear_attn_config(config: ConfigView | dict[str, Any]) -> ConfigView:
    lac = _text(config).section("linear_attn_config")
    if lac.is_empty():
        raise ConfigError("missing field 'linear_attn_config' (an object with num_heads, "
                          "head_dim, short_conv_kernel_size, kda_layers)",
                          field="linear_attn_config")
    return lac


def kda_state_shapes(config: dict[str, Any], tp: int = 1,
                     num_speculative_tokens: int = 0) -> tuple[Shape, Shape]:
    """KDA state shapes of a Kimi Linear / Kimi-K3 config dict (top level or
    ``text_config``): ``linear_attn_config.{num_heads, head_dim,
    short_conv_kernel_size}`` into :func:`kda_state_shapes_from_dims`.

    Kimi-K3 (96 heads x 128, kernel 4) at tp=1: ``((3, 36864), (96, 128, 128))``.
    Raises ConfigError naming a missing or non-int field, or an indivisible ``tp``.
    """
    lac = _linear_attn_config(config)
    return kda_state_shapes_from_dims(
        num_heads=lac.get_int("num_heads"), head_dim=lac.get_int("head_dim"),
        conv_kernel=lac.get_int("short_conv_kernel_size", 4), tp=tp,
        num_spec=num_speculative_tokens)


def kda_state_dtypes(config: dict[str, Any]) -> tuple[str, str]:
    """(conv dtype, recurrent dtype) of KDA: the model dtype (``torch_dtype`` /
    ``dtype``, default bfloat16) and float32 unless the config sets
    ``mamba_ssm_dtype`` / ``mamba_ssm_cache_dtype`` (vLLM ``kda_state_dtype``)."""
    v = _text(config)
    model = _dtype(v.get_str("torch_dtype", None) or v.get_str("dtype", "bfloat16"),
                   "torch_dtype")
    return model, ssm_state_dtype(v, model, default="float32")


def kda_layer_indices(config: dict[str, Any]) -> list[int]:
    """0-based indices of the KDA layers (``linear_attn_config.kda_layers`` is
    1-based in Kimi configs)."""
    layers = _linear_attn_config(config).get_list_of_int("kda_layers", minimum=1)
    return [i - 1 for i in layers]
