"""KV-cache specs: what one layer stores per token (or per request), and its page size.

A spec is a frozen, keyword-only dataclass: a value, compared by value, validated at
construction (an invalid field raises :class:`~kvcore.errors.SpecError` naming it).
``block_size`` is in tokens; every size is in bytes.

The page-size formulas follow vLLM's v1 ``kv_cache_interface.py``
(``AttentionSpec.page_size_bytes = block_size x num_kv_heads x (K + V bytes per head)``),
with the bytes per head given by the layer's ``kv_cache_dtype`` scheme
(:mod:`kvcore.quant`).  The per-request block counts follow the same reference:

======================================  =================================================
kind                                    blocks one request of ``max_len`` tokens needs
======================================  =================================================
``full_attention``                      cdiv(max_len, block_size)
``sliding_window``                      cdiv(min(window - 1 + max_num_batched_tokens,
                                        max_len), block_size) + 1
``chunked_local_attention``             cdiv(min(chunk + max_num_batched_tokens,
                                        max_len), block_size)
``cross_attention``                     cdiv(max_num_encoder_input_tokens, block_size)
``encoder_only_attention``              0 (no KV cache)
``sink_full_attention``                 cdiv(max_len, block_size)
======================================  =================================================
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any, ClassVar, TypeVar

from kvcore.dtypes import normalize_dtype
from kvcore.errors import SpecError, SpecMergeError

__all__ = [
    "PlanContext",
    "KVCacheSpec",
    "AttentionSpec",
    "FullAttentionSpec",
    "SlidingWindowSpec",
    "ChunkedLocalAttentionSpec",
    "CrossAttentionSpec",
    "EncoderOnlyAttentionSpec",
    "SinkFullAttentionSpec",
    "KVTraffic",
    "cdiv",
]

S = TypeVar("S", bound="KVCacheSpec")

MAMBA_CACHE_MODES = ("none", "align", "all")


def cdiv(a: int, b: int) -> int:
    """Ceiling division of non-negative ints: ``ceil(a / b)`` for ``a >= 0, b >= 1``.
    Numpy integers count as the equal int.  Raises ConfigError for anything else (a
    bool, a float, a negative, ``b = 0``)."""
    if type(a) is not int or type(b) is not int:  # off the fast path: numpy integers
        from kvcore.units import as_int

        ia, ib = as_int(a), as_int(b)
        if ia is None or ib is None:
            from kvcore.errors import ConfigError

            raise ConfigError(f"cdiv needs ints a >= 0 and b >= 1, got a={repr(a)[:40]}, "
                              f"b={repr(b)[:40]}", field="a" if ia is None else "b")
        a, b = ia, ib
    if a < 0 or b < 1:
        from kvcore.errors import ConfigError

        raise ConfigError(f"cdiv needs ints a >= 0 and b >= 1, got a={repr(a)[:40]}, "
                          f"b={repr(b)[:40]}", field="a" if a < 0 else "b")
    return -(-a // b)


@dataclass(frozen=True, kw_only=True)
class PlanContext:
    """The engine settings a spec needs to size one request (not an engine config).

    Attributes
    ----------
    max_model_len:
        Longest sequence (prompt + output) of one request, in tokens.
    max_num_batched_tokens:
        Tokens one scheduler step may process (bounds the in-flight tokens of a
        sliding window or a local chunk).
    max_num_encoder_input_tokens:
        Longest encoder input of one request (e.g. 1,500 audio frames for Whisper),
        sizing cross-attention; never a batch budget.
    mamba_cache_mode:
        ``none`` | ``align`` | ``all`` (see kvcore-mamba).
    num_speculative_tokens:
        Draft tokens verified per step.
    """

    max_model_len: int
    max_num_batched_tokens: int = 8192
    max_num_encoder_input_tokens: int = 0
    tensor_parallel_size: int = 1
    pipeline_parallel_size: int = 1
    decode_context_parallel_size: int = 1
    mamba_cache_mode: str = "none"
    num_speculative_tokens: int = 0
    enable_prefix_caching: bool = True

    def __post_init__(self) -> None:
        for name in ("max_num_batched_tokens", "tensor_parallel_size",
                     "pipeline_parallel_size", "decode_context_parallel_size"):
            _check_positive_int(self, name)
        for name in ("max_num_encoder_input_tokens", "num_speculative_tokens"):
            _check_int(self, name, minimum=0)
        tp, dcp = self.tensor_parallel_size, self.decode_context_parallel_size
        if tp % dcp:
            # vLLM 0.32 ParallelConfig (vllm/config/parallel.py:592-596): DCP reuses the
            # TP ranks, so tp must be a multiple of dcp (a DCP of 3 at TP 1 tripled the
            # planned concurrency of a deployment vLLM refuses: fresh tester T12)
            valid = [d for d in range(1, tp + 1) if tp % d == 0]
            raise SpecError(f"decode_context_parallel_size {dcp} does not divide "
                            f"tensor_parallel_size {tp} (vLLM reuses the TP ranks for "
                            f"DCP); valid: {', '.join(map(str, valid))}",
                            field="decode_context_parallel_size", value=dcp)
        from kvcore.units import as_int

        mml = as_int(self.max_model_len)  # numpy integers too, stored as a plain int
        if mml is None:
            raise SpecError(f"max_model_len must be an int, got {self.max_model_len!r}",
                            field="max_model_len", value=repr(self.max_model_len))
        object.__setattr__(self, "max_model_len", mml)
        if self.mamba_cache_mode not in MAMBA_CACHE_MODES:
            raise SpecError(
                f"mamba_cache_mode {self.mamba_cache_mode!r} is not one of "
                f"{', '.join(MAMBA_CACHE_MODES)}", field="mamba_cache_mode")


def _check_int(obj: Any, name: str, minimum: int) -> None:
    from kvcore.units import as_int

    value = getattr(obj, name)
    number = as_int(value)
    if number is not None and type(value) is not int:
        object.__setattr__(obj, name, number)  # numpy integers: a plain int
        value = number
    if number is None or value < minimum:
        what = "a positive int" if minimum == 1 else f"an int >= {minimum}"
        raise SpecError(
            f"{type(obj).__name__}.{name} must be {what}, got {value!r}", field=name,
            value=value)


def _check_positive_int(obj: Any, name: str) -> None:
    _check_int(obj, name, minimum=1)


_SIMPLE_TYPES: dict[str, tuple[type, ...]] = {
    "int": (int,), "bool": (bool,), "str": (str,), "float": (int, float),
}


def _check_field_types(obj: Any) -> None:
    """Check the fields whose annotation is a plain int / bool / str (optionally
    ``| None``); raises SpecError naming the field.  Other annotations are left to the
    class's own validation."""
    for f in fields(obj):
        ann = f.type if isinstance(f.type, str) else getattr(f.type, "__name__", "")
        optional = ann.endswith(" | None")
        base = ann[: -len(" | None")] if optional else ann
        types = _SIMPLE_TYPES.get(base)
        if types is None:
            continue
        value = getattr(obj, f.name)
        if value is None and optional:
            continue
        from kvcore.units import as_int, as_real

        if base == "int":  # numpy integers too, stored as a plain int
            number = as_int(value)
            ok = number is not None
            if ok and type(value) is not int:
                object.__setattr__(obj, f.name, number)
                value = number
        elif base == "float":  # any real number, stored as a float (an int stays int)
            real = as_real(value)
            ok = real is not None
            if ok and not isinstance(value, (int, float)):
                object.__setattr__(obj, f.name, real)
                value = real
        else:
            ok = isinstance(value, types) and (bool in types or not isinstance(value, bool))
        if not ok:
            from kvcore.units import shorten

            raise SpecError(
                f"{type(obj).__name__}.{f.name} must be {base}"
                f"{' or null' if optional else ''}, got {shorten(value)}", field=f.name,
                value=shorten(value))
        if base == "int":
            from kvcore.units import bound, shorten

            if abs(value) > bound(f.name):  # plausibility bounds: kvcore.units.BOUNDS
                raise SpecError(
                    f"{type(obj).__name__}.{f.name} = {shorten(value)} is implausibly "
                    f"large (at most {bound(f.name):,})", field=f.name,
                    value=shorten(value))


@dataclass(frozen=True, kw_only=True)
class KVTraffic:
    """How one layer of a spec reads and writes its cache in one engine step: the
    constants a step-time model needs, computed once per spec (:meth:`KVCacheSpec.kv_traffic`).

    Per request of ``c`` cached tokens computing ``n`` new tokens, one layer reads
    ``bytes_per_token x attended`` bytes, where ``attended`` is

    * ``c + n + extra_tokens`` (full attention: the whole context, plus static sinks);
    * ``min(c + n, window - 1 + n)`` with ``window`` set (a sliding window);
    * ``c + n - (c // chunk) x chunk`` with ``chunk`` set (the current local chunk);
    * the request's encoder length with ``reads_encoder`` (cross-attention);

    and writes ``bytes_per_token x n`` (``0`` for cross-attention after its first
    step), plus ``state_bytes`` read and written once per request (a recurrent state,
    a ring).  Attention FLOPs use ``qk_dim`` / ``v_dim`` per KV head and count one key
    per ``tokens_per_entry`` tokens (a compressed cache).

    Attributes
    ----------
    bytes_per_token:
        Stored bytes per token of one layer, scales included (``real_page_size_bytes /
        block_size``; unification padding is never read).
    window, chunk:
        Sliding window / local chunk in tokens (None: unbounded).
    extra_tokens:
        Tokens read besides the request's own (attention sinks).
    reads_encoder:
        The layer attends to the encoder output (cross-attention).
    state_bytes:
        Bytes of per-request state read and written once per step (Mamba, rings).
    qk_dim, v_dim:
        Channels per KV head of the keys (query-key product) and values (0: none).
    tokens_per_entry:
        Tokens per stored key (``compress_ratio``; 1 = one key per token).
    holds_blocks:
        False for layers without a block table (encoder-only attention).
    """

    bytes_per_token: float = 0.0
    window: int | None = None
    chunk: int | None = None
    extra_tokens: int = 0
    reads_encoder: bool = False
    state_bytes: int = 0
    qk_dim: int = 0
    v_dim: int = 0
    tokens_per_entry: int = 1
    holds_blocks: bool = True


@dataclass(frozen=True, kw_only=True)
class KVCacheSpec:
    """Base of every KV-cache spec.

    Attributes
    ----------
    block_size:
        Tokens per block (the granularity of the block table).
    page_size_padded:
        When set, the page is padded to this many bytes (page-size unification of a
        hybrid model); it must be >= the real page size.

    Class attributes
    ----------------
    kind:
        The registry name (``"type"`` in a specs file).
    participates_in_prefix_caching:
        False for per-request caches whose content is not a function of the prefix.
    scales_with_block_size:
        True when the page grows with ``block_size`` (K/V per token); False for a
        state (Mamba, ring buffers) whose page is fixed.
    """

    kind: ClassVar[str] = ""
    participates_in_prefix_caching: ClassVar[bool] = True
    scales_with_block_size: ClassVar[bool] = True

    block_size: int
    page_size_padded: int | None = None

    def __post_init__(self) -> None:
        _check_field_types(self)
        _check_positive_int(self, "block_size")
        if self.page_size_padded is not None:
            _check_int(self, "page_size_padded", minimum=0)
            if self.page_size_padded < self.real_page_size_bytes:
                raise SpecError(
                    f"{type(self).__name__}.page_size_padded {self.page_size_padded} "
                    f"is smaller than the real page size {self.real_page_size_bytes} B",
                    field="page_size_padded")

    # ---- sizes ---------------------------------------------------------------------
    @property
    def real_page_size_bytes(self) -> int:
        """Bytes one block of this layer holds, before any padding."""
        raise NotImplementedError

    @property
    def page_size_bytes(self) -> int:
        """Bytes one block of this layer takes (padding included).  Computed once per
        spec (a spec is frozen; the planner reads it for every layer of every candidate
        layout)."""
        cached = self.__dict__.get("_page_size_bytes")
        if cached is not None:
            return cached  # type: ignore[no-any-return]
        if self.page_size_padded is not None:
            page = self.page_size_padded
        else:
            page = self.real_page_size_bytes
        object.__setattr__(self, "_page_size_bytes", page)
        return page

    @property
    def padding_bytes(self) -> int:
        """Bytes of a page added by unification padding (computed once per spec)."""
        cached = self.__dict__.get("_padding_bytes")
        if cached is None:
            cached = self.page_size_bytes - self.real_page_size_bytes
            object.__setattr__(self, "_padding_bytes", cached)
        return cached  # type: ignore[no-any-return]

    @property
    def storage_block_size(self) -> int:
        """Entries physically stored per block (block_size unless a layer compresses)."""
        return self.block_size

    @property
    def bytes_per_token(self) -> float:
        """Real bytes per token of sequence for specs that grow with it, else 0."""
        if not self.scales_with_block_size:
            return 0.0
        return self.real_page_size_bytes / self.block_size

    def max_num_blocks_per_req(self, ctx: PlanContext, max_len: int | None = None) -> int:
        """Blocks one request of ``max_len`` tokens (default ``ctx.max_model_len``) needs."""
        raise NotImplementedError

    def max_memory_usage_bytes(self, ctx: PlanContext, max_len: int | None = None) -> int:
        """Bytes one request of ``max_len`` tokens needs in this layer."""
        return self.max_num_blocks_per_req(ctx, max_len) * self.page_size_bytes

    def kv_traffic(self) -> KVTraffic:
        """How this layer reads and writes its cache per step (see :class:`KVTraffic`);
        the step-time model of :mod:`kvcore.sim.timing` calls it once per group.
        Default: a spec whose page grows with ``block_size`` reads its whole context at
        ``real_page_size_bytes / block_size`` bytes per token; any other (a state, a
        ring) reads and writes its ``real_page_size_bytes`` once per request per step.
        Plugin kinds override it when they read otherwise."""
        if self.scales_with_block_size:
            return KVTraffic(bytes_per_token=self.real_page_size_bytes / self.block_size)
        return KVTraffic(state_bytes=self.real_page_size_bytes)

    # ---- derived specs --------------------------------------------------------------
    def copy_with_new_block_size(self: S, block_size: int) -> S:
        """The same spec with another block size (padding dropped)."""
        return dataclasses.replace(self, block_size=block_size, page_size_padded=None)

    def with_page_size_padded(self: S, page_size: int | None) -> S:
        """The same spec padded to ``page_size`` bytes (None or the real size: unpadded)."""
        if page_size == self.real_page_size_bytes:
            page_size = None
        return dataclasses.replace(self, page_size_padded=page_size)

    def as_full_attention(self) -> KVCacheSpec | None:
        """This layer planned as full attention (blocks for every token), for
        ``disable_hybrid_kv_cache_manager``; None when it cannot be (a state).  Full
        attention kinds return themselves; windowed kinds a full-attention spec that
        records the window."""
        return self if self.scales_with_block_size else None

    def with_plan_context(self: S, ctx: PlanContext) -> S:
        """Called by planning before grouping with the plan's context, so a spec can
        take plan-wide options it does not carry itself (e.g. a Mamba state taking
        ``mamba_cache_mode`` from the plan options, or ``max_model_len`` as the block
        size of a one-state-per-request cache).  Default: unchanged."""
        return self

    @property
    def block_size_alignment(self) -> int:
        """Tokens the layer's block size must be a multiple of for its kernels (1: any
        block size).  Grouping rounds the block sizes it chooses up to multiples of it,
        as it does for ``kernel_block_size`` (e.g. a Mamba state in ``all`` mode: the
        SSM kernel materialises states only every ``mamba_chunk_size`` tokens)."""
        return 1

    def with_attention_block_size(self: S, block_size: int) -> S:
        """Called by grouping after page-size unification with the attention block size
        of the model; a state spec whose block table is indexed by token position (e.g.
        Mamba in ``align`` mode) returns a copy using it.  Default: unchanged."""
        return self

    @classmethod
    def merge(cls: type[S], specs: list[S]) -> S:
        """One spec for layers that share a group; raises SpecMergeError if they differ."""
        if not specs:
            raise SpecMergeError("cannot merge an empty list of specs")
        first = specs[0]
        for other in specs[1:]:
            diff = spec_differences(first, other)
            if diff:
                raise SpecMergeError(
                    f"layers in one KV-cache group must have equal specs; "
                    f"{type(first).__name__} and {type(other).__name__} differ in "
                    + ", ".join(f"{k} ({a!r} vs {b!r})" for k, (a, b) in diff.items()),
                    fields=sorted(diff))
        return first

    # ---- serialization ---------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        """``{"type": kind, <field>: value, ...}``; fields at their default are omitted
        except the ones that define the layout."""
        out: dict[str, Any] = {"type": self.kind}
        for f in fields(self):
            value = getattr(self, f.name)
            if isinstance(value, tuple):
                value = _tuple_to_list(value)
            if f.default is not dataclasses.MISSING and value == f.default \
                    and f.name not in self._always_serialized():
                continue
            out[f.name] = value
        return out

    @classmethod
    def _always_serialized(cls) -> tuple[str, ...]:
        return ("dtype",)

    @staticmethod
    def from_dict(data: dict[str, Any]) -> KVCacheSpec:
        """Build a spec from ``to_dict()`` output; ``type`` picks the class through the
        registry, so plugin kinds work once their plugin is installed.

        Raises SpecError (unknown field or bad value) or MissingPluginError.
        """
        from kvcore.registry import get_registry

        if not isinstance(data, Mapping) or "type" not in data:
            raise SpecError(f"a layer spec must be an object with a 'type' field, got "
                            f"{data!r}", field="type")
        cls = get_registry().spec_class(data["type"])
        kwargs = {k: v for k, v in data.items() if k != "type"}
        names = {f.name for f in fields(cls)}
        unknown = sorted(set(kwargs) - names)
        if unknown:
            raise SpecError(
                f"unknown field(s) {', '.join(unknown)} for layer type {data['type']!r}; "
                f"valid fields: {', '.join(sorted(names))}", field=unknown[0])
        kwargs = {k: _list_to_tuple(v) for k, v in kwargs.items()}
        try:
            return cls(**kwargs)
        except TypeError as exc:
            raise SpecError(f"layer type {data['type']!r}: {exc}", field="type") from exc


def _tuple_to_list(value: Any) -> Any:
    if isinstance(value, tuple):
        return [_tuple_to_list(v) for v in value]
    return value


def _list_to_tuple(value: Any) -> Any:
    if isinstance(value, list):
        return tuple(_list_to_tuple(v) for v in value)
    return value


def spec_differences(a: KVCacheSpec, b: KVCacheSpec) -> dict[str, tuple[Any, Any]]:
    """Fields (and the kind) in which two specs differ: ``{name: (a_value, b_value)}``."""
    diff: dict[str, tuple[Any, Any]] = {}
    if type(a) is not type(b):
        diff["type"] = (a.kind, b.kind)
    names_a = {f.name for f in fields(a)}
    names_b = {f.name for f in fields(b)}
    for name in sorted(names_a | names_b):
        va, vb = getattr(a, name, None), getattr(b, name, None)
        if va != vb:
            diff[name] = (va, vb)
    return diff


@dataclass(frozen=True, kw_only=True)
class AttentionSpec(KVCacheSpec):
    """K and V per token per KV head.

    ``page_size_bytes = block_size x num_kv_heads x (key_bytes(head_size) +
    value_bytes(head_size_v))`` where the byte counts come from ``kv_cache_dtype``
    (:mod:`kvcore.quant`; ``auto`` = the model ``dtype``).

    Attributes
    ----------
    num_kv_heads:
        KV heads on this rank (after tensor-parallel sharding).
    head_size, head_size_v:
        Channels per head of K and of V (``head_size_v`` None = ``head_size``).
    dtype:
        The model dtype (name or torch.dtype), used by ``kv_cache_dtype="auto"``.
    kv_cache_dtype:
        A scheme name (``auto``, ``fp8``, ``int8_per_token_head``, ``nvfp4``, ...).
    """

    num_kv_heads: int
    head_size: int
    dtype: str = "bfloat16"
    kv_cache_dtype: str = "auto"
    head_size_v: int | None = None

    def __post_init__(self) -> None:
        _check_int(self, "num_kv_heads", minimum=1)
        _check_int(self, "head_size", minimum=1)
        if self.head_size_v is not None:
            _check_int(self, "head_size_v", minimum=1)
        object.__setattr__(self, "dtype", normalize_dtype(self.dtype))
        from kvcore.registry import get_registry

        scheme = get_registry().kv_cache_dtype(self.kv_cache_dtype)
        if scheme.kinds and self.kind not in scheme.kinds:
            raise SpecError(
                f"kv_cache_dtype {scheme.name!r} is a storage format for "
                f"{' / '.join(scheme.kinds)} layers only, not for {self.kind} layers",
                field="kv_cache_dtype", value=scheme.name)
        object.__setattr__(self, "kv_cache_dtype", scheme.name)
        super().__post_init__()

    @property
    def effective_head_size_v(self) -> int:
        return self.head_size if self.head_size_v is None else self.head_size_v

    @property
    def scheme(self) -> Any:
        from kvcore.registry import get_registry

        return get_registry().kv_cache_dtype(self.kv_cache_dtype)

    @property
    def bytes_per_token_per_head(self) -> int:
        """K + V bytes of one token of one KV head, scales included."""
        return self.scheme.bytes_per_token_head(
            self.head_size, self.effective_head_size_v, self.dtype)

    @property
    def real_page_size_bytes(self) -> int:
        return self.block_size * self.num_kv_heads * self.bytes_per_token_per_head

    def kv_traffic(self) -> KVTraffic:
        """The whole context at its stored bytes per token (quantized pages count
        their scales), keys of ``head_size`` and values of ``head_size_v`` channels."""
        return KVTraffic(bytes_per_token=self.real_page_size_bytes / self.block_size,
                         qk_dim=self.head_size, v_dim=self.effective_head_size_v)

    def max_num_blocks_per_req(self, ctx: PlanContext, max_len: int | None = None) -> int:
        n = ctx.max_model_len if max_len is None else max_len
        return cdiv(cdiv(n, ctx.decode_context_parallel_size), self.block_size)


@dataclass(frozen=True, kw_only=True)
class FullAttentionSpec(AttentionSpec):
    """Causal attention over every earlier token: one block per ``block_size`` tokens.

    ``sliding_window`` / ``attention_chunk_size`` are recorded (information only) when a
    sliding or chunked layer is planned as full attention (hybrid manager disabled).
    ``non_causal`` marks bidirectional attention within the sequence.
    """

    kind: ClassVar[str] = "full_attention"

    sliding_window: int | None = None
    attention_chunk_size: int | None = None
    non_causal: bool = False

    def kv_traffic(self) -> KVTraffic:
        """As attention; a sliding or chunked layer planned as full attention (hybrid
        manager off) keeps every block but still reads only its window / chunk."""
        t = super().kv_traffic()
        if self.sliding_window is not None or self.attention_chunk_size is not None:
            t = dataclasses.replace(t, window=self.sliding_window,
                                    chunk=self.attention_chunk_size)
        return t

    @classmethod
    def merge(cls, specs: list[Any]) -> Any:
        """Merge full-attention specs; the recorded windows may differ only as None vs
        one value (a model planned without the hybrid manager)."""
        if not specs:
            raise SpecMergeError("cannot merge an empty list of specs")
        windows = {s.sliding_window for s in specs if s.sliding_window is not None}
        chunks = {s.attention_chunk_size for s in specs
                  if s.attention_chunk_size is not None}
        if len(windows) > 1 or len(chunks) > 1:
            raise SpecMergeError(
                f"full-attention layers in one group record different windows "
                f"(sliding_window {sorted(windows)}, attention_chunk_size {sorted(chunks)})",
                fields=["sliding_window" if len(windows) > 1 else "attention_chunk_size"])
        if windows and chunks:
            raise SpecMergeError(
                "one group cannot hold both sliding-window and chunked-local layers",
                fields=["sliding_window", "attention_chunk_size"])
        merged = dataclasses.replace(
            specs[0], sliding_window=next(iter(windows), None),
            attention_chunk_size=next(iter(chunks), None))
        ignore = {"sliding_window", "attention_chunk_size"}
        for s in specs:
            diff = {k: v for k, v in spec_differences(merged, s).items() if k not in ignore}
            if diff:
                raise SpecMergeError(
                    "layers in one KV-cache group must have equal specs; they differ in "
                    + ", ".join(f"{k} ({a!r} vs {b!r})" for k, (a, b) in diff.items()),
                    fields=sorted(diff))
        return merged


@dataclass(frozen=True, kw_only=True)
class SlidingWindowSpec(AttentionSpec):
    """Each token attends to the last ``sliding_window`` tokens (itself included).

    Blocks per request: ``cdiv(min(sliding_window - 1 + max_num_batched_tokens,
    max_len), block_size) + 1`` (the window plus one step's tokens, plus one block
    because the window's start need not be block aligned; vLLM
    ``SlidingWindowSpec.max_memory_usage_bytes``).
    """

    kind: ClassVar[str] = "sliding_window"

    sliding_window: int

    def __post_init__(self) -> None:
        _check_positive_int(self, "sliding_window")
        super().__post_init__()

    def kv_traffic(self) -> KVTraffic:
        """Reads ``min(context, sliding_window - 1 + new)`` tokens."""
        return dataclasses.replace(super().kv_traffic(), window=self.sliding_window)

    def max_num_blocks_per_req(self, ctx: PlanContext, max_len: int | None = None) -> int:
        n = ctx.max_model_len if max_len is None else max_len
        tokens = min(self.sliding_window - 1 + ctx.max_num_batched_tokens, n)
        return cdiv(tokens, self.block_size) + 1

    def as_full_attention(self) -> KVCacheSpec:
        return FullAttentionSpec(
            block_size=self.block_size, num_kv_heads=self.num_kv_heads,
            head_size=self.head_size, dtype=self.dtype, kv_cache_dtype=self.kv_cache_dtype,
            head_size_v=self.head_size_v, sliding_window=self.sliding_window)


@dataclass(frozen=True, kw_only=True)
class ChunkedLocalAttentionSpec(AttentionSpec):
    """Attention within fixed chunks of ``attention_chunk_size`` tokens (Llama 4).

    Blocks per request: ``cdiv(min(attention_chunk_size + max_num_batched_tokens,
    max_len), block_size)`` (vLLM ``ChunkedLocalAttentionSpec``).
    """

    kind: ClassVar[str] = "chunked_local_attention"

    attention_chunk_size: int

    def __post_init__(self) -> None:
        _check_positive_int(self, "attention_chunk_size")
        super().__post_init__()

    def kv_traffic(self) -> KVTraffic:
        """Reads the current chunk: the tokens from the start of the chunk holding the
        first new token to the last new token."""
        return dataclasses.replace(super().kv_traffic(), chunk=self.attention_chunk_size)

    def max_num_blocks_per_req(self, ctx: PlanContext, max_len: int | None = None) -> int:
        n = ctx.max_model_len if max_len is None else max_len
        tokens = min(self.attention_chunk_size + ctx.max_num_batched_tokens, n)
        return cdiv(tokens, self.block_size)

    def as_full_attention(self) -> KVCacheSpec:
        return FullAttentionSpec(
            block_size=self.block_size, num_kv_heads=self.num_kv_heads,
            head_size=self.head_size, dtype=self.dtype, kv_cache_dtype=self.kv_cache_dtype,
            head_size_v=self.head_size_v, attention_chunk_size=self.attention_chunk_size)


@dataclass(frozen=True, kw_only=True)
class CrossAttentionSpec(AttentionSpec):
    """Decoder cross-attention over the encoder output (Whisper, T5).

    Sized per request by the encoder length, not by the decoder length:
    ``cdiv(max_num_encoder_input_tokens, block_size)`` blocks.  Not prefix cached.
    """

    kind: ClassVar[str] = "cross_attention"
    participates_in_prefix_caching: ClassVar[bool] = False

    def kv_traffic(self) -> KVTraffic:
        """Reads the encoder's K/V (the request's encoder length), written once."""
        return dataclasses.replace(super().kv_traffic(), reads_encoder=True)

    def max_num_blocks_per_req(self, ctx: PlanContext, max_len: int | None = None) -> int:
        return cdiv(ctx.max_num_encoder_input_tokens, self.block_size)

    @property
    def bytes_per_token(self) -> float:
        return 0.0


@dataclass(frozen=True, kw_only=True)
class EncoderOnlyAttentionSpec(AttentionSpec):
    """Bidirectional encoder attention recomputed every step: no KV cache (0 bytes)."""

    kind: ClassVar[str] = "encoder_only_attention"
    participates_in_prefix_caching: ClassVar[bool] = False

    def kv_traffic(self) -> KVTraffic:
        """No cache: nothing read or written, no block table."""
        return KVTraffic(qk_dim=self.head_size, v_dim=self.effective_head_size_v,
                         holds_blocks=False)

    @property
    def real_page_size_bytes(self) -> int:
        return 0

    def max_num_blocks_per_req(self, ctx: PlanContext, max_len: int | None = None) -> int:
        return 0


@dataclass(frozen=True, kw_only=True)
class SinkFullAttentionSpec(FullAttentionSpec):
    """Full attention plus ``sink_len`` static sink tokens shared by every request.

    The sink K/V live in ``cdiv(sink_len, block_size)`` blocks reserved once for all
    requests (kvcore's runtime reserves them; vLLM 0.32 does not).  Per-request blocks
    are those of full attention.
    """

    kind: ClassVar[str] = "sink_full_attention"

    sink_len: int = 0

    def __post_init__(self) -> None:
        _check_int(self, "sink_len", minimum=0)
        super().__post_init__()

    def kv_traffic(self) -> KVTraffic:
        """Full attention plus the ``sink_len`` sink tokens every request reads."""
        return dataclasses.replace(super().kv_traffic(), extra_tokens=self.sink_len)

    @property
    def num_sink_blocks(self) -> int:
        return cdiv(self.sink_len, self.block_size)

