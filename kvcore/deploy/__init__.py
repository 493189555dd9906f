"""GPU-fit planning: what fits on which GPUs, and with how much KV cache.

One package for everything that turns a GPU into a KV-cache budget and back:

* :mod:`kvcore.deploy.gpus`: the GPU catalog (memory; ``kvcore gpus``);
* :mod:`kvcore.deploy.weights`: weights per rank from a config (tensor classes,
  quantization, MoE, MTP);
* :mod:`kvcore.deploy.budget`: the engine's memory ledger (weights, activations, CUDA
  graphs, non-torch memory) -> KV budget -> :func:`plan_on_gpu`;
* :mod:`kvcore.deploy.sweep`: ``kvcore plan`` over lists of GPUs, TP sizes, lengths.

Direction: deploy builds on the planner (:mod:`kvcore.models.planner`,
:mod:`kvcore.planning`); specs, planning and the runtime never import deploy.
The old module paths (``kvcore.budget``, ``kvcore.gpus``, ``kvcore.sweep``,
``kvcore.models.weights``) are aliases of these modules.
"""

from __future__ import annotations

from typing import Any

__all__ = ["plan_model", "plan_on_gpu", "compute_budget", "estimate_weights", "get_gpu",
           "list_gpus"]


def plan_model(model: Any, *, gpu: Any = None, gpu_memory_bytes: int | None = None,
               **options: Any) -> Any:
    """Plan a model's KV cache, per rank: :func:`kvcore.models.planner.plan_model` for a
    given ``kv_cache_memory_bytes``, or, with ``gpu`` (a catalog name, see ``kvcore
    gpus``) or ``gpu_memory_bytes``, :func:`kvcore.deploy.budget.plan_on_gpu` (the budget
    comes from the GPU after weights, activations and the engine's reserves).

    Raises what those raise (ConfigError, MissingPluginError, UnknownModelTypeError,
    NotEnoughMemoryError)."""
    if gpu is not None or gpu_memory_bytes is not None:
        from kvcore.deploy.budget import plan_on_gpu as _on_gpu

        return _on_gpu(model, gpu=gpu, gpu_memory_bytes=gpu_memory_bytes, **options)
    from kvcore.models.planner import plan_model as _plan_model

    return _plan_model(model, **options)


def __getattr__(name: str) -> Any:
    import importlib

    where = {"plan_on_gpu": "budget", "compute_budget": "budget",
             "estimate_weights": "weights", "get_gpu": "gpus", "list_gpus": "gpus"}
    if name in where:
        return getattr(importlib.import_module(f"kvcore.deploy.{where[name]}"), name)
    raise AttributeError(f"module 'kvcore.deploy' has no attribute {name!r}")
