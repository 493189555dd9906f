"""Plain data produced by grouping and planning, consumed by the runtime and kernels."""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import Any

from kvcore.errors import ConfigError
from kvcore.serving import LayoutReport, ServingFigures
from kvcore.specs import KVCacheSpec

__all__ = ["KVCacheGroupSpec", "KVCacheTensor", "KVCacheConfig", "PlanStats"]


def _names(value: Any, field_name: str, owner: str) -> tuple[str, ...]:
    """A tuple of non-empty layer-name strings; raises ConfigError naming the field."""
    from kvcore.units import shorten

    if isinstance(value, (str, bytes)) or not isinstance(value, (list, tuple)):
        raise ConfigError(f"{owner}.{field_name} = {shorten(value)} must be a list of "
                          f"layer names", field=field_name, value=shorten(value))
    for v in value:
        if not isinstance(v, str) or not v:
            raise ConfigError(f"{owner}.{field_name} holds {shorten(v)}: layer names are "
                              f"non-empty strings", field=field_name, value=shorten(v))
    return tuple(value)


def _items(value: Any, kind: type, field_name: str, owner: str) -> tuple[Any, ...]:
    from kvcore.units import shorten

    if isinstance(value, (str, bytes, dict)) or not isinstance(value, (list, tuple)):
        raise ConfigError(f"{owner}.{field_name} = {shorten(value)} must be a list of "
                          f"{kind.__name__}", field=field_name, value=shorten(value))
    for v in value:
        if not isinstance(v, kind):
            raise ConfigError(f"{owner}.{field_name} holds {shorten(v)}, not a "
                              f"{kind.__name__}", field=field_name, value=shorten(v))
    return tuple(value)


def _count(value: Any, field_name: str, owner: str) -> int:
    from kvcore.units import check_int

    return check_int(value, f"{owner}.{field_name}", minimum=0,
                     maximum=1 << 50)


@dataclass(frozen=True)
class KVCacheGroupSpec:
    """Layers that share one block table.

    Attributes
    ----------
    layer_names:
        The group's layers, in layer order.
    spec:
        The spec the group's runtime manager reads: the layers' merged spec, or, when
        they differ, the one with the largest sliding window (the group frees and looks
        up by it) or the first layer's (kind, block size).
    layer_specs:
        Per-layer specs when the layers' specs differ (kinds, pages or windows); None
        when every layer has ``spec``.  ``spec_of(layer)`` gives a layer's own spec.
    """

    layer_names: tuple[str, ...]
    spec: KVCacheSpec
    layer_specs: tuple[KVCacheSpec, ...] | None = None

    def __post_init__(self) -> None:
        """Checks each field (ConfigError naming it)."""
        owner = "KVCacheGroupSpec"
        object.__setattr__(self, "layer_names", _names(self.layer_names, "layer_names",
                                                       owner))
        if not isinstance(self.spec, KVCacheSpec):
            from kvcore.units import shorten

            raise ConfigError(f"{owner}.spec = {shorten(self.spec)} must be a KVCacheSpec",
                              field="spec", value=shorten(self.spec))
        if self.layer_specs is not None:
            object.__setattr__(self, "layer_specs", _items(self.layer_specs, KVCacheSpec,
                                                           "layer_specs", owner))
            if len(self.layer_specs) != len(self.layer_names):
                raise ConfigError(f"{owner}: {len(self.layer_specs)} layer_specs for "
                                  f"{len(self.layer_names)} layer_names (one each)",
                                  field="layer_specs")
            object.__setattr__(self, "_spec_by_name",
                               dict(zip(self.layer_names, self.layer_specs)))

    @property
    def kind(self) -> str:
        return self.spec.kind

    @property
    def block_size(self) -> int:
        return self.spec.block_size

    @property
    def is_packed(self) -> bool:
        return self.layer_specs is not None

    def spec_of(self, layer_name: str) -> KVCacheSpec:
        """The spec of one layer of the group."""
        if self.layer_specs is None:
            return self.spec
        return self.__dict__["_spec_by_name"][layer_name]

    @property
    def page_sizes_differ(self) -> bool:
        """True when the group's layers have pages of different sizes."""
        if self.layer_specs is None:
            return False
        first = self.layer_specs[0].page_size_bytes
        return any(s.page_size_bytes != first for s in self.layer_specs)

    @property
    def page_size_bytes(self) -> int:
        """One layer's page (bytes per block) when every layer of the group has the same
        page; the bytes one block id takes across the group when the pages differ
        (``layer_page_size_bytes`` then lists each layer's)."""
        if self.layer_specs is None:
            return self.spec.page_size_bytes
        if not self.page_sizes_differ:
            return self.layer_specs[0].page_size_bytes
        return self.bytes_per_block

    @property
    def layer_page_size_bytes(self) -> list[int]:
        """Each layer's page (bytes per block), in layer order."""
        if self.layer_specs is None:
            return [self.spec.page_size_bytes] * len(self.layer_names)
        return [s.page_size_bytes for s in self.layer_specs]

    @property
    def bytes_per_block(self) -> int:
        """Bytes one block id of this group takes across all of its layers."""
        if self.layer_specs is None:
            return self.spec.page_size_bytes * len(self.layer_names)
        return sum(s.page_size_bytes for s in self.layer_specs)

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "type": self.kind,
            "layer_names": list(self.layer_names),
            "block_size": self.block_size,
            "page_size_bytes": self.page_size_bytes,
            "spec": self.spec.to_dict(),
        }
        if self.layer_specs is not None:
            out["layer_specs"] = [s.to_dict() for s in self.layer_specs]
            if self.page_sizes_differ:
                out["layer_page_size_bytes"] = self.layer_page_size_bytes
        return out


@dataclass(frozen=True)
class KVCacheTensor:
    """One KV-cache buffer (or a view into a shared one).

    Attributes
    ----------
    size:
        Bytes of the buffer.
    shared_by:
        Layer names whose caches live in it (one layer of each group, which never use
        the same block id at the same time).
    offset:
        Byte offset of this layer's page inside a block for a block-outermost layout
        (0 otherwise).
    block_stride:
        Bytes from block i to block i+1 in the buffer (the page size for the default
        layer-outermost layout; the bytes of a whole block id for a block-outermost one).

    In a block-outermost layout every entry is a view into ONE buffer of
    ``num_blocks x block_stride`` bytes (layers of different groups overlap, as they
    do not use a block id at the same time); ``size`` is then the bytes the layer's
    pages span, and the sizes add up to more than the buffer.  The plan's
    ``kv_cache_memory_bytes_used`` gives the real total.
    """

    size: int
    shared_by: tuple[str, ...]
    offset: int = 0
    block_stride: int = 0

    def __post_init__(self) -> None:
        """Checks each field (ConfigError naming it)."""
        owner = "KVCacheTensor"
        for name in ("size", "offset", "block_stride"):
            object.__setattr__(self, name, _count(getattr(self, name), name, owner))
        object.__setattr__(self, "shared_by", _names(self.shared_by, "shared_by", owner))

    def to_dict(self) -> dict[str, Any]:
        return {"size": self.size, "shared_by": list(self.shared_by),
                "offset": self.offset, "block_stride": self.block_stride}


@dataclass(frozen=True)
class KVCacheConfig:
    """A planned KV cache: blocks, tensors and groups, plus what they mean for users.

    ``num_blocks`` counts the null block (block 0, never handed out).  Sizes in bytes,
    lengths in tokens.  The capacity fields are None when no memory budget was given.
    """

    num_blocks: int | None
    kv_cache_tensors: tuple[KVCacheTensor, ...]
    kv_cache_groups: tuple[KVCacheGroupSpec, ...]
    max_model_len: int = 0
    bytes_per_block: int = 0
    kv_cache_layout: str = "LBNHC"
    stats: PlanStats = field(default_factory=lambda: PlanStats(), compare=False)

    def __post_init__(self) -> None:
        """Checks each field (ConfigError naming it)."""
        from kvcore.units import shorten

        owner = "KVCacheConfig"
        if self.num_blocks is not None:
            object.__setattr__(self, "num_blocks", _count(self.num_blocks, "num_blocks",
                                                          owner))
        object.__setattr__(self, "kv_cache_tensors", _items(
            self.kv_cache_tensors, KVCacheTensor, "kv_cache_tensors", owner))
        object.__setattr__(self, "kv_cache_groups", _items(
            self.kv_cache_groups, KVCacheGroupSpec, "kv_cache_groups", owner))
        for name in ("max_model_len", "bytes_per_block"):
            object.__setattr__(self, name, _count(getattr(self, name), name, owner))
        if not isinstance(self.kv_cache_layout, str) or not self.kv_cache_layout:
            raise ConfigError(f"{owner}.kv_cache_layout = {shorten(self.kv_cache_layout)} "
                              f"must be a layout name such as LBNHC",
                              field="kv_cache_layout")
        if isinstance(self.stats, dict):  # older callers passed a plain dict
            try:
                object.__setattr__(self, "stats", PlanStats.from_mapping(self.stats))
            except AttributeError as exc:
                raise ConfigError(f"{owner}.stats: {exc}", field="stats") from None
        elif not isinstance(self.stats, PlanStats):
            raise ConfigError(f"{owner}.stats = {shorten(self.stats)} must be a PlanStats "
                              f"(or a dict of its fields)", field="stats")

    @property
    def groups(self) -> tuple[KVCacheGroupSpec, ...]:
        return self.kv_cache_groups

    def __getattr__(self, name: str) -> Any:
        # plan statistics (max_concurrency, kv_cache_capacity_tokens, ...) as attributes
        stats = self.__dict__.get("stats")
        if stats is not None and name in PlanStats.field_names():
            return getattr(stats, name)
        raise AttributeError(name)


def _json_value(value: Any) -> Any:
    """``value`` with tuples as lists, dataclasses as dicts and non-finite floats (an
    unbounded figure) as None, so ``json.dumps`` accepts it."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: _json_value(getattr(value, f.name))
                for f in dataclasses.fields(value)}
    if isinstance(value, dict):
        return {str(k): _json_value(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_json_value(v) for v in value]
    return value


@dataclass
class PlanStats:
    """What a plan means for users: capacity, per-request figures and how it was chosen.

    Every figure is per rank.  Sizes in bytes, lengths in tokens, counts in blocks.
    ``None`` means "not computed" (no memory budget) or "not bounded by the KV cache"
    (a model without KV-cache layers); :meth:`to_dict` writes it as JSON ``null``.

    Read a figure as an attribute (``stats.max_concurrency``, or
    ``config.max_concurrency`` on the :class:`KVCacheConfig`); the mapping forms
    ``stats["max_concurrency"]``, ``stats.get(...)`` and ``key in stats`` (True when
    the field is set, i.e. not None) keep older callers working.

    Adding a figure (e.g. the GPU-planning issue's): add a typed field with a default
    here, in the section of the step that computes it, and set it in that step
    (``plan()`` in :mod:`kvcore.planning`, or :func:`kvcore.models.planner.plan_model`);
    :meth:`to_dict` and the attribute reads pick it up without further changes; add it
    to :func:`kvcore.planning.plan_to_dict` only if ``kvcore plan --json`` prints it at
    the top level.

    Attributes (planning)
    ---------------------
    max_concurrency:
        ``num_blocks / blocks_per_request`` (vLLM's convention: neither the null block
        nor reserved sink blocks subtracted).
    max_concurrency_batched:
        kvcore's tighter figure: one request prefilling a whole step, the others
        decoding; the null block and reserved blocks are subtracted.
    kv_cache_capacity_tokens:
        ``int(max_concurrency x max_model_len)``.
    estimated_max_model_len, longest_max_model_len:
        The planned length when it fits; the longest length the blocks allow (null
        block and reserved blocks subtracted).
    bytes_per_token:
        Real K/V bytes per token over every layer whose page grows with the block size.
    blocks_per_request:
        Blocks one request of ``max_model_len`` needs, summed over the groups.
    num_reserved_blocks:
        Blocks the runtime takes once for all requests (attention sinks:
        ``cdiv(sink_len, block_size)`` per sink group), besides the null block.
    prefix_hit_alignment_tokens:
        Prefix-cache hits are multiples of this (lcm of the caching groups' block
        sizes); None when no group prefix caches.
    strategy, runner_up_strategy, runner_up_score, candidates_scored:
        The layout the search chose, the second best and its score, and how many
        candidate layouts were scored.

    Attributes (serving, issue 22; :mod:`kvcore.serving`)
    ------------------------------------------------------
    serving:
        The chosen layout's figures (:class:`~kvcore.serving.ServingFigures`: groups,
        block sizes, hit alignment, guarantee, steady capacity, time to serve the
        workload, who judged it).
    vllm_layout:
        vLLM 0.32's own layout of the same layers, judged on the same workload
        (:class:`~kvcore.serving.LayoutReport`); always reported beside the winner.
    gain_over_vllm:
        ``vLLM's time / the chosen layout's time - 1`` (0.0 when vLLM's layout won;
        None when vLLM's layout does not fit).
    pareto_front:
        The judged layouts no other beats on guarantee, steady capacity, groups, hit
        alignment and time (``kvcore plan --explain``).
    workload:
        The workload the layouts were judged on (``Workload.to_dict()``).
    """

    # ---- capacity -----------------------------------------------------------------
    max_concurrency: float | None = None
    max_concurrency_batched: float | None = None
    kv_cache_capacity_tokens: int | None = None
    estimated_max_model_len: int | None = None
    longest_max_model_len: int | None = None
    # ---- per request ----------------------------------------------------------------
    bytes_per_token: float = 0.0
    cross_attention_bytes_per_request: int = 0
    state_bytes_per_request: int = 0
    padding_bytes_per_block: int = 0
    padding_bytes_per_request: int = 0
    blocks_per_request: int = 0
    kv_cache_memory_bytes_for_one_request: int = 0
    num_reserved_blocks: int = 0
    prefix_hit_alignment_tokens: int | None = None
    # ---- budget and stages ----------------------------------------------------------
    kv_cache_memory_bytes: int | list[int] | None = None
    kv_cache_memory_bytes_used: int = 0
    num_blocks_per_stage: list[int] | None = None
    bytes_per_block_per_stage: list[int] | None = None
    stages: list[list[str]] | None = None
    # ---- layers ---------------------------------------------------------------------
    has_mamba_layers: bool = False
    has_mixed_precision_kv_cache: bool = False
    needs_kv_cache_zeroing: bool = False
    skipped_layers: list[str] = field(default_factory=list)
    # ---- the search -----------------------------------------------------------------
    strategy: str = ""
    runner_up_strategy: str | None = None
    runner_up_score: dict[str, Any] | None = None
    candidates_scored: int = 0
    notes: list[str] = field(default_factory=list)
    # ---- serving (issue 22) -------------------------------------------------------
    serving: ServingFigures | None = None
    vllm_layout: LayoutReport | None = None
    gain_over_vllm: float | None = None
    pareto_front: list[LayoutReport] = field(default_factory=list)
    workload: dict[str, Any] | None = None
    # ---- options the plan was made with -------------------------------------------
    max_num_batched_tokens: int = 8192
    max_num_encoder_input_tokens: int = 0
    enable_prefix_caching: bool = True
    tensor_parallel_size: int = 1
    pipeline_parallel_size: int = 1
    plan_context: Any = None
    max_model_len_limit: int | None = None
    max_model_len_limit_source: str = ""
    # ---- the model (set by plan_model) ---------------------------------------------
    model: str | None = None
    model_type: str | None = None
    model_source: str | None = None
    kv_cache_dtype: str | None = None
    model_dtype: str | None = None
    layers_per_kind: dict[str, int] | None = None
    num_layers: int | None = None
    #: a block size the user gave that the plan raised (a hybrid model and a
    #: kernel_block_size that does not divide it, as vLLM 0.32): given, kernel, used
    block_size_raised: dict[str, int] | None = None
    # ---- the GPU budget (set by kvcore.deploy.budget.plan_on_gpu; issue #16) ---------------
    weights_bytes: int | None = None
    weights_bytes_total: int | None = None
    weights_source: str | None = None
    overhead_bytes: int | None = None
    gpu: dict[str, Any] | None = None
    gpu_memory_utilization: float | None = None
    fits: bool | None = None
    min_tensor_parallel_size_that_fits: int | None = None
    num_gpus: int | None = None  # tensor x pipeline x data parallel sizes
    # ---- the engine profile (kvcore.deploy.engines / ceilings; issue #23) --------------
    engine: str | None = None
    engine_release: str | None = None
    ledger: dict[str, Any] | None = None
    ceilings: list[dict[str, Any]] | None = None
    #: vLLM's own layout beside kvcore's (kvcore.deploy.ceilings.vllm_layout; issue #23)
    vllm_own_layout: dict[str, Any] | None = None
    data_parallel_size: int | None = None
    weights_mtp_bytes: int | None = None  # whole-checkpoint MTP / next-n layers
    weights_include_mtp: bool | None = None  # loaded per rank (--include-mtp)

    @classmethod
    def field_names(cls) -> frozenset[str]:
        names = cls.__dict__.get("_field_names")
        if names is None:
            names = frozenset(f.name for f in dataclasses.fields(cls))
            cls._field_names = names  # type: ignore[attr-defined]
        return names

    @classmethod
    def from_mapping(cls, data: Any) -> PlanStats:
        """A PlanStats from a ``{field: value}`` mapping (unknown keys: AttributeError)."""
        stats = cls()
        stats.update(data)
        return stats

    def to_dict(self) -> dict[str, Any]:
        """Every field, JSON-ready (tuples as lists, the plan context as a dict,
        unbounded figures as None)."""
        out = {f.name: _json_value(getattr(self, f.name)) for f in dataclasses.fields(self)}
        bpt = out.get("bytes_per_token")
        if isinstance(bpt, float) and bpt.is_integer():  # whole bytes: an int in JSON
            out["bytes_per_token"] = int(bpt)
        return out

    # ---- mapping compatibility ----------------------------------------------------
    def __getitem__(self, key: str) -> Any:
        if key not in self.field_names():
            raise KeyError(key)
        return getattr(self, key)

    def __setitem__(self, key: str, value: Any) -> None:
        self.update({key: value})

    def __contains__(self, key: object) -> bool:
        return key in self.field_names() and getattr(self, str(key)) is not None

    def __iter__(self) -> Any:
        """The names of the fields that are set (not None), as ``in`` counts them, so
        ``list(stats)``, ``dict(stats.items())`` and ``for key in stats`` agree."""
        return iter([k for k in self.field_names_ordered() if k in self])

    def keys(self) -> list[str]:
        return list(self)

    def items(self) -> list[tuple[str, Any]]:
        return [(k, getattr(self, k)) for k in self]

    def values(self) -> list[Any]:
        return [getattr(self, k) for k in self]

    @classmethod
    def field_names_ordered(cls) -> tuple[str, ...]:
        return tuple(f.name for f in dataclasses.fields(cls))

    def get(self, key: str, default: Any = None) -> Any:
        value = getattr(self, key, None) if key in self.field_names() else None
        return default if value is None else value

    def update(self, data: Any = (), **kw: Any) -> None:
        """Set fields from a mapping; an unknown name raises AttributeError naming it."""
        items = dict(data, **kw)
        for key, value in items.items():
            if key not in self.field_names():
                raise AttributeError(f"PlanStats has no field {key!r}; add it to the class "
                                     f"(see its docstring)")
            setattr(self, key, value)
