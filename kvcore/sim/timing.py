"""Step-time models: how long one engine step (one forward pass) takes.

This module fixes the interface between the simulator's scheduler loop and the models
of time; the roofline model with fitted efficiencies lives here too (see
:class:`RooflineTimeModel` once it lands; :class:`ConstantTimeModel` is the trivial
model tests and the clockless replay use).

The scheduler loop describes each step as a :class:`Batch`: one
:class:`ScheduledRequest` per request scheduled in the step (its new tokens and the
tokens already in its cache) and, per KV-cache group, the KV bytes the step reads and
writes (:class:`GroupIO`, computed from the specs by :func:`describe_batch`: a
sliding-window layer reads at most its window, a chunked-local layer its current chunk,
a state layer its state, every layer as its spec stores it: quantized or compressed
pages count at their stored size).  A :class:`StepTimeModel` maps a Batch to seconds.

Other models plug in through the entry-point group ``kvcore.time_models``: an entry
point names a callable ``factory(**options) -> StepTimeModel`` (see
:func:`load_time_model`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from kvcore.errors import ConfigError

__all__ = [
    "ScheduledRequest",
    "GroupIO",
    "Batch",
    "StepTimeModel",
    "ConstantTimeModel",
    "describe_batch",
    "load_time_model",
    "TIME_MODELS_ENTRY_POINT_GROUP",
]

TIME_MODELS_ENTRY_POINT_GROUP = "kvcore.time_models"


@dataclass(frozen=True, slots=True)
class ScheduledRequest:
    """One request's share of a step.

    num_new_tokens: tokens computed in this step (a prefill chunk, or 1 + speculative
        tokens for a decode), tokens.
    num_computed_tokens: tokens already in the KV cache before this step (the context
        the new tokens attend to), tokens.
    is_prefill: True while the request is still computing its prompt.
    num_encoder_tokens: encoder tokens the request's cross-attention layers attend to
        (encoder-decoder models), tokens; 0 for decoder-only requests.
    """

    num_new_tokens: int
    num_computed_tokens: int
    is_prefill: bool
    num_encoder_tokens: int = 0


@dataclass(frozen=True, slots=True)
class GroupIO:
    """KV traffic of one KV-cache group in one step, summed over its layers and requests.

    kv_bytes_read: bytes of KV (or state) the attention/SSM kernels read, bytes.
    kv_bytes_written: bytes written for the new tokens (or the updated states), bytes.
    num_block_tables: block tables this group passes to its kernels (one per scheduled
        request that holds blocks in the group).
    attention_pairs: (query token, stored key) pairs the group's attention computes,
        summed over its layers and requests (0 for state kinds); times ``qk_dim +
        v_dim`` and the query heads per KV head it gives the attention FLOPs.
    qk_dim, v_dim: channels per KV head of the keys and values (from the spec's
        :meth:`~kvcore.specs.KVCacheSpec.kv_traffic`).
    num_kv_heads: KV heads per layer on this rank (1 for MLA and state kinds).
    """

    group_id: int
    kind: str
    num_layers: int
    kv_bytes_read: int
    kv_bytes_written: int
    num_block_tables: int
    attention_pairs: int = 0
    qk_dim: int = 0
    v_dim: int = 0
    num_kv_heads: int = 0


@dataclass(frozen=True, slots=True)
class Batch:
    """The composition of one engine step (see the module docstring)."""

    requests: tuple[ScheduledRequest, ...]
    groups: tuple[GroupIO, ...] = ()

    @property
    def num_tokens(self) -> int:
        """Tokens computed in the step (prefill chunks plus decode tokens)."""
        return sum(r.num_new_tokens for r in self.requests)

    @property
    def num_prefill_tokens(self) -> int:
        return sum(r.num_new_tokens for r in self.requests if r.is_prefill)

    @property
    def num_decode_requests(self) -> int:
        return sum(1 for r in self.requests if not r.is_prefill)

    @property
    def num_block_tables(self) -> int:
        return sum(g.num_block_tables for g in self.groups)


@runtime_checkable
class StepTimeModel(Protocol):
    """Maps one step's :class:`Batch` to its duration in seconds (float > 0)."""

    def step_time(self, batch: Batch) -> float: ...


@dataclass(frozen=True)
class ConstantTimeModel:
    """``step_s + token_s * num_tokens`` seconds per step: a placeholder and test model."""

    step_s: float = 0.01
    token_s: float = 0.0

    def step_time(self, batch: Batch) -> float:
        return self.step_s + self.token_s * batch.num_tokens


class _GroupLaw:
    """Per-group constants of :func:`describe_batch`, computed once per config."""

    __slots__ = ("gid", "kind", "layers", "t", "bpt", "state", "kv_heads")

    def __init__(self, gid: int, kind: str, layers: int, t: Any, kv_heads: int) -> None:
        self.gid = gid
        self.kind = kind
        self.layers = layers
        self.t = t
        self.bpt = t.bytes_per_token * layers  # bytes per token, all layers
        self.state = t.state_bytes * layers
        self.kv_heads = kv_heads


#: id(kv_cache_config) -> (config, laws); the config is kept so its id is not reused
_LAWS: dict[int, tuple[Any, tuple[_GroupLaw, ...]]] = {}
_LAWS_MAX = 64


def _laws(kv_cache_config: Any) -> tuple[_GroupLaw, ...]:
    key = id(kv_cache_config)
    hit = _LAWS.get(key)
    if hit is not None and hit[0] is kv_cache_config:
        return hit[1]
    from kvcore.specs import KVTraffic

    laws = []
    for gid, g in enumerate(kv_cache_config.kv_cache_groups):
        spec = g.spec
        hook = getattr(spec, "kv_traffic", None)
        t = hook() if callable(hook) else KVTraffic(
            bytes_per_token=spec.page_size_bytes / max(1, spec.block_size))
        laws.append(_GroupLaw(gid, spec.kind, len(g.layer_names), t,
                              int(getattr(spec, "num_kv_heads", 0) or 0)))
    if len(_LAWS) >= _LAWS_MAX:
        _LAWS.clear()
    out = tuple(laws)
    _LAWS[key] = (kv_cache_config, out)
    return out


def _tri(m: int) -> int:
    return m * (m + 1) // 2


def _window_io(reqs: Sequence[ScheduledRequest], w: int) -> tuple[int, int]:
    """(tokens read, causal pairs) of a sliding window of ``w`` tokens: a token at
    position p attends to min(p + 1, w) tokens; a request reads min(c + n, w - 1 + n)."""
    read = pairs = 0
    for r in reqs:
        a = r.num_computed_tokens
        n = r.num_new_tokens
        b = a + n
        read += min(b, w - 1 + n)
        m = min(b, w)
        if m > a:
            pairs += _tri(m) - _tri(a) + (b - m) * w
        else:
            pairs += n * w
    return read, pairs


def _chunk_io(reqs: Sequence[ScheduledRequest], c: int) -> tuple[int, int]:
    """(tokens read, pairs) of chunked local attention with chunks of ``c`` tokens: a
    token at p attends to (p mod c) + 1 tokens; a request reads its current chunk(s),
    from the start of the chunk holding its first new token."""
    def f(x: int) -> int:  # sum over p < x of (p mod c) + 1
        q, rem = divmod(x, c)
        return q * _tri(c) + _tri(rem)

    read = pairs = 0
    for r in reqs:
        a = r.num_computed_tokens
        b = a + r.num_new_tokens
        read += b - (a // c) * c
        pairs += f(b) - f(a)
    return read, pairs


def describe_batch(kv_cache_config: Any, requests: Sequence[ScheduledRequest]) -> Batch:
    """The :class:`Batch` of a step of ``requests`` under ``kv_cache_config``.

    Each group's layers read and write as their spec's
    :meth:`~kvcore.specs.KVCacheSpec.kv_traffic` says (computed once per config and
    cached by identity): for a request with ``c`` cached and ``n`` new tokens, per
    layer

    ============================  ==================================  ===============
    kind (traffic law)            tokens read                         tokens written
    ============================  ==================================  ===============
    full attention, MLA, quant    ``c + n`` (+ sink tokens)           ``n``
    sliding window ``w``          ``min(c + n, w - 1 + n)``           ``n``
    chunked local ``C``           ``c + n - (c // C) x C``            ``n``
    cross-attention               the encoder length                  encoder, once
    encoder-only                  0 (no cache, no block table)        0
    state (Mamba, rings)          its state once                      its state once
    ============================  ==================================  ===============

    times the spec's stored bytes per token (``real_page_size_bytes / block_size``:
    quantized pages count their scales, MLA latents their record size, a compressed
    layer one record per ``compress_ratio`` tokens).  Attention pairs are causal
    (a token at position p sees p + 1 keys, at most ``w`` in a window, its own chunk in
    a local layer, every encoder token in cross-attention), divided by
    ``tokens_per_entry``.  Cost: one pass over the requests, plus one per distinct
    window or chunk size.
    """
    reqs = tuple(requests)
    laws = _laws(kv_cache_config)
    ctx = new = pairs_full = enc = enc_first = n_enc_reqs = 0
    for r in reqs:
        n = r.num_new_tokens
        c = r.num_computed_tokens
        ctx += c + n
        new += n
        pairs_full += n * c + _tri(n)
        e = r.num_encoder_tokens
        if e:
            enc += e * n
            n_enc_reqs += 1
            if c == 0:
                enc_first += e
    nreq = len(reqs)
    windows: dict[int, tuple[int, int]] = {}
    chunks: dict[int, tuple[int, int]] = {}
    groups: list[GroupIO] = []
    for law in laws:
        t = law.t
        layers = law.layers
        tables = nreq
        if not t.holds_blocks:
            read_tok = written_tok = 0
            pairs = pairs_full
            tables = 0
        elif t.reads_encoder:
            read_tok = sum(r.num_encoder_tokens for r in reqs)
            written_tok = enc_first
            pairs = enc
            tables = n_enc_reqs
        elif t.window is not None:
            got = windows.get(t.window)
            if got is None:
                got = windows[t.window] = _window_io(reqs, t.window)
            read_tok, pairs = got
            written_tok = new
        elif t.chunk is not None:
            got = chunks.get(t.chunk)
            if got is None:
                got = chunks[t.chunk] = _chunk_io(reqs, t.chunk)
            read_tok, pairs = got
            written_tok = new
        else:
            read_tok = ctx + t.extra_tokens * nreq
            pairs = pairs_full + t.extra_tokens * new
            written_tok = new
        if not (t.qk_dim or t.v_dim):
            pairs = 0
        elif t.tokens_per_entry > 1:
            pairs //= t.tokens_per_entry
        state = law.state * nreq
        groups.append(GroupIO(
            law.gid, law.kind, layers, int(law.bpt * read_tok) + state,
            int(law.bpt * written_tok) + state, tables, pairs * layers, t.qk_dim, t.v_dim,
            law.kv_heads))
    return Batch(reqs, tuple(groups))


def load_time_model(name: str, **options: Any) -> StepTimeModel:
    """The step-time model registered under ``name``.

    Built-in: ``constant``.  Others come from the entry-point group
    ``kvcore.time_models`` (the entry point's object is called with ``options``).

    Raises:
        ConfigError: ``name`` is neither built in nor registered (the message lists the
            known names), or the factory returned no ``step_time``.
    """
    builtins: dict[str, Callable[..., StepTimeModel]] = {"constant": ConstantTimeModel}
    factory: Callable[..., StepTimeModel] | None = builtins.get(name)
    if factory is None:
        try:
            from importlib.metadata import entry_points
            eps = {ep.name: ep for ep in entry_points(group=TIME_MODELS_ENTRY_POINT_GROUP)}
        except Exception:  # pragma: no cover - broken metadata
            eps = {}
        if name not in eps:
            known = sorted({*builtins, *eps})
            raise ConfigError(f"time_model: unknown step-time model {name!r}; known: "
                              f"{', '.join(known)}", field="time_model", value=name)
        factory = eps[name].load()
    model = factory(**options)
    if not callable(getattr(model, "step_time", None)):
        raise ConfigError(f"time_model: {name!r} gave {type(model).__name__}, which has no "
                          "step_time(batch) method", field="time_model", value=name)
    return model
