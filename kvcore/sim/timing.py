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
    """

    num_new_tokens: int
    num_computed_tokens: int
    is_prefill: bool


@dataclass(frozen=True, slots=True)
class GroupIO:
    """KV traffic of one KV-cache group in one step, summed over its layers and requests.

    kv_bytes_read: bytes of KV (or state) the attention/SSM kernels read, bytes.
    kv_bytes_written: bytes written for the new tokens (or the updated states), bytes.
    num_block_tables: block tables this group passes to its kernels (one per scheduled
        request that holds blocks in the group).
    """

    group_id: int
    kind: str
    num_layers: int
    kv_bytes_read: int
    kv_bytes_written: int
    num_block_tables: int


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


def describe_batch(kv_cache_config: Any, requests: Sequence[ScheduledRequest]) -> Batch:
    """The :class:`Batch` of a step of ``requests`` under ``kv_cache_config``.

    First cut: every layer reads ``page_size_bytes / block_size`` bytes per context token
    (the whole context) and writes that per new token.  The timing model refines this
    per kind (windows, chunks, states).
    """
    groups: list[GroupIO] = []
    reqs = tuple(requests)
    ctx = sum(r.num_computed_tokens + r.num_new_tokens for r in reqs)
    new = sum(r.num_new_tokens for r in reqs)
    for gid, g in enumerate(kv_cache_config.kv_cache_groups):
        spec = g.spec
        per_tok = spec.page_size_bytes / max(1, spec.block_size)
        n = len(g.layer_names)
        groups.append(GroupIO(gid, spec.kind, n, int(per_tok * ctx * n),
                              int(per_tok * new * n), len(reqs)))
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
