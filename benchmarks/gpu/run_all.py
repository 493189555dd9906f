#!/usr/bin/env python3
"""Time every kernel of kvcore and of each installed plugin on one device.

    python benchmarks/gpu/run_all.py [--device cuda] [--out results.json]
                                     [--plugins mla,mamba] [--iters 20] [--quick]
                                     [--verify] [--require-store-fraction 0.8]

First measures the device copy bandwidth (``dst.copy_(src)`` of a 1 GiB buffer, bytes
read + written), then runs each benchmark and prints a table: time per launch, bytes
moved, GB/s (10^9 bytes per second) and % of the copy bandwidth.  ``--out`` writes the
same as JSON (plus the command, the machine, torch / triton versions).  A few minutes
on one GPU.  ``--device cpu --quick`` runs tiny shapes on the CPU (a smoke test of the
harness and the benchmark modules; the figures mean nothing).
``--verify`` first runs each core Triton kernel and its torch reference on the device
and compares the bytes (the CPU test suite only reaches the kernels through the Triton
interpreter).  ``--require-store-fraction F`` exits 1 when a core ``store`` kernel (the
K/V writes of ``reshape_and_cache`` at prefill size) reaches less than F of the copy
bandwidth.  The issue-10 acceptance run on a GPU machine:

    TRITON_INTERPRET=0 python benchmarks/gpu/run_all.py --verify \
        --require-store-fraction 0.8 --out gpu_results.json

Plugin contract
---------------
A plugin distribution contributes benchmarks through a module ``kvcore_<name>.benchmarks``
(``<name>`` = its ``kvcore.plugins`` entry-point name) exposing ``BENCHMARKS``: a list
(or a dict ``name -> entry``) whose entries are either

1. **harness-timed** (preferred): an object or dict with ``name`` (str), ``setup``
   (``setup(device: torch.device, quick: bool)`` allocating inputs and returning
   ``(run, bytes_moved)``: ``run()`` launches the kernel once, ``bytes_moved`` is what
   one launch reads + writes in device memory), and optionally ``kind`` (``store``,
   ``load``, ``copy``, ...) and ``description``; ``setup`` may instead return just
   ``run`` when the entry has a ``bytes_moved`` attribute (int);
2. **self-timed**: a callable ``fn(device: str, **kw) -> dict`` returning at least
   ``seconds_per_call`` and ``bytes_moved`` (and optionally ``name``, ``backend``);
   the harness passes ``tokens`` and ``repeats`` only if ``fn`` accepts them (small
   values under ``--quick``).  Callables returning ``(run, bytes_moved)`` are timed
   by the harness like form 1.

Use shapes larger than the L2 cache (tens of MiB) so that the figures are DRAM
bandwidth.  A plugin without the module is listed as "no benchmarks"; a benchmark
that raises is reported with its error and the rest still run.  The core's own
benchmarks use form 1 (:mod:`kvcore.ops.benchmarks`).
"""

from __future__ import annotations

import argparse
import importlib
import inspect
import json
import os
import platform
import statistics
import sys
import time
import traceback
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass
class Result:
    name: str
    source: str
    kind: str = "other"
    backend: str = ""
    seconds_per_call: float | None = None
    bytes_moved: int | None = None
    gb_per_s: float | None = None
    pct_of_copy: float | None = None
    description: str = ""
    error: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)


# ---- timing --------------------------------------------------------------------------

def _sync(device: Any) -> None:
    import torch

    if device.type == "cuda":
        torch.cuda.synchronize(device)


def time_call(run: Callable[[], Any], device: Any, iters: int, warmup: int = 2) -> float:
    """Seconds per call of ``run``: median over 5 rounds of ``iters`` calls (CUDA events
    on a GPU, perf_counter elsewhere), after ``warmup`` calls (Triton compiles there)."""
    import torch

    for _ in range(warmup):
        run()
    _sync(device)
    rounds = []
    for _ in range(5):
        if device.type == "cuda":
            start = torch.cuda.Event(enable_timing=True)
            end = torch.cuda.Event(enable_timing=True)
            start.record()
            for _ in range(iters):
                run()
            end.record()
            end.synchronize()
            rounds.append(start.elapsed_time(end) / 1e3 / iters)
        else:
            t0 = time.perf_counter()
            for _ in range(iters):
                run()
            _sync(device)
            rounds.append((time.perf_counter() - t0) / iters)
    return statistics.median(rounds)


def copy_bandwidth(device: Any, quick: bool, iters: int) -> tuple[float, int]:
    """(GB/s, buffer bytes) of ``dst.copy_(src)``, counting bytes read + written."""
    import torch

    nbytes = (16 << 20) if quick else (1 << 30)
    src = torch.empty(nbytes, dtype=torch.uint8, device=device).random_(0, 255)
    dst = torch.empty_like(src)
    sec = time_call(lambda: dst.copy_(src), device, iters)
    return 2 * nbytes / sec / 1e9, nbytes


# ---- collecting benchmarks -----------------------------------------------------------

def _get(entry: Any, key: str, default: Any = None) -> Any:
    if isinstance(entry, dict):
        return entry.get(key, default)
    return getattr(entry, key, default)


def _entries(benchmarks: Any) -> Iterable[tuple[str | None, Any]]:
    if isinstance(benchmarks, dict):
        yield from benchmarks.items()
    else:
        for entry in benchmarks:
            yield None, entry


def plugin_names() -> list[str]:
    """Entry-point names of the installed kvcore plugins (group ``kvcore.plugins``)."""
    from importlib.metadata import entry_points

    names = sorted({ep.name for ep in entry_points(group="kvcore.plugins")})
    allow = os.environ.get("KVCORE_PLUGINS")
    if allow:
        names = [n for n in names if n in {a.strip() for a in allow.split(",")}]
    return names


def load_benchmarks(source: str, module_name: str) -> tuple[Any | None, str | None]:
    """(BENCHMARKS, None), or (None, why) when the module is missing or broken."""
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name is not None and module_name.startswith(exc.name):
            return None, "no benchmarks module"
        return None, f"import failed: {exc!r}"
    except Exception as exc:  # a broken plugin must not stop the others
        return None, f"import failed: {exc!r}"
    benchmarks = getattr(module, "BENCHMARKS", None)
    if benchmarks is None:
        return None, f"{module_name} has no BENCHMARKS"
    return benchmarks, None


def _accepted_kwargs(fn: Callable[..., Any], quick: bool) -> dict[str, Any]:
    try:
        params = inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return {}
    wanted = {"tokens": 256, "repeats": 2} if quick else {}
    return {k: v for k, v in wanted.items() if k in params}


def run_entry(name: str | None, entry: Any, source: str, device: Any, quick: bool,
              iters: int, copy_gbps: float | None) -> Result:
    """Run one benchmark entry of either form; errors become ``Result.error``."""
    label = name or _get(entry, "name") or getattr(entry, "__name__", repr(entry))
    res = Result(name=str(label), source=source, kind=str(_get(entry, "kind", "other")),
                 description=str(_get(entry, "description", "") or ""))
    try:
        setup = _get(entry, "setup")
        if setup is not None:
            out = setup(device, quick)
        else:
            out = entry(str(device), **_accepted_kwargs(entry, quick))
        if isinstance(out, dict):  # self-timed
            res.seconds_per_call = float(out["seconds_per_call"])
            res.bytes_moved = int(out["bytes_moved"])
            res.backend = str(out.get("backend", ""))
            res.name = str(name or out.get("name", res.name))
            res.extra = {k: v for k, v in out.items() if k not in (
                "seconds_per_call", "bytes_moved", "gb_per_s", "name", "backend")}
        else:
            if isinstance(out, tuple):
                run, moved = out
            else:
                run, moved = out, _get(entry, "bytes_moved")
            if moved is None:
                raise ValueError("no bytes_moved (return (run, bytes_moved) from setup)")
            res.bytes_moved = int(moved)
            res.seconds_per_call = time_call(run, device, iters)
        if res.seconds_per_call > 0:
            res.gb_per_s = res.bytes_moved / res.seconds_per_call / 1e9
            if copy_gbps:
                res.pct_of_copy = 100.0 * res.gb_per_s / copy_gbps
    except Exception as exc:
        res.error = f"{type(exc).__name__}: {exc}"
        res.extra["traceback"] = traceback.format_exc(limit=4)
        if device.type == "cuda":
            import torch

            torch.cuda.empty_cache()
    return res


def _backend_of(device: Any) -> str:
    from kvcore.ops._dispatch import interpreting, triton_available

    if triton_available() and (device.type == "cuda" or interpreting()):
        return "triton"
    return "torch-ref"


# ---- report --------------------------------------------------------------------------

def format_table(results: list[Result], copy_gbps: float) -> str:
    head = f"{'kernel':44} {'source':11} {'kind':11} {'us/call':>10} {'MB':>9} " \
           f"{'GB/s':>8} {'%copy':>6}"
    lines = [head, "-" * len(head)]
    for r in results:
        if r.error:
            lines.append(f"{r.name[:44]:44} {r.source[:11]:11} {r.kind[:11]:11} "
                         f"ERROR {r.error[:60]}")
            continue
        us = (r.seconds_per_call or 0) * 1e6
        mb = (r.bytes_moved or 0) / 1e6
        pct = f"{r.pct_of_copy:6.1f}" if r.pct_of_copy is not None else "     -"
        lines.append(f"{r.name[:44]:44} {r.source[:11]:11} {r.kind[:11]:11} {us:10.1f} "
                     f"{mb:9.2f} {r.gb_per_s or 0:8.1f} {pct}")
    lines.append(f"device copy bandwidth: {copy_gbps:.1f} GB/s (read + write)")
    return "\n".join(lines)


def machine(device: Any) -> dict[str, Any]:
    import torch

    info: dict[str, Any] = {"host": platform.node(), "python": platform.python_version(),
                            "torch": torch.__version__, "device": str(device)}
    try:
        import triton

        info["triton"] = triton.__version__
    except ImportError:
        info["triton"] = None
    if device.type == "cuda":
        info["gpu"] = torch.cuda.get_device_name(device)
        info["cuda"] = torch.version.cuda
    else:
        info["cpu"] = platform.processor() or platform.machine()
        info["threads"] = torch.get_num_threads()
    info["TRITON_INTERPRET"] = os.environ.get("TRITON_INTERPRET")
    return info


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--device", default=None, help="cuda (default when available) or cpu")
    p.add_argument("--out", default=None, help="write the results as JSON to this file")
    p.add_argument("--plugins", default=None,
                   help="comma-separated plugin names (default: every installed one; "
                        "'none' for the core only)")
    p.add_argument("--iters", type=int, default=None, help="calls per timing round")
    p.add_argument("--quick", action="store_true", help="tiny shapes (CPU smoke run)")
    p.add_argument("--filter", default=None, help="only benchmarks whose name contains it")
    p.add_argument("--verify", action="store_true",
                   help="first compare the core Triton kernels with the torch references "
                        "on the device (bit for bit); exit 1 on a difference")
    p.add_argument("--require-store-fraction", type=float, default=None,
                   help="exit 1 if a core store kernel is below this fraction of copy "
                        "bandwidth")
    args = p.parse_args(argv)

    import torch

    device = torch.device(args.device or ("cuda" if torch.cuda.is_available() else "cpu"))
    iters = args.iters or (2 if args.quick else 20)
    t_start = time.time()
    copy_gbps, copy_bytes = copy_bandwidth(device, args.quick, iters)
    print(f"# {' '.join([os.path.basename(sys.executable)] + sys.argv)}")
    print(f"# machine: {json.dumps(machine(device))}")
    print(f"# copy bandwidth: {copy_gbps:.1f} GB/s ({copy_bytes >> 20} MiB buffer)")

    verified = None
    if args.verify and _backend_of(device) != "triton":
        print("# verify: skipped (Triton runs on CUDA devices, or anywhere under "
              "TRITON_INTERPRET=1)")
    elif args.verify:
        from kvcore.ops.benchmarks import verify

        checks = verify(device, args.quick)
        for case, ok, detail in checks:
            print(f"# verify {case}: {'OK' if ok else 'MISMATCH'} ({detail})")
        verified = all(ok for _, ok, _ in checks)

    sources: list[tuple[str, str]] = [("core", "kvcore.ops.benchmarks")]
    if args.plugins is None:
        names = plugin_names()
    elif args.plugins.strip().lower() == "none":
        names = []
    else:
        names = [n.strip() for n in args.plugins.split(",") if n.strip()]
    sources += [(n, f"kvcore_{n}.benchmarks") for n in names]

    results: list[Result] = []
    plugins_report: dict[str, str] = {}
    for source, module in sources:
        benchmarks, why = load_benchmarks(source, module)
        if benchmarks is None:
            plugins_report[source] = why or "?"
            print(f"# {source}: {why}")
            continue
        count = 0
        for name, entry in _entries(benchmarks):
            label = str(name or _get(entry, "name") or getattr(entry, "__name__", ""))
            if args.filter and args.filter not in label:
                continue
            r = run_entry(name, entry, source, device, args.quick, iters, copy_gbps)
            if not r.backend:
                r.backend = _backend_of(device)
            results.append(r)
            count += 1
            status = r.error or f"{r.gb_per_s or 0:.1f} GB/s"
            print(f"# {source}: {r.name}: {status}", flush=True)
        plugins_report[source] = f"{count} benchmarks"

    print()
    print(format_table(results, copy_gbps))
    stores = [r for r in results if r.source == "core" and r.kind == "store" and not r.error]
    verdict = None
    if stores:
        worst = min(stores, key=lambda r: r.pct_of_copy or 0.0)
        print(f"core store kernels: worst {worst.name} at {worst.pct_of_copy:.1f}% of copy "
              f"bandwidth")
        if args.require_store_fraction is not None:
            verdict = (worst.pct_of_copy or 0.0) >= 100 * args.require_store_fraction
            print(f"required >= {100 * args.require_store_fraction:.0f}%: "
                  f"{'PASS' if verdict else 'FAIL'}")
    print(f"total {time.time() - t_start:.1f} s")

    if args.out:
        payload = {
            "command": [os.path.basename(sys.executable)] + sys.argv,
            "machine": machine(device),
            "quick": args.quick,
            "iters": iters,
            "copy_bandwidth_gb_per_s": copy_gbps,
            "copy_buffer_bytes": copy_bytes,
            "sources": plugins_report,
            "results": [asdict(r) for r in results],
            "verified": verified,
            "store_check": None if verdict is None else {
                "required_fraction": args.require_store_fraction, "pass": verdict},
        }
        with open(args.out, "w") as f:
            json.dump(payload, f, indent=2, default=str)
            f.write("\n")
    errors = [r for r in results if r.error]
    if verdict is False or verified is False:
        return 1
    return 2 if errors and not results else 0


if __name__ == "__main__":
    sys.exit(main())
