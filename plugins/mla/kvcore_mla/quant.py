"""The ``kv_cache_dtype`` schemes kvcore-mla adds.

``fp8_ds_mla``: DeepSeek-V3.2's FlashMLA sparse record, 656 B per token for a
576-wide latent (512 fp8 NoPE values, four float32 scales, one per 128-value tile,
64 bf16 RoPE values).  With ``model_version="deepseek_v4"`` on an MLA spec it means the
V4 record instead (584 B per stored state), as in vLLM.

``fp8_ds_mla_v4``: the DeepSeek-V4 record by name: 448 fp8 NoPE + 8 B of ue8m0 scales
+ 64 bf16 RoPE = 584 B per stored state for a 512-wide latent.

An MLA layer stores one latent and no V, so ``value_bytes`` is 0; ``key_bytes`` is the
record size for the given head size (see :mod:`kvcore_mla.specs`).
"""

from __future__ import annotations

from kvcore.quant import QuantScheme
from kvcore_mla.specs import (
    FP8_DS_MLA,
    FP8_DS_MLA_V4,
    ds_mla_record_bytes,
    ds_mla_v4_record_bytes,
)

__all__ = ["MLA_SCHEMES"]

MLA_SCHEMES: tuple[QuantScheme, ...] = (
    QuantScheme(
        FP8_DS_MLA, FP8_DS_MLA,
        key_bytes=lambda d, _dtype: ds_mla_record_bytes(d),
        value_bytes=lambda _d, _dtype: 0,
        storage_dtype="uint8",
        kinds=("mla_attention", "sliding_window_mla"),
        description="DeepSeek-V3.2 MLA record: fp8 NoPE + float32 scale per 128 values "
                    "+ bf16 RoPE (656 B/token for head 576)",
        distribution="kvcore-mla",
    ),
    QuantScheme(
        FP8_DS_MLA_V4, FP8_DS_MLA_V4,
        key_bytes=lambda d, _dtype: ds_mla_v4_record_bytes(d),
        value_bytes=lambda _d, _dtype: 0,
        storage_dtype="uint8",
        kinds=("mla_attention", "sliding_window_mla"),
        description="DeepSeek-V4 MLA record: fp8 NoPE + ue8m0 scale per 64 values + "
                    "bf16 RoPE (584 B/state for head 512)",
        distribution="kvcore-mla",
    ),
)
