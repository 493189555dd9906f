"""Residency index speed and size: events applied per second on one core, bytes per
indexed block (tracemalloc), and query time.

    kvpy benchmarks/bench_residency_index.py [--blocks N] [--replicas R]

Events are kvcore's own ``BlockStored`` / ``BlockRemoved`` objects, one block each
(the worst case: vLLM batches several hashes per stored event), sha256 hashes
(32-byte ``bytes``, as events carry them), on a full-attention + sliding-window
config.  Goals from issue 25: 1 M events/s, 10 M blocks in under 2 GiB.  The default
sizes run in a few seconds; the figures scale linearly (dict per group).
"""

from __future__ import annotations

import argparse
import hashlib
import os
import platform
import time
import tracemalloc


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--blocks", type=int, default=300_000, help="blocks to index")
    ap.add_argument("--replicas", type=int, default=4)
    ap.add_argument("--per-event", type=int, default=1,
                    help="hashes per BlockStored event (vLLM batches a request's blocks)")
    a = ap.parse_args()

    from kvcore.kv_cache_config import KVCacheConfig, KVCacheGroupSpec
    from kvcore.routing import ResidencyIndex
    from kvcore.runtime import BlockRemoved, BlockStored
    from kvcore.specs import FullAttentionSpec, SlidingWindowSpec

    cfg = KVCacheConfig(num_blocks=1 << 20, kv_cache_tensors=(), max_model_len=1 << 20,
                        kv_cache_groups=(
        KVCacheGroupSpec(("f",), FullAttentionSpec(block_size=16, num_kv_heads=8,
                                                   head_size=128)),
        KVCacheGroupSpec(("s",), SlidingWindowSpec(block_size=16, num_kv_heads=8,
                                                   head_size=128, sliding_window=1024))))
    n, R, k = a.blocks, a.replicas, a.per_event
    # hash chains: one per 64-block "request", as a real stream would have them
    hashes = []
    parent = b"\0" * 32
    for i in range(n):
        if i % 64 == 0:
            parent = i.to_bytes(32, "little")
        parent = hashlib.sha256(parent + i.to_bytes(8, "little")).digest()
        hashes.append(parent)
    per = n // R
    # every block in both groups (a full + sliding-window model caches each block in
    # each group): n hashes -> 2 n indexed blocks
    stored = {r: [BlockStored(tuple(hashes[j:j + k]), None, (), 16, g)
                  for j in range(r * per, (r + 1) * per, k) for g in (0, 1)]
              for r in range(R)}
    removed = {r: [BlockRemoved(e.block_hashes, e.group_id) for e in evs]
               for r, evs in stored.items()}

    # memory (tracemalloc slows Python down, so timed separately below)
    ix = ResidencyIndex(cfg, replicas=range(R))
    tracemalloc.start()
    base = tracemalloc.get_traced_memory()[0]
    for r in range(R):
        ix.apply(r, stored[r], 0)
    mem = tracemalloc.get_traced_memory()[0] - base
    tracemalloc.stop()
    ix = ResidencyIndex(cfg, replicas=range(R))
    t0 = time.perf_counter()
    for r in range(R):
        ix.apply(r, stored[r], 0)
    t_store = time.perf_counter() - t0
    nblocks = sum(ix.state(r).num_blocks for r in range(R))
    n_events = sum(len(v) for v in stored.values())

    # queries: 64-block prefixes, every replica answered
    probes = [hashes[i:i + 64] for i in range(0, min(n, 64 * 200), 64)]
    t0 = time.perf_counter()
    for p in probes:
        ix.longest_prefix(p, 64 * 16 + 1)
    t_query = (time.perf_counter() - t0) / len(probes)

    t0 = time.perf_counter()
    for r in range(R):
        ix.apply(r, removed[r], 1)
    t_remove = time.perf_counter() - t0
    assert sum(ix.state(r).num_blocks for r in range(R)) == 0

    # the JSON form (hex hashes decoded per event), on a slice
    from kvcore.routing import event_to_dict

    sl = stored[0][:100_000]
    dicts = [event_to_dict(e) for e in sl]
    jx = ResidencyIndex(cfg)
    t0 = time.perf_counter()
    jx.apply(0, dicts, 0)
    t_json = (time.perf_counter() - t0) / len(dicts)

    # bytes the hashes themselves take (held by the events too, so not in `mem`)
    key_bytes = 33 + 32
    per_block = mem / nblocks + key_bytes
    print(f"machine: {platform.processor() or platform.machine()}, "
          f"{os.cpu_count()} CPUs, Python {platform.python_version()}")
    print(f"command: kvpy benchmarks/bench_residency_index.py --blocks {n} "
          f"--replicas {R} --per-event {k}")
    print(f"indexed blocks:        {nblocks:,} in {R} replicas x 2 groups")
    print(f"BlockStored events/s:  {n_events / t_store:,.0f} "
          f"({nblocks / t_store:,.0f} blocks/s)")
    print(f"BlockRemoved events/s: {n_events / t_remove:,.0f}")
    print(f"JSON-dict BlockStored events/s: {1 / t_json:,.0f}")
    print(f"bytes per block:       {mem / nblocks:.0f} in the index (dict slots; the "
          f"hash objects, {key_bytes} B each, are the events' and shared by both "
          f"groups); with one hash object per block {per_block:.0f}")
    print(f"10 M blocks:           {mem / nblocks * 1e7 / 2**30:.2f} GiB index, "
          f"{per_block * 1e7 / 2**30:.2f} GiB with a hash object each")
    print(f"query (64 blocks, {R} replicas, full+sliding): {t_query * 1e6:.0f} us")


if __name__ == "__main__":
    main()
