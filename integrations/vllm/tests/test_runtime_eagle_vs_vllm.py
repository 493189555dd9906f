"""kvcore's own runtime (``kvcore.runtime.KVCacheManager``, not the bridge) with EAGLE
on hybrids against vLLM 0.32's ``KVCacheManager`` (issue 24, item 6): the same seeded
admissions, decodes and frees on one planned layout give the same hit length at every
lookup, the same hit blocks per group (real blocks, by position), and the same number
of blocks entered in each group's prefix cache (the BlockStored events).

vLLM keeps only some sliding-window blocks in its cache by default (its retention
policy); here its config asks for every full block (``prefix_cache_retention_interval
= None``, vLLM's dense setting), which is what kvcore's runtime caches, and the pool is
large enough that nothing is evicted, so both caches hold the same prefixes and the
hits differ only if the EAGLE rule does."""

from __future__ import annotations

import random

import pytest
from kvcore_vllm.harness import Workload, make_scheduler
from kvcore_vllm.specs import from_vllm_config

from kvcore.runtime import KVCacheManager

SWA = ("sliding", {"sliding_window": 64})
FULL = ("full", {})
LAYOUTS = {
    "sliding+full": [SWA, FULL],
    "gemma_like": [SWA] * 5 + [FULL],
    "two_windows+full": [("sliding", {"sliding_window": 32}), SWA, FULL],
    "full": [FULL, FULL],
    "sliding_only": [SWA],
}
MAX_LEN = 512


def _managers(layers, eagle: bool):
    from vllm.v1.core.kv_cache_manager import KVCacheManager as VllmManager

    s = make_scheduler(Workload.shared_prefixes(0, layers=layers, max_model_len=MAX_LEN,
                                                num_blocks=3000))
    vcfg = s.kv_cache_config
    vcfg.prefix_cache_retention_interval = None  # vLLM's dense retention
    bs = s.block_size
    ref = VllmManager(kv_cache_config=vcfg, max_model_len=MAX_LEN, scheduler_block_size=bs,
                      hash_block_size=bs, max_in_flight_tokens=MAX_LEN,
                      enable_caching=True, use_eagle=eagle, enable_kv_cache_events=True)
    got = KVCacheManager(from_vllm_config(vcfg, max_model_len=MAX_LEN),
                         max_model_len=MAX_LEN, use_eagle=eagle, enable_events=True)
    return ref, got, bs


def _hit_shape(blocks_per_group):
    """Per group: the table positions holding a real block."""
    return [tuple(i for i, b in enumerate(g) if not b.is_null) for g in blocks_per_group]


def _stored(events, kind_name: str) -> dict[int, int]:
    out: dict[int, int] = {}
    for e in events:
        if type(e).__name__ == kind_name:
            g = getattr(e, "group_idx", None)
            g = getattr(e, "group_id", g)
            out[g] = out.get(g, 0) + len(e.block_hashes)
    return out


@pytest.mark.parametrize("eagle", (True, False))
@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_kvcore_runtime_hits_equal_vllm(layout: str, seed: int, eagle: bool) -> None:
    from vllm import SamplingParams
    from vllm.utils.hashing import sha256
    from vllm.v1.core.kv_cache_utils import get_request_block_hasher, init_none_hash
    from vllm.v1.request import Request, RequestStatus

    init_none_hash(sha256)
    ref, got, bs = _managers(LAYOUTS[layout], eagle)
    hasher = get_request_block_hasher(bs, sha256)
    rng = random.Random(seed)
    prefixes = [[rng.randrange(1, 999) for _ in range(rng.randrange(16, 300))]
                for _ in range(3)]
    live: dict[str, tuple] = {}
    hits = n = 0
    for _ in range(250):
        op = rng.random()
        if op < 0.4 or not live:
            base = rng.choice(prefixes)
            r = rng.random()
            prompt = list(base) if r < 0.25 else \
                base[:rng.randrange(1, len(base) + 1)] if r < 0.5 else \
                list(base) + [rng.randrange(1, 999) for _ in range(rng.randrange(1, 80))]
            prompt = prompt[:MAX_LEN - 40]
            rid = f"q{n}"
            n += 1
            vr = Request(rid, list(prompt), SamplingParams(max_tokens=30), None,
                         block_hasher=hasher)
            kr = got.make_request(rid, prompt)
            vb, vhit, _ = ref.get_computed_blocks(vr)
            kb, khit = got.get_computed_blocks(kr)
            assert khit == vhit, f"lookup {rid} ({len(prompt)} tokens): kvcore {khit}, " \
                                 f"vLLM {vhit}"
            assert _hit_shape(kb.blocks) == _hit_shape(vb.blocks), rid
            hits += khit
            vnew = ref.allocate_slots(vr, vr.num_tokens - vhit, num_new_computed_tokens=vhit,
                                      new_computed_blocks=vb)
            knew = got.allocate_slots(kr, kr.num_tokens - khit, khit, kb)
            assert (vnew is None) == (knew is None)
            if vnew is not None:
                vr.status = RequestStatus.RUNNING
                vr.num_computed_tokens = kr.num_computed_tokens = len(prompt)
                live[rid] = (vr, kr)
        elif op < 0.85:
            rid = rng.choice(sorted(live))
            vr, kr = live[rid]
            if vr.num_tokens >= MAX_LEN - 1:
                continue
            tok = rng.randrange(1, 999)
            vr.append_output_token_ids(tok)
            kr.append_output_token_ids(tok)
            vnew, knew = ref.allocate_slots(vr, 1), got.allocate_slots(kr, 1)
            assert (vnew is None) == (knew is None)
            if vnew is not None:
                vr.num_computed_tokens += 1
                kr.num_computed_tokens += 1
        else:
            rid = rng.choice(sorted(live))
            vr, kr = live.pop(rid)
            ref.free(vr)
            got.free(kr)
        assert _stored(got.take_events(), "BlockStored") == \
            _stored(ref.take_events(), "BlockStored")
    assert hits > 0
