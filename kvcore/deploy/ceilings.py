"""What vLLM will do at start-up, before it starts: the ceilings that fail a start or void
a feature, each with its fix, and the figures vLLM's log will print.

:func:`check_ceilings` reads a plan (:class:`~kvcore.kv_cache_config.KVCacheConfig`, made
with the budget of an engine ledger, :mod:`kvcore.deploy.engines`) and returns
:class:`Ceiling` entries; ``fatal`` ones are a not-fit (``kvcore plan`` says "does not
start"), the others warnings.

* **Mamba state blocks < max_num_seqs** (fatal from vLLM 0.19, vllm#38270 / vllm#49064:
  "max_num_seqs (1024) exceeds available Mamba cache blocks (969)"): each decode
  sequence holds one Mamba block (two in ``align`` mode: its running state and a
  checkpoint); the largest ``max_num_seqs`` that starts is the number of blocks (half
  of it in ``align`` mode), and the message states that count.  Before 0.19 vLLM capped the CUDA-graph sizes silently (warning).
* **Block size above typical prompts** (vllm#40696, vllm#54504: hybrid unification
  inflates ``block_size`` to 528 or 4,224 tokens): prefix caching reuses whole blocks
  only, so a prompt of L tokens can reuse at most ``floor((L - 1) / B) x B`` tokens;
  prompts of B tokens or fewer never hit.
* **Mamba align with prefix caching**: states are checkpointed every ``block_size``
  tokens; a shared prefix shorter than one block is never checkpointed.
* **SWA admission reserve** (vllm#54703): each running request holds
  ``cdiv(sliding_window, block_size) + 1`` blocks of a sliding-window group; on a small
  pool this caps concurrency below the full-attention figure.
* **The longest max_model_len that starts** (vLLM's "estimated maximum model length").
* **The log's figures** ("GPU KV cache size: N tokens", "Maximum concurrency for L tokens
  per request: Xx"), computed as vLLM computes them (``int(max_concurrency x
  max_model_len)``, vllm/v1/core/kv_cache_utils.py@0.32 ``_report_kv_cache_config``),
  beside kvcore's true capacity: on hybrids the log's token figure counts tokens of
  every group's blocks as if one request (vllm#54662, vllm#40691).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = ["Ceiling", "vllm_layout"]


@dataclass(frozen=True)
class Ceiling:
    """One ceiling: ``kind`` (mamba_blocks, block_size, mamba_align, swa_reserve,
    max_model_len, cuda_graphs, logged_figures), ``fatal`` (vLLM refuses to start),
    ``message`` (what and the fix), ``limit`` (the largest value that works, where one
    applies) and ``source``."""

    kind: str
    fatal: bool
    message: str
    limit: int | None = None
    source: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "fatal": self.fatal, "message": self.message,
                "limit": self.limit, "source": self.source}


def _groups(config: Any) -> list[Any]:
    return list(getattr(config, "kv_cache_groups", []) or [])


def _spec_kind(group: Any) -> str:
    spec = getattr(group, "spec", None)
    name = type(spec).__name__.lower()
    if "mamba" in name:
        return "mamba"
    if "sliding" in name or getattr(spec, "sliding_window", None):
        return "swa"
    return name


def logged_figures(config: Any, engine: Any = None) -> dict[str, Any]:
    """The figures vLLM's start-up log prints for this plan, as that release computes them.

    * V0: "# GPU blocks: N" and "Maximum concurrency for L tokens per request:
      N x block_size / L" (vllm/executor/executor_base.py@v0.7.3);
    * V1 before 0.21: "GPU KV cache size: (num_blocks // num_groups) x block_size tokens"
      (vllm/v1/core/kv_cache_utils.py@v0.10.1 ``_report_kv_cache_config``): on a hybrid
      the pool's blocks are split evenly over the groups in this figure, whatever each
      group needs (vllm#40691);
    * V1 0.21+: ``int(max_concurrency x max_model_len)`` (kv_cache_utils.py@0.32; quoted
      in vllm#51041), ``max_concurrency = num_blocks / blocks per request``: a derived
      figure, not the tokens the pool holds (vllm#54662).

    Where vLLM's own layout differs from kvcore's (``stats.vllm_own_layout``,
    :func:`vllm_layout`), the figures are computed on vLLM's layout: the log is vLLM's.
    Returns ``gpu_kv_cache_size_tokens``, ``max_concurrency`` (as logged),
    ``num_gpu_blocks`` (V0) and kvcore's ``max_concurrency_batched`` (its tighter figure).
    """
    from kvcore.deploy.engines import get_engine

    p = get_engine(engine)
    version = p.version if p.version != (0, 0, 0) else p.first
    s = config.stats
    mc = s.get("max_concurrency")
    mml = getattr(config, "max_model_len", None) or s.get("estimated_max_model_len")
    nb = int(getattr(config, "num_blocks", 0) or 0)
    groups = _groups(config)
    sizes = [int(getattr(g.spec, "block_size", 0) or 0) for g in groups
             if _spec_kind(g) != "mamba"] or [0]
    n_groups = len(groups)
    vl = s.get("vllm_own_layout")
    if vl and vl.get("num_blocks") and not vl.get("same_as_kvcore"):
        # the log is vLLM's: computed on vLLM's own layout (vllm_layout)
        nb, mc, n_groups = int(vl["num_blocks"]), vl.get("max_concurrency"), vl["num_groups"]
        sizes = [g["block_size"] for g in vl["groups"] if g["kind"] != "mamba"] or [0]
    bs = min(sizes)
    out: dict[str, Any] = {"max_concurrency": mc, "gpu_kv_cache_size_tokens": None,
                           "max_concurrency_batched": s.get("max_concurrency_batched")}
    if not nb:
        return out
    if not p.v1:
        out["num_gpu_blocks"] = nb
        out["gpu_kv_cache_size_tokens"] = nb * bs
        out["max_concurrency"] = nb * bs / mml if mml else None
    elif version < (0, 21, 0):
        out["gpu_kv_cache_size_tokens"] = nb // max(n_groups, 1) * bs
    elif mc and mml:
        out["gpu_kv_cache_size_tokens"] = int(mc * mml)
    return out


def check_ceilings(cfg: Any, config: Any, ledger: Any,
                   plan_kwargs: dict[str, Any] | None = None,
                   vllm: dict[str, Any] | None = None) -> list[Ceiling]:
    """The ceilings of one plan under one engine ledger (see the module docstring).

    ``vllm`` is :func:`vllm_layout`'s answer: where it is given, the ceilings that
    predict what vLLM does (Mamba blocks against ``max_num_seqs``) use vLLM's own layout's
    block count, not the one kvcore's search found (the message names both)."""
    kw = plan_kwargs or {}
    out: list[Ceiling] = []
    p = ledger.engine
    version = p.version if p.version != (0, 0, 0) else p.first
    groups = _groups(config)
    nb = int(getattr(config, "num_blocks", 0) or 0)
    seqs = ledger.max_num_seqs
    kinds = [_spec_kind(g) for g in groups]
    block_size = 0
    for g, k in zip(groups, kinds):
        if k != "mamba":  # a Mamba spec's block_size is max_model_len (one state)
            block_size = max(block_size, int(getattr(g.spec, "block_size", 0) or 0))
    # Mamba blocks vs max_num_seqs
    if "mamba" in kinds and nb and config.stats.get("fits", True) is not False:
        # vLLM 0.32 compares max_num_seqs with the block count in every cache mode:
        # "Each decode sequence requires one Mamba cache block" (config/compilation.py
        # @0.32, the FULL-cudagraph check), align included
        vnb = (vllm or {}).get("num_blocks") or nb
        limit = max(vnb, 0)
        if seqs > limit:
            fatal = version >= (0, 19, 0)
            other = "" if vnb == nb else (
                f" on vLLM's own layout ({(vllm or {}).get('num_groups')} groups; "
                f"kvcore's layout would have {nb} blocks)")
            need = f"max_num_seqs ({seqs}) exceeds the Mamba cache blocks ({vnb})"
            out.append(Ceiling(
                "mamba_blocks", fatal,
                f"{need}{other}: vLLM "
                + ("refuses to start" if fatal else "caps its CUDA-graph sizes")
                + f"; give --max-num-seqs {limit} or less (or a shorter --max-model-len / "
                  f"more memory)", limit=limit,
                source="vllm#38270, vllm#49064 (fatal from 0.19)"))
    # block size vs prompts
    prefix = not kw.get("no_prefix_caching", False) and kw.get("enable_prefix_caching", True)
    if prefix and block_size >= 512:
        out.append(Ceiling(
            "block_size", False,
            f"block_size is {block_size} tokens (hybrid unification): prefix caching reuses "
            f"whole blocks only, so prompts of {block_size} tokens or fewer never hit and a "
            f"prompt of L tokens reuses at most floor((L-1)/{block_size})x{block_size}",
            limit=block_size, source="vllm#40696, vllm#54504"))
    if prefix and "mamba" in kinds and kw.get("mamba_cache_mode") == "align":
        out.append(Ceiling(
            "mamba_align", False,
            f"--mamba-cache-mode align checkpoints states every {block_size} tokens: a "
            f"shared prefix shorter than {block_size} tokens (a system prompt) is never "
            f"checkpointed and never hits", limit=block_size,
            source="vllm/v1/core/single_type_kv_cache_manager.py@0.32 (MambaManager)"))
    # SWA admission reserve
    for g in groups:
        spec = g.spec
        win = getattr(spec, "sliding_window", None)
        bs = getattr(spec, "block_size", 0) or 0
        if win and bs and nb:
            reserve = -(-int(win) // int(bs)) + 1
            cap = nb // reserve
            if cap < seqs:
                out.append(Ceiling(
                    "swa_reserve", False,
                    f"each running request holds {reserve} blocks of the sliding-window "
                    f"group (window {win}, block {bs}): at most {cap} requests run at once "
                    f"on {nb} blocks, below max_num_seqs {seqs}", limit=cap,
                    source="vllm#54703"))
            break
    # the longest max_model_len that starts
    if config.stats.get("fits") is False or not nb:
        est = config.stats.get("longest_max_model_len") or config.stats.get(
            "estimated_max_model_len")
        out.append(Ceiling("max_model_len", True,
                           "the KV budget cannot hold one request of max_model_len"
                           + (f"; the longest that starts is about {est}" if est else ""),
                           limit=est, source="_check_enough_kv_cache_memory "
                           "(kv_cache_utils.py@0.32); V0: 'max seq len is larger than the "
                           "maximum number of tokens that can be stored'"))
    for w in ledger.warnings:
        out.append(Ceiling("cuda_graphs", False, w, source="capture_model"))
    lf = logged_figures(config, p)
    if lf.get("gpu_kv_cache_size_tokens") is not None:
        mc = lf.get("max_concurrency") or 0.0
        msg = (f"vLLM's log will print 'GPU KV cache size: {lf['gpu_kv_cache_size_tokens']:,} "
               f"tokens' and 'Maximum concurrency for {config.max_model_len:,} tokens per "
               f"request: {mc:.2f}x'")
        if len(groups) > 1:
            msg += (f"; on this {len(groups)}-group layout the token figure is derived, not "
                    f"what the pool holds: plan with {config.stats.get('max_concurrency', 0):.2f}"
                    f" requests of max_model_len at once")
        out.append(Ceiling("logged_figures", False, msg,
                           limit=lf["gpu_kv_cache_size_tokens"],
                           source="_report_kv_cache_config (kv_cache_utils.py@0.32); "
                                  "vllm#54662, vllm#40691"))
    return out


def vllm_layout(cfg: Any, config: Any, plan_kwargs: dict[str, Any] | None = None
                ) -> dict[str, Any] | None:
    """vLLM 0.32's own layout of the model's layers, beside the one kvcore planned.

    vLLM groups layers by its own rule (one group when every layer shares a block table,
    else the unified-page hybrid: groups of the smallest bucket's size, one block size
    unified so that every group's page has the same bytes; vLLM does not turn windows
    longer than ``max_model_len`` into full attention) -- kvcore's
    :func:`kvcore.grouping.vllm_layout_of`, the same function the planner's baseline
    (``PlanStats.vllm_layout``) comes from, scored on the same budget.  kvcore's own
    search may pick a layout with more blocks; what vLLM *does* (how many Mamba blocks
    it has against ``max_num_seqs``, what its log prints) follows this one.

    Returns ``{"strategy", "num_groups", "groups": [{"kind", "block_size",
    "num_layers", "blocks_per_request"}], "num_blocks", "max_concurrency",
    "bytes_per_block", "same_as_kvcore"}`` (``num_blocks``: bytes per rank // bytes per
    block id, vLLM's ``get_kv_cache_config_from_groups``; None under pipeline
    parallelism, where the stages' split decides), or None without a budget, when the
    layers cannot be rebuilt (a model no installed plugin serves), or where vLLM 0.32's
    planner raises on them (:func:`kvcore.grouping.vllm_refusal`).
    """
    from kvcore.grouping import blocks_per_request, bytes_per_block_of, vllm_layout_of
    from kvcore.kv_cache_config import KVCacheConfig
    from kvcore.models.config import CacheConfig, ModelConfig
    from kvcore.models.planner import layer_specs_for
    from kvcore.specs import PlanContext
    from kvcore.units import check_instance

    check_instance(cfg, ModelConfig, "cfg", where="vllm_layout",
                   hint="kvcore.models.load_model_config")
    check_instance(config, KVCacheConfig, "config", where="vllm_layout",
                   hint="kvcore.plan_model")
    if plan_kwargs is not None:
        check_instance(plan_kwargs, dict, "plan_kwargs", where="vllm_layout")
    kw = plan_kwargs or {}
    budget = config.stats.get("kv_cache_memory_bytes")
    if isinstance(budget, (list, tuple)):
        budget = min(budget) if budget else None
    mml = int(getattr(config, "max_model_len", 0) or 0)
    if not budget or budget <= 0 or mml <= 0:
        return None
    tp = int(kw.get("tensor_parallel_size", 1) or 1)
    pp = int(kw.get("pipeline_parallel_size", 1) or 1)
    ctx = PlanContext(max_model_len=mml,
                      max_num_batched_tokens=int(kw.get("max_num_batched_tokens") or 8192),
                      tensor_parallel_size=tp, pipeline_parallel_size=pp,
                      mamba_cache_mode=kw.get("mamba_cache_mode", "none") or "none",
                      num_speculative_tokens=int(kw.get("num_speculative_tokens", 0) or 0))
    try:
        cache = CacheConfig(block_size=kw.get("block_size"),
                            kv_cache_dtype=kw.get("kv_cache_dtype", "auto"),
                            tensor_parallel_size=tp, pipeline_parallel_size=pp,
                            mamba_cache_mode=kw.get("mamba_cache_mode", "none"),
                            num_speculative_tokens=kw.get("num_speculative_tokens", 0),
                            include_mtp_layers=kw.get("include_mtp_layers", False),
                            mamba_ssm_cache_dtype=kw.get("mamba_ssm_cache_dtype"))
        specs = layer_specs_for(cfg, cache)
        # the one model of vLLM's layout (the planner's baseline, PlanStats.vllm_layout)
        vl = vllm_layout_of(
            specs, ctx=ctx, kv_cache_memory_bytes=int(budget),
            kernel_block_size=kw.get("kernel_block_size"),
            disable_hybrid_kv_cache_manager=kw.get("disable_hybrid_kv_cache_manager",
                                                   False),
            enable_prefix_caching=bool(kw.get("enable_prefix_caching", True)))
    except Exception:  # noqa: BLE001 - a layout we cannot rebuild is reported as None
        return None
    if vl is None:  # vLLM's planner raises on these layers (grouping.vllm_refusal)
        return None
    lay = vl.layout
    groups = lay.groups
    sc = vl.score
    bpb = bytes_per_block_of(groups)
    per_group = []
    for g in groups:
        spec = g.spec
        per_group.append({
            "kind": getattr(spec, "kind", type(spec).__name__),
            "block_size": int(getattr(spec, "block_size", 0) or 0),
            "num_layers": len(g.layer_names),
            "blocks_per_request": blocks_per_request([g], ctx, mml)})
    mine = [(getattr(g.spec, "kind", ""), int(getattr(g.spec, "block_size", 0) or 0),
             len(g.layer_names)) for g in _groups(config)]
    theirs = [(d["kind"], d["block_size"], d["num_layers"]) for d in per_group]
    return {"strategy": lay.strategy, "num_groups": len(groups), "groups": per_group,
            # one budget per rank; with PP the stages' layer split decides (not rebuilt)
            "num_blocks": (int(budget) // bpb if bpb else 0) if pp == 1 else None,
            "bytes_per_block": bpb,
            "max_concurrency": sc.max_concurrency,
            "same_as_kvcore": sorted(mine) == sorted(theirs)}
