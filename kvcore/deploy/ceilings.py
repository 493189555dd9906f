"""What vLLM will do at start-up, before it starts: the ceilings that fail a start or void
a feature, each with its fix, and the figures vLLM's log will print.

:func:`check_ceilings` reads a plan (:class:`~kvcore.kv_cache_config.KVCacheConfig`, made
with the budget of an engine ledger, :mod:`kvcore.deploy.engines`) and returns
:class:`Ceiling` entries; ``fatal`` ones are a not-fit (``kvcore plan`` says "does not
start"), the others warnings.

* **Mamba state blocks < max_num_seqs** (fatal from vLLM 0.19, vllm#38270 / vllm#49064:
  "max_num_seqs (1024) exceeds available Mamba cache blocks (969)"): each decode
  sequence holds one Mamba block; the largest ``max_num_seqs`` that starts is the
  number of blocks.  Before 0.19 vLLM capped the CUDA-graph sizes silently (warning).
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

__all__ = ["Ceiling", "check_ceilings", "logged_figures"]


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
        out["gpu_kv_cache_size_tokens"] = nb // max(len(groups), 1) * bs
    elif mc and mml:
        out["gpu_kv_cache_size_tokens"] = int(mc * mml)
    return out


def check_ceilings(cfg: Any, config: Any, ledger: Any,
                   plan_kwargs: dict[str, Any] | None = None) -> list[Ceiling]:
    """The ceilings of one plan under one engine ledger (see the module docstring)."""
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
        mode = kw.get("mamba_cache_mode", "none")
        per_seq = 1 if mode in ("none", None) else 2
        limit = max(nb // per_seq, 0)
        if seqs > limit:
            fatal = version >= (0, 19, 0)
            out.append(Ceiling(
                "mamba_blocks", fatal,
                f"max_num_seqs ({seqs}) exceeds the Mamba cache blocks ({nb}): vLLM "
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
