"""Groups + a memory budget -> a :class:`~kvcore.kv_cache_config.KVCacheConfig`.

Conventions (those of vLLM v1's ``get_kv_cache_configs``, and of the planner vectors):

* bytes per block id = the largest sum of page sizes over the layers of one group;
  ``num_blocks = budget // bytes per block id`` (with pipeline stages, the smallest
  result over the stages, each stage counting only its own layers).  ``num_blocks``
  includes the null block (block 0, never handed to a request).
* blocks one request of ``max_model_len`` needs = the sum over groups of each group's
  own admission cap (:meth:`KVCacheSpec.max_num_blocks_per_req`).
* ``max_concurrency = num_blocks / blocks per request`` (null block not subtracted);
  ``kv_cache_capacity_tokens = int(max_concurrency x max_model_len)``.
* ``max_concurrency_batched`` (kvcore's own, tighter for windowed and chunked layers):
  the admission caps above assume a whole step of ``max_num_batched_tokens`` in flight
  for *every* request, but a step's tokens are shared by the batch.  With one request
  prefilling a full chunk and the others decoding:
  ``1 + (num_blocks - blocks per request) / blocks per decoding request``.  Equal to
  ``max_concurrency`` for models of full-attention layers only.
* planning fails when one request of max_model_len does not fit in ``num_blocks - 1``
  blocks; the error states the smallest budget that plans,
  ``(blocks per request + 1) x bytes per block id``, and the longest max_model_len the
  budget allows.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import operator
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from kvcore.errors import ConfigError, NotEnoughMemoryError
from kvcore.grouping import (
    GroupingResult,
    SearchEnv,
    blocks_per_request,
    bytes_per_block_of,
    check_layer_specs,
    group_layers,
    is_block_outermost,
    longest_len,
    padding_per_request,
    prefix_hit_alignment,
    reserved_blocks,
    spec_blocks_per_req,
    stage_bytes_per_block,
    uniq,
)
from kvcore.kv_cache_config import (
    KVCacheConfig,
    KVCacheGroupSpec,
    KVCacheTensor,
    PlanStats,
    _json_value,
)
from kvcore.serving import Judge, Workload
from kvcore.specs import KVCacheSpec, PlanContext

__all__ = ["plan", "plan_from_specs_file", "plan_to_dict", "format_bytes",
           "SPECS_FILE_OPTIONS"]

GiB = 1 << 30

SPECS_FILE_OPTIONS = (
    "kv_cache_memory_bytes", "max_model_len", "max_num_batched_tokens",
    "max_num_encoder_input_tokens", "enable_prefix_caching",
    "disable_hybrid_kv_cache_manager", "mamba_cache_mode", "num_gpu_blocks_override",
    "tensor_parallel_size", "pipeline_parallel_size", "decode_context_parallel_size",
    "kernel_block_size", "kv_cache_layout", "stages", "num_speculative_tokens",
    "max_model_len_limit",
)


def _whole(x: Any) -> Any:
    """A float that is a whole number as an int (JSON ``64``, not ``64.0``)."""
    return int(x) if isinstance(x, float) and x.is_integer() else x


def format_bytes(n: float) -> str:
    """``n`` bytes as a short human string (binary units).  Raises ConfigError for a
    value that is not a finite number of at most 2^80 bytes."""
    if isinstance(n, bool) or not isinstance(n, (int, float)) or \
            isinstance(n, float) and not math.isfinite(n) or abs(n) > 1 << 80:
        from kvcore.units import shorten

        raise ConfigError(f"format_bytes takes a number of bytes, got {shorten(n)}",
                          field="n", value=shorten(n))
    for unit, size in (("TiB", 1 << 40), ("GiB", GiB), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if abs(n) >= size:
            return f"{n / size:.2f} {unit}"
    return f"{int(n)} B"


def _check_int(name: str, value: Any, minimum: int) -> int:
    """``value`` as an int >= minimum (numpy integers accepted); ConfigError otherwise."""
    what = "a positive int" if minimum == 1 else f"an int >= {minimum}"
    if isinstance(value, bool):
        raise ConfigError(f"{name} must be {what}, got {value!r}", field=name, value=value)
    try:
        number = operator.index(value)
    except TypeError:
        raise ConfigError(f"{name} must be {what}, got {value!r}", field=name,
                          value=repr(value)) from None
    if number < minimum:
        raise ConfigError(f"{name} must be {what}, got {value!r}", field=name, value=number)
    from kvcore.units import bound, shorten

    if number > bound(name):  # plausibility bounds: one table, kvcore.units.BOUNDS
        raise ConfigError(f"{name} = {shorten(number)} is implausibly large (at most "
                          f"{bound(name):,})", field=name, value=shorten(number))
    return number


def _check_bool(name: str, value: Any) -> bool:
    if not isinstance(value, bool):
        raise ConfigError(f"{name} must be true or false, got {value!r}", field=name,
                          value=repr(value))
    return value


def _check_stages(stages: Any, names: list[str]) -> list[list[str]]:
    """Each layer in exactly one stage; ConfigError naming the problem otherwise."""
    if isinstance(stages, (str, bytes)) or not isinstance(stages, Sequence) or not stages:
        raise ConfigError(f"stages must be a non-empty list of lists of layer names, got "
                          f"{stages!r}", field="stages")
    out: list[list[str]] = []
    seen: dict[str, int] = {}
    known = set(names)
    for i, stage in enumerate(stages):
        if isinstance(stage, (str, bytes)) or not isinstance(stage, Sequence) or \
                not all(isinstance(n, str) for n in stage):
            raise ConfigError(f"stages[{i}] must be a list of layer names, got {stage!r}",
                              field="stages")
        if not stage:
            raise ConfigError(f"stages[{i}] is empty: every pipeline stage lists at least "
                              f"one layer (drop the stage or give it layers)",
                              field="stages", stage=i)
        for n in stage:
            if n not in known:
                raise ConfigError(f"stages[{i}] lists layer {n!r}, which is not among the "
                                  f"layers", field="stages", layer=n)
            if n in seen:
                raise ConfigError(f"layer {n!r} is in stages[{seen[n]}] and stages[{i}]; "
                                  f"each layer belongs to exactly one stage", field="stages",
                                  layer=n)
            seen[n] = i
        out.append(list(stage))
    missing = [n for n in names if n not in seen]
    if missing:
        raise ConfigError(f"stages leave out {len(missing)} layer(s), e.g. {missing[0]!r}; "
                          f"each layer belongs to exactly one stage", field="stages",
                          layer=missing[0])
    return out


def _tensors(groups: Sequence[KVCacheGroupSpec], num_blocks: int, block_outermost: bool,
             bytes_per_block: int) -> list[KVCacheTensor]:
    """The buffers: block-outermost, every layer a view at its offset inside a block id;
    one group, one buffer per layer; several groups, buffer j holds layer j of every
    group (its page the largest of theirs)."""
    if block_outermost:
        out = []
        for g in groups:
            offset = 0
            for name in g.layer_names:
                page = g.spec_of(name).page_size_bytes
                out.append(KVCacheTensor(num_blocks * page, (name,), offset, bytes_per_block))
                offset += page
        return out
    if len(groups) == 1:
        g = groups[0]
        return [KVCacheTensor(num_blocks * g.spec_of(n).page_size_bytes, (n,), 0,
                              g.spec_of(n).page_size_bytes) for n in g.layer_names]
    size = max(len(g.layer_names) for g in groups)
    out = []
    for j in range(size):
        names = tuple(g.layer_names[j] for g in groups if j < len(g.layer_names))
        page = max(g.spec_of(g.layer_names[j]).page_size_bytes
                   for g in groups if j < len(g.layer_names))
        out.append(KVCacheTensor(num_blocks * page, names, 0, page))
    return out


# ---- step 1: options -------------------------------------------------------------

@dataclass(frozen=True)
class _Options:
    """The plan's options, checked (step 1 of :func:`plan`)."""

    max_model_len: int            # -1: the longest that fits
    limit: int
    limit_source: str
    budgets: list[int] | None
    override: int | None
    ctx: PlanContext
    kernel_block_size: int | None
    kv_cache_layout: str | None
    disable_hybrid: bool
    stages: Sequence[Sequence[str]] | None
    notes: tuple[str, ...]

    @property
    def plan_len(self) -> int:
        return self.max_model_len if self.max_model_len > 0 else self.limit


def _check_budgets(o: dict[str, Any]) -> tuple[list[int] | None, int | None]:
    """(budgets in bytes, one per stage or one for all; num_gpu_blocks_override)."""
    mem = o["kv_cache_memory_bytes"]
    budgets: list[int] | None
    if mem is None:
        budgets = None
    elif isinstance(mem, (list, tuple)):
        budgets = [_check_int("kv_cache_memory_bytes", b, 0) for b in mem]
        if not budgets:
            raise ConfigError("kv_cache_memory_bytes is an empty list",
                              field="kv_cache_memory_bytes")
    else:
        budgets = [_check_int("kv_cache_memory_bytes", mem, 0)]
    override = o["num_gpu_blocks_override"]
    if override is not None:
        override = _check_int("num_gpu_blocks_override", override, 1)
    return budgets, override


def _check_lengths(o: dict[str, Any]) -> tuple[int, int, str, list[str]]:
    """(max_model_len, the search limit, where the limit comes from, notes)."""
    try:
        max_model_len = _check_int("max_model_len", o["max_model_len"], -1)
    except ConfigError:
        max_model_len = 0
    if max_model_len == 0:
        raise ConfigError("max_model_len must be a positive int or -1 (the longest that "
                          "fits)", field="max_model_len")
    model_limit = o["max_model_len_limit"]
    # absent (None) takes the search limit; a present 0, "" or {} is an error
    limit = _check_int("max_model_len_limit",
                       (1 << 24) if model_limit is None else model_limit, 1)
    notes: list[str] = []
    limit_source = "model" if model_limit else "search"
    if max_model_len > limit:
        if model_limit:
            notes.append(f"max_model_len {max_model_len} exceeds the model's "
                         f"max_position_embeddings {limit}")
        limit = max_model_len
        limit_source = "requested"
    return max_model_len, limit, limit_source, notes


def _validate_options(layer_specs: dict[str, KVCacheSpec], o: dict[str, Any]) -> _Options:
    """Step 1 of :func:`plan`: every option checked (ConfigError naming it)."""
    max_model_len, limit, limit_source, notes = _check_lengths(o)
    enable_prefix_caching = _check_bool("enable_prefix_caching", o["enable_prefix_caching"])
    disable_hybrid = _check_bool("disable_hybrid_kv_cache_manager",
                                 o["disable_hybrid_kv_cache_manager"])
    for name in ("max_num_batched_tokens", "tensor_parallel_size", "pipeline_parallel_size",
                 "decode_context_parallel_size"):
        _check_int(name, o[name], 1)
    for name in ("max_num_encoder_input_tokens", "num_speculative_tokens"):
        _check_int(name, o[name], 0)
    layout = o["kv_cache_layout"]
    if layout is not None and not isinstance(layout, str):
        raise ConfigError(f"kv_cache_layout must be a string such as LBNHC or BLHNC, got "
                          f"{layout!r}", field="kv_cache_layout")
    is_block_outermost(layout)
    kbs = o["kernel_block_size"]
    if kbs is not None:
        kbs = _check_int("kernel_block_size", kbs, 1)
    pp = o["pipeline_parallel_size"]
    if pp > len(layer_specs):
        raise ConfigError(f"pipeline_parallel_size {pp} exceeds the {len(layer_specs)} "
                          f"KV-cache layers; each stage needs at least one layer",
                          field="pipeline_parallel_size", value=pp)
    if o["max_num_encoder_input_tokens"] == 0 and any(
            s.kind == "cross_attention" for s in layer_specs.values()):
        raise ConfigError("cross_attention layers are sized by the encoder input of one "
                          "request: set max_num_encoder_input_tokens (e.g. 1500 audio "
                          "frames for Whisper)", field="max_num_encoder_input_tokens")
    budgets, override = _check_budgets(o)
    if max_model_len == -1 and budgets is None and override is None:
        raise ConfigError("max_model_len -1 (the longest that fits) needs a memory budget "
                          "(kv_cache_memory_bytes)", field="max_model_len")
    try:
        ctx = PlanContext(
            max_model_len=max_model_len if max_model_len > 0 else limit,
            max_num_batched_tokens=o["max_num_batched_tokens"],
            max_num_encoder_input_tokens=o["max_num_encoder_input_tokens"],
            tensor_parallel_size=o["tensor_parallel_size"], pipeline_parallel_size=pp,
            decode_context_parallel_size=o["decode_context_parallel_size"],
            mamba_cache_mode=o["mamba_cache_mode"],
            num_speculative_tokens=o["num_speculative_tokens"],
            enable_prefix_caching=enable_prefix_caching)
    except Exception as exc:  # SpecError from validation
        raise ConfigError(str(exc), **getattr(exc, "extra", {})) from exc
    return _Options(max_model_len, limit, limit_source, budgets, override, ctx, kbs, layout,
                    disable_hybrid, o["stages"], tuple(notes))


def pp_layer_partition(num_layers: int, pipeline_parallel_size: int) -> list[int]:
    """Layers per pipeline stage as vLLM's ``get_pp_indices`` splits them
    (``vllm/distributed/utils.py``@0.32, without ``VLLM_PP_LAYER_PARTITION``): equal
    shares, the remainder one each to the stages before the last, from the
    second-to-last backwards (32 over 3: ``[11, 11, 10]``).  Raises ConfigError for
    counts that are not ints >= 1."""
    from kvcore.units import check_int

    check_int(num_layers, "num_layers", minimum=1, maximum=1 << 20,
              where="pp_layer_partition")
    check_int(pipeline_parallel_size, "pipeline_parallel_size", minimum=1,
              maximum=1 << 12, where="pp_layer_partition")
    k = pipeline_parallel_size
    parts = [num_layers // k] * k
    for i in range(2, num_layers % k + 2):
        parts[-i] += 1
    return parts


def _stage_layers(opts: _Options, names: list[str]) -> list[list[str]]:
    """Each pipeline stage's layers (one stage: every layer)."""
    budgets, pp = opts.budgets, opts.ctx.pipeline_parallel_size
    if opts.stages is not None:
        stage_layers = _check_stages(opts.stages, names)
        if pp > 1 and len(stage_layers) != pp:
            raise ConfigError(f"stages lists {len(stage_layers)} stages but "
                              f"pipeline_parallel_size is {pp}", field="stages")
    elif budgets is not None and len(budgets) > 1 and pp > 1 and len(budgets) != pp:
        raise ConfigError(f"kv_cache_memory_bytes lists {len(budgets)} budgets for "
                          f"pipeline_parallel_size {pp}; give one budget or one per stage",
                          field="kv_cache_memory_bytes")
    elif (budgets is not None and len(budgets) > 1) or pp > 1:
        k = len(budgets) if budgets is not None and len(budgets) > 1 else pp
        if k > len(names):
            raise ConfigError(f"kv_cache_memory_bytes lists {k} stage budgets for "
                              f"{len(names)} layers", field="kv_cache_memory_bytes")
        # vLLM's get_pp_indices split (vllm/distributed/utils.py@0.32): equal shares,
        # the remainder one each to the stages before the last, from the second-to-last
        # backwards (32 layers over 3 stages: 11, 11, 10; fresh tester T6: kvcore split
        # 10, 11, 11 here while its --gpu path split as vLLM).  Over the KV-cache layers
        # in order: exact where every decoder layer has one
        parts = pp_layer_partition(len(names), k)
        ends = [sum(parts[:i + 1]) for i in range(k)]
        stage_layers = [names[(ends[i - 1] if i else 0):ends[i]] for i in range(k)]
    else:
        stage_layers = [names]
    if budgets is not None and len(budgets) != len(stage_layers) and len(budgets) > 1:
        raise ConfigError(f"kv_cache_memory_bytes lists {len(budgets)} budgets for "
                          f"{len(stage_layers)} pipeline stages", field="kv_cache_memory_bytes")
    return stage_layers


# ---- step 5: size the winner ---------------------------------------------------------

@dataclass
class _Sizing:
    num_blocks: int | None
    per_stage_blocks: list[int] | None
    stage_bpb: list[int]
    plan_len: int
    ctx: PlanContext
    blocks_req: int
    reserved: int
    estimated: int | None


def _size(groups: tuple[KVCacheGroupSpec, ...], opts: _Options, env: SearchEnv,
          stage_layers: list[list[str]]) -> _Sizing:
    """num_blocks and the planned length of the chosen layout; raises
    NotEnoughMemoryError when one request of max_model_len (plus the null block and the
    reserved sink blocks) does not fit."""
    ctx = opts.ctx
    stage_bpb = [stage_bytes_per_block(groups, set(s)) for s in stage_layers] \
        if len(stage_layers) > 1 else [bytes_per_block_of(groups)]
    budgets = opts.budgets
    if budgets is not None and len(budgets) == 1:
        budgets = budgets * len(stage_layers)
    num_blocks: int | None = None
    per_stage: list[int] | None = None
    limiting = 0
    if opts.override is not None:
        num_blocks = opts.override
    elif budgets is not None:
        per_stage = [b // bpb if bpb else 0 for b, bpb in zip(budgets, stage_bpb)]
        live = [i for i, bpb in enumerate(stage_bpb) if bpb] or [0]
        limiting = min(live, key=per_stage.__getitem__)
        num_blocks = per_stage[limiting]
    plan_len = opts.plan_len
    reserved = reserved_blocks(groups)
    blocks_req = blocks_per_request(groups, ctx, plan_len)
    estimated = None
    if num_blocks is not None:
        usable = num_blocks - 1 - reserved
        bpb = stage_bpb[limiting]
        if opts.max_model_len == -1:
            fit_len = longest_len(groups, ctx, usable, opts.limit)
            if fit_len <= 0:
                need = blocks_per_request(groups, ctx, 1) + 1 + reserved
                raise NotEnoughMemoryError(
                    f"the KV-cache budget holds {num_blocks} blocks of {bpb} B, not enough "
                    f"for the null block{_reserved_text(reserved)} plus one block per "
                    f"group ({len(groups)} groups); the smallest budget that plans is "
                    f"{need * bpb} B", min_kv_cache_memory_bytes=need * bpb,
                    estimated_max_model_len=0)
            plan_len = fit_len
            ctx = dataclasses.replace(ctx, max_model_len=plan_len)
            blocks_req = blocks_per_request(groups, ctx, plan_len)
        elif blocks_req > usable:
            _raise_not_enough(groups, opts, ctx, num_blocks, blocks_req, reserved, bpb,
                              budgets[limiting] if budgets else None,
                              limiting if len(stage_layers) > 1 else None)
        estimated = plan_len
    return _Sizing(num_blocks, per_stage, stage_bpb, plan_len, ctx, blocks_req, reserved,
                   estimated)


def _reserved_text(reserved: int) -> str:
    return f" and {reserved} reserved sink block(s)" if reserved else ""


def _raise_not_enough(groups: tuple[KVCacheGroupSpec, ...], opts: _Options,
                      ctx: PlanContext, num_blocks: int, blocks_req: int, reserved: int,
                      bpb: int, budget: int | None, stage: int | None) -> None:
    plan_len = opts.plan_len
    usable = num_blocks - 1 - reserved
    min_budget = (blocks_req + 1 + reserved) * bpb
    fits = longest_len(groups, ctx, usable, plan_len)
    extra = _reserved_text(reserved)
    if opts.override is not None:
        raise NotEnoughMemoryError(
            f"one request of max_model_len {plan_len} needs {blocks_req} blocks plus the "
            f"null block{extra}, more than num_gpu_blocks_override {opts.override} gives; "
            f"at least {blocks_req + 1 + reserved} blocks are needed, and the longest "
            f"max_model_len {num_blocks} blocks allow is {fits}",
            min_kv_cache_memory_bytes=min_budget, estimated_max_model_len=fits,
            min_num_blocks=blocks_req + 1 + reserved, max_model_len=plan_len)
    budget = budget if budget is not None else num_blocks * bpb
    needed = blocks_req * bpb
    where = f" (pipeline stage {stage})" if stage is not None else ""
    raise NotEnoughMemoryError(
        f"one request of max_model_len {plan_len} needs {needed} B "
        f"({format_bytes(needed)}) of KV cache{where} ({blocks_req} blocks of {bpb} B) "
        f"plus the null block{extra}, more than the budget of {budget} B "
        f"({format_bytes(budget)}) holds; the smallest budget that plans is {min_budget} B "
        f"({format_bytes(min_budget)}), and the longest max_model_len this budget allows "
        f"is {fits}",
        min_kv_cache_memory_bytes=min_budget, estimated_max_model_len=fits,
        kv_cache_memory_bytes=budget, max_model_len=plan_len)


# ---- step 6: report --------------------------------------------------------------

def _per_request_bytes(groups: Sequence[KVCacheGroupSpec], ctx: PlanContext,
                       plan_len: int) -> tuple[float, int, int]:
    """(K/V bytes per token, cross-attention bytes, real state bytes) of one request."""
    counts: dict[int, list[Any]] = {}
    for g in groups:
        specs = g.layer_specs if g.layer_specs is not None else (g.spec,) * len(g.layer_names)
        for ls in specs:
            entry = counts.get(id(ls))
            if entry is None:
                counts[id(ls)] = [ls, 1]
            else:
                entry[1] += 1
    bytes_per_token = 0.0
    cross = state = 0
    for ls, n in counts.values():
        if ls.kind == "cross_attention" or (ls.scales_with_block_size
                                            and ls.bytes_per_token == 0):
            cross += n * spec_blocks_per_req(ls, ctx, plan_len, "max_memory_usage_bytes")
        elif ls.scales_with_block_size:
            bytes_per_token += n * ls.bytes_per_token
        else:  # real bytes (padding is reported on its own)
            state += n * spec_blocks_per_req(ls, ctx, plan_len) * ls.real_page_size_bytes
    return bytes_per_token, cross, state


def _report(grouping: GroupingResult, sz: _Sizing, opts: _Options,
            stage_layers: list[list[str]], block_outermost: bool) -> KVCacheConfig:
    groups = grouping.groups
    ctx, plan_len, num_blocks, blocks_req = sz.ctx, sz.plan_len, sz.num_blocks, sz.blocks_req
    bytes_per_block = bytes_per_block_of(groups)
    bytes_per_token, cross, state = _per_request_bytes(groups, ctx, plan_len)
    longest = max_conc = capacity = batched = None
    if num_blocks is not None:
        longest = longest_len(groups, ctx, num_blocks - 1 - sz.reserved, opts.limit)
        if blocks_req:
            max_conc = num_blocks / blocks_req
            capacity = int(max_conc * plan_len)
            # vLLM's admission caps count a whole step in flight for every request; a
            # tighter figure: one request prefilling a whole chunk, the others decoding.
            decode_ctx = dataclasses.replace(
                ctx, max_num_batched_tokens=1 + ctx.num_speculative_tokens)
            decode = blocks_per_request(groups, decode_ctx, plan_len)
            if decode and num_blocks - sz.reserved >= blocks_req:
                batched = 1 + (num_blocks - sz.reserved - blocks_req) / decode
    specs = uniq(s for g in groups
                 for s in (g.layer_specs if g.layer_specs is not None else (g.spec,)))
    attn_dtypes = {getattr(s, "kv_cache_dtype", None) for s in specs} - {None}
    elem_dtypes = {getattr(s, "dtype", None) for s in specs} - {None}
    mixed = len(attn_dtypes) > 1 or len(elem_dtypes) > 1
    has_state = any(not s.scales_with_block_size for s in specs)
    budgets = opts.budgets
    notes = list(grouping.notes) + list(opts.notes)
    if sz.reserved:
        notes.append(f"{sz.reserved} block(s) reserved once for attention sinks "
                     f"(subtracted from the blocks a request can use)")
    runner = grouping.runner_up
    stats = PlanStats(
        max_concurrency=max_conc, max_concurrency_batched=batched,
        kv_cache_capacity_tokens=capacity, estimated_max_model_len=sz.estimated,
        longest_max_model_len=longest, bytes_per_token=bytes_per_token,
        cross_attention_bytes_per_request=cross, state_bytes_per_request=state,
        padding_bytes_per_block=max((sum(g.spec_of(n).padding_bytes for n in g.layer_names)
                                     for g in groups), default=0),
        padding_bytes_per_request=padding_per_request(groups, ctx, plan_len),
        blocks_per_request=blocks_req,
        kv_cache_memory_bytes_for_one_request=(blocks_req + 1 + sz.reserved)
        * max(sz.stage_bpb, default=0),
        num_reserved_blocks=sz.reserved,
        prefix_hit_alignment_tokens=prefix_hit_alignment(groups)
        if ctx.enable_prefix_caching else None,
        kv_cache_memory_bytes=budgets[0] if budgets and len(budgets) == 1 else budgets,
        kv_cache_memory_bytes_used=(num_blocks or 0) * max(sz.stage_bpb, default=0),
        num_blocks_per_stage=sz.per_stage_blocks if len(stage_layers) > 1 else None,
        bytes_per_block_per_stage=sz.stage_bpb if len(stage_layers) > 1 else None,
        stages=stage_layers if len(stage_layers) > 1 else None,
        has_mamba_layers=any(s.kind == "mamba" for s in specs),
        has_mixed_precision_kv_cache=mixed, needs_kv_cache_zeroing=has_state or mixed,
        skipped_layers=list(grouping.skipped_layers), strategy=grouping.strategy,
        runner_up_strategy=runner[0] if runner else None,
        runner_up_score=runner[1].to_dict() if runner else None,
        candidates_scored=grouping.candidates_scored, notes=notes,
        max_num_batched_tokens=ctx.max_num_batched_tokens,
        max_num_encoder_input_tokens=ctx.max_num_encoder_input_tokens,
        enable_prefix_caching=ctx.enable_prefix_caching,
        tensor_parallel_size=ctx.tensor_parallel_size,
        pipeline_parallel_size=max(ctx.pipeline_parallel_size, len(stage_layers)),
        plan_context=ctx, max_model_len_limit=opts.limit,
        max_model_len_limit_source=opts.limit_source,
        serving=grouping.serving, vllm_layout=grouping.vllm_layout,
        gain_over_vllm=_gain(grouping), pareto_front=list(grouping.pareto_front),
        workload=grouping.workload.to_dict() if grouping.workload is not None else None)
    tensors = _tensors(groups, num_blocks or 0, block_outermost, bytes_per_block)
    layout = (opts.kv_cache_layout or "LBNHC").upper()
    return KVCacheConfig(num_blocks=num_blocks, kv_cache_tensors=tuple(tensors),
                         kv_cache_groups=groups, max_model_len=plan_len,
                         bytes_per_block=bytes_per_block, kv_cache_layout=layout,
                         stats=stats)


def _gain(grouping: GroupingResult) -> float | None:
    """vLLM's layout's time over the winner's, minus 1 (None: not judged, or vLLM's
    layout does not fit)."""
    won, base = grouping.serving, grouping.vllm_layout
    if won is None or base is None or base.figures.time_s == float("inf") or \
            not won.time_s:
        return None
    return base.figures.time_s / won.time_s - 1


def _empty_plan(grouping: GroupingResult, opts: _Options) -> KVCacheConfig:
    """A model whose layers need no KV cache: no groups, only the null block, nothing
    per token; concurrency is not bounded by the KV cache (None)."""
    ctx = opts.ctx
    stats = PlanStats(
        estimated_max_model_len=opts.plan_len, strategy="empty",
        skipped_layers=list(grouping.skipped_layers),
        notes=[n for n in grouping.notes if n != "no layer needs a KV cache"]
        + ["no layer keeps a KV cache: requests need no blocks, concurrency is not "
           "bounded by the KV cache"
           + (f"; max_model_len auto: nothing bounds the length, so it is the search cap "
              f"{opts.limit:,} (give max_model_len N or max_model_len_limit)"
              if opts.max_model_len == -1 and opts.limit_source == "search" else "")]
        + list(opts.notes),
        kv_cache_memory_bytes=opts.budgets[0] if opts.budgets and len(opts.budgets) == 1
        else opts.budgets,
        max_num_batched_tokens=ctx.max_num_batched_tokens,
        max_num_encoder_input_tokens=ctx.max_num_encoder_input_tokens,
        enable_prefix_caching=ctx.enable_prefix_caching,
        tensor_parallel_size=ctx.tensor_parallel_size,
        pipeline_parallel_size=ctx.pipeline_parallel_size, plan_context=ctx,
        max_model_len_limit=opts.limit, max_model_len_limit_source=opts.limit_source)
    return KVCacheConfig(num_blocks=1, kv_cache_tensors=(), kv_cache_groups=(),
                         max_model_len=opts.plan_len, bytes_per_block=0,
                         kv_cache_layout=(opts.kv_cache_layout or "LBNHC").upper(),
                         stats=stats)


def plan(
    layer_specs: Mapping[str, KVCacheSpec],
    *,
    max_model_len: int,
    kv_cache_memory_bytes: int | Sequence[int] | None = None,
    max_num_batched_tokens: int = 8192,
    max_num_encoder_input_tokens: int = 0,
    enable_prefix_caching: bool = True,
    disable_hybrid_kv_cache_manager: bool = False,
    mamba_cache_mode: str = "none",
    num_gpu_blocks_override: int | None = None,
    tensor_parallel_size: int = 1,
    pipeline_parallel_size: int = 1,
    decode_context_parallel_size: int = 1,
    num_speculative_tokens: int = 0,
    kernel_block_size: int | None = None,
    kv_cache_layout: str | None = None,
    stages: Sequence[Sequence[str]] | None = None,
    max_model_len_limit: int | None = None,
    workload: Workload | None = None,
    judge: Judge | None = None,
) -> KVCacheConfig:
    """Plan a KV cache for ``layer_specs`` (``{layer name: spec}`` in layer order).

    A pipeline of named steps: validate the options -> normalize the specs (plan
    context, sizes checked, windows >= max_model_len as full attention, block-size
    multiples) -> generate the candidate layouts -> score them -> size the winner ->
    report (:mod:`kvcore.grouping` has the generators and the scorer).

    Parameters
    ----------
    max_model_len:
        Tokens per request; -1 = the longest that fits the budget (up to
        ``max_model_len_limit``, default 2**24); the layout with the longest such length
        wins.
    kv_cache_memory_bytes:
        The KV-cache budget in bytes per rank; a list gives one budget per pipeline
        stage (then ``stages`` lists each stage's layers, or layers are split evenly).
        None: plan without a budget (per-token, per-block and per-request figures only;
        ``num_blocks`` and the capacity fields are None; the layout with the fewest
        bytes per request wins).
    num_gpu_blocks_override:
        Use this many blocks instead of the budget's.
    workload:
        The :class:`kvcore.serving.Workload` the candidate layouts are judged on
        (default :func:`kvcore.serving.default_workload` of ``max_model_len`` and
        ``max_num_batched_tokens``).
    judge:
        ``judge(candidates, workload) -> seconds`` timing the best few candidates
        (:data:`kvcore.serving.Judge`; default the analytic proxy
        :func:`kvcore.serving.analytic_judge`; the simulator's judge lives in
        ``kvcore.sim``, which planning never imports).  vLLM's own layout is always
        judged; a layout not faster than it does not win (``stats.vllm_layout``,
        ``stats.gain_over_vllm``, ``stats.pareto_front``).
    Other parameters: see :class:`kvcore.specs.PlanContext` and
    :func:`kvcore.grouping.group_layers`.

    Returns
    -------
    KVCacheConfig
        ``stats`` is a :class:`~kvcore.kv_cache_config.PlanStats` (max_concurrency,
        kv_cache_capacity_tokens, estimated_max_model_len, bytes_per_token,
        blocks_per_request, the chosen strategy and the runner-up, ...).  A model whose
        layers keep no KV cache plans with no groups, ``num_blocks`` 1 (the null block)
        and ``max_concurrency`` None.

    Raises
    ------
    ConfigError
        A malformed option (names the option and what is valid), or a spec whose sizes
        are not positive ints (names the layer, kind and plugin).
    NotEnoughMemoryError
        The budget cannot hold one request of ``max_model_len`` plus the null block and
        the reserved sink blocks; carries ``min_kv_cache_memory_bytes`` and
        ``estimated_max_model_len``.
    """
    layer_specs = check_layer_specs(layer_specs)
    if not layer_specs:
        raise ConfigError("no layers to plan: the model has no KV-cache layers",
                          field="layers")
    opts = _validate_options(layer_specs, {
        "max_model_len": max_model_len, "kv_cache_memory_bytes": kv_cache_memory_bytes,
        "max_num_batched_tokens": max_num_batched_tokens,
        "max_num_encoder_input_tokens": max_num_encoder_input_tokens,
        "enable_prefix_caching": enable_prefix_caching,
        "disable_hybrid_kv_cache_manager": disable_hybrid_kv_cache_manager,
        "mamba_cache_mode": mamba_cache_mode,
        "num_gpu_blocks_override": num_gpu_blocks_override,
        "tensor_parallel_size": tensor_parallel_size,
        "pipeline_parallel_size": pipeline_parallel_size,
        "decode_context_parallel_size": decode_context_parallel_size,
        "num_speculative_tokens": num_speculative_tokens,
        "kernel_block_size": kernel_block_size, "kv_cache_layout": kv_cache_layout,
        "stages": stages, "max_model_len_limit": max_model_len_limit})
    specs = _with_plan_context(layer_specs, opts.ctx)
    stage_layers = _stage_layers(opts, list(specs))
    budgets = opts.budgets
    if budgets is not None and len(budgets) == 1:
        budgets = budgets * len(stage_layers)
    env = SearchEnv(
        ctx=opts.ctx, kernel_block_size=opts.kernel_block_size,
        block_outermost=is_block_outermost(opts.kv_cache_layout),
        budgets=tuple(budgets) if budgets is not None else None,
        stage_layers=tuple(frozenset(s) for s in stage_layers),
        num_blocks_override=opts.override, max_model_len=opts.max_model_len,
        limit=opts.limit, enable_prefix_caching=opts.ctx.enable_prefix_caching,
        workload=_check_workload(workload), judge=_check_judge(judge))
    if env.judge is not None:
        env = dataclasses.replace(env, judge=_with_configs(env.judge, opts, env,
                                                           stage_layers))
    grouping = group_layers(specs, env=env, kv_cache_layout=opts.kv_cache_layout,
                            disable_hybrid_kv_cache_manager=opts.disable_hybrid)
    if not grouping.groups:
        return _empty_plan(grouping, opts)
    sizing = _size(grouping.groups, opts, env, stage_layers)
    return _report(grouping, sizing, opts, stage_layers, env.block_outermost)


def _with_configs(judge: Judge, opts: _Options, env: SearchEnv,
                  stage_layers: list[list[str]]) -> Judge:
    """``judge`` with each candidate's whole plan at hand: ``candidate.extra["config"]()``
    builds its :class:`KVCacheConfig` (sized like the winner would be; raises
    NotEnoughMemoryError when one request does not fit), so a judge can run it."""
    def build(groups: tuple[KVCacheGroupSpec, ...]) -> KVCacheConfig:
        sizing = _size(groups, opts, env, stage_layers)
        return _report(GroupingResult(groups, "candidate"), sizing, opts, stage_layers,
                       env.block_outermost)

    def wrapped(cands: Sequence[Any], workload: Workload) -> Sequence[float]:
        for c in cands:
            c.extra["config"] = functools.partial(build, c.groups())
        times = judge(cands, workload)
        # a judge may say more once it has run (plan_serving.sim_judge: a cut workload)
        wrapped.judged_by = getattr(judge, "judged_by",  # type: ignore[attr-defined]
                                    wrapped.judged_by)  # type: ignore[attr-defined]
        return times

    wrapped.judged_by = getattr(judge, "judged_by",  # type: ignore[attr-defined]
                                getattr(judge, "__name__", "judge"))
    return wrapped


def _check_workload(workload: Any) -> Workload | None:
    if workload is not None and not isinstance(workload, Workload):
        raise ConfigError(f"workload must be a kvcore.serving.Workload (see "
                          f"kvcore.serving.workload_from_requests), got "
                          f"{type(workload).__name__}", field="workload")
    return workload  # type: ignore[no-any-return]


def _check_judge(judge: Any) -> Judge | None:
    if judge is not None and not callable(judge):
        raise ConfigError(f"judge must be a callable judge(candidates, workload) -> "
                          f"seconds per candidate, got {type(judge).__name__}",
                          field="judge")
    return judge  # type: ignore[no-any-return]


def _with_plan_context(layer_specs: dict[str, KVCacheSpec], ctx: PlanContext
                       ) -> dict[str, KVCacheSpec]:
    """Each spec given the plan's context (once per distinct spec)."""
    by_id: dict[int, KVCacheSpec] = {}
    cache: dict[KVCacheSpec, KVCacheSpec] = {}
    out = {}
    for name, spec in layer_specs.items():
        new = by_id.get(id(spec))
        if new is None:
            new = cache.get(spec)
            if new is None:
                new = cache[spec] = spec.with_plan_context(ctx)
            by_id[id(spec)] = new
        out[name] = new
    return out


def plan_from_specs_file(data: Mapping[str, Any] | str | os.PathLike[str], *,
                         workload: Workload | None = None,
                         judge: Judge | None = None,
                         where: str = "specs file") -> KVCacheConfig:
    """Plan from a specs file (docs/DESIGN.md section 5): ``{"options": {...}, "layers":
    {name: spec dict}}``, given parsed or as the file's path (str / os.PathLike: read as
    ``kvcore plan --specs`` reads it, the path then prefixing errors); ``workload`` /
    ``judge`` as in :func:`plan`; ``where`` (the file's name) prefixes the unknown-key
    errors.  Raises ConfigError naming an unknown
    key or option or a bad layer."""
    from kvcore.specs import KVCacheSpec
    from kvcore.units import shorten
    from kvcore.userfiles import check_keys

    if isinstance(data, (str, os.PathLike)) and not isinstance(data, Mapping):
        # a path, as the name suggests: read as ``kvcore plan --specs FILE`` does
        from kvcore.models.config import read_json_file

        path = os.fspath(data)
        if not isinstance(path, str) or not path:
            raise ConfigError(f"plan_from_specs_file: data = {shorten(data)} is not a path "
                              f"(a non-empty str or os.PathLike of str) nor the parsed JSON "
                              f"object", field="data", value=shorten(data))
        loaded = read_json_file(path, "specs")
        if not isinstance(loaded, Mapping):
            raise ConfigError(f"{path}: a specs file holds a JSON object with 'options' "
                              f"and 'layers', got a JSON {type(loaded).__name__}",
                              field="specs")
        return plan_from_specs_file(loaded, workload=workload, judge=judge,
                                    where=path if where == "specs file" else where)
    if not isinstance(data, Mapping):
        raise ConfigError(f"plan_from_specs_file takes the specs file's path or its parsed "
                          f"JSON object ({{'options': ..., 'layers': ...}}), got "
                          f"{type(data).__name__} {shorten(data)}", field="data",
                          value=shorten(data))
    check_keys(data, ("options", "layers"), where)
    options = data.get("options", {})
    layers = data.get("layers")
    if not isinstance(options, Mapping):
        raise ConfigError("'options' must be an object", field="options")
    if not isinstance(layers, Mapping) or not layers:
        raise ConfigError("'layers' must be a non-empty object {layer name: spec}",
                          field="layers")
    check_keys(options, SPECS_FILE_OPTIONS, f"{where}: options")
    specs: dict[str, KVCacheSpec] = {}
    for name, d in layers.items():
        try:
            specs[name] = KVCacheSpec.from_dict(d)
        except ConfigError:
            raise
        except Exception as exc:
            if hasattr(exc, "message"):
                exc.message = f"layer {name!r}: {exc.message}"  # type: ignore[attr-defined]
                exc.args = (exc.message,)  # type: ignore[attr-defined]
            raise
    opts = dict(options)
    if "max_model_len" not in opts:
        raise ConfigError("options.max_model_len is required (a positive int, or -1 for "
                          "the longest that fits)", field="max_model_len")
    return plan(specs, workload=workload, judge=judge, **opts)


def plan_to_dict(config: KVCacheConfig) -> dict[str, Any]:
    """The JSON form of a plan (docs/DESIGN.md section 5).

    Raises ConfigError when ``config`` is not a :class:`KVCacheConfig`."""
    if not isinstance(config, KVCacheConfig):
        from kvcore.units import shorten

        raise ConfigError(f"plan_to_dict takes a KVCacheConfig (a plan), got "
                          f"{shorten(config)}", field="config", value=shorten(config))
    s = config.stats
    groups = []
    for g in config.kv_cache_groups:
        groups.append({
            "type": g.kind,
            "layer_names": list(g.layer_names),
            "num_layers": len(g.layer_names),
            "block_size": g.block_size,
            "page_size_bytes": g.page_size_bytes,
            "padding_bytes": sum(g.spec_of(n).padding_bytes for n in g.layer_names),
            "spec": g.spec.to_dict(),
        })
        if g.page_sizes_differ:  # page_size_bytes is then the group's bytes per block id
            groups[-1]["layer_page_size_bytes"] = g.layer_page_size_bytes
    out: dict[str, Any] = {
        "num_blocks": config.num_blocks,
        "groups": groups,
        "bytes_per_block": config.bytes_per_block,
        "kv_cache_tensors": [t.to_dict() for t in config.kv_cache_tensors],
        "kv_cache_capacity_tokens": s.get("kv_cache_capacity_tokens"),
        "max_concurrency": s.get("max_concurrency"),
        "max_concurrency_batched": s.get("max_concurrency_batched"),
        "max_model_len": config.max_model_len,
        "estimated_max_model_len": s.get("estimated_max_model_len"),
        "longest_max_model_len": s.get("longest_max_model_len"),
        "bytes_per_token": _whole(s.get("bytes_per_token")),
        "cross_attention_bytes_per_request": s.get("cross_attention_bytes_per_request"),
        "state_bytes_per_request": s.get("state_bytes_per_request"),
        "padding_bytes_per_block": s.get("padding_bytes_per_block"),
        "padding_bytes_per_request": s.get("padding_bytes_per_request"),
        "blocks_per_request": s.get("blocks_per_request"),
        "kv_cache_memory_bytes_for_one_request":
            s.get("kv_cache_memory_bytes_for_one_request"),
        "kv_cache_memory_bytes": s.get("kv_cache_memory_bytes"),
        "kv_cache_memory_bytes_used": s.get("kv_cache_memory_bytes_used"),
        "kv_cache_layout": config.kv_cache_layout,
        "has_mamba_layers": s.get("has_mamba_layers"),
        "has_mixed_precision_kv_cache": s.get("has_mixed_precision_kv_cache"),
        "needs_kv_cache_zeroing": s.get("needs_kv_cache_zeroing"),
        "strategy": s.get("strategy"),
        "runner_up_strategy": s.get("runner_up_strategy"),
        "runner_up_score": s.get("runner_up_score"),
        "prefix_hit_alignment_tokens": s.get("prefix_hit_alignment_tokens"),
        "num_reserved_blocks": s.get("num_reserved_blocks"),
        "notes": s.get("notes"),
    }
    bpr, nb = out["blocks_per_request"], out["num_blocks"]
    # requests of max_model_len held at once: the blocks left after the null block and
    # the reserved ones, over the blocks one needs (vLLM's max_concurrency counts the
    # null block, so floor(max_concurrency) can be one request more than fit)
    out["max_num_full_length_requests"] = (
        max(0, nb - 1 - (out["num_reserved_blocks"] or 0)) // bpr
        if isinstance(nb, int) and isinstance(bpr, int) and bpr > 0 else None)
    bpt = out["bytes_per_token"]
    if isinstance(bpt, float) and bpt.is_integer():
        out["bytes_per_token"] = int(bpt)
    for key in ("num_blocks_per_stage", "bytes_per_block_per_stage", "stages",
                "skipped_layers"):
        if s.get(key):
            out[key] = s[key]
    return _json_value(out)
