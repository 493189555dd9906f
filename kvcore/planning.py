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
import operator
from collections.abc import Mapping, Sequence
from typing import Any

from kvcore.errors import ConfigError, NotEnoughMemoryError
from kvcore.grouping import (
    GroupingResult,
    blocks_per_request,
    check_layer_specs,
    group_layers,
    is_block_outermost,
)
from kvcore.kv_cache_config import KVCacheConfig, KVCacheGroupSpec, KVCacheTensor, PlanStats
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


def format_bytes(n: float) -> str:
    """``n`` bytes as a short human string (binary units)."""
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


def _stage_bytes_per_block(groups: Sequence[KVCacheGroupSpec], layers: set[str]) -> int:
    best = 0
    for g in groups:
        specs = g.layer_specs if g.layer_specs is not None else (g.spec,) * len(g.layer_names)
        best = max(best, sum(s.page_size_bytes for n, s in zip(g.layer_names, specs)
                             if n in layers))
    return best


def _tensors(groups: Sequence[KVCacheGroupSpec], num_blocks: int, block_outermost: bool,
             bytes_per_block: int) -> list[KVCacheTensor]:
    if block_outermost:
        out = []
        for g in groups:
            offset = 0
            for name in g.layer_names:
                page = g.spec_of(name).page_size_bytes
                out.append(KVCacheTensor(num_blocks * page, (name,), offset, bytes_per_block))
                offset += page
        return out
    if len(groups) == 1 and groups[0].layer_specs is not None:
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


def _longest_len(groups: Sequence[KVCacheGroupSpec], ctx: PlanContext, usable_blocks: int,
                 limit: int) -> int:
    """Largest L in [0, limit] with blocks_per_request(L) <= usable_blocks."""
    if usable_blocks <= 0:
        return 0
    lo, hi = 0, limit
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if blocks_per_request(groups, ctx, mid) <= usable_blocks:
            lo = mid
        else:
            hi = mid - 1
    return lo


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
) -> KVCacheConfig:
    """Plan a KV cache for ``layer_specs`` (``{layer name: spec}`` in layer order).

    Parameters
    ----------
    max_model_len:
        Tokens per request; -1 = the longest that fits the budget (up to
        ``max_model_len_limit``, default 2**24).
    kv_cache_memory_bytes:
        The KV-cache budget in bytes per rank; a list gives one budget per pipeline
        stage (then ``stages`` lists each stage's layers, or layers are split evenly).
        None: plan without a budget (per-token, per-block and per-request figures only;
        ``num_blocks`` and the capacity fields are None).
    num_gpu_blocks_override:
        Use this many blocks instead of the budget's.
    Other parameters: see :class:`kvcore.specs.PlanContext` and
    :func:`kvcore.grouping.group_layers`.

    Returns
    -------
    KVCacheConfig
        ``stats`` holds max_concurrency, kv_cache_capacity_tokens,
        estimated_max_model_len, bytes_per_token, blocks_per_request, ... (see
        :func:`plan_to_dict`).

    Raises
    ------
    ConfigError
        A malformed option (names the option and what is valid).
    NotEnoughMemoryError
        The budget cannot hold one request of ``max_model_len``; carries
        ``min_kv_cache_memory_bytes`` and ``estimated_max_model_len``.
    """
    layer_specs = check_layer_specs(layer_specs)
    try:
        max_model_len = _check_int("max_model_len", max_model_len, -1)
    except ConfigError:
        max_model_len = 0
    if max_model_len == 0:
        raise ConfigError("max_model_len must be a positive int or -1 (the longest that "
                          "fits)", field="max_model_len")
    limit = _check_int("max_model_len_limit", max_model_len_limit or (1 << 24), 1)
    notes: list[str] = []
    limit_source = "model" if max_model_len_limit else "search"
    if max_model_len > limit:
        if max_model_len_limit:
            notes.append(f"max_model_len {max_model_len} exceeds the model's "
                         f"max_position_embeddings {limit}")
        limit = max_model_len
        limit_source = "requested"
    enable_prefix_caching = _check_bool("enable_prefix_caching", enable_prefix_caching)
    disable_hybrid_kv_cache_manager = _check_bool("disable_hybrid_kv_cache_manager",
                                                  disable_hybrid_kv_cache_manager)
    for name, value in (("max_num_batched_tokens", max_num_batched_tokens),
                        ("tensor_parallel_size", tensor_parallel_size),
                        ("pipeline_parallel_size", pipeline_parallel_size),
                        ("decode_context_parallel_size", decode_context_parallel_size)):
        _check_int(name, value, 1)
    for name, value in (("max_num_encoder_input_tokens", max_num_encoder_input_tokens),
                        ("num_speculative_tokens", num_speculative_tokens)):
        _check_int(name, value, 0)
    if kv_cache_layout is not None and not isinstance(kv_cache_layout, str):
        raise ConfigError(f"kv_cache_layout must be a string such as LBNHC or BLHNC, got "
                          f"{kv_cache_layout!r}", field="kv_cache_layout")
    if pipeline_parallel_size > len(layer_specs):
        raise ConfigError(f"pipeline_parallel_size {pipeline_parallel_size} exceeds the "
                          f"{len(layer_specs)} KV-cache layers; each stage needs at least "
                          f"one layer", field="pipeline_parallel_size",
                          value=pipeline_parallel_size)
    if max_num_encoder_input_tokens == 0 and any(
            s.kind == "cross_attention" for s in layer_specs.values()):
        raise ConfigError("cross_attention layers are sized by the encoder input of one "
                          "request: set max_num_encoder_input_tokens (e.g. 1500 audio "
                          "frames for Whisper)", field="max_num_encoder_input_tokens")
    budgets: list[int] | None
    if kv_cache_memory_bytes is None:
        budgets = None
    elif isinstance(kv_cache_memory_bytes, (list, tuple)):
        budgets = [_check_int("kv_cache_memory_bytes", b, 0) for b in kv_cache_memory_bytes]
        if not budgets:
            raise ConfigError("kv_cache_memory_bytes is an empty list",
                              field="kv_cache_memory_bytes")
    else:
        budgets = [_check_int("kv_cache_memory_bytes", kv_cache_memory_bytes, 0)]
    if num_gpu_blocks_override is not None:
        _check_int("num_gpu_blocks_override", num_gpu_blocks_override, 1)
    if max_model_len == -1 and budgets is None and num_gpu_blocks_override is None:
        raise ConfigError("max_model_len -1 (the longest that fits) needs a memory budget "
                          "(kv_cache_memory_bytes)", field="max_model_len")
    try:
        ctx = PlanContext(
            max_model_len=max_model_len if max_model_len > 0 else limit,
            max_num_batched_tokens=max_num_batched_tokens,
            max_num_encoder_input_tokens=max_num_encoder_input_tokens,
            tensor_parallel_size=tensor_parallel_size,
            pipeline_parallel_size=pipeline_parallel_size,
            decode_context_parallel_size=decode_context_parallel_size,
            mamba_cache_mode=mamba_cache_mode,
            num_speculative_tokens=num_speculative_tokens,
            enable_prefix_caching=enable_prefix_caching,
        )
    except Exception as exc:  # SpecError from validation
        raise ConfigError(str(exc), **getattr(exc, "extra", {})) from exc

    layer_specs = {name: spec.with_plan_context(ctx) for name, spec in layer_specs.items()}
    grouping: GroupingResult = group_layers(
        layer_specs, ctx=ctx, kernel_block_size=kernel_block_size,
        disable_hybrid_kv_cache_manager=disable_hybrid_kv_cache_manager,
        kv_cache_layout=kv_cache_layout,
        kv_cache_memory_bytes=budgets[0] if budgets else None)
    groups = grouping.groups
    if not groups:
        raise ConfigError("no layer needs a KV cache (every layer is encoder-only "
                          "attention): there is nothing to plan", field="layers")
    block_outermost = is_block_outermost(kv_cache_layout)
    layout = (kv_cache_layout or "LBNHC").upper()
    bytes_per_block = grouping.bytes_per_block
    all_layers = [n for g in groups for n in g.layer_names]

    # ---- pipeline stages ----
    stage_layers: list[list[str]]
    if stages is not None:
        stage_layers = _check_stages(stages, list(layer_specs))
        if pipeline_parallel_size > 1 and len(stage_layers) != pipeline_parallel_size:
            raise ConfigError(f"stages lists {len(stage_layers)} stages but "
                              f"pipeline_parallel_size is {pipeline_parallel_size}",
                              field="stages")
    elif budgets is not None and len(budgets) > 1 and pipeline_parallel_size > 1 and \
            len(budgets) != pipeline_parallel_size:
        raise ConfigError(f"kv_cache_memory_bytes lists {len(budgets)} budgets for "
                          f"pipeline_parallel_size {pipeline_parallel_size}; give one budget "
                          f"or one per stage", field="kv_cache_memory_bytes")
    elif budgets is not None and len(budgets) > 1:
        names = list(layer_specs)
        if len(budgets) > len(names):
            raise ConfigError(f"kv_cache_memory_bytes lists {len(budgets)} stage budgets "
                              f"for {len(names)} layers", field="kv_cache_memory_bytes")
        k = len(budgets)
        stage_layers = [names[i * len(names) // k:(i + 1) * len(names) // k]
                        for i in range(k)]
    elif pipeline_parallel_size > 1:
        names = list(layer_specs)
        k = pipeline_parallel_size
        stage_layers = [names[i * len(names) // k:(i + 1) * len(names) // k]
                        for i in range(k)]
    else:
        stage_layers = [all_layers]
    if budgets is not None and len(budgets) == 1 and len(stage_layers) > 1:
        budgets = budgets * len(stage_layers)
    if budgets is not None and len(budgets) != len(stage_layers):
        raise ConfigError(f"kv_cache_memory_bytes lists {len(budgets)} budgets for "
                          f"{len(stage_layers)} pipeline stages", field="kv_cache_memory_bytes")
    stage_bpb = [_stage_bytes_per_block(groups, set(s)) for s in stage_layers] \
        if len(stage_layers) > 1 else [bytes_per_block]

    # ---- per-request figures ----
    plan_len = max_model_len if max_model_len > 0 else limit
    blocks_req = blocks_per_request(groups, ctx, plan_len) if groups else 0
    bytes_per_token = 0.0
    cross_bytes = 0
    state_bytes = 0
    for g in groups:
        for n in g.layer_names:
            ls = g.spec_of(n)
            if ls.kind == "cross_attention" or (ls.scales_with_block_size
                                                and ls.bytes_per_token == 0):
                cross_bytes += ls.max_memory_usage_bytes(ctx, plan_len)
            elif ls.scales_with_block_size:
                bytes_per_token += ls.bytes_per_token
            else:  # real bytes (padding is reported on its own)
                state_bytes += ls.max_num_blocks_per_req(ctx, plan_len) * \
                    ls.real_page_size_bytes
    padding = max((sum(g.spec_of(n).padding_bytes for n in g.layer_names) for g in groups),
                  default=0)
    # What padding really costs one request: each group's padding times the blocks a
    # request holds in that group (a one-block state padded to a large page costs one
    # block, not one per token block).
    padding_req = 0
    for g in groups:
        specs = g.layer_specs if g.layer_specs is not None else (g.spec,)
        blocks = max(sp.max_num_blocks_per_req(ctx, plan_len) for sp in specs)
        padding_req += blocks * sum(g.spec_of(n).padding_bytes for n in g.layer_names)

    # ---- blocks ----
    num_blocks: int | None = None
    per_stage_blocks: list[int] | None = None
    limiting = 0
    if num_gpu_blocks_override is not None:
        num_blocks = num_gpu_blocks_override
    elif budgets is not None and bytes_per_block > 0:
        per_stage_blocks = [b // max(bpb, 1) if bpb else 1 << 62
                            for b, bpb in zip(budgets, stage_bpb)]
        limiting = min(range(len(per_stage_blocks)), key=per_stage_blocks.__getitem__)
        num_blocks = per_stage_blocks[limiting]

    estimated = None
    if num_blocks is not None:
        usable = num_blocks - 1
        fit_len = _longest_len(groups, ctx, usable, limit if max_model_len == -1
                               else max(plan_len, 1))
        if max_model_len == -1:
            if fit_len <= 0:
                bpb = stage_bpb[limiting]
                raise NotEnoughMemoryError(
                    f"the KV-cache budget holds {num_blocks} blocks of {bpb} B, not enough "
                    f"for the null block plus one block per group ({len(groups)} groups); "
                    f"the smallest budget that plans is {(len(groups) + 1) * bpb} B",
                    min_kv_cache_memory_bytes=(blocks_per_request(groups, ctx, 1) + 1) * bpb,
                    estimated_max_model_len=0)
            plan_len = fit_len
            ctx = dataclasses.replace(ctx, max_model_len=plan_len)
            blocks_req = blocks_per_request(groups, ctx, plan_len)
            estimated = plan_len
        elif blocks_req > usable:
            bpb = stage_bpb[limiting]
            needed = blocks_req * bpb
            min_budget = (blocks_req + 1) * bpb
            budget = budgets[limiting] if budgets else num_blocks * bpb
            fits = _longest_len(groups, ctx, usable, plan_len)
            stage = f" (pipeline stage {limiting})" if len(stage_layers) > 1 else ""
            if num_gpu_blocks_override is not None:
                raise NotEnoughMemoryError(
                    f"one request of max_model_len {plan_len} needs {blocks_req} blocks "
                    f"plus the null block, more than num_gpu_blocks_override "
                    f"{num_gpu_blocks_override} gives; at least {blocks_req + 1} blocks "
                    f"are needed, and the longest max_model_len {num_blocks} blocks allow "
                    f"is {fits}",
                    min_kv_cache_memory_bytes=min_budget, estimated_max_model_len=fits,
                    min_num_blocks=blocks_req + 1, max_model_len=plan_len)
            raise NotEnoughMemoryError(
                f"one request of max_model_len {plan_len} needs {needed} B "
                f"({format_bytes(needed)}) of KV cache{stage} ({blocks_req} blocks of "
                f"{bpb} B) plus the null block, more than the budget of {budget} B "
                f"({format_bytes(budget)}) holds; the smallest budget that plans is "
                f"{min_budget} B ({format_bytes(min_budget)}), and the longest "
                f"max_model_len this budget allows is {fits}",
                min_kv_cache_memory_bytes=min_budget, estimated_max_model_len=fits,
                kv_cache_memory_bytes=budget, max_model_len=plan_len)
        else:
            estimated = plan_len

    longest: int | None = None
    if num_blocks is not None and groups:
        longest = _longest_len(groups, ctx, num_blocks - 1, limit)
    max_conc = capacity = None
    max_conc_batched = None
    if num_blocks is not None and blocks_req:
        max_conc = num_blocks / blocks_req
        capacity = int(max_conc * plan_len)
        # vLLM's admission caps count a full step of max_num_batched_tokens in flight for
        # every request, although the step's tokens are shared by the batch.  A tighter
        # figure: one request prefilling a whole chunk, the others decoding one token.
        decode_ctx = dataclasses.replace(ctx, max_num_batched_tokens=1 + num_speculative_tokens)
        blocks_decode = blocks_per_request(groups, decode_ctx, plan_len)
        if blocks_decode and num_blocks >= blocks_req:
            max_conc_batched = 1 + (num_blocks - blocks_req) / blocks_decode

    attn_dtypes = {getattr(g.spec_of(n), "kv_cache_dtype", None) for g in groups
                   for n in g.layer_names} - {None}
    elem_dtypes = {getattr(g.spec_of(n), "dtype", None) for g in groups
                   for n in g.layer_names} - {None}
    has_mamba = any(g.spec_of(n).kind == "mamba" for g in groups for n in g.layer_names)
    has_state = any(not g.spec_of(n).scales_with_block_size for g in groups
                    for n in g.layer_names)
    mixed = len(attn_dtypes) > 1 or len(elem_dtypes) > 1
    tensors = _tensors(groups, num_blocks or 0, block_outermost, bytes_per_block)
    stats: dict[str, Any] = {
        "max_concurrency": max_conc,
        "max_concurrency_batched": max_conc_batched,
        "kv_cache_capacity_tokens": capacity,
        "estimated_max_model_len": estimated,
        "longest_max_model_len": longest,
        "bytes_per_token": bytes_per_token,
        "cross_attention_bytes_per_request": cross_bytes,
        "state_bytes_per_request": state_bytes,
        "padding_bytes_per_block": padding,
        "padding_bytes_per_request": padding_req,
        "blocks_per_request": blocks_req,
        "kv_cache_memory_bytes_for_one_request": (blocks_req + 1) * max(stage_bpb),
        "kv_cache_memory_bytes": budgets[0] if budgets and len(budgets) == 1 else budgets,
        "num_blocks_per_stage": per_stage_blocks,
        "stages": stage_layers if len(stage_layers) > 1 else None,
        "has_mamba_layers": has_mamba,
        "has_mixed_precision_kv_cache": mixed,
        "needs_kv_cache_zeroing": has_state or mixed,
        "strategy": grouping.strategy,
        "notes": list(grouping.notes) + notes,
        "bytes_per_block_per_stage": stage_bpb if len(stage_layers) > 1 else None,
        "kv_cache_memory_bytes_used": (num_blocks or 0) * max(stage_bpb),
        "skipped_layers": list(grouping.skipped_layers),
        "max_num_batched_tokens": max_num_batched_tokens,
        "max_num_encoder_input_tokens": max_num_encoder_input_tokens,
        "enable_prefix_caching": enable_prefix_caching,
        "tensor_parallel_size": tensor_parallel_size,
        "pipeline_parallel_size": max(pipeline_parallel_size, len(stage_layers)),
        "plan_context": ctx,
        "max_model_len_limit": limit,
        "max_model_len_limit_source": limit_source,
    }
    return KVCacheConfig(num_blocks=num_blocks, kv_cache_tensors=tuple(tensors),
                         kv_cache_groups=groups, max_model_len=plan_len,
                         bytes_per_block=bytes_per_block, kv_cache_layout=layout,
                         stats=PlanStats.from_mapping(stats))


def plan_from_specs_file(data: Mapping[str, Any]) -> KVCacheConfig:
    """Plan from a specs file (docs/DESIGN.md section 5): ``{"options": {...}, "layers":
    {name: spec dict}}``.  Raises ConfigError naming an unknown option or bad layer."""
    from kvcore.specs import KVCacheSpec

    if not isinstance(data, Mapping):
        raise ConfigError("a specs file must hold a JSON object with 'options' and 'layers'")
    options = data.get("options", {})
    layers = data.get("layers")
    if not isinstance(options, Mapping):
        raise ConfigError("'options' must be an object", field="options")
    if not isinstance(layers, Mapping) or not layers:
        raise ConfigError("'layers' must be a non-empty object {layer name: spec}",
                          field="layers")
    unknown = sorted(set(options) - set(SPECS_FILE_OPTIONS))
    if unknown:
        raise ConfigError(f"unknown option(s) {', '.join(unknown)}; valid options: "
                          f"{', '.join(SPECS_FILE_OPTIONS)}", field=unknown[0])
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
    return plan(specs, **opts)


def plan_to_dict(config: KVCacheConfig) -> dict[str, Any]:
    """The JSON form of a plan (docs/DESIGN.md section 5)."""
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
        "bytes_per_token": s.get("bytes_per_token"),
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
        "notes": s.get("notes"),
    }
    bpt = out["bytes_per_token"]
    if isinstance(bpt, float) and bpt.is_integer():
        out["bytes_per_token"] = int(bpt)
    for key in ("num_blocks_per_stage", "bytes_per_block_per_stage", "stages",
                "skipped_layers"):
        if s.get(key):
            out[key] = s[key]
    return out
