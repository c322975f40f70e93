"""`vidur-fast`: dispatch to a command (simulate is the default) and print user errors."""

import contextlib
import gc
import os
import signal
import sys
import threading
import warnings

from vidur_fast.errors import UserError

# command -> what it does (the top-level help's list)
COMMAND_HELP = {
    "simulate": "simulate one deployment (the default; flags: simulate --help)",
    "sweep": "run a grid of configs from a YAML file; one row per point",
    "capacity": "highest QPS, or fewest replicas/GPUs/dollars, under latency SLOs",
    "report": "compare runs, or a sweep; --html FILE writes one page",
    "validate": "simulate measured benchmarks (a CSV or --silicon-sample), errors",
    "profiles": "list models, devices, timing sources; build or show timing grids",
    "vidur-compat": "run a Vidur command line unchanged; explore: Vidur's explorer",
}
COMMANDS = tuple(COMMAND_HELP)

TOP_HELP = """usage: vidur-fast [COMMAND] [FLAGS]

A fast LLM inference serving simulator: TTFT, TBT, latency, queueing, KV use,
throughput and cost of a deployment under a workload.

commands:
{commands}

common invocations:
  vidur-fast                         # the default run (Llama-3-8B on one H100)
  vidur-fast --preset llama3-70b-h100-tp4 --cluster.num-replicas 2 \\
      workload:trace --workload.path trace.csv    # a named setup, a trace
  vidur-fast capacity docs/examples/capacity_llama3_8b.yaml --workers 2

`vidur-fast COMMAND --help` shows each command's flags; `--preset list` the
named setups; `python -m vidur_fast` is the same program."""


def top_help() -> str:
    width = max(map(len, COMMAND_HELP))
    lines = "\n".join(f"  {c:<{width}}  {h}" for c, h in COMMAND_HELP.items())
    return TOP_HELP.format(commands=lines)


def freeze_heap() -> None:
    """Put every object alive now out of the cyclic garbage collector's reach. The imports
    (pandas, numba, h5py, ...) leave over a million long-lived objects, and each full
    collection walks them all, several times at interpreter exit: 0.3-0.5 s of a 1-3 s run.
    Called after the imports and before exit; objects created later are collected as usual.
    Turns the collector back on where imports_without_gc turned it off."""
    gc.freeze()
    gc.enable()


def imports_without_gc() -> None:
    """Turn the cyclic garbage collector off until freeze_heap. The imports and the argument
    parsing of `vidur-fast simulate` create objects that all stay alive; the collector walked
    them 150-170 times (0.05-0.06 CPU-s of a run) before freeze_heap put them out of its reach."""
    gc.disable()


def single_threaded_blas() -> None:
    """Ask numpy's OpenBLAS for no threads of its own (unless the user chose a number). The
    simulator does no linear algebra, yet OpenBLAS starts a server thread per core when numpy
    is imported and each one polls for work before it sleeps: ~0.09 CPU-s of a short run taken
    from the loop and the writer threads on a 2-core machine. Only effective before numpy is
    imported; the sweep's worker processes inherit it."""
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")


def release_freed_memory() -> None:
    """Give the memory freed so far back to the system (glibc's malloc_trim). glibc maps big
    blocks on their own only above a threshold that it raises to the size of each such block
    freed (up to 32 MiB): after the first 8 MiB column of a 1M-request run is freed, later ones
    come from the heap, where freeing them keeps them resident. Called between simulating and
    writing, so that the engine's request state and the workload's columns, freed by then, do
    not stay resident under the writers' columns. Nothing elsewhere (another C library)."""
    try:
        import ctypes

        trim = ctypes.CDLL(None).malloc_trim
    except (OSError, AttributeError):
        return
    trim.argtypes = (ctypes.c_size_t,)
    trim(0)


class Terminated(KeyboardInterrupt):
    """SIGTERM or SIGHUP, raised in the main thread so that it unwinds like Ctrl-C: temp
    directories, claims and worker processes are cleaned up on the way out."""

    def __init__(self, signum: int):
        super().__init__(signum)
        self.signum = signum


_SIGNALS = tuple(getattr(signal, n) for n in ("SIGTERM", "SIGHUP") if hasattr(signal, n))


def _raise_terminated(signum, frame) -> None:
    # once: a second signal during the clean-up must not cut the clean-up short
    for s in _SIGNALS:
        with contextlib.suppress(OSError, ValueError):
            signal.signal(s, signal.SIG_IGN)
    raise Terminated(signum)


@contextlib.contextmanager
def signals_as_interrupts():
    """SIGTERM and SIGHUP raise Terminated while the block runs (main thread only)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {s: signal.getsignal(s) for s in _SIGNALS}
    for s in _SIGNALS:
        signal.signal(s, _raise_terminated)
    try:
        yield
    finally:
        for s, h in previous.items():
            with contextlib.suppress(OSError, ValueError, TypeError):
                signal.signal(s, h if h is not None else signal.SIG_DFL)


def _die(msg: str) -> None:
    print(f"error: {msg}", file=sys.stderr)
    raise SystemExit(2)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    single_threaded_blas()
    cmd = "simulate"
    if argv in (["-h"], ["--help"], ["help"]):
        cmd, argv = "help", []
    elif argv and argv[0] in COMMANDS:
        cmd = argv.pop(0)
    elif argv and not argv[0].startswith("-") and ":" not in argv[0]:
        import difflib

        close = difflib.get_close_matches(argv[0], COMMANDS, n=1)
        hint = f"; did you mean {close[0]!r}?" if close else ""
        _die(f"unknown command {argv[0]!r}{hint} commands: {', '.join(COMMANDS)}")
    caught: list = []
    try:
        # warnings wait until the command ends: shown after a success, dropped after a user
        # error (whose one line is all the user needs)
        with signals_as_interrupts(), warnings.catch_warnings(record=True) as caught:
            code = _dispatch(cmd, argv)
        for w in caught:
            warnings.showwarning(w.message, w.category, w.filename, w.lineno, w.file, w.line)
        return code
    except UserError as exc:
        _die(str(exc).splitlines()[0] if str(exc) else type(exc).__name__)
    except MemoryError:
        _die("out of memory: the workload or cluster is too large for this machine")
    except BrokenPipeError:
        # the reader of stdout stopped (`| head`): nothing left to say, and nothing to flush
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except KeyboardInterrupt as exc:
        signum = getattr(exc, "signum", signal.SIGINT)
        name = signal.Signals(signum).name if signum != signal.SIGINT else "Ctrl-C"
        what = "interrupted" if signum == signal.SIGINT else f"interrupted by {name}"
        kept = (
            "finished points are kept; run it again to resume"
            if cmd in ("sweep", "capacity")
            else "no run directory written"
        )
        print(f"{what} ({kept})", file=sys.stderr)
        return 128 + int(signum)
    finally:
        freeze_heap()  # interpreter exit then skips walking everything once more
    return 0


def run() -> None:
    """The `vidur-fast` program: main(), then exit_now() with its status. A Python error (a bug,
    with its traceback) or an unusual exit status leaves through the interpreter as usual."""
    try:
        code = main()
    except SystemExit as exc:
        if exc.code is not None and not isinstance(exc.code, int):
            raise
        code = exc.code or 0
    exit_now(code)


def exit_now(code: int) -> None:
    """Exit with `code` the way the interpreter does, but without tearing it down: the threads
    are joined and the exit handlers run (temporary directories, worker pools, logging) as at a
    normal exit, then the process ends without freeing each module and object one by one
    (40-90 ms of a short run on a 2-core machine). Only where this Python's own shutdown steps
    are there to call and no profiler or tracer runs (they write their figures after the
    program returns); otherwise the usual exit."""
    import atexit

    shutdown_threads = getattr(threading, "_shutdown", None)
    run_exit_handlers = getattr(atexit, "_run_exitfuncs", None)
    watched = sys.getprofile() is not None or sys.gettrace() is not None
    if shutdown_threads is None or run_exit_handlers is None or watched:
        raise SystemExit(code)
    shutdown_threads()  # non-daemon threads finish, thread pools are told to stop
    run_exit_handlers()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError, AttributeError):
            stream.flush()
    os._exit(code)


def _dispatch(cmd: str, argv: list[str]) -> int:
    if cmd == "help":
        print(top_help())
        return 0
    if cmd == "simulate":
        imports_without_gc()  # until cmd_simulate's freeze_heap (or main's, on an error)
        from vidur_fast.commands.simulate import cmd_simulate

        return cmd_simulate(argv)
    if cmd in ("sweep", "capacity"):
        from vidur_fast.commands.sweep import main_capacity, main_sweep

        return (main_sweep if cmd == "sweep" else main_capacity)(argv)
    if cmd == "vidur-compat":
        imports_without_gc()  # until main_compat's freeze_heap
        from vidur_fast.commands.vidur_compat import main_compat

        return main_compat(argv)
    if cmd == "report":
        from vidur_fast.commands.report import main_report

        return main_report(argv)
    if cmd == "validate":
        from vidur_fast.commands.validate import cmd_validate

        return cmd_validate(argv)
    from vidur_fast.commands.profiles import cmd_profiles

    return cmd_profiles(argv)


if __name__ == "__main__":
    raise SystemExit(main())
