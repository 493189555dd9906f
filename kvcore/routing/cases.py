"""The plans of the routing conformance vectors: each core kind and hybrid, and the
plugin kinds whose plugin is installed (tests/data/routing_vectors/, made by
scripts/gen_routing_vectors.py).

Each :class:`Case` is a name, a builder returning a ``KVCacheConfig``, the workload
options of :func:`kvcore.routing.vectors.generate` and the plugin module it needs.
Small pools (tens of blocks) so that eviction, windows and resets all happen within
a few dozen requests.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

__all__ = ["Case", "CASES", "available_cases"]


@dataclass(frozen=True)
class Case:
    name: str
    build: Callable[[], Any]
    options: dict[str, Any] = field(default_factory=dict)
    needs: str | None = None


def _full(bs: int = 4) -> Any:
    from kvcore.specs import FullAttentionSpec

    return FullAttentionSpec(block_size=bs, num_kv_heads=1, head_size=8)


def _swa(w: int, bs: int = 4) -> Any:
    from kvcore.specs import SlidingWindowSpec

    return SlidingWindowSpec(block_size=bs, num_kv_heads=1, head_size=8, sliding_window=w)


def _groups(blocks: int, *groups: Any, mml: int = 128) -> Any:
    from kvcore.kv_cache_config import KVCacheConfig

    return KVCacheConfig(num_blocks=blocks, kv_cache_tensors=(), kv_cache_groups=groups,
                         max_model_len=mml)


def _g(names: tuple[str, ...], spec: Any) -> Any:
    from kvcore.kv_cache_config import KVCacheGroupSpec

    return KVCacheGroupSpec(names, spec)


def _plan(layers: dict[str, Any], blocks: int, mml: int = 128, **kw: Any) -> Any:
    from kvcore.planning import plan

    return plan(layers, max_model_len=mml, num_gpu_blocks_override=blocks, **kw)


def _chunked(c: int, bs: int = 4) -> Any:
    from kvcore.specs import ChunkedLocalAttentionSpec

    return ChunkedLocalAttentionSpec(block_size=bs, num_kv_heads=1, head_size=8,
                                     attention_chunk_size=c)


def _mamba(mode: str, blocks: int = 60, chunk: int | None = None) -> Any:
    from kvcore_mamba.spec import MambaSpec

    kw: dict[str, Any] = {} if chunk is None else {"mamba_chunk_size": chunk}
    state = MambaSpec(block_size=4, shapes=((1, 4), (1, 2, 2)),
                      dtypes=("bfloat16", "float32"), mamba_cache_mode=mode, **kw)
    return _plan({"attn.0": _full(4), "ssm.0": state, "ssm.1": state}, blocks,
                 mamba_cache_mode=mode)


def _mla(blocks: int) -> Any:
    from kvcore_mla.specs import MLAAttentionSpec

    return _groups(blocks, _g(("l0",), MLAAttentionSpec(block_size=4, num_kv_heads=1,
                                                        head_size=576)))


def _rswa(blocks: int) -> Any:
    from kvcore_rswa.spec import RSWASpec

    s = RSWASpec(block_size=4, num_kv_heads=1, head_size=8, rswa_window=6)
    return _plan({"l0": s, "l1": s}, blocks)


def _kpool(blocks: int) -> Any:
    from kvcore_kpool.spec import KPoolTailSpec

    return _plan({"attn": _full(8), "tail": KPoolTailSpec(block_size=8, kpool=2,
                                                          head_size=8)}, blocks)


def _turboquant(blocks: int) -> Any:
    from kvcore_turboquant.spec import TurboQuantFullAttentionSpec

    return _groups(blocks, _g(("l0",), TurboQuantFullAttentionSpec(
        block_size=4, num_kv_heads=1, head_size=16)))


def _sink(blocks: int) -> Any:
    from kvcore.specs import SinkFullAttentionSpec

    return _groups(blocks, _g(("l0",), SinkFullAttentionSpec(
        block_size=4, num_kv_heads=1, head_size=8, sink_len=6)))


def _gemma_like(blocks: int) -> Any:
    return _plan({f"l{i}": (_full(4) if i % 6 == 5 else _swa(12, 4)) for i in range(12)},
                 blocks)


def _mixed_block_sizes(blocks: int) -> Any:
    # a full-attention group of 8-token blocks and a window group of 4-token blocks:
    # the hash block size is 4, the full group keys a block by every second hash
    return _groups(blocks, _g(("f0",), _full(8)), _g(("s0",), _swa(8, 4)))


CASES: list[Case] = [
    Case("full", lambda: _groups(40, _g(("l0",), _full(4)))),
    Case("full-eagle", lambda: _groups(40, _g(("l0",), _full(4))), {"use_eagle": True}),
    Case("full-reset", lambda: _groups(48, _g(("l0",), _full(4))), {"reset_every": 5}),
    Case("sliding", lambda: _groups(24, _g(("l0",), _swa(8, 4)))),
    Case("sliding+full", lambda: _gemma_like(40)),
    Case("sliding+full-eagle", lambda: _gemma_like(40), {"use_eagle": True}),
    # a small pool under long prompts: the window group's blocks are evicted before
    # the full group's, where an attention-group-only router claims false hits
    Case("sliding+full-pressure", lambda: _groups(30, _g(("f0",), _full(4)),
                                                   _g(("s0",), _swa(8, 4))),
         {"num_requests": 40, "max_prompt": 100}),
    Case("sliding+full-mixed-block-sizes", lambda: _mixed_block_sizes(40)),
    Case("chunked", lambda: _groups(24, _g(("l0",), _chunked(8)))),
    Case("chunked+full", lambda: _groups(48, _g(("c0", "c1"), _chunked(16)),
                                          _g(("f0",), _full(4)))),
    Case("sink-full", lambda: _sink(40)),
    Case("mamba-align+full", lambda: _mamba("align"), needs="kvcore_mamba"),
    Case("mamba-all+full", lambda: _mamba("all", blocks=100, chunk=2), needs="kvcore_mamba"),
    Case("mla", lambda: _mla(40), needs="kvcore_mla"),
    Case("rswa", lambda: _rswa(40), needs="kvcore_rswa"),
    Case("kpool+full", lambda: _kpool(40), needs="kvcore_kpool"),
    Case("turboquant", lambda: _turboquant(40), needs="kvcore_turboquant"),
]


def available_cases(names: list[str] | None = None) -> list[Case]:
    """The cases whose plugin is installed (optionally only ``names``)."""
    return [c for c in CASES if (not names or c.name in names)
            and (c.needs is None or importlib.util.find_spec(c.needs) is not None)]
