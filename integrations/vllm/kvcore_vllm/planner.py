"""vLLM 0.32's planner entry point, planned by kvcore.

:func:`get_kv_cache_configs` has the signature and return type of
``vllm.v1.core.kv_cache_utils.get_kv_cache_configs``: per worker, its layers' vLLM
``KVCacheSpec`` objects and its KV-cache memory in bytes -> one vLLM ``KVCacheConfig``
per worker.  Each worker's layers are converted with :func:`kvcore_vllm.from_vllm_spec`,
planned by :func:`kvcore.plan` (kvcore's grouping: it keeps the better of padding and
packing where vLLM pads, and plans cases vLLM refuses), and converted back with
:func:`kvcore_vllm.to_vllm_config`; every worker then gets the smallest worker's block
count, as in vLLM.

Block sizes stay ones vLLM's attention backends take: a layer's block size is only ever
raised to a multiple of :data:`KERNEL_BLOCK_SIZE` (16 tokens, the granularity of vLLM
0.32's paged-attention kernels) and of the layer's own block size.
"""

from __future__ import annotations

from typing import Any

from kvcore.errors import ConfigError
from kvcore_vllm.installer import check_type, require_vllm

__all__ = ["get_kv_cache_configs", "plan_options", "check_vllm_runnable",
           "KERNEL_BLOCK_SIZE"]

#: tokens; attention block sizes kvcore picks are multiples of it
KERNEL_BLOCK_SIZE = 16


def plan_options(vllm_config: Any) -> dict[str, Any]:
    """kvcore :func:`~kvcore.plan` options from a vLLM ``VllmConfig`` (max_model_len,
    batch budget, prefix caching, hybrid manager switch, Mamba cache mode, block-count
    override, parallel sizes, speculative tokens, layout)."""
    require_vllm("plan_options()")
    from vllm.config import VllmConfig

    check_type("plan_options()", "vllm_config", vllm_config, VllmConfig,
               "a vLLM 0.32 VllmConfig")
    mc = vllm_config.model_config
    sc = vllm_config.scheduler_config
    cc = vllm_config.cache_config
    pc = vllm_config.parallel_config
    max_len = -1 if getattr(mc, "original_max_model_len", None) == -1 else mc.max_model_len
    layout = getattr(cc, "kv_cache_layout", None)
    return dict(
        max_model_len=max_len,
        max_num_batched_tokens=sc.max_num_batched_tokens,
        enable_prefix_caching=bool(cc.enable_prefix_caching),
        disable_hybrid_kv_cache_manager=bool(
            getattr(sc, "disable_hybrid_kv_cache_manager", False)),
        mamba_cache_mode=getattr(cc, "mamba_cache_mode", "none") or "none",
        num_gpu_blocks_override=cc.num_gpu_blocks_override,
        tensor_parallel_size=pc.tensor_parallel_size,
        decode_context_parallel_size=getattr(pc, "decode_context_parallel_size", 1),
        num_speculative_tokens=int(getattr(vllm_config, "num_speculative_tokens", 0) or 0),
        kernel_block_size=KERNEL_BLOCK_SIZE,
        kv_cache_layout=str(layout) if layout else None,
    )


def check_vllm_runnable(vcfg: Any, vllm_config: Any) -> None:
    """Raise :class:`~kvcore.errors.ConfigError` unless vLLM 0.32's own managers run
    ``vcfg`` (a vLLM ``KVCacheConfig``).

    What vLLM's engine core does with a planned config (``vllm.v1.engine.core``): the
    scheduler sees each ``UniformTypeKVCacheSpecs`` group as its first layer's spec
    (``generate_scheduler_kv_cache_config``), so such a group must hold layers of one
    type (``UniformTypeKVCacheSpecs.is_uniform_type``: one block size, one spec class,
    one sliding window / chunk, as vLLM's own planner groups them) needing the same
    block-table width (``max_num_blocks_per_req``, asserted by vLLM); and every group's
    spec needs a manager in vLLM's ``KVCacheSpecRegistry``
    (``get_manager_for_kv_cache_spec``, which otherwise fails with "No manager
    registered for KVCacheSpec ...").  A group of sliding-window and full-attention
    layers would be managed as its first layer's kind: the other layers' blocks freed
    too early or never.  With prefix caching and several groups, a chunked-local
    group's block size must equal the lcm of the groups' block sizes
    (:func:`_check_chunked_alignment`: vLLM's chunked-local manager asserts it)."""
    from vllm.v1.kv_cache_interface import UniformTypeKVCacheSpecs
    from vllm.v1.kv_cache_spec_registry import KVCacheSpecRegistry

    max_len = vllm_config.model_config.max_model_len
    for gi, g in enumerate(vcfg.kv_cache_groups):
        spec = g.kv_cache_spec
        first = spec
        if isinstance(spec, UniformTypeKVCacheSpecs):
            kinds = sorted({f"{type(s).__name__}"
                            f"{_window_text(s)}" for s in spec.kv_cache_specs.values()})
            if not UniformTypeKVCacheSpecs.is_uniform_type(spec.kv_cache_specs):
                raise ConfigError(
                    f"kvcore's plan puts layers of {', '.join(kinds)} in one block table "
                    f"(group {gi}, {len(g.layer_names)} layers); vLLM 0.32's own managers "
                    "run one kind per group, so this plan needs kvcore's KV-cache manager: "
                    "set KVCORE_VLLM=1 with KVCORE_VLLM_PLANNER=1, or leave "
                    "KVCORE_VLLM_PLANNER unset", field="kv_cache_groups", value=gi)
            widths = {s.max_num_blocks_per_req(vllm_config, max_len)
                      for s in spec.kv_cache_specs.values()}
            if len(widths) > 1:
                raise ConfigError(
                    f"kvcore's plan puts layers needing {sorted(widths)} blocks per request "
                    f"in one block table (group {gi}); vLLM 0.32 needs one width per group: "
                    "use kvcore's KV-cache manager (KVCORE_VLLM=1)",
                    field="kv_cache_groups", value=gi)
            first = spec.first_spec
        if KVCacheSpecRegistry.get_manager_class(first, None) is None:
            raise ConfigError(
                f"group {gi}: vLLM 0.32 has no manager for {type(first).__name__}; this plan "
                "needs kvcore's KV-cache manager (KVCORE_VLLM=1)",
                field="kv_cache_groups", value=gi)
    _check_chunked_alignment(vcfg, vllm_config)


def _check_chunked_alignment(vcfg: Any, vllm_config: Any) -> None:
    """vLLM 0.32's ``ChunkedLocalAttentionManager.find_longest_cache_hit`` asserts that a
    chunked-local group's block size equals the cache-hit alignment ("KV cache groups
    with different block sizes are not compatible with chunked local attention now",
    single_type_kv_cache_manager.py): with prefix caching and several groups the
    alignment is the scheduler block size, the lcm of every group's block size
    (``resolve_kv_cache_block_sizes``; ``HybridKVCacheCoordinator``).  A plan with a
    chunked group of another block size crashes vLLM's Scheduler at the first prefix
    lookup (prober finding P6: 5 of 1,120 probe cases where vLLM's own layout runs)."""
    import math

    from vllm.v1.kv_cache_interface import ChunkedLocalAttentionSpec, UniformTypeKVCacheSpecs

    groups = vcfg.kv_cache_groups
    if len(groups) < 2 or not vllm_config.cache_config.enable_prefix_caching:
        return
    firsts = [g.kv_cache_spec.first_spec if isinstance(g.kv_cache_spec,
                                                       UniformTypeKVCacheSpecs)
              else g.kv_cache_spec for g in groups]
    align = math.lcm(*(g.kv_cache_spec.block_size for g in groups))
    for gi, spec in enumerate(firsts):
        if isinstance(spec, ChunkedLocalAttentionSpec) and spec.block_size != align:
            raise ConfigError(
                f"group {gi} is chunked local attention at block size {spec.block_size} "
                f"beside groups of block sizes "
                f"{sorted({g.kv_cache_spec.block_size for g in groups})}: vLLM 0.32's "
                f"chunked-local manager needs its block size to equal the prefix-hit "
                f"alignment ({align} tokens, the lcm) and asserts otherwise; this plan "
                "needs kvcore's KV-cache manager (KVCORE_VLLM=1)",
                field="kv_cache_groups", value=gi)


def _window_text(spec: Any) -> str:
    w = getattr(spec, "sliding_window", None) or getattr(spec, "attention_chunk_size", None)
    return f" (window {w})" if w else ""


def get_kv_cache_configs(vllm_config: Any, kv_cache_specs: list[dict[str, Any]],
                         available_memory: list[int]) -> list[Any]:
    """One vLLM ``KVCacheConfig`` per worker, planned by kvcore.

    kv_cache_specs: per worker, ``{layer name: vLLM KVCacheSpec}``.
    available_memory: per worker, KV-cache bytes.

    Every returned config is one vLLM's own KV-cache managers run
    (:func:`check_vllm_runnable`, checked here): where kvcore's layout is not (it
    packs layers of two kinds or windows into one block table, which vLLM's engine
    core would manage as its first layer's kind), the call warns and returns vLLM's own
    planner's configs, so it plans whenever vLLM does.

    Raises :class:`~kvcore.errors.ConfigError` when the two lists differ in length, a
    budget is not a non-negative int, :class:`~kvcore.errors.SpecError` for a kind kvcore
    does not have, and kvcore's :class:`~kvcore.errors.NotEnoughMemoryError` (a
    ``ValueError``, like vLLM's) when a worker's budget cannot hold one request.
    With ``max_model_len=-1`` the longest length that fits is written back into
    ``vllm_config.model_config.max_model_len``, as vLLM does.
    """
    require_vllm("get_kv_cache_configs()")
    from vllm.config import VllmConfig

    where = "get_kv_cache_configs()"
    check_type(where, "vllm_config", vllm_config, VllmConfig, "a vLLM 0.32 VllmConfig")
    check_type(where, "kv_cache_specs", kv_cache_specs, (list, tuple),
               "a list (one {layer name: vLLM KVCacheSpec} dict per worker)")
    check_type(where, "available_memory", available_memory, (list, tuple),
               "a list (one KV-cache budget in bytes per worker)")
    for specs in kv_cache_specs:
        check_type(where, "kv_cache_specs", specs, dict,
                   "a list of {layer name: vLLM KVCacheSpec} dicts")
    if len(kv_cache_specs) != len(available_memory) or not kv_cache_specs:
        raise ConfigError(f"get_kv_cache_configs: {len(kv_cache_specs)} spec dicts and "
                          f"{len(available_memory)} memory budgets; give one of each per "
                          "worker", field="available_memory")
    for m in available_memory:
        if not isinstance(m, int) or isinstance(m, bool) or m < 0:
            raise ConfigError(f"get_kv_cache_configs: memory budget {m!r} is not a "
                              "non-negative int (bytes)", field="available_memory",
                              value=repr(m))
    try:
        return _plan_workers(vllm_config, kv_cache_specs, available_memory)
    except _NotRunnable as e:
        # kvcore's layout packs layers vLLM's managers cannot share a block table
        # (e.g. two sliding windows): vLLM plans it, so kvcore must not refuse it; vLLM's
        # own planner gives its layout (the one kvcore's search keeps as its baseline)
        import warnings

        warnings.warn(f"kvcore_vllm: {e.message.split('; ')[0]}, which vLLM 0.32's own "
                      "managers do not run (one kind and window per block table): "
                      "planned with vLLM's own layout instead", stacklevel=2)
        return _vllm_planner()(vllm_config, kv_cache_specs, available_memory)


class _NotRunnable(ConfigError):
    """kvcore's plan is not one vLLM 0.32's own managers run."""


def _vllm_planner() -> Any:
    """vLLM's own ``get_kv_cache_configs`` (the original where the bridge patched it)."""
    from vllm.v1.core import kv_cache_utils

    from kvcore_vllm.installer import _saved

    return _saved.get(("vllm.v1.core.kv_cache_utils", "get_kv_cache_configs"),
                      kv_cache_utils.get_kv_cache_configs)


def _plan_workers(vllm_config: Any, kv_cache_specs: list[dict[str, Any]],
                  available_memory: list[int]) -> list[Any]:
    import dataclasses

    import kvcore
    from kvcore_vllm.specs import from_vllm_spec, to_vllm_config

    opts = plan_options(vllm_config)
    plans = []
    for specs, mem in zip(kv_cache_specs, available_memory):
        layer_specs = {n: from_vllm_spec(s) for n, s in specs.items()}
        plans.append((layer_specs, kvcore.plan(layer_specs, kv_cache_memory_bytes=mem,
                                               **opts)))
    num_blocks = min(int(p.num_blocks or 0) for _, p in plans)
    out = []
    for layer_specs, p in plans:
        if p.num_blocks != num_blocks:
            o = dict(opts, num_gpu_blocks_override=num_blocks)
            if opts["max_model_len"] == -1:
                o["max_model_len"] = min(q.max_model_len for _, q in plans)
            p = kvcore.plan(layer_specs,
                            kv_cache_memory_bytes=int(p.bytes_per_block) * num_blocks,
                            **o)
        vcfg = to_vllm_config(p)
        interval = getattr(vllm_config.cache_config, "prefix_cache_retention_interval", 0)
        if any(f.name == "prefix_cache_retention_interval"
               for f in dataclasses.fields(vcfg)):
            vcfg.prefix_cache_retention_interval = interval
        try:
            check_vllm_runnable(vcfg, vllm_config)
        except ConfigError as e:
            raise _NotRunnable(e.message, **e.extra) from None
        out.append(vcfg)
    if opts["max_model_len"] == -1:
        vllm_config.model_config.max_model_len = min(p.max_model_len for _, p in plans)
    return out
