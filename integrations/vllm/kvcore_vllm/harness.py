"""Drive vLLM 0.32's real ``Scheduler`` on a CPU, without a model or a GPU.

Used by kvcore-vllm's differential tests and ``benchmarks/bench_vllm_scheduler.py``:
build one Scheduler with vLLM's ``KVCacheManager`` and one with
:class:`kvcore_vllm.KVCacheManager`, feed both the same requests and the same sampled
tokens (a seeded :class:`Workload`), and record every step's ``SchedulerOutput``, the
prefix-cache stats and the KV events in comparable plain data (:func:`run`).

What a Scheduler needs here (found by trial, see the vLLM reference README): a
``ModelConfig`` over a folder holding only a tiny Llama ``config.json``, a
``CacheConfig`` / ``SchedulerConfig`` / ``VllmConfig``, the specs registered
(``register_all_kvcache_specs``), ``kv_cache_layout = "LBNHC"`` and a ``KVCacheConfig``
from vLLM's planner; requests carry vLLM's block hasher (sha256).
"""

from __future__ import annotations

import json
import os
import random
import tempfile
import time
from dataclasses import dataclass, field
from typing import Any

from kvcore_vllm.installer import require_vllm

__all__ = ["Workload", "make_scheduler", "run", "canon_output", "canon_event", "LLAMA"]

LLAMA = {
    "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 256,
    "intermediate_size": 512, "num_attention_heads": 4, "num_key_value_heads": 2,
    "num_hidden_layers": 2, "vocab_size": 32000, "max_position_embeddings": 4096,
    "rms_norm_eps": 1e-5, "torch_dtype": "bfloat16", "head_dim": 64,
}

_MODEL_DIR: str | None = None


def _model_dir() -> str:
    global _MODEL_DIR
    if _MODEL_DIR is None:
        d = tempfile.mkdtemp(prefix="kvcore-vllm-model-")
        with open(os.path.join(d, "config.json"), "w") as f:
            json.dump(LLAMA, f)
        _MODEL_DIR = d
    return _MODEL_DIR


@dataclass
class Workload:
    """A seeded workload: layers, pool size, budgets and requests.

    layers: ``[(kind, params)]`` per layer: ``("full", {})``, ``("sliding",
        {"sliding_window": 64})``, ``("chunked", {"chunk": 64})``, ``("mamba", {})``
        (attention layers: 2 KV heads of 64 unless ``num_kv_heads`` / ``head_size``
        are given)
        (``align`` mode, or ``{"mode": "all" | "none"}``; the cache config's
        ``mamba_cache_mode`` is the Mamba layers' mode).
    num_blocks: blocks of the pool (counting the null block); None = plenty.
    requests: ``(request_id, prompt_token_ids, max_tokens, arrival_step)``.
    num_spec_tokens: ngram speculative tokens per step (0 = off); drafts are random
        tokens, accepted with probability ``accept``.
    planner: ``"vllm"`` or ``"kvcore"`` (:func:`kvcore_vllm.get_kv_cache_configs`).
    eagle: the Scheduler runs as with an EAGLE drafter (``num_spec_tokens`` > 0): its
        speculative method reads ``"eagle"``, so vLLM's own rules follow (the manager
        gets ``use_eagle=True`` and drops the last matched block of a hit; one
        lookahead slot per draft token; one prefill lookahead token; Mamba checkpoints
        one block back).  No draft model is loaded: the drafts are still the seeded
        random tokens, which is all the KV-cache manager sees of a drafter.
    prefix_caching: vLLM's ``enable_prefix_caching``.
    model: a kvcore embedded model config (e.g. ``"qwen3-next-80b-a3b-thinking"``):
        its layers' specs (kvcore's shapes and dtypes, ``to_vllm_spec``) replace
        ``layers``; in a Mamba hybrid the attention block size is raised as vLLM's
        platform does (``_align_hybrid_block_size``: the smallest multiple of
        ``block_size`` whose page holds a Mamba state) and the Mamba block follows it
        (``align``) or is ``max_model_len`` (``none``).
    mamba_cache_mode: ``"align"`` or ``"none"`` for ``model`` (None: from ``layers``:
        a Mamba layer's ``mode``, default ``align``).
    """

    seed: int
    layers: list[tuple[str, dict[str, Any]]]
    block_size: int = 16
    num_blocks: int | None = None
    max_model_len: int = 2048
    max_num_batched_tokens: int = 512
    max_num_seqs: int = 16
    long_prefill_token_threshold: int = 0
    num_spec_tokens: int = 0
    accept: float = 0.5
    requests: list[tuple[str, list[int], int, int]] = field(default_factory=list)
    #: per step: probability of aborting a random unfinished request, of
    #: ``reset_prefix_cache()`` (and of ``reset_prefix_cache(reset_running_requests=
    #: True)``); fraction of requests carrying a ``cache_salt``
    abort: float = 0.0
    reset: float = 0.0
    reset_running: float = 0.0
    salted: float = 0.0
    #: vLLM's AsyncScheduler, one step in flight (outputs arrive a step late)
    async_scheduling: bool = False
    log_stats: bool = True
    events: bool = True
    planner: str = "vllm"
    eagle: bool = False
    prefix_caching: bool = True
    model: str | None = None
    mamba_cache_mode: str | None = None
    #: accept_fn(request_id, k, num_drafts) -> drafts accepted at the request's k-th
    #: verification (0, 1, ...): a fixed acceptance pattern instead of ``accept``
    accept_fn: Any = None

    @classmethod
    def shared_prefixes(cls, seed: int, n: int = 24, **kw: Any) -> Workload:
        """Requests drawn from a few shared prefixes plus private suffixes, arriving
        over the first steps (prefix caching hits, evictions)."""
        rng = random.Random(seed)
        prefixes = [[rng.randrange(1, 32000) for _ in range(rng.randrange(16, 200))]
                    for _ in range(4)]
        reqs: list[tuple[str, list[int], int, int]] = []
        for i in range(n):
            p = list(rng.choice(prefixes)) if rng.random() < 0.8 else []
            p += [rng.randrange(1, 32000) for _ in range(rng.randrange(1, 120))]
            reqs.append((f"r{i}", p, rng.randrange(1, 40), rng.randrange(0, 30)))
        kw.setdefault("layers", [("full", {}), ("full", {})])
        return cls(seed=seed, requests=reqs, **kw)


    @classmethod
    def random(cls, seed: int) -> Workload:
        """A configuration drawn from a seeded generator: block size, a mix of full,
        sliding-window (several windows) and chunked-local layers, pool size (tight to
        plenty), token budget, long-prefill threshold, speculative tokens and their
        acceptance, batch size, sometimes a Mamba hybrid (``align`` mode, with or
        without speculative blocks), sync or async scheduling; requests with shared prefixes, exact resends and
        block-aligned prompts."""
        rng = random.Random(10_007 * seed + 3)
        bs = rng.choice([16, 32])
        n_layers = rng.randrange(1, 7)
        kinds: list[tuple[str, dict[str, Any]]] = []
        window = rng.choice([17, 32, 48, 64, 100, 256])
        chunk = rng.choice([2, 4, 8]) * bs
        mamba = rng.random() < 0.25  # a Mamba hybrid (align mode)
        spec_blocks = rng.choice([0, 0, 1, 2]) if mamba else 0
        for i in range(n_layers):
            r = rng.random()
            if mamba and (i == 0 or r < 0.5):
                kinds.append(("mamba", {"spec_blocks": spec_blocks}))
            elif r < 0.45:
                kinds.append(("full", {}))
            elif r < 0.85:
                kinds.append(("sliding", {"sliding_window": window}))
            else:
                kinds.append(("chunked", {"chunk": chunk}))
        max_model_len = rng.choice([256, 512])
        w = cls.shared_prefixes(
            seed, n=rng.randrange(8, 40), layers=kinds, block_size=bs,
            max_model_len=max_model_len,
            num_blocks=rng.choice([max_model_len // bs + 4, max_model_len // bs * 2,
                                   max_model_len // bs * 6, 2000]),
            max_num_batched_tokens=rng.choice([32, 64, 128, 512]),
            long_prefill_token_threshold=rng.choice([0, 0, 16, 48]),
            num_spec_tokens=rng.choice([0, 0, 2, 4]), accept=rng.random(),
            max_num_seqs=rng.choice([4, 16]),
            abort=rng.choice([0.0, 0.0, 0.05]), reset=rng.choice([0.0, 0.0, 0.05]),
            reset_running=rng.choice([0.0, 0.0, 0.02]), salted=rng.choice([0.0, 0.3]),
            planner=rng.choice(["vllm", "vllm", "kvcore"]))
        # exact resends and block-aligned prompts; fit every request in max_model_len
        reqs: list[tuple[str, list[int], int, int]] = []
        for i, (rid, prompt, mt, arr) in enumerate(w.requests):
            if i and rng.random() < 0.15:
                prompt = list(rng.choice(reqs)[1])
            elif rng.random() < 0.15:
                prompt = prompt[:max(bs, len(prompt) // bs * bs)]
            prompt = prompt[:max_model_len - 48]
            mt = min(mt, max_model_len - len(prompt) - 8)
            reqs.append((rid, prompt, max(mt, 1), arr))
        w.requests = reqs
        w.async_scheduling = w.num_spec_tokens == 0 and rng.random() < 0.4
        return w


def _spec(kind: str, params: dict[str, Any], block_size: int) -> Any:
    import torch
    from vllm.v1.kv_cache_interface import (
        ChunkedLocalAttentionSpec,
        FullAttentionSpec,
        SlidingWindowSpec,
    )

    common = dict(block_size=block_size, num_kv_heads=params.get("num_kv_heads", 2),
                  head_size=params.get("head_size", 64), dtype=torch.bfloat16)
    if kind == "full":
        return FullAttentionSpec(**common)
    if kind == "sliding":
        return SlidingWindowSpec(sliding_window=params["sliding_window"], **common)
    if kind == "chunked":
        return ChunkedLocalAttentionSpec(attention_chunk_size=params["chunk"], **common)
    if kind == "mamba":  # a Mamba2-like state: conv (4 x 256) and SSM (8 x 32 x 32)
        from vllm.v1.kv_cache_interface import MambaSpec

        return MambaSpec(block_size=block_size, shapes=((4, 256), (8, 32, 32)),
                         dtypes=(torch.bfloat16, torch.bfloat16),
                         mamba_cache_mode=params.get("mode", "align"),
                         num_speculative_blocks=params.get("spec_blocks", 0))
    raise ValueError(f"unknown layer kind {kind!r}")


def _model_specs(w: Workload, mode: str) -> dict[str, Any]:
    """vLLM specs of a kvcore embedded model (``Workload.model``), block sizes as vLLM
    0.32 sets them for a Mamba hybrid: ``HybridAttentionMambaModelConfig`` /
    ``Platform._align_hybrid_block_size`` raise the attention block size to the
    smallest multiple of ``w.block_size`` (the kernel block) whose page is at least the
    largest Mamba state; the Mamba pages are padded to that page; the Mamba block size
    is the attention block in ``align`` mode and ``max_model_len`` in ``none`` mode
    (``MambaModelConfig``)."""
    import dataclasses

    from vllm.v1.kv_cache_interface import AttentionSpec, MambaSpec

    from kvcore.models import load_model_config
    from kvcore.models.config import CacheConfig as KCacheConfig
    from kvcore.models.planner import layer_specs_for
    from kvcore_vllm.specs import to_vllm_spec

    assert w.model is not None
    kspecs = layer_specs_for(load_model_config(w.model),
                             KCacheConfig(block_size=w.block_size, mamba_cache_mode=mode))
    specs = {n: to_vllm_spec(s) for n, s in kspecs.items()}
    attn = [s for s in specs.values() if isinstance(s, AttentionSpec)]
    mamba = [s for s in specs.values() if isinstance(s, MambaSpec)]
    if not attn or not mamba:
        return specs
    per_token = dataclasses.replace(attn[0], block_size=1).page_size_bytes
    state = max(dataclasses.replace(m, page_size_padded=None).page_size_bytes
                for m in mamba)
    bs = w.block_size * -(-state // (w.block_size * per_token))
    page = bs * per_token
    for n, s in list(specs.items()):
        if isinstance(s, AttentionSpec):
            specs[n] = dataclasses.replace(s, block_size=bs)
        elif isinstance(s, MambaSpec):
            specs[n] = dataclasses.replace(
                s, block_size=bs if mode == "align" else w.max_model_len,
                mamba_cache_mode=mode, page_size_padded=page)
    return specs


def make_scheduler(w: Workload, manager: str = "vllm", **manager_kw: Any) -> Any:
    """vLLM's Scheduler for a workload; ``manager="kvcore"`` builds it with
    :class:`kvcore_vllm.KVCacheManager` (patched into the scheduler module for the
    construction only)."""
    require_vllm("harness.make_scheduler()")
    from vllm.config import (
        CacheConfig,
        ModelConfig,
        SchedulerConfig,
        SpeculativeConfig,
        VllmConfig,
    )
    from vllm.v1.core import kv_cache_utils
    from vllm.v1.core.sched import async_scheduler
    from vllm.v1.core.sched import scheduler as sched_mod
    from vllm.v1.core.single_type_kv_cache_manager import register_all_kvcache_specs
    from vllm.v1.structured_output import StructuredOutputManager

    mc = ModelConfig(model=_model_dir(), skip_tokenizer_init=True,
                     max_model_len=w.max_model_len, dtype="bfloat16")
    # the cache config's mode is the Mamba layers' (``params["mode"]``, default align)
    mode = w.mamba_cache_mode or next(
        (p.get("mode", "align") for k, p in w.layers if k == "mamba"), "none")
    cc = CacheConfig(block_size=w.block_size, enable_prefix_caching=w.prefix_caching,
                     mamba_cache_mode=mode)
    sc = SchedulerConfig(max_num_batched_tokens=w.max_num_batched_tokens,
                         max_num_seqs=w.max_num_seqs, max_model_len=w.max_model_len,
                         is_encoder_decoder=False,
                         long_prefill_token_threshold=w.long_prefill_token_threshold,
                         enable_chunked_prefill=True)
    kw: dict[str, Any] = dict(model_config=mc, cache_config=cc, scheduler_config=sc)
    if w.num_spec_tokens:
        kw["speculative_config"] = SpeculativeConfig(
            method="ngram", num_speculative_tokens=w.num_spec_tokens,
            prompt_lookup_max=4, prompt_lookup_min=2)
    vc = VllmConfig(**kw)
    if w.eagle:
        if not w.num_spec_tokens:
            raise ValueError("Workload.eagle needs num_spec_tokens > 0")
        # vLLM's EAGLE rules without a draft model: the method name is what the
        # Scheduler, the lookahead properties and the manager's use_eagle read
        object.__setattr__(vc.speculative_config, "method", "eagle")
    register_all_kvcache_specs(vc)
    cc.kv_cache_layout = "LBNHC"
    # a Mamba layer without prefix caching (mode "none") holds one state for the whole
    # sequence: vLLM's MambaModelConfig sets mamba_block_size = max_model_len
    specs = _model_specs(w, mode) if w.model else {
        f"model.layers.{i}.self_attn.attn": _spec(
            k, p, w.max_model_len if k == "mamba" and p.get("mode") == "none"
            else w.block_size)
        for i, (k, p) in enumerate(w.layers)}
    if w.model:  # the raised attention block is the cache config's (vLLM's platform)
        cc.block_size = min(s.block_size for s in specs.values())
    page = sum(s.page_size_bytes for s in specs.values())
    blocks = w.num_blocks or 4096
    if w.planner == "kvcore":
        from kvcore_vllm.planner import get_kv_cache_configs
    else:
        get_kv_cache_configs = kv_cache_utils.get_kv_cache_configs
    # the engine core's step: the scheduler sees one representative spec per group
    kcfg = kv_cache_utils.generate_scheduler_kv_cache_config(
        get_kv_cache_configs(vc, [specs], [page * blocks]))
    cc.num_gpu_blocks = kcfg.num_blocks
    if w.events:
        from vllm.config import KVEventsConfig

        vc.kv_events_config = KVEventsConfig(enable_kv_cache_events=True,
                                             publisher="null")
    # the engine core's step: scheduler and hash block sizes from the plan
    sched_bs, hash_bs = kv_cache_utils.resolve_kv_cache_block_sizes(kcfg, vc)
    orig = sched_mod.KVCacheManager
    if manager == "kvcore":
        import functools

        from kvcore_vllm.manager import KVCacheManager

        sched_mod.KVCacheManager = functools.partial(KVCacheManager, **manager_kw)
    cls = async_scheduler.AsyncScheduler if w.async_scheduling else sched_mod.Scheduler
    try:
        s = cls(vllm_config=vc, kv_cache_config=kcfg,
                                structured_output_manager=StructuredOutputManager(vc),
                                block_size=sched_bs, hash_block_size=hash_bs,
                                log_stats=w.log_stats)
    finally:
        sched_mod.KVCacheManager = orig
    return s


def canon_output(out: Any) -> dict[str, Any]:
    """A SchedulerOutput as plain comparable data."""
    c = out.scheduled_cached_reqs
    return {
        "new": [(r.req_id, r.num_computed_tokens, tuple(map(tuple, r.block_ids)),
                 tuple(r.prompt_token_ids or ())) for r in out.scheduled_new_reqs],
        "cached": [(rid, c.num_computed_tokens[i],
                    None if c.new_block_ids[i] is None else tuple(map(tuple,
                                                                      c.new_block_ids[i])),
                    rid in c.resumed_req_ids, tuple(c.new_token_ids[i])
                    if i < len(c.new_token_ids) else ())
                   for i, rid in enumerate(c.req_ids)],
        "num_scheduled_tokens": dict(out.num_scheduled_tokens),
        "total": out.total_num_scheduled_tokens,
        "spec": {k: list(v) for k, v in out.scheduled_spec_decode_tokens.items()},
        "finished": sorted(out.finished_req_ids),
        "preempted": sorted(out.preempted_req_ids or ()),
    }


def canon_event(ev: Any) -> tuple[Any, ...]:
    """A KV event as a comparable tuple (every field vLLM publishes)."""
    import msgspec

    return (type(ev).__name__, msgspec.to_builtins(ev))


def run(w: Workload, manager: str = "vllm", max_steps: int = 2000,
        record: bool = True, **manager_kw: Any) -> dict[str, Any]:
    """Run a workload to completion; returns per-step canonical outputs, prefix-cache
    stats, KV events, prefix-cache resets ``(step, reset_running_requests, result)``,
    the number of steps, wall seconds and seconds inside the KV-cache manager's
    methods."""
    require_vllm("harness.run()")
    from vllm import SamplingParams
    from vllm.utils.hashing import sha256
    from vllm.v1.core.kv_cache_utils import get_request_block_hasher, init_none_hash
    from vllm.v1.outputs import DraftTokenIds, ModelRunnerOutput
    from vllm.v1.request import Request, RequestStatus

    init_none_hash(sha256)
    sched = make_scheduler(w, manager, **manager_kw)
    kvm = sched.kv_cache_manager
    timer = _Timer(kvm) if not record else None
    events: list[Any] = []
    if record and w.events:
        pub = sched.kv_event_publisher
        orig_publish = pub.publish

        def publish(batch: Any) -> None:
            events.extend((step, canon_event(e)) for e in batch.events)
            orig_publish(batch)
        pub.publish = publish
    hasher = get_request_block_hasher(sched.hash_block_size, sha256)
    rng = random.Random(w.seed * 7919 + 1)
    pending = sorted(w.requests, key=lambda r: r[3])
    steps: list[Any] = []
    stats: list[Any] = []
    resets: list[tuple[int, bool, bool]] = []
    in_flight: list[Any] = []
    verified: dict[str, int] = {}
    step = 0
    t0 = time.perf_counter()
    while step < max_steps:
        while pending and pending[0][3] <= step:
            rid, prompt, max_tokens, _ = pending.pop(0)
            sp = SamplingParams(max_tokens=max_tokens, ignore_eos=True, temperature=0.0)
            salt = f"salt{rng.randrange(2)}" if rng.random() < w.salted else None
            sched.add_request(Request(rid, list(prompt), sp, None, block_hasher=hasher,
                                      arrival_time=float(step), cache_salt=salt))
        if not pending and not sched.has_unfinished_requests():
            break
        if w.abort and rng.random() < w.abort and sched.requests:
            victim = rng.choice(sorted(sched.requests))
            sched.finish_requests(victim, RequestStatus.FINISHED_ABORTED)
        if w.reset and rng.random() < w.reset:
            resets.append((step, False, sched.reset_prefix_cache()))
        if w.reset_running and rng.random() < w.reset_running:
            resets.append((step, True, sched.reset_prefix_cache(
                reset_running_requests=True)))
        out = sched.schedule()
        if record:
            steps.append(canon_output(out))
        req_ids = list(out.num_scheduled_tokens)
        sampled: list[list[int]] = []
        for r in req_ids:
            req = sched.requests[r]
            n_spec = len(out.scheduled_spec_decode_tokens.get(r, ()))
            done_prefill = req.num_computed_tokens >= req.num_tokens - n_spec
            if not done_prefill:
                sampled.append([])
                continue
            acc = 0
            if w.accept_fn is not None and n_spec:
                k = verified.get(r, 0)
                verified[r] = k + 1
                acc = max(0, min(n_spec, int(w.accept_fn(r, k, n_spec))))
            else:
                while acc < n_spec and rng.random() < w.accept:
                    acc += 1
            sampled.append([rng.randrange(1, 32000) for _ in range(acc + 1)])
        mro = ModelRunnerOutput(req_ids=req_ids,
                                req_id_to_index={r: i for i, r in enumerate(req_ids)},
                                sampled_token_ids=sampled)
        if w.async_scheduling:  # the previous step's output arrives now
            in_flight.append((out, mro))
            if len(in_flight) < 2 and (pending or sched.has_unfinished_requests()):
                step += 1
                continue
            out, mro = in_flight.pop(0)
        eco = sched.update_from_output(out, mro)
        if record:
            for e in eco.values():
                if e.scheduler_stats is not None and e.scheduler_stats.prefix_cache_stats:
                    p = e.scheduler_stats.prefix_cache_stats
                    stats.append((step, p.requests, p.queries, p.hits, p.preempted_requests,
                                  p.preempted_queries, p.preempted_hits, p.reset))
                    break
        if w.num_spec_tokens:
            drafts = [r for r in sched.running if not r.is_prefill_chunk]
            if drafts:
                sched.update_draft_token_ids(DraftTokenIds(
                    [r.request_id for r in drafts],
                    [[rng.randrange(1, 32000) for _ in range(w.num_spec_tokens)]
                     for _ in drafts]))
        step += 1
    while in_flight:
        out, mro = in_flight.pop(0)
        sched.update_from_output(out, mro)
    wall = time.perf_counter() - t0
    if record:  # one more (empty) step reports the requests finished in the last one
        steps.append(canon_output(sched.schedule()))
    return {"steps": steps, "stats": stats, "events": events, "resets": resets,
            "num_steps": step,
            "wall_s": wall, "manager_s": timer.total if timer else None,
            "usage": kvm.usage}


class _Timer:
    """Wraps a manager's public methods to sum the seconds spent inside them."""

    NAMES = ("get_computed_blocks", "allocate_slots", "free", "get_blocks",
             "get_block_ids", "take_events", "record_prefix_cache_stats",
             "make_prefix_cache_stats", "new_step_starts", "take_new_block_ids",
             "take_kv_cache_block_copies", "take_boundary_state_offloads",
             "cache_blocks", "remove_skipped_blocks", "estimate_cached_tokens")

    def __init__(self, mgr: Any) -> None:
        self.total = 0.0
        self.depth = 0  # only the outermost call counts (methods call each other)
        for name in self.NAMES:
            fn = getattr(mgr, name, None)
            if fn is not None:
                setattr(mgr, name, self._wrap(fn))

    def _wrap(self, fn: Any) -> Any:
        pc = time.perf_counter

        def inner(*a: Any, **k: Any) -> Any:
            if self.depth:
                return fn(*a, **k)
            self.depth += 1
            t = pc()
            try:
                return fn(*a, **k)
            finally:
                self.total += pc() - t
                self.depth -= 1
        return inner
