"""Model -> per-layer specs (through the installed adapters) -> plan."""

from __future__ import annotations

import math
from collections import Counter
from pathlib import Path
from typing import Any

from kvcore.errors import ConfigError, MissingPluginError, UnknownModelTypeError
from kvcore.kv_cache_config import KVCacheConfig
from kvcore.models.config import CacheConfig, ModelConfig, load_model_config
from kvcore.specs import KVCacheSpec

__all__ = ["layer_specs_for", "turboquant_boundary_layers", "plan_model", "supported_model_types", "default_max_model_len",
           "vllm_mamba_cache_mode", "vllm_mamba_mode_note"]


def supported_model_types() -> list[str]:
    """Every model_type an installed adapter serves (core and plugins)."""
    from kvcore.plugins import get_plugin_manager
    from kvcore.registry import get_registry

    get_registry()
    types: list[str] = []
    for result in get_plugin_manager().hook.kvcore_model_types():
        types.extend(result or [])
    return sorted(set(types))


def layer_specs_for(model: ModelConfig, cache: CacheConfig) -> dict[str, KVCacheSpec]:
    """``{layer name: spec}`` for a model, from the first adapter that serves it.

    Raises
    ------
    MissingPluginError
        The model type is served by a known plugin that is not installed (names it).
    UnknownModelTypeError
        No adapter serves the model type (lists the supported ones).
    ConfigError
        The adapter found a malformed or missing field.
    """
    from kvcore.plugins import get_plugin_manager
    from kvcore.registry import KNOWN_PLUGIN_MODEL_TYPES, get_registry

    get_registry()  # loads plugins, validates them
    specs = get_plugin_manager().hook.kvcore_layer_specs(model_config=model,
                                                          cache_config=cache)
    if specs is not None:
        if not specs:
            raise ConfigError(f"{model.source or model.name}: the adapter for model_type "
                              f"{model.model_type!r} found no KV-cache layers")
        return turboquant_boundary_layers(model, dict(specs))
    for mt in (model.model_type, model.text_model_type):
        dists = KNOWN_PLUGIN_MODEL_TYPES.get(mt or "")
        if dists:
            missing = [d for d in dists if d not in _installed_distributions()]
            need = missing or list(dists)
            from kvcore.registry import missing_plugin_hint

            hints = "; ".join(f"{d}, {missing_plugin_hint(d)}" for d in need)
            raise MissingPluginError(
                f"model_type {mt!r} is served by the plugin{'s' if len(need) > 1 else ''} "
                f"{hints}", model_type=mt, distribution=need[0], distributions=need)
    raise UnknownModelTypeError(
        f"{model.source or model.name}: model_type {model.model_type!r} is not supported by "
        f"the installed adapters; supported: {', '.join(supported_model_types())}",
        model_type=model.model_type)


def turboquant_boundary_layers(model: ModelConfig, specs: dict[str, KVCacheSpec]
                               ) -> dict[str, KVCacheSpec]:
    """vLLM 0.32's TurboQuant boundary protection: on a dense model (no Mamba /
    linear-attention layer) with a ``turboquant_*`` kv_cache_dtype, the first
    ``n = min(2, num_hidden_layers // 2)`` and the last ``n`` decoder layers keep the
    native dtype (``kv_cache_dtype`` ``auto``; a TurboQuant full-attention layer becomes
    a :class:`~kvcore.specs.FullAttentionSpec`).  Hybrids keep every layer quantized.

    Source: vllm/engine/arg_utils.py:2293-2310 (``turboquant_*`` adds
    ``TurboQuantConfig.get_boundary_skip_layers`` to ``kv_cache_dtype_skip_layers``),
    vllm/model_executor/layers/quantization/turboquant/config.py:177-211 (the rule; []
    for ``is_hybrid``), vllm/model_executor/layers/attention/attention.py:299-313 and
    mla_attention.py:493-498 (a layer whose index, the first integer of its name, is
    listed gets ``kv_cache_dtype = "auto"``)."""
    import dataclasses

    from kvcore.specs import AttentionSpec, FullAttentionSpec

    def tq(s: KVCacheSpec) -> bool:
        return isinstance(s, AttentionSpec) and \
            str(getattr(s, "kv_cache_dtype", "")).startswith("turboquant_")

    if not any(tq(s) for s in specs.values()) or \
            any(s.kind == "mamba" for s in specs.values()):
        return specs
    n_layers = model.num_hidden_layers
    if not n_layers:
        return specs
    n = min(2, n_layers // 2)
    skip = set(range(n)) | set(range(n_layers - n, n_layers))
    out: dict[str, KVCacheSpec] = {}
    for name, s in specs.items():
        idx = next((int(p) for p in name.split(".") if p.isdigit()), None)
        if tq(s) and idx is not None and idx in skip:
            if s.kind == "turboquant_full_attention":
                kw = {f.name: getattr(s, f.name) for f in dataclasses.fields(FullAttentionSpec)
                      if f.init}
                kw["kv_cache_dtype"] = "auto"
                s = FullAttentionSpec(**kw)
            else:
                s = dataclasses.replace(s, kv_cache_dtype="auto")  # type: ignore[call-arg]
        out[name] = s
    return out


def vllm_mamba_cache_mode(model: str | Path | ModelConfig, enable_prefix_caching: bool = True,
                          **cache_options: Any) -> str:
    """The ``mamba_cache_mode`` vLLM 0.32 runs a model with by default: ``align`` when
    the model has Mamba / linear-attention layers and attention layers and prefix
    caching is on, else ``none``.

    Source: vllm/model_executor/models/config.py ``MambaModelConfig.
    verify_and_update_config`` (prefix caching on and mode ``none`` -> ``align``; off ->
    ``none``) and vllm/config/model.py ``is_prefix_caching_supported`` (prefix caching
    is off by default on attention-free models, so their mode stays ``none``).
    ``cache_options``: :class:`~kvcore.models.config.CacheConfig` fields (TP / PP) the
    specs are built with.  Raises what :func:`layer_specs_for` raises."""
    if not enable_prefix_caching:
        return "none"
    cfg = model if isinstance(model, ModelConfig) else load_model_config(model)
    kinds = {s.kind for s in layer_specs_for(cfg, CacheConfig(**cache_options)).values()}
    return "align" if "mamba" in kinds and kinds - {"mamba"} else "none"


def vllm_mamba_mode_note(mode: str) -> str | None:
    """The plan note for a mode :func:`vllm_mamba_cache_mode` chose (None for none)."""
    if mode == "none":
        return None
    return (f"mamba cache mode {mode}: the mode vLLM 0.32 runs this model with, prefix "
            "caching on (MambaModelConfig.verify_and_update_config); --mamba-cache-mode "
            "none plans one state per request")


def _installed_distributions() -> set[str]:
    from kvcore.plugins import list_plugins

    return {p.distribution for p in list_plugins()}


_LENGTH_KEYS = ("max_target_positions", "max_position_embeddings", "max_seq_len",
                "seq_length", "n_positions")


def _length_key(cfg: ModelConfig) -> str | None:
    """The config key :func:`default_max_model_len` reads its length from: Whisper's
    max_target_positions, else the first present of :data:`_LENGTH_KEYS`."""
    if cfg.model_type == "whisper":
        return "max_target_positions" if cfg.has("max_target_positions") else None
    return next((k for k in _LENGTH_KEYS if cfg.has(k)), None)


def default_max_model_len(model: ModelConfig) -> int | None:
    """The config's longest sequence (tokens): max_position_embeddings (Whisper:
    max_target_positions).  A present length that is not a positive int is a
    ConfigError naming it (never skipped: a skipped bound lets any max_model_len
    through)."""
    key = _length_key(model)
    if key is None:
        return None
    n: int = model.get_int(key)
    return n


#: RoPE types whose max_position_embeddings is already scaled (vLLM 0.32,
#: ``vllm/config/model.py`` ``_get_and_verify_max_len``)
_SCALED_ROPE_TYPES = ("su", "longrope", "llama3", "yarn", "deepseek_yarn",
                      "deepseek_llama_scaling")


def derived_max_model_len(cfg: ModelConfig) -> int | None:
    """vLLM's derived max_model_len: the config's length (:func:`default_max_model_len`)
    times a RoPE scaling ``factor`` of a type that does not pre-scale it (not for
    Gemma 3); None when the config has no length."""
    n = default_max_model_len(cfg)
    if n is None:
        return None
    rope = cfg.section("rope_scaling" if cfg.has("rope_scaling") else "rope_parameters")
    if not rope.is_empty() and "gemma3" not in str(cfg.model_type):
        kind = rope.get_str("rope_type", None) or rope.get_str("type", "default")
        factor = rope.get_float("factor", None, minimum=0, exclusive_minimum=True,
                                maximum=1 << 20)
        if kind not in _SCALED_ROPE_TYPES and factor is not None:
            return int(n * factor)
    return n


def _check_max_model_len(cfg: ModelConfig, max_model_len: Any) -> None:
    """vLLM refuses a max_model_len above the derived one unless the config's
    ``model_max_length`` allows it or VLLM_ALLOW_LONG_MAX_MODEL_LEN is set."""
    import os

    from kvcore.units import as_int

    max_model_len = as_int(max_model_len)  # numpy integers too
    if max_model_len is None or max_model_len <= 0:
        return  # -1 (auto) or a bad value: plan() checks it
    derived = derived_max_model_len(cfg)
    if derived is None or max_model_len <= derived:
        return
    model_max = cfg.get_float("model_max_length", None, minimum=0)
    if model_max is not None and max_model_len <= model_max:
        return
    if os.environ.get("VLLM_ALLOW_LONG_MAX_MODEL_LEN", "").strip().lower() in \
            ("1", "true"):
        return
    raise ConfigError(
        f"{cfg.name or cfg.source}: max_model_len {max_model_len:,} is greater than the "
        f"model's derived max_model_len {derived:,} ({_length_key(cfg)}"
        + (f"; model_max_length {model_max:,}" if isinstance(model_max, int) else "")
        + "); vLLM refuses to start there (positions beyond it give NaN or out-of-bounds "
        "errors): give --max-model-len up to that, or set VLLM_ALLOW_LONG_MAX_MODEL_LEN=1 "
        "as vLLM allows", field="max_model_len", value=str(max_model_len),
        derived_max_model_len=derived)


def plan_model(
    model: str | Path | ModelConfig,
    *,
    kv_cache_memory_bytes: int | list[int] | None = None,
    max_model_len: int | None = None,
    block_size: int | None = None,
    kv_cache_dtype: str = "auto",
    tensor_parallel_size: int = 1,
    pipeline_parallel_size: int = 1,
    max_num_batched_tokens: int = 8192,
    max_num_encoder_input_tokens: int | None = None,
    mamba_cache_mode: str | None = "none",
    num_speculative_tokens: int = 0,
    include_mtp_layers: bool = False,
    enable_prefix_caching: bool = True,
    mamba_ssm_cache_dtype: str | None = None,
    gpu: Any = None,
    gpu_memory_bytes: int | None = None,
    **plan_options: Any,
) -> KVCacheConfig:
    """Plan the KV cache of a model (a config.json path, a folder, an embedded name, a
    HuggingFace id ``org/name[@revision]`` (:mod:`kvcore.models.hub`), or a
    :class:`ModelConfig`), per rank.

    ``max_model_len`` None = the config's ``max_position_embeddings``; -1 = the longest
    that fits.  ``max_num_encoder_input_tokens`` None = the config's
    ``max_source_positions`` (encoder-decoder models).  Other options are passed to
    :func:`kvcore.planning.plan`.  The returned config's ``stats`` also carry
    ``model``, ``model_type`` and ``layers_per_kind``.

    With ``gpu`` (a catalog name) or ``gpu_memory_bytes`` the KV budget comes from the
    GPU: use :func:`kvcore.plan_model` (:func:`kvcore.deploy.plan_model`), which calls
    :func:`kvcore.deploy.budget.plan_on_gpu` (which also takes
    ``gpu_memory_utilization``, ``overhead_bytes``, ``data_parallel_size``, ...).
    ``max_model_len`` above the config's derived length (``max_position_embeddings``,
    scaled by a linear / dynamic RoPE factor, or ``model_max_length`` when larger) is a
    ConfigError naming both, as vLLM 0.32 refuses it (``_get_and_verify_max_len``);
    vLLM's override ``VLLM_ALLOW_LONG_MAX_MODEL_LEN=1`` in the environment allows it.
    Booleans (``include_mtp_layers``, ``enable_prefix_caching``) must be real bools.
    ``mamba_cache_mode`` None: the mode vLLM 0.32 runs the model with
    (:func:`vllm_mamba_cache_mode`: ``align`` on a hybrid with prefix caching on; a
    note says so), the CLI's default.

    Raises ConfigError, MissingPluginError, UnknownModelTypeError,
    NotEnoughMemoryError (see :func:`layer_specs_for` and :func:`kvcore.planning.plan`).
    """
    from kvcore.planning import plan
    from kvcore.units import plain_int, plain_ints

    # numpy integers as the equal plain int, once at this boundary (bool, floats and
    # text stay as given, for the checks below to name)
    plan_options = plain_ints(plan_options)
    max_model_len, max_num_batched_tokens, max_num_encoder_input_tokens, \
        num_speculative_tokens, pipeline_parallel_size = (
            plain_int(max_model_len), plain_int(max_num_batched_tokens),
            plain_int(max_num_encoder_input_tokens), plain_int(num_speculative_tokens),
            plain_int(pipeline_parallel_size))
    if isinstance(kv_cache_memory_bytes, (list, tuple)):
        kv_cache_memory_bytes = [plain_int(v) for v in kv_cache_memory_bytes]
    else:
        kv_cache_memory_bytes = plain_int(kv_cache_memory_bytes)
    _GPU_KEYS = ("gpu_memory_utilization", "overhead_bytes", "data_parallel_size",
                 "enable_expert_parallel", "max_num_seqs", "cuda_graphs",
                 "raise_if_not_fits")
    if gpu is not None or gpu_memory_bytes is not None:
        # GPU-fit planning lives in kvcore.deploy, which builds on this module (one
        # direction: planning never imports deploy); kvcore.plan_model dispatches there
        raise ConfigError("gpu=/gpu_memory_bytes=: the budget from a GPU is planned by "
                          "kvcore.plan_model (kvcore.deploy.plan_model) or "
                          "kvcore.deploy.plan_on_gpu; kvcore.models.planner.plan_model "
                          "plans a given kv_cache_memory_bytes",
                          field="gpu" if gpu is not None else "gpu_memory_bytes")
    gpu_only = [k for k in _GPU_KEYS if k in plan_options]
    if gpu_only:
        raise ConfigError(f"{gpu_only[0]} needs a GPU: give gpu= (a catalog name, see "
                          f"kvcore gpus) or gpu_memory_bytes=", field=gpu_only[0])
    for name, flag in (("include_mtp_layers", include_mtp_layers),
                       ("enable_prefix_caching", enable_prefix_caching)):
        if not isinstance(flag, bool):
            raise ConfigError(f"{name} must be True or False, got {flag!r}", field=name,
                              value=repr(flag))
    if isinstance(kv_cache_memory_bytes, (list, tuple)) and len(kv_cache_memory_bytes) > 1 \
            and pipeline_parallel_size == 1:
        # one budget per pipeline stage: the list sets the stage count
        pipeline_parallel_size = len(kv_cache_memory_bytes)
    hub_note = ""
    if not isinstance(model, ModelConfig):  # a HuggingFace id (kvcore.models.hub)
        from kvcore.models.hub import resolve_model

        model, hub_note = resolve_model(model)
    cfg = model if isinstance(model, ModelConfig) else load_model_config(model)
    from kvcore.units import as_int

    checked = []
    for name, value in (("tensor_parallel_size", tensor_parallel_size),
                        ("pipeline_parallel_size", pipeline_parallel_size)):
        number = as_int(value)  # numpy integers too, as plain ints
        if number is None or number < 1:
            raise ConfigError(f"{name} must be a positive int, got {value!r}", field=name)
        checked.append(number)
    tensor_parallel_size, pipeline_parallel_size = checked
    if block_size is not None:
        number = as_int(block_size)
        if number is None or number < 1:
            raise ConfigError(f"block_size must be a positive int, got {block_size!r}",
                              field="block_size")
        block_size = number
    kbs = as_int(plan_options.get("kernel_block_size"))
    if kbs is not None:
        plan_options["kernel_block_size"] = kbs
    mode_note = None
    if mamba_cache_mode is None:
        if not isinstance(enable_prefix_caching, bool):
            raise ConfigError(f"enable_prefix_caching must be True or False, got "
                              f"{enable_prefix_caching!r}", field="enable_prefix_caching")
        mamba_cache_mode = vllm_mamba_cache_mode(
            cfg, enable_prefix_caching, tensor_parallel_size=tensor_parallel_size,
            pipeline_parallel_size=pipeline_parallel_size)
        mode_note = vllm_mamba_mode_note(mamba_cache_mode)
    cache = CacheConfig(block_size=block_size, kv_cache_dtype=kv_cache_dtype,
                        tensor_parallel_size=tensor_parallel_size,
                        pipeline_parallel_size=pipeline_parallel_size,
                        mamba_cache_mode=mamba_cache_mode,
                        num_speculative_tokens=num_speculative_tokens,
                        include_mtp_layers=include_mtp_layers,
                        mamba_ssm_cache_dtype=mamba_ssm_cache_dtype)
    specs = layer_specs_for(cfg, cache)
    raised_note = _check_user_block_size(block_size, plan_options.get("kernel_block_size"),
                                         specs)
    if max_model_len is None:
        max_model_len = default_max_model_len(cfg)
        if max_model_len is None:
            raise ConfigError(f"{cfg.source or cfg.name}: the config has no "
                              f"max_position_embeddings; give the length with "
                              f"--max-model-len N (max_model_len=N in Python)",
                              field="max_position_embeddings")
    else:
        _check_max_model_len(cfg, max_model_len)
    if max_num_encoder_input_tokens is None:
        max_num_encoder_input_tokens = cfg.get_int("max_source_positions", 0, minimum=0)
    is_enc_dec = any(s.kind == "cross_attention" for s in specs.values())
    config = plan(
        specs,
        kv_cache_memory_bytes=kv_cache_memory_bytes,
        max_model_len=max_model_len,
        max_num_batched_tokens=max_num_batched_tokens,
        max_num_encoder_input_tokens=max_num_encoder_input_tokens,
        mamba_cache_mode=mamba_cache_mode,
        tensor_parallel_size=tensor_parallel_size,
        pipeline_parallel_size=pipeline_parallel_size,
        num_speculative_tokens=num_speculative_tokens,
        enable_prefix_caching=enable_prefix_caching and not is_enc_dec,
        max_model_len_limit=plan_options.pop("max_model_len_limit", None)
        or default_max_model_len(cfg),
        **plan_options,
    )
    config.stats.update({
        "model": cfg.name,
        "model_type": cfg.model_type,
        "model_source": cfg.source,
        "kv_cache_dtype": kv_cache_dtype if kv_cache_dtype != "auto"
        else (cfg.kv_cache_dtype or "auto"),
        "model_dtype": cfg.dtype,
        "layers_per_kind": dict(Counter(s.kind for s in specs.values())),
        "num_layers": len(specs),
    })
    if hub_note:
        config.stats.notes = [*(config.stats.notes or []), hub_note]
    if mode_note:
        config.notes.append(mode_note)
    if raised_note:
        used = max((g.spec.block_size for g in config.kv_cache_groups
                    if g.spec.scales_with_block_size), default=0)
        config.notes.append(f"{raised_note[0]}: attention block size {used}")
        config.stats.update({"block_size_raised": {**raised_note[1],
                                                   "attention_block_size": used}})
    return config


def _check_user_block_size(block_size: int | None, kernel_block_size: Any,
                           specs: dict[str, Any]
                           ) -> tuple[str, dict[str, int]] | None:
    """A block size the user gave is never changed without a word (vLLM 0.32).

    vLLM keeps a ``--block-size`` the user set (``user_specified_block_size``) and
    selects an attention backend whose kernel block sizes divide it
    (``AttentionBackend.supports_block_size``); none does when the size is not a
    multiple of the kernel block size, and the engine refuses to start.  Only a hybrid
    model (Mamba / linear-attention state layers) has its block size raised by vLLM
    (``Platform._align_hybrid_block_size``, "may override user settings", logged).
    So: a model without state layers is a ConfigError; a hybrid model gets a note and
    ``block_size_raised`` in its stats.  An automatically chosen size (block_size
    None) may be raised silently.
    """
    if block_size is None or type(kernel_block_size) is not int \
            or kernel_block_size < 1 or block_size % kernel_block_size == 0:
        return None
    valid = math.lcm(block_size, kernel_block_size)
    hybrid = any(not s.scales_with_block_size for s in specs.values())
    if not hybrid:
        raise ConfigError(
            f"block_size {block_size} is not a multiple of kernel_block_size "
            f"{kernel_block_size}: vLLM 0.32 finds no attention backend for it and "
            f"refuses to start; give a block size that is a multiple of "
            f"{kernel_block_size} (e.g. {valid}), or leave the block size out to have "
            f"one chosen", field="block_size", value=block_size)
    note = (f"block_size {block_size} (given) is not a multiple of kernel_block_size "
            f"{kernel_block_size}: raised to a multiple of {kernel_block_size}, as vLLM "
            f"0.32 raises a hybrid model's block size (Platform._align_hybrid_block_size,"
            f" which may override --block-size)")
    return note, {"block_size": block_size, "kernel_block_size": kernel_block_size}
