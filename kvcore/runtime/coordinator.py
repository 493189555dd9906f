"""Coordinators: one manager per KV-cache group, and the prefix-hit search across them.

* :class:`NoPrefixCacheCoordinator`: caching off (by option, or because a group that
  cannot restore its content from the prefix, e.g. a Mamba state in ``none`` mode,
  limits hits); every lookup misses.
* :class:`UnitaryCoordinator`: exactly one group prefix caches (others, such as cross
  attention, are neutral): its own left-to-right or windowed search.
* :class:`HybridCoordinator`: several caching groups (full attention + sliding window,
  ...).  A hit of ``L`` tokens is usable only if *every* group can serve it, so ``L``
  starts at the request's limit and each group's search shrinks it, round after round,
  until all groups agree (the settled ``L`` is a multiple of the least common multiple
  of the groups' block sizes).

With EAGLE the last matched block is dropped (the drafter recomputes its hidden
states), by vLLM 0.32's multi-group rule (``HybridKVCacheCoordinator.
find_longest_cache_hit`` with ``eagle_proof_margin``): each EAGLE group searches one
block past the candidate length and drops its last matched block, at most once per
candidate length (a group that shortens the hit without dropping makes the others drop
again: vLLM issue #32802, where a block was dropped per group per round and a full +
sliding-window resend fell to 0 hit tokens).  Full attention (a left-to-right,
downward-closed search) searches once and is trimmed; a sliding window asks for one
contiguous block more and pops it; another windowed kind (chunked local attention,
which vLLM 0.32 refuses with EAGLE) drops by searching again one block shorter, so the
recomputed block's chunk is held; a recurrent state (``eagle_drops_hit_block = False``)
takes no margin and never drops.  One caching group: its own search, then the drop (no
margin, as vLLM's ``UnitaryKVCacheCoordinator``).

Each group's manager class comes from the registry: ``get_registry().manager_class(
group.spec)``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from kvcore.runtime.block_pool import BlockPool, KVCacheBlock
from kvcore.runtime.managers import SingleTypeManager, SlidingWindowManager

__all__ = [
    "KVCacheCoordinator",
    "NoPrefixCacheCoordinator",
    "UnitaryCoordinator",
    "HybridCoordinator",
    "make_coordinator",
    "runtime_spec",
]


def runtime_spec(group: Any, group_id: int = 0) -> Any:
    """The spec a group's manager frees and looks up by: ``group.spec``, except that
    in a packed group whose layers have different windows the manager takes the
    LARGEST ``sliding_window`` among the layers (a block may be freed only when no
    layer of the group reads it any more, and a hit must hold every layer's window).
    Each layer keeps its own window in ``group.layer_specs`` for its kernel.

    Local-attention chunks: a block before the current chunk start of the largest
    ``attention_chunk_size`` is outside every layer's chunk only when each size divides
    the largest; otherwise :class:`~kvcore.errors.ConfigError` (no single chunk rule
    serves the group).  A windowed or chunked group holding a layer of another kind
    (e.g. a full-attention layer, which reads every block) is a ConfigError naming the
    layers."""
    specs = getattr(group, "layer_specs", None)
    spec = group.spec
    if not specs:
        return spec
    import dataclasses

    # a group whose manager frees blocks (a window or a local chunk) may hold only
    # layers freed by the same rule: a layer that keeps more (full attention) would read
    # freed blocks.  The planner promotes such layers to full attention instead.
    from kvcore.specs import ChunkedLocalAttentionSpec, SlidingWindowSpec

    skip = "sliding_window" if isinstance(spec, SlidingWindowSpec) else \
        "attention_chunk_size" if isinstance(spec, ChunkedLocalAttentionSpec) else None
    if skip is not None:
        names = getattr(group, "layer_names", ()) or [f"#{i}" for i in range(len(specs))]
        bad = [f"{n} ({getattr(s, 'kind', type(s).__name__)})"
               for n, s in zip(names, specs)
               if type(s) is not type(spec) or not getattr(s, skip, None)]
        if bad:
            from kvcore.errors import ConfigError

            raise ConfigError(
                f"group {group_id} is managed as {getattr(spec, 'kind', spec)!r} (it "
                f"frees blocks outside the {skip}) but holds layers that need blocks it "
                f"would free: {', '.join(bad[:6])}; one block table serves a group only "
                f"when every layer is kept as the group's spec (plan such layers as "
                f"full attention, as the planner does)", field="layer_specs",
                value=bad[:6], group_id=group_id)

    changes: dict[str, Any] = {}
    windows = [w for w in (getattr(s, "sliding_window", None) for s in specs) if w]
    if windows and getattr(spec, "sliding_window", None) and \
            max(windows) != spec.sliding_window:
        changes["sliding_window"] = max(windows)
    chunks = [c for c in (getattr(s, "attention_chunk_size", None) for s in specs) if c]
    if chunks and getattr(spec, "attention_chunk_size", None) and len(set(chunks)) > 1:
        big = max(chunks)
        if any(big % c for c in chunks):
            from kvcore.errors import ConfigError

            raise ConfigError(
                f"group {group_id} mixes attention_chunk_size {sorted(set(chunks))}; "
                f"one block table can serve several chunk sizes only when each divides "
                f"the largest", field="attention_chunk_size", value=sorted(set(chunks)))
        if big != spec.attention_chunk_size:
            changes["attention_chunk_size"] = big
    if not changes or not dataclasses.is_dataclass(spec):
        return spec
    return dataclasses.replace(spec, **changes)  # type: ignore[type-var]


class KVCacheCoordinator:
    """Builds the managers of every group; subclasses implement the hit search.

    Attributes
    ----------
    managers: one :class:`SingleTypeManager` per group, in group order.
    caching_managers: the managers whose groups prefix cache.
    hash_block_size: gcd of the caching groups' block sizes (tokens per request hash).
    alignment: lcm of the caching groups' block sizes (hit lengths are multiples).
    """

    def __init__(self, kv_cache_config: Any, block_pool: BlockPool, *, max_model_len: int,
                 enable_caching: bool, use_eagle: bool,
                 max_num_batched_tokens: int = 8192) -> None:
        from kvcore.registry import get_registry

        max_model_len, max_num_batched_tokens = _check_args(
            type(self).__name__, kv_cache_config, block_pool, max_model_len,
            max_num_batched_tokens, enable_caching, use_eagle)
        reg = get_registry()
        groups = kv_cache_config.kv_cache_groups
        self.block_pool = block_pool
        self.use_eagle = use_eagle
        classes = [reg.manager_class(g.spec) for g in groups]
        caching_sizes = [g.spec.block_size for g in groups
                         if getattr(g.spec, "participates_in_prefix_caching", True)]
        self.hash_block_size = math.gcd(*caching_sizes) if caching_sizes else \
            (groups[0].spec.block_size if groups else 16)
        self.managers: list[SingleTypeManager] = []
        for gid, (g, cls) in enumerate(zip(groups, classes)):
            if cls is None:
                from kvcore.errors import ConfigError

                raise ConfigError(
                    f"group {gid} is of kind {g.spec.kind!r}, which has no KV cache "
                    f"manager (it needs no KV cache); planning should not make a group "
                    f"of it", field="kv_cache_groups", kind=g.spec.kind)
            hbs = self.hash_block_size if g.spec.block_size % self.hash_block_size == 0 \
                else g.spec.block_size
            self.managers.append(cls(
                runtime_spec(g, gid), block_pool, gid, enable_caching=enable_caching,
                max_model_len=max_model_len, hash_block_size=hbs, use_eagle=use_eagle,
                max_num_batched_tokens=max_num_batched_tokens))
        self.caching_managers = [m for m in self.managers if m.enable_caching]
        sizes = [m.block_size for m in self.caching_managers]
        self.alignment = math.lcm(*sizes) if sizes else 1

    def find_longest_cache_hit(self, block_hashes: Sequence[bytes], max_length: int,
                               ) -> tuple[list[list[KVCacheBlock]], int]:
        """Per-group hit blocks and the hit length in tokens (at most ``max_length``)."""
        raise NotImplementedError

    def _empty_hit(self) -> list[list[KVCacheBlock]]:
        return [[] for _ in self.managers]


class NoPrefixCacheCoordinator(KVCacheCoordinator):
    """Prefix caching off: every lookup misses."""

    def find_longest_cache_hit(self, block_hashes: Sequence[bytes], max_length: int,
                               ) -> tuple[list[list[KVCacheBlock]], int]:
        return self._empty_hit(), 0


class UnitaryCoordinator(KVCacheCoordinator):
    """One caching group: its own search (EAGLE drops the last hit block, except for
    a group whose ``eagle_drops_hit_block`` is False)."""

    def __init__(self, *args: Any, **kw: Any) -> None:
        super().__init__(*args, **kw)
        self._m = self.caching_managers[0]
        self._gid = self._m.group_id

    def find_longest_cache_hit(self, block_hashes: Sequence[bytes], max_length: int,
                               ) -> tuple[list[list[KVCacheBlock]], int]:
        m = self._m
        bs = m.block_size
        if self.use_eagle and m.eagle_drops_hit_block:
            blocks = m.find_longest_cache_hit(block_hashes, max_length, bs)
            if blocks:
                length = (len(blocks) - 1) * bs
                blocks = m.find_longest_cache_hit(block_hashes, length, 0) \
                    if m.skips_blocks else blocks[:-1]
            else:
                length = 0
        else:
            blocks = m.find_longest_cache_hit(block_hashes, max_length, 0)
        length = len(blocks) * bs
        out = self._empty_hit()
        out[self._gid] = blocks
        return out, length


class HybridCoordinator(KVCacheCoordinator):
    """Several caching groups: the longest hit every group can serve."""

    def _settle(self, block_hashes: Sequence[bytes], length: int, extra: int,
                ) -> tuple[list[list[KVCacheBlock]], int]:
        align = self.alignment
        length = length // align * align
        while True:
            new_length = length
            results = []
            for m in self.caching_managers:
                blocks = m.find_longest_cache_hit(block_hashes, new_length, extra)
                got = len(blocks) * m.block_size
                if got < new_length:
                    new_length = got // align * align
                results.append(blocks)
            if new_length == length:
                break
            length = new_length
        out = self._empty_hit()
        for m, blocks in zip(self.caching_managers, results):
            out[m.group_id] = blocks[:length // m.block_size]
        return out, length

    def find_longest_cache_hit(self, block_hashes: Sequence[bytes], max_length: int,
                               ) -> tuple[list[list[KVCacheBlock]], int]:
        if not self.use_eagle:
            return self._settle(block_hashes, max_length, 0)
        return self._eagle_search(block_hashes, max_length)

    def _eagle_search(self, block_hashes: Sequence[bytes], max_length: int,
                      ) -> tuple[list[list[KVCacheBlock]], int]:
        """vLLM 0.32's EAGLE fixed point (module docstring).  Each group's length is
        rounded down to the alignment (the lcm of the caching groups' block sizes;
        vLLM's ``alignment_tokens``), so with block sizes that differ the settled
        length is still one every group serves."""
        align = self.alignment
        same_sizes = all(m.block_size == align for m in self.caching_managers)
        # full attention first (its left-to-right search bounds the others); stable
        base_find = SingleTypeManager.find_longest_cache_hit
        order = sorted(self.caching_managers,
                       key=lambda m: type(m).find_longest_cache_hit is not base_find)
        hashed = len(block_hashes) * self.hash_block_size
        hit = max_length
        found: dict[int, tuple[list[KVCacheBlock], int]] = {}
        verified: set[int] = set()
        while True:
            curr = hit
            for m in order:
                gid, bs = m.group_id, m.block_size
                downward = type(m).find_longest_cache_hit is base_find
                if downward and gid in found:
                    curr = min(curr, found[gid][1])
                    continue
                drop = gid not in verified
                drops = drop and getattr(m, "eagle_drops_hit_block", True)
                limit = min(curr + bs, hashed) if drops else curr
                sliding = isinstance(m, SlidingWindowManager)
                blocks = m.find_longest_cache_hit(block_hashes, limit,
                                                  bs if drops and sliding else 0)
                if drops and blocks:
                    if downward or sliding:
                        blocks = blocks[:-1]
                    else:  # another windowed kind: its rule must hold one block shorter
                        blocks = m.find_longest_cache_hit(
                            block_hashes, (len(blocks) - 1) * bs, 0)
                got = len(blocks) * bs // align * align
                if got < len(blocks) * bs:
                    blocks = blocks[:got // bs] if downward else \
                        m.find_longest_cache_hit(block_hashes, got, 0)
                    got = len(blocks) * bs // align * align
                if drop:
                    verified.add(gid)
                elif got < curr:
                    verified.clear()
                curr = got
                found[gid] = (blocks, got)
            if curr >= hit:
                break
            hit = curr
            if same_sizes and len(order) == 2 and \
                    type(order[0]).find_longest_cache_hit is base_find:
                break  # one full-attention group and one other: one round suffices
        out = self._empty_hit()
        for m in order:
            blocks = found[m.group_id][0]
            if type(m).find_longest_cache_hit is base_find:
                blocks = blocks[:-(-hit // m.block_size)]
            out[m.group_id] = blocks
        return out, hit


def _check_args(where: str, kv_cache_config: Any, block_pool: Any, max_model_len: Any,
                max_num_batched_tokens: Any, enable_caching: Any, use_eagle: Any,
                ) -> tuple[int, int]:
    """A coordinator's arguments checked (ConfigError naming the bad one); returns
    ``max_model_len`` and ``max_num_batched_tokens`` as ints."""
    from kvcore.errors import ConfigError
    from kvcore.kv_cache_config import KVCacheConfig
    from kvcore.runtime.manager import _bool_arg, _int_arg

    if not isinstance(kv_cache_config, KVCacheConfig):
        raise ConfigError(f"{where}: kv_cache_config must be a KVCacheConfig (from "
                          f"kvcore.plan or kvcore.plan_model), got "
                          f"{type(kv_cache_config).__name__}", field="kv_cache_config")
    if not isinstance(block_pool, BlockPool):
        raise ConfigError(f"{where}: block_pool must be a BlockPool, got "
                          f"{type(block_pool).__name__} {repr(block_pool)[:40]}",
                          field="block_pool")
    _bool_arg(where, "enable_caching", enable_caching, err=ConfigError)
    _bool_arg(where, "use_eagle", use_eagle, err=ConfigError)
    return (_int_arg(where, "max_model_len", max_model_len, 1, 1 << 40, err=ConfigError),
            _int_arg(where, "max_num_batched_tokens", max_num_batched_tokens, 1, 1 << 40,
                     err=ConfigError))


def make_coordinator(kv_cache_config: Any, block_pool: BlockPool, *, max_model_len: int,
                     enable_caching: bool, use_eagle: bool,
                     max_num_batched_tokens: int = 8192) -> KVCacheCoordinator:
    """The coordinator for a config: no caching, one caching group, or hybrid.  Raises
    ConfigError naming the argument for a ``kv_cache_config`` that is not a
    KVCacheConfig, a ``block_pool`` that is not a BlockPool, counts that are not ints
    >= 1 and flags that are not bools."""
    from kvcore.registry import get_registry

    max_model_len, max_num_batched_tokens = _check_args(
        "make_coordinator", kv_cache_config, block_pool, max_model_len,
        max_num_batched_tokens, enable_caching, use_eagle)

    reg = get_registry()
    groups = kv_cache_config.kv_cache_groups
    if enable_caching:
        for g in groups:
            cls = reg.manager_class(g.spec)
            if cls is not None and cls.limits_prefix_hits and \
                    not getattr(g.spec, "participates_in_prefix_caching", True):
                enable_caching = False
                break
    n_caching = sum(1 for g in groups
                    if getattr(g.spec, "participates_in_prefix_caching", True))
    kw: dict[str, Any] = dict(max_model_len=max_model_len, enable_caching=enable_caching,
              use_eagle=use_eagle, max_num_batched_tokens=max_num_batched_tokens)
    if not enable_caching or n_caching == 0:
        return NoPrefixCacheCoordinator(kv_cache_config, block_pool, **kw)
    if n_caching == 1:
        return UnitaryCoordinator(kv_cache_config, block_pool, **kw)
    return HybridCoordinator(kv_cache_config, block_pool, **kw)
