"""Write the routing conformance vectors (tests/data/routing_vectors/*.json): kvcore's
KVCacheManager on a seeded workload per case of :mod:`kvcore.routing.cases`, its event
stream and, before each admission, the hit it gave (format: docs/ROUTING.md).

    kvpy scripts/gen_routing_vectors.py [--out DIR] [--seed N] [CASE ...]

Deterministic: the same kvcore gives the same files.  Cases whose plugin is not
installed are skipped (and said so).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def main(argv: list[str] | None = None) -> int:
    from kvcore.routing import vectors
    from kvcore.routing.cases import CASES, available_cases

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("cases", nargs="*", help="case names (default all)")
    ap.add_argument("--out", default=str(ROOT / "tests" / "data" / "routing_vectors"))
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args(argv)
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    avail = available_cases(a.cases or None)
    for c in CASES:
        if (not a.cases or c.name in a.cases) and c not in avail:
            print(f"skipped {c.name}: needs {c.needs}")
    total = 0
    for c in avail:
        v = vectors.generate(c.name, c.build(), seed=a.seed, **c.options)
        bad = vectors.check(v)
        if bad:
            print(f"{c.name}: the index disagrees with the manager: {bad[:3]}",
                  file=sys.stderr)
            return 1
        path = out / f"{c.name}.json"
        vectors.dump(v, path)
        qs = [r for r in v["records"] if r["op"] == "query"]
        size = path.stat().st_size
        total += size
        print(f"{path.relative_to(ROOT) if path.is_relative_to(ROOT) else path}: "
              f"{len(qs)} queries, {sum(1 for q in qs if q['hit'])} hits, "
              f"{size // 1024} KiB")
    print(f"total {total / 2**20:.2f} MiB")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
