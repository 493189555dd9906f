"""A drop-in replacement for vLLM 0.32's ``KVCacheManager``, backed by kvcore's runtime.

vLLM's ``Scheduler`` builds ``KVCacheManager(kv_cache_config=..., max_model_len=...,
...)`` and calls it every step; :class:`KVCacheManager` here takes the same arguments
and offers every method, attribute and return type the Scheduler uses (read from
``vllm/v1/core/sched/scheduler.py`` of vLLM 0.32), including what it reaches inside:
``coordinator.single_type_managers[*].kv_cache_spec`` / ``.block_size`` (checked
against vLLM's spec classes, so these are vLLM's own spec objects),
``coordinator.get_num_blocks_to_allocate(...)`` and ``block_pool.free_blocks(...)``
for deferred frees.

What is kvcore's and what is vLLM's
-----------------------------------
* Blocks, their free queue, the prefix cache (one hash table per group) and the
  per-group block tables are kvcore's (:class:`kvcore.runtime.BlockPool`, the
  registry's per-kind managers).  Blocks are :class:`kvcore.runtime.KVCacheBlock`
  objects inside vLLM's own ``KVCacheBlocks`` (the Scheduler only reads ``block_id``,
  ``block_hash`` and ``is_null``).
* Block hashes are vLLM's: ``request.block_hashes`` as vLLM's block hasher computed
  them; KV events are vLLM's ``BlockStored`` / ``BlockRemoved`` / ``AllBlocksCleared``,
  built field by field as vLLM's ``BlockPool`` builds them, so a subscriber cannot tell
  the two managers apart.
* Choices where both behaviours are safe follow vLLM by default:
  ``block_order="vllm"`` frees content-free blocks to the front of the free queue in
  the order given (vLLM's ``prepend_n``), so block ids match vLLM's step for step;
  ``block_order="kvcore"`` keeps kvcore's own order (each such block goes to the front
  as it is freed, the last one freed is reused first).  Blocks that left a window are
  freed before the free-space check, as vLLM does (freeing them is always safe: no
  token reads them again).
* kvcore's safety rules are always on: the pool never hands out a held block
  (allocation takes only ``ref_cnt == 0`` blocks from the free queue and raises
  :class:`~kvcore.errors.BlockPoolError` otherwise), a request's hit blocks are taken
  by every group before any group allocates (a hit block of one group may sit in the
  free queue another group allocates from), and ``allocate_slots`` changes nothing
  when it returns None except freeing blocks no token reads again.

Supported configurations (anything else raises :class:`~kvcore.errors.ConfigError`
naming the feature, at construction; :func:`unsupported_reason`): the kinds of
:mod:`kvcore_vllm.specs` with a kvcore runtime manager; Mamba groups in ``align`` mode
without prefill checkpoint blocks (vLLM 0.32's align-mode rules,
:mod:`kvcore_vllm.mamba`); ``hash_block_size`` equal to every caching group's block
size (vLLM's partial-block hash hits and their copy-on-write are not implemented);
``dcp_world_size == pcp_world_size == 1``; no KV-connector (external) tokens.

Like vLLM's hybrid coordinator, a model with several groups caches only
scheduler-block-aligned prefixes (``get_num_cacheable_tokens``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from kvcore.errors import ConfigError, RequestError
from kvcore.runtime.block_pool import BlockPool, KVCacheBlock
from kvcore_vllm.installer import check_int, check_type, require_vllm

__all__ = ["KVCacheManager", "VllmOrderBlockPool", "BLOCK_ORDERS", "RETENTIONS"]

#: the accepted ``block_order`` values
BLOCK_ORDERS = ("vllm", "kvcore")
#: the accepted ``retention`` values
RETENTIONS = ("vllm", "kvcore")


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


class VllmOrderBlockPool(BlockPool):
    """kvcore's :class:`~kvcore.runtime.BlockPool` that emits vLLM's KV events and,
    with ``block_order="vllm"``, frees content-free blocks in vLLM's order
    (``BlockPool.front_in_order``).

    Parameters: those of :class:`~kvcore.runtime.BlockPool` plus ``block_order``
    (``"vllm"`` | ``"kvcore"``), ``vllm_events`` (record vLLM events) and
    ``hash_block_size`` (tokens per entry of ``request.block_hashes``).
    """

    def __init__(self, num_blocks: int, *, enable_caching: bool, num_groups: int,
                 block_order: str, vllm_events: bool, hash_block_size: int) -> None:
        super().__init__(num_blocks, enable_caching=enable_caching, num_groups=num_groups,
                         enable_events=False, lazy=False)
        self.block_order = block_order
        # vLLM 0.32's order: content-free blocks of one free reused in the order given
        # (kvcore's pool keeps its always-on checks: foreign / over-freed blocks)
        self.front_in_order = block_order == "vllm"
        self.vllm_events = vllm_events
        self.hash_block_size = hash_block_size
        self.kv_event_queue: list[Any] = []

    # vLLM's modules, imported when used (a module in the state would not pickle)
    @property
    def _ev(self) -> Any:
        from vllm.distributed import kv_events

        return kv_events

    @property
    def _ku(self) -> Any:
        from vllm.v1.core import kv_cache_utils

        return kv_cache_utils

    # ---- vLLM-facing names -----------------------------------------------------------
    def get_num_free_blocks(self) -> int:
        return self.free_queue.num_free_blocks

    def get_usage(self) -> float:
        total = self.num_blocks - 1
        return 1.0 - self.free_queue.num_free_blocks / total if total else 0.0

    def take_events(self) -> list[Any]:
        if not self.vllm_events:
            return []
        ev, self.kv_event_queue = self.kv_event_queue, []
        return ev

    # ---- events ---------------------------------------------------------------------
    def _evict(self, b: KVCacheBlock) -> None:
        h, g = b.block_hash, b.group_id
        super()._evict(b)
        if self.vllm_events:
            self.kv_event_queue.append(self._ev.BlockRemoved(
                block_hashes=[self._ku.maybe_convert_block_hash(h)],  # type: ignore[arg-type]
                medium=self._ev.MEDIUM_GPU, group_idx=g))

    def cache_full_blocks(self, blocks: Sequence[KVCacheBlock], block_hashes: Sequence[bytes],
                          num_cached: int, num_full: int, group_id: int,
                          stride: int = 1, request: Any = None, block_size: int = 0) -> None:
        """kvcore's caching (earliest-cached block stays the hit, later duplicates wait)
        plus vLLM's ``BlockStored`` event for the range (vLLM ``cache_full_blocks``)."""
        self.cache_masked(blocks, block_hashes, num_cached, num_full, group_id, stride,
                          request, block_size, None)

    def cache_masked(self, blocks: Sequence[KVCacheBlock], block_hashes: Sequence[bytes],
                     num_cached: int, num_full: int, group_id: int, stride: int,
                     request: Any, block_size: int, mask: Sequence[bool] | None) -> None:
        """Cache blocks ``num_cached .. num_full-1`` except null blocks and those whose
        ``mask`` entry (aligned with the range) is False; one vLLM ``BlockStored`` for
        the range, listing the hashes entered (vLLM ``cache_full_blocks`` with
        ``block_mask``)."""
        if num_cached >= num_full:
            return
        if mask is None:
            BlockPool.cache_full_blocks(self, blocks, block_hashes, num_cached, num_full,
                                        group_id, stride, request, block_size)
        else:
            for i in range(num_cached, num_full):
                if mask[i - num_cached]:
                    BlockPool.cache_full_blocks(self, blocks, block_hashes, i, i + 1,
                                                group_id, stride, request, block_size)
        if not self.vllm_events or request is None:
            return
        ku = self._ku
        new_hashes = []
        extra: list[Any] = []
        mm_idx = 0
        for i in range(num_cached, num_full):
            if blocks[i].is_null or (mask is not None and not mask[i - num_cached]):
                continue
            new_hashes.append(ku.maybe_convert_block_hash(block_hashes[(i + 1) * stride - 1]))
            keys, mm_idx = ku.generate_block_hash_extra_keys(
                request, i * block_size, (i + 1) * block_size, mm_idx)
            extra.append(keys)
        parent = None if num_cached == 0 else ku.maybe_convert_block_hash(
            block_hashes[num_cached * stride - 1])
        self.kv_event_queue.append(self._stored(request, new_hashes, parent,
                                                num_cached * block_size,
                                                num_full * block_size, block_size,
                                                group_id, extra))

    def _stored(self, request: Any, hashes: list[Any], parent: Any, start: int, end: int,
                block_size: int, group_id: int, extra: list[Any]) -> Any:
        lora = request.lora_request
        return self._ev.BlockStored(
            block_hashes=hashes, parent_block_hash=parent,
            token_ids=request.all_token_ids[start:end], block_size=block_size,
            lora_id=lora.adapter_id if lora else None, medium=self._ev.MEDIUM_GPU,
            lora_name=lora.name if lora else None,
            extra_keys=self._ku.to_event_extra_keys(extra), group_idx=group_id,
            session_id=request.session_id)

    def emit_cached_block_events(self, request: Any, num_blocks: int, block_size: int,
                                 group_id: int, stride: int) -> None:
        """vLLM's ``BlockStored`` for reused prefix-cache blocks (report mode "full")."""
        if not self.vllm_events or num_blocks == 0:
            return
        ku = self._ku
        hashes, extra, mm_idx = [], [], 0
        for i in range(num_blocks):
            hashes.append(ku.maybe_convert_block_hash(
                request.block_hashes[(i + 1) * stride - 1]))
            keys, mm_idx = ku.generate_block_hash_extra_keys(
                request, i * block_size, (i + 1) * block_size, mm_idx)
            extra.append(keys)
        self.kv_event_queue.append(self._stored(request, hashes, None, 0,
                                                num_blocks * block_size, block_size,
                                                group_id, extra))

    def reset_prefix_cache(self) -> bool:
        ok = super().reset_prefix_cache()
        if ok and self.vllm_events:
            self.kv_event_queue.append(self._ev.AllBlocksCleared())
        return ok

    def evict_blocks(self, block_ids: set[int]) -> None:
        """Drop the given blocks' hashes from the prefix cache (held blocks stay held)."""
        for bid in block_ids:
            if not 0 <= bid < len(self.blocks):
                raise RequestError(f"evict_blocks: block id {bid} is not in the pool "
                                   f"(0 .. {len(self.blocks) - 1})", block_id=bid)
            b = self.blocks[bid]
            if b.block_hash is not None:
                self._evict(b)


class _ManagerView:
    """What the Scheduler reads of one of vLLM's single-type managers: the group's vLLM
    ``kv_cache_spec``, ``block_size``, ``kv_cache_group_id``, and the kvcore manager's
    block tables (``req_to_blocks``)."""

    retains_longer_hit = False
    records_new_block_ids = False

    def __init__(self, vllm_spec: Any, kmanager: Any, group_id: int) -> None:
        self.kv_cache_spec = vllm_spec
        self.block_size: int = kmanager.block_size
        self.kv_cache_group_id = group_id
        self.kvcore_manager = kmanager
        self.req_to_blocks = kmanager.req_to_blocks
        self.use_eagle = False

    def take_new_block_ids(self) -> list[int]:
        return []

    def take_pending_cow_copies(self) -> list[Any]:
        return []

    def take_pending_boundary_state_offloads(self) -> list[Any]:
        return []

    def finalize_partial_tail_offload(self, *args: Any) -> None:
        return None

    def new_step_starts(self) -> None:
        return None


class _Coordinator:
    """vLLM's coordinator surface over kvcore's managers (see :class:`KVCacheManager`)."""

    enable_partial_hash_hits = False
    num_reprefillable_tokens = 0

    def __init__(self, owner: KVCacheManager) -> None:
        self._o = owner
        self.block_pool = owner.block_pool
        self.single_type_managers = tuple(owner._views)
        self.eagle_group_ids: set[int] = set(owner._eagle_groups)
        self.kv_cache_config = owner.kv_cache_config
        self.full_attention_group_id = None

    def get_num_blocks_to_allocate(self, request_id: str, num_tokens: int,
                                   new_computed_blocks: Sequence[Sequence[KVCacheBlock]],
                                   num_encoder_tokens: int, total_computed_tokens: int,
                                   num_local_computed_tokens: int,
                                   num_tokens_main_model: int,
                                   apply_admission_cap: bool = False,
                                   prefill_end: int = 0) -> int:
        return self._o._num_blocks_to_allocate(request_id, num_tokens, new_computed_blocks,
                                               total_computed_tokens, apply_admission_cap,
                                               num_encoder_tokens, num_tokens_main_model)

    def get_blocks(self, request_id: str) -> tuple[list[KVCacheBlock], ...]:
        return tuple(m.req_to_blocks.get(request_id) or [] for m in self._o._kms)

    def new_step_starts(self) -> None:
        return None


#: the one argument :meth:`KVCacheManager.__new__` gets when pickle or deepcopy
#: rebuilds a manager (its state is then set by ``__setstate__``)
_UNPICKLING = "<kvcore_vllm.KVCacheManager: unpickling>"

#: set by ``install(fallback=...)``: build vLLM's own manager for configurations this
#: one does not support, instead of raising
FALLBACK_TO_VLLM = False


def _check_manager_args(a: dict[str, Any]) -> None:
    """ConfigError naming the first argument of :class:`KVCacheManager` of a wrong type
    or range (vLLM's manager would fail later with an AttributeError or TypeError)."""
    from vllm.v1.kv_cache_interface import KVCacheConfig as VllmKVCacheConfig

    where = "KVCacheManager()"
    check_type(where, "kv_cache_config", a["kv_cache_config"], VllmKVCacheConfig,
               "a vLLM 0.32 KVCacheConfig (vllm.v1.kv_cache_interface)")
    for name in ("max_model_len", "scheduler_block_size", "hash_block_size"):
        check_int(where, name, a[name], 1)
    for name in ("max_in_flight_tokens",):
        if a[name] is not None:
            check_int(where, name, a[name], 1)
    for name in ("num_prefill_lookahead",):
        check_int(where, name, a[name], 0)
    for name in ("dcp_world_size", "pcp_world_size"):
        check_int(where, name, a[name], 1)
    for name in ("enable_caching", "use_eagle", "log_stats", "enable_kv_cache_events",
                 "enable_mamba_shared_prefix_checkpoint"):
        check_type(where, name, a[name], bool, "a bool")
    if a["check_invariants"] is not None:
        check_type(where, "check_invariants", a["check_invariants"], bool,
                   "a bool or None")
    wm = a["watermark"]
    if isinstance(wm, bool) or not isinstance(wm, (int, float)) or not 0 <= wm < 1:
        from kvcore.units import shorten

        raise ConfigError(f"kvcore_vllm.{where}: watermark must be a number in [0, 1) "
                          f"(fraction of the blocks kept free), got {shorten(wm)}",
                          field="watermark", value=shorten(wm))


def unsupported_reason(kv_cache_config: Any, *, hash_block_size: int,
                       enable_caching: bool = True, dcp_world_size: int = 1,
                       pcp_world_size: int = 1, use_eagle: bool = False,
                       ) -> tuple[str, str] | None:
    """``(field, why)`` when :class:`KVCacheManager` cannot serve this vLLM
    configuration, else None: context parallelism, a group kind without a kvcore
    manager or spec counterpart, Mamba groups, partial-block hash hits, and EAGLE
    (``use_eagle``) with prefix caching on a chunked-local-attention EAGLE group (vLLM
    0.32 cannot run it either: its ``ChunkedLocalAttentionManager.
    find_longest_cache_hit`` asserts ``drop_eagle_block is False`` at the first
    lookup)."""
    require_vllm("manager.unsupported_reason()")
    from vllm.v1.kv_cache_interface import KVCacheConfig as VllmKVCacheConfig

    check_type("manager.unsupported_reason()", "kv_cache_config", kv_cache_config,
               VllmKVCacheConfig, "a vLLM 0.32 KVCacheConfig")
    from kvcore.errors import KVCoreError
    from kvcore.registry import get_registry
    from kvcore_vllm.specs import from_vllm_spec

    for name, v in (("dcp_world_size", dcp_world_size), ("pcp_world_size", pcp_world_size)):
        if v != 1:
            return name, f"{name}={v} is not supported (context parallelism)"
    vgroups = kv_cache_config.kv_cache_groups
    if use_eagle and enable_caching:
        for gid in sorted(KVCacheManager._eagle_group_ids(vgroups, True)):
            if type(vgroups[gid].kv_cache_spec).__name__ == "ChunkedLocalAttentionSpec":
                return "use_eagle", (
                    f"EAGLE with prefix caching on group {gid} (chunked local "
                    "attention): vLLM 0.32 does not support it (its "
                    "ChunkedLocalAttentionManager asserts that no EAGLE block is "
                    "dropped, so its Scheduler fails at the first prefix lookup); turn "
                    "prefix caching off (enable_prefix_caching=False) for this model")
    reg = get_registry()
    sizes = set()
    for gid, g in enumerate(kv_cache_config.kv_cache_groups):
        vs = g.kv_cache_spec
        if type(vs).__name__ == "UniformTypeKVCacheSpecs":
            vs = next(iter(vs.kv_cache_specs.values()))
        try:
            spec = from_vllm_spec(vs)
        except KVCoreError as e:
            return "kv_cache_groups", f"group {gid}: {e}"
        if spec.kind == "mamba" and (
                spec.mamba_cache_mode != "align"
                or getattr(vs, "num_prefill_checkpoint_blocks", 0)):
            return "kv_cache_groups", (
                f"group {gid} is a Mamba group in {spec.mamba_cache_mode!r} mode"
                f"{' with prefill checkpoint blocks' if spec.mamba_cache_mode == 'align' else ''}"
                "; only vLLM 0.32's 'align' mode without prefill checkpoint blocks is "
                "mirrored")
        if reg.manager_class(spec) is None:
            return "kv_cache_groups", (f"group {gid} is of kind {spec.kind!r}, which has "
                                       "no kvcore runtime manager")
        if getattr(spec, "participates_in_prefix_caching", True):
            sizes.add(spec.block_size)
    if enable_caching and any(bs != hash_block_size for bs in sizes):
        return "hash_block_size", (f"hash_block_size {hash_block_size} differs from a "
                                   f"group's block size ({sorted(sizes)}): vLLM's "
                                   "partial-block hash hits are not supported")
    return None


class KVCacheManager:
    """vLLM 0.32's ``KVCacheManager`` interface, kvcore's blocks and rules inside.

    Parameters
    ----------
    The arguments of vLLM 0.32's ``KVCacheManager`` (``kv_cache_config``: vLLM's
    ``KVCacheConfig``; ``max_model_len`` in tokens; ``scheduler_block_size`` and
    ``hash_block_size`` in tokens; ``max_in_flight_tokens``; ``enable_caching``;
    ``use_eagle``; ``num_prefill_lookahead``; ``log_stats``;
    ``enable_kv_cache_events``; ``dcp_world_size``; ``pcp_world_size``;
    ``metrics_collector`` (ignored); ``watermark`` (fraction of blocks kept free when
    admitting); ``enable_mamba_shared_prefix_checkpoint`` (accepted, no effect: the
    Mamba junction checkpoint is not mirrored, ``mamba_shared_prefix_checkpoint`` is
    False, so the Scheduler does not split chunks for it)), plus

    block_order: ``"vllm"`` (default: block ids as vLLM hands them out) or
        ``"kvcore"`` (kvcore's free-queue order; see the module docstring).
    retention: which full blocks of a windowed group (sliding window) enter the prefix
        cache: ``"vllm"`` (default) asks vLLM's own manager class for its
        ``reachable_block_mask`` (vLLM 0.32 keeps only the window-long tails a later
        hit can end on: the replay boundary ``num_prompt_tokens - 1``, shared-prefix
        junctions, and every ``prefix_cache_retention_interval`` tokens); ``"kvcore"``
        caches every full block (kvcore's runtime: more hits, more hash entries), runs
        a Mamba group with kvcore's own manager (kvcore_mamba's publication rule instead
        of :class:`~kvcore_vllm.mamba.VllmMambaAlignManager`'s) and frees blocks that
        left a window only after the fit check (kvcore's order).
    check_invariants: kvcore's debug switch (:class:`kvcore.runtime.KVCacheManager`):
        after every ``get_computed_blocks`` / ``allocate_slots`` / ``free`` /
        ``reset_prefix_cache`` the whole block state is checked (ref counts equal the
        tables holding each block, the free queue holds exactly the unheld blocks, no
        block in two groups' tables, hash tables agree) and calls from a second thread
        raise.  O(blocks) per call.  Default (None): ``KVCORE_CHECK_INVARIANTS`` as in
        kvcore's runtime.  Switched off from the first ``pop_blocks_for_free`` on
        (deferred frees: blocks held outside the tables until the Scheduler frees them).

    Raises :class:`~kvcore.errors.ConfigError` for a configuration it does not support
    (the message names the feature; :func:`unsupported_reason`) or an unknown
    ``block_order`` / ``retention``.  After ``install(fallback=True)`` an unsupported
    configuration builds vLLM's own manager instead (with a warning naming why).
    """

    def __new__(cls, *args: Any, **kwargs: Any) -> Any:
        if args == (_UNPICKLING,) and not kwargs:  # pickle / deepcopy (__getnewargs__)
            return super().__new__(cls)
        require_vllm("KVCacheManager()")
        import inspect

        try:
            b = inspect.signature(cls.__init__).bind(None, *args, **kwargs)
        except TypeError as e:
            raise ConfigError(f"kvcore_vllm.KVCacheManager(): {e} (the arguments of "
                              "vLLM 0.32's KVCacheManager)", field="arguments") from None
        b.apply_defaults()
        a = b.arguments
        _check_manager_args(a)
        if FALLBACK_TO_VLLM:
            why = unsupported_reason(a["kv_cache_config"], use_eagle=a["use_eagle"],
                                     hash_block_size=a["hash_block_size"],
                                     enable_caching=a["enable_caching"],
                                     dcp_world_size=a["dcp_world_size"],
                                     pcp_world_size=a["pcp_world_size"])
            if why is not None:
                import warnings

                from vllm.v1.core.kv_cache_manager import KVCacheManager as VllmManager

                warnings.warn(f"kvcore_vllm: using vLLM's KVCacheManager: {why[1]}",
                              stacklevel=2)
                kwargs.pop("block_order", None)
                kwargs.pop("retention", None)
                return VllmManager(*args, **kwargs)
        return super().__new__(cls)

    def __init__(self, kv_cache_config: Any, max_model_len: int, scheduler_block_size: int,
                 hash_block_size: int, max_in_flight_tokens: int | None = None,
                 enable_caching: bool = True, use_eagle: bool = False,
                 num_prefill_lookahead: int = 0, log_stats: bool = False,
                 enable_kv_cache_events: bool = False, dcp_world_size: int = 1,
                 pcp_world_size: int = 1, metrics_collector: Any = None,
                 watermark: float = 0.0,
                 enable_mamba_shared_prefix_checkpoint: bool = False, *,
                 block_order: str = "vllm", retention: str = "vllm",
                 check_invariants: bool | None = None) -> None:
        from vllm.v1.kv_cache_interface import (
            get_kv_cache_spec_kind,
            get_kv_cache_spec_sliding_window,
        )
        from vllm.v1.metrics.stats import PrefixCacheStats

        from kvcore_vllm.specs import from_vllm_config

        if retention not in RETENTIONS:
            raise ConfigError(f"retention {retention!r} is not one of "
                              f"{', '.join(RETENTIONS)}", field="retention",
                              value=retention)
        if block_order not in BLOCK_ORDERS:
            raise ConfigError(f"block_order {block_order!r} is not one of "
                              f"{', '.join(BLOCK_ORDERS)}", field="block_order",
                              value=block_order)
        why = unsupported_reason(kv_cache_config, hash_block_size=hash_block_size,
                                 use_eagle=use_eagle,
                                 enable_caching=enable_caching,
                                 dcp_world_size=dcp_world_size,
                                 pcp_world_size=pcp_world_size)
        if why is not None and why[0] == "use_eagle":
            raise ConfigError(f"kvcore_vllm.KVCacheManager: {why[1]}", field=why[0],
                              value=True)
        if why is not None:
            raise ConfigError(f"kvcore_vllm.KVCacheManager: {why[1]}; use vLLM's "
                              "manager (install(fallback=True) does so automatically)",
                              field=why[0])
        if max_in_flight_tokens is None:
            max_in_flight_tokens = max_model_len
        if watermark < 0:
            raise ConfigError(f"watermark must be >= 0, got {watermark}",
                              field="watermark", value=watermark)
        self.max_model_len = max_model_len
        self.enable_caching = enable_caching
        self.enable_kv_cache_events = enable_kv_cache_events
        self.use_eagle = use_eagle
        self.log_stats = log_stats
        self.metrics_collector = metrics_collector
        self.kv_cache_config = kv_cache_config
        self.block_order = block_order
        self.scheduler_block_size = scheduler_block_size
        self.hash_block_size = hash_block_size
        self._PrefixCacheStats = PrefixCacheStats
        self.prefix_cache_stats = PrefixCacheStats() if log_stats else None
        vgroups = kv_cache_config.kv_cache_groups
        self.num_kv_cache_groups = len(vgroups)
        self.kvcore_config = kcfg = from_vllm_config(kv_cache_config,
                                                     max_model_len=max_model_len)
        self.block_pool = VllmOrderBlockPool(
            kv_cache_config.num_blocks, enable_caching=enable_caching,
            num_groups=max(1, len(vgroups)), block_order=block_order,
            vllm_events=enable_kv_cache_events, hash_block_size=hash_block_size)
        from kvcore.runtime.coordinator import make_coordinator

        self._kcoord = make_coordinator(kcfg, self.block_pool, max_model_len=max_model_len,
                                        enable_caching=enable_caching, use_eagle=False,
                                        max_num_batched_tokens=max_in_flight_tokens)
        self._kms: list[Any] = list(self._kcoord.managers)
        self._mamba: list[Any] = []
        for g, km in enumerate(self._kms):
            # retention "kvcore": kvcore's own Mamba manager (kvcore_mamba: a state is
            # cached when the step that wrote it has run, at every chunk end on a
            # block boundary) instead of vLLM's rules (VllmMambaAlignManager)
            if km.spec.kind == "mamba" and retention == "vllm":
                from kvcore_vllm.mamba import VllmMambaAlignManager

                mm = VllmMambaAlignManager(km.spec, self.block_pool, g,
                                           enable_caching=enable_caching,
                                           use_eagle=g in self._eagle_group_ids(
                                               vgroups, use_eagle))
                self._kms[g] = mm
                self._mamba.append(mm)
        self._caching = [m for m in self._kms if m.enable_caching] if enable_caching \
            else []
        self.enable_caching = bool(self._caching)
        self._views = [_ManagerView(vg.kv_cache_spec, km, gid)
                       for gid, (vg, km) in enumerate(zip(vgroups, self._kms))]
        self._eagle_groups = self._eagle_group_ids(vgroups, use_eagle)
        # per-group admission caps (vLLM: recycling kinds only)
        self._caps: list[int | None] = []
        for vg in vgroups:
            fn = getattr(vg.kv_cache_spec, "max_admission_blocks_per_request", None)
            kind = type(vg.kv_cache_spec).__name__
            if fn is not None and kind in ("SlidingWindowSpec", "ChunkedLocalAttentionSpec",
                                           "SlidingWindowMLASpec"):
                self._caps.append(fn(max_in_flight_tokens=max_in_flight_tokens,
                                     max_model_len=max_model_len))
            else:
                self._caps.append(None)
        # hit search order: full-attention-like first (vLLM's hybrid coordinator)
        self._search = sorted(self._caching, key=lambda m: m.skips_blocks)
        self._simple_hybrid = (len(self._search) == 2 and not self._search[0].skips_blocks)
        # vLLM's retention policy for windowed groups (None: cache every full block)
        self._masks: list[Any] = [None] * len(self._kms)
        self.retention = retention
        self._retention_interval = getattr(kv_cache_config,
                                           "prefix_cache_retention_interval", None)
        if retention == "vllm":
            from vllm.v1.kv_cache_spec_registry import KVCacheSpecRegistry

            for g, (vg, m) in enumerate(zip(vgroups, self._kms)):
                if m.skips_blocks:
                    vcls = KVCacheSpecRegistry.get_manager_class(
                        vg.kv_cache_spec, getattr(vg, "role", None))
                    self._masks[g] = getattr(vcls, "reachable_block_mask", None)
        # vLLM builds a HybridKVCacheCoordinator for several groups with caching on
        self._hybrid = self.enable_caching and len(vgroups) > 1
        self._num_reprefillable = max(0, num_prefill_lookahead - 1)
        self.coordinator = _Coordinator(self)
        #: kvcore's managers, one per group (what ``check_consistency`` walks)
        self.managers = self._kms
        self._deferred_out = 0
        if check_invariants is None:
            from kvcore.runtime.manager import env_check_invariants

            # the core's strict parsing (an unknown value is a ConfigError naming it)
            check_invariants = env_check_invariants(kv_cache_config.num_blocks)
        self.check_invariants = bool(check_invariants)
        self._owner_thread: int | None = None
        if self.check_invariants:
            from kvcore.runtime.manager import wrap_checked

            wrap_checked(self)
        self.mamba_shared_prefix_checkpoint = False
        self.retained_hit_group_ids: tuple[int, ...] = ()
        self.watermark_blocks = int(watermark * kv_cache_config.num_blocks)
        self.kv_cache_event_metadata = tuple(
            (get_kv_cache_spec_kind(g.kv_cache_spec).value,
             get_kv_cache_spec_sliding_window(g.kv_cache_spec)) for g in vgroups)
        self._KVCacheBlocks = _kv_cache_blocks_cls()
        self.empty_kv_cache_blocks = self._KVCacheBlocks(tuple(() for _ in vgroups))

    # ---- pickle / deepcopy -----------------------------------------------------------
    def __getnewargs__(self) -> tuple[str]:
        return (_UNPICKLING,)

    def __getstate__(self) -> dict[str, Any]:
        """The state without the debug switch's wrappers and owner thread (kvcore's
        :func:`~kvcore.runtime.manager.checked_state`); any pool size pickles."""
        from kvcore.runtime.manager import checked_state

        return checked_state(self)

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        if self.check_invariants:
            from kvcore.runtime.manager import wrap_checked

            wrap_checked(self)

    # ---- kvcore's debug switch -------------------------------------------------------
    def _checked(self, fn: Any) -> Any:
        """``fn`` followed by :meth:`check_consistency` (and, for a lookup, the hit
        check), from the owner thread only (kvcore's own wrapper)."""
        from kvcore.runtime.manager import owner_checked

        return owner_checked(self, fn)

    def _check_hit(self, request: Any, hit: Any) -> None:
        """Debug: every real block of a hit is a pool block cached in its group under
        the request's own hash for that table index."""
        from kvcore.errors import BlockPoolError

        pool = self.block_pool
        hashes = request.block_hashes
        for g, blocks in enumerate(hit.blocks):
            m = self._kms[g]
            for i, b in enumerate(blocks):
                if b.is_null and b is pool.null_block:
                    continue
                key = hashes[(i + 1) * m.hash_stride - 1]
                if not pool.is_pool_block(b) or b.block_hash != key or b.group_id != g:
                    raise BlockPoolError(
                        f"check_invariants: group {g} ({m.spec.kind}): the lookup offered "
                        f"block {getattr(b, 'block_id', b)!r} as table[{i}], which is not "
                        "cached in this group under this request's hash",
                        block_id=getattr(b, "block_id", None), group_id=g)

    def check_consistency(self) -> None:
        """kvcore's whole-state check (:meth:`kvcore.runtime.KVCacheManager.
        check_consistency`); raises :class:`~kvcore.errors.BlockPoolError` naming the
        block id and the group's kind at the first fault."""
        if self._deferred_out:
            return
        from kvcore.runtime.manager import KVCacheManager as _Runtime

        _Runtime.check_consistency(self)  # type: ignore[arg-type]

    @staticmethod
    def _eagle_group_ids(vgroups: Sequence[Any], use_eagle: bool) -> set[int]:
        ids = {i for i, g in enumerate(vgroups) if getattr(g, "is_eagle_group", False)}
        return ids or (set(range(len(vgroups))) if use_eagle else set())

    # ---- helpers ------------------------------------------------------------------
    def create_kv_cache_blocks(self, blocks: Sequence[Sequence[KVCacheBlock]]) -> Any:
        return self._KVCacheBlocks(tuple(blocks)) if any(blocks) else \
            self.empty_kv_cache_blocks

    def _num_blocks_to_allocate(self, rid: str, num_tokens: int,
                                hits: Sequence[Sequence[KVCacheBlock]],
                                total_computed: int, apply_cap: bool,
                                num_encoder_tokens: int = 0,
                                main_tokens: int | None = None) -> int:
        """vLLM 0.32's block count (``get_num_blocks_to_allocate``) over kvcore's tables:
        new blocks for the unskipped suffix plus hit blocks leaving the free queue
        (Mamba groups: sized by ``main_tokens``, the tokens without lookahead)."""
        total = 0
        hit: Sequence[KVCacheBlock]
        for g, m in enumerate(self._kms):
            bs = m.block_size
            if m.spec.kind == "mamba":
                main = num_tokens if main_tokens is None else main_tokens
                if m in self._mamba:
                    total += m.count(rid, main, hits[g])
                else:  # kvcore's Mamba manager (align mode: sized by the request id)
                    total += m.get_num_blocks_to_allocate(_RequestId(rid), main, hits[g])
                continue
            if m.spec.kind == "cross_attention":
                need, hit, computed = num_encoder_tokens, (), 0
            else:
                need, hit, computed = num_tokens, hits[g], total_computed
            required = _cdiv(need, bs)
            cap = self._caps[g]
            if apply_cap and cap is not None and cap < required:
                required = cap
            table = m.req_to_blocks.get(rid)
            n_req = len(table) if table else 0
            if table is not None and rid in m.num_cached_blocks and not hit:
                total += max(required - n_req, 0)
                continue
            skipped = m.get_num_skipped_tokens(computed) // bs if m.skips_blocks else 0
            total += max(required - max(skipped, len(hit) + n_req), 0)
            for b in hit[max(0, skipped - n_req):]:
                if b.ref_cnt == 0 and not b.is_null:
                    total += 1
        return total

    def _remove_skipped(self, rid: str, processed: int) -> None:
        for m in self._kms:
            if m.skips_blocks and m.req_to_blocks.get(rid):
                m.remove_skipped_blocks(rid, processed)

    # ---- the Scheduler's calls --------------------------------------------------------
    @property
    def usage(self) -> float:
        """Fraction of usable blocks held (0.0 to 1.0; the null block excluded)."""
        return self.block_pool.get_usage()

    def make_prefix_cache_stats(self) -> Any:
        """The prefix-cache stats since the last call (vLLM's ``PrefixCacheStats``), or
        None when ``log_stats`` is off."""
        if not self.log_stats:
            return None
        stats, self.prefix_cache_stats = self.prefix_cache_stats, self._PrefixCacheStats()
        return stats

    def prefix_cache_lookup_enabled(self, request: Any) -> bool:
        return self.enable_caching and not request.skip_reading_prefix_cache

    def record_prefix_cache_stats(self, request: Any, num_hits: int) -> None:
        if not self.log_stats or not self.prefix_cache_lookup_enabled(request):
            return
        assert self.prefix_cache_stats is not None
        self.prefix_cache_stats.record(num_tokens=request.num_tokens, num_hits=num_hits,
                                       preempted=request.num_preemptions > 0)

    def get_computed_blocks(self, request: Any) -> tuple[Any, int, int]:
        """The longest cached prefix every group can serve, at most ``num_tokens - 1``
        tokens: ``(KVCacheBlocks, num_computed_tokens, shared_prefix_boundary)``.
        Changes no block state."""
        if not self.prefix_cache_lookup_enabled(request):
            return self.empty_kv_cache_blocks, 0, 0
        limit = request.num_tokens - 1
        for m in self._kms:
            cap = m.max_cache_hit_tokens(request)
            if cap is not None and cap < limit:
                limit = max(cap, 0)
        blocks, n, uncached = self._find_hit(request.block_hashes, limit)
        if n > 0 and self.enable_kv_cache_events and \
                getattr(request, "kv_cache_report_mode", "incremental") == "full":
            for g, gb in enumerate(blocks):
                if gb:
                    m = self._kms[g]
                    self.block_pool.emit_cached_block_events(request, len(gb),
                                                             m.block_size, g,
                                                             m.hash_stride)
        return self.create_kv_cache_blocks(blocks), n, (n + uncached if uncached else 0)

    def _find_hit(self, hashes: Sequence[bytes], max_len: int
                  ) -> tuple[list[list[KVCacheBlock]], int, int]:
        """vLLM 0.32's hit search over kvcore's per-kind searches.

        Several groups: the hybrid fixed point (full attention first, then the
        windowed and state groups, until no group shortens the hit).  With EAGLE
        (``use_eagle``; every group is an EAGLE group unless vLLM flags some) the last
        matched block is dropped as vLLM's ``HybridKVCacheCoordinator.
        find_longest_cache_hit`` drops it: each EAGLE group searches one block past the
        candidate length (``eagle_proof_margin``; no margin for a Mamba group, whose
        search never drops) and drops its last matched block, at most once per
        candidate length (a group that shortens the hit without dropping clears the
        "verified" set, so the others drop again; vLLM issue #32802); a sliding-window
        group needs one contiguous block more for that (``_contiguous_blocks_for_hit``)
        and full attention, downward-closed, searches once and is trimmed after.  One
        group: its own search with the drop (``UnitaryKVCacheCoordinator``).
        EAGLE with chunked local attention is refused at construction, as vLLM's
        ``ChunkedLocalAttentionManager`` asserts on it."""
        out: list[list[KVCacheBlock]] = [[] for _ in self._kms]
        if not self._search:
            return out, 0, 0
        eagle = self._eagle_groups
        if len(self._search) == 1:
            m = self._search[0]
            drop = m.group_id in eagle and m.spec.kind != "mamba"
            bl = m.find_longest_cache_hit(hashes, max_len,
                                          m.block_size if drop and m.skips_blocks else 0)
            if drop and bl:
                bl = bl[:-1]
            out[m.group_id] = bl
            return out, len(bl) * m.block_size, 0
        hit = max_len
        longest = 0
        hashed_tokens = len(hashes) * self.hash_block_size
        found: dict[int, tuple[list[KVCacheBlock], int]] = {}
        verified: set[int] = set()  # EAGLE groups that dropped at the current length
        while True:
            curr = hit
            for m in self._search:
                gid = m.group_id
                prev = found.get(gid)
                if not m.skips_blocks and prev is not None:
                    curr = min(curr, prev[1])
                    continue
                drop = gid in eagle and gid not in verified
                state = m.spec.kind == "mamba"
                limit = curr
                if drop and not state:
                    limit = min(curr + m.block_size, hashed_tokens)
                bl = m.find_longest_cache_hit(
                    hashes, limit, m.block_size if drop and not state and m.skips_blocks
                    else 0)
                if drop and not state and bl:
                    bl = bl[:-1]
                got = len(bl) * m.block_size
                if drop:
                    verified.add(gid)
                elif got < curr:
                    verified.clear()
                curr = got
                found[gid] = (bl, got)
                longest = max(longest, curr)
            if curr >= hit:
                break
            hit = curr
            if self._simple_hybrid:
                break
        for m in self._search:
            bl, _ = found[m.group_id]
            if not m.skips_blocks:
                bl = bl[:_cdiv(hit, m.block_size)]
            out[m.group_id] = bl
        return out, hit, longest - hit

    def allocate_slots(self, request: Any, num_new_tokens: int,
                       num_new_computed_tokens: int = 0,
                       new_computed_blocks: Any = None, num_lookahead_tokens: int = 0,
                       num_external_computed_tokens: int = 0,
                       delay_cache_blocks: bool = False, num_encoder_tokens: int = 0,
                       full_sequence_must_fit: bool = False, reserved_blocks: int = 0,
                       has_scheduled_reqs: bool = True,
                       skip_zeroing_group_ids: tuple[int, ...] = ()) -> Any:
        """Slots for ``num_new_tokens`` more tokens (plus ``num_lookahead_tokens``) of
        a request, taking the cache hit ``new_computed_blocks`` at admission.

        Returns vLLM's ``KVCacheBlocks`` of the newly allocated blocks per group, or None
        when they do not fit (then only blocks that left a window were freed).  Full
        blocks up to ``min(computed + num_new_tokens, request.num_tokens)`` tokens are
        cached.  Raises :class:`~kvcore.errors.RequestError` when there is nothing to
        allocate or adopt, or for external (KV-connector) tokens, which this manager
        does not take.
        """
        if num_new_tokens == 0 and num_external_computed_tokens == 0 \
                and num_new_computed_tokens == 0:
            raise RequestError("num_new_tokens must be greater than 0 when there are no "
                               "computed tokens to adopt", field="num_new_tokens",
                               value=num_new_tokens)
        if num_external_computed_tokens:
            raise RequestError("kvcore_vllm.KVCacheManager takes no KV-connector tokens "
                               f"(num_external_computed_tokens="
                               f"{num_external_computed_tokens})",
                               field="num_external_computed_tokens",
                               value=num_external_computed_tokens)
        rid = request.request_id
        hits = new_computed_blocks.blocks if new_computed_blocks is not None \
            else self.empty_kv_cache_blocks.blocks
        num_local = request.num_computed_tokens + num_new_computed_tokens
        total_computed = min(num_local, self.max_model_len)
        watermark = 0
        if has_scheduled_reqs and self.watermark_blocks and \
                request.status.name in ("WAITING", "PREEMPTED"):
            watermark = self.watermark_blocks
        pool = self.block_pool
        if full_sequence_must_fit:
            full = min(request.num_tokens, self.max_model_len)
            n = self._num_blocks_to_allocate(rid, full, hits, total_computed, True,
                                             num_encoder_tokens, full)
            if n + watermark > pool.get_num_free_blocks():
                return None
        need = min(total_computed + num_new_tokens + num_lookahead_tokens,
                   self.max_model_len)
        processed = max(0, total_computed - request.num_in_flight_tokens)
        main = total_computed + num_new_tokens
        if self.retention == "kvcore":
            # kvcore's runtime order: the blocks that leave a window count as free in
            # the check and are freed only when the allocation goes ahead (so a failed
            # allocation changes nothing, and the free queue's order stays kvcore's)
            n = self._num_blocks_to_allocate(rid, need, hits, total_computed, False,
                                             num_encoder_tokens, main)
            freed = sum(m.num_blocks_freed_by_skipping(rid, processed)
                        for m in self._kms if m.skips_blocks and m.req_to_blocks.get(rid))
            if n + watermark > pool.get_num_free_blocks() + freed - reserved_blocks:
                return None
            self._remove_skipped(rid, processed)
        else:
            self._remove_skipped(rid, processed)
            n = self._num_blocks_to_allocate(rid, need, hits, total_computed, False,
                                             num_encoder_tokens, main)
            if n + watermark > pool.get_num_free_blocks() - reserved_blocks:
                return None
        if any(hits):
            # every group takes its hits before any group allocates
            for g, m in enumerate(self._kms):
                if hits[g]:
                    m.save_new_computed_blocks(rid, hits[g])
        new_blocks = []
        for m in self._kms:
            if m.spec.kind == "cross_attention":
                if num_encoder_tokens and rid not in m.req_to_blocks:
                    m.req_to_blocks[rid] = pool.get_new_blocks(
                        _cdiv(num_encoder_tokens, m.block_size))
                    m.num_cached_blocks.setdefault(rid, 0)
                    new_blocks.append(list(m.req_to_blocks[rid]))
                else:
                    new_blocks.append([])
                continue
            if m.spec.kind == "mamba":
                new_blocks.append(m.allocate(rid, main) if m in self._mamba
                                  else m.allocate_new_blocks(request, main))
            else:
                new_blocks.append(m.allocate_new_blocks(request, need))
        if not delay_cache_blocks and self.enable_caching:
            self._cache(request, min(total_computed + num_new_tokens, request.num_tokens))
        return self.create_kv_cache_blocks(new_blocks)

    def _cache(self, request: Any, num_tokens: int) -> None:
        """Enter the request's full blocks up to ``num_tokens`` in the prefix cache
        (windowed groups: only those the retention policy keeps)."""
        boundaries: Any = None
        requested = num_tokens
        reprefill = self._num_reprefillable
        for m in self._caching:
            # vLLM's get_num_cacheable_tokens: the last num_prefill_lookahead - 1 tokens
            # may be re-prefilled (multi-module MTP); the hybrid coordinator caches
            # scheduler-block-aligned prefixes only (EAGLE groups one block further)
            if self._hybrid:
                sbs = self.scheduler_block_size
                num_tokens = requested // sbs * sbs
                if m.group_id in self._eagle_groups and num_tokens > 0:
                    fin = max(0, requested - reprefill)
                    num_tokens = min(fin, fin // sbs * sbs + m.block_size)
            else:
                num_tokens = max(0, requested - reprefill)
            mask_fn = self._masks[m.group_id]
            if mask_fn is None:
                m.cache_blocks(request, num_tokens)
                continue
            rid = request.request_id
            table = m.req_to_blocks.get(rid)
            nc = m.num_cached_blocks.get(rid, 0)
            nf = min(num_tokens // m.block_size, len(table) if table else 0)
            if nf <= nc or not table:
                if m.spec.kind == "mamba":
                    m.after_caching(request, nc, num_tokens)
                continue
            if boundaries is None:
                from vllm.v1.core.kv_cache_coordinator import replay_boundaries

                boundaries = list(replay_boundaries(request.num_prompt_tokens,
                                                    self.scheduler_block_size,
                                                    use_eagle=bool(self._eagle_groups)))
                spb = getattr(request, "shared_prefix_boundary", 0)
                if spb:
                    boundaries.append(spb)
            vspec = self._views[m.group_id].kv_cache_spec
            mask = mask_fn(start_block=nc, end_block=nf,
                           alignment_tokens=self.scheduler_block_size,
                           kv_cache_spec=vspec, use_eagle=m.group_id in self._eagle_groups,
                           retention_interval=self._retention_interval,
                           reachable_boundaries=boundaries)
            self.block_pool.cache_masked(table, request.block_hashes, nc, nf, m.group_id,
                                         m.hash_stride, request, m.block_size, mask)
            m.num_cached_blocks[rid] = nf
            if m.spec.kind == "mamba":
                m.after_caching(request, nc, num_tokens)

    def free(self, request: Any) -> None:
        """Release every block of the request (each group's table last block first)."""
        for m in self._kms:
            m.free(request.request_id)

    def pop_blocks_for_free(self, request: Any) -> list[KVCacheBlock]:
        """The request's blocks in allocation order (group after group), removed from
        the tables but still held: the caller frees them later, reversed, with
        ``block_pool.free_blocks`` (vLLM's deferred frees)."""
        rid = request.request_id
        out: list[KVCacheBlock] = []
        for m in self._kms:
            kvcore_mamba = m.spec.kind == "mamba" and m not in self._mamba
            if kvcore_mamba:  # cache what its run steps wrote, as its free() does
                m._publish(rid)
            out.extend(m.req_to_blocks.pop(rid, []))
            m.num_cached_blocks.pop(rid, None)
            m.num_skipped_blocks.pop(rid, None)
            if kvcore_mamba:
                m._st.pop(rid, None)
            elif m.spec.kind == "mamba":
                m.forget(rid)
        if out:
            self._deferred_out += 1  # the whole-state check is off until they return
        return out

    def remove_skipped_blocks(self, request_id: str, processed_computed_tokens: int,
                              num_prompt_tokens: int | None = None) -> None:
        """Free the blocks no future token reads (left a window), tail first."""
        self._remove_skipped(request_id, processed_computed_tokens)

    def evict_blocks(self, block_ids: set[int]) -> None:
        self.block_pool.evict_blocks(block_ids)

    def reset_prefix_cache(self) -> bool:
        """Forget every cached hash; False (nothing changed) while a request holds
        blocks."""
        if not self.block_pool.reset_prefix_cache():
            return False
        if self.log_stats:
            assert self.prefix_cache_stats is not None
            self.prefix_cache_stats.reset = True
        return True

    def get_num_common_prefix_blocks(self, running_request_id: str) -> list[int]:
        return [0] * self.num_kv_cache_groups

    def take_events(self) -> list[Any]:
        """vLLM KV events since the last call, ``BlockStored`` annotated with the
        group's spec kind and sliding window (as vLLM does)."""
        events = self.block_pool.take_events()
        meta = self.kv_cache_event_metadata
        for ev in events:
            if type(ev).__name__ != "BlockStored" or ev.group_idx is None:
                continue
            if 0 <= ev.group_idx < len(meta):
                ev.kv_cache_spec_kind, ev.kv_cache_spec_sliding_window = meta[ev.group_idx]
        return events

    def get_blocks(self, request_id: str) -> Any:
        return self.create_kv_cache_blocks(self.coordinator.get_blocks(request_id))

    def get_block_ids(self, request_id: str) -> tuple[list[int], ...]:
        return self.get_blocks(request_id).get_block_ids()

    def get_block_ids_for_computed_tokens(self, request_id: str,
                                          num_computed_tokens: int
                                          ) -> tuple[list[int], ...]:
        out = []
        for m, ids in zip(self._kms, self.get_block_ids(request_id)):
            if m.spec.kind in ("cross_attention", "encoder_only_attention") or \
                    not hasattr(m.spec, "num_kv_heads"):
                out.append(ids)
            else:
                out.append(ids[:_cdiv(num_computed_tokens, m.block_size)])
        return tuple(out)

    def estimate_cached_tokens(self, request: Any) -> int:
        """Tokens of the request its cached blocks cover (smallest over caching
        groups)."""
        best: int | None = None
        for m in self._caching:
            if m.spec.kind == "cross_attention":
                continue
            n = 0
            for i, b in enumerate(m.req_to_blocks.get(request.request_id) or ()):
                if b.block_hash is not None:
                    n = (i + 1) * m.block_size
            best = n if best is None else min(best, n)
        return best or 0

    def cache_blocks(self, request: Any, num_computed_tokens: int) -> None:
        if self.enable_caching:
            self._cache(request, num_computed_tokens)

    def truncate_computed_blocks(self, blocks: Any, num_computed_tokens: int) -> Any:
        out = []
        for gb, m in zip(blocks.blocks, self._kms):
            out.append(list(gb[:num_computed_tokens // m.block_size]))
        return self.create_kv_cache_blocks(out)

    def get_computed_blocks_for_connector(self, request: Any) -> tuple[Any, int, int, bool]:
        return (*self.get_computed_blocks(request), False)

    def take_new_block_ids(self) -> list[int]:
        return []

    def record_blocks_for_zeroing(self, request_id: str, start_token: int) -> None:
        return None

    def take_kv_cache_block_copies(self) -> tuple[list[Any], list[KVCacheBlock]]:
        return [], []

    def take_boundary_state_offloads(self) -> dict[str, list[tuple[int, int, int]]]:
        return {}

    def finalize_partial_tail_offloads(self, request: Any) -> list[tuple[int, int, int]]:
        return []

    def new_step_starts(self) -> None:
        """A new scheduler step: Mamba states cached in the last one may serve hits."""
        for m in self._mamba:
            m.new_step_starts()


class _RequestId:
    """What kvcore's Mamba manager reads of a request to size an ``align``-mode step:
    its id."""

    __slots__ = ("request_id",)

    def __init__(self, request_id: str) -> None:
        self.request_id = request_id


def _kv_cache_blocks_cls() -> Any:
    from vllm.v1.core.kv_cache_manager import KVCacheBlocks

    return KVCacheBlocks
