"""Compile the kernels a simulation loop calls in worker processes, before the loop itself.

With an empty Numba cache the loop's compile types every kernel it calls, and typing a call
compiles the callee (typed, lowered, optimised by LLVM, made machine code, saved to the cache)
one after the other in one thread: ~80 callees of 0.1-3 CPU-s each, then the loop function
itself (docs/performance.md, "Compiling the callees first, in parallel"). A callee in
Numba's cache is loaded instead, from whichever process compiled it, with the LLVM module the
loop links and inlines. So on a machine with two or more cores the callees compile first in
worker processes (fresh interpreters), level by level, and the loop's compile then loads
them.

Which callees, and their argument types, is only known by typing the loop, so it is recorded:
`python -m vidur_fast.engine.jit_plan record` compiles each recorded loop variant in a fresh process
with an empty cache and writes jit_plan.json (per variant: the loop's argument types, each
callee's module, name, argument types, compile CPU seconds and level in the call graph). A
run uses the plan only when its loop's argument types are the recorded ones and its Numba
version the recording's; otherwise (or when a callee's types have changed since) the loop
compiles what it needs itself, as it would without a plan.
Either way the machine code is the same: the outputs do not depend on it.
"""

from __future__ import annotations

import base64
import importlib
import json
import os
import pickle
import sys
import time
import zlib
from pathlib import Path
from typing import NamedTuple

from vidur_fast.errors import UserError

PLAN_FILE = Path(__file__).with_name("jit_plan.json")
MAX_WORKERS = 4
MIN_CALLEES = 20  # a recorded loop calls 50-80 kernels; fewer means a broken recording


class Callee(NamedTuple):
    module: str
    qualname: str
    sig: bytes  # the pickled tuple of Numba argument types
    cpu_s: float  # compile CPU seconds where it was recorded (without its own callees)
    level: int  # 0: calls no other kernel; else 1 + the highest level of the kernels it calls


class VariantPlan(NamedTuple):
    loop_args: tuple  # Numba types of the loop entry's arguments
    loop_cpu_s: float  # the loop function and its entry, without the callees
    callees: list[Callee]


def variant_name(key: tuple) -> str:
    """The plan's name of a loop variant: kernels/loop.py loop_kernel's cache key
    (policy, pools_on, pd_on, cache_router[, dp_on]) as `policy-p-d-c[-dp]`."""
    policy, pools_on, pd_on, cache_router = key[:4]
    dp = "-dp" if len(key) > 4 else ""
    return f"{int(policy)}-{int(pools_on)}-{int(pd_on)}-{int(cache_router)}{dp}"


def _pack(obj) -> str:
    return base64.b64encode(zlib.compress(pickle.dumps(obj, protocol=4), 9)).decode("ascii")


def _unpack(text: str):
    return pickle.loads(zlib.decompress(base64.b64decode(text)))


def load_plan(key: tuple, path: Path | None = None) -> VariantPlan | None:
    """The recorded plan of one loop variant (from PLAN_FILE unless path is given); None when
    there is none, it was recorded with another Numba, or it does not read back (types this
    Numba cannot rebuild)."""
    import numba

    try:
        data = json.loads((PLAN_FILE if path is None else path).read_text())
        if data.get("numba") != numba.__version__:
            return None
        v = data["variants"].get(variant_name(key))
        if v is None:
            return None
        callees = [Callee(*c) for c in _unpack(v["callees"])]
        return VariantPlan(_unpack(v["loop_args"]), float(v["loop_cpu_s"]), callees)
    except Exception:  # no plan, or one this Numba cannot read: compile as without one
        return None


def arg_types(args: tuple) -> tuple:
    """Numba's types of a kernel's arguments, as a dispatcher types them for a call."""
    from numba import typeof
    from numba.core.typing.typeof import Purpose

    return tuple(typeof(a, Purpose.argument) for a in args)


def usable_plan(kernel, args: tuple) -> VariantPlan | None:
    """The recorded plan of loop kernel `kernel` (a dispatcher of kernels/loop.py
    loop_kernel) when the loop is to be called with `args` of the recorded types; None
    otherwise (then the loop's compile compiles its callees itself)."""
    from vidur_fast.kernels import loop

    key = next((k for k, v in loop._ENTRIES.items() if v is kernel), None)
    plan = None if key is None else load_plan(key)
    if plan is None:
        return None
    try:
        return plan if loop.loop_arg_types(args) == plan.loop_args else None
    except Exception:  # an argument Numba cannot type here: the call itself will say so
        return None


def compile_workers() -> int:
    """Processes that compile the callees: VIDUR_FAST_COMPILE_WORKERS when set (0 or 1: none,
    the loop's compile does it all), else the CPU cores this process may run on, at most
    MAX_WORKERS (each is an interpreter with Numba, ~150 MB; the plan's levels hold 3-33
    kernels, so more processes mostly wait)."""
    text = os.environ.get("VIDUR_FAST_COMPILE_WORKERS", "").strip()
    if not text:
        return min(cores(), MAX_WORKERS)
    if not text.isdigit():
        raise UserError(f"VIDUR_FAST_COMPILE_WORKERS: must be a whole number >= 0 (got {text!r})")
    return int(text)


def _dispatcher(module: str, qualname: str):
    obj = importlib.import_module(module)
    for part in qualname.split("."):
        obj = getattr(obj, part)
    return obj


def signature_cached(dispatcher, sig: tuple) -> bool:
    """Whether Numba's on-disk cache (or this process) holds dispatcher's machine code for
    argument types sig on this CPU; call after start_numba_target()."""
    if sig in dispatcher.overloads:
        return True
    try:
        from numba.core.registry import cpu_target

        cache = dispatcher._cache
        key = cache._index_key(sig, cpu_target.target_context.codegen())
        return key in (cache._cache_file._load_index() or {})
    except Exception:  # another Numba's internals: count it as missing (compiling re-checks)
        return False


def compile_callees(callees: list[tuple[str, str, bytes]]) -> float:
    """Compile (or load) each (module, qualname, pickled argument types) into Numba's cache,
    in order; returns this process's CPU seconds. Runs in the worker processes."""
    from vidur_fast.jit_start import start_numba_target

    t0 = time.process_time()
    start_numba_target()
    for module, qualname, sig in callees:
        try:
            _dispatcher(module, qualname).compile(pickle.loads(sig))
        except Exception:  # a stale entry: the loop's own compile meets what it needs
            pass
    return time.process_time() - t0


def cores() -> int:
    """CPU cores this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def jobs_by_level(plan: VariantPlan) -> list[list[list[Callee]]]:
    """The callees Numba's cache lacks, by level (kernels that call no other kernel first,
    then their callers, ...: a level's kernels find their callees compiled), within a level
    one job per kernel (all its signatures, so that no two workers write one kernel's
    cache index at once). Call after start_numba_target()."""
    by_kernel: dict[tuple[str, str], list[Callee]] = {}
    for c in plan.callees:
        try:
            missing = not signature_cached(_dispatcher(c.module, c.qualname), pickle.loads(c.sig))
        except Exception:  # gone or renamed since the recording
            continue
        if missing:
            by_kernel.setdefault((c.module, c.qualname), []).append(c)
    levels: dict[int, list[list[Callee]]] = {}
    for job in by_kernel.values():
        levels.setdefault(max(c.level for c in job), []).append(job)
    return [levels[k] for k in sorted(levels)]


def serve() -> None:
    """A compile process: compiles each job read from stdin (a line of JSON: [module,
    qualname, base64 of the pickled argument types] per signature), answering a line when
    it is done."""
    for line in sys.stdin:
        job = json.loads(line)
        compile_callees([(m, q, base64.b64decode(sig)) for m, q, sig in job])
        sys.stdout.write("done\n")
        sys.stdout.flush()


def _job_line(job: list[Callee]) -> str:
    sigs = [(c.module, c.qualname, base64.b64encode(c.sig).decode("ascii")) for c in job]
    return json.dumps(sigs) + "\n"


def _run_levels(levels: list[list[list[Callee]]], workers: int) -> None:
    """Compile the jobs in `workers` fresh interpreters (`python -c`, so nothing of the
    caller's __main__ is imported again), level after level, each job to the first idle one."""
    import select
    import subprocess

    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
    cmd = [sys.executable, "-c", "from vidur_fast.engine.jit_plan import serve; serve()"]
    opts = {"stdin": subprocess.PIPE, "stdout": subprocess.PIPE, "stderr": subprocess.DEVNULL}
    procs = [subprocess.Popen(cmd, env=env, text=True, **opts) for _ in range(workers)]
    try:
        for level in levels:  # the longest first, so that the last ones keep both busy
            queue = sorted(level, key=lambda job: -sum(c.cpu_s for c in job))
            idle, busy = list(procs), {}
            while queue or busy:
                while queue and idle:
                    proc = idle.pop()
                    proc.stdin.write(_job_line(queue.pop(0)))
                    proc.stdin.flush()
                    busy[proc.stdout.fileno()] = proc
                ready, _, _ = select.select(list(busy), [], [])
                for fd in ready:
                    proc = busy.pop(fd)
                    if not proc.stdout.readline():
                        raise RuntimeError("a compile process ended")
                    idle.append(proc)
    finally:
        for proc in procs:
            try:
                proc.stdin.close()
            except OSError:
                pass
        for proc in procs:
            proc.wait()


def precompile(plan: VariantPlan, workers: int, note) -> int:
    """Compile the plan's callees missing from Numba's cache in `workers` processes, saying
    what and for how long on `note`; returns how many kernels were compiled (0: nothing to
    do, or fewer than two workers, when the loop's own compile is as fast)."""
    if workers < 2 or os.name != "posix":  # the processes are waited on with select()
        return 0
    levels = jobs_by_level(plan)
    n_kernels = sum(len(level) for level in levels)
    if n_kernels < 2:
        return 0
    workers = min(workers, n_kernels)
    cpu = sum(c.cpu_s for level in levels for job in level for c in job)
    n_sigs = sum(len(job) for level in levels for job in level)
    note(
        f"compiling the {n_kernels} kernels the simulation loop calls ({n_sigs} signatures, "
        f"~{cpu:.0f} CPU-s where recorded) in {workers} processes first: about "
        f"{cpu / workers:.0f} s ..."
    )
    t0 = time.perf_counter()
    try:
        _run_levels(levels, workers)
    except Exception:  # no processes here (or one died): the loop's compile does the rest
        note("compiling them in parallel failed; the loop's compile compiles what is missing")
        return 0
    note(f"compiled them in {time.perf_counter() - t0:.0f} s")
    return n_kernels


# ---- recording (python -m vidur_fast.engine.jit_plan record) ----

_RECORD = """
import json, pickle, sys, time
from numba.core import event
from numba.core.dispatcher import Dispatcher
from vidur_fast.engine.jit_plan import _pack
from vidur_fast.api import simulate
from vidur_fast.config.sim import SimConfig
from vidur_fast.config.workload import FixedLengths, SyntheticWorkload
import vidur_fast.config as s

stack, done, calls = [], [], {}


class Listener(event.Listener):
    def on_start(self, ev):
        stack.append([time.process_time(), 0.0, len(stack), set()])

    def on_end(self, ev):
        t0, nested, depth, called = stack.pop()
        took = time.process_time() - t0
        if stack:
            stack[-1][1] += took
        f = ev.data["dispatcher"].py_func
        name = (f.__module__, f.__qualname__)
        calls.setdefault(name, set()).update(called - {name})
        done.append((depth, *name, tuple(ev.data["args"]), took - nested))


typed_call = Dispatcher.get_call_template


def get_call_template(self, args, kws):
    # every kernel a compile types a call to, compiled already or not
    if stack:
        stack[-1][3].add((self.py_func.__module__, self.py_func.__qualname__))
    return typed_call(self, args, kws)


Dispatcher.get_call_template = get_call_template
levels = {}


def level(name, seen=()):
    # 0: calls no other kernel; else 1 + the highest level of the kernels it calls
    if name not in levels:
        below = [level(c, seen + (name,)) for c in calls.get(name, ()) if c not in seen]
        levels[name] = 1 + max(below, default=-1)
    return levels[name]


event.register("numba:compile", Listener())
sched = getattr(s, sys.argv[1])()
# a small run: its loop's argument types are every run's (kernels/loop.py loop_arg_types)
cfg = SimConfig(
    workload=SyntheticWorkload(num_requests=2, lengths=FixedLengths(16, 2)),
    scheduler=sched,
    quiet=True,
)
simulate(cfg)
# the loop entry (kernels/loop.py _loop_entry) is compiled from Python; its callees nest in it
entry = next(i for i, d in enumerate(done) if d[0] == 0 and d[2].startswith("_loop_entry."))
start = entry
while start > 0 and done[start - 1][0] > 0:
    start -= 1
callees = [d for d in done[start:entry] if "<locals>" not in d[2] and d[2] != "_run_loop_nb"]
loop_cpu = sum(d[4] for d in done[start:entry + 1] if d not in callees)
from vidur_fast.kernels import loop
key = next(iter(loop._ENTRIES))
print(json.dumps({
    "key": list(key),
    "loop_args": _pack(done[entry][3]),
    "loop_cpu_s": round(loop_cpu, 2),
    "callees": _pack([(m, q, pickle.dumps(a, protocol=4), round(c, 3), level((m, q)))
                      for _, m, q, a, c in callees]),
    "names": [f"{m}.{q}" for _, m, q, *_ in callees],
}))
"""

# the loop variants recorded: the default run's (vllm_v1) and the other schedulers' with one
# pool, no PD pools and a router that does not read the prefix caches
RECORDED_SCHEDULERS = ("VllmV1Scheduler", "SarathiScheduler")


def record(schedulers=RECORDED_SCHEDULERS, path: Path = PLAN_FILE) -> None:
    """Compile each scheduler's default loop variant in a fresh process with an empty Numba
    cache and write the plan file (a few CPU minutes)."""
    import subprocess
    import tempfile

    import numba

    variants = {}
    with tempfile.TemporaryDirectory(prefix="vidur-fast-jit-plan-") as tmp:
        procs = []  # one process per variant, each with an empty cache of its own
        for name in schedulers:
            # every callee compiled: without the shipped kernel bundle (kernel_bundle.py)
            env = {**os.environ, "NUMBA_CACHE_DIR": str(Path(tmp) / name)}
            env["VIDUR_FAST_KERNEL_BUNDLE"] = "0"
            # and no compile processes: with a plan file that fits the loop already, they
            # would compile the callees first and the loop's compile would only load them
            env["VIDUR_FAST_COMPILE_WORKERS"] = "0"
            cmd = [sys.executable, "-c", _RECORD, name]
            procs.append((name, subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, text=True)))
        for name, proc in procs:
            out, _ = proc.communicate()
            if proc.returncode != 0:
                sys.exit(f"recording {name} failed")
            v = json.loads(out.strip().splitlines()[-1])
            variants[variant_name(tuple(v.pop("key")))] = v
            n = len(v["names"])
            print(f"{name}: {n} callees, loop {v['loop_cpu_s']} CPU-s", file=sys.stderr)
            if n < MIN_CALLEES:
                # a recording whose callees compiled outside the loop's compile event;
                # such a plan would leave the callees to the loop's thread
                sys.exit(
                    f"recording {name}: only {n} callees seen inside the loop's compile; "
                    "nothing written, run it again"
                )
    data = {"numba": numba.__version__, "variants": variants}
    path.write_text(json.dumps(data, indent=1) + "\n")


if __name__ == "__main__":
    if sys.argv[1:] != ["record"]:
        sys.exit("usage: python -m vidur_fast.engine.jit_plan record")
    record()
