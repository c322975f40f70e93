"""Drive the kernel loop: allocate state, resume after log flushes, report progress."""

import sys
from dataclasses import dataclass

import numpy as np
import pandas as pd

from vidur_fast.engine.state import alloc_hist, alloc_log, alloc_reps, alloc_reqs
from vidur_fast.errors import UserError
from vidur_fast.kernels import loop
from vidur_fast.kernels.closed_loop import ClosedLoop
from vidur_fast.kernels.dtypes import NEVER, NS_PER_S
from vidur_fast.kernels.state import BatchLog, Reps, Reqs, SchedParams
from vidur_fast.kernels.timing import TimingGrids, TimingParams
from vidur_fast.workload.closed_loop import ClosedLoopPlan, closed_loop_state

LOG_CAPACITY = 1 << 18
STEPS_PER_CALL = 1 << 21

STATUS_NAMES = {
    loop.DONE: "done",
    loop.TIME_LIMIT: "time_limit",
}


@dataclass
class EngineOutput:
    reqs: Reqs
    reps: Reps
    batches: pd.DataFrame
    hist: np.ndarray
    status: str
    end_ns: int
    loop_s: float
    closed_loop: ClosedLoop | None = None


def _log_frame(log: BatchLog) -> pd.DataFrame:
    n = int(log.n[0])
    return pd.DataFrame({k: getattr(log, k)[:n].copy() for k in log._fields if k != "n"})


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
    closed_loop: ClosedLoopPlan | None = None,
) -> EngineOutput:
    """Simulate until every request finished (or was rejected) or the time limit passed.

    closed_loop: run N clients (arrival_s then holds each client's first send and +inf for
    requests released during the run; reqs.arrival_ns holds the real times afterwards)."""
    import time

    arrival_s = np.asarray(arrival_s, dtype=np.float64)
    known = np.isfinite(arrival_s)
    arrival_ns = np.full(arrival_s.shape[0], NEVER, dtype=np.int64)
    arrival_ns[known] = np.round(arrival_s[known] * NS_PER_S).astype(np.int64)
    reqs = alloc_reqs(arrival_ns, prompt, decode, session, hash_off)
    cl = closed_loop_state(closed_loop, arrival_ns.shape[0])
    reqs.rejected[:] = rejected
    reps = alloc_reps(sp.n_replicas, sp.pp, sp.batch_cap)
    log = alloc_log(LOG_CAPACITY)
    hist = alloc_hist()
    lstate = np.zeros(loop.N_LS, dtype=np.int64)
    rstate = np.zeros(4, dtype=np.int64)
    limit_ns = int(round(time_limit_s * NS_PER_S))
    n = arrival_ns.shape[0]
    n_live = int((rejected == 0).sum()) if closed_loop is None else n
    chunks = []
    bar = None
    if progress:
        from tqdm import tqdm

        bar = tqdm(total=n_live, unit="req", desc="simulate", file=sys.stderr, leave=False)
    t0 = time.perf_counter()
    while True:
        status = loop.run_nb(
            reqs,
            reps,
            log,
            hist,
            lstate,
            rstate,
            cl,
            grids,
            tparams,
            sp,
            u_route,
            limit_ns,
            STEPS_PER_CALL,
        )
        if bar is not None:
            bar.n = int(lstate[loop.LS_DONE])
            bar.set_postfix_str(f"t={lstate[loop.LS_NOW] / NS_PER_S:.1f}s", refresh=False)
            bar.refresh()
        if status == loop.LOG_FULL:
            chunks.append(_log_frame(log))
            log.n[0] = 0
            continue
        if status == loop.MAX_STEPS:
            continue
        break
    loop_s = time.perf_counter() - t0
    if bar is not None:
        bar.close()
    if status == loop.BROKEN:
        raise RuntimeError("engine invariant broken: a running list overflowed")
    if status not in STATUS_NAMES:
        raise UserError(f"simulation stopped with status {status}")
    chunks.append(_log_frame(log))
    batches = pd.concat(chunks, ignore_index=True)
    end_ns = int(lstate[loop.LS_NOW])
    if closed_loop is not None:  # only released requests had to finish
        n_live = int(((reqs.arrival_ns != NEVER) & (rejected == 0)).sum())
    if n and status == loop.DONE and n_live and int(lstate[loop.LS_DONE]) != n_live:
        raise RuntimeError(
            f"engine finished with {n_live - int(lstate[loop.LS_DONE])} requests stuck"
        )
    cl_out = cl if closed_loop is not None else None
    return EngineOutput(reqs, reps, batches, hist, STATUS_NAMES[status], end_ns, loop_s, cl_out)
