"""kvcore plugin kvcore-rswa: Reference Sliding Window Attention (kind ``rswa``).

Public names: :class:`RSWASpec` (the spec), ``kvcore_rswa.manager.RSWAManager`` (the
runtime manager, imported lazily), ``kvcore_rswa.kernels`` (torch reference and Triton
decode attention; imports torch)."""

from kvcore_rswa.spec import RSWASpec, rswa_kept_block_range, rswa_visible

__version__ = "0.1.0"

__all__ = ["RSWASpec", "rswa_visible", "rswa_kept_block_range", "__version__"]
