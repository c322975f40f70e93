"""Global routers: pick a replica for each arriving request (early binding, as Vidur)."""

from numba import njit
from vidur_fast.kernels.codes import RSTATE_RR, RSTATE_SESSIONS, RouterPolicy
from vidur_fast.kernels.kv import cached_prefix_blocks_nb


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
def _counts_prefill_nb(p):
    """Whether the router's load is outstanding prefill tokens (lop and the routers that fall
    back to it).

    Mutates: nothing.
    Returns: bool.
    """
    return (
        p.router == RouterPolicy.LOP
        or p.router == RouterPolicy.STICKY
        or p.router == RouterPolicy.PREFIX_AWARE
    )


@njit(cache=True, nogil=True, _nrt=False)
def _route_prefix_aware_nb(reps, kv, reqs, p, i):
    """Replica holding the longest cached prefix of request i's prompt among those whose
    outstanding prefill is within p.max_imbalance_tokens tokens of the least loaded; ties go to
    the lower load, then the lower id. Without any cached prefix: least outstanding prefill.

    Mutates: nothing.
    Returns: replica index.
    """
    least = _argmin_nb(reps.pending)
    bound = reps.pending[least] + p.max_imbalance_tokens
    best = least
    best_len = 0
    for r in range(p.num_replicas):
        if reps.pending[r] > bound:
            continue
        m = cached_prefix_blocks_nb(kv, reqs, p, r, i)
        if m > best_len or (m == best_len and m > 0 and reps.pending[r] < reps.pending[best]):
            best = r
            best_len = m
    return best


@njit(cache=True, nogil=True, _nrt=False)
def route_request_nb(reps, rstate, kv, reqs, p, i):
    """Choose the replica of request i.

    rstate: int64 scratch (rstate[RSTATE_RR] = round-robin counter, then from RSTATE_SESSIONS
    one replica per dense session id for sticky routing, NO_ID until the session is first
    routed); random routing reads the request's pre-drawn uniform reqs.u_route[i]. lor counts
    requests routed and not finished; lop, sticky and prefix_aware count prompt tokens routed
    whose prefill has not completed (+ at routing, - at first prefill end).
    Sticky: a session stays on the replica of its first request (chosen by lop); requests
    without a session go by lop.
    Mutates: rstate, reps.pending.
    Returns: replica index.
    """
    n = p.num_replicas
    if n == 1:
        r = 0
    elif p.router == RouterPolicy.ROUND_ROBIN:
        r = rstate[RSTATE_RR] % n
        rstate[RSTATE_RR] += 1
    elif p.router == RouterPolicy.RANDOM:
        r = int(reqs.u_route[i] * n)
        if r >= n:
            r = n - 1
    elif p.router == RouterPolicy.STICKY:
        sid = reqs.session[i]
        if sid >= 0 and rstate[RSTATE_SESSIONS + sid] >= 0:
            r = rstate[RSTATE_SESSIONS + sid]
        else:
            r = _argmin_nb(reps.pending)
            if sid >= 0:
                rstate[RSTATE_SESSIONS + sid] = r
    elif p.router == RouterPolicy.PREFIX_AWARE:
        r = _route_prefix_aware_nb(reps, kv, reqs, p, i)
    elif p.router == RouterPolicy.LEAST_WAITING:
        # Vidur main's lor: the replica with the shortest waiting queue (running requests are
        # not counted); the request joins that queue right away
        r = _argmin_nb(reps.wq_len)
    else:
        r = _argmin_nb(reps.pending)
    if p.router == RouterPolicy.LOR:
        reps.pending[r] += 1
    elif _counts_prefill_nb(p):
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
    if _counts_prefill_nb(p):
        reps.pending[r] -= reqs.total[i] - reqs.orig_decode[i]


@njit(cache=True, nogil=True, _nrt=False)
def on_request_end_nb(reps, reqs, p, r, i):
    """Router bookkeeping when request i completes on replica r.

    Mutates: reps.pending.
    Returns: nothing.
    """
    if p.router == RouterPolicy.LOR:
        reps.pending[r] -= 1
