"""Run many independent simulations: a local process pool by default, Ray on request.

``run_tasks(fn, tasks, backend="local" | "ray" | "serial", workers=N, address=ADDR)``
calls ``fn(task)`` once per task (one simulation per task) and returns the results in
the order of ``tasks``, whatever order they finish in, so every backend gives the same
list for the same tasks (``fn`` must be deterministic and importable by name: a
module-level function, as process pools and Ray pickle it by reference).

* ``local`` (default): :class:`concurrent.futures.ProcessPoolExecutor` with
  ``workers`` processes (default: the CPUs this process may use); ``workers=1`` or a
  single task runs in this process.
* ``ray``: ``ray.init(address=address, num_cpus=workers)`` (``address`` None: a local
  Ray instance; ``"auto"`` or ``ray://host:10001``: a cluster), one ``ray.remote``
  task per simulation.  Ray is an optional extra: ``pip install 'kvcore[ray]'``.
* ``serial``: in this process, for debugging.

A rich progress bar over the tasks is drawn on stderr when ``progress`` is true and
stderr is a terminal (``progress=None``: decide by that).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Sequence
from typing import Any

from kvcore.errors import ConfigError

__all__ = ["BACKENDS", "run_tasks", "default_workers"]

BACKENDS = ("local", "ray", "serial")


def default_workers() -> int:
    """CPUs this process may run on."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):  # pragma: no cover - not Linux
        return max(1, os.cpu_count() or 1)


class _Bar:
    def __init__(self, total: int, label: str, enabled: bool) -> None:
        self.bar: Any = None
        self.task: Any = None
        if not enabled:
            return
        try:
            from rich.progress import (
                BarColumn,
                MofNCompleteColumn,
                Progress,
                TimeElapsedColumn,
                TimeRemainingColumn,
            )
        except ImportError:  # pragma: no cover - rich is a dependency
            return
        from rich.console import Console

        self.bar = Progress("[progress.description]{task.description}", BarColumn(),
                            MofNCompleteColumn(), TimeElapsedColumn(),
                            TimeRemainingColumn(), console=Console(stderr=True),
                            transient=True)
        self.bar.start()
        self.task = self.bar.add_task(label, total=total)

    def advance(self) -> None:
        if self.bar is not None:
            self.bar.advance(self.task)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.stop()


def run_tasks(fn: Callable[[Any], Any], tasks: Sequence[Any], *, backend: str = "local",
              workers: int | None = None, address: str | None = None,
              progress: bool | None = None, label: str = "simulating") -> list[Any]:
    """``[fn(t) for t in tasks]`` on ``backend`` (see the module docstring).

    Raises ConfigError for an ``fn`` that is not callable, ``tasks`` that are not a
    sequence, an unknown backend, a bad ``workers`` count, ``backend="local"`` with an
    ``fn`` or a task its process pool cannot pickle (a lambda or a local function: the
    pool sends ``fn`` by its importable name), or ``backend="ray"`` without Ray
    installed (naming the install command); an exception raised by ``fn`` propagates.
    """
    if not callable(fn):
        raise ConfigError(f"run_tasks: fn must be a callable (a module-level function), "
                          f"got {type(fn).__name__}", field="fn", value=repr(fn))
    if tasks is None or isinstance(tasks, (str, bytes, dict)) or \
            not hasattr(tasks, "__iter__"):
        raise ConfigError(f"run_tasks: tasks must be a sequence of task arguments, got "
                          f"{type(tasks).__name__}", field="tasks",
                          value=type(tasks).__name__)
    if backend not in BACKENDS:
        raise ConfigError(f"--backend: unknown backend {backend!r}; valid: "
                          f"{', '.join(BACKENDS)}", field="backend", value=backend)
    if workers is not None and (isinstance(workers, bool) or not isinstance(workers, int)
                                or workers < 1):
        raise ConfigError(f"--workers must be a positive int, got {workers!r}",
                          field="workers", value=workers)
    if address is not None and backend != "ray":
        raise ConfigError("--address is for --backend ray", field="address",
                          value=address)
    tasks = list(tasks)
    enabled = sys.stderr.isatty() if progress is None else progress
    bar = _Bar(len(tasks), label, enabled and bool(tasks))
    try:
        if backend == "ray":
            return _run_ray(fn, tasks, workers, address, bar)
        n = workers or default_workers()
        if backend == "serial" or n == 1 or len(tasks) <= 1:
            out = []
            for t in tasks:
                out.append(fn(t))
                bar.advance()
            return out
        _check_picklable(fn, tasks)
        return _run_pool(fn, tasks, n, bar)
    finally:
        bar.close()


def _check_picklable(fn: Callable[[Any], Any], tasks: list[Any]) -> None:
    """What a process pool must pickle (``fn`` by its importable name, each task by
    value), or ConfigError naming ``fn`` / ``tasks`` and the way out."""
    import pickle

    try:
        pickle.dumps(fn)
    except Exception as exc:
        name = getattr(fn, "__qualname__", type(fn).__name__)
        raise ConfigError(f"run_tasks: fn {name!r} cannot be sent to the local process "
                          f"pool ({type(exc).__name__}: {exc}); pass a module-level "
                          f"function (importable by name), or backend='serial' / "
                          f"workers=1 to run in this process", field="fn",
                          value=name) from exc
    for i, t in enumerate(tasks):
        try:
            pickle.dumps(t)
        except Exception as exc:
            raise ConfigError(f"run_tasks: task {i} ({type(t).__name__}) cannot be sent "
                              f"to the local process pool ({type(exc).__name__}: {exc}); "
                              f"tasks must be picklable (plain data)", field="tasks",
                              value=i) from exc


def _run_pool(fn: Callable[[Any], Any], tasks: list[Any], n: int, bar: _Bar) -> list[Any]:
    from concurrent.futures import ProcessPoolExecutor, as_completed

    results: list[Any] = [None] * len(tasks)
    with ProcessPoolExecutor(max_workers=min(n, len(tasks))) as pool:
        futures = {pool.submit(fn, t): i for i, t in enumerate(tasks)}
        for fut in as_completed(futures):
            results[futures[fut]] = fut.result()
            bar.advance()
    return results


def _run_ray(fn: Callable[[Any], Any], tasks: list[Any], workers: int | None,
             address: str | None, bar: _Bar) -> list[Any]:
    try:
        import ray
    except ImportError as exc:
        raise ConfigError("--backend ray needs Ray, which is not installed: pip install "
                          "'kvcore[ray]'", field="backend", value="ray") from exc
    started = False
    if not ray.is_initialized():
        kw: dict[str, Any] = {"include_dashboard": False, "log_to_driver": False}
        if address is not None:
            kw["address"] = address
        elif workers is not None:
            kw["num_cpus"] = workers
        ray.init(**kw)
        started = True
    try:
        remote = ray.remote(num_cpus=1)(fn)
        refs = [remote.remote(t) for t in tasks]
        index = {ref: i for i, ref in enumerate(refs)}
        results: list[Any] = [None] * len(tasks)
        pending = list(refs)
        while pending:
            done, pending = ray.wait(pending, num_returns=1)
            for ref in done:
                results[index[ref]] = ray.get(ref)
                bar.advance()
        return results
    finally:
        if started:
            ray.shutdown()
