"""Executors: run a function over a list of items in parallel and yield results as they come.

- inline: in this process (one worker; no start-up cost).
- local: a pool of spawned processes, one per worker; processes are reused across items.
- ray: a pool of Ray actors, one CPU each, reused across items (a local cluster started
  here, or an existing one by address).

Items are chunks of work; the callers order results themselves, so which executor ran them
(and in what order they finished) never changes the output.
"""

import contextlib
import ctypes
import ctypes.util
import os
import signal
import socket
import sys
import threading
import time
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
    on_this_machine = True  # workers share this machine's Numba and grid caches

    def imap(self, fn: Callable, items: Iterable) -> Iterator[tuple[Any, Any, BaseException]]:
        for item in items:
            try:
                yield item, fn(item), None
            except Exception as exc:  # reported per item like the pools do
                yield item, None, exc

    def close(self, abort: bool = False) -> None:
        pass


# Imported once in the fork server, so that worker processes start with them loaded.
_PRELOAD = ["vidur_fast.explore.worker"]
_WATCH_EVERY_S = 0.5


def _set_parent_death_signal() -> None:
    """Linux: the kernel sends SIGKILL to this process when its parent (the fork server,
    which exits when the main process does) dies."""
    if not sys.platform.startswith("linux"):
        return
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        libc.prctl(1, int(signal.SIGKILL), 0, 0, 0)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def _release_fork_server() -> None:
    """Close this worker's copy of the fork server's keep-alive pipe. The fork server exits
    when every holder of that pipe is gone; with the workers holding it, a killed main
    process would leave the server, and so the workers, running."""
    from multiprocessing import forkserver

    server = getattr(forkserver, "_forkserver", None)
    fd = getattr(server, "_forkserver_alive_fd", None)
    if fd is not None:
        with contextlib.suppress(OSError):
            os.close(fd)
        server._forkserver_alive_fd = None


def _gone(pid: int) -> bool:
    """True when pid has exited (a zombie not yet reaped counts as exited)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except OSError:
        return False
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rsplit(b")", 1)[1].split()[0] == b"Z"
    except (OSError, IndexError):
        return False


def _watch_parent(main_pid: int, parent_pid: int) -> None:
    """Exit this worker as soon as the main process or the worker's parent is gone (every
    platform; on Linux the death signal usually gets there first)."""
    while True:
        time.sleep(_WATCH_EVERY_S)
        if os.getppid() != parent_pid or _gone(main_pid):
            os._exit(1)


_RECHECK_EXIT_S = 0.01


def _unsafe_to_leave() -> frozenset:
    """Code that must not be cut short by this worker's exit: writing a message to a pipe
    (a half-written result leaves the pool's reader waiting for the rest for ever) and the
    resource tracker's registration (the exit clean-up would enter it again from within)."""
    from multiprocessing import connection, resource_tracker, synchronize

    tracker = resource_tracker.ResourceTracker
    return frozenset(
        f.__code__
        for f in (
            connection.Connection._send,
            connection.Connection._send_bytes,
            tracker.ensure_running,
            tracker._send,
            synchronize.SemLock.__init__,
        )
    )


def inside_unsafe_section(frame) -> bool:
    """Whether the interrupted stack (a signal handler's frame) is in _unsafe_to_leave."""
    unsafe = _unsafe_to_leave()
    while frame is not None:
        if frame.f_code in unsafe:
            return True
        frame = frame.f_back
    return False


def _exit_on_term(signum, frame) -> None:
    """SIGTERM in a worker (the main process stopping the pool): run the exit clean-up that
    releases this process's semaphores, then exit; if the signal came in the middle of a
    pipe write or a semaphore registration, let that finish first (checked again shortly
    by an alarm, which also wakes a worker blocked on its next item)."""
    if inside_unsafe_section(frame):
        signal.signal(signal.SIGALRM, lambda _s, f: _exit_on_term(signum, f))
        signal.setitimer(signal.ITIMER_REAL, _RECHECK_EXIT_S)
        return
    from multiprocessing import util

    with contextlib.suppress(Exception):
        util._run_finalizers(0)
    os._exit(128 + signum)


def worker_init(main_pid: int) -> None:
    """Initializer of every pool worker: die with the main process (kill -9 included), and
    leave Ctrl-C and SIGTERM to the main process, which stops the pool itself."""
    _set_parent_death_signal()
    _release_fork_server()
    parent = os.getppid()
    if parent == 1:  # the parent died before the death signal was armed
        os._exit(1)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, _exit_on_term)
    threading.Thread(target=_watch_parent, args=(main_pid, parent), daemon=True).start()


class LocalExecutor:
    """A process pool forked from a clean server process that has the simulator imported
    (forkserver: no thread or Ray state inherited from the caller, and no per-worker import
    cost). Callers' scripts need the usual `if __name__ == "__main__":` guard."""

    on_this_machine = True

    def __init__(self, workers: int):
        self.workers = workers
        ctx = get_context("forkserver")
        ctx.set_forkserver_preload(_PRELOAD)
        self._pool = ProcessPoolExecutor(
            max_workers=workers, mp_context=ctx, initializer=worker_init, initargs=(os.getpid(),)
        )

    def imap(self, fn: Callable, items: Iterable) -> Iterator[tuple[Any, Any, BaseException]]:
        pending = {self._pool.submit(fn, item): item for item in items}
        while pending:
            done, _ = wait(pending, return_when=FIRST_COMPLETED)
            for fut in done:
                item = pending.pop(fut)
                exc = fut.exception()
                yield item, (None if exc else fut.result()), exc

    def close(self, abort: bool = False) -> None:
        """Wait for the running items; abort: kill the workers instead (an interrupt)."""
        if abort:
            procs = list((getattr(self._pool, "_processes", None) or {}).values())
            for proc in procs:
                with contextlib.suppress(OSError, ValueError):
                    proc.terminate()
            for proc in procs:
                with contextlib.suppress(OSError, ValueError, AssertionError):
                    proc.join(timeout=5)
                    if proc.exitcode is None:
                        proc.kill()
                        proc.join(timeout=5)
            # a worker killed while writing its result leaves part of a message in the
            # result pipe; with every writer closed the pool's reader sees the end of the pipe
            # instead of waiting for the rest
            writer = getattr(getattr(self._pool, "_result_queue", None), "_writer", None)
            if writer is not None and all(p.exitcode is not None for p in procs):
                with contextlib.suppress(OSError):
                    writer.close()
            # the pool notices its dead workers and releases its queues and their semaphores
            self._pool.shutdown(wait=True, cancel_futures=True)
            return
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


class _RayRunner:
    """Body of a Ray actor: one warm worker process that runs item after item, so what a
    worker keeps between items (loaded kernels, timing grids, trace files) is loaded once per
    actor, not once per point."""

    def call(self, fn: Callable, item: Any) -> Any:
        return fn(item)


class RayExecutor:
    """A pool of Ray actors, one CPU each, kept for the executor's life: each item goes to
    the next idle actor. Joins a running cluster (address, or one already initialised in this
    process) or starts a local one with `workers` CPUs, and stops only what it started."""

    def __init__(self, workers: int | None, address: str | None):
        try:
            import ray
        except ImportError:
            raise ExecutorError(
                "executor: ray is not installed; pip install 'vidur-fast[ray]'"
            ) from None
        self._ray = ray
        self._owned = False
        self._actors: list = []
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
        self.on_this_machine = self._owned and not address  # a local cluster started here
        self._actor_class = ray.remote(num_cpus=1, max_restarts=0, max_task_retries=0)(_RayRunner)

    def _new_actor(self):
        actor = self._actor_class.remote()
        self._actors.append(actor)
        return actor

    def _drop_actor(self, actor) -> None:
        with contextlib.suppress(ValueError):
            self._actors.remove(actor)
        with contextlib.suppress(Exception):
            self._ray.kill(actor)

    def imap(self, fn: Callable, items: Iterable) -> Iterator[tuple[Any, Any, BaseException]]:
        ray = self._ray
        queue = list(items)
        queue.reverse()  # pop() takes them in order
        idle = list(self._actors)
        while len(idle) < min(self.workers, len(queue)):
            idle.append(self._new_actor())
        pending: dict = {}  # ref -> (item, actor)
        while queue or pending:
            while queue and idle:
                actor = idle.pop()
                item = queue.pop()
                pending[actor.call.remote(fn, item)] = (item, actor)
            done, _ = ray.wait(list(pending), num_returns=1)
            for ref in done:
                item, actor = pending.pop(ref)
                try:
                    result = ray.get(ref)
                except ray.exceptions.RayActorError as exc:  # the actor died: fail its item
                    self._drop_actor(actor)
                    if queue:
                        idle.append(self._new_actor())
                    yield item, None, exc
                    continue
                except Exception as exc:  # an error in the item itself
                    idle.append(actor)
                    yield item, None, exc
                    continue
                idle.append(actor)
                yield item, result, None

    def close(self, abort: bool = False) -> None:
        """Stop the actors (abort: with the items they are running, which on a cluster this
        executor joined would run on otherwise) and a cluster this executor started."""
        for actor in list(self._actors):
            self._drop_actor(actor)
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
