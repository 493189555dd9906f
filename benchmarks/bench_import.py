"""Import time of kvcore without torch (issue 15 item 16: goal under 50 ms).

Runs ``python -X importtime -c "import <module>"`` in fresh interpreters and prints,
per module, the median cumulative import time (microseconds, as ``-X importtime``
reports them, converted to ms), the slowest kvcore submodules of the median run, and
whether torch was imported.  A figure, not a test: the machine's load changes it.

    python benchmarks/bench_import.py            # kvcore, kvcore.cli, plan_model path
    python benchmarks/bench_import.py --runs 21 --module kvcore
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys

TARGETS = {
    "kvcore": "import kvcore",
    "kvcore.cli": "import kvcore.cli",
    "kvcore.plan_model (first use)": "import kvcore; kvcore.plan_model",
}


def one_run(code: str) -> tuple[float, dict[str, float], bool]:
    """(cumulative ms of the top kvcore module, {module: cumulative ms}, torch loaded)."""
    probe = code + "; import sys; print('TORCH' if 'torch' in sys.modules else 'NOTORCH')"
    out = subprocess.run([sys.executable, "-X", "importtime", "-c", probe],
                         capture_output=True, text=True, check=True)
    cumulative: dict[str, float] = {}
    for line in out.stderr.splitlines():
        if not line.startswith("import time:") or "|" not in line:
            continue
        try:
            _, cum, name = line[len("import time:"):].split("|")
            cumulative[name.strip()] = int(cum) / 1000
        except ValueError:  # the header line
            continue
    # entries imported at top level are indented by one space: sum the kvcore ones
    total = 0.0
    for line in out.stderr.splitlines():
        parts = line[len("import time:"):].split("|")
        if line.startswith("import time:") and len(parts) == 3 and \
                parts[2].startswith(" kvcore") and not parts[2].startswith("  "):
            total += int(parts[1]) / 1000
    return total, cumulative, out.stdout.strip().endswith("\nTORCH") or out.stdout.strip() == "TORCH"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=11)
    parser.add_argument("--module", choices=list(TARGETS), action="append")
    args = parser.parse_args(argv)
    for label in args.module or list(TARGETS):
        runs = [one_run(TARGETS[label]) for _ in range(args.runs)]
        totals = sorted(r[0] for r in runs)
        median = statistics.median(totals)
        mid = min(runs, key=lambda r: abs(r[0] - median))
        slow = sorted(((ms, name) for name, ms in mid[1].items()
                       if name.startswith("kvcore")), reverse=True)[:6]
        print(f"{label}: median {median:.1f} ms, min {totals[0]:.1f} ms, max "
              f"{totals[-1]:.1f} ms over {args.runs} runs; torch imported: "
              f"{any(r[2] for r in runs)}")
        print("  slowest kvcore modules (cumulative ms): "
              + ", ".join(f"{name} {ms:.1f}" for ms, name in slow))
    return 0


if __name__ == "__main__":
    sys.exit(main())
