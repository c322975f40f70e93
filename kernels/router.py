"""Global routers: pick a replica for each arriving request (early binding, as Vidur).

Loads (reps.pending) per router: lor and sticky_lor count requests routed and not finished;
lop, sticky and prefix_aware prompt tokens routed whose prefill has not completed; lop_binary
such requests; lop_batch_end prompt tokens routed less the prompt tokens of every batch the
replica finished; lop_uncached and the tolerant/ranked sticky routers the prompt tokens the
replica does not hold in its prefix cache, until the prefill completes. What a request added
is kept in reqs.route_load and taken off at its first prefill end. Ties go to the lowest
replica id (Vidur canary breaks them at random).
"""

from numba import njit
from vidur_fast.kernels.codes import RSTATE_RR, RSTATE_SESSIONS, RouterPolicy
from vidur_fast.kernels.kv import cached_prefix_blocks_nb

# routers that pin a request's session to a replica (they keep one rstate slot per session)
SESSION_ROUTERS = (
    RouterPolicy.STICKY,
    RouterPolicy.STICKY_ROUND_ROBIN,
    RouterPolicy.STICKY_LOR,
    RouterPolicy.TOLERANT_STICKY_LOP_UNCACHED,
    RouterPolicy.RANKED_STICKY_LOP_UNCACHED,
)


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
def _pins_sessions_nb(policy):
    """Whether the router pins sessions (SESSION_ROUTERS).

    Mutates: nothing.
    Returns: bool.
    """
    return (
        policy == RouterPolicy.STICKY
        or policy == RouterPolicy.STICKY_ROUND_ROBIN
        or policy == RouterPolicy.STICKY_LOR
        or policy == RouterPolicy.TOLERANT_STICKY_LOP_UNCACHED
        or policy == RouterPolicy.RANKED_STICKY_LOP_UNCACHED
    )


@njit(cache=True, nogil=True, _nrt=False)
def _until_prefill_end_nb(p):
    """Whether the router's load of a request lasts until its first prefill completes.

    Mutates: nothing.
    Returns: bool.
    """
    r = p.router
    return (
        r == RouterPolicy.LOP
        or r == RouterPolicy.STICKY
        or r == RouterPolicy.PREFIX_AWARE
        or r == RouterPolicy.LOP_BINARY
        or r == RouterPolicy.LOP_UNCACHED
        or r == RouterPolicy.TOLERANT_STICKY_LOP_UNCACHED
        or r == RouterPolicy.RANKED_STICKY_LOP_UNCACHED
    )


@njit(cache=True, nogil=True, _nrt=False)
def _counts_requests_nb(p):
    """Whether the router's load is requests routed and not finished (lor, sticky_lor).

    Mutates: nothing.
    Returns: bool.
    """
    return p.router == RouterPolicy.LOR or p.router == RouterPolicy.STICKY_LOR


@njit(cache=True, nogil=True, _nrt=False)
def _uncached_nb(kv, reqs, p, r, i):
    """Prompt tokens of request i that replica r does not hold in its prefix cache.

    Mutates: nothing.
    Returns: tokens.
    """
    return reqs.prompt[i] - cached_prefix_blocks_nb(kv, reqs, p, r, i) * p.block_size


@njit(cache=True, nogil=True, _nrt=False)
def _imbalance_nb(pending, r, add):
    """max - min of the loads if replica r took add more.

    Mutates: nothing.
    Returns: int.
    """
    hi = pending[r] + add
    lo = hi
    for k in range(pending.shape[0]):
        v = pending[k] + add if k == r else pending[k]
        if v > hi:
            hi = v
        if v < lo:
            lo = v
    return hi - lo


@njit(cache=True, nogil=True, _nrt=False)
def _least_imbalance_nb(reps, kv, reqs, p, i):
    """Replica whose taking request i's uncached prompt leaves the loads most even (lowest id
    among equals).

    Mutates: nothing.
    Returns: replica index.
    """
    best = 0
    best_imb = _imbalance_nb(reps.pending, 0, _uncached_nb(kv, reqs, p, 0, i))
    for r in range(1, p.num_replicas):
        imb = _imbalance_nb(reps.pending, r, _uncached_nb(kv, reqs, p, r, i))
        if imb < best_imb:
            best, best_imb = r, imb
    return best


@njit(cache=True, nogil=True, _nrt=False)
def _keeps_session_nb(reps, kv, reqs, p, i, pinned):
    """Tolerant: the pinned replica's imbalance is within the tolerance factor of the smallest.
    Ranked: fewer than top_k replicas rank before it (by imbalance, then id).

    Mutates: nothing.
    Returns: bool.
    """
    mine = _imbalance_nb(reps.pending, pinned, _uncached_nb(kv, reqs, p, pinned, i))
    least = mine
    ahead = 0
    for r in range(p.num_replicas):
        imb = _imbalance_nb(reps.pending, r, _uncached_nb(kv, reqs, p, r, i))
        if imb < least:
            least = imb
        if imb < mine or (imb == mine and r < pinned):
            ahead += 1
    if p.router == RouterPolicy.TOLERANT_STICKY_LOP_UNCACHED:
        return mine <= p.router_tolerance_factor * least
    return ahead < p.router_top_k


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
    one replica per dense session id for the session routers, NO_ID until the session is first
    routed); random routing reads the request's pre-drawn uniform reqs.u_route[i].
    Session routers: a session stays on the replica of its first request, chosen by lop
    (sticky), round robin over sessions (sticky_round_robin), lor (sticky_lor) or least
    imbalance (tolerant/ranked, which re-pin the session when its replica falls out of their
    bound); requests without a session go by that same choice.
    Mutates: rstate, reps.pending, reqs.route_load.
    Returns: replica index.
    """
    n = p.num_replicas
    policy = p.router
    sid = reqs.session[i]
    pinned = -1
    if _pins_sessions_nb(policy) and sid >= 0:
        pinned = rstate[RSTATE_SESSIONS + sid]
    if n == 1:
        r = 0
    elif policy == RouterPolicy.ROUND_ROBIN or (
        policy == RouterPolicy.STICKY_ROUND_ROBIN and pinned < 0
    ):
        r = rstate[RSTATE_RR] % n
        rstate[RSTATE_RR] += 1
    elif policy == RouterPolicy.RANDOM:
        r = int(reqs.u_route[i] * n)
        if r >= n:
            r = n - 1
    elif pinned >= 0 and (
        policy == RouterPolicy.STICKY
        or policy == RouterPolicy.STICKY_ROUND_ROBIN
        or policy == RouterPolicy.STICKY_LOR
        or _keeps_session_nb(reps, kv, reqs, p, i, pinned)
    ):
        r = pinned
    elif policy == RouterPolicy.PREFIX_AWARE:
        r = _route_prefix_aware_nb(reps, kv, reqs, p, i)
    elif policy == RouterPolicy.LEAST_WAITING:
        # Vidur main's lor: the replica with the shortest waiting queue (running requests are
        # not counted); the request joins that queue right away
        r = _argmin_nb(reps.wq_len)
    elif (
        policy == RouterPolicy.LOP_UNCACHED
        or policy == RouterPolicy.TOLERANT_STICKY_LOP_UNCACHED
        or policy == RouterPolicy.RANKED_STICKY_LOP_UNCACHED
    ):
        r = _least_imbalance_nb(reps, kv, reqs, p, i)
    else:
        r = _argmin_nb(reps.pending)
    if _pins_sessions_nb(policy) and sid >= 0:
        rstate[RSTATE_SESSIONS + sid] = r
    load = 0
    if _counts_requests_nb(p) or policy == RouterPolicy.LOP_BINARY:
        load = 1
    elif (
        policy == RouterPolicy.LOP_UNCACHED
        or policy == RouterPolicy.TOLERANT_STICKY_LOP_UNCACHED
        or policy == RouterPolicy.RANKED_STICKY_LOP_UNCACHED
    ):
        load = _uncached_nb(kv, reqs, p, r, i)
    elif _until_prefill_end_nb(p) or policy == RouterPolicy.LOP_BATCH_END:
        load = reqs.prompt[i]
    reps.pending[r] += load
    reqs.route_load[i] = load
    return r


@njit(cache=True, nogil=True, _nrt=False)
def on_prefill_end_nb(reps, reqs, p, r, i):
    """Router bookkeeping when request i first completes its prefill on replica r.

    NOTE(fix): subtracts what was added at routing, not the current (restart-changed) prompt,
    so the counter cannot drift.
    Mutates: reps.pending.
    Returns: nothing.
    """
    if _until_prefill_end_nb(p):
        reps.pending[r] -= reqs.route_load[i]


@njit(cache=True, nogil=True, _nrt=False)
def on_batch_end_nb(reps, p, r, s):
    """lop_batch_end: a finished batch takes its prompt tokens off the replica's load (tokens
    served from the prefix cache are never taken off, as in Vidur canary).

    Mutates: reps.pending.
    Returns: nothing.
    """
    if p.router == RouterPolicy.LOP_BATCH_END:
        reps.pending[r] -= reps.bat_npre[r, s]


@njit(cache=True, nogil=True, _nrt=False)
def on_request_end_nb(reps, reqs, p, r, i):
    """Router bookkeeping when request i completes on replica r.

    Mutates: reps.pending.
    Returns: nothing.
    """
    if _counts_requests_nb(p):
        reps.pending[r] -= 1
