"""Per-layer specs -> KV-cache groups (layers sharing one block table).

The rule (docs/DESIGN.md section 3; the behaviour of vLLM v1's ``get_kv_cache_groups`` and
``unify_kv_cache_spec_page_size``, with its failure cases fixed):

1. ``disable_hybrid_kv_cache_manager``: sliding-window and chunked-local layers are
   planned as full attention (the window is recorded, blocks are kept for every token).
2. ``kernel_block_size``: attention block sizes are rounded up to multiples of it.
3. Every layer mergeable into one spec -> one group.
4. Every layer of one grouping type with one block size (e.g. full attention with
   different head counts) -> one *packed* group: each block id takes the sum of the
   layers' pages.
5. Otherwise the hybrid layout.  Page sizes are unified: when the largest page is a
   state's (it does not grow with the block size), attention block sizes are raised to
   the smallest allowed size whose page reaches it (multiples of the layer's own block
   size and of ``kernel_block_size``), then smaller pages are handled: an attention page
   whose size divides the target is scaled by a whole factor; any other page is padded.
   Unification never fails.  When an attention ratio is not whole, a second candidate
   plans every windowed layer as full attention in one packed group; the candidate with
   the higher max concurrency wins.  Layers are then bucketed by spec in layer order;
   ``group_size`` = the smallest bucket's size, or the largest's when it is under 1.5x
   the smallest; a bucket of n layers becomes cdiv(n, group_size) groups, group i taking
   every g-th layer from i (strided, so pipeline stages stay balanced).  Tensor j holds
   layer j of every group.

With a block-outermost ``kv_cache_layout`` (``B`` before ``L``, e.g. ``BLHNC``) pages need
not be equal: layers of different page sizes sit side by side inside one block id, and
each group's bytes per block id is the sum of its layers' pages (no per-layer padding).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from kvcore.errors import ConfigError, SpecMergeError
from kvcore.kv_cache_config import KVCacheGroupSpec
from kvcore.registry import get_registry
from kvcore.specs import KVCacheSpec, PlanContext, cdiv

__all__ = [
    "GroupingResult",
    "group_layers",
    "unify_page_sizes",
    "is_block_outermost",
    "blocks_per_request",
    "check_layer_specs",
]

DEFAULT_LAYOUT = "LBNHC"


def is_block_outermost(kv_cache_layout: str | None) -> bool:
    """True when ``B`` (block) comes before ``L`` (layer) in the layout string."""
    if kv_cache_layout is not None and not isinstance(kv_cache_layout, str):
        raise ConfigError(f"kv_cache_layout must be a string such as LBNHC or BLHNC, got "
                          f"{kv_cache_layout!r}", field="kv_cache_layout")
    layout = (kv_cache_layout or DEFAULT_LAYOUT).upper()
    if sorted(layout) != sorted("LBNHC"):
        raise ConfigError(
            f"kv_cache_layout {kv_cache_layout!r} must be a permutation of the letters "
            f"L (layer), B (block), H (head), N (token), C (channel), e.g. LBNHC or BLHNC",
            field="kv_cache_layout", value=kv_cache_layout)
    return layout.index("B") < layout.index("L")


@dataclass(frozen=True)
class GroupingResult:
    """Groups plus how they were formed.

    Attributes
    ----------
    groups:
        The KV-cache groups, in order.
    strategy:
        ``"single"`` (one spec), ``"packed"`` (one group, different pages),
        ``"hybrid"`` (unified pages), ``"hybrid-as-full"`` (windowed layers planned as
        full attention), ``"block-packed"`` (block-outermost layout) or ``"empty"``.
    skipped_layers:
        Layers without a KV cache (0-byte pages, e.g. encoder-only attention).
    notes:
        Human-readable remarks (block sizes raised, pages padded, candidate chosen).
    """

    groups: tuple[KVCacheGroupSpec, ...]
    strategy: str
    skipped_layers: tuple[str, ...] = ()
    notes: tuple[str, ...] = field(default=(), compare=False)

    @property
    def layer_names(self) -> list[str]:
        return [n for g in self.groups for n in g.layer_names]

    @property
    def bytes_per_block(self) -> int:
        """Bytes one block id takes: the largest group's bytes per block id."""
        return max((g.bytes_per_block for g in self.groups), default=0)

    @property
    def group_size(self) -> int:
        return max((len(g.layer_names) for g in self.groups), default=0)


def blocks_per_request(groups: Sequence[KVCacheGroupSpec],
                       ctx: PlanContext, max_len: int | None = None) -> int:
    """Blocks one request of ``max_len`` tokens needs, summed over the groups, each
    group with its own admission cap (a packed group: the largest of its layers)."""
    total = 0
    for g in groups:
        specs = g.layer_specs if g.layer_specs is not None else (g.spec,)
        total += max(s.max_num_blocks_per_req(ctx, max_len) for s in specs)
    return total


def check_layer_specs(layer_specs: Any) -> dict[str, KVCacheSpec]:
    """``layer_specs`` as a dict, checked: a mapping of layer names to KVCacheSpec
    instances; raises ConfigError naming the offending layer."""
    if not isinstance(layer_specs, Mapping):
        raise ConfigError(f"layer specs must be a mapping {{layer name: KVCacheSpec}}, got "
                          f"{type(layer_specs).__name__}", field="layers")
    for name, spec in layer_specs.items():
        if not isinstance(name, str) or not isinstance(spec, KVCacheSpec):
            raise ConfigError(f"layer {name!r}: expected a KVCacheSpec, got "
                              f"{type(spec).__name__} (build one with a spec class or "
                              f"KVCacheSpec.from_dict)", field="layers", layer=str(name))
    return dict(layer_specs)



# ---- page-size unification ---------------------------------------------------------

def _lcm(a: int, b: int) -> int:
    return a * b // math.gcd(a, b)


def _kernel_multiple(spec: KVCacheSpec, kernel_block_size: int | None) -> int:
    return _lcm(spec.block_size, kernel_block_size) if kernel_block_size else spec.block_size


def unify_page_sizes(
    specs: list[KVCacheSpec], kernel_block_size: int | None = None
) -> tuple[dict[KVCacheSpec, KVCacheSpec], bool, list[str]]:
    """Make every page equal.

    Returns ``(mapping old spec -> new spec, whole, notes)``; ``whole`` is False when an
    attention page had to be padded (its ratio to the target was not whole).  Never
    raises for a non-integer ratio.
    """
    notes: list[str] = []
    uniq = list(dict.fromkeys(specs))
    attn = [s for s in uniq if s.scales_with_block_size]
    states = [s for s in uniq if not s.scales_with_block_size]
    new: dict[KVCacheSpec, KVCacheSpec] = {s: s for s in uniq}
    max_state = max((s.real_page_size_bytes for s in states), default=0)
    max_attn = max((s.real_page_size_bytes for s in attn), default=0)
    if attn and max_state > max_attn:
        for s in attn:
            m = _kernel_multiple(s, kernel_block_size)
            page_m = s.copy_with_new_block_size(m).real_page_size_bytes
            if page_m == 0:
                continue
            block = cdiv(max_state, page_m) * m
            if block != s.block_size:
                notes.append(f"{s.kind} block size raised {s.block_size} -> {block} tokens "
                             f"so one page holds a {max_state} B state")
                new[s] = s.copy_with_new_block_size(block)
    target = max(n.real_page_size_bytes for n in new.values())
    whole = True
    for s in uniq:
        n = new[s]
        page = n.real_page_size_bytes
        if page == target or page == 0:
            continue
        if n.scales_with_block_size and target % page == 0:
            factor = target // page
            new[s] = n.copy_with_new_block_size(n.block_size * factor)
            notes.append(f"{s.kind} block size scaled x{factor} -> {n.block_size * factor} "
                         f"tokens (page {target} B)")
        else:
            if n.scales_with_block_size:
                whole = False
            new[s] = n.with_page_size_padded(target)
            notes.append(f"{s.kind} page padded {page} -> {target} B "
                         f"(+{target - page} B)")
    return new, whole, notes


# ---- grouping ----------------------------------------------------------------------

def _try_merge(specs: list[KVCacheSpec]) -> KVCacheSpec | None:
    classes = {type(s) for s in specs}
    if len(classes) != 1:
        return None
    try:
        return type(specs[0]).merge(list(specs))
    except SpecMergeError:
        return None


def _strided_groups(names: list[str], spec: KVCacheSpec, group_size: int
                    ) -> list[KVCacheGroupSpec]:
    n_groups = cdiv(len(names), group_size)
    return [KVCacheGroupSpec(tuple(names[i::n_groups]), spec) for i in range(n_groups)]


def _bucket(items: list[tuple[str, KVCacheSpec]]) -> list[tuple[KVCacheSpec, list[str]]]:
    buckets: dict[KVCacheSpec, list[str]] = {}
    for name, spec in items:
        buckets.setdefault(spec, []).append(name)
    return list(buckets.items())


def _group_size(buckets: list[tuple[KVCacheSpec, list[str]]]) -> int:
    sizes = [len(names) for _, names in buckets]
    smallest, largest = min(sizes), max(sizes)
    return largest if largest < 1.5 * smallest else smallest


def _hybrid_groups(items: list[tuple[str, KVCacheSpec]]) -> list[KVCacheGroupSpec]:
    buckets = _bucket(items)
    size = _group_size(buckets)
    groups: list[KVCacheGroupSpec] = []
    for spec, names in buckets:
        groups.extend(_strided_groups(names, spec, size))
    return groups


def _packed_group(items: list[tuple[str, KVCacheSpec]]) -> KVCacheGroupSpec:
    names = tuple(n for n, _ in items)
    specs = tuple(s for _, s in items)
    merged = _try_merge(list(specs))
    if merged is not None:
        return KVCacheGroupSpec(names, merged)
    return KVCacheGroupSpec(names, specs[0], layer_specs=specs)


def _candidate_cost(groups: list[KVCacheGroupSpec], ctx: PlanContext | None,
                    budget: int | None) -> float:
    """Lower is better: bytes one request of max_model_len needs (or 1/max_concurrency
    when a budget is known)."""
    bpb = max(g.bytes_per_block for g in groups)
    if ctx is None or ctx.max_model_len <= 0:
        ctx_len = PlanContext(max_model_len=8192) if ctx is None else \
            dataclasses.replace(ctx, max_model_len=8192)
    else:
        ctx_len = ctx
    blocks = max(blocks_per_request(groups, ctx_len), 1)
    if budget:
        num_blocks = budget // bpb
        return -(num_blocks / blocks) if num_blocks else float("inf")
    return float(bpb * blocks)


def group_layers(
    layer_specs: Mapping[str, KVCacheSpec],
    *,
    ctx: PlanContext | None = None,
    kernel_block_size: int | None = None,
    disable_hybrid_kv_cache_manager: bool = False,
    kv_cache_layout: str | None = None,
    kv_cache_memory_bytes: int | None = None,
) -> GroupingResult:
    """Group per-layer specs into KV-cache groups.

    Parameters
    ----------
    layer_specs:
        ``{layer name: spec}`` in layer order (order matters: buckets and strided
        groups follow it).
    ctx:
        Sizing context, used to pick between unification candidates by max
        concurrency (default: max_model_len 8192).
    kernel_block_size:
        Attention block sizes must be multiples of it (tokens).
    disable_hybrid_kv_cache_manager:
        Plan sliding-window and chunked-local layers as full attention.
    kv_cache_layout:
        Physical axis order (``LBNHC`` default; block-outermost such as ``BLHNC`` packs
        different page sizes inside one block id).
    kv_cache_memory_bytes:
        Budget, to compare candidates by real max concurrency (optional).

    Raises
    ------
    ConfigError
        No layers, a bad kernel_block_size or layout, or hybrid disabled on a model with
        state layers.
    """
    layer_specs = check_layer_specs(layer_specs)
    if not layer_specs:
        raise ConfigError("no layers to plan: the model has no KV-cache layers",
                          field="layers")
    if kernel_block_size is not None and (not isinstance(kernel_block_size, int)
                                          or kernel_block_size <= 0):
        raise ConfigError(f"kernel_block_size must be a positive int, got "
                          f"{kernel_block_size!r}", field="kernel_block_size")
    block_outermost = is_block_outermost(kv_cache_layout)
    notes: list[str] = []

    items = [(n, s) for n, s in layer_specs.items()]
    skipped = tuple(n for n, s in items if s.real_page_size_bytes == 0)
    items = [(n, s) for n, s in items if s.real_page_size_bytes > 0]
    if not items:
        return GroupingResult((), "empty", skipped, ("no layer needs a KV cache",))

    if disable_hybrid_kv_cache_manager:
        converted = []
        for n, s in items:
            full = s.as_full_attention()
            if full is None:
                raise ConfigError(
                    f"disable_hybrid_kv_cache_manager is set but layer {n!r} is a "
                    f"{s.kind} state, which cannot be planned as full attention; "
                    f"enable the hybrid KV cache manager for this model",
                    field="disable_hybrid_kv_cache_manager", layer=n)
            converted.append((n, full))
        items = converted

    if kernel_block_size:
        adjusted = []
        for n, s in items:
            if s.scales_with_block_size and s.block_size % kernel_block_size:
                s = s.copy_with_new_block_size(_lcm(s.block_size, kernel_block_size))
            adjusted.append((n, s))
        items = adjusted

    specs = [s for _, s in items]
    merged = _try_merge(specs)
    if merged is not None:
        return GroupingResult((KVCacheGroupSpec(tuple(n for n, _ in items), merged),),
                              "single", skipped, tuple(notes))

    reg = get_registry()
    bases = {reg.grouping_base(s) for s in specs}
    block_sizes = {s.block_size for s in specs}
    if len(bases) == 1 and len(block_sizes) == 1:
        return GroupingResult((_packed_group(items),), "packed", skipped,
                              ("one grouping type and block size: one packed group",))

    mapping, whole, unify_notes = unify_page_sizes(specs, kernel_block_size)
    packed_result = None
    if block_outermost:
        # Pages need not be equal: keep each layer's page (attention blocks still raised
        # so a page holds a state, as in the padded layout), pack pages inside a block id.
        raised = {s: (mapping[s].copy_with_new_block_size(mapping[s].block_size)
                      if mapping[s].scales_with_block_size else s) for s in specs}
        blocks = {raised[s].block_size for s in specs if raised[s].scales_with_block_size}
        packed_items = []
        for n, s in items:
            r = raised[s]
            if len(blocks) == 1 and not r.scales_with_block_size:
                r = r.with_attention_block_size(next(iter(blocks)))
            packed_items.append((n, r))
        packed_result = GroupingResult(
            tuple(_hybrid_groups(packed_items)), "block-packed", skipped,
            ("block-outermost layout: pages packed inside each block id",))

    attn_blocks = {mapping[s].block_size for s in specs if mapping[s].scales_with_block_size}
    unified = []
    for n, s in items:
        u = mapping[s]
        if len(attn_blocks) == 1 and not u.scales_with_block_size:
            u = u.with_attention_block_size(next(iter(attn_blocks)))
        unified.append((n, u))
    hybrid = _hybrid_groups(unified)
    result = GroupingResult(tuple(hybrid), "hybrid", skipped, tuple(notes + unify_notes))
    if packed_result is not None:
        # the padded layout is also valid block-outermost: keep the better of the two
        if _candidate_cost(list(packed_result.groups), ctx, kv_cache_memory_bytes) <= \
                _candidate_cost(hybrid, ctx, kv_cache_memory_bytes):
            return packed_result
        result = GroupingResult(result.groups, result.strategy, skipped, result.notes + (
            "block-outermost layout: padded pages beat packing here",))
    has_states = any(not s.scales_with_block_size for s in specs)
    if whole or has_states:
        return result

    # Candidate B: every windowed layer as full attention, one packed group.
    full_items = []
    for n, s in items:
        full = s.as_full_attention()
        full_items.append((n, full if full is not None else s))
    full_specs = [s for _, s in full_items]
    if len({reg.grouping_base(s) for s in full_specs}) == 1 and \
            len({s.block_size for s in full_specs}) == 1:
        single = [_packed_group(full_items)]
        cost_a = _candidate_cost(hybrid, ctx, kv_cache_memory_bytes)
        cost_b = _candidate_cost(single, ctx, kv_cache_memory_bytes)
        if cost_b < cost_a:
            return GroupingResult(
                tuple(single), "hybrid-as-full", skipped,
                tuple(notes + ["page ratio not whole: windowed layers planned as full "
                               "attention in one group (higher max concurrency than "
                               "padding)"]))
        result = GroupingResult(result.groups, result.strategy, skipped,
                                result.notes + ("page ratio not whole: padded (higher max "
                                                "concurrency than one full-attention "
                                                "group)",))
    return result

