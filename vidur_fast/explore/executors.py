"""Executors: run a function over a list of items in parallel and yield results as they come.

- inline: in this process (one worker; no start-up cost).
- local: a pool of spawned processes, one per worker; processes are reused across items.
- ray: tasks on a Ray cluster (a local one started here, or an existing one by address).

Items are chunks of work; the callers order results themselves, so which executor ran them
(and in what order they finished) never changes the output.
"""

import os
import socket
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from multiprocessing import get_context
from typing import Any

from vidur_fast.explore.errors import ExecutorError

EXECUTORS = ("local", "ray")
_RAY_CONNECT_TIMEOUT_S = 5.0


class InlineExecutor:
    """Runs every item in the calling process."""

    workers = 1

    def imap(self, fn: Callable, items: Iterable) -> Iterator[tuple[Any, Any, BaseException]]:
        for item in items:
            try:
                yield item, fn(item), None
            except Exception as exc:  # reported per item like the pools do
                yield item, None, exc

    def close(self) -> None:
        pass


# Imported once in the fork server, so that worker processes start with them loaded.
_PRELOAD = ["vidur_fast.explore.worker"]


class LocalExecutor:
    """A process pool forked from a clean server process that has the simulator imported
    (forkserver: no thread or Ray state inherited from the caller, and no per-worker import
    cost). Callers' scripts need the usual `if __name__ == "__main__":` guard."""

    def __init__(self, workers: int):
        self.workers = workers
        ctx = get_context("forkserver")
        ctx.set_forkserver_preload(_PRELOAD)
        self._pool = ProcessPoolExecutor(max_workers=workers, mp_context=ctx)

    def imap(self, fn: Callable, items: Iterable) -> Iterator[tuple[Any, Any, BaseException]]:
        pending = {self._pool.submit(fn, item): item for item in items}
        while pending:
            done, _ = wait(pending, return_when=FIRST_COMPLETED)
            for fut in done:
                item = pending.pop(fut)
                exc = fut.exception()
                yield item, (None if exc else fut.result()), exc

    def close(self) -> None:
        self._pool.shutdown(wait=True, cancel_futures=True)


def _check_reachable(address: str) -> None:
    """Fail fast on an address nothing listens on (ray.init would wait for minutes)."""
    if address in ("auto", "local"):
        return
    hostport = address.removeprefix("ray://")
    host, sep, port = hostport.rpartition(":")
    if not sep or not port.isdigit():
        raise ExecutorError(
            f"ray_address: expected HOST:PORT, ray://HOST:PORT or auto (got {address!r})"
        )
    try:
        with socket.create_connection((host, int(port)), timeout=_RAY_CONNECT_TIMEOUT_S):
            pass
    except OSError as exc:
        raise ExecutorError(
            f"ray_address: cannot reach a Ray cluster at {address} ({exc.strerror or exc})"
        ) from None


class RayExecutor:
    """Ray tasks, one CPU each. Joins a running cluster (address, or one already initialised
    in this process) or starts a local one with `workers` CPUs, and stops only what it
    started."""

    def __init__(self, workers: int | None, address: str | None):
        try:
            import ray
        except ImportError:
            raise ExecutorError(
                "executor: ray is not installed; pip install 'vidur-fast[ray]'"
            ) from None
        self._ray = ray
        self._owned = False
        if not ray.is_initialized():
            kwargs: dict[str, Any] = {"include_dashboard": False, "logging_level": "WARNING"}
            if address:
                _check_reachable(address)
                kwargs["address"] = address
            else:
                kwargs["num_cpus"] = workers or os.cpu_count() or 1
            try:
                ray.init(**kwargs)
            except (ConnectionError, RuntimeError, ValueError) as exc:
                msg = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
                raise ExecutorError(f"ray_address: {msg}") from None
            self._owned = True
        self.workers = workers or max(1, int(ray.cluster_resources().get("CPU", 1)))

    def imap(self, fn: Callable, items: Iterable) -> Iterator[tuple[Any, Any, BaseException]]:
        ray = self._ray
        remote = ray.remote(num_cpus=1, max_retries=0)(fn)
        pending = {remote.remote(item): item for item in items}
        while pending:
            done, _ = ray.wait(list(pending), num_returns=1)
            for ref in done:
                item = pending.pop(ref)
                try:
                    yield item, ray.get(ref), None
                except Exception as exc:  # a dead worker fails its items, not the run
                    yield item, None, exc

    def close(self) -> None:
        if self._owned:
            self._ray.shutdown()


def make_executor(kind: str, workers: int | None, ray_address: str | None = None):
    """An executor of the given kind; raise ExecutorError for bad settings."""
    if kind not in EXECUTORS:
        raise ExecutorError(f"executor: must be one of {', '.join(EXECUTORS)} (got {kind!r})")
    if workers is not None and workers < 1:
        raise ExecutorError(f"workers: must be >= 1 (got {workers})")
    if ray_address and kind != "ray":
        raise ExecutorError("ray_address: only used with --executor ray")
    if kind == "ray":
        return RayExecutor(workers, ray_address)
    n = workers or os.cpu_count() or 1
    return InlineExecutor() if n == 1 else LocalExecutor(n)
