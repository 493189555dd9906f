"""Does it fit?  The KV-cache budget of a model on a GPU, and the smallest TP that fits.

The rule (vLLM's ``Worker.determine_available_memory``, ``vllm/v1/worker/gpu_worker.py``):

    KV budget per rank = GPU memory x gpu_memory_utilization
                         - weights per rank - overhead

``GPU memory`` is the device total (:mod:`kvcore.deploy.gpus`, or ``--gpu-memory``); weights per
rank come from :func:`kvcore.deploy.weights.estimate_weights` (per pipeline stage: each
stage gets its own budget); ``overhead`` is what vLLM's start-up profile measures besides
the weights, estimated by :func:`estimate_overhead` unless given:

* **activation peak** of the profile run (``profile_run``: one forward pass of
  ``max_num_batched_tokens`` tokens, then the sampler on ``max_num_seqs`` rows):
  ``T x dtype x (8 x hidden_size + 2 x I / TP)`` for the residual stream, norms, the
  attention projections and the widest MLP activation (``I`` = the dense
  ``intermediate_size``, or ``top_k x moe_intermediate_size`` for a MoE layer's
  gate/up output), plus ``S x vocab_size x 8`` bytes of float32 logits and their
  softmax (``S = min(max_num_seqs, T)``);
* **non-torch memory** (cuBLAS / NCCL workspaces, the allocator's own use): 0.4 GiB,
  and 0.6 GiB more when the model spans several GPUs (NCCL and custom all-reduce buffers);
* **CUDA graphs**: 0.5 GiB, which vLLM (0.21 and later) subtracts from the budget before
  allocating the cache; 0 with ``cuda_graphs=False`` (``--enforce-eager``).

These constants are calibrated on public vLLM start-up logs (``tests/test_budget.py``
lists them with the measured and predicted figures): the predicted KV budget is within 5%
of vLLM's ``Available KV cache memory`` there.  The device total ``nvidia-smi`` reports is
0.3-0.6% above CUDA's own (the driver's reserved memory); that difference is inside the
5%.

"Fits" means: every stage has a positive budget and the plan holds at least one request
of ``max_model_len`` (the planner's :class:`~kvcore.errors.NotEnoughMemoryError`
otherwise).  With an explicit ``kv_cache_memory_bytes`` that budget is used as given and
"fits" checks ``weights + overhead + budget <= GPU memory x utilization`` per stage.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kvcore.deploy.gpus import GPU, get_gpu
from kvcore.deploy.weights import WeightsEstimate, estimate_weights
from kvcore.errors import ConfigError, KVCoreError, NotEnoughMemoryError
from kvcore.models.config import ModelConfig, load_model_config

__all__ = ["DEFAULT_GPU_MEMORY_UTILIZATION", "DEFAULT_MAX_NUM_SEQS", "OverheadEstimate",
           "GPUBudget", "estimate_overhead", "compute_budget", "plan_on_gpu",
           "min_tensor_parallel_size_that_fits", "tensor_parallel_candidates"]

#: vLLM's default ``--gpu-memory-utilization``
DEFAULT_GPU_MEMORY_UTILIZATION = 0.9
#: vLLM's default ``--max-num-seqs`` (the sampler rows of the profile run)
DEFAULT_MAX_NUM_SEQS = 256

_GIB = 1 << 30
NON_TORCH_BYTES = int(0.4 * _GIB)
NON_TORCH_MULTI_GPU_BYTES = int(0.6 * _GIB)
CUDA_GRAPH_BYTES = int(0.5 * _GIB)


@dataclass(frozen=True)
class OverheadEstimate:
    """Per-rank memory besides weights and KV cache, in bytes (see the module docstring).

    Attributes
    ----------
    activation_bytes, non_torch_bytes, cuda_graph_bytes:
        The three parts; ``total_bytes`` is their sum.
    """

    activation_bytes: int
    non_torch_bytes: int
    cuda_graph_bytes: int

    @property
    def total_bytes(self) -> int:
        return self.activation_bytes + self.non_torch_bytes + self.cuda_graph_bytes

    def to_dict(self) -> dict[str, int]:
        return {"activation_bytes": self.activation_bytes,
                "non_torch_bytes": self.non_torch_bytes,
                "cuda_graph_bytes": self.cuda_graph_bytes, "total_bytes": self.total_bytes}


def _positive_int(value: Any, name: str) -> int:
    from kvcore.units import as_int

    number = as_int(value)  # numpy integers too, as a plain int
    if number is None or number < 1:
        raise ConfigError(f"{name} must be a positive int, got {value!r}", field=name,
                          value=repr(value))
    return number


def _config(model: str | Path | ModelConfig) -> ModelConfig:
    return _resolve(model)[0]


def _resolve(model: str | Path | ModelConfig) -> tuple[ModelConfig, str]:
    """A ModelConfig for a path, embedded name or HuggingFace id, and the hub's note."""
    if isinstance(model, ModelConfig):
        return model, ""
    from kvcore.models.hub import resolve_model

    resolved, note = resolve_model(model)
    cfg = resolved if isinstance(resolved, ModelConfig) else load_model_config(resolved)
    return cfg, note


def estimate_overhead(model: str | Path | ModelConfig, *, tensor_parallel_size: int = 1,
                      pipeline_parallel_size: int = 1, max_num_batched_tokens: int = 8192,
                      max_num_seqs: int = DEFAULT_MAX_NUM_SEQS,
                      cuda_graphs: bool = True) -> OverheadEstimate:
    """The default overhead estimate of one rank (formula in the module docstring).

    Raises ConfigError for a non-positive size.
    """
    cfg = _config(model)
    tp = _positive_int(tensor_parallel_size, "tensor_parallel_size")
    pp = _positive_int(pipeline_parallel_size, "pipeline_parallel_size")
    tokens = _positive_int(max_num_batched_tokens, "max_num_batched_tokens")
    seqs = _positive_int(max_num_seqs, "max_num_seqs")
    v = cfg.view
    from kvcore.dtypes import dtype_size

    dt = dtype_size(cfg.dtype) if cfg.dtype else 2
    hidden = v.get_first_int("hidden_size", "d_model", default=0, minimum=0)
    inter = v.get_first_int("intermediate_size", "encoder_ffn_dim", default=0, minimum=0)
    experts_inter = v.get_int("moe_intermediate_size", 0, minimum=0)
    top_k = v.get_first_int("num_experts_per_tok", "experts_per_token", "top_k_experts",
                            default=0, minimum=0, maximum=1 << 16)
    if experts_inter and top_k:
        inter = max(inter if v.get_int("first_k_dense_replace", 0, minimum=0) else 0,
                    top_k * experts_inter)
    elif v.has("d_model") and v.has("n_layer"):  # mamba_ssm: in_proj is the widest
        inter = 2 * cfg.section("ssm_cfg").get_int("expand", 2, maximum=1 << 10) * hidden
    vocab = v.get_int("vocab_size", 0, minimum=0)
    activation = tokens * dt * (8 * hidden + 2 * inter // tp) + min(seqs, tokens) * vocab * 8
    non_torch = NON_TORCH_BYTES + (NON_TORCH_MULTI_GPU_BYTES if tp * pp > 1 else 0)
    return OverheadEstimate(activation_bytes=int(activation), non_torch_bytes=non_torch,
                            cuda_graph_bytes=CUDA_GRAPH_BYTES if cuda_graphs else 0)


@dataclass(frozen=True)
class GPUBudget:
    """The memory budget of one rank on a GPU.

    Attributes
    ----------
    gpu:
        The catalog entry, or None for ``--gpu-memory``.
    gpu_memory_bytes:
        Device memory per GPU, bytes.
    gpu_memory_utilization:
        The fraction of it the engine may use.
    weights:
        The weight estimate (per rank, per stage, whole).
    overhead_bytes:
        Per-rank overhead used (the estimate's total, or the value given).
    overhead:
        The estimate's parts (None when the overhead was given).
    kv_cache_memory_bytes:
        The KV budget per rank: one int, or one per pipeline stage when they differ.
        May be negative when the weights do not fit.
    requested_kv_cache_memory_bytes:
        An explicit budget, when one was given (it then is ``kv_cache_memory_bytes``).
    fits_memory:
        Weights + overhead (+ an explicit budget) fit in GPU memory x utilization on
        every stage, with a positive KV budget.
    """

    gpu: GPU | None
    gpu_memory_bytes: int
    gpu_memory_utilization: float
    weights: WeightsEstimate
    overhead_bytes: int
    overhead: OverheadEstimate | None
    kv_cache_memory_bytes: int | list[int]
    requested_kv_cache_memory_bytes: int | list[int] | None
    fits_memory: bool
    stage_budgets: tuple[int, ...] = field(default=())
    #: the engine profile's per-rank ledger (:mod:`kvcore.deploy.engines`), when the
    #: overhead was derived from it
    ledger: Any = None

    @property
    def usable_bytes(self) -> int:
        """The cap weights + overhead + KV must fit in, bytes: with an engine ledger its
        ``usable memory`` line (CUDA's device total x ``gpu_memory_utilization``, vLLM's
        ``requested_memory``, gpu_worker.py@0.32), else ``gpu_memory_bytes x
        gpu_memory_utilization`` (rounded up, as vLLM does)."""
        if self.ledger is not None:
            return int(self.ledger.usable_bytes)
        return math.ceil(self.gpu_memory_bytes * self.gpu_memory_utilization)

    def shortfall_bytes(self) -> int:
        """How much more memory per GPU the fullest stage needs for a positive budget."""
        return max(0, -min(self.stage_budgets or (0,)))

    def to_dict(self) -> dict[str, Any]:
        return {
            "gpu": {"name": self.gpu.name if self.gpu else None,
                    "memory_bytes": self.gpu_memory_bytes},
            "gpu_memory_utilization": self.gpu_memory_utilization,
            "weights_bytes": self.weights.per_rank_bytes,
            "weights_bytes_total": self.weights.total_bytes,
            "weights_source": self.weights.source,
            "overhead_bytes": self.overhead_bytes,
            "kv_cache_memory_bytes": self.kv_cache_memory_bytes,
        }


def _gpu_memory(gpu: str | GPU | None, gpu_memory_bytes: int | None) -> tuple[GPU | None, int]:
    if gpu is None and gpu_memory_bytes is None:
        raise ConfigError("a GPU budget needs --gpu NAME (see kvcore gpus) or --gpu-memory "
                          "SIZE", field="gpu")
    if gpu is not None and gpu_memory_bytes is not None:
        raise ConfigError("give gpu (a catalog GPU, whose memory is known) or "
                          "gpu_memory_bytes (--gpu-memory: a GPU of that memory), not both",
                          field="gpu_memory_bytes", value=repr(gpu_memory_bytes))
    entry = gpu if isinstance(gpu, GPU) else get_gpu(gpu) if gpu is not None else None
    if gpu_memory_bytes is not None:
        from kvcore.units import as_int

        gpu_memory_bytes = as_int(gpu_memory_bytes) if as_int(gpu_memory_bytes) is not None \
            else gpu_memory_bytes
        if type(gpu_memory_bytes) is not int or gpu_memory_bytes <= 0:
            raise ConfigError(f"gpu_memory must be a positive number of bytes, got "
                              f"{gpu_memory_bytes!r}", field="gpu_memory",
                              value=repr(gpu_memory_bytes))
        return entry, gpu_memory_bytes
    assert entry is not None
    return entry, entry.memory_bytes


#: the least memory per GPU kvcore accepts (1 GiB): below every GPU vLLM runs on (the
#: smallest in the catalog, kvcore gpus, has 22.5 GiB), so a smaller figure is a unit slip
#: (``--gpu-memory 80`` meant 80 GiB, not 80 bytes)
MIN_GPU_MEMORY_BYTES = 1 << 30


def check_gpu_memory(value: int, field: str = "gpu_memory") -> int:
    """Refuse memory per GPU below :data:`MIN_GPU_MEMORY_BYTES`, saying which unit was
    likely meant (``--gpu-memory``; the Python API takes exact bytes and accepts small
    synthetic GPUs).  Raises ConfigError."""
    if value < MIN_GPU_MEMORY_BYTES:
        hint = f"; did you mean {value}GiB ({value}G) or {value}GB?" if value < 100_000 \
            else ""
        raise ConfigError(f"{field}: {value:,} bytes is below any GPU's memory (at least "
                          f"1 GiB; sizes are bytes unless they take a unit){hint}",
                          field=field, value=value, minimum=MIN_GPU_MEMORY_BYTES)
    return value


def _check_bool(value: Any, name: str) -> bool:
    """A real bool (a string such as 'no' is refused, not read as True)."""
    if not isinstance(value, bool):
        raise ConfigError(f"{name} must be True or False, got {value!r}", field=name,
                          value=repr(value))
    return value


def _check_utilization(u: Any) -> float:
    from kvcore.units import as_real

    real = as_real(u)  # numpy reals too (np.float32(0.9)); bool refused
    if real is None or not 0 < real <= 1 or not math.isfinite(real):
        raise ConfigError(f"gpu_memory_utilization must be a fraction in (0, 1], got {u!r} "
                          f"(vLLM's default is 0.9)", field="gpu_memory_utilization",
                          value=repr(u))
    return real


def compute_budget(
    model: str | Path | ModelConfig,
    *,
    gpu: str | GPU | None = None,
    gpu_memory_bytes: int | None = None,
    gpu_memory_utilization: float = DEFAULT_GPU_MEMORY_UTILIZATION,
    overhead_bytes: int | None = None,
    tensor_parallel_size: int = 1,
    pipeline_parallel_size: int = 1,
    data_parallel_size: int = 1,
    enable_expert_parallel: bool = False,
    include_mtp_layers: bool = False,
    max_num_batched_tokens: int | None = None,
    max_num_seqs: int | None = None,
    cuda_graphs: bool = True,
    kv_cache_memory_bytes: int | list[int] | None = None,
    weights: WeightsEstimate | None = None,
    engine: Any = None,
    max_model_len: int | None = None,
    usage: str = "serve",
    disable_custom_all_reduce: bool = False,
    flashinfer_sampler: bool = True,
    performance_mode: str = "balanced",
) -> GPUBudget:
    """The per-rank KV budget of ``model`` on ``gpu`` (module docstring for the rule).

    ``gpu`` is a catalog name or entry; ``gpu_memory_bytes`` overrides its memory (or
    stands alone).  Without ``overhead_bytes`` the overhead comes from the engine
    profile's ledger (``engine``: ``"vllm==X.Y[.Z]"``, default the newest profile; see
    :mod:`kvcore.deploy.engines`); ``max_num_batched_tokens`` / ``max_num_seqs`` None
    take that engine's defaults for the GPU and ``usage`` (``serve`` | ``offline``);
    ``cuda_graphs=False`` is ``--enforce-eager``; ``disable_custom_all_reduce`` is
    vLLM's ``--disable-custom-all-reduce`` (also what vLLM does by itself when TP spans
    nodes or the GPUs lack P2P); ``flashinfer_sampler=False``: no FlashInfer sampler
    (the PyTorch-native top-k/top-p path).  Returns a :class:`GPUBudget`;
    raises ConfigError for an unknown GPU or engine, a utilization outside (0, 1], a
    negative overhead or a bad parallel size.
    """
    from kvcore.units import plain_int

    # numpy integers as the equal plain int, once here (the checks below name bad ones)
    tensor_parallel_size, pipeline_parallel_size, data_parallel_size = (
        plain_int(tensor_parallel_size), plain_int(pipeline_parallel_size),
        plain_int(data_parallel_size))
    max_num_batched_tokens, max_num_seqs, max_model_len = (
        plain_int(max_num_batched_tokens), plain_int(max_num_seqs),
        plain_int(max_model_len))
    cfg = _config(model)
    entry, memory = _gpu_memory(gpu, gpu_memory_bytes)
    util = _check_utilization(gpu_memory_utilization)
    for name, flag in (("enable_expert_parallel", enable_expert_parallel),
                       ("include_mtp_layers", include_mtp_layers), ("cuda_graphs", cuda_graphs),
                       ("disable_custom_all_reduce", disable_custom_all_reduce),
                       ("flashinfer_sampler", flashinfer_sampler)):
        _check_bool(flag, name)
    w = weights or estimate_weights(
        cfg, tensor_parallel_size=tensor_parallel_size,
        pipeline_parallel_size=pipeline_parallel_size, data_parallel_size=data_parallel_size,
        enable_expert_parallel=enable_expert_parallel, include_mtp_layers=include_mtp_layers)
    est = None
    ledger = None
    if overhead_bytes is None:
        from kvcore.deploy.engines import engine_ledger

        for name, v in (("max_num_batched_tokens", max_num_batched_tokens),
                        ("max_num_seqs", max_num_seqs)):
            if v is not None:
                _positive_int(v, name)
        ledger = engine_ledger(
            cfg, w, engine=engine, gpu=entry, gpu_memory_bytes=memory,
            gpu_memory_utilization=util, tensor_parallel_size=tensor_parallel_size,
            pipeline_parallel_size=pipeline_parallel_size,
            data_parallel_size=data_parallel_size,
            enable_expert_parallel=enable_expert_parallel,
            max_num_batched_tokens=max_num_batched_tokens, max_num_seqs=max_num_seqs,
            max_model_len=max_model_len, enforce_eager=not cuda_graphs, usage=usage,
            disable_custom_all_reduce=disable_custom_all_reduce,
            flashinfer_sampler=flashinfer_sampler, performance_mode=performance_mode)
        est = OverheadEstimate(
            activation_bytes=ledger.activation_bytes + ledger.sampler_bytes,
            non_torch_bytes=ledger.non_torch_bytes,
            cuda_graph_bytes=ledger.cuda_graph_bytes if ledger.cuda_graphs_in_budget
            else 0)
        overhead = ledger.overhead_bytes
    else:
        from kvcore.units import as_int

        overhead_bytes = as_int(overhead_bytes) if as_int(overhead_bytes) is not None \
            else overhead_bytes
        if type(overhead_bytes) is not int or overhead_bytes < 0:
            raise ConfigError(f"overhead must be a non-negative number of bytes, got "
                              f"{overhead_bytes!r}", field="overhead",
                              value=repr(overhead_bytes))
        overhead = overhead_bytes
    # with a ledger, its usable line (CUDA total x utilization) and its itemised
    # overhead: the cap and overhead the not-fit error and --explain both print
    usable = ledger.usable_bytes if ledger is not None else math.ceil(memory * util)
    stages = tuple(usable - s - overhead for s in w.per_stage_bytes)
    if kv_cache_memory_bytes is not None:
        given = kv_cache_memory_bytes if isinstance(kv_cache_memory_bytes, list) \
            else [kv_cache_memory_bytes] * len(stages)
        if len(given) != len(stages):
            given = [max(given)] * len(stages)
        fits = all(g <= s for g, s in zip(given, stages))
        budget: int | list[int] = kv_cache_memory_bytes
    else:
        fits = min(stages) > 0
        budget = stages[0] if len(set(stages)) == 1 else list(stages)
    return GPUBudget(gpu=entry, gpu_memory_bytes=memory, gpu_memory_utilization=util,
                     weights=w, overhead_bytes=overhead, overhead=est,
                     kv_cache_memory_bytes=budget,
                     requested_kv_cache_memory_bytes=kv_cache_memory_bytes,
                     fits_memory=fits, stage_budgets=stages, ledger=ledger)


def tensor_parallel_candidates(model: str | Path | ModelConfig, limit: int = 128) -> list[int]:
    """Tensor-parallel sizes kvcore's one TP rule accepts for ``model`` (divisors of the
    attention heads, KV heads split or replicated evenly), ascending, up to ``limit``."""
    cfg = _config(model)
    from kvcore.models.adapters import check_tensor_parallel

    out = []
    for tp in range(1, limit + 1):
        try:
            check_tensor_parallel(cfg, tp)
        except KVCoreError:
            continue
        out.append(tp)
    return out


_BUDGET_KEYS = ("gpu", "gpu_memory_bytes", "gpu_memory_utilization", "overhead_bytes",
                "data_parallel_size", "enable_expert_parallel", "max_num_seqs",
                "cuda_graphs", "engine", "usage")


def _fits(cfg: ModelConfig, tp: int, plan_kwargs: dict[str, Any],
          budget_kwargs: dict[str, Any]) -> bool:
    from kvcore.models.planner import plan_model

    try:
        b = compute_budget(cfg, tensor_parallel_size=tp, **budget_kwargs)
    except KVCoreError:
        return False
    if not b.fits_memory:
        return False
    kwargs = dict(plan_kwargs, tensor_parallel_size=tp)
    if b.requested_kv_cache_memory_bytes is None:
        kwargs["kv_cache_memory_bytes"] = b.kv_cache_memory_bytes
    try:
        plan_model(cfg, **kwargs)
    except NotEnoughMemoryError:
        return False
    except KVCoreError:
        return False
    return True


def min_tensor_parallel_size_that_fits(model: str | Path | ModelConfig, *,
                                       plan_kwargs: dict[str, Any] | None = None,
                                       **budget_kwargs: Any) -> int | None:
    """The smallest tensor-parallel size (one the TP rule accepts) at which the model's
    weights, overhead and one request of ``max_model_len`` fit; None if none up to 128.

    ``budget_kwargs`` go to :func:`compute_budget` (gpu, gpu_memory_bytes, ...),
    ``plan_kwargs`` to :func:`kvcore.models.planner.plan_model`.
    """
    cfg = _config(model)
    plan_kwargs = dict(plan_kwargs or {})
    plan_kwargs.pop("tensor_parallel_size", None)
    budget_kwargs.pop("tensor_parallel_size", None)
    for key in ("pipeline_parallel_size", "include_mtp_layers", "max_num_batched_tokens"):
        if key in plan_kwargs:
            budget_kwargs.setdefault(key, plan_kwargs[key])
    if "kv_cache_memory_bytes" in plan_kwargs and plan_kwargs["kv_cache_memory_bytes"] \
            is not None:
        budget_kwargs["kv_cache_memory_bytes"] = plan_kwargs["kv_cache_memory_bytes"]
    for tp in tensor_parallel_candidates(cfg):
        # weights alone must fit first: skip sizes that cannot (cheap), then plan
        if _fits(cfg, tp, plan_kwargs, budget_kwargs):
            return tp
    return None


def vllm_stages(cfg: ModelConfig, pipeline_parallel_size: int,
                plan_kwargs: dict[str, Any] | None = None) -> list[list[str]] | None:
    """The KV-cache layers of each pipeline stage as vLLM splits the decoder layers
    (:func:`kvcore.deploy.weights.pp_layer_partition`; MTP layers on the last stage), so
    that each stage's KV budget is planned for the layers whose weights it holds.  None
    when the layer names carry no layer index (or a stage would hold no KV layer)."""
    import bisect
    import itertools
    import re

    from kvcore.deploy.weights import pp_layer_partition
    from kvcore.models.config import CacheConfig
    from kvcore.models.planner import layer_specs_for

    kw = plan_kwargs or {}
    n = cfg.num_hidden_layers
    if not n or cfg.model_type == "whisper":
        return None
    try:
        specs = layer_specs_for(cfg, CacheConfig(
            tensor_parallel_size=kw.get("tensor_parallel_size", 1),
            pipeline_parallel_size=pipeline_parallel_size,
            include_mtp_layers=kw.get("include_mtp_layers", False),
            num_speculative_tokens=kw.get("num_speculative_tokens", 0)))
    except KVCoreError:
        return None
    ends = list(itertools.accumulate(pp_layer_partition(n, pipeline_parallel_size)))
    stages: list[list[str]] = [[] for _ in ends]
    for name in specs:
        m = re.search(r"(?:^|\.)(\d+)(?:\.|$)", name)
        if m is None:
            return None
        idx = int(m.group(1))
        stages[min(bisect.bisect_right(ends, idx), len(ends) - 1)].append(name)
    return stages if all(stages) else None


def _no_tp_hint(cfg: ModelConfig, cause: str, plan_kwargs: dict[str, Any],
                budget_kwargs: dict[str, Any]) -> str:
    """What to try when no tensor-parallel size fits, for the cause that does not fit."""
    from kvcore.planning import format_bytes

    tried = tensor_parallel_candidates(cfg)
    shown = ", ".join(map(str, tried)) if len(tried) <= 12 else \
        f"{', '.join(map(str, tried[:6]))}, ..., {tried[-1]}"
    head = (f"no tensor-parallel size fits (tried those that divide the heads: {shown}; "
            f"the largest is {tried[-1]})" if tried else "no tensor-parallel size fits")
    if tried and cause != "budget":  # the cause at the largest TP, not at this one
        try:
            b = compute_budget(
                cfg, tensor_parallel_size=tried[-1],
                pipeline_parallel_size=plan_kwargs.get("pipeline_parallel_size", 1),
                include_mtp_layers=plan_kwargs.get("include_mtp_layers", False),
                max_num_batched_tokens=plan_kwargs.get("max_num_batched_tokens", 8192),
                **budget_kwargs)
        except KVCoreError:
            pass
        else:
            cause = "weights" if max(b.weights.per_stage_bytes) >= b.usable_bytes else \
                "overhead" if not b.fits_memory else "kv"
    if cause == "overhead":
        return (f"{head}; at tensor-parallel size {tried[-1]} the weights fit but weights + "
                f"overhead (activations, CUDA graphs, runtime) do not: use GPUs with more "
                f"memory, a smaller --max-num-batched-tokens or a smaller --overhead")
    if cause == "weights":
        return (f"{head}; the weights alone exceed the memory per GPU: use more GPUs "
                f"(pipeline stages, --pp), GPUs with more memory or quantized weights")
    if cause == "budget":
        given = plan_kwargs.get("kv_cache_memory_bytes")
        shown = "/".join(format_bytes(x) for x in given) if isinstance(
            given, (list, tuple)) else format_bytes(given or 0)
        return (f"{head} with the given --kv-cache-memory {shown} per rank: give a smaller "
                f"--kv-cache-memory (or none: the budget the GPU leaves), more memory per "
                f"GPU or pipeline stages (--pp)")
    return (f"{head}; use a shorter --max-model-len, a smaller --kv-cache-dtype, more "
            f"memory per GPU or pipeline stages (--pp)")


def check_kv_cache_dtype(value: Any) -> None:
    """Refuse an unknown ``kv_cache_dtype`` before any memory is computed, so that a bad
    dtype is reported as itself, never as "does not fit" (``auto`` and None pass).

    Raises ConfigError (not a string) or UnknownKVCacheDtypeError / MissingPluginError
    (kvcore.registry) naming the known dtypes or the plugin to install.
    """
    if value is None or value == "auto":
        return
    if not isinstance(value, str) or not value.strip():
        raise ConfigError(f"kv_cache_dtype = {value!r} must be a dtype name (or auto)",
                          field="kv_cache_dtype", value=repr(value))
    from kvcore.registry import get_registry

    get_registry().kv_cache_dtype(value)


def _default_step_note(b: GPUBudget, usage: str, max_model_len: int | None) -> str:
    """A note when vLLM's default ``max_num_batched_tokens`` on this GPU is not the one of
    the memory tier just below (``get_batch_defaults``, vllm/engine/arg_utils.py@0.32:
    ``device_memory >= 160 GiB`` gives 16,384 tokens, ``>= 70 GiB`` and not A100 8,192
    (serve), else 2,048): a bigger step reserves more activation memory and, on a
    sliding-window layer, more blocks per request (vLLM's ``SlidingWindowSpec`` needs
    ``sliding_window - 1 + max_num_batched_tokens`` tokens), so a GPU with more memory can
    hold fewer tokens of KV cache at the engine's defaults.  ``""`` when it is the same."""
    from kvcore.deploy.engines import batch_defaults

    ledger = b.ledger
    mem = b.gpu_memory_bytes
    tiers = [t * _GIB for t in (160, 70) if mem >= t * _GIB]
    if not tiers:
        return ""
    below, _, _ = batch_defaults(ledger.engine, gpu=b.gpu, memory_bytes=tiers[0] - 1,
                                 usage=usage, max_model_len=max_model_len)
    here = ledger.max_num_batched_tokens
    if below == here:
        return ""
    return (f"max_num_batched_tokens {here:,}: vLLM's default on a GPU of "
            f">= {tiers[0] // _GIB} GiB (get_batch_defaults, arg_utils.py@0.32; {below:,} "
            f"below it): the larger step reserves more activation memory and, on "
            f"sliding-window layers, more blocks per request, so capacity can be lower than "
            f"on a smaller GPU; compare GPUs at a fixed --max-num-batched-tokens")


def _cap_words(b: GPUBudget) -> str:
    """How the not-fit error names its cap: the ledger's usable line where there is one."""
    if b.ledger is not None:
        return f"usable memory: CUDA total x {b.gpu_memory_utilization:g}"
    return f"GPU memory x {b.gpu_memory_utilization:g}"


def _override_problem(config: Any, override: int, stage_budget: int) -> str:
    """Why ``num_gpu_blocks_override`` blocks do not fit the KV budget the GPU leaves
    (``""`` when they do).

    vLLM 0.32 profiles the free memory, then replaces the block count by the override
    (``may_override_num_blocks`` and ``get_kv_cache_configs``, kv_cache_utils.py@0.32,
    which sets ``available_memory = override x bytes_per_block``) and allocates
    ``num_blocks x bytes_per_block`` per rank: past the budget the allocation runs out
    of GPU memory at start-up.  ``stage_budget`` is the smallest stage's budget (bytes);
    the largest override that fits is ``floor(stage_budget / bytes_per_block)``."""
    from kvcore.planning import format_bytes

    bpb = int(getattr(config, "bytes_per_block", 0) or 0)
    if bpb <= 0:
        return ""
    need = override * bpb
    if need <= stage_budget:
        return ""
    largest = max(stage_budget // bpb, 0)
    return (f"num_gpu_blocks_override {override:,} blocks (simulate's --num-blocks, "
            f"num_blocks) x {format_bytes(bpb)} = "
            f"{format_bytes(need)} per rank exceed the {format_bytes(stage_budget)} KV "
            f"budget the GPU leaves (vLLM allocates the override and runs out of memory "
            f"at start-up); the largest num_gpu_blocks_override that fits is {largest:,} "
            f"(--num-gpu-blocks-override {largest})")


def plan_on_gpu(
    model: str | Path | ModelConfig,
    *,
    gpu: str | GPU | None = None,
    gpu_memory_bytes: int | None = None,
    gpu_memory_utilization: float = DEFAULT_GPU_MEMORY_UTILIZATION,
    overhead_bytes: int | None = None,
    data_parallel_size: int = 1,
    enable_expert_parallel: bool = False,
    max_num_seqs: int | None = None,
    cuda_graphs: bool = True,
    raise_if_not_fits: bool = True,
    engine: Any = None,
    usage: str = "serve",
    disable_custom_all_reduce: bool = False,
    flashinfer_sampler: bool = True,
    performance_mode: str = "balanced",
    **plan_kwargs: Any,
) -> Any:
    """Plan ``model`` with the KV budget a GPU leaves (see :func:`compute_budget`).

    ``engine`` (``"vllm==0.10.1"``; default the newest profile, see
    :mod:`kvcore.deploy.engines`) picks the memory accounting; ``usage`` (``serve`` |
    ``offline``) its batch defaults; ``max_num_seqs`` None is the engine's default;
    ``performance_mode`` is vLLM's ``--performance-mode`` (``throughput`` doubles the
    default batch and sequence limits, so the profile run and the sampler take more).
    The stats also carry ``engine``, the ``ledger`` (one line per term, with rule and
    source) and the ceilings vLLM would hit (:mod:`kvcore.deploy.ceilings`).

    ``plan_kwargs`` go to :func:`kvcore.models.planner.plan_model` (an explicit
    ``kv_cache_memory_bytes`` wins over the derived budget).  The returned
    :class:`~kvcore.kv_cache_config.KVCacheConfig`'s stats carry ``weights_bytes``,
    ``weights_bytes_total``, ``weights_source``, ``overhead_bytes``, ``gpu``,
    ``gpu_memory_utilization``, ``fits`` and ``min_tensor_parallel_size_that_fits``.

    Raises
    ------
    NotEnoughMemoryError
        The plan does not fit (``raise_if_not_fits``); the message says what is missing
        and the smallest TP that fits; ``extra`` carries ``fits`` (False),
        ``weights_bytes`` and ``min_tensor_parallel_size_that_fits``.  With
        ``raise_if_not_fits=False`` a config is returned instead (budget-less when the
        weights do not fit) with ``fits`` False.  Also raised (``extra``: ``reason``,
        the ceiling's kind, and ``ceilings``) when a fatal ceiling says vLLM refuses to
        start (:mod:`kvcore.deploy.ceilings`), and when ``num_gpu_blocks_override``
        blocks exceed the KV budget (vLLM allocates them and runs out of memory; the
        message names the largest override that fits).
    ConfigError
        Bad GPU, utilization, overhead or plan option.
    """
    from kvcore.models.planner import plan_model
    from kvcore.planning import format_bytes
    from kvcore.units import plain_int, plain_ints

    # numpy integers as the equal plain int, once at this boundary (bool, floats and
    # text stay for the checks that name them)
    plan_kwargs = plain_ints(plan_kwargs)
    gpu_memory_bytes, overhead_bytes, data_parallel_size, max_num_seqs = (
        plain_int(gpu_memory_bytes), plain_int(overhead_bytes),
        plain_int(data_parallel_size), plain_int(max_num_seqs))
    check_kv_cache_dtype(plan_kwargs.get("kv_cache_dtype", "auto"))  # before any budget
    from kvcore.deploy.gpus import check_attention_block_size

    # a block size the GPU's attention backends refuse: vLLM does not start
    check_attention_block_size(plan_kwargs.get("block_size"), gpu or "this GPU")
    cfg, hub_note = _resolve(model)
    mode_note = None
    if "mamba_cache_mode" in plan_kwargs and plan_kwargs["mamba_cache_mode"] is None:
        # the mode vLLM 0.32 runs (kvcore.models.planner.vllm_mamba_cache_mode), given
        # to the planner and to the ceilings / vLLM-layout checks alike
        from kvcore.deploy.engines import get_engine
        from kvcore.models.planner import vllm_mamba_cache_mode, vllm_mamba_mode_note

        pc = plan_kwargs.get("enable_prefix_caching", True)
        _check_bool(pc, "enable_prefix_caching")
        # the rule is vLLM 0.32's (the reference kit's); from which release vLLM switches
        # a hybrid to align is not known here, so older profiles plan none as before
        mode = "none"
        if get_engine(engine).first >= (0, 32, 0):
            mode = vllm_mamba_cache_mode(
                cfg, pc, tensor_parallel_size=plan_kwargs.get("tensor_parallel_size", 1),
                pipeline_parallel_size=plan_kwargs.get("pipeline_parallel_size", 1))
        plan_kwargs = dict(plan_kwargs, mamba_cache_mode=mode)
        mode_note = vllm_mamba_mode_note(mode)
    for name, flag in (("enable_expert_parallel", enable_expert_parallel),
                       ("cuda_graphs", cuda_graphs),
                       ("raise_if_not_fits", raise_if_not_fits)):
        _check_bool(flag, name)
    given_budget = plan_kwargs.get("kv_cache_memory_bytes")
    if isinstance(given_budget, (list, tuple)) and len(given_budget) > 1:
        # one budget per pipeline stage: the list sets the stage count (per-rank weights,
        # overhead and num_gpus follow it)
        pp_given = plan_kwargs.get("pipeline_parallel_size", 1)
        if pp_given == 1:
            plan_kwargs = dict(plan_kwargs, pipeline_parallel_size=len(given_budget))
        elif pp_given != len(given_budget):
            raise ConfigError(f"kv_cache_memory_bytes lists {len(given_budget)} budgets (one "
                              f"per pipeline stage) but pipeline_parallel_size is "
                              f"{pp_given!r}; give one budget per stage",
                              field="kv_cache_memory_bytes", value=repr(given_budget))
    tp = plan_kwargs.get("tensor_parallel_size", 1)
    budget_kwargs: dict[str, Any] = dict(
        gpu=gpu, gpu_memory_bytes=gpu_memory_bytes,
        gpu_memory_utilization=gpu_memory_utilization, overhead_bytes=overhead_bytes,
        data_parallel_size=data_parallel_size, enable_expert_parallel=enable_expert_parallel,
        max_num_seqs=max_num_seqs, cuda_graphs=cuda_graphs, engine=engine, usage=usage,
        disable_custom_all_reduce=disable_custom_all_reduce,
        flashinfer_sampler=flashinfer_sampler, performance_mode=performance_mode)
    mml = plan_kwargs.get("max_model_len")
    if not (isinstance(mml, int) and not isinstance(mml, bool)):
        mml = cfg.max_position_embeddings if hasattr(cfg, "max_position_embeddings") \
            else None
    b = compute_budget(
        cfg, tensor_parallel_size=tp,
        pipeline_parallel_size=plan_kwargs.get("pipeline_parallel_size", 1),
        include_mtp_layers=plan_kwargs.get("include_mtp_layers", False),
        max_num_batched_tokens=plan_kwargs.get("max_num_batched_tokens"),
        kv_cache_memory_bytes=plan_kwargs.get("kv_cache_memory_bytes"),
        max_model_len=mml if isinstance(mml, int) else None, **budget_kwargs)
    user_mnbt = plan_kwargs.get("max_num_batched_tokens")
    if b.ledger is not None and plan_kwargs.get("max_num_batched_tokens") is None:
        # the planner sizes sliding-window blocks by the step: the engine's default
        plan_kwargs = dict(plan_kwargs, max_num_batched_tokens=b.ledger.max_num_batched_tokens)
    explicit = plan_kwargs.get("kv_cache_memory_bytes") is not None
    pp = plan_kwargs.get("pipeline_parallel_size", 1)
    if isinstance(pp, int) and pp > 1 and "stages" not in plan_kwargs:
        stages = vllm_stages(cfg, pp, plan_kwargs)
        if stages is not None:  # the planner's stages hold the layers the weights do
            plan_kwargs = dict(plan_kwargs, stages=stages)
    config = None
    longest_that_starts = None
    problem = ""
    cause = "kv"  # what does not fit: "weights" alone, a given "budget", or the "kv" cache
    if b.fits_memory:
        kwargs = dict(plan_kwargs)
        if not explicit:
            kwargs["kv_cache_memory_bytes"] = b.kv_cache_memory_bytes
        try:
            config = plan_model(cfg, **kwargs)
        except NotEnoughMemoryError as exc:
            need = exc.extra.get("min_kv_cache_memory_bytes")
            longest_that_starts = exc.extra.get("estimated_max_model_len")
            if explicit:
                given = plan_kwargs["kv_cache_memory_bytes"]
                amount = "/".join(format_bytes(x) for x in given) if isinstance(
                    given, (list, tuple)) else format_bytes(given)
                problem = f"the given KV budget {amount} per rank"
            else:
                problem = f"the {format_bytes(min(b.stage_budgets))} KV budget left per GPU"
            problem += (" cannot hold one request of max_model_len"
                        + (f" (needs {format_bytes(float(need))})" if need else "")
                        + (f"; the longest max_model_len that starts is "
                           f"{int(longest_that_starts):,} (--max-model-len "
                           f"{int(longest_that_starts)})" if longest_that_starts else ""))
            if not raise_if_not_fits:
                config = plan_model(cfg, **dict(plan_kwargs, kv_cache_memory_bytes=None))
    else:
        used = max(b.weights.per_stage_bytes) + b.overhead_bytes
        if max(b.weights.per_stage_bytes) >= b.usable_bytes:
            cause = "weights"
        if explicit:
            given = plan_kwargs["kv_cache_memory_bytes"]
            shown = "/".join(format_bytes(x) for x in given) if isinstance(
                given, (list, tuple)) else format_bytes(given)
            problem = (f"weights {format_bytes(max(b.weights.per_stage_bytes))} + overhead "
                       f"{format_bytes(b.overhead_bytes)} + the given KV budget {shown} "
                       f"exceed {format_bytes(b.usable_bytes)} per GPU ({_cap_words(b)})")
            if cause != "weights":
                cause = "budget"
        else:
            problem = (f"weights {format_bytes(max(b.weights.per_stage_bytes))} + overhead "
                       f"{format_bytes(b.overhead_bytes)}"
                       + (f" ({b.ledger.engine.name}; --explain itemises it)"
                          if b.ledger is not None else "")
                       + f" = {format_bytes(used)} per GPU "
                       f"exceed {format_bytes(b.usable_bytes)} ({_cap_words(b)}) by "
                       f"{format_bytes(b.shortfall_bytes())}")
        if not raise_if_not_fits:
            config = plan_model(cfg, **dict(plan_kwargs, kv_cache_memory_bytes=None))
    override = plan_kwargs.get("num_gpu_blocks_override")
    if config is not None and not problem and isinstance(override, int):
        problem = _override_problem(config, override, min(b.stage_budgets))
        if problem:
            cause = "override"
    fits = not problem
    # the smallest TP that fits, also when this one fits (it may be smaller)
    min_tp: int | None = None if cause == "override" else (
        tp if fits and tp == 1 else min_tensor_parallel_size_that_fits(
            cfg, plan_kwargs=plan_kwargs, **budget_kwargs))
    where = b.gpu.name if b.gpu else format_bytes(b.gpu_memory_bytes)
    if not fits and raise_if_not_fits:
        hint = (f"the smallest tensor-parallel size that fits is {min_tp} (--tp {min_tp})"
                if min_tp else "" if cause == "override"
                else _no_tp_hint(cfg, cause, plan_kwargs, budget_kwargs))
        raise NotEnoughMemoryError(
            f"{cfg.name or cfg.source}: does not fit on {where} at tensor_parallel_size "
            f"{tp}: {problem}" + (f"; {hint}" if hint else ""), fits=False,
            weights_bytes=b.weights.per_rank_bytes, overhead_bytes=b.overhead_bytes,
            min_tensor_parallel_size_that_fits=min_tp,
            **({"ledger": b.ledger.to_dict()} if b.ledger is not None else {}))
    assert config is not None
    config.stats.update({
        "weights_bytes": b.weights.per_rank_bytes,
        "weights_bytes_total": b.weights.total_bytes,
        "weights_source": b.weights.source,
        "overhead_bytes": b.overhead_bytes,
        "gpu": {"name": b.gpu.name if b.gpu else None, "memory_bytes": b.gpu_memory_bytes},
        "gpu_memory_utilization": b.gpu_memory_utilization,
        "fits": fits,
        "min_tensor_parallel_size_that_fits": min_tp,
        "num_gpus": b.weights.num_gpus,
        "data_parallel_size": data_parallel_size,
    })
    if b.ledger is not None:
        config.stats.update({"engine": b.ledger.engine.name,
                             "engine_release": b.ledger.engine.release,
                             "ledger": b.ledger.to_dict()})
        from kvcore.deploy.ceilings import check_ceilings, vllm_layout

        vl = vllm_layout(cfg, config, dict(plan_kwargs, tensor_parallel_size=tp))
        config.stats["vllm_own_layout"] = vl
        ceilings = [c.to_dict() for c in check_ceilings(cfg, config, b.ledger, plan_kwargs,
                                                        vllm=vl)]
        for c in ceilings:
            if c["kind"] == "max_model_len" and longest_that_starts:
                c["limit"] = int(longest_that_starts)
                c["message"] = (f"the KV budget cannot hold one request of max_model_len; "
                                f"the longest that starts is {int(longest_that_starts):,} "
                                f"tokens (--max-model-len {int(longest_that_starts)})")
        config.stats["ceilings"] = ceilings
        fatal = [c for c in ceilings if c.get("fatal")]
        if fits and fatal:
            # a fatal ceiling is a not-fit: vLLM refuses to start (kvcore.deploy.ceilings)
            fits = False
            config.stats["fits"] = False
            if raise_if_not_fits:
                raise NotEnoughMemoryError(
                    f"{cfg.name or cfg.source}: does not start on {where} at "
                    f"tensor_parallel_size {tp}: "
                    + "; ".join(f"{c['message']} [{c['source']}]" for c in fatal),
                    fits=False, weights_bytes=b.weights.per_rank_bytes,
                    overhead_bytes=b.overhead_bytes,
                    min_tensor_parallel_size_that_fits=min_tp,
                    reason=fatal[0]["kind"], ceilings=fatal, ledger=b.ledger.to_dict())
    notes = [hub_note] if hub_note else []
    if b.ledger is not None and user_mnbt is None:
        step_note = _default_step_note(b, usage, mml if isinstance(mml, int) else None)
        if step_note:
            notes.append(step_note)
    w = b.weights
    # MTP layers: said once, in the GPU summary line (kvcore.deploy.sweep.print_gpu_summary)
    config.stats.update({"weights_mtp_bytes": w.mtp_bytes,
                         "weights_include_mtp": w.include_mtp_layers})
    if w.source == "safetensors-index":
        notes.append(f"weights: total from {w.index_path} (metadata.total_size), per rank "
                     f"from the config's breakdown scaled to it")
    notes.extend(w.notes)
    if notes:
        config.stats.notes = [*(config.stats.notes or []), *notes]
    if mode_note:
        config.notes.append(mode_note)
    return config
