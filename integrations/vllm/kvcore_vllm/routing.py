"""A :class:`kvcore.routing.ResidencyIndex` for vLLM 0.32 replicas.

:func:`residency_index_from_vllm` builds the index from vLLM's ``KVCacheConfig`` and
answers with the hit rule of vLLM's own ``KVCacheManager.get_computed_blocks``: the
search of :class:`kvcore_vllm.KVCacheManager` (vLLM's hybrid order: full-attention
groups first, then the windowed and state groups, until no group shortens the hit;
Mamba ``align`` groups by :class:`kvcore_vllm.mamba.VllmMambaAlignManager`), run over
the per-group hash tables the index builds from vLLM's ``BlockStored`` /
``BlockRemoved`` / ``AllBlocksCleared`` events.  Query with vLLM's own
``request.block_hashes`` (vLLM's hasher; kvcore's differs).

Supported: what :func:`kvcore_vllm.manager.unsupported_reason` accepts (no partial-
block hash hits, Mamba only in ``align`` mode without prefill checkpoint blocks, no
context parallelism); anything else raises :class:`~kvcore.errors.ConfigError`.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Sequence
from typing import Any

__all__ = ["residency_index_from_vllm"]


class _VllmSearcher:
    """vLLM's hit search (through kvcore_vllm's manager) over a swappable pool."""

    def __init__(self, kv_cache_config: Any, *, max_model_len: int, hash_block_size: int,
                 use_eagle: bool, enable_caching: bool) -> None:
        from kvcore_vllm.manager import KVCacheManager

        self.mgr = KVCacheManager(kv_cache_config, max_model_len=max_model_len,
                                  scheduler_block_size=hash_block_size,
                                  hash_block_size=hash_block_size,
                                  enable_caching=enable_caching, use_eagle=use_eagle,
                                  check_invariants=False)
        self.pool = self.mgr.block_pool
        kms = self.mgr._kms
        self.cappers = [m for m in kms if getattr(m, "max_cache_hit_tokens", None)]
        self.enable_caching = bool(self.mgr.enable_caching)
        self.hash_block_size = hash_block_size
        self.block_sizes = [m.block_size for m in kms]

    def find(self, block_hashes: Sequence[Any], limit: int) -> int:
        return int(self.mgr._find_hit(block_hashes, limit)[1])


def residency_index_from_vllm(kv_cache_config: Any, *, max_model_len: int,
                              hash_block_size: int, use_eagle: bool = False,
                              enable_caching: bool = True, int_hashes: bool | None = None,
                              replicas: Iterable[Hashable] = ()) -> Any:
    """A :class:`~kvcore.routing.ResidencyIndex` for replicas running vLLM 0.32 with
    this ``KVCacheConfig`` (the scheduler's: one representative spec per group).

    Parameters
    ----------
    kv_cache_config: vLLM's ``KVCacheConfig``.
    max_model_len: tokens.
    hash_block_size: tokens per request hash (the Scheduler's ``hash_block_size``,
        from vLLM's ``resolve_kv_cache_block_sizes``).
    use_eagle: the replicas run EAGLE (vLLM drops the last hit block).
    enable_caching: the replicas prefix cache.
    int_hashes: the replicas publish 64-bit int hashes (the low 64 bits of the
        big-endian hash: ``VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES``, on by default in
        vLLM 0.32); None (default): as this process's vLLM environment says.  Query
        hashes (``request.block_hashes``, bytes) are converted the same way.
    replicas: replica ids known from the start.

    Raises :class:`~kvcore.errors.ConfigError` for a configuration the bridge does not
    mirror (module docstring).
    """
    from kvcore.routing import ResidencyIndex
    from kvcore_vllm.specs import from_vllm_config

    if int_hashes is None:
        import vllm.envs as envs

        int_hashes = bool(envs.VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES)
    kcfg = from_vllm_config(kv_cache_config, max_model_len=max_model_len)
    s = _VllmSearcher(kv_cache_config, max_model_len=max_model_len,
                      hash_block_size=hash_block_size, use_eagle=use_eagle,
                      enable_caching=enable_caching)
    return ResidencyIndex(kcfg, replicas=replicas, max_model_len=max_model_len,
                          use_eagle=use_eagle, int_hashes=int_hashes, searcher=s)
