#!/usr/bin/env python3
"""v15's one evaluation (tests/data/sim_accuracy/v15_protocol.md): candidates A and F
on the v15 rows (``v15*_rows.json``) and on every held-out row of measurements.json,
with the engine; prints each row's figures and the medians the protocol's decision
rule reads.

    python scripts/sim_v15_eval.py [--workers N] [--fast]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from kvcore.sim.accuracy import METRICS, evaluate, load_measurements  # noqa: E402
from kvcore.sim.timing import DEFAULT_EFFICIENCY  # noqa: E402

# v14's row helpers, unchanged (the same F, the same medians and formatting)
sys.path.insert(0, str(ROOT / "scripts"))
from sim_v14_eval import DATA, F, f_applies, fmt, medians  # noqa: E402

CANDIDATES = {"A": (DEFAULT_EFFICIENCY, "sharegpt"), "F": (F, "sharegpt")}


def by_source(results, src, ids=None):
    """The median over sources of each source's median absolute error (the protocol's
    02:50 amendment: reported, not part of the decision)."""
    out = {}
    for m in METRICS:
        per: dict[str, list[float]] = {}
        for r in results:
            if m in r and (ids is None or r["id"] in ids):
                per.setdefault(src[r["id"]], []).append(abs(r[m]["error"]))
        meds = [statistics.median(v) for v in per.values()]
        out[m] = (len(meds), statistics.median(meds) if meds else float("nan"))
    return out


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--workers", type=int, default=1)
    p.add_argument("--fast", action="store_true")
    p.add_argument("--data", type=Path, default=DATA)
    p.add_argument("--no-heldout", action="store_true",
                   help="the v15 rows only (a dry run of the script)")
    args = p.parse_args()
    data = args.data
    sim = "fast" if args.fast else "engine"
    v15 = []
    for f in sorted(data.glob("v15*_rows.json")):
        got = json.loads(f.read_text())  # a list, or an object with a "rows" list
        v15 += got["rows"] if isinstance(got, dict) else got
    held = [] if args.no_heldout else [
        r for r in load_measurements(data / "measurements.json")
        if r.get("split") == "holdout"]
    from kvcore.sim.accuracy import _check_row
    for r in v15:
        _check_row(r)
    hw = {r["id"] for r in v15 if f_applies(r["gpu"])}
    print(f"v15 rows: {len(v15)} (on HBM3 / GDDR parts "
          f"{len(hw)}); earlier held-out rows: {len(held)}; sim {sim}")
    got = {}
    for name, (eff, lengths) in CANDIDATES.items():
        res15 = evaluate(v15, eff, base=data, sim=sim, workers=args.workers,
                         lengths=lengths) if v15 else []
        resh = evaluate(held, eff, base=data, sim=sim, workers=args.workers,
                        lengths=lengths)
        print(f"\n== {name} ({'lengths ' + lengths})")
        for r in res15:
            print("  " + r["id"] + ": " + ", ".join(
                f"{m} {r[m]['measured']:.4g} / {r[m]['simulated']:.4g} "
                f"({100 * r[m]['error']:+.0f} %)" for m in METRICS if m in r))
        print(f"  v15 all        (thr / TTFT / TPOT): {fmt(medians(res15))}")
        print(f"  v15 HBM3/GDDR  : {fmt(medians(res15, hw))}")
        src = {r["id"]: r["url"] for r in v15}
        print(f"  v15 all, sources weighted equally: {fmt(by_source(res15, src))}")
        print(f"  v15 HBM3/GDDR, sources weighted equally: "
              f"{fmt(by_source(res15, src, hw))}")
        print(f"  all held out   : {fmt(medians(res15 + resh))}")
        got[name] = res15
    print("\n" + decide(got, hw))
    return 0


def decide(got, hw) -> str:
    """The protocol's rule for F, read off the v15 results."""
    if len(hw) < 3:
        return f"decision: {len(hw)} v15 rows on HBM3 / GDDR parts (< 3): A stays"
    a_hw, f_hw = medians(got["A"], hw), medians(got["F"], hw)
    lower = [m for m in METRICS if f_hw[m][0] and f_hw[m][1] < a_hw[m][1]]
    a_all, f_all = medians(got["A"]), medians(got["F"])
    worse = [m for m in ("output_throughput", "tpot_ms")
             if f_all[m][0] and f_all[m][1] > a_all[m][1] + 0.02]
    ok = len(lower) >= 2 and not worse
    return (f"decision: F lower than A on HBM3 / GDDR rows in {lower or 'none'}; more "
            f"than 2 points above A on all v15 rows in {worse or 'none'}: "
            + ("F becomes the default" if ok else "A stays"))


if __name__ == "__main__":
    raise SystemExit(main())
