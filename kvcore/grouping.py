"""Per-layer specs -> KV-cache groups (layers sharing one block table), as a search.

Planning (docs/DESIGN.md section 3) normalizes the specs, asks every candidate generator
below for layouts, scores each layout with :func:`score_layout` and keeps the best.  The
generators (each returns layouts, or nothing when it does not apply):

``one_group``
    Every layer in one block table: all layers equal (``single``), or layers that need
    the same blocks per request although their kinds or pages differ (``packed``:
    vLLM's ``UniformTypeKVCacheSpecs``; each block id takes the sum of the pages).
``all_as_full``
    Every sliding-window / chunked-local layer planned as full attention, then one group
    (``all-as-full``) or the hybrid layouts below (``hybrid-as-full``).
``hybrid``
    Pages unified (:func:`unify_page_sizes`: attention blocks raised so a page holds the
    largest state, then each smaller page scaled by its largest whole factor and the
    rest padded; a variant prefers block sizes that divide each other, so prefix hits
    align to a small boundary; another only pads, keeping block sizes so one kind can
    share a table), layers bucketed by spec or by block table (layers of one manager
    kind and block size; sliding windows then take the largest window of the bucket),
    buckets split into groups of ``group_size`` layers, strided (group i takes every
    g-th layer from i, so pipeline stages stay balanced).  Group sizes tried: vLLM's
    rule (the smallest bucket, or the largest when it is under 1.5x the smallest), the
    smallest and largest bucket of more than one layer (a drafter's single extra layer
    never forces group size 1), the divisors of the bucket sizes and near-repeats
    (a bucket split into k about equal groups).

Scoring (:func:`score_layout`, :func:`choose`): max concurrency at max_model_len with a
budget (vLLM's figure), the fewest bytes per request without one, the longest length
first for ``max_model_len`` -1; layouts within ``SearchEnv.tolerance`` (0.5%) of the best
and never below vLLM's own layout of the layers (:func:`vllm_rule_layouts`, the
baseline) are near-ties, decided by less padding per request, a smaller prefix-hit
alignment, fewer groups.
``block_packed``
    Block-outermost ``kv_cache_layout`` only (``B`` before ``L``, e.g. ``BLHNC``): the
    hybrid layouts without padding; each group's bytes per block id is the sum of its
    layers' pages.

Normalization (:func:`normalize_specs`) runs first: layers without a KV cache are set
aside (after their sizes are checked: plugin pages must be positive ints),
``disable_hybrid_kv_cache_manager`` plans the windowed layers of a hybrid as full, a
window or local chunk >= ``max_model_len`` (it can never slide) is planned as full
attention, and block sizes are rounded up to multiples of ``kernel_block_size`` (attention)
and of a spec's own ``block_size_alignment`` (tokens; e.g. a Mamba SSM chunk).

Merging layers into one group never changes what a layer is: a group whose layers'
specs differ carries them in ``layer_specs`` (``spec_of(layer)``), and its ``spec`` (what
the runtime manager reads) takes the largest sliding window among its layers.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

from kvcore.errors import ConfigError, KVCoreError, SpecError, SpecMergeError
from kvcore.kv_cache_config import KVCacheGroupSpec
from kvcore.registry import get_registry
from kvcore.specs import (
    ChunkedLocalAttentionSpec,
    KVCacheSpec,
    PlanContext,
    SlidingWindowSpec,
    cdiv,
)

__all__ = [
    "GroupingResult",
    "Layout",
    "Score",
    "SearchEnv",
    "choose",
    "padding_per_request",
    "longest_len",
    "group_layers",
    "normalize_specs",
    "candidate_layouts",
    "score_layout",
    "search_layouts",
    "VllmLayout",
    "vllm_layout_of",
    "vllm_refusal",
    "vllm_rule_layouts",
    "check_spec_sizes",
    "unify_page_sizes",
    "is_block_outermost",
    "blocks_per_request",
    "check_layer_specs",
    "bytes_per_block_of",
    "stage_bytes_per_block",
    "prefix_hit_alignment",
    "reserved_blocks",
]

DEFAULT_LAYOUT = "LBNHC"
Items = list[tuple[str, KVCacheSpec]]


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
        The winning layout's name: ``single``, ``packed``, ``all-as-full``,
        ``hybrid``, ``hybrid-as-full``, ``block-packed`` (see the module docstring) or
        ``empty`` (no layer needs a KV cache).
    skipped_layers:
        Layers without a KV cache (0-byte pages, e.g. encoder-only attention).
    notes:
        Human-readable remarks (normalization, block sizes raised, pages padded, the
        chosen layout and the runner-up's score).
    runner_up:
        The second-best layout's strategy and score (None with one candidate).
    candidates_scored:
        How many distinct layouts were scored.
    """

    groups: tuple[KVCacheGroupSpec, ...]
    strategy: str
    skipped_layers: tuple[str, ...] = ()
    notes: tuple[str, ...] = field(default=(), compare=False)
    runner_up: tuple[str, Score] | None = field(default=None, compare=False)
    candidates_scored: int = field(default=0, compare=False)
    block_outermost: bool = field(default=False, compare=False)
    #: the serving judgment (issue 22): the winner's figures, vLLM's layout, the
    #: Pareto front of the judged layouts, the workload (None: not judged)
    serving: Any = field(default=None, compare=False)
    vllm_layout: Any = field(default=None, compare=False)
    pareto_front: tuple[Any, ...] = field(default=(), compare=False)
    workload: Any = field(default=None, compare=False)

    @property
    def layer_names(self) -> list[str]:
        return [n for g in self.groups for n in g.layer_names]

    @property
    def bytes_per_block(self) -> int:
        """Bytes one block id takes (see :func:`bytes_per_block_of`)."""
        return bytes_per_block_of(self.groups)

    @property
    def group_size(self) -> int:
        return max((len(g.layer_names) for g in self.groups), default=0)



# ---- argument checks of the public entry points ---------------------------------------------

def _arg_groups(groups: Any, fn: str) -> Sequence[KVCacheGroupSpec]:
    from kvcore.units import shorten

    if isinstance(groups, (str, bytes, Mapping)) or not isinstance(groups, Sequence) or \
            not all(isinstance(g, KVCacheGroupSpec) for g in groups):
        raise ConfigError(f"{fn}: groups must be a list of KVCacheGroupSpec, got "
                          f"{shorten(groups)}", field="groups", value=shorten(groups))
    return groups


def _arg_ctx(ctx: Any, fn: str) -> PlanContext:
    from kvcore.units import shorten

    if not isinstance(ctx, PlanContext):
        raise ConfigError(f"{fn}: ctx must be a PlanContext, got {shorten(ctx)}",
                          field="ctx", value=shorten(ctx))
    return ctx


def _arg_count(value: Any, name: str, fn: str, *, minimum: int = 1,
               optional: bool = True) -> Any:
    from kvcore.units import check_int

    if value is None and optional:
        return None
    return check_int(value, name, minimum=minimum, where=fn)


def _arg_bool(value: Any, name: str, fn: str) -> bool:
    from kvcore.units import shorten

    if not isinstance(value, bool):
        raise ConfigError(f"{fn}: {name} = {shorten(value)} must be True or False",
                          field=name, value=shorten(value))
    return value


def blocks_per_request(groups: Sequence[KVCacheGroupSpec],
                       ctx: PlanContext, max_len: int | None = None) -> int:
    """Blocks one request of ``max_len`` tokens needs, summed over the groups, each
    group with its own admission cap (a group of differing layers: the largest of its
    layers)."""
    _arg_groups(groups, "blocks_per_request")
    _arg_ctx(ctx, "blocks_per_request")
    _arg_count(max_len, "max_len", "blocks_per_request")
    total = 0
    for g in groups:
        if g.layer_specs is None:
            total += spec_blocks_per_req(g.spec, ctx, max_len)
        else:
            total += max(spec_blocks_per_req(s, ctx, max_len)
                         for s in dict.fromkeys(g.layer_specs))
    return total


def bytes_per_block_of(groups: Sequence[KVCacheGroupSpec]) -> int:
    """Bytes one block id takes: the largest group's sum of page sizes (vLLM's
    convention; groups use a block id at different times, so their pages overlap)."""
    _arg_groups(groups, "bytes_per_block_of")
    return max((g.bytes_per_block for g in groups), default=0)


def stage_bytes_per_block(groups: Sequence[KVCacheGroupSpec], layers: set[str]) -> int:
    """Bytes one block id takes on a pipeline stage that holds ``layers``."""
    best = 0
    for g in groups:
        if g.layer_specs is None:
            n = sum(1 for name in g.layer_names if name in layers)
            best = max(best, n * g.spec.page_size_bytes)
        else:
            best = max(best, sum(s.page_size_bytes for name, s in
                                 zip(g.layer_names, g.layer_specs) if name in layers))
    return best


def prefix_hit_alignment(groups: Sequence[KVCacheGroupSpec]) -> int | None:
    """Prefix-cache hits are multiples of this many tokens: the lcm of the block sizes of
    the groups that prefix cache (the runtime coordinator's ``alignment``); None when no
    group does."""
    sizes = [g.spec.block_size for g in groups
             if getattr(g.spec, "participates_in_prefix_caching", True)]
    return math.lcm(*sizes) if sizes else None


def reserved_blocks(groups: Sequence[KVCacheGroupSpec]) -> int:
    """Blocks the runtime takes once for all requests besides the null block: each group
    whose spec has ``num_sink_blocks`` (sink full attention) reserves that many at
    construction (``SinkFullAttentionManager``)."""
    return sum(int(getattr(g.spec, "num_sink_blocks", 0) or 0) for g in groups)


def check_layer_specs(layer_specs: Any) -> dict[str, KVCacheSpec]:
    """``layer_specs`` as a dict, checked: a mapping of layer names to KVCacheSpec
    instances; raises ConfigError naming the offending layer."""
    if not isinstance(layer_specs, Mapping):
        raise ConfigError(f"layer specs must be a mapping {{layer name: KVCacheSpec}}, got "
                          f"{type(layer_specs).__name__}", field="layers")
    for name, spec in layer_specs.items():
        if not isinstance(name, str):
            raise ConfigError(f"layer name {name!r}: layer names must be str "
                              f"(e.g. 'model.layers.0.self_attn'), got "
                              f"{type(name).__name__}", field="layers", layer=repr(name))
        if not isinstance(spec, KVCacheSpec):
            raise ConfigError(f"layer {name!r}: expected a KVCacheSpec, got "
                              f"{type(spec).__name__} (build one with a spec class or "
                              f"KVCacheSpec.from_dict)", field="layers", layer=str(name))
    return dict(layer_specs)


# ---- spec sizes from plugins ---------------------------------------------------------

def _plugin_of(spec: KVCacheSpec) -> str:
    try:
        st = get_registry().spec_type(spec)
    except Exception:
        return "unregistered"
    return f"{st.distribution} (plugin {st.plugin!r})"


def _size_error(name: str, spec: KVCacheSpec, what: str, value: Any, valid: str
                ) -> ConfigError:
    shown = repr(value)
    if len(shown) > 80:
        shown = shown[:77] + "..."
    return ConfigError(
        f"layer {name!r} ({spec.kind}, from {_plugin_of(spec)}): {what} is {shown}; "
        f"it must be {valid}", field=what, layer=name, kind=spec.kind, value=shown)


def spec_blocks_per_req(spec: KVCacheSpec, ctx: PlanContext, max_len: int | None = None,
                        what: str = "max_num_blocks_per_req") -> int:
    """``spec.max_num_blocks_per_req(ctx, max_len)`` (``what="max_memory_usage_bytes"``:
    that method) checked: an int >= 0 within its bound (numpy integers as the equal
    int); a value of another kind, or an exception the spec raises (SystemExit too), is
    a ConfigError naming the kind, its plugin and the value."""
    from kvcore.units import MAX_BLOCKS, MAX_BYTES, as_int

    fn = spec.max_num_blocks_per_req if what == "max_num_blocks_per_req" \
        else spec.max_memory_usage_bytes
    top = MAX_BLOCKS if what == "max_num_blocks_per_req" else MAX_BYTES * (1 << 20)
    try:
        value = fn(ctx, max_len)
    except KVCoreError:
        raise
    except (Exception, SystemExit) as exc:  # a plugin's method: named
        raise _kind_error(spec, what, f"{type(exc).__name__}: {exc}", max_len) from exc
    if type(value) is int and 0 <= value <= top:
        return value
    number = as_int(value)
    if number is None or not 0 <= number <= top:
        raise _kind_error(spec, what, value, max_len, top)
    return number


def _kind_error(spec: KVCacheSpec, what: str, value: Any, max_len: int | None,
                top: int | None = None) -> ConfigError:
    shown = repr(value)
    if len(shown) > 80:
        shown = shown[:77] + "..."
    unit = "blocks" if what == "max_num_blocks_per_req" else "bytes"
    valid = f"an int >= 0 ({unit}" + (f", at most {top:,})" if top else ")")
    return ConfigError(
        f"{spec.kind} spec (from {_plugin_of(spec)}): {what}(max_len={max_len}) is "
        f"{shown}; it must be {valid}", field=what, kind=spec.kind, value=shown)


def _is_int(value: Any) -> bool:
    from kvcore.units import as_int

    return as_int(value) is not None


def check_spec_sizes(name: str, spec: KVCacheSpec) -> int:
    """The layer's page size in bytes, checked: a positive int, or 0 only for a kind
    registered without a runtime manager (``SpecType.manager_cls=None``: it keeps no
    cache).  The byte function of an attention layer's ``kv_cache_dtype`` scheme must
    give a positive int too.  Raises ConfigError naming the layer, kind and plugin."""
    scheme = getattr(spec, "scheme", None) if hasattr(spec, "kv_cache_dtype") else None
    if scheme is not None and hasattr(scheme, "bytes_per_token_head"):
        owner = getattr(get_registry(), "_scheme_owner", {}).get(scheme.name) or \
            getattr(scheme, "distribution", "a plugin")
        what = f"kv_cache_dtype {scheme.name!r} (from {owner}) bytes per token and head"
        try:
            per_head = spec.bytes_per_token_per_head  # type: ignore[attr-defined]
        except Exception as exc:  # a plugin's byte function raised
            raise _size_error(name, spec, what, f"{type(exc).__name__}: {exc}",
                              "a positive int") from exc
        if not _is_int(per_head) or per_head <= 0:
            raise _size_error(name, spec, what, per_head, "a positive int")
    sizes = []
    for attr in ("real_page_size_bytes", "page_size_bytes"):
        try:
            value = getattr(spec, attr)
        except Exception as exc:
            raise _size_error(name, spec, attr, f"{type(exc).__name__}: {exc}",
                              "a positive int") from exc
        if not _is_int(value) or value < 0:
            raise _size_error(name, spec, attr, value, "an int > 0 (bytes)")
        sizes.append(value)
    page = sizes[0]
    if page == 0:
        try:
            manager = get_registry().spec_type(spec).manager_cls
        except Exception:
            manager = True
        if manager is not None:
            raise _size_error(name, spec, "real_page_size_bytes", 0,
                              "> 0 for a kind with a runtime manager (only a kind "
                              "registered with manager_cls=None keeps no cache)")
    return page


# ---- normalization -------------------------------------------------------------------

def _alignment(spec: KVCacheSpec, kernel_block_size: int | None) -> int:
    """Block sizes chosen for ``spec`` must be multiples of this (tokens)."""
    align = getattr(spec, "block_size_alignment", 1)
    align = align if _is_int(align) and align > 0 else 1
    if kernel_block_size and spec.scales_with_block_size:
        align = math.lcm(align, kernel_block_size)
    return align


def _window_of(spec: KVCacheSpec) -> int | None:
    """The window or local chunk of a windowed kind (None for other kinds)."""
    if isinstance(spec, SlidingWindowSpec):
        return spec.sliding_window
    if isinstance(spec, ChunkedLocalAttentionSpec):
        return spec.attention_chunk_size
    return None


def normalize_specs(
    layer_specs: Mapping[str, KVCacheSpec],
    *,
    max_model_len: int | None = None,
    kernel_block_size: int | None = None,
    disable_hybrid_kv_cache_manager: bool = False,
) -> tuple[Items, tuple[str, ...], list[str]]:
    """Checked, normalized ``[(layer, spec)]``, the skipped layers and notes.

    Layers whose page is 0 bytes are skipped; with ``disable_hybrid_kv_cache_manager``
    windowed layers of a hybrid model become full attention (a state layer is a
    ConfigError; a model of one attention type and window keeps it); a window or
    chunk >= ``max_model_len`` becomes full attention (it never slides: vLLM's sliding
    figure would hold one block more); attention block sizes become multiples of
    ``kernel_block_size`` and every block size a multiple of the spec's
    ``block_size_alignment``.  Each unique spec is transformed once.
    """
    layer_specs = check_layer_specs(layer_specs)
    _arg_count(max_model_len, "max_model_len", "normalize_specs")
    _arg_bool(disable_hybrid_kv_cache_manager, "disable_hybrid_kv_cache_manager",
              "normalize_specs")
    if kernel_block_size is not None and (not _is_int(kernel_block_size)
                                          or kernel_block_size <= 0):
        raise ConfigError(f"kernel_block_size must be a positive int, got "
                          f"{kernel_block_size!r}", field="kernel_block_size")
    cache: dict[KVCacheSpec, KVCacheSpec | None] = {}
    by_id: dict[int, KVCacheSpec | None] = {}
    notes: list[str] = []
    items: Items = []
    skipped: list[str] = []
    promoted = 0
    if disable_hybrid_kv_cache_manager:
        # one attention type (e.g. every layer sliding with one window) is no hybrid:
        # nothing to plan as full attention (vLLM's unify_hybrid_kv_cache_specs)
        types = {(type(s), _window_of(s)) for s in uniq(layer_specs.values())
                 if s.kind != "encoder_only_attention"}
        if len(types) == 1:
            disable_hybrid_kv_cache_manager = False
    for name, spec in layer_specs.items():
        if id(spec) in by_id:
            new = by_id[id(spec)]
        elif spec in cache:
            new = by_id[id(spec)] = cache[spec]
        else:
            new = _normalize_one(name, spec, max_model_len, kernel_block_size,
                                 disable_hybrid_kv_cache_manager)
            cache[spec] = by_id[id(spec)] = new
            if new is not None and _window_of(spec) is not None and \
                    _window_of(new) is None and not disable_hybrid_kv_cache_manager:
                promoted += 1
        if new is None:
            skipped.append(name)
        else:
            items.append((name, new))
    if promoted:
        notes.append(f"windows or local chunks >= max_model_len {max_model_len} never "
                     f"slide: those layers are planned as full attention")
    return items, tuple(skipped), notes


def _normalize_one(name: str, spec: KVCacheSpec, max_model_len: int | None,
                   kernel_block_size: int | None, disable_hybrid: bool
                   ) -> KVCacheSpec | None:
    if check_spec_sizes(name, spec) == 0:
        return None
    window = _window_of(spec)
    if disable_hybrid or (window is not None and max_model_len and window >= max_model_len):
        full = spec.as_full_attention()
        if full is None:
            raise ConfigError(
                f"disable_hybrid_kv_cache_manager is set but layer {name!r} is a "
                f"{spec.kind} state, which cannot be planned as full attention; "
                f"enable the hybrid KV cache manager for this model",
                field="disable_hybrid_kv_cache_manager", layer=name)
        spec = full
    align = _alignment(spec, kernel_block_size)
    if spec.block_size % align:
        if spec.scales_with_block_size:
            spec = spec.copy_with_new_block_size(math.lcm(spec.block_size, align))
        else:
            spec = spec.copy_with_new_block_size(cdiv(spec.block_size, align) * align) \
                if spec.page_size_padded is None else spec
    return spec


# ---- page-size unification ---------------------------------------------------------

def _commensurate(a: int, b: int) -> bool:
    return a % b == 0 or b % a == 0


def _commensurate_at_least(block: int, multiple: int, chosen: list[int]) -> int:
    """The smallest multiple of ``multiple`` >= ``block`` that divides or is divided by
    every chosen block size (``block`` itself when none is)."""
    options = set()
    for b in chosen:
        options.add(cdiv(block, b) * b)
        options.update(d for d in _divisors(b) if d >= block)
    for c in sorted(options):
        if c % multiple == 0 and all(_commensurate(c, b) for b in chosen):
            return c
    return block


def unify_page_sizes(
    specs: list[KVCacheSpec], kernel_block_size: int | None = None, *,
    commensurate: bool = False, scale: bool = True, fill: bool = False,
    align_to: int | None = None,
) -> tuple[dict[KVCacheSpec, KVCacheSpec], bool, list[str]]:
    """Make every page equal.

    When the largest page is a state's (it does not grow with the block size),
    attention block sizes are first raised to the smallest allowed size whose page
    holds it (multiples of the layer's block size, ``kernel_block_size`` and every
    ``block_size_alignment``).  Then each smaller attention page is scaled by its
    largest whole factor ``target // page`` and the remainder padded (scale, then pad);
    with ``commensurate`` the largest factor whose block size divides, or is divided
    by, every other attention block size is taken when one exists (prefix hits align to
    the lcm of the block sizes); with ``scale=False`` smaller pages are only padded
    (block sizes kept, so layers of one kind can share a block table); with ``fill``
    each smaller attention page takes the largest block size (a multiple of its
    alignment, not only of its block size) whose page still fits, so a page is filled
    as well as it can be (vLLM's one attention block size for a Mamba hybrid's drafter,
    e.g. 5,120 tokens where the largest whole factor gives 4,480); with ``align_to``
    each factor is the largest whose block size divides ``align_to`` (divisors, not
    only multiples: prefix hits then align to at most ``align_to`` tokens).  Other
    pages are padded.

    Returns ``(mapping old spec -> new spec, whole, notes)``; ``whole`` is False when an
    attention page had to be padded.  Never raises for a non-integer ratio; raises
    ConfigError for arguments of the wrong type or an empty list.
    """
    from kvcore.units import shorten

    if isinstance(specs, (str, bytes, Mapping)) or not isinstance(specs, Sequence) or \
            not specs or not all(isinstance(x, KVCacheSpec) for x in specs):
        raise ConfigError(f"unify_page_sizes: specs must be a non-empty list of "
                          f"KVCacheSpec, got {shorten(specs)}", field="specs")
    _arg_count(kernel_block_size, "kernel_block_size", "unify_page_sizes")
    _arg_bool(commensurate, "commensurate", "unify_page_sizes")
    _arg_bool(scale, "scale", "unify_page_sizes")
    notes: list[str] = []
    uniq = list(dict.fromkeys(specs))
    attn = [s for s in uniq if s.scales_with_block_size]
    states = [s for s in uniq if not s.scales_with_block_size]
    new: dict[KVCacheSpec, KVCacheSpec] = {s: s for s in uniq}
    max_state = max((s.real_page_size_bytes for s in states), default=0)
    max_attn = max((s.real_page_size_bytes for s in attn), default=0)
    state_align = math.lcm(*(_alignment(s, None) for s in states)) if states else 1
    if attn and (max_state > max_attn or any(s.block_size % state_align for s in attn)):
        raised: list[int] = []
        for s in sorted(attn, key=lambda s: -s.real_page_size_bytes / s.block_size):
            m = math.lcm(s.block_size, _alignment(s, kernel_block_size), state_align)
            page_m = s.copy_with_new_block_size(m).real_page_size_bytes
            if page_m == 0:
                continue
            block = cdiv(max_state, page_m) * m
            if commensurate and raised:
                block = _commensurate_at_least(block, m, raised)
            raised.append(block)
            if block != s.block_size:
                notes.append(f"{s.kind} block size raised {s.block_size} -> {block} tokens "
                             f"so one page holds a {max_state} B state")
                new[s] = s.copy_with_new_block_size(block)
    target = max(n.real_page_size_bytes for n in new.values())
    whole = True
    # commensurate: the final block sizes so far (largest pages first: those not scaled)
    chosen = {new[s].block_size for s in attn if new[s].real_page_size_bytes == target}
    order = sorted(uniq, key=lambda s: -new[s].real_page_size_bytes)
    for s in order:
        n = new[s]
        page = n.real_page_size_bytes
        if page == target or page == 0:
            continue
        if n.scales_with_block_size:
            factor = target // page if scale else 1
            if fill:
                page_m = 0
                for m in (math.lcm(_alignment(s, kernel_block_size), s.block_size),
                          n.block_size):
                    try:  # a plugin may need more than the alignment (a compress ratio)
                        page_m = n.copy_with_new_block_size(m).real_page_size_bytes
                        break
                    except SpecError:
                        continue
                block = (target // page_m) * m if page_m else n.block_size
                if block > n.block_size and \
                        n.copy_with_new_block_size(block).real_page_size_bytes <= target:
                    notes.append(f"{s.kind} block size {n.block_size} -> {block} tokens "
                                 f"(fills the {target} B page)")
                    n = n.copy_with_new_block_size(block)
                    factor = 1
            if align_to is not None and factor > 1:
                factor = max((f for f in range(1, factor + 1)
                              if align_to % (n.block_size * f) == 0), default=1)
            if commensurate and factor > 1:
                for f in range(factor, 0, -1):
                    if all(_commensurate(n.block_size * f, b) for b in chosen):
                        factor = f
                        break
            chosen.add(n.block_size * factor)
            if factor > 1:
                notes.append(f"{s.kind} block size scaled x{factor} -> "
                             f"{n.block_size * factor} tokens (page {target} B)")
                n = n.copy_with_new_block_size(n.block_size * factor)
            if n.real_page_size_bytes != target:
                whole = False
                notes.append(f"{s.kind} page padded {n.real_page_size_bytes} -> {target} "
                             f"B (+{target - n.real_page_size_bytes} B)")
                n = n.with_page_size_padded(target)
            new[s] = n
        else:
            new[s] = n.with_page_size_padded(target)
            notes.append(f"{s.kind} page padded {page} -> {target} B (+{target - page} B)")
    return new, whole, notes


# ---- groups ----------------------------------------------------------------------

def _manager_key(spec: KVCacheSpec) -> Any:
    st = get_registry().spec_type(spec)
    m = st.manager_cls
    return m if isinstance(m, str) else (getattr(m, "__module__", ""),
                                         getattr(m, "__qualname__", repr(m)))


_SHAREABLE_MANAGERS = {"FullAttentionManager", "SlidingWindowManager",
                       "ChunkedLocalAttentionManager"}


def table_key(spec: KVCacheSpec) -> Any:
    """Layers with equal keys may share one block table although their specs differ:
    the core full-attention and sliding-window managers keep the same blocks for every
    layer of one block size (a sliding group keeps the largest window), and the
    chunked-local manager for every layer of one block size and one chunk size (vLLM's
    ``UniformTypeKVCacheSpecs``).  Other kinds share a table only with equal specs."""
    key = _manager_key(spec)
    name = key.rpartition(":")[2] if isinstance(key, str) else key[1]
    if name not in _SHAREABLE_MANAGERS or \
            getattr(spec, "participates_in_prefix_caching", True) is not True:
        return ("spec", spec)
    if name == "ChunkedLocalAttentionManager":
        return ("table", key, spec.block_size, getattr(spec, "attention_chunk_size", None))
    return ("table", key, spec.block_size)


def _reach(spec: KVCacheSpec) -> int:
    window = getattr(spec, "sliding_window", None) if isinstance(spec, SlidingWindowSpec) \
        else None
    return window if window is not None else 1 << 62


def group_spec(specs: Sequence[KVCacheSpec]) -> KVCacheSpec:
    """The spec a group's runtime manager reads: the specs merged when their class
    allows it (``merge``), else the layer with the largest sliding window (the group
    frees and looks up by it), else the first layer's."""
    uniq = list(dict.fromkeys(specs))
    if len(uniq) == 1:
        return uniq[0]
    if len({type(s) for s in uniq}) == 1:
        try:
            return type(uniq[0]).merge(list(uniq))
        except SpecMergeError:
            pass
    if all(isinstance(s, SlidingWindowSpec) for s in uniq):
        return max(uniq, key=lambda s: s.sliding_window)  # type: ignore[attr-defined]
    return min(uniq, key=lambda s: -_reach(s))


def make_group(names: Sequence[str], specs: Sequence[KVCacheSpec]) -> KVCacheGroupSpec:
    """One group; per-layer specs are kept (``layer_specs``) when the layers differ."""
    first = specs[0]
    if all(s is first or s == first for s in specs):
        return KVCacheGroupSpec(tuple(names), first)
    return KVCacheGroupSpec(tuple(names), group_spec(specs), layer_specs=tuple(specs))


def uniq(specs: Iterable[KVCacheSpec]) -> list[KVCacheSpec]:
    """Distinct specs in first-seen order (by identity first: hashing a spec is slow)."""
    by_id = {id(s): s for s in specs}
    return list(dict.fromkeys(by_id.values()))


def _divisors(n: int) -> list[int]:
    small = [d for d in range(1, math.isqrt(n) + 1) if n % d == 0]
    return sorted(set(small + [n // d for d in small]))


def group_sizes(bucket_sizes: Sequence[int]) -> list[int]:
    """Group sizes worth trying for buckets of these sizes (see the module docstring),
    vLLM's rule first."""
    smallest, largest = min(bucket_sizes), max(bucket_sizes)
    out = [largest if largest < 1.5 * smallest else smallest]
    multi = sorted(set(n for n in bucket_sizes if n > 1)) or [largest]
    lo, hi = min(multi), max(multi)
    out += [hi if hi < 1.5 * lo else lo, lo]
    for n in multi:
        out += [d for d in _divisors(n) if d <= hi]
        # near-repeats: n split into k about equal groups (8,334 layers at a 5:1 ratio
        # to 1,666 -> groups of 1,667)
        out += [cdiv(n, k) for k in range(1, 9)]
        out += [cdiv(n, max(1, round(n / m))) for m in multi if m < n]
    return list(dict.fromkeys(out))


def _strided(buckets: list[tuple[list[str], list[KVCacheSpec]]], size: int,
             uniform: bool = False) -> tuple[KVCacheGroupSpec, ...]:
    """Each bucket cut into cdiv(n, size) groups, group i taking every k-th layer from
    i; ``uniform``: every bucket holds one spec (not checked again)."""
    groups: list[KVCacheGroupSpec] = []
    for names, specs in buckets:
        n_groups = cdiv(len(names), size)
        one = specs[0] if uniform or all(s is specs[0] for s in specs) else None
        for i in range(n_groups):
            if one is not None:
                groups.append(KVCacheGroupSpec(tuple(names[i::n_groups]), one))
            else:
                groups.append(make_group(names[i::n_groups], specs[i::n_groups]))
    return tuple(groups)


@dataclass(frozen=True)
class _Entry:
    """``count`` groups of one shape, as the scorer sees them."""

    count: int
    specs: tuple[KVCacheSpec, ...]     # distinct layer specs (blocks: the largest cap)
    bytes_per_block: int
    padding_per_block: int
    block_size: int
    caching: bool
    sink_blocks: int


def _entry_of(g: KVCacheGroupSpec) -> _Entry:
    specs = tuple(uniq(g.layer_specs)) if g.layer_specs is not None else (g.spec,)
    pad = g.spec.padding_bytes * len(g.layer_names) if g.layer_specs is None else \
        sum(s.padding_bytes for s in g.layer_specs)
    return _Entry(1, specs, g.bytes_per_block, pad, g.spec.block_size,
                  getattr(g.spec, "participates_in_prefix_caching", True) is True,
                  int(getattr(g.spec, "num_sink_blocks", 0) or 0))


def _bucket_entries(buckets: list[tuple[list[str], list[KVCacheSpec]]], size: int,
                    uniform: bool = False) -> tuple[_Entry, ...] | None:
    """The groups :func:`_strided` would build, summarized without building them (None
    when a bucket mixes specs)."""
    out = []
    for names, specs in buckets:
        spec = specs[0]
        if not uniform and not all(s is spec for s in specs):
            return None
        k = cdiv(len(names), size)
        q, r = divmod(len(names), k)
        caching = getattr(spec, "participates_in_prefix_caching", True) is True
        sink = int(getattr(spec, "num_sink_blocks", 0) or 0)
        page, pad = spec.page_size_bytes, spec.padding_bytes
        for count, n in ((r, q + 1), (k - r, q)):
            if count:
                out.append(_Entry(count, (spec,), n * page, n * pad, spec.block_size,
                                  caching, sink))
    return tuple(out)


class Layout:
    """One candidate layout: the generator's name, notes, and its groups (built on
    first use; the scorer reads ``entries``, a summary, when the generator gives one).
    ``baseline`` marks vLLM's own rule (and the former fixed ladder): the search never
    picks a layout that scores below the best baseline."""

    def __init__(self, strategy: str, build: Callable[[], tuple[KVCacheGroupSpec, ...]],
                 notes: Sequence[str] = (), *, baseline: bool = False,
                 entries: tuple[_Entry, ...] | None = None) -> None:
        self.strategy = strategy
        self._build = build
        self.notes = tuple(notes)
        self.baseline = baseline
        self._entries = entries

    @functools.cached_property
    def groups(self) -> tuple[KVCacheGroupSpec, ...]:
        return self._build()

    @property
    def entries(self) -> tuple[_Entry, ...]:
        if self._entries is None:
            self._entries = tuple(_entry_of(g) for g in self.groups)
        return self._entries

    def __repr__(self) -> str:
        return f"Layout({self.strategy!r}, {sum(e.count for e in self.entries)} groups)"


@dataclass(frozen=True)
class SearchEnv:
    """What the generators and the scorer need besides the layers.

    ``budgets`` are bytes per pipeline stage (None: no budget), ``stage_layers`` the
    layers of each stage; ``num_blocks_override`` replaces the budget's block count;
    ``max_model_len`` -1 asks for the longest length that fits (up to ``limit``);
    ``tolerance``: layouts whose main figure is within this fraction of the best one
    (and no worse than the best baseline) are near-ties, decided by the tie-breaks."""

    ctx: PlanContext
    kernel_block_size: int | None = None
    block_outermost: bool = False
    budgets: tuple[int, ...] | None = None
    stage_layers: tuple[frozenset[str], ...] | None = None
    num_blocks_override: int | None = None
    max_model_len: int = 8192
    limit: int = 1 << 24
    enable_prefix_caching: bool = True
    tolerance: float = 0.005
    #: the workload layouts are judged on (None: :func:`kvcore.serving.default_workload`)
    workload: Any = field(default=None, compare=False)
    #: ``judge(candidates, workload) -> seconds`` for the best few (None: the analytic
    #: proxy, :func:`kvcore.serving.analytic_judge`)
    judge: Any = field(default=None, compare=False)
    judge_top_k: int = 4


def _fixed(groups: Sequence[KVCacheGroupSpec]) -> Callable[[], tuple[KVCacheGroupSpec, ...]]:
    frozen = tuple(groups)
    return lambda: frozen


def vllm_table_key(spec: KVCacheSpec) -> Any:
    """:func:`table_key` as vLLM 0.32 shares a table: its sliding-window layers share one
    only at one window (``SlidingWindowSpec.is_uniform_with_collection``@0.32 compares
    ``sliding_window``; kvcore's runtime packs several windows, keeping the largest)."""
    key = table_key(spec)
    if key[0] == "table" and isinstance(spec, SlidingWindowSpec):
        return key + (getattr(spec, "sliding_window", None),)
    return key


def _one_table(items: Items, key: Callable[[KVCacheSpec], Any] = table_key) -> bool:
    keys = {key(s) for s in uniq(s for _, s in items)}
    return len(keys) == 1


def one_group(items: Items, env: SearchEnv, *, vllm: bool = False) -> list[Layout]:
    """Every layer in one block table (``single`` / ``packed``), when they can share it
    (``vllm``: by vLLM 0.32's rule, :func:`vllm_table_key`)."""
    if not _one_table(items, vllm_table_key if vllm else table_key):
        return []
    group = make_group([n for n, _ in items], [s for _, s in items])
    strategy = "single" if group.layer_specs is None else "packed"
    note = () if strategy == "single" else (
        "one block table for every layer (same blocks per request; each block id holds "
        "every layer's page)",)
    return [Layout(strategy, _fixed((group,)), note, baseline=True)]


def _as_full(items: Items) -> Items | None:
    cache: dict[int, KVCacheSpec] = {}
    by_value: dict[KVCacheSpec, KVCacheSpec] = {}
    for spec in uniq(s for _, s in items):
        full = spec.as_full_attention() if _window_of(spec) is not None else None
        full = by_value.setdefault(full, full) if full is not None else spec
        cache[id(spec)] = full
    if all(cache[k] is s for k, s in ((id(s), s) for s in uniq(s for _, s in items))):
        return None
    return [(name, cache[id(spec)]) for name, spec in items]


def all_as_full(items: Items, env: SearchEnv) -> list[Layout]:
    """Every windowed layer as full attention: one group when the layers then share one
    table, and the hybrid layouts of the promoted layers."""
    full = _as_full(items)
    if full is None:
        return []
    note = "sliding-window / chunked layers planned as full attention (blocks kept for " \
           "every token)"
    out = [Layout("all-as-full", lay._build, (note,) + lay.notes, baseline=True)
           for lay in one_group(full, env)]
    out += [Layout("hybrid-as-full", lay._build, (note,) + lay.notes,
                   entries=lay._entries) for lay in hybrid(full, env)]
    return out


UNIFY_VARIANTS = ("largest factor", "commensurate", "pad only", "fill page")
#: hit alignments tried as "align N" variants: the lcm of the attention block sizes
#: before scaling times these (only those below the largest-factor variant's alignment)
ALIGN_MULTIPLES = (1, 2, 3, 4, 6, 8, 12, 16)
MAX_HYBRID_LAYOUTS = 600


def _unified_mapping(specs: list[KVCacheSpec], env: SearchEnv, variant: str, pad: bool
                     ) -> tuple[dict[int, KVCacheSpec], list[str]] | None:
    """``{id(spec): unified spec}`` of one unification variant (None when a state that
    follows the attention block would break its ``block_size_alignment``)."""
    align_to = int(variant.split()[1]) if variant.startswith("align ") else None
    mapping, _whole, notes = unify_page_sizes(
        specs, env.kernel_block_size, commensurate=variant == "commensurate",
        scale=variant != "pad only", fill=variant == "fill page", align_to=align_to)
    if not pad:  # block-outermost: keep each page (blocks still raised for states)
        mapping = {s: (m.copy_with_new_block_size(m.block_size)
                       if m.scales_with_block_size else s) for s, m in mapping.items()}
        notes = [n for n in notes if "padded" not in n]
    attn_blocks = {m.block_size for m in mapping.values() if m.scales_with_block_size}
    if len(attn_blocks) == 1:
        block = next(iter(attn_blocks))
        mapping = {s: (m if m.scales_with_block_size else m.with_attention_block_size(block))
                   for s, m in mapping.items()}
    elif len(attn_blocks) > 1:
        mapping = {s: (m if m.scales_with_block_size else _state_beside_blocks(m, attn_blocks))
                   for s, m in mapping.items()}
    for s, m in mapping.items():
        if m.block_size % _alignment(s, None):
            return None  # a state that follows the attention block breaks its alignment
    by_id = {id(s): mapping[s] for s in specs}
    return by_id, notes


def _state_beside_blocks(spec: KVCacheSpec, attn_blocks: set[int]) -> KVCacheSpec:
    """A state spec beside attention groups of several block sizes (issue 24, item 7).

    A state whose block count grows with the sequence (a Mamba state in ``all`` mode:
    one state per block boundary, ``cdiv(max_model_len, block_size)`` per request)
    takes the block size ``lcm(attention block sizes, block_size_alignment)``.  Prefix
    hits land only on multiples of the lcm of the caching groups' block sizes, and a
    state block must be a multiple of the SSM chunk (``block_size_alignment``), so no
    hit can land finer than that lcm: states between its multiples are never read.
    Every block size that keeps the hit granularity (a multiple of the alignment that
    divides the lcm) is valid, and the lcm itself is the largest of them, the one with
    the fewest state blocks per request (keeping the state at its own 16-token block
    beside 80- and 560-token attention blocks took 35x the state memory).  A state
    with a fixed block count (``align`` / ``none`` mode), or any other kind, is left
    as it is."""
    if getattr(spec, "mamba_cache_mode", None) != "all":
        return spec
    target = math.lcm(*attn_blocks, _alignment(spec, None))
    follow = getattr(spec, "with_attention_block_size", None)
    return follow(target) if follow is not None else spec


def _bucketed(items: Items, key_of: dict[int, Any]) -> list[tuple[list[str],
                                                                  list[KVCacheSpec]]]:
    out: dict[Any, tuple[list[str], list[KVCacheSpec]]] = {}
    for name, spec in items:
        names, specs = out.setdefault(key_of[id(spec)], ([], []))
        names.append(name)
        specs.append(spec)
    return list(out.values())


def _align_variants(specs: list[KVCacheSpec], env: SearchEnv, pad: bool
                    ) -> tuple[str, ...]:
    """``align N`` unification variants (divisor block sizes): N the lcm of the
    attention block sizes once raised for states, times :data:`ALIGN_MULTIPLES`, below
    the hit alignment of the largest-factor unification (none when that is already
    the smallest)."""
    if not env.enable_prefix_caching:
        return ()
    first = _unified_mapping(specs, env, UNIFY_VARIANTS[0], pad)
    if first is None:
        return ()
    by_id, _ = first
    sizes = [m.block_size for m in by_id.values() if m.scales_with_block_size]
    if not sizes:
        return ()
    top = math.lcm(*sizes)
    raised, _, _ = unify_page_sizes(specs, env.kernel_block_size, scale=False)
    base_sizes = [m.block_size for m in raised.values() if m.scales_with_block_size]
    base = math.lcm(*base_sizes) if base_sizes else 1
    return tuple(f"align {base * k}" for k in ALIGN_MULTIPLES if base * k < top)


def hybrid(items: Items, env: SearchEnv, *, pad: bool = True) -> list[Layout]:
    """The unified-page (or, with ``pad=False``, block-packed) layouts: the unification
    variants (:data:`UNIFY_VARIANTS`) x bucketing by spec or by table x the group sizes
    of :func:`group_sizes`.
    The first (largest-factor unification, buckets by spec, vLLM's group size) is the
    baseline."""
    strategy = "hybrid" if pad else "block-packed"
    out: list[Layout] = []
    specs = uniq(s for _, s in items)
    if len(specs) == 1:
        return out  # one spec: one group (splitting it only trades rounding)
    seen: set[Any] = set()
    for variant in UNIFY_VARIANTS + _align_variants(specs, env, pad):
        unified = _unified_mapping(specs, env, variant, pad)
        if unified is None:
            continue
        by_id, notes = unified
        mapped = tuple(by_id[id(s)] for s in specs)
        if mapped in seen:
            continue
        seen.add(mapped)
        u_items = [(n, by_id[id(s)]) for n, s in items]
        u_specs = uniq(mapped)
        # keyed by every mapped object: equal specs may be distinct objects, and
        # uniq() keeps only one of them
        spec_key = {id(u): u for u in mapped}
        table = {id(u): table_key(u) for u in mapped}
        for by_table in (False, True):
            key_of = table if by_table else spec_key
            n_keys = len(set(key_of.values()))
            if n_keys == 1 or (by_table and n_keys == len(u_specs)):
                continue  # one bucket (one_group covers it), or the same as by spec
            buckets = _bucketed(u_items, key_of)
            for i, size in enumerate(group_sizes([len(n) for n, _ in buckets])):
                extra = [f"{len(buckets)} buckets, group size {size}"]
                if by_table:
                    extra.append("layers of one manager kind and block size share tables")
                out.append(Layout(
                    strategy, functools.partial(_strided, buckets, size, not by_table),
                    tuple(notes + extra),
                    entries=_bucket_entries(buckets, size, not by_table),
                    baseline=i == 0 and variant == UNIFY_VARIANTS[0] and not by_table))
    if len(out) > MAX_HYBRID_LAYOUTS:  # many variants x group sizes: keep the first
        out = out[:MAX_HYBRID_LAYOUTS]
    return out


def block_packed(items: Items, env: SearchEnv) -> list[Layout]:
    """Block-outermost layouts: pages packed side by side inside each block id."""
    return hybrid(items, env, pad=False) if env.block_outermost else []


GENERATORS: tuple[Callable[[Items, SearchEnv], list[Layout]], ...] = (
    one_group, all_as_full, hybrid, block_packed)


def candidate_layouts(items: Items, env: SearchEnv) -> list[Layout]:
    """Every generator's layouts, in a fixed order (near-ties go to the earlier one)."""
    out: list[Layout] = []
    for gen in GENERATORS:
        out.extend(gen(items, env))
    if any(lay.strategy in ("single", "packed") for lay in out):
        for lay in out:  # vLLM plans one group then (UniformTypeKVCacheSpecs)
            if lay.strategy not in ("single", "packed"):
                lay.baseline = False
    return out


# ---- scoring -----------------------------------------------------------------------

@dataclass(frozen=True)
class Score:
    """A layout's figures, as the search compares them.

    ``value`` is the main figure (higher is better): with a budget, max concurrency
    ``num_blocks / blocks per request`` (vLLM's convention; ``num_blocks`` the smallest
    over the pipeline stages); without one (or with only a block-count override),
    minus the bytes one request takes.  With ``max_model_len`` -1,
    ``max_model_len`` (the longest that fits) is compared first.  Tie-breaks, in order:
    fewer padding bytes per request, a smaller prefix-hit alignment, fewer groups."""

    fits: bool
    max_model_len: int
    value: Fraction
    padding_bytes_per_request: int
    prefix_hit_alignment_tokens: int | None
    num_groups: int
    max_concurrency: float | None
    bytes_per_request: int
    num_blocks: int | None = None
    reserved_blocks: int = 0
    bytes_per_block: int = 0

    @property
    def tie_break(self) -> tuple[int, int, int]:
        return (self.padding_bytes_per_request, self.prefix_hit_alignment_tokens or 0,
                self.num_groups)

    def to_dict(self) -> dict[str, Any]:
        return {"max_concurrency": self.max_concurrency,
                "bytes_per_request": self.bytes_per_request,
                "padding_bytes_per_request": self.padding_bytes_per_request,
                "prefix_hit_alignment_tokens": self.prefix_hit_alignment_tokens,
                "num_groups": self.num_groups, "max_model_len": self.max_model_len}

    def describe(self) -> str:
        conc = "n/a" if self.max_concurrency is None else f"{self.max_concurrency:.4g}"
        return (f"max concurrency {conc}, {self.bytes_per_request:,} B per request, "
                f"padding {self.padding_bytes_per_request:,} B, hit alignment "
                f"{self.prefix_hit_alignment_tokens} tokens, {self.num_groups} groups")


def padding_per_request(groups: Sequence[KVCacheGroupSpec], ctx: PlanContext,
                        max_len: int) -> int:
    """Padding bytes one request of ``max_len`` holds: per group, its blocks per request
    times the padding of its layers' pages."""
    _arg_groups(groups, "padding_per_request")
    _arg_ctx(ctx, "padding_per_request")
    _arg_count(max_len, "max_len", "padding_per_request", optional=False)
    return _padding(tuple(_entry_of(g) for g in groups), ctx, max_len)


def _caps(entries: Sequence[_Entry], ctx: PlanContext, max_len: int) -> list[int]:
    cache: dict[KVCacheSpec, int] = {}
    out = []
    for e in entries:
        best = 0
        for s in e.specs:
            v = cache.get(s)
            if v is None:
                v = cache[s] = spec_blocks_per_req(s, ctx, max_len)
            best = max(best, v)
        out.append(best)
    return out


def _blocks(entries: Sequence[_Entry], ctx: PlanContext, max_len: int) -> int:
    return sum(e.count * c for e, c in zip(entries, _caps(entries, ctx, max_len)))


def _padding(entries: Sequence[_Entry], ctx: PlanContext, max_len: int) -> int:
    return sum(e.count * e.padding_per_block * c
               for e, c in zip(entries, _caps(entries, ctx, max_len)) if e.padding_per_block)


def _stage_bpb(layout: Layout, env: SearchEnv) -> list[int]:
    if env.stage_layers is None or len(env.stage_layers) <= 1:
        return [max((e.bytes_per_block for e in layout.entries), default=0)]
    return [stage_bytes_per_block(layout.groups, set(s)) for s in env.stage_layers]


def _pool(bpbs: list[int], env: SearchEnv) -> tuple[Fraction | None, int | None]:
    """(exact blocks the budget gives, num_blocks), both None without a budget.  A
    ``num_blocks_override`` without a budget does not pick the layout (more layers per
    group would look free): layouts are then compared by bytes per request, and the
    override only decides whether one request fits."""
    if env.budgets is None:
        return None, None
    pairs = [(b, p) for b, p in zip(env.budgets, bpbs) if p > 0]
    if not pairs:
        return None, None
    return min(Fraction(b, p) for b, p in pairs), min(b // p for b, p in pairs)


def longest_len(groups: Sequence[KVCacheGroupSpec], ctx: PlanContext, usable_blocks: int,
                limit: int) -> int:
    """Largest L in [0, limit] with blocks_per_request(L) <= usable_blocks."""
    return _longest(tuple(_entry_of(g) for g in groups), ctx, usable_blocks, limit)


def _longest(entries: Sequence[_Entry], ctx: PlanContext, usable_blocks: int,
             limit: int) -> int:
    if usable_blocks <= 0:
        return 0
    lo, hi = 0, limit
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if _blocks(entries, ctx, mid) <= usable_blocks:
            lo = mid
        else:
            hi = mid - 1
    return lo


def score_layout(layout: Layout | Sequence[KVCacheGroupSpec], env: SearchEnv) -> Score:
    """The score of one layout (see :class:`Score`)."""
    if not isinstance(layout, Layout):
        layout = Layout("given", _fixed(layout))
    entries = layout.entries
    ctx = env.ctx
    bpbs = _stage_bpb(layout, env)
    exact, num_blocks = _pool(bpbs, env)
    length = env.max_model_len if env.max_model_len > 0 else env.limit
    reserved = sum(e.count * e.sink_blocks for e in entries)
    if env.num_blocks_override is not None:
        num_blocks = env.num_blocks_override
    if env.max_model_len == -1 and num_blocks is not None:
        length = _longest(entries, ctx, num_blocks - 1 - reserved, env.limit)
    blocks = _blocks(entries, ctx, length)
    bpb = max(bpbs)
    sizes = [e.block_size for e in entries if e.caching]
    align = math.lcm(*sizes) if sizes and env.enable_prefix_caching else None
    conc: float | None = None
    fits = num_blocks is None or (length > 0 and num_blocks - 1 - reserved >= blocks)
    if num_blocks is not None and blocks:
        conc = num_blocks / blocks
    if exact is not None and num_blocks is not None:
        # vLLM's convention, rounding of num_blocks included (a layout of fewer groups
        # within the near-tie tolerance wins anyway; the floor at the baseline keeps
        # kvcore >= vLLM's own rule)
        value = Fraction(num_blocks, blocks) if blocks else Fraction(1 << 62)
        conc = float(value) if blocks else None
    else:
        value = Fraction(-blocks * bpb)
    return Score(fits, length, value, _padding(entries, ctx, length), align,
                 sum(e.count for e in entries), conc, blocks * bpb, num_blocks, reserved,
                 bpb)


def _near(value: Fraction, best: Fraction, tol: float) -> bool:
    slack = abs(best) * Fraction(tol)
    return value >= best - slack


def choose(scored: Sequence[tuple[Layout, Score]], env: SearchEnv) -> int:
    """Index of the winner.  Among the layouts that fit (all, when none does): those
    within ``env.tolerance`` of the longest length (auto length only), then of the best
    main figure (and no worse than the best baseline layout), then of the least padding
    (tolerance x bytes per request) are near-ties; then the smaller hit alignment, the
    fewer groups, the better main figure, the less padding and the candidate order
    decide.  So the winner never scores below vLLM's own rule, and a rounding gain
    never buys many more groups or a huge prefix-hit boundary."""
    idx = [i for i, (_, s) in enumerate(scored) if s.fits] or list(range(len(scored)))
    tol = env.tolerance
    if env.max_model_len == -1:
        best_len = max(scored[i][1].max_model_len for i in idx)
        base_len = max((scored[i][1].max_model_len for i in idx if scored[i][0].baseline),
                       default=0)
        floor = max(base_len, best_len - int(best_len * tol))
        idx = [i for i in idx if scored[i][1].max_model_len >= floor]
    best = max(scored[i][1].value for i in idx)
    base = [scored[i][1].value for i in idx if scored[i][0].baseline]
    idx = [i for i in idx if _near(scored[i][1].value, best, tol)
           and (not base or scored[i][1].value >= max(base))]
    # padding: a near-tie when the difference is within tol of a request's bytes
    low = min(idx, key=lambda i: scored[i][1].padding_bytes_per_request)
    slack = scored[low][1].padding_bytes_per_request + \
        int(tol * scored[low][1].bytes_per_request)
    idx = [i for i in idx if scored[i][1].padding_bytes_per_request <= slack]
    return min(idx, key=lambda i: (scored[i][1].tie_break[1:], -scored[i][1].value,
                                   scored[i][1].padding_bytes_per_request, i))


#: kinds whose page vLLM 0.32 can pad to a larger, non-multiple page
#: (``unify_kv_cache_spec_page_size``: non-MLA attention; Mamba states are padded too)
_VLLM_PADDABLE = frozenset({"full_attention", "sliding_window", "chunked_local_attention",
                            "cross_attention", "sink_full_attention", "sliding_window_mla",
                            "rswa", "turboquant_full_attention"})
#: kinds vLLM's MLA + sliding-window fallback rejects (``SlidingWindowMLASpec``,
#: ``ChunkedLocalAttentionSpec``)
_VLLM_NO_FALLBACK = frozenset({"sliding_window_mla", "chunked_local_attention",
                               "hidden_state_cache"})


def _vllm_unify(specs: list[KVCacheSpec], env: SearchEnv
                ) -> tuple[dict[int, KVCacheSpec] | None, str | None]:
    """vLLM 0.32's page unification of distinct ``specs``: ``({id(spec): unified}, None)``
    or ``(None, why vLLM raises)``.

    Source: ``unify_kv_cache_spec_page_size`` (vllm/v1/core/kv_cache_utils.py@0.32), after
    the platform's ``_align_hybrid_block_size`` (attention blocks raised, by
    :func:`unify_page_sizes` without scaling, so one page holds the Mamba state): a page
    equal to the largest is kept; a state page is padded to it; an attention page that
    divides it takes ``block_size * ratio``; another non-MLA attention page is padded
    (its block size kept); an MLA / indexer page that does not divide it makes vLLM
    raise ``NotImplementedError``."""
    raised, _, _ = unify_page_sizes(specs, env.kernel_block_size, scale=False)
    # vLLM has one cache_config.block_size: in 'align' mode the platform hook sets
    # mamba_block_size to it after raising it (update_block_size_for_backend,
    # vllm/platforms/interface.py@0.32), so a state follows the raised attention block
    attn_blocks = {m.block_size for m in raised.values() if m.scales_with_block_size}
    if len(attn_blocks) == 1:
        block = next(iter(attn_blocks))
        raised = {s: (m if m.scales_with_block_size
                      or getattr(m, "mamba_cache_mode", None) != "align"
                      else m.with_attention_block_size(block)) for s, m in raised.items()}
    base = {id(s): (raised[s].copy_with_new_block_size(raised[s].block_size)
                    if raised[s].scales_with_block_size else raised[s]) for s in specs}
    target = max(b.real_page_size_bytes for b in base.values())
    out: dict[int, KVCacheSpec] = {}
    for s in specs:
        b = base[id(s)]
        page = b.real_page_size_bytes
        if page == target or page == 0:
            out[id(s)] = b
        elif not b.scales_with_block_size:
            out[id(s)] = b.with_page_size_padded(target)
        elif target % page == 0:
            out[id(s)] = b.copy_with_new_block_size(b.block_size * (target // page))
        elif b.kind in _VLLM_PADDABLE:
            out[id(s)] = b.with_page_size_padded(target)
        else:
            return None, (f"vLLM 0.32 cannot unify the pages: a {b.kind} page of {page} B "
                          f"does not divide the largest, {target} B, and vLLM pads only "
                          "non-MLA attention pages (unify_kv_cache_spec_page_size raises "
                          "NotImplementedError)")
    return out, None


def vllm_rule_layouts(items: Items, env: SearchEnv) -> list[Layout]:
    """vLLM 0.32's own layout of ``items`` (windows as given), marked as the baseline;
    ``[]`` where vLLM's planner raises (:func:`vllm_refusal` says why).

    Source: ``get_kv_cache_groups`` (vllm/v1/core/kv_cache_utils.py@0.32): one group
    when every layer shares a block table (``UniformTypeKVCacheSpecs``); else pages
    unified by :func:`_vllm_unify`, layers bucketed by their unified spec, each bucket
    cut into ``cdiv(n, group_size)`` strided groups (group size: the smallest bucket,
    the largest when it is under 1.5x the smallest;
    ``_get_kv_cache_groups_uniform_page_size``); where the pages cannot be unified, the
    MLA + sliding-window fallback (``_try_get_full_allocation_fallback_groups``: the
    windows as full attention in one group) or nothing.  Differential test against
    vLLM's planner: integrations/vllm/tests/test_vllm_layout_vs_vllm.py."""
    lays, _ = _vllm_rule(items, env)
    return lays


def vllm_refusal(items: Items, env: SearchEnv) -> str | None:
    """Why vLLM 0.32's planner raises on ``items`` (None when it plans them)."""
    return _vllm_rule(items, env)[1]


def _vllm_rule(items: Items, env: SearchEnv) -> tuple[list[Layout], str | None]:
    tag = " (vLLM's rule, windows as given)"
    first = one_group(items, env, vllm=True)
    if not first:
        specs = uniq(s for _, s in items)
        by_id, why = _vllm_unify(specs, env)
        if by_id is None:
            kinds = {s.kind for s in specs}
            full = _as_full(items) if ("mla_attention" in kinds and "sliding_window" in kinds
                                       and not kinds & _VLLM_NO_FALLBACK) else None
            first = one_group(full, env, vllm=True) if full is not None else []
            if not first:
                return [], why
            tag = " (vLLM's rule: pages not unifiable, windows as full attention)"
        else:
            mapped = [by_id[id(s)] for s in specs]
            key = {id(u): u for u in mapped}
            buckets = _bucketed([(n, by_id[id(s)]) for n, s in items], key)
            size = group_sizes([len(n) for n, _ in buckets])[0]
            first = [Layout("hybrid", functools.partial(_strided, buckets, size, True),
                            (f"{len(buckets)} buckets, group size {size}",),
                            entries=_bucket_entries(buckets, size, True), baseline=True)]
    for lay in first:
        lay.strategy = f"{lay.strategy}{tag}"
        lay.baseline = True
    return first, None


def _vllm_disable_hybrid_refusal(layer_specs: Mapping[str, KVCacheSpec],
                                 disable_hybrid: bool) -> str | None:
    """Why vLLM 0.32 raises before grouping with ``disable_hybrid_kv_cache_manager``:
    ``unify_hybrid_kv_cache_specs`` rebuilds a ``SlidingWindowMLASpec`` as an
    ``MLAAttentionSpec`` passing its ``bounded_replay`` field (TypeError; found by the
    differential test against vLLM's planner)."""
    if disable_hybrid and any(s.kind == "sliding_window_mla" for s in layer_specs.values()):
        return ("vLLM 0.32 raises with disable_hybrid_kv_cache_manager on sliding-window "
                "MLA layers (unify_hybrid_kv_cache_specs: MLAAttentionSpec got an "
                "unexpected keyword argument 'bounded_replay')")
    return None


@dataclass(frozen=True)
class VllmLayout:
    """vLLM 0.32's layout of a model's layers, scored (:func:`vllm_layout_of`).

    ``groups``: vLLM's KV-cache groups; ``num_blocks``: blocks of the pool (bytes //
    bytes per block id); ``max_concurrency``: ``num_blocks / blocks per request``
    (vLLM's ``get_max_concurrency_for_kv_cache_config``); ``score``: kvcore's full
    :class:`Score`."""

    layout: Layout
    score: Score

    @property
    def groups(self) -> tuple[KVCacheGroupSpec, ...]:
        return self.layout.groups

    @property
    def strategy(self) -> str:
        return self.layout.strategy

    @property
    def num_blocks(self) -> int | None:
        return self.score.num_blocks

    @property
    def max_concurrency(self) -> float | None:
        return self.score.max_concurrency

    def describe(self) -> str:
        return f"{self.strategy}: {self.score.describe()}"


def vllm_layout_of(
    layer_specs: Mapping[str, KVCacheSpec], *, ctx: PlanContext,
    kv_cache_memory_bytes: int | None = None, kernel_block_size: int | None = None,
    disable_hybrid_kv_cache_manager: bool = False, enable_prefix_caching: bool = True,
    env: SearchEnv | None = None,
) -> VllmLayout | None:
    """vLLM 0.32's own layout of ``layer_specs`` ({layer name: spec}, windows as given,
    each spec given ``ctx`` by ``with_plan_context`` as :func:`kvcore.planning.plan` does:
    a Mamba state in ``none`` mode takes ``max_model_len`` as its block size), scored on ``kv_cache_memory_bytes`` (bytes) at ``ctx``; None where vLLM's planner
    raises (:func:`vllm_refusal`).  The one implementation behind ``PlanStats.vllm_layout``
    (the planner's baseline) and ``PlanStats.vllm_own_layout``
    (:func:`kvcore.deploy.ceilings.vllm_layout`).  ``env`` replaces the other options
    but ``disable_hybrid_kv_cache_manager``.  Raises ConfigError as
    :func:`group_layers`."""
    layer_specs = check_layer_specs(layer_specs)
    _arg_ctx(ctx, "vllm_layout_of")
    done: dict[int, KVCacheSpec] = {}  # the plan's context, as kvcore.planning.plan
    for s in layer_specs.values():
        if id(s) not in done:
            done[id(s)] = s.with_plan_context(ctx)
    layer_specs = {n: done[id(s)] for n, s in layer_specs.items()}
    if env is None:
        env = SearchEnv(ctx=ctx, kernel_block_size=kernel_block_size,
                        budgets=None if kv_cache_memory_bytes is None
                        else (int(kv_cache_memory_bytes),),
                        max_model_len=ctx.max_model_len,
                        enable_prefix_caching=enable_prefix_caching)
    if _vllm_disable_hybrid_refusal(layer_specs, disable_hybrid_kv_cache_manager):
        return None
    items, _, _ = normalize_specs(
        layer_specs, max_model_len=None, kernel_block_size=env.kernel_block_size,
        disable_hybrid_kv_cache_manager=disable_hybrid_kv_cache_manager)
    if not items:
        return None
    lays = vllm_rule_layouts(items, env)
    if not lays:
        return None
    return VllmLayout(lays[0], score_layout(lays[0], env))


def search_layouts(items: Items, env: SearchEnv, raw_items: Items | None = None
                   ) -> tuple[Layout, Score, list[tuple[Layout, Score]]]:
    """Score every candidate; returns (winner, its score, all scored in order).
    ``raw_items``: the layers before windows >= max_model_len became full attention;
    vLLM's layout of them (of ``items`` when None) is always a candidate and the
    baseline.  Deterministic: same input, same winner."""
    winner, best, scored, _ = _search(items, env, raw_items)
    return winner, best, scored


def _serving_judgment(scored: list[tuple[Layout, Score]], env: SearchEnv) -> Any:
    """(index of the winner, the judged candidates) by what serving sees
    (:mod:`kvcore.serving`): among the layouts that fit and keep at least the guarantee
    of vLLM's layout (the baseline), ranked by the analytic time, the best
    ``env.judge_top_k`` and vLLM's layout are timed by ``env.judge``; the winner by
    :func:`kvcore.serving.pick`."""
    from kvcore import serving

    ctx = env.ctx
    workload = serving.servable(env.workload, ctx.max_model_len) if env.workload else \
        serving.default_workload(ctx.max_model_len, ctx.max_num_batched_tokens)
    base = [i for i, (lay, _) in enumerate(scored) if lay.baseline]
    b = base[-1] if base else None
    idx = [i for i, (_, sc) in enumerate(scored) if sc.fits]
    if b is not None and scored[b][1].fits and env.budgets is not None:
        floor = scored[b][1].value
        idx = [i for i in idx if scored[i][1].value >= floor]
    if not idx:
        idx = list(range(len(scored)))
    if b is not None and b not in idx:
        idx.append(b)
    nominal = None
    if env.budgets is None and b is not None:
        # no budget (or only a block count): layouts are compared at equal memory,
        # a nominal pool of vLLM's layout's num_gpu_blocks_override blocks, or of
        # max_num_seqs / 4 of its requests at max_model_len
        bsc = scored[b][1]
        nominal = (env.num_blocks_override * bsc.bytes_per_block
                   if env.num_blocks_override is not None
                   else bsc.bytes_per_request * max(1, workload.max_num_seqs // 4))
    cands = []
    for i in idx:
        lay, sc = scored[i]
        num_blocks = sc.num_blocks if nominal is None or not sc.bytes_per_block else \
            nominal // sc.bytes_per_block
        fig = serving.figures_of(
            [(e.count, e.specs, e.bytes_per_block, e.block_size, e.caching)
             for e in lay.entries],
            num_blocks, sc.reserved_blocks,
            sc.max_concurrency if env.budgets is not None else None, ctx, workload,
            env.enable_prefix_caching)
        if not sc.fits:
            fig = dataclasses.replace(fig, steady_capacity_requests=0.0)
        fig = dataclasses.replace(fig, time_s=serving.analytic_time(fig, workload, ctx))
        cands.append(serving.Candidate(lay.strategy, functools.partial(_groups_of, lay),
                                       fig, sc.num_blocks, ctx, is_vllm_layout=i == b,
                                       index=i))
    order = sorted(range(len(cands)), key=lambda k: (
        cands[k].figures.time_s, -(cands[k].figures.guarantee or 0.0), k))
    top = [cands[k] for k in order[:max(1, env.judge_top_k)]]
    if not any(c.is_vllm_layout for c in top):
        top += [c for c in cands if c.is_vllm_layout]
    distinct: list[Any] = []
    for c in top:  # vLLM's layout under a generator's name is one layout, not two
        if scored[c.index][0].entries not in distinct:
            distinct.append(scored[c.index][0].entries)
    if env.judge is not None and len(distinct) > 1:  # one layout: nothing to choose
        times = _judge_times(env.judge, top, workload)
        judged_by = getattr(env.judge, "judged_by", getattr(env.judge, "__name__", "judge"))
        for c, t in zip(top, times):
            c.figures = dataclasses.replace(c.figures, time_s=t, judged_by=str(judged_by))
    w = serving.pick(top)
    if top[w].is_vllm_layout:  # the same layout under a generator's name, if one has it
        same = [c for c in top if not c.is_vllm_layout and c.figures == top[w].figures
                and scored[c.index][0].entries == scored[top[w].index][0].entries]
        if same:
            return same[0].index, top, workload
    return top[w].index, top, workload


def _judge_times(judge: Any, top: list[Any], workload: Any) -> list[float]:
    """``judge(top, workload)`` checked: one time per candidate, each a number of
    seconds >= 0 (``inf``: the candidate serves no request; numpy numbers too; NaN,
    negatives, bool and text refused); an exception the judge raises (SystemExit
    included) is a ConfigError naming the judge.  Raises ConfigError (field ``judge``)
    naming the judge, the candidate and the value."""
    from kvcore.units import as_real, shorten

    name = getattr(judge, "judged_by", getattr(judge, "__name__", type(judge).__name__))
    try:
        raw = judge(top, workload)
        times = list(raw)
    except KVCoreError:
        raise
    except (Exception, SystemExit) as e:  # a user's judge: named, never a raw error
        raise ConfigError(f"the plan's judge {str(name)!r} raised {type(e).__name__}: "
                          f"{shorten(str(e))}", field="judge", value=str(name)) from e
    if len(times) != len(top):
        raise ConfigError(f"the plan's judge returned {len(times)} times for "
                          f"{len(top)} candidates", field="judge")
    out = []
    for c, t in zip(top, times):
        real = as_real(t)
        if real is None or not real >= 0.0:  # NaN fails >= too
            raise ConfigError(f"the plan's judge {str(name)!r} returned {shorten(t)} for "
                              f"candidate {getattr(c, 'strategy', c.index)!r}; a time must "
                              f"be a number of seconds >= 0 (inf: it serves no request)",
                              field="judge", value=shorten(t))
        out.append(real)
    return out


def _groups_of(lay: Layout) -> tuple[KVCacheGroupSpec, ...]:
    return lay.groups


def _search(items: Items, env: SearchEnv, raw_items: Items | None = None,
            with_vllm: bool = True
            ) -> tuple[Layout, Score, list[tuple[Layout, Score]], Any]:
    layouts = candidate_layouts(items, env)
    for lay in layouts:
        lay.baseline = False
    vllm = vllm_rule_layouts(raw_items if raw_items is not None else items, env)[:1] \
        if with_vllm else []
    same = [lay for lay in layouts[:8] if vllm and lay.entries == vllm[0].entries]
    if same:  # vLLM's layout is already a candidate (under a generator's name)
        same[0].baseline = True
    else:
        layouts += vllm
    scored = [(lay, score_layout(lay, env)) for lay in layouts]
    if env.max_model_len == -1:  # the longest length decides (the former search)
        best = choose(scored, env)
        return scored[best][0], scored[best][1], scored, None
    best, judged, workload = _serving_judgment(scored, env)
    return scored[best][0], scored[best][1], scored, (judged, workload)


def _runner_up(scored: list[tuple[Layout, Score]], winner: Layout, env: SearchEnv
               ) -> tuple[str, Score] | None:
    win_groups = winner.groups
    rest = [(lay, sc) for lay, sc in scored if lay is not winner]
    rest = [(lay, sc) for lay, sc in rest
            if lay._entries != winner._entries or lay.groups != win_groups]
    if not rest:
        return None
    i = choose(rest, env)
    return rest[i][0].strategy, rest[i][1]


def group_layers(
    layer_specs: Mapping[str, KVCacheSpec],
    *,
    ctx: PlanContext | None = None,
    kernel_block_size: int | None = None,
    disable_hybrid_kv_cache_manager: bool = False,
    kv_cache_layout: str | None = None,
    kv_cache_memory_bytes: int | None = None,
    env: SearchEnv | None = None,
) -> GroupingResult:
    """Group per-layer specs into KV-cache groups: normalize, generate the candidate
    layouts, keep the best by :func:`score_layout`.

    Parameters
    ----------
    layer_specs:
        ``{layer name: spec}`` in layer order (order matters: buckets and strided
        groups follow it).
    ctx:
        Sizing context (default: max_model_len 8192).
    kernel_block_size:
        Attention block sizes must be multiples of it (tokens).
    disable_hybrid_kv_cache_manager:
        Plan sliding-window and chunked-local layers as full attention.
    kv_cache_layout:
        Physical axis order (``LBNHC`` default; block-outermost such as ``BLHNC`` packs
        different page sizes inside one block id).
    kv_cache_memory_bytes:
        Budget, to compare candidates by max concurrency (optional; without it the
        fewest bytes per request win).
    env:
        A full :class:`SearchEnv` (used by :func:`kvcore.planning.plan`; overrides the
        options above except ``disable_hybrid_kv_cache_manager``).

    Raises
    ------
    ConfigError
        No layers, a bad kernel_block_size or layout, a plugin spec with an invalid
        size, or hybrid disabled on a model with state layers.
    """
    layer_specs = check_layer_specs(layer_specs)
    if not layer_specs:
        raise ConfigError("no layers to plan: the model has no KV-cache layers",
                          field="layers")
    if ctx is not None:
        _arg_ctx(ctx, "group_layers")
    _arg_count(kernel_block_size, "kernel_block_size", "group_layers")
    _arg_bool(disable_hybrid_kv_cache_manager, "disable_hybrid_kv_cache_manager",
              "group_layers")
    if kv_cache_layout is not None and not isinstance(kv_cache_layout, str):
        raise ConfigError(f"group_layers: kv_cache_layout = {kv_cache_layout!r} must be a "
                          f"layout name such as LBNHC", field="kv_cache_layout")
    _arg_count(kv_cache_memory_bytes, "kv_cache_memory_bytes", "group_layers", minimum=0)
    if env is not None and not isinstance(env, SearchEnv):
        raise ConfigError("group_layers: env must be a SearchEnv", field="env")
    norm_len: int | None = None
    if env is None:
        norm_len = ctx.max_model_len if ctx is not None and ctx.max_model_len > 0 else None
        if ctx is None or ctx.max_model_len <= 0:
            ctx = PlanContext(max_model_len=8192) if ctx is None else \
                dataclasses.replace(ctx, max_model_len=8192)
        env = SearchEnv(
            ctx=ctx, kernel_block_size=kernel_block_size,
            block_outermost=is_block_outermost(kv_cache_layout),
            budgets=None if kv_cache_memory_bytes is None else (kv_cache_memory_bytes,),
            max_model_len=ctx.max_model_len)
    else:
        is_block_outermost(kv_cache_layout)
        norm_len = env.max_model_len if env.max_model_len > 0 else env.limit
    items, skipped, notes = normalize_specs(
        layer_specs, max_model_len=norm_len,
        kernel_block_size=env.kernel_block_size,
        disable_hybrid_kv_cache_manager=disable_hybrid_kv_cache_manager)
    if not items:
        return GroupingResult((), "empty", skipped, ("no layer needs a KV cache",))
    raw_items = None
    if norm_len is not None and notes:  # some windows were promoted to full attention
        raw_items, _, _ = normalize_specs(
            layer_specs, max_model_len=None, kernel_block_size=env.kernel_block_size,
            disable_hybrid_kv_cache_manager=disable_hybrid_kv_cache_manager)
    refused = _vllm_disable_hybrid_refusal(layer_specs, disable_hybrid_kv_cache_manager)
    winner, best, scored, judgment = _search(items, env, raw_items,
                                             with_vllm=refused is None)
    runner = _runner_up(scored, winner, env)
    distinct = len(scored)
    why = [f"search: {winner.strategy} chosen among {distinct} candidate layouts "
           f"({best.describe()})"]
    if runner is not None:
        why.append(f"runner-up: {runner[0]} ({runner[1].describe()})")
    serving = vllm_report = workload = None
    front: tuple[Any, ...] = ()
    if judgment is not None:
        from kvcore.serving import LayoutReport, pareto_front

        judged, workload = judgment
        win = next(c for c in judged if c.index == scored.index(
            next(p for p in scored if p[0] is winner)))
        serving = win.figures
        base = next((c for c in judged if c.is_vllm_layout), None)
        if base is not None:
            vllm_report = LayoutReport(base.strategy, base.figures, True)
            if distinct > 1:
                why.append(_versus(win, base))
        front = tuple(LayoutReport(c.strategy, c.figures, c.is_vllm_layout)
                      for c in pareto_front(judged))
    if not any(lay.baseline for lay, _ in scored):
        refusal = refused or vllm_refusal(raw_items if raw_items is not None else items,
                                          env)
        if refusal:
            why.append(f"no vLLM layout to compare: {refusal}")
    return GroupingResult(winner.groups, winner.strategy, skipped,
                          tuple(notes) + _dedupe(winner.notes) + tuple(why), runner,
                          distinct, env.block_outermost, serving, vllm_report, front,
                          workload)


def _versus(win: Any, base: Any) -> str:
    """The note comparing the winner with vLLM's layout."""
    f, v = win.figures, base.figures
    if win is base:
        return (f"serving: vLLM's layout kept ({f.num_groups} groups, time {f.time_s:.4g} s "
                f"on the workload, {f.judged_by}); no candidate was faster")
    gain = v.time_s / f.time_s - 1 if f.time_s and v.time_s != float("inf") else None
    return (f"serving: {f.time_s:.4g} s against vLLM's layout's {v.time_s:.4g} s on the "
            f"workload ({f.judged_by})" + (f", {gain:+.1%}" if gain is not None else "")
            + f"; groups {f.num_groups} vs {v.num_groups}, hit alignment "
            f"{f.prefix_hit_alignment_tokens} vs {v.prefix_hit_alignment_tokens} tokens")


def _dedupe(notes: Iterable[str]) -> tuple[str, ...]:
    return tuple(dict.fromkeys(notes))
