"""kvcore plugin: recurrent-state (Mamba, gated DeltaNet, KDA, linear attention) KV-cache
specs, hybrid-model adapters, the ``mamba`` runtime manager and the state-copy kernel.

Planning imports no torch; :mod:`kvcore_mamba.kernels` imports torch/triton lazily.
"""

from kvcore_mamba.shapes import (
    gated_delta_net_state_shapes,
    kda_layer_indices,
    kda_state_dtypes,
    kda_state_shapes,
    linear_attention_state_shapes,
    mamba1_state_shapes,
    mamba2_state_shapes,
)
from kvcore_mamba.spec import MambaSpec

__version__ = "0.1.0"

__all__ = [
    "MambaSpec",
    "mamba1_state_shapes",
    "mamba2_state_shapes",
    "gated_delta_net_state_shapes",
    "linear_attention_state_shapes",
    "kda_state_shapes",
    "kda_state_dtypes",
    "kda_layer_indices",
]
