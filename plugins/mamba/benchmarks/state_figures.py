"""Print per-model recurrent-state figures and plans (CPU, no torch needed), and time the
state-copy kernel's torch reference on CPU.

    python3 plugins/mamba/benchmarks/state_figures.py [--budget-gib 20] [--max-model-len 32768]
"""

from __future__ import annotations

import argparse
import platform
import time
from collections import Counter

from kvcore import plan_model

MODELS = ["mamba2-2.7b", "mamba2attn-2.7b", "nemotron-h-56b-base-8k",
          "nemotron-3-nano-30b-a3b.aiconfigurator", "qwen3-next-80b-a3b-thinking",
          "qwen3.5-35b-a3b", "kimi-k3.aiconfigurator"]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--budget-gib", type=float, default=20.0)
    ap.add_argument("--max-model-len", type=int, default=32768)
    args = ap.parse_args()
    budget = int(args.budget_gib * 2**30)
    print(f"# {platform.node()} {platform.processor() or platform.machine()}, "
          f"budget {args.budget_gib} GiB, max_model_len {args.max_model_len}")
    print(f"{'model':42} {'mode':6} {'layers':36} {'state B/layer':>14} {'attn blk':>8} "
          f"{'pad %':>6} {'blocks':>8} {'max conc':>9}")
    for name in MODELS:
        for mode in ("none", "align"):
            cfg = plan_model(name, kv_cache_memory_bytes=budget,
                             max_model_len=args.max_model_len, mamba_cache_mode=mode)
            kinds = Counter(g.kind for g in cfg.kv_cache_groups for _ in g.layer_names)
            st = [g.spec for g in cfg.kv_cache_groups if g.kind == "mamba"]
            state = st[0].real_page_size_bytes if st else 0
            pad = 100 * (st[0].page_size_bytes - state) / state if st else 0.0
            attn = [g.block_size for g in cfg.kv_cache_groups if g.kind != "mamba"]
            print(f"{name:42} {mode:6} {dict(kinds)!s:36} {state:14,} "
                  f"{(attn[0] if attn else '-'):>8} {pad:6.1f} {cfg.num_blocks:8,} "
                  f"{cfg.stats['max_concurrency']:9.2f}")
    try:
        import torch
        from kvcore_mamba.kernels import copy_state_blocks_ref
    except ImportError:
        return
    # Nemotron-H-56B SSM state per block: 256 x 64 x 256 fp32 = 16 MiB
    state = torch.zeros(64, 256, 64, 256)
    src, dst = list(range(0, 32)), list(range(32, 64))
    copy_state_blocks_ref(state, src, dst)
    t0 = time.perf_counter()
    copy_state_blocks_ref(state, src, dst)
    dt = time.perf_counter() - t0
    nbytes = 32 * state[0].numel() * 4
    print(f"copy_state_blocks_ref, CPU: 32 x 16 MiB states in {dt * 1e3:.1f} ms "
          f"({2 * nbytes / dt / 1e9:.1f} GB/s read+write)")


if __name__ == "__main__":
    main()
