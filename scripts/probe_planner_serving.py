"""Probe: does kvcore's planner pick layouts vLLM 0.32's real Scheduler serves worse?

For each seeded case (a random layer mix, pool, block size, lengths, budgets and a
random workload) vLLM 0.32's own Scheduler (fake model, CPU:
``kvcore_vllm.harness``) runs the workload twice with the same KV-cache memory: once on
vLLM's own planner's layout (``planner="vllm"``) and once on kvcore's
(``planner="kvcore"``, :func:`kvcore_vllm.get_kv_cache_configs`).  Printed per case:
steps, preemptions, finished requests and the two layouts (groups, block size, blocks).
Asserts nothing.

    PYTHONPATH=$PWD:$PWD/integrations/vllm /work/main/.venv-vllm/bin/python \
        scripts/probe_planner_serving.py --cases 50 --seed 1 [--workloads 8] [--only 17 -v]

(``/work/bin/kvpy-vllm`` alone imports ``kvcore_vllm`` from the venv's editable install,
i.e. /work/main's bridge and harness, not this checkout's; the first line printed
names the files used.)
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
import warnings
from typing import Any


def random_layers(rng: random.Random, max_model_len: int, bs: int
                  ) -> list[tuple[str, dict[str, Any]]]:
    """1 to ~40 layers: full / sliding (windows of many sizes, incl. near and above
    max_model_len) / chunked / sometimes Mamba (align); mixed head shapes (pages)."""
    n = rng.choice([1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 40])
    windows = [rng.choice([8, 17, 32, 64, 100, 128, 256, 500, 1000,
                           max_model_len - 1, max_model_len, max_model_len + 1,
                           2 * max_model_len]) for _ in range(rng.choice([1, 1, 2, 3]))]
    chunks = [rng.choice([2, 4, 8, 16]) * bs for _ in range(rng.choice([1, 2]))]
    shapes = [(2, 64)] + [rng.choice([(1, 64), (2, 64), (4, 64), (2, 128), (1, 128)])
                          for _ in range(rng.choice([0, 0, 1, 2]))]
    mamba = rng.random() < 0.12
    p_full, p_slide = rng.choice([(0.2, 0.8), (0.5, 0.9), (0.17, 0.95), (0.1, 0.6),
                                  (0.5, 1.0), (1.0, 1.0)])
    pattern = rng.random() < 0.5  # a regular pattern (k sliding : 1 full) or random
    k = rng.choice([1, 2, 3, 5, 7])
    layers: list[tuple[str, dict[str, Any]]] = []
    w0 = rng.choice(windows)
    for i in range(n):
        heads, hs = rng.choice(shapes)
        shape = {} if (heads, hs) == (2, 64) else {"num_kv_heads": heads,
                                                    "head_size": hs}
        if mamba and rng.random() < 0.5:
            layers.append(("mamba", {}))
            continue
        if pattern:
            if (i + 1) % (k + 1) == 0:
                layers.append(("full", dict(shape)))
            else:
                layers.append(("sliding", dict(shape, sliding_window=w0)))
            continue
        r = rng.random()
        if r < p_full:
            layers.append(("full", dict(shape)))
        elif r < p_slide:
            layers.append(("sliding", dict(shape, sliding_window=rng.choice(windows))))
        else:
            layers.append(("chunked", dict(shape, chunk=rng.choice(chunks))))
    return layers


def random_case(seed: int, workload_seed: int = 0, scale: int = 1) -> dict[str, Any]:
    """A case: layers, pool, block size, lengths, budgets and a workload.
    ``workload_seed`` > 0 redraws only the workload (same layers, pool and budgets);
    ``scale`` multiplies the pool and the number of requests (same pressure, the null
    block and rounding ``scale`` times smaller a share of the pool)."""
    rng = random.Random(1_000_003 * seed + 17)
    bs = rng.choice([16, 16, 32, 64])
    max_model_len = rng.choice([512, 1024, 2048, 4096])
    layers = random_layers(rng, max_model_len, bs)
    mnbt = rng.choice([128, 256, 512, 1024, 2048, 4096])
    mnbt = max(mnbt, 64)
    max_num_seqs = rng.choice([4, 8, 16, 32, 64])
    per_req = -(-max_model_len // bs)
    num_blocks = max(per_req + 2, int(per_req * rng.choice([1.1, 1.5, 2, 3, 5, 10, 30])))
    num_blocks *= scale
    # workload
    if workload_seed:
        rng = random.Random(7_919 * seed + 104_729 * workload_seed)
    n_req = rng.randrange(4, 40) * scale
    vocab = 32000
    n_pref = rng.choice([0, 1, 2, 4])
    prefixes = [[rng.randrange(1, vocab) for _ in range(rng.randrange(16, max_model_len // 2))]
                for _ in range(n_pref)]
    long_frac = rng.random()
    arrival_spread = rng.choice([0, 0, 5, 20, 100])
    out_hi = rng.choice([8, 32, 128, 512])
    reqs = []
    for i in range(n_req):
        if rng.random() < long_frac:
            plen = rng.randrange(max_model_len // 2, max_model_len - 8)
        else:
            plen = rng.randrange(1, max(2, max_model_len // 4))
        body = [rng.randrange(1, vocab) for _ in range(plen)]
        if prefixes and rng.random() < 0.6:
            body = list(rng.choice(prefixes)) + body
        body = body[:max_model_len - 8]
        mt = max(1, min(rng.randrange(1, out_hi + 1), max_model_len - len(body) - 1))
        reqs.append((f"r{i}", body, mt, rng.randrange(0, arrival_spread + 1)))
    return dict(seed=seed, layers=layers, block_size=bs, num_blocks=num_blocks,
                max_model_len=max_model_len, max_num_batched_tokens=mnbt,
                max_num_seqs=max_num_seqs, requests=reqs)


def layout_of(sched: Any) -> dict[str, Any]:
    cfg = sched.kv_cache_config
    groups = []
    for g in cfg.kv_cache_groups:
        s = g.kv_cache_spec
        w = getattr(s, "sliding_window", None) or getattr(s, "attention_chunk_size", None)
        groups.append(f"{type(s).__name__.replace('Spec', '')}"
                      f"{'(' + str(w) + ')' if w else ''}x{len(g.layer_names)}"
                      f"@{s.block_size}")
    return {"num_blocks": cfg.num_blocks, "groups": groups}


def run_case(case: dict[str, Any], planner: str, max_steps: int) -> dict[str, Any]:
    from kvcore_vllm import harness

    w = harness.Workload(seed=case["seed"], layers=case["layers"],
                         block_size=case["block_size"], num_blocks=case["num_blocks"],
                         max_model_len=case["max_model_len"],
                         max_num_batched_tokens=case["max_num_batched_tokens"],
                         max_num_seqs=case["max_num_seqs"], requests=case["requests"],
                         planner=planner, events=False)
    layout: dict[str, Any] = {}
    orig = harness.make_scheduler

    def make(*a: Any, **k: Any) -> Any:
        s = orig(*a, **k)
        layout.update(layout_of(s))
        return s
    harness.make_scheduler = make
    try:
        with warnings.catch_warnings(record=True) as ws:
            warnings.simplefilter("always")
            r = harness.run(w, "vllm", max_steps=max_steps)
    finally:
        harness.make_scheduler = orig
    pre = sum(len(s["preempted"]) for s in r["steps"])
    fin = sum(len(s["finished"]) for s in r["steps"])
    toks = sum(s["total"] for s in r["steps"])
    fell_back = any("planned with vLLM's own layout" in str(x.message) for x in ws)
    return {"steps": r["num_steps"], "preempted": pre, "finished": fin, "tokens": toks,
            "fallback": fell_back, **layout}


def layers_text(layers: list[tuple[str, dict[str, Any]]]) -> str:
    out = []
    for kind, p in layers:
        t = {"full": "F", "sliding": f"S{p.get('sliding_window')}",
             "chunked": f"C{p.get('chunk')}", "mamba": "M"}[kind]
        if "num_kv_heads" in p:
            t += f"[{p['num_kv_heads']}x{p['head_size']}]"
        out.append(t)
    return " ".join(out)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cases", type=int, default=20)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--only", type=int, nargs="*", help="case indices to run")
    ap.add_argument("--max-steps", type=int, default=20000)
    ap.add_argument("--jsonl", help="append one JSON line per case")
    ap.add_argument("-v", action="store_true", help="print the layers")
    ap.add_argument("--scale", type=int, default=1,
                    help="pool and requests x this (1: the cases as committed)")
    ap.add_argument("--workloads", type=int, default=1,
                    help="workloads per case (the first is the case's own; the others "
                         "redraw only the requests): steps summed over them")
    a = ap.parse_args(argv)
    idx = a.only if a.only else range(a.cases)
    import kvcore_vllm

    import kvcore
    print(f"kvcore from {kvcore.__file__}, kvcore_vllm from {kvcore_vllm.__file__}")
    tally = {"cases": 0, "errors": 0, "more_steps": 0, "fewer_steps": 0,
             "more_preempt": 0, "fewer_finished": 0, "fallback": 0}
    worst = []
    for i in idx:
        seed = a.seed * 100_000 + i
        case = random_case(seed, scale=a.scale)
        t0 = time.perf_counter()
        res: dict[str, Any] = {}
        for planner in ("vllm", "kvcore"):
            try:
                res[planner] = run_case(case, planner, a.max_steps)
                for ws in range(1, a.workloads):
                    more = run_case(random_case(seed, ws, a.scale), planner,
                                    a.max_steps)
                    for key in ("steps", "preempted", "finished", "tokens"):
                        res[planner][key] += more[key]
            except Exception as e:  # vLLM refuses, kvcore refuses: a figure, not a stop
                res[planner] = {"error": f"{type(e).__name__}: {str(e)[:160]}"}
        dt = time.perf_counter() - t0
        v, k = res["vllm"], res["kvcore"]
        head = (f"case {i} (seed {seed}) L={len(case['layers'])} bs={case['block_size']} "
                f"mml={case['max_model_len']} nb={case['num_blocks']} "
                f"mnbt={case['max_num_batched_tokens']} seqs={case['max_num_seqs']} "
                f"reqs={len(case['requests'])} [{dt:.1f}s]")
        tally["cases"] += 1
        flag = ""
        if "error" in v or "error" in k:
            tally["errors"] += 1
            flag = "ERR"
        else:
            if k["fallback"]:
                tally["fallback"] += 1
            if k["steps"] > v["steps"]:
                tally["more_steps"] += 1
                flag += " STEPS+"
                worst.append((k["steps"] / v["steps"], i))
            elif k["steps"] < v["steps"]:
                tally["fewer_steps"] += 1
            if k["preempted"] > v["preempted"]:
                tally["more_preempt"] += 1
                flag += " PREEMPT+"
            if k["finished"] < v["finished"]:
                tally["fewer_finished"] += 1
                flag += " FIN-"
        print(f"{head} {flag}")
        if a.v or flag:
            print(f"  layers: {layers_text(case['layers'])}")
        for p in ("vllm", "kvcore"):
            print(f"  {p:6}: {json.dumps(res[p])}")
        sys.stdout.flush()
        if a.jsonl:
            with open(a.jsonl, "a") as f:
                f.write(json.dumps({"index": i, "seed": seed,
                                    "layers": layers_text(case["layers"]),
                                    **{kk: case[kk] for kk in
                                       ("block_size", "num_blocks", "max_model_len",
                                        "max_num_batched_tokens", "max_num_seqs")},
                                    "n_requests": len(case["requests"]), **res}) + "\n")
    print("summary:", json.dumps(tally))
    worst.sort(reverse=True)
    print("worst step ratios:", ", ".join(f"case {i}: {r:.3f}" for r, i in worst[:10]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
