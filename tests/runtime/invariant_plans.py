"""The plans the invariant driver runs (issue 13): every core kind, Mamba none/align/all
with and without speculative tokens, MLA, R-SWA, kpool, TurboQuant, gemma-like and
gpt-oss-like hybrids, a packed group with two windows, tiny pools.

Each plan is a :class:`PlanCase`: a name and a builder returning ``(KVCacheConfig,
World keyword arguments)``; plans of a plugin that is not installed are skipped
(:func:`available_plans`).
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from kvcore.kv_cache_config import KVCacheConfig, KVCacheGroupSpec
from kvcore.planning import plan
from kvcore.specs import (
    ChunkedLocalAttentionSpec,
    CrossAttentionSpec,
    FullAttentionSpec,
    SinkFullAttentionSpec,
    SlidingWindowSpec,
)

__all__ = ["PlanCase", "PLANS", "available_plans"]


@dataclass(frozen=True)
class PlanCase:
    name: str
    build: Callable[[], tuple[Any, dict[str, Any]]]
    needs: str | None = None  # a plugin module


def _full(bs: int = 4) -> FullAttentionSpec:
    return FullAttentionSpec(block_size=bs, num_kv_heads=1, head_size=8)


def _swa(w: int, bs: int = 4) -> SlidingWindowSpec:
    return SlidingWindowSpec(block_size=bs, num_kv_heads=1, head_size=8, sliding_window=w)


def _plan(layers: dict[str, Any], blocks: int, mml: int = 128, **kw: Any
          ) -> KVCacheConfig:
    return plan(layers, max_model_len=mml, num_gpu_blocks_override=blocks, **kw)


def _groups(blocks: int, *groups: KVCacheGroupSpec) -> KVCacheConfig:
    return KVCacheConfig(num_blocks=blocks, kv_cache_tensors=(), kv_cache_groups=groups)


def _one(spec: Any, blocks: int) -> KVCacheConfig:
    return _groups(blocks, KVCacheGroupSpec(("l0",), spec))


def _mamba(mode: str, S: int, blocks: int = 80, chunk: int | None = None,
           mml: int = 128) -> Any:
    from kvcore_mamba.spec import MambaSpec

    kw: dict[str, Any] = {}
    if chunk is not None:
        kw["mamba_chunk_size"] = chunk
    layers = {"attn.0": _full(4),
              "ssm.0": MambaSpec(block_size=4, shapes=((1, 4), (1, 2, 2)),
                                 dtypes=("bfloat16", "float32"), mamba_cache_mode=mode,
                                 **kw),
              "ssm.1": MambaSpec(block_size=4, shapes=((1, 4), (1, 2, 2)),
                                 dtypes=("bfloat16", "float32"), mamba_cache_mode=mode,
                                 **kw)}
    cfg = _plan(layers, blocks, mml, mamba_cache_mode=mode, num_speculative_tokens=S)
    return cfg, {"num_spec": S, "max_model_len": mml}


def _mamba_two_sizes(S: int, blocks: int = 80) -> Any:
    from kvcore_mamba.spec import MambaSpec

    layers = {"attn.0": FullAttentionSpec(block_size=4, num_kv_heads=4, head_size=8),
              "attn.1": _swa(16, 4),
              "ssm.0": MambaSpec(block_size=4, shapes=((1, 4), (1, 2, 2)),
                                 dtypes=("bfloat16", "float32"), mamba_cache_mode="all",
                                 mamba_chunk_size=2)}
    cfg = _plan(layers, blocks, 128, mamba_cache_mode="all", num_speculative_tokens=S)
    return cfg, {"num_spec": S, "max_model_len": 128}


def _mla(blocks: int) -> Any:
    from kvcore_mla.specs import MLAAttentionSpec

    return _one(MLAAttentionSpec(block_size=4, num_kv_heads=1, head_size=576), blocks), {}


def _rswa(blocks: int) -> Any:
    from kvcore_rswa.spec import RSWASpec

    layers = {"l0": RSWASpec(block_size=4, num_kv_heads=1, head_size=8, rswa_window=6),
              "l1": RSWASpec(block_size=4, num_kv_heads=1, head_size=8, rswa_window=6)}
    return _plan(layers, blocks), {}


def _kpool(S: int, blocks: int) -> Any:
    from kvcore_kpool.spec import KPoolTailSpec

    bs = 8
    layers = {"attn": _full(bs),
              "tail": KPoolTailSpec(block_size=bs, kpool=2, num_speculative_tokens=S,
                                    head_size=8)}
    return _plan(layers, blocks, num_speculative_tokens=S), {"num_spec": S}


def _turboquant(blocks: int) -> Any:
    from kvcore_turboquant.spec import TurboQuantFullAttentionSpec

    return _one(TurboQuantFullAttentionSpec(block_size=4, num_kv_heads=1, head_size=16),
                blocks), {}


def _eagle(case: Any) -> Any:
    cfg, opts = case
    return cfg, {**opts, "use_eagle": True}


def _gemma_like(blocks: int, eagle: bool = False) -> Any:
    layers = {f"l{i}": (_full(4) if i % 6 == 5 else _swa(12, 4)) for i in range(12)}
    return _plan(layers, blocks), {"use_eagle": eagle}


def _gpt_oss_like(blocks: int) -> Any:
    layers = {f"l{i}": (_swa(16, 8) if i % 2 == 0 else _full(8)) for i in range(6)}
    return _plan(layers, blocks), {}


def _packed_two_windows(blocks: int) -> Any:
    specs = [_swa(8, 4), _swa(32, 4), _swa(8, 4), _swa(32, 4)]
    group = KVCacheGroupSpec(tuple(f"l{i}" for i in range(4)), specs[0],
                             layer_specs=tuple(specs))
    return _groups(blocks, group), {}


def _cross(blocks: int) -> Any:
    layers = {"self": _full(4),
              "cross": CrossAttentionSpec(block_size=4, num_kv_heads=1, head_size=8)}
    return _plan(layers, blocks, max_num_encoder_input_tokens=24), {"max_enc": 24}


PLANS: list[PlanCase] = [
    PlanCase("full-bs4", lambda: (_one(_full(4), 48), {})),
    PlanCase("full-bs16-tiny", lambda: (_one(_full(16), 6), {})),
    PlanCase("full-eagle", lambda: (_one(_full(4), 40), {"use_eagle": True})),
    PlanCase("full-no-caching", lambda: (_one(_full(4), 30), {"enable_caching": False})),
    PlanCase("full-spec2", lambda: (_one(_full(4), 48), {"num_spec": 2})),
    PlanCase("sliding-w8", lambda: (_one(_swa(8, 4), 24), {})),
    PlanCase("chunked-local-c8", lambda: (_one(ChunkedLocalAttentionSpec(
        block_size=4, num_kv_heads=1, head_size=8, attention_chunk_size=8), 24), {})),
    PlanCase("sink-full", lambda: (_one(SinkFullAttentionSpec(
        block_size=4, num_kv_heads=1, head_size=8, sink_len=6), 40), {})),
    PlanCase("cross-attention", lambda: _cross(60)),
    PlanCase("llama4-like-chunked+full", lambda: (_groups(
        48, KVCacheGroupSpec(("c0", "c1", "c2"), ChunkedLocalAttentionSpec(
            block_size=4, num_kv_heads=1, head_size=8, attention_chunk_size=16)),
        KVCacheGroupSpec(("f0",), _full(4))), {})),
    PlanCase("gemma-like", lambda: _gemma_like(40)),
    PlanCase("gemma-like-eagle-spec1", lambda: (_gemma_like(40, True)[0],
                                                {"use_eagle": True, "num_spec": 1})),
    PlanCase("gpt-oss-like", lambda: _gpt_oss_like(40)),
    PlanCase("packed-two-windows", lambda: _packed_two_windows(32)),
    PlanCase("tiny-hybrid-full+sliding", lambda: (_groups(
        15, KVCacheGroupSpec(("f0",), _full(4)),
        KVCacheGroupSpec(("s0", "s1"), _swa(8, 4))), {"max_model_len": 32})),
    PlanCase("tiny-full-bs4-spec1", lambda: (_one(_full(4), 10),
                                             {"num_spec": 1, "max_model_len": 32})),
    PlanCase("mla", lambda: _mla(40), "kvcore_mla"),
    PlanCase("rswa", lambda: _rswa(40), "kvcore_rswa"),
    PlanCase("kpool-spec0", lambda: _kpool(0, 40), "kvcore_kpool"),
    PlanCase("kpool-spec2", lambda: _kpool(2, 40), "kvcore_kpool"),
    PlanCase("turboquant", lambda: _turboquant(40), "kvcore_turboquant"),
    PlanCase("mamba-none", lambda: _mamba("none", 0), "kvcore_mamba"),
    PlanCase("mamba-none-spec2", lambda: _mamba("none", 2), "kvcore_mamba"),
    PlanCase("mamba-align", lambda: _mamba("align", 0), "kvcore_mamba"),
    PlanCase("mamba-align-spec2", lambda: _mamba("align", 2), "kvcore_mamba"),
    PlanCase("mamba-all-chunk2", lambda: _mamba("all", 0, chunk=2), "kvcore_mamba"),
    PlanCase("mamba-all-chunk4-spec2", lambda: _mamba("all", 2, chunk=4), "kvcore_mamba"),
    PlanCase("mamba-all-nochunk", lambda: _mamba("all", 0), "kvcore_mamba"),
    PlanCase("mamba-align-tiny", lambda: _mamba("align", 1, blocks=14, mml=32), "kvcore_mamba"),
    # EAGLE on every hybrid layout (issue 24, item 6: vLLM 0.32's multi-group drop)
    PlanCase("gpt-oss-like-eagle-spec2", lambda: (_gpt_oss_like(40)[0],
                                                  {"use_eagle": True, "num_spec": 2})),
    PlanCase("tiny-hybrid-full+sliding-eagle", lambda: (_groups(
        15, KVCacheGroupSpec(("f0",), _full(4)),
        KVCacheGroupSpec(("s0", "s1"), _swa(8, 4))),
        {"max_model_len": 32, "use_eagle": True, "num_spec": 1})),
    PlanCase("llama4-like-chunked+full-eagle", lambda: (_groups(
        48, KVCacheGroupSpec(("c0", "c1", "c2"), ChunkedLocalAttentionSpec(
            block_size=4, num_kv_heads=1, head_size=8, attention_chunk_size=16)),
        KVCacheGroupSpec(("f0",), _full(4))), {"use_eagle": True, "num_spec": 1})),
    PlanCase("mixed-block-sizes-eagle", lambda: (_groups(
        40, KVCacheGroupSpec(("f0",), _full(8)),
        KVCacheGroupSpec(("s0",), _swa(12, 4))), {"use_eagle": True})),
    PlanCase("mamba-align-eagle-spec2", lambda: _eagle(_mamba("align", 2)), "kvcore_mamba"),
    PlanCase("mamba-all-eagle", lambda: _eagle(_mamba("all", 0, chunk=2)), "kvcore_mamba"),
    # Mamba all beside two attention block sizes: the state takes their lcm (item 7)
    PlanCase("mamba-all-two-attention-sizes", lambda: _mamba_two_sizes(1), "kvcore_mamba"),
]


def available_plans(names: list[str] | None = None) -> list[PlanCase]:
    """The plans whose plugins are installed (optionally only ``names``)."""
    out = []
    for p in PLANS:
        if names and p.name not in names:
            continue
        if p.needs and importlib.util.find_spec(p.needs) is None:
            continue
        out.append(p)
    return out
