"""Drive the kernel loop: allocate state, resume after log flushes, report progress."""

import sys
from dataclasses import dataclass

import numpy as np
import pandas as pd

from vidur_fast.engine.state import alloc_hist, alloc_log, alloc_reps, alloc_reqs
from vidur_fast.errors import UserError
from vidur_fast.kernels import loop
from vidur_fast.kernels.dtypes import NO_ID, NS_PER_S, RouterPolicy
from vidur_fast.kernels.router import RSTATE_SESSIONS
from vidur_fast.kernels.state import BatchLog, Reps, Reqs, SchedParams
from vidur_fast.kernels.timing import TimingGrids, TimingParams

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


def _log_frame(log: BatchLog) -> pd.DataFrame:
    n = int(log.n[0])
    return pd.DataFrame({k: getattr(log, k)[:n].copy() for k in log._fields if k != "n"})


def _dense_sessions(session: np.ndarray) -> tuple[np.ndarray, int]:
    """Session ids -> 0..S-1 (NO_ID stays), so the sticky router can use a flat table."""
    out = np.full(session.shape[0], NO_ID, dtype=np.int64)
    has = session != NO_ID
    uniq, inv = np.unique(session[has], return_inverse=True)
    out[has] = inv
    return out, int(uniq.size)


def _max_request_blocks(sp: SchedParams, prompt: np.ndarray, decode: np.ndarray) -> int:
    """Longest block list one request can hold (sizes the pool's per-slot lists)."""
    if not sp.prefix_caching:
        return 0
    longest = int((np.asarray(prompt) + np.asarray(decode)).max(initial=1))
    if sp.max_model_len > 0:
        longest = min(longest, sp.max_model_len)
    return min(sp.num_blocks, -(-longest // sp.block_size) + 1)


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
    hashes: np.ndarray | None = None,
) -> EngineOutput:
    """Simulate until every request finished (or was rejected) or the time limit passed.

    hashes: chained prefix-block hashes indexed by hash_off (prefix caching and the
    prefix_aware router read them); None = no hashes.
    """
    import time

    arrival_ns = np.round(np.asarray(arrival_s, dtype=np.float64) * NS_PER_S).astype(np.int64)
    session = np.asarray(session, dtype=np.int64)
    n_sessions = 0
    if sp.router == RouterPolicy.STICKY:
        session, n_sessions = _dense_sessions(session)
    if hashes is None:
        hash_off = np.zeros(arrival_ns.shape[0] + 1, dtype=np.int64)
    reqs = alloc_reqs(arrival_ns, prompt, decode, session, hash_off, hashes)
    reqs.rejected[:] = rejected
    pool_blocks = sp.num_blocks if sp.prefix_caching else 0
    reps = alloc_reps(
        sp.n_replicas, sp.pp, sp.batch_cap, pool_blocks, _max_request_blocks(sp, prompt, decode)
    )
    log = alloc_log(LOG_CAPACITY)
    hist = alloc_hist()
    lstate = np.zeros(loop.N_LS, dtype=np.int64)
    rstate = np.full(RSTATE_SESSIONS + n_sessions, NO_ID, dtype=np.int64)
    rstate[0] = 0
    limit_ns = int(round(time_limit_s * NS_PER_S))
    n = arrival_ns.shape[0]
    n_live = int((rejected == 0).sum())
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
    if n and status == loop.DONE and n_live and int(lstate[loop.LS_DONE]) != n_live:
        raise RuntimeError(
            f"engine finished with {n_live - int(lstate[loop.LS_DONE])} requests stuck"
        )
    return EngineOutput(reqs, reps, batches, hist, STATUS_NAMES[status], end_ns, loop_s)
