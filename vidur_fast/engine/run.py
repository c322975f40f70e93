"""Drive the kernel loop: allocate state, resume after log flushes, report progress."""

import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from vidur_fast.engine.batch_store import BatchStore
from vidur_fast.engine.jit_plan import compile_workers, precompile, usable_plan
from vidur_fast.engine.state import (
    alloc_kv,
    alloc_log,
    alloc_reps,
    alloc_reqs,
    alloc_run_state,
    hist_counts,
    kernel_array,
)
from vidur_fast.errors import UserError
from vidur_fast.jit_start import start_numba_target
from vidur_fast.kernels import loop
from vidur_fast.kernels.block_pool import init_pool_nb
from vidur_fast.kernels.closed_loop import ClosedLoop
from vidur_fast.kernels.codes import (
    BLK_SLOT,
    LS_DONE,
    LS_NEXT_REQ,
    LS_NOW,
    RunStatus,
    SchedPolicy,
)
from vidur_fast.kernels.dtypes import NEVER, NO_ID, NS_PER_S
from vidur_fast.kernels.pd import PDState, no_pd
from vidur_fast.kernels.pools import PoolParams, one_pool
from vidur_fast.kernels.router import (
    SESSION_ROUTERS,
    pins_sessions,
    reads_cache,
    route_groups,
    with_sessions,
)
from vidur_fast.kernels.state import (
    KvPool,
    Reps,
    Reqs,
    SchedParams,
    block_shift_of,
    max_running,
)
from vidur_fast.kernels.timing import TimingGrids, TimingParams
from vidur_fast.workload.closed_loop import ClosedLoopPlan, closed_loop_state

LOG_CAPACITY = 1 << 18
STEPS_PER_CALL = 1 << 21

STATUS_NAMES = {
    RunStatus.DONE: "done",
    RunStatus.TIME_LIMIT: "time_limit",
}


@dataclass
class EngineOutput:
    reqs: Reqs
    reps: Reps
    kv: KvPool
    batch_log: BatchStore
    hist: np.ndarray
    status: str
    end_ns: int
    loop_s: float
    loop_cpu_s: float = 0.0
    jit_s: float = 0.0
    """Loading (or compiling) the kernels, before the loop proper."""
    closed_loop: ClosedLoop | None = None
    disagg: PDState | None = None
    """Prefill/decode disaggregation state (kernels/pd.py); None without PD pools."""

    @property
    def batches(self):
        """Every batch record in kernel units (int64 ns), read from the batch store (a
        pandas DataFrame)."""
        return self.batch_log.frame_ns()


def _dense_sessions(session: np.ndarray) -> tuple[np.ndarray, int]:
    """Session ids -> 0..S-1 (NO_ID stays), so the sticky router can use a flat table."""
    out = np.full(session.shape[0], NO_ID, dtype=np.int64)
    has = session != NO_ID
    uniq, inv = np.unique(session[has], return_inverse=True)
    out[has] = inv
    return out, int(uniq.size)


def _max_request_blocks(sp: SchedParams, prompt: np.ndarray, decode: np.ndarray) -> int:
    """Longest block list one request can hold (sizes the pool's per-slot lists)."""
    if not sp.enable_prefix_caching:
        return 0
    longest = int((np.asarray(prompt) + np.asarray(decode)).max(initial=1))
    if sp.max_model_len > 0:
        longest = min(longest, sp.max_model_len)
    return min(sp.usable_blocks, -(-longest // sp.block_size) + 1)


def kernel_cached(dispatcher) -> bool | None:
    """Whether a kernel's machine code is in this process or in Numba's on-disk cache for this
    CPU (so the first call loads it instead of compiling); None when it cannot be told. Reads
    the cache index as Numba's own load does; call after start_numba_target()."""
    try:
        if dispatcher.overloads:
            return True
        cache = dispatcher._cache
        index = cache._cache_file._load_index()
        if not index:
            return False
        from numba.core.registry import cpu_target

        magic = cpu_target.target_context.codegen().magic_tuple()
        code = cache._index_key(next(iter(index))[0], cpu_target.target_context.codegen())[2]
        return any(key[1] == magic and key[2] == code for key in index)
    except Exception:  # another Numba version's internals: say nothing rather than guess
        return None


def _ignoring_errors(fn: Callable[[], object]) -> None:
    try:
        fn()
    except Exception:  # the caller meets the error again when it does the work itself
        pass


# Without hashes in the workload (and without prefill/decode pools, whose transfers hand
# blocks between replicas) each replica's prefix-cache pool starts as counts
# (kernels/block_counts.py): the same results, without a visit to every block. Off: every
# replica lays its blocks out from the start (tests compare the two).
COUNT_UNHASHED_POOLS = True


def _note(bar, msg: str) -> None:
    if bar is not None:
        bar.write(msg, file=sys.stderr)
    else:
        print(msg, file=sys.stderr, flush=True)


def _limit_pool_blocks(kv: KvPool, pools: PoolParams) -> None:
    """Replicas of pools with fewer KV blocks than the largest: only their first blocks are in
    the free queue (the rest of the pool's rows are never handed out)."""
    for r, q in enumerate(pools.rep_pool):
        blocks = int(pools.usable_blocks[q])
        if blocks < kv.blk.shape[1]:
            kv.blk[r, blocks:, BLK_SLOT] = NO_ID
            kv.ftail[r] = kv.fhead[r] + blocks
            kv.nfree[r] = blocks


def run_engine(
    arrival_s: np.ndarray,
    prompt: np.ndarray,
    decode: np.ndarray,
    session: np.ndarray,
    hash_off: np.ndarray,
    rejected: np.ndarray,
    grids: TimingGrids,
    tparams: TimingParams,
    sp: SchedParams,
    u_route: np.ndarray,
    time_limit_s: float = 0.0,
    progress: bool = False,
    log_capacity: int = LOG_CAPACITY,
    closed_loop: ClosedLoopPlan | None = None,
    hashes: np.ndarray | None = None,
    compress_batches: bool = True,
    pools: PoolParams | None = None,
    pd_setup: Callable | None = None,
    alongside: Callable[[], object] | None = None,
) -> EngineOutput:
    """Simulate until every request finished (or was rejected) or the time limit passed.

    log_capacity: batch records held in memory; each time the log fills, its records go to
    the on-disk batch store (in a thread) and the loop resumes with a second log.
    closed_loop: run N clients (arrival_s then holds each client's first send and +inf for
    requests released during the run; reqs.arrival_ns holds the real times afterwards).
    hashes: chained prefix-block hashes indexed by hash_off (prefix caching and the
    prefix_aware router read them); None = no hashes.
    compress_batches: compress spilled batch records for metrics.h5 while the loop runs (off
    when no metrics.h5 will be written: the CPU would be spent for nothing).
    pools: a cluster of several pools (kernels/pools.py); sp then holds the largest pp and KV
    block count (they size the state) and pools each replica's own. None = one pool.
    pd_setup: with prefill/decode pools (or pools with routers of their own), a function of
    the request count returning the kernels' PDState (kernels/pd.py); its routers
    (PDState.rt) left empty = the cluster router (sp) over each role's replicas. None = no
    disaggregation: the cluster router is one route group over all replicas.
    alongside: work for a second thread while the loop runs (the kernel holds no GIL), such
    as the imports of the caller's output writers; its errors are ignored (the caller meets
    them again when it does that work itself). The loop's result waits for it.
    """
    if sp.block_shift not in (-1, block_shift_of(sp.block_size)):  # derived: never silently off
        raise ValueError(f"SchedParams.block_shift {sp.block_shift} for block_size {sp.block_size}")
    arrival_s = np.asarray(arrival_s, dtype=np.float64)
    known = np.isfinite(arrival_s)
    arrival_ns = np.full(arrival_s.shape[0], NEVER, dtype=np.int64)
    arrival_ns[known] = np.round(arrival_s[known] * NS_PER_S).astype(np.int64)
    session = np.asarray(session, dtype=np.int64)
    n_sessions = 0
    if pools is None:
        pools = one_pool()
    knobs = (sp.router, sp.router_tolerance_factor, sp.router_top_k, sp.max_imbalance_tokens)
    if pd_setup is None:
        pd_state = no_pd(knobs, sp.num_replicas)
    else:
        pd_state = pd_setup(arrival_ns.shape[0])
    if pd_state.role.shape[0] > 0 and pd_state.rt.policy.shape[0] == 0:
        # no routers given: the cluster router over each role's replicas
        rep_pool = pools.rep_pool if pools.rep_pool.shape[0] > 0 else np.zeros(sp.num_replicas)
        own = [None] * (int(rep_pool.max()) + 1)
        groups = route_groups(pd_state.role, rep_pool, knobs, own, arrival_ns.shape[0])
        pd_state = pd_state._replace(rt=groups)
    if sp.router in SESSION_ROUTERS or pins_sessions(pd_state.rt):
        session, n_sessions = _dense_sessions(session)
    pd_state = pd_state._replace(rt=with_sessions(pd_state.rt, n_sessions))
    if hashes is None:
        hash_off = np.zeros(arrival_ns.shape[0] + 1, dtype=np.int64)
    u_route = kernel_array(u_route, np.float64)
    reqs = alloc_reqs(arrival_ns, prompt, decode, session, hash_off, hashes, u_route)
    cl = closed_loop_state(closed_loop, arrival_ns.shape[0])
    reqs.rejected[:] = rejected
    pool_blocks = sp.usable_blocks if sp.enable_prefix_caching else 0
    reps = alloc_reps(sp.num_replicas, sp.pp, max_running(sp), loop.batch_slots(sp))
    start_numba_target()  # before the first kernel: alloc_kv sets up the pool with one
    t_pool = time.perf_counter()
    compiling_pool = progress and pool_blocks > 0 and kernel_cached(init_pool_nb) is False
    if compiling_pool:
        _note(None, "compiling the prefix-cache pool set-up (first run only; then cached) ...")
    # block lists: one per running request; with prefill/decode pools as many again for the
    # requests whose KV is in transfer (kernels/pd.py)
    lists = max_running(sp) * (1 if pd_setup is None else 2)
    kv = alloc_kv(
        sp.num_replicas,
        arrival_ns.shape[0],
        lists,
        pool_blocks,
        _max_request_blocks(sp, prompt, decode),
        counted=COUNT_UNHASHED_POOLS and pd_setup is None and int(reqs.hash_off[-1]) == 0,
    )
    if compiling_pool:
        took = time.perf_counter() - t_pool
        _note(None, f"compiled the prefix-cache pool set-up in {took:.0f} s")
    if pool_blocks > 0 and pools.rep_pool.shape[0] > 0:
        _limit_pool_blocks(kv, pools)
    log = alloc_log(log_capacity)
    # the caller reads grids.counters afterwards, so that array is passed through as is
    tables = {k: kernel_array(v, v.dtype) for k, v in grids._asdict().items() if k != "counters"}
    grids = grids._replace(**tables)
    run = alloc_run_state()
    lstate = run.loop
    limit_ns = int(round(time_limit_s * NS_PER_S))
    n = arrival_ns.shape[0]
    n_live = int((rejected == 0).sum()) if closed_loop is None else n
    store = BatchStore.for_log(log, compress_batches)
    bar = None
    if progress:
        from tqdm import tqdm

        # the first run after installing compiles the kernels (a minute or two): say so
        bar = tqdm(
            total=n_live,
            unit="req",
            desc="loading kernels (compiled once, cached)",
            file=sys.stderr,
            leave=False,
            disable=None,  # no bar when stderr is not a terminal
        )

    def advance(max_steps: int) -> int:
        return loop.run_nb(
            reqs, reps, kv, log, run, cl, grids, tparams, sp, pools, pd_state, limit_ns, max_steps
        )

    # A zero-step call loads (or compiles) the kernels, so loop_s is simulation time only.
    pd_on = pd_state.role.shape[0] > 0
    pools_on = pools.rep_pool.shape[0] > 0
    kernel = loop.loop_kernel(sp.policy, pools_on, pd_on, sp.router, sp.dp_group > 1)
    missing = kernel_cached(kernel) is False
    compiling = progress and missing
    plan = None
    if missing:
        args = (reqs, reps, kv, log, run, cl, grids, tparams, sp, pools, pd_state, limit_ns, 0)
        plan = usable_plan(kernel, args)
    if compiling:
        what = SchedPolicy(sp.policy).name.lower() + (" with PD pools" if pd_on else "")
        if not pd_on and reads_cache(sp.router):
            what += " with a router that reads the prefix caches"
        _note(
            bar,
            f"compiling the simulation loop for {what} (first run after installing or "
            "upgrading, once per scheduler and kind of router; then cached) ...",
        )
    ahead = 0
    if plan is not None:
        ahead = precompile(plan, compile_workers(), lambda m: _note(bar, m) if progress else None)
    if compiling:
        if plan is None:
            est = "the loop and the kernels it calls: a minute or more"
        elif ahead:
            est = f"the loop function itself: about {plan.loop_cpu_s:.0f} s"
        else:
            cpu = plan.loop_cpu_s + sum(c.cpu_s for c in plan.callees)
            est = f"the loop and the kernels it calls: about {cpu:.0f} s"
        _note(bar, f"compiling {est} of one CPU core ...")
    t0 = time.perf_counter()
    advance(0)
    if bar is not None:
        bar.set_description_str("simulate", refresh=False)
    jit_s = time.perf_counter() - t0
    if compiling:
        _note(bar, f"compiled the simulation loop in {jit_s:.0f} s")
    side = None
    if alongside is not None:
        side = threading.Thread(target=_ignoring_errors, args=(alongside,), daemon=True)
        side.start()
    t0, c0 = time.perf_counter(), time.thread_time()
    while True:
        before = (lstate[LS_NOW], lstate[LS_NEXT_REQ], lstate[LS_DONE])
        status = advance(STEPS_PER_CALL)
        if bar is not None:
            bar.n = int(lstate[LS_DONE])
            bar.set_postfix_str(f"t={lstate[LS_NOW] / NS_PER_S:.1f}s", refresh=False)
            bar.refresh()
        if status == RunStatus.LOG_FULL:
            log = store.flush(log)  # spilled in a thread while the kernel fills another log
            continue
        if status == RunStatus.MAX_STEPS:
            # a whole call without time, arrivals or completions moving is a livelock: fail
            # loudly instead of hanging
            if before == (lstate[LS_NOW], lstate[LS_NEXT_REQ], lstate[LS_DONE]):
                raise RuntimeError(f"engine made no progress in {STEPS_PER_CALL} steps")
            continue
        break
    loop_s, loop_cpu_s = time.perf_counter() - t0, time.thread_time() - c0
    if side is not None:
        side.join()
    if bar is not None:
        bar.close()
        if bar.disable:  # stderr is not a terminal: one line for the phase instead of a bar
            print(
                f"simulate: {int(lstate[LS_DONE]):,} of {n_live:,} requests completed, "
                f"{lstate[LS_NOW] / NS_PER_S:.1f} s simulated in {loop_s:.2f} s "
                f"(kernels loaded in {jit_s:.2f} s)",
                file=sys.stderr,
            )
    if status == RunStatus.BROKEN:
        raise RuntimeError("engine invariant broken: a running list overflowed")
    if status not in STATUS_NAMES:
        raise UserError(f"simulation stopped with status {status}")
    store.keep_tail(log)
    end_ns = int(lstate[LS_NOW])
    if closed_loop is not None:  # only released requests had to finish
        n_live = int(((reqs.arrival_ns != NEVER) & (rejected == 0)).sum())
    if n and status == RunStatus.DONE and n_live and int(lstate[LS_DONE]) != n_live:
        raise RuntimeError(f"engine finished with {n_live - int(lstate[LS_DONE])} requests stuck")
    cl_out = cl if closed_loop is not None else None
    return EngineOutput(
        reqs,
        reps,
        kv,
        store,
        hist_counts(run.tbt_hist),
        STATUS_NAMES[status],
        end_ns,
        loop_s,
        loop_cpu_s,
        jit_s,
        cl_out,
        pd_state if pd_setup is not None else None,
    )
