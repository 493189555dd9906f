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
  Ray instance; ``"auto"``, ``HOST:PORT`` (the head's GCS) or ``ray://HOST[:PORT]``
  (Ray Client, port 10001 by default): a cluster; ``"local"``: a new local instance),
  one ``ray.remote`` task per simulation.  Ray is an optional extra: ``pip install
  'kvcore[ray]'``.  The address is checked before ``ray.init``
  (:func:`check_ray_address`): its form, then ``HOST:PORT`` is probed with a
  :data:`RAY_CONNECT_TIMEOUT_S` socket timeout (a TCP connect and an HTTP/2 handshake:
  Ray's GCS and client servers speak gRPC), so an unreachable cluster is one
  ConfigError naming ``address`` within seconds rather than Ray's minutes of retries;
  ``ray.init``'s own ConnectionError / RuntimeError / ValueError become that
  ConfigError too.
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

__all__ = ["BACKENDS", "run_tasks", "default_workers", "check_ray_address",
           "RAY_CONNECT_TIMEOUT_S"]

BACKENDS = ("local", "ray", "serial")

#: seconds the probe of a Ray address waits for the TCP connect and the server's reply
RAY_CONNECT_TIMEOUT_S = 3.0
#: the port of ``ray://HOST`` without one (Ray Client's default)
RAY_CLIENT_PORT = 10001
_RAY_FORMS = ("auto, local, HOST:PORT (the head node's GCS, e.g. 10.0.0.1:6379) or "
              "ray://HOST[:PORT] (Ray Client, e.g. ray://10.0.0.1:10001)")


def _bad_address(address: Any, why: str) -> ConfigError:
    from kvcore.errors import shorten

    shown = shorten(address) if isinstance(address, str) and address.strip() \
        and address.isprintable() else repr(address)
    return ConfigError(f"--address {shown}: {why}", field="address",
                       value=shorten(address) if isinstance(address, str)
                       else repr(address))


def _split_host_port(address: str, text: str, default_port: int | None
                     ) -> tuple[str, int]:
    """``(host, port)`` of ``HOST:PORT`` / ``[IPv6]:PORT`` (``default_port`` when the
    port may be left out), or ConfigError naming ``address``."""
    host, port_text = text, ""
    if text.startswith("["):  # [IPv6]:PORT
        end = text.find("]")
        if end < 0:
            raise _bad_address(address, f"an IPv6 host must be in brackets; give "
                                        f"{_RAY_FORMS}")
        host, rest = text[1:end], text[end + 1:]
        if rest and not rest.startswith(":"):
            raise _bad_address(address, f"not a Ray address; give {_RAY_FORMS}")
        port_text = rest[1:] if rest else ""
    elif ":" in text:
        host, _, port_text = text.rpartition(":")
    if not host or any(c in host for c in "/?#@[] ") or \
            (":" in host and not text.startswith("[")):
        raise _bad_address(address, f"not a Ray address; give {_RAY_FORMS}")
    if not port_text:
        if default_port is None:
            raise _bad_address(address, f"no port; give {_RAY_FORMS}")
        return host, default_port
    if not (port_text.isascii() and port_text.isdigit()) or \
            not 1 <= int(port_text[:6]) <= 65535:
        raise _bad_address(address, f"the port {port_text!r} is not a number in "
                                    f"[1, 65535]; give {_RAY_FORMS}")
    return host, int(port_text)


def _probe(address: str, host: str, port: int, timeout: float) -> None:
    """A TCP connect to ``host:port`` and an HTTP/2 handshake (Ray's GCS and client
    servers are gRPC servers: they answer the client preface with a SETTINGS frame),
    each bounded by ``timeout`` seconds; ConfigError naming ``address`` otherwise."""
    import socket

    what = f"cannot connect to a Ray cluster at {host}:{port}"
    try:
        sock = socket.create_connection((host, port), timeout=timeout)
    except socket.gaierror as exc:
        raise _bad_address(address, f"{what} (unknown host: {exc.strerror or exc})"
                           ) from None
    except TimeoutError:
        raise _bad_address(address, f"{what} (no answer within {timeout:g} s)") from None
    except OSError as exc:
        raise _bad_address(address, f"{what} ({exc.strerror or exc}); is the cluster "
                                    f"running (ray start --head) and the port right?"
                           ) from None
    if os.environ.get("RAY_USE_TLS", "0").lower() in ("1", "true"):
        sock.close()  # a TLS server does not answer a plain HTTP/2 preface
        return
    try:
        with sock:
            sock.settimeout(timeout)
            # the HTTP/2 client preface, then an empty SETTINGS frame
            sock.sendall(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
                         b"\x00\x00\x00\x04\x00\x00\x00\x00\x00")
            head = b""
            while len(head) < 9:
                chunk = sock.recv(9 - len(head))
                if not chunk:
                    break
                head += chunk
    except TimeoutError:
        raise _bad_address(address, f"{what}: the server there did not answer as a Ray "
                                    f"(gRPC) server within {timeout:g} s") from None
    except OSError as exc:
        raise _bad_address(address, f"{what} ({exc.strerror or exc})") from None
    if len(head) < 9 or head[3] != 0x04:
        raise _bad_address(address, f"{what}: the server there is not a Ray (gRPC) "
                                    f"server; give the head node's GCS port (ray start "
                                    f"--head prints it, default 6379) or ray://HOST:10001")


def check_ray_address(address: Any, *, probe: bool = True,
                      timeout: float = RAY_CONNECT_TIMEOUT_S) -> None:
    """Refuse a ``--address`` Ray cannot use before ``ray.init`` sees it: not a string,
    empty or with spaces, not one of auto / local / ``HOST:PORT`` / ``ray://HOST[:PORT]``
    (port in [1, 65535]); with ``probe``, a ``HOST:PORT`` (and the address ``auto``
    finds, when Ray finds one) that does not answer a TCP connect and an HTTP/2
    handshake within ``timeout`` seconds.  Raises ConfigError naming ``address``."""
    if not isinstance(address, str):
        raise _bad_address(address, f"must be a string: {_RAY_FORMS}")
    if not address.strip() or address != address.strip() or any(
            c.isspace() or not c.isprintable() for c in address):
        raise _bad_address(address, f"not a Ray address; give {_RAY_FORMS}")
    if address == "local":
        return
    if address == "auto":
        if not probe:
            return
        try:
            from ray._private.services import canonicalize_bootstrap_address
        except ImportError:
            return
        try:
            found = canonicalize_bootstrap_address("auto")
        except (ConnectionError, RuntimeError, ValueError) as exc:
            raise _bad_address(address, f"cannot connect to a Ray cluster (no running "
                                        f"cluster found: {_first_line(exc)}); start one "
                                        f"with ray start --head or give HOST:PORT"
                               ) from None
        except Exception:  # noqa: BLE001 - a private Ray API: leave it to ray.init
            return
        if isinstance(found, str) and found:
            try:
                host, port = _split_host_port(found, found, None)
            except ConfigError:
                return
            _probe(address, host, port, timeout)
        return
    if "://" in address:
        scheme, _, rest = address.partition("://")
        if scheme != "ray":
            raise _bad_address(address, f"the scheme {scheme!r} is not Ray's; give "
                                        f"{_RAY_FORMS}")
        host, port = _split_host_port(address, rest.rstrip("/"), RAY_CLIENT_PORT)
    else:
        host, port = _split_host_port(address, address, None)
    if probe:
        _probe(address, host, port, timeout)


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__


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
    from kvcore.units import plain_int

    workers = plain_int(workers)  # numpy integers as the equal plain int
    if workers is not None and (isinstance(workers, bool) or not isinstance(workers, int)
                                or workers < 1):
        raise ConfigError(f"--workers must be a positive int, got {workers!r}",
                          field="workers", value=workers)
    if address is not None and backend != "ray":
        raise ConfigError("--address is for --backend ray", field="address",
                          value=address)
    if address is not None:
        check_ray_address(address, probe=False)  # its form, before anything runs
        if workers is not None and address != "local":
            raise ConfigError(f"--workers {workers}: sets the CPUs of the local Ray "
                              f"this run starts; a cluster at --address {address} "
                              f"uses its own CPUs: drop --workers or --address",
                              field="workers", value=workers)
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
        import logging

        kw: dict[str, Any] = {"include_dashboard": False, "log_to_driver": False,
                              "logging_level": logging.WARNING}
        if address is not None:
            check_ray_address(address)  # reachable, within seconds
            kw["address"] = address
        if workers is not None:
            kw["num_cpus"] = workers
        try:
            ray.init(**kw)
        except (ConnectionError, RuntimeError, ValueError, TimeoutError) as exc:
            where = f"--address {address}" if address is not None else "a local Ray"
            raise ConfigError(f"{where}: cannot connect to a Ray cluster "
                              f"({type(exc).__name__}: {_first_line(exc)})",
                              field="address", value=address) from None
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
