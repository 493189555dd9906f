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

import dataclasses
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from kvcore.errors import ConfigError, KVCoreError, shorten
from kvcore.units import as_int

__all__ = [
    "ScheduledRequest",
    "GroupIO",
    "Batch",
    "StepTimeModel",
    "ConstantTimeModel",
    "RooflineTimeModel",
    "Efficiency",
    "StepBreakdown",
    "DEFAULT_EFFICIENCY",
    "roofline_for",
    "describe_batch",
    "load_time_model",
    "time_model_options",
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

    Raises ConfigError naming the field for a count that is not an int >= 0 or an
    ``is_prefill`` that is not a bool.
    """

    num_new_tokens: int
    num_computed_tokens: int
    is_prefill: bool
    num_encoder_tokens: int = 0

    def __post_init__(self) -> None:
        _check_counts(self, ("num_new_tokens", "num_computed_tokens",
                             "num_encoder_tokens"))
        if type(self.is_prefill) is not bool:
            raise ConfigError(f"ScheduledRequest.is_prefill must be True or False, got "
                              f"{self.is_prefill!r}", field="is_prefill",
                              value=repr(self.is_prefill))


def guarded_step_time(time_model: Any) -> Callable[[Any], Any]:
    """``time_model.step_time`` wrapped so that an exception it raises (a user's model:
    ZeroDivisionError, SystemExit, ...) becomes a ConfigError (field ``time_model``)
    naming the model and the exception, as a custom block hash's does; kvcore's own
    errors pass unchanged.  The value returned is checked by the caller."""
    fn = time_model.step_time
    name = getattr(time_model, "name", None)
    name = name if isinstance(name, str) and name else type(time_model).__name__

    def step_time(batch: Any) -> Any:
        try:
            return fn(batch)
        except KVCoreError:
            raise
        except (Exception, SystemExit) as e:  # a user's model: named, never a raw error
            raise ConfigError(f"time model {name!r} raised {type(e).__name__} in "
                              f"step_time: {shorten(str(e))}", field="time_model",
                              value=name) from e
    return step_time


def _check_counts(obj: Any, names: Sequence[str]) -> None:
    """Each named field of ``obj`` is an int >= 0 (bool refused), else ConfigError
    naming ``Class.field``, the value and the valid range.  Another integral number
    (numpy integers, an int subclass) is stored as the equal plain int."""
    for name in names:
        v = getattr(obj, name)
        if type(v) is not int or v < 0:  # off the fast path
            number = as_int(v)
            if number is not None and number >= 0:
                object.__setattr__(obj, name, number)
                continue
            raise ConfigError(f"{type(obj).__name__}.{name} must be an integer >= 0, got "
                              f"{v!r}", field=name, value=repr(v))


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

    Raises ConfigError naming the field for a count or byte figure that is not an int
    >= 0 or a ``kind`` that is not a string.
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

    def __post_init__(self) -> None:
        _check_counts(self, _GROUPIO_COUNTS)
        if not isinstance(self.kind, str):
            raise ConfigError(f"GroupIO.kind must be a spec kind string, got "
                              f"{self.kind!r}", field="kind", value=repr(self.kind))


_GROUPIO_COUNTS = ("group_id", "num_layers", "kv_bytes_read", "kv_bytes_written",
                   "num_block_tables", "attention_pairs", "qk_dim", "v_dim",
                   "num_kv_heads")


@dataclass(frozen=True, slots=True)
class Batch:
    """The composition of one engine step (see the module docstring).

    requests: the step's :class:`ScheduledRequest` objects; groups: one
    :class:`GroupIO` per KV-cache group (any sequence; kept as tuples).
    Raises ConfigError (field ``requests`` / ``groups``) for another element type."""

    requests: tuple[ScheduledRequest, ...]
    groups: tuple[GroupIO, ...] = ()

    def __post_init__(self) -> None:
        for name, cls in (("requests", ScheduledRequest), ("groups", GroupIO)):
            v = getattr(self, name)
            if type(v) is not tuple:
                if isinstance(v, (str, bytes)) or not hasattr(v, "__iter__"):
                    raise ConfigError(f"Batch.{name} must be a sequence of "
                                      f"{cls.__name__}, got {type(v).__name__}",
                                      field=name, value=type(v).__name__)
                v = tuple(v)
                object.__setattr__(self, name, v)
            for x in v:
                if type(x) is not cls and not isinstance(x, cls):
                    raise ConfigError(f"Batch.{name} must hold {cls.__name__} objects, "
                                      f"got {type(x).__name__}", field=name,
                                      value=type(x).__name__)

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

    def __post_init__(self) -> None:
        from kvcore.units import as_real

        for name in ("step_s", "token_s"):
            v = getattr(self, name)
            real = as_real(v)  # numpy reals too, stored as a float; bool refused
            if real is None or not 0 <= real < math.inf:
                raise ConfigError(f"ConstantTimeModel {name} must be a finite number of "
                                  f"seconds >= 0, got {v!r}", field=name, value=repr(v))
            if type(v) is not float and type(v) is not int:
                object.__setattr__(self, name, real)

    def step_time(self, batch: Batch) -> float:
        _check_batch(batch)
        return self.step_s + self.token_s * batch.num_tokens


def _check_batch(batch: Any) -> None:
    if not isinstance(batch, Batch):
        raise ConfigError(f"batch must be a kvcore.sim.timing.Batch (describe_batch's), "
                          f"got {type(batch).__name__} {shorten(batch)}", field="batch",
                          value=shorten(batch))


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
    if not hasattr(kv_cache_config, "kv_cache_groups"):
        raise ConfigError(f"describe_batch: kv_cache_config must be a KVCacheConfig, got "
                          f"{type(kv_cache_config).__name__}", field="kv_cache_config",
                          value=type(kv_cache_config).__name__)
    reqs = tuple(requests)
    laws = _laws(kv_cache_config)
    ctx = new = pairs_full = enc = enc_first = n_enc_reqs = 0
    for r in reqs:
        try:
            n = r.num_new_tokens
            c = r.num_computed_tokens
        except AttributeError:
            raise ConfigError(f"describe_batch: requests must be ScheduledRequests, got "
                              f"{type(r).__name__}", field="requests",
                              value=type(r).__name__) from None
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


def _time_model_factory(name: str) -> Callable[..., StepTimeModel]:
    builtins: dict[str, Callable[..., StepTimeModel]] = {"constant": ConstantTimeModel,
                                                         "roofline": roofline_for}
    factory: Callable[..., StepTimeModel] | None = (builtins.get(name)
                                                    if isinstance(name, str) else None)
    if factory is not None:
        return factory
    try:
        from importlib.metadata import entry_points
        eps = {ep.name: ep for ep in entry_points(group=TIME_MODELS_ENTRY_POINT_GROUP)}
    except Exception:  # pragma: no cover - broken metadata
        eps = {}
    if not isinstance(name, str) or name not in eps:
        known = sorted({*builtins, *eps})
        raise ConfigError(f"time_model: unknown step-time model {shorten(name)}; known: "
                          f"{', '.join(known)} (others register under the entry-point "
                          f"group {TIME_MODELS_ENTRY_POINT_GROUP!r})", field="time_model",
                          value=repr(name))
    try:
        loaded: Callable[..., StepTimeModel] = eps[name].load()
    except Exception as exc:
        raise ConfigError(f"time_model {name!r} ({eps[name].value}) failed to load: {exc}",
                          field="time_model", value=name) from exc
    return loaded


def time_model_options(name: str) -> tuple[frozenset[str] | None, frozenset[str]]:
    """``(accepted, required)`` option names of the step-time model ``name``'s factory
    (from its signature): ``accepted`` is None when it takes any keyword
    (``**options``); ``required`` are those without a default.  ``kvcore simulate
    --time-model NAME`` passes the run's context (``model_config``,
    ``kv_cache_config``, ``gpu``, ``tensor_parallel_size``,
    ``pipeline_parallel_size``) by these names.

    Raises ConfigError (field ``time_model``) for an unknown name."""
    import inspect

    factory = _time_model_factory(name)
    try:
        sig = inspect.signature(factory)
    except (TypeError, ValueError):  # pragma: no cover - a builtin without a signature
        return None, frozenset()
    accepted: set[str] = set()
    required: set[str] = set()
    anything = False
    for p in sig.parameters.values():
        if p.kind is p.VAR_KEYWORD:
            anything = True
        elif p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY):
            accepted.add(p.name)
            if p.default is p.empty:
                required.add(p.name)
    return (None if anything else frozenset(accepted)), frozenset(required)


def load_time_model(name: str, **options: Any) -> StepTimeModel:
    """The step-time model registered under ``name``, built with ``options``.

    Built-in: ``constant`` (:class:`ConstantTimeModel`: ``step_s``, ``token_s``) and
    ``roofline`` (:func:`roofline_for`: ``model_config`` and ``gpu`` required,
    ``kv_cache_config``, ``tensor_parallel_size``, ``pipeline_parallel_size``, ...).
    Others come from the entry-point group ``kvcore.time_models`` (the entry point's
    object is called with ``options``).  :func:`time_model_options` says what a name
    takes.

    Raises:
        ConfigError: ``name`` is neither built in nor registered (the message lists the
            known names), a required option is missing or an option is unknown (the
            message names them and lists what the model takes), the factory refuses
            its options or fails, or it returned no ``step_time``.
    """
    factory = _time_model_factory(name)
    accepted, required = time_model_options(name)
    missing = sorted(required - set(options))
    unknown = sorted(set(options) - accepted) if accepted is not None else []
    takes = ", ".join(sorted(accepted)) if accepted is not None else "any keyword"
    if missing:
        raise ConfigError(f"time_model {name!r} needs the option(s) {', '.join(missing)} "
                          f"(it takes: {takes})", field="time_model", value=name)
    if unknown:
        raise ConfigError(f"time_model {name!r}: unknown option(s) {', '.join(unknown)} "
                          f"(it takes: {takes})", field="time_model", value=name)
    try:
        model = factory(**options)
    except KVCoreError:
        raise
    except Exception as exc:
        raise ConfigError(f"time_model {name!r} refused its options "
                          f"({', '.join(sorted(options)) or 'none'}): "
                          f"{type(exc).__name__}: {exc}", field="time_model",
                          value=name) from exc
    if not callable(getattr(model, "step_time", None)):
        raise ConfigError(f"time_model: {name!r} gave {type(model).__name__}, which has no "
                          "step_time(batch) method", field="time_model", value=name)
    return model


# ---- the roofline model ----------------------------------------------------------------

@dataclass(frozen=True)
class Efficiency:
    """The fitted terms of :class:`RooflineTimeModel` (see ``docs/SIM_ACCURACY.md`` for
    how and on which measurements they were fitted).

    compute: fraction of the dense peak FLOP/s the GEMMs and attention reach.
    memory: fraction of the HBM bandwidth weight and KV reads reach on HBM2 / HBM2e
        parts (A100, H100 PCIe; ``GPUPerf.memory_type`` ``hbm``).
    memory_hbm3: the same on HBM3 / HBM3e parts (H100 SXM / NVL, H200, B200, MI300X:
        ``hbm3``).
    memory_gddr: the same on GDDR parts (L4, L40S, A10, RTX 4090).
    roofline_p: compute and memory time combine as ``(c**p + m**p) ** (1/p)`` (a smooth
        maximum: ``p`` large is ``max(c, m)``; 1 is their sum).
    step_s: fixed CPU / launch time per step (scheduling, input preparation, the
        sampler), seconds.
    per_request_s: added per scheduled request (its block table rows, sampling
        metadata, detokenisation), seconds.
    per_block_table_s: added per block table of a group beyond the first (one per
        request per extra KV-cache group), seconds.
    allreduce_latency_s: fixed latency of one tensor-parallel all-reduce, seconds.
    prefill_token_s: added per prefill token (prefill kernels' extra launch and
        bookkeeping, chunked-prefill metadata), seconds.
    layer_s: GPU time per decoder layer per step beyond the roofline (the tails and
        launch gaps of a layer's dozen kernels, norms, rotary, activation; CUDA graphs
        remove the launches, not the tails), seconds; per pipeline stage, its layers.
    moe_layer_s: added per MoE layer per step (routing top-k, the token sort / align
        and the gather of the fused-MoE kernel), seconds.
    moe_memory: the routed experts' weights stream at ``memory x moe_memory`` of the
        bandwidth (fused-MoE kernels gather scattered experts and may reach less than a
        dense GEMM).
    moe_memory_tokens: where ``moe_memory``'s discount fades: with ``t`` tokens per
        touched expert in a step, the experts' bytes take ``1 + (1 / moe_memory - 1) x
        min(1, moe_memory_tokens / t)`` times their streaming time (a fused-MoE kernel's
        fixed cost per expert, its gather and tail, amortised over the expert's tokens:
        a batch-1 decode pays it whole, a large batch barely); 0: the discount never
        fades (v2).
    moe_compute: the routed experts' FLOPs run at ``compute x moe_compute`` of the peak
        (fused-MoE GEMMs, and the dequantising ones of MXFP4 / FP8 / int4 experts, reach
        less than a dense GEMM: docs/SIM_ACCURACY.md, v5 point 2).
    request_overhead_s: per request, outside the engine steps: the API server's
        tokenisation, queueing and streaming, seconds.  The simulators (engine, fleet,
        fastsim) put it between the client sending a request and the engine seeing it
        (the way back folded in), so it is inside every TTFT, end-to-end latency and
        the run's duration, and a closed loop's slot stays taken until the reply is
        back; never in step times.
    api_server_s: the API server as one serial stage, seconds per request: the engine
        sees request ``i`` at ``max(sent_i + request_overhead_s, seen_(i-1) +
        api_server_s)`` (one request at a time is tokenised and handed over, so a burst
        of ``N`` reaches the engine over ``(N - 1) x api_server_s``; a request alone
        only waits ``request_overhead_s``).  One server per replica (in a fleet, after
        the router); 0: no such stage.  Never in step times.
    compute_fp8: the GEMMs' efficiency where they run in fp8 / fp4 (1-byte or 4-bit
        float checkpoints, ``compute_dtype_for``), as a factor of ``compute``: they
        reach ``compute x compute_fp8`` of the fp8 / fp4 peak (block-scaled and
        per-token-scaled fp8 kernels reach less of their doubled peak than bf16 of
        its own); 1: as bf16 (v8).
    compute_gddr: the same factor on GDDR parts (L40S, RTX 4090 / 6000 Ada): their
        datasheet tensor peak assumes boost clocks a power-limited card does not
        hold under a long GEMM; 1: as HBM parts (v8).
    compute_hbm3: the same factor on HBM3 / HBM3e parts (H100 SXM / NVL, H200, B200,
        GB200, MI300X and later): their generation's GEMM kernels (wgmma / TMA on
        Hopper) and recent vLLM's compiled graphs reach more of the peak than an A100's
        or a GDDR card's; the product ``compute x compute_hbm3`` is capped at 1 (the
        datasheet peak); 1: as the other parts (v10).
    api_stream_s: the way back as one serial stage, seconds per streamed chunk (vLLM's
        OutputProcessor, detokeniser and one SSE chunk per request per engine step in
        the API server's event loop, and the benchmark client parsing it): a step
        ending at ``t`` in which ``k`` requests emit tokens reaches the client at ``d =
        max(d_prev, t) + api_stream_s x k``; its tokens' times (TTFT, ITL, E2EL), the
        closed loop's freed slots and the duration are ``d``.  One stage per replica;
        0: a token reaches the client at the end of its step (v7).  Never in step
        times (tests/data/sim_accuracy/v8_protocol.md).
    """

    compute: float = 0.55
    memory: float = 0.80
    memory_hbm3: float = 0.80
    memory_gddr: float = 0.80
    roofline_p: float = 3.0
    step_s: float = 2.5e-3
    per_request_s: float = 2.0e-5
    per_block_table_s: float = 1.0e-6
    allreduce_latency_s: float = 1.0e-5
    prefill_token_s: float = 0.0
    moe_memory: float = 1.0
    request_overhead_s: float = 0.0
    layer_s: float = 0.0
    moe_layer_s: float = 0.0
    moe_compute: float = 1.0
    api_server_s: float = 0.0
    moe_memory_tokens: float = 0.0
    api_stream_s: float = 0.0
    compute_fp8: float = 1.0
    compute_gddr: float = 1.0
    compute_hbm3: float = 1.0

    def __post_init__(self) -> None:
        """Raises ConfigError naming the field, the value and the valid range: a
        fraction of a peak (``compute``, ``memory``, ``memory_hbm3``, ``memory_gddr``,
        ``moe_memory``, ``moe_compute``) or a discount factor of ``compute``
        (``compute_fp8``, ``compute_gddr``) outside [0.001, 1]; ``compute_hbm3`` outside
        [0.001, 1000] (the product with ``compute`` is capped at 1); ``roofline_p``
        not a finite number >= 1 (1: the sum of compute and memory time, larger: nearer
        their maximum; below 1 the combination would exceed the sum); a time (``*_s``)
        outside [0, 3600] s, ``moe_memory_tokens`` outside [0, 1e9]; an int too large
        for a float."""
        for f in dataclasses.fields(self):
            v = getattr(self, f.name)
            # an int too large for a float is no finite number (isfinite would raise)
            number = (not isinstance(v, bool) and isinstance(v, (int, float))
                      and (isinstance(v, float) or abs(v) < 1 << 62)
                      and math.isfinite(v))
            if f.name in _EFFICIENCY_FRACTIONS:
                ok, what = number and 1e-3 <= v <= 1, "a finite number in (0, 1] (a " \
                    "fraction of the peak), at least 0.001"
            elif f.name in _EFFICIENCY_DISCOUNTS:
                ok, what = number and 1e-3 <= v <= 1, "a finite number in (0, 1] (a " \
                    "factor of compute: kernels reach compute x it of the peak), at " \
                    "least 0.001"
            elif f.name == "roofline_p":
                ok, what = number and v >= 1, "a finite number >= 1 (1: compute plus " \
                    "memory time; larger: nearer their maximum)"
            elif f.name.endswith("_s"):
                ok, what = number and 0 <= v <= 3600, "a finite number of seconds in " \
                    "[0, 3600]"
            elif f.name == "moe_memory_tokens":
                ok, what = number and 0 <= v <= 1e9, "a finite number of tokens in " \
                    "[0, 1e9]"
            else:  # compute_hbm3: a factor > 0 (compute x it is capped at 1)
                ok, what = number and 1e-3 <= v <= 1e3, "a finite number in [0.001, " \
                    "1000]"
            if not ok:
                raise ConfigError(f"Efficiency.{f.name} must be {what}, got {v!r}",
                                  field=f.name, value=repr(v))


#: Efficiency fields that are fractions of a datasheet peak, in (0, 1]
_EFFICIENCY_FRACTIONS = frozenset({"compute", "memory", "memory_hbm3", "memory_gddr",
                                   "moe_memory", "moe_compute"})
#: Efficiency factors of ``compute`` that only discount it, in (0, 1]
_EFFICIENCY_DISCOUNTS = frozenset({"compute_fp8", "compute_gddr"})


@dataclass(frozen=True)
class StepBreakdown:
    """Where one step's time went (seconds): ``total_s = combine(compute_s, memory_s) +
    comm_s + cpu_s``; FLOPs and bytes per rank."""

    compute_s: float
    memory_s: float
    comm_s: float
    cpu_s: float
    total_s: float
    flops: float
    weight_bytes: float
    kv_bytes: float


#: ``RooflineTimeModel.memory_type`` values (``GPUPerf.memory_type``)
MEMORY_TYPES = ("hbm", "hbm3", "gddr")
#: ``RooflineTimeModel.compute_dtype`` values (:func:`compute_dtype_for`)
COMPUTE_DTYPES = ("bf16", "fp8", "fp4")


@dataclass(frozen=True)
class RooflineTimeModel:
    """A roofline step time with fitted efficiencies, per rank of one pipeline stage.

    Per step of ``T`` tokens from ``R`` requests:

    * FLOPs = ``flops_per_token x T + lm_head_flops x R + sum_g 2 x pairs_g x
      (qk_dim_g + v_dim_g) x q_heads_per_rank`` (2 x active params per token; the LM
      head only for the sampled token of each request, as vLLM computes logits; QK and
      PV over the keys each query attends to, :func:`describe_batch`);
      ``compute_s = (FLOPs - expert FLOPs) / (peak_flops x c) + expert FLOPs /
      (peak_flops x c x moe_compute)`` with ``c = compute`` (times ``compute_fp8``
      where ``compute_dtype`` is fp8 / fp4, times ``compute_gddr`` on GDDR parts or
      ``compute_hbm3`` on HBM3 parts, there at most 1;
      expert FLOPs: ``expert_flops_per_token x T``, the routed experts' share of the
      2 x active params).
    * bytes = ``dense_weight_bytes + expert_bytes x touched / num_experts + KV read +
      KV written``; ``touched = E x (1 - (1 - k / E) ** T)``, the expected distinct
      experts ``T`` tokens routed top-``k`` among ``E`` reach (all of them for large
      batches); ``memory_s = bytes / (hbm_bytes_per_s x memory)``, the experts' share
      slowed by ``1 / moe_memory`` (with ``moe_memory_tokens`` ``N > 0``: by ``1 + (1 /
      moe_memory - 1) x min(1, N / t)``, ``t = T x k / touched`` tokens per touched
      expert).
    * ``comm_s`` = ``2 x num_layers`` all-reduces of ``T x hidden_size x act_bytes``
      bytes each under TP: ``2 (tp - 1) / tp x bytes / link_bytes_per_s + latency``
      (ring all-reduce; ``link_bytes_per_s`` one direction).
    * ``cpu_s = step_s + per_request_s x R + per_block_table_s x (block tables - R) +
      prefill_token_s x prefill tokens``.
    * ``layer_s`` = ``layer_s x num_layers + moe_layer_s x num_moe_layers`` (the stage's
      layers; GPU time no roofline term sees: kernel tails and gaps, small ops).
    * total = ``(compute_s**p + memory_s**p) ** (1/p) + layer_s + comm_s + cpu_s``.
      The memory efficiency is chosen by the GPU's memory generation (``memory_type``:
      ``hbm``, ``hbm3``, ``gddr``).
    * Pipeline parallelism (``pipeline_parallel_size`` ``pp`` > 1): vLLM v1 keeps
      ``max_concurrent_batches = pp`` batches in flight, one per stage
      (vllm/config/vllm.py@0.32 ``max_concurrent_batches``; vllm/v1/engine/core.py
      ``batch_queue`` / ``step_with_batch_queue``), a request in one of them at a time.
      A step here is one *round* (every scheduled request advances once): its
      ``R`` requests run as ``m = min(pp, R)`` micro-batches of ``R / m`` requests
      and ``T / m`` tokens; a stage holds ``1 / pp`` of the layers, so a micro-batch
      on a stage reads the stage's weights (``dense_weight_bytes``: the fullest stage,
      the bottleneck), ``1 / pp`` of the batch's KV and attention pairs (they are
      whole-model figures) and ``1 / m`` of them; each request's token comes back
      after ``pp`` stage times, so the round takes ``pp x`` the micro-batch's stage
      time (+ ``cpu_s`` once: the next batch is scheduled while one runs).  With
      ``m = pp`` the weights are read ``pp`` times a round on each stage (as PP 1
      reads them once on one GPU) while the KV is split ``pp`` ways: a round is never
      slower than PP 1's step on the same batch.  ``batches_in_flight`` (= ``pp``)
      is what an engine reads to give each round ``pp x max_num_batched_tokens``
      tokens (vLLM's budget is per batch).

    Build one with :func:`roofline_for`.
    """

    peak_flops: float
    hbm_bytes_per_s: float
    link_bytes_per_s: float
    dense_weight_bytes: float
    expert_bytes: float = 0.0
    num_experts: int = 0
    experts_per_token: int = 0
    flops_per_token: float = 0.0
    expert_flops_per_token: float = 0.0
    lm_head_flops: float = 0.0
    q_heads_per_rank: float = 0.0
    hidden_size: int = 0
    num_layers: int = 0
    num_moe_layers: int = 0
    tensor_parallel_size: int = 1
    pipeline_parallel_size: int = 1
    act_bytes: int = 2
    efficiency: Efficiency = Efficiency()
    name: str = ""
    memory_type: str = "hbm"
    compute_dtype: str = "bf16"

    def __post_init__(self) -> None:
        """Raises ConfigError naming the field, the value and what is valid: a peak or
        bandwidth (``peak_flops``, ``hbm_bytes_per_s``, ``link_bytes_per_s``) that is
        not a finite number > 0; a byte or FLOP figure not a finite number >= 0; a
        count not an integer >= 0 (parallel sizes and ``act_bytes`` >= 1,
        ``experts_per_token`` at most ``num_experts``); ``efficiency`` not an
        :class:`Efficiency`; ``memory_type`` not hbm / hbm3 / gddr; ``compute_dtype``
        not bf16 / fp8 / fp4; ``name`` not a string."""
        def bad(name: str, what: str) -> ConfigError:
            v = getattr(self, name)
            return ConfigError(f"RooflineTimeModel.{name} must be {what}, got {v!r}",
                               field=name, value=repr(v))

        def number(v: Any) -> bool:
            # an int too large for a float is no finite number (isfinite would raise)
            return (not isinstance(v, bool) and isinstance(v, (int, float))
                    and (isinstance(v, float) or abs(v) < 1 << 1000)
                    and math.isfinite(v))

        for name in ("peak_flops", "hbm_bytes_per_s", "link_bytes_per_s"):
            v = getattr(self, name)
            if not (number(v) and v > 0):
                raise bad(name, "a finite number > 0 (a datasheet rate per second)")
        for name in ("dense_weight_bytes", "expert_bytes", "flops_per_token",
                     "expert_flops_per_token", "lm_head_flops", "q_heads_per_rank"):
            v = getattr(self, name)
            if not (number(v) and v >= 0):
                raise bad(name, "a finite number >= 0")
        for name, low in (("num_experts", 0), ("experts_per_token", 0),
                          ("hidden_size", 0), ("num_layers", 0), ("num_moe_layers", 0),
                          ("tensor_parallel_size", 1), ("pipeline_parallel_size", 1),
                          ("act_bytes", 1)):
            v = as_int(getattr(self, name))  # numpy integers too; bool refused
            if v is None or v < low:
                raise bad(name, f"an integer >= {low}")
            object.__setattr__(self, name, v)  # stored as a plain int
        if self.num_experts and self.experts_per_token > self.num_experts:
            raise bad("experts_per_token", f"an integer <= num_experts "
                                           f"({self.num_experts})")
        if not isinstance(self.efficiency, Efficiency):
            raise bad("efficiency", "an Efficiency (dataclasses.replace("
                                    "DEFAULT_EFFICIENCY, compute=...), or give the "
                                    "fields to roofline_for directly)")
        if self.memory_type not in MEMORY_TYPES:
            raise bad("memory_type", f"one of {', '.join(MEMORY_TYPES)}")
        if self.compute_dtype not in COMPUTE_DTYPES:
            raise bad("compute_dtype", f"one of {', '.join(COMPUTE_DTYPES)}")
        if not isinstance(self.name, str):
            raise bad("name", "a string")

    @property
    def batches_in_flight(self) -> int:
        """Batches vLLM keeps in flight: ``pipeline_parallel_size`` (one per stage,
        ``VllmConfig.max_concurrent_batches``@0.32 without async scheduling).  A step
        of this model is one round of that many batches (see the class docstring)."""
        return max(1, self.pipeline_parallel_size)

    def breakdown(self, batch: Batch) -> StepBreakdown:
        """The step's time split into compute, memory, communication and CPU (seconds;
        under pipeline parallelism compute, memory and communication are a stage's
        per round: ``pp`` micro-batch stage times).  Raises ConfigError (field
        ``batch``) for a batch that is not a :class:`Batch`."""
        _check_batch(batch)
        eff = self.efficiency
        reqs = batch.requests
        tokens = 0
        prefill = 0
        for r in reqs:
            tokens += r.num_new_tokens
            if r.is_prefill:
                prefill += r.num_new_tokens
        nreq = len(reqs)
        pp = max(1, self.pipeline_parallel_size)
        # micro-batches in flight (one request is in one batch at a time)
        mb = max(1, min(pp, nreq))
        kv = 0
        pair_flops = 0.0
        tables = 0
        for g in batch.groups:
            kv += g.kv_bytes_read + g.kv_bytes_written
            if g.attention_pairs:
                pair_flops += g.attention_pairs * (g.qk_dim + g.v_dim)
            tables += g.num_block_tables
        # one micro-batch on one stage: the stage's share (1 / pp) of the whole-model
        # KV and attention pairs, 1 / mb of the batch (flops_per_token is per stage)
        m_tokens = tokens / mb
        kv_m = kv / (pp * mb)
        flops = (self.flops_per_token * m_tokens + self.lm_head_flops * nreq / mb
                 + 2.0 * pair_flops * self.q_heads_per_rank / (pp * mb))
        weights = self.dense_weight_bytes
        expert = 0.0
        touched = 0.0
        if self.expert_bytes and self.num_experts:
            e, k = self.num_experts, max(1, self.experts_per_token)
            touched = e * (1.0 - (1.0 - k / e) ** m_tokens) if m_tokens else 0.0
            expert = self.expert_bytes * touched / e
            weights += expert
        ceff = eff.compute
        if self.compute_dtype != "bf16":
            ceff *= eff.compute_fp8
        if self.memory_type == "gddr":
            ceff *= eff.compute_gddr
        elif self.memory_type == "hbm3":
            ceff = min(1.0, ceff * eff.compute_hbm3)
        compute_s = flops / (self.peak_flops * ceff)
        if self.expert_flops_per_token and eff.moe_compute != 1.0:
            ef = self.expert_flops_per_token * m_tokens
            compute_s += ef * (1.0 / eff.moe_compute - 1.0) / (self.peak_flops * ceff)
        bw = self.hbm_bytes_per_s * {"gddr": eff.memory_gddr,
                                     "hbm3": eff.memory_hbm3}.get(self.memory_type,
                                                                  eff.memory)
        if expert and eff.moe_memory_tokens > 0:
            # tokens per touched expert (>= 1): the discount amortised over them
            tpe = m_tokens * self.experts_per_token / touched if touched else 1.0
            scale = 1.0 + (1.0 / eff.moe_memory - 1.0) * min(
                1.0, eff.moe_memory_tokens / max(tpe, 1.0))
            memory_s = (weights - expert + kv_m) / bw + expert * scale / bw
        else:
            memory_s = (weights - expert + kv_m) / bw + expert / (bw * eff.moe_memory)
        p = eff.roofline_p
        if p >= 50:
            core = max(compute_s, memory_s)
        else:
            hi = max(compute_s, memory_s)
            core = hi * ((compute_s / hi) ** p + (memory_s / hi) ** p) ** (1.0 / p) \
                if hi > 0 else 0.0
        tp = self.tensor_parallel_size
        comm_s = 0.0
        if tp > 1 and tokens:
            nbytes = m_tokens * self.hidden_size * self.act_bytes
            comm_s = 2 * self.num_layers * (2.0 * (tp - 1) / tp * nbytes
                                            / self.link_bytes_per_s
                                            + eff.allreduce_latency_s)
        cpu_s = (eff.step_s + eff.per_request_s * nreq
                 + eff.per_block_table_s * max(0, tables - nreq)
                 + eff.prefill_token_s * prefill)
        # the layers' fixed GPU time (per micro-batch on a stage: a stage runs its
        # layers once per micro-batch), counted with compute / memory in the stage time
        layer_s = (eff.layer_s * self.num_layers + eff.moe_layer_s * self.num_moe_layers
                   ) if tokens else 0.0
        core += layer_s
        total = (core + comm_s) * pp + cpu_s
        return StepBreakdown(compute_s * pp, memory_s * pp, comm_s * pp, cpu_s, total,
                             flops * pp, weights * pp, float(kv_m * pp))

    def step_time(self, batch: Batch) -> float:
        """Seconds of one step (:meth:`breakdown`'s ``total_s``)."""
        return self.breakdown(batch).total_s

    @property
    def description(self) -> str:
        """One line naming the model (``kvcore simulate`` prints it)."""
        return self.name or "roofline"

    @property
    def request_overhead_s(self) -> float:
        """Seconds each request spends outside the steps (``Efficiency``)."""
        return self.efficiency.request_overhead_s

    @property
    def api_server_s(self) -> float:
        """The API server's serial time per request, s (``Efficiency.api_server_s``)."""
        return self.efficiency.api_server_s

    @property
    def api_stream_s(self) -> float:
        """The way back's serial time per streamed chunk, s (``Efficiency.api_stream_s``)."""
        return self.efficiency.api_stream_s


_TOPK_KEYS = ("num_experts_per_tok", "moe_topk", "num_experts_per_token", "top_k",
              "moe_k", "experts_per_token")
_EXPERT_KEYS = ("n_routed_experts", "num_experts", "num_local_experts", "moe_num_experts")


def _first_int(cfg: Any, keys: Sequence[str]) -> int:
    """The first of ``keys`` the config gives as a positive int or a list of them (its
    largest; per-layer expert counts), read through the typed reader; 0: none."""
    for key in keys:
        if cfg.has(key):
            v = cfg.view.get_int_or_list(key, minimum=0)
            v = max(v) if isinstance(v, list) and v else v
            if isinstance(v, int) and v > 0:
                return v
    return 0


def compute_dtype_for(quantization: str | None, bytes_per_param: float, gpu: Any) -> str:
    """``bf16``, ``fp8`` or ``fp4``: the tensor-core format the GEMMs run in.  Weight-only
    schemes (AWQ, GPTQ, bitsandbytes, gpt-oss's MXFP4 outside Blackwell) compute in
    bf16; 1-byte weights (fp8 checkpoints, W8A8) in fp8 where the GPU has it; 4-bit
    float weights (NVFP4) in fp4 where the GPU has it."""
    perf = gpu.perf
    q = (quantization or "").lower()
    if not q or any(w in q for w in ("awq", "gptq", "bitsandbytes", "gguf")):
        return "bf16"
    if bytes_per_param < 0.75 and perf.fp4_flops:
        return "fp4"
    if bytes_per_param < 1.5 and perf.fp8_flops and "mxfp4" not in q:
        return "fp8"
    return "bf16"


def roofline_for(model_config: Any, kv_cache_config: Any = None, *, gpu: Any,
                 tensor_parallel_size: int = 1, pipeline_parallel_size: int = 1,
                 kv_cache_dtype: str = "auto", **overrides: Any) -> RooflineTimeModel:
    """The :class:`RooflineTimeModel` of ``model_config`` (a
    :class:`~kvcore.models.config.ModelConfig`, an embedded name or a config path) on
    ``gpu`` (a catalog name or :class:`~kvcore.deploy.gpus.GPU`) with the given TP / PP.

    Weights per rank and per tensor class come from
    :func:`kvcore.deploy.weights.estimate_weights` / ``weight_tensors``: the dense part
    (everything but the embeddings' lookup copy, vision / audio towers, MTP layers and
    routed experts) is read every step; routed experts as the step's tokens touch them.
    ``kv_cache_config`` is accepted for symmetry with :func:`describe_batch` (the KV
    traffic comes from the Batch); ``kv_cache_dtype`` is recorded in ``name``.
    ``overrides``: any :class:`Efficiency` field (``compute=0.6``...), or any
    :class:`RooflineTimeModel` field.

    Raises ConfigError: unknown GPU or GPU without perf figures, bad parallel sizes,
    unknown override, or the model errors of :func:`estimate_weights`.
    """
    import dataclasses as _dc

    from kvcore.deploy.gpus import GPU, get_gpu
    from kvcore.deploy.weights import estimate_weights, weight_tensors
    from kvcore.models.config import ModelConfig, load_model_config

    cfg = model_config if isinstance(model_config, ModelConfig) \
        else load_model_config(model_config)
    g = gpu if isinstance(gpu, GPU) else get_gpu(gpu, memory_flag=False)
    if g.perf is None:
        raise ConfigError(f"gpu: {g.name} has no peak figures in the catalog; give a GPU "
                          f"with perf figures (kvcore gpus --json)", field="gpu",
                          value=g.name)
    checked = []
    for name, v in (("tensor_parallel_size", tensor_parallel_size),
                    ("pipeline_parallel_size", pipeline_parallel_size)):
        number = as_int(v)  # numpy integers too, as a plain int; bool refused
        if number is None or number < 1:
            raise ConfigError(f"{name} must be an integer >= 1, got {v!r}", field=name,
                              value=repr(v))
        checked.append(number)
    tp, pp = checked
    from kvcore.models.adapters import check_tensor_parallel

    check_tensor_parallel(cfg, tp)
    w = estimate_weights(cfg, tensor_parallel_size=tp, pipeline_parallel_size=pp)
    params: dict[str, int] = {}
    tensors = weight_tensors(cfg)
    for t in tensors:
        cls = "mtp" if t.where == "mtp" else t.tensor_class
        params[cls] = params.get(cls, 0) + t.numel
    by = w.by_class
    skip = ("vision", "audio", "mtp")
    loaded = w.total_bytes - w.mtp_bytes
    share = w.per_rank_bytes / loaded if loaded else 1.0  # ~ 1 / (tp x pp)
    tied = "lm_head" not in by
    read_total = sum(b for c, b in by.items() if c not in skip)
    if not tied:
        read_total -= by.get("embedding", 0)  # the lookup reads T rows, not the table
    experts_total = by.get("moe_experts", 0)
    dense = (read_total - experts_total) * share
    n_exp = _first_int(cfg, _EXPERT_KEYS) if experts_total else 0
    topk = _first_int(cfg, _TOPK_KEYS) if n_exp else 0
    head_params = params.get("lm_head", params.get("embedding", 0) if tied else 0)
    active: float = sum(n for c, n in params.items()
                 if c not in (*skip, "embedding", "lm_head", "moe_experts"))
    if n_exp:
        active += params.get("moe_experts", 0) * min(1.0, topk / n_exp)
    layers_ps = max(1, -(-(cfg.num_hidden_layers or 1) // pp))
    moe_layers = {t.layer for t in tensors
                  if t.tensor_class == "moe_experts" and t.where == "layer"}
    moe_ps = -(-len(moe_layers) // pp)
    bpp = w.total_bytes / w.total_params if w.total_params else 2.0
    dtype = compute_dtype_for(w.quantization, bpp, g)
    perf = g.perf
    peak = {"bf16": perf.bf16_flops, "fp8": perf.fp8_flops or perf.bf16_flops,
            "fp4": perf.fp4_flops or perf.fp8_flops or perf.bf16_flops}[dtype]
    heads = cfg.num_attention_heads or 0
    eff_fields = {f.name for f in _dc.fields(Efficiency)}
    model_fields = {f.name for f in _dc.fields(RooflineTimeModel)}
    eff_kw = {k: v for k, v in overrides.items() if k in eff_fields}
    bad = sorted(set(overrides) - eff_fields - model_fields)
    if bad:
        raise ConfigError(f"roofline_for: unknown override(s) {', '.join(bad)}; valid: "
                          f"{', '.join(sorted(eff_fields | model_fields))}",
                          field=bad[0], value=overrides[bad[0]])
    base_eff = overrides.get("efficiency", DEFAULT_EFFICIENCY)
    if not isinstance(base_eff, Efficiency):
        raise ConfigError(f"roofline_for: efficiency must be an Efficiency, got "
                          f"{base_eff!r} (give its fields as overrides instead: "
                          f"compute=0.5, memory=0.6, ...)", field="efficiency",
                          value=repr(base_eff))
    from kvcore.deploy.budget import check_kv_cache_dtype

    try:
        check_kv_cache_dtype(kv_cache_dtype)
    except ConfigError:
        raise
    except KVCoreError as exc:  # an unknown name, or a plugin's dtype not installed
        raise ConfigError(f"roofline_for: kv_cache_dtype: {exc.message}",
                          field="kv_cache_dtype", value=repr(kv_cache_dtype)) from exc
    kw: dict[str, Any] = {
        "peak_flops": peak,
        "hbm_bytes_per_s": perf.hbm_bytes_per_s,
        "link_bytes_per_s": perf.interconnect_bytes_per_s / 2,
        "dense_weight_bytes": dense,
        "expert_bytes": experts_total * share,
        "num_experts": n_exp,
        "experts_per_token": topk,
        "flops_per_token": 2.0 * active / (tp * pp),
        "expert_flops_per_token": (2.0 * params.get("moe_experts", 0) * min(1.0, topk / n_exp)
                                   / (tp * pp)) if n_exp else 0.0,
        "lm_head_flops": 2.0 * head_params / tp,
        "q_heads_per_rank": heads / tp if heads else 0.0,
        "hidden_size": cfg.hidden_size or 0,
        "num_layers": layers_ps,
        "num_moe_layers": moe_ps,
        "tensor_parallel_size": tp,
        "pipeline_parallel_size": pp,
        "efficiency": _dc.replace(base_eff, **eff_kw),
        "memory_type": perf.memory_type,
        "compute_dtype": dtype,
        "name": f"roofline {cfg.name or cfg.model_type} on {g.name} tp{tp} pp{pp} "
                f"{dtype} kv {kv_cache_dtype}",
    }
    kw.update({k: v for k, v in overrides.items()
               if k in model_fields and k != "efficiency"})
    return RooflineTimeModel(**kw)


#: the fitted coefficients (v10): v2's (``python -m kvcore.sim.accuracy --fit --fast``
#: on the v1 + v2 ``fit`` rows of tests/data/sim_accuracy/measurements.json), with
#: ``memory_hbm3``, ``moe_memory`` and ``moe_memory_tokens`` refitted on every fit row in
#: v7, the API server's two serial stages in v8 (100 us per streamed chunk, 3 ms per
#: request) and ``compute`` 0.5 and ``moe_compute`` 0.5 from v9's fit (whose third
#: term, ``compute_fp8``, stopped on its grid's edge and is left at 1.0), each adopted
#: by a rule fixed before its test rows were read (tests/data/sim_accuracy/
#: v7_protocol.md ... v10_protocol.md; docs/SIM_ACCURACY.md: how, which rows, the
#: held-out errors, and the fits not adopted).  The terms added since v2 and not
#: refitted (layer_s, moe_layer_s, compute_fp8, compute_gddr) are at their neutral
#: values.  ``per_block_table_s`` is not fitted (no row has several KV-cache groups):
#: 1 us per block table (vLLM's input batch copies one block-table row per request per
#: group).
DEFAULT_EFFICIENCY = Efficiency(
    compute=0.5, memory=0.6, memory_hbm3=0.75, memory_gddr=0.9, roofline_p=3.0,
    step_s=1.5e-3, per_request_s=2e-5, per_block_table_s=1e-6, allreduce_latency_s=2e-5,
    prefill_token_s=0.0, moe_memory=0.6, request_overhead_s=0.02, moe_memory_tokens=1.0,
    api_server_s=3e-3, api_stream_s=1e-4, moe_compute=0.5)
