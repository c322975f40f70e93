"""Global routers: pick a replica for each arriving request (early binding, as Vidur)."""

from numba import njit
from vidur_fast.kernels.dtypes import RouterPolicy


@njit(cache=True, nogil=True, _nrt=False)
def _argmin_nb(x):
    """Index of the smallest value; ties go to the lowest replica id.

    Mutates: nothing.
    Returns: int.
    """
    best = 0
    for k in range(1, x.shape[0]):
        if x[k] < x[best]:
            best = k
    return best


@njit(cache=True, nogil=True, _nrt=False)
def route_request_nb(reps, reqs, rstate, p, i, u):
    """Choose the replica of request i.

    rstate: int64 scratch (rstate[0] = round-robin counter); u: a pre-drawn uniform in [0, 1).
    lor counts requests routed and not finished; lop counts prompt tokens routed whose prefill
    has not completed (both +at routing, - at completion / first prefill end).
    Mutates: rstate, reps.pending.
    Returns: replica index.
    """
    n = p.n_replicas
    if n == 1:
        r = 0
    elif p.router == RouterPolicy.ROUND_ROBIN:
        r = rstate[0] % n
        rstate[0] += 1
    elif p.router == RouterPolicy.RANDOM:
        r = int(u * n)
        if r >= n:
            r = n - 1
    else:
        r = _argmin_nb(reps.pending)
    if p.router == RouterPolicy.LOR:
        reps.pending[r] += 1
    elif p.router == RouterPolicy.LOP:
        reps.pending[r] += reqs.prompt[i]
    return r


@njit(cache=True, nogil=True, _nrt=False)
def on_prefill_end_nb(reps, reqs, p, r, i):
    """Router bookkeeping when request i first completes its prefill on replica r.

    NOTE(fix): subtracts the prompt length added at routing, not the current (restart-changed)
    prompt, so the counter cannot drift (SPEC 12.15).
    Mutates: reps.pending.
    Returns: nothing.
    """
    if p.router == RouterPolicy.LOP:
        reps.pending[r] -= reqs.total[i] - reqs.orig_decode[i]


@njit(cache=True, nogil=True, _nrt=False)
def on_request_end_nb(reps, reqs, p, r, i):
    """Router bookkeeping when request i completes on replica r.

    Mutates: reps.pending.
    Returns: nothing.
    """
    if p.router == RouterPolicy.LOR:
        reps.pending[r] -= 1
