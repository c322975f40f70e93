"""Global routers: pick a replica for each arriving request (early binding, as Vidur).

Loads (reps.pending) per router: lor and sticky_lor count requests routed and not finished;
lop, sticky and prefix_aware prompt tokens routed whose prefill has not completed; lop_binary
such requests; lop_batch_end prompt tokens routed less the prompt tokens of every batch the
replica finished; lop_uncached and the tolerant/ranked sticky routers the prompt tokens the
replica does not hold in its prefix cache, until the prefill completes. What a request added
is kept in reqs.route_load and taken off at its first prefill end. Ties go to the lowest
replica id (Vidur canary breaks them at random).

Every router routes a group of replicas (RouteGroups): each policy is written once, in
_pick_nb and _load_nb. A cluster of one pool without prefill/decode pools is one group over
all its replicas (cluster_group), routed by route_nb (that group's pick and load);
prefill/decode pools and pools with routers of their own have a group per role and per such
pool (route_groups), routed by rt_route_nb and rt_peek_nb (called from kernels/pd.py; two
levels, any router). The loop (kernels/loop.py) inlines route_nb with whether the router
may read the prefix caches as a constant (one loop for CACHE_ROUTERS, one for the others: a
run with a router that reads none compiles none of the cache look-ups of routing), and the
load hooks (prefill_end_nb, batch_end_nb, request_end_nb) with two_level, whether the
groups have second levels and hand-offs.
"""

from typing import NamedTuple

import numpy as np
from numba import njit
from vidur_fast.kernels.codes import RouterPolicy, SchedPolicy
from vidur_fast.kernels.dtypes import NEVER, NO_ID
from vidur_fast.kernels.kv import cached_prefix_blocks_nb

# dp_lb (vLLM's DP front end, DPLBAsyncMPClient with its DPCoordinator): score = waiting x 4 +
# running; the coordinator publishes the engines' counts every 100 ms while they change, else
# every 5 s; between publications the front end adds one waiting request to each pick.
DP_LB_WAITING_WEIGHT = 4
DP_LB_STATS_NS = 100_000_000
DP_LB_IDLE_NS = 5_000_000_000

# routers that look up the replicas' prefix caches (route_nb's cache_aware)
CACHE_ROUTERS = (
    RouterPolicy.PREFIX_AWARE,
    RouterPolicy.LOP_UNCACHED,
    RouterPolicy.TOLERANT_STICKY_LOP_UNCACHED,
    RouterPolicy.RANKED_STICKY_LOP_UNCACHED,
)


def reads_cache(router: int) -> bool:
    """Whether cluster router `router` (RouterPolicy) looks up the prefix caches."""
    return int(router) in CACHE_ROUTERS


# routers that pin a request's session to a replica (a RouteGroups.sess column per session)
SESSION_ROUTERS = (
    RouterPolicy.STICKY,
    RouterPolicy.STICKY_ROUND_ROBIN,
    RouterPolicy.STICKY_LOR,
    RouterPolicy.TOLERANT_STICKY_LOP_UNCACHED,
    RouterPolicy.RANKED_STICKY_LOP_UNCACHED,
)


@njit(cache=True, nogil=True, _nrt=False, inline="always")
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
def _uncached_nb(kv, reqs, p, r, i):
    """Prompt tokens of request i that replica r does not hold in its prefix cache.

    Mutates: nothing.
    Returns: tokens.
    """
    return reqs.prompt[i] - cached_prefix_blocks_nb(kv, reqs, p, r, i) * p.block_size


# ---- route groups: routers over replica subsets ----


class RouteGroups(NamedTuple):
    """Routers over subsets of the replicas (K groups, R replicas, N requests, S sessions).

    Group g routes over rt.ids[rt.off[g]:rt.off[g + 1]] (ascending replica ids) with router
    policy[g] and its knobs, its own round-robin counter and session pins. Each role (ROLE_*
    index of kernels/pd.py) has one first-level group, first[role], over all its replicas;
    a replica in a pool with its own router beside other pools of its role also has a
    second-level group sub[r] over its pool's replicas (NO_ID: none). First-level loads are
    reps.pending (each replica is in one first-level group, top[r]), second-level ones pend2;
    what request i added is reqs.route_load[i] and load2[i]. least_waiting counts a decode
    replica's waiting queue and its hand-offs not yet past their first step there (held: in
    vLLM they wait in the decode scheduler's queue for their KV).
    """

    policy: np.ndarray  # int64[K], RouterPolicy of each group
    tol: np.ndarray  # float64[K], tolerance factor (tolerant_sticky_lop_uncached)
    top_k: np.ndarray  # int64[K], top_k (ranked_sticky_lop_uncached)
    imb: np.ndarray  # int64[K], max_imbalance_tokens (prefix_aware)
    off: np.ndarray  # int64[K + 1], group g's replicas: ids[off[g]:off[g + 1]]
    ids: np.ndarray  # int64[M]
    rr: np.ndarray  # int64[K], round-robin counters
    sess: np.ndarray  # int64[K, S], replica of each session (NO_ID: not routed yet)
    first: np.ndarray  # int64[3], first-level group of each role (NO_ID: no replicas)
    top: np.ndarray  # int64[R], first-level group of each replica
    sub: np.ndarray  # int64[R], second-level group of each replica (NO_ID: none)
    pend2: np.ndarray  # int64[R], second-level loads
    load2: np.ndarray  # int64[N], what request i added to pend2
    hold: np.ndarray  # int64[N], 1 while a hand-off's decode-side prefill load is held
    held: np.ndarray  # int64[R], hand-offs to the replica whose first step there has not ended
    u: np.ndarray  # float64[N, 3], uniforms of random picks after the first (see rt_route_nb)
    lb_score: np.ndarray  # int64[M], dp_lb: score of member ids[k] as the front end sees it
    lb_pub: np.ndarray  # int64[M], dp_lb: score of member ids[k] last published
    lb_next: np.ndarray  # int64[K], dp_lb: the group's next publication tick
    lb_last: np.ndarray  # int64[K], dp_lb: the group's last publication (all counts 0 at 0)


def route_groups(
    role, rep_pool, cluster: tuple, pool_routers: list, n: int, seed: int = 0
) -> RouteGroups:
    """RouteGroups of replicas with roles `role` (ROLE_* codes) in pools `rep_pool`: the
    cluster router `cluster` = (RouterPolicy, tolerance_factor, top_k, max_imbalance_tokens)
    and per pool its own router (such a tuple) or None. A role whose replicas are one pool
    with its own router is routed by that router alone; otherwise the cluster router routes
    over all the role's replicas and, where its pick lies in a pool with its own router, that
    router picks again within the pool. n requests; seed draws the uniforms of the random
    picks after the first. Session pins have no columns yet (with_sessions)."""
    role = np.asarray(role, dtype=np.int64)
    rep_pool = np.asarray(rep_pool, dtype=np.int64)
    r_count = role.shape[0]
    groups: list[tuple] = []
    first = np.full(3, NO_ID, dtype=np.int64)
    top = np.full(r_count, NO_ID, dtype=np.int64)
    sub = np.full(r_count, NO_ID, dtype=np.int64)
    for x in range(3):
        mine = np.flatnonzero(role == x)
        if mine.size == 0:
            continue
        qs = sorted(set(rep_pool[mine].tolist()))
        own = pool_routers[qs[0]] if len(qs) == 1 else None
        first[x] = len(groups)
        top[mine] = len(groups)
        groups.append((own if own is not None else cluster, mine))
        if own is not None:
            continue
        for q in qs:
            if pool_routers[q] is not None:
                ids = mine[rep_pool[mine] == q]
                sub[ids] = len(groups)
                groups.append((pool_routers[q], ids))
    off = np.zeros(len(groups) + 1, dtype=np.int64)
    off[1:] = np.cumsum([g[1].size for g in groups])
    ids = np.concatenate([g[1] for g in groups]).astype(np.int64) if groups else off[:0]
    return RouteGroups(
        policy=np.array([int(g[0][0]) for g in groups], dtype=np.int64),
        tol=np.array([float(g[0][1]) for g in groups], dtype=np.float64),
        top_k=np.array([int(g[0][2]) for g in groups], dtype=np.int64),
        imb=np.array([int(g[0][3]) for g in groups], dtype=np.int64),
        off=off,
        ids=ids,
        rr=np.zeros(len(groups), dtype=np.int64),
        sess=np.full((len(groups), 0), NO_ID, dtype=np.int64),
        first=first,
        top=top,
        sub=sub,
        pend2=np.zeros(r_count, dtype=np.int64),
        load2=np.zeros(n, dtype=np.int64),
        hold=np.zeros(n, dtype=np.int64),
        held=np.zeros(r_count, dtype=np.int64),
        u=np.random.default_rng([seed, 2]).random((n, 3)),
        lb_score=np.zeros(ids.shape[0], dtype=np.int64),
        lb_pub=np.zeros(ids.shape[0], dtype=np.int64),
        lb_next=np.zeros(len(groups), dtype=np.int64),
        lb_last=np.zeros(len(groups), dtype=np.int64),
    )


def cluster_group(cluster: tuple, r_count: int) -> RouteGroups:
    """The RouteGroups of a cluster of one pool without prefill/decode pools: one group over
    all r_count replicas with the cluster router `cluster` (as route_groups). route_nb and
    the hooks with two_level off touch no per-request array of rt: those are empty."""
    return route_groups(np.zeros(r_count, dtype=np.int64), np.zeros(r_count), cluster, [None], 0)


def no_groups() -> RouteGroups:
    """Empty RouteGroups (no groups; the engine fills in a run's own)."""
    i = np.zeros(0, dtype=np.int64)
    return RouteGroups(
        i,
        np.zeros(0),
        i,
        i,
        np.zeros(1, np.int64),
        i,
        i,
        np.zeros((0, 0), np.int64),
        np.full(3, NO_ID, np.int64),
        i,
        i,
        i,
        i,
        i,
        i,
        np.zeros((0, 3)),
        i,
        i,
        i,
        i,
    )


def pins_sessions(rt: RouteGroups) -> bool:
    """Whether a group's router pins sessions (it needs dense session ids)."""
    return any(int(x) in SESSION_ROUTERS for x in rt.policy)


def with_sessions(rt: RouteGroups, n_sessions: int) -> RouteGroups:
    """rt with a pin column per dense session id."""
    return rt._replace(sess=np.full((rt.policy.shape[0], n_sessions), NO_ID, dtype=np.int64))


@njit(cache=True, nogil=True, _nrt=False, inline="always")
def _holds_until_prefill_nb(policy):
    """Whether a router's load of a request lasts until its prefill completes.

    Mutates: nothing.
    Returns: bool.
    """
    return (
        policy == RouterPolicy.LOP
        or policy == RouterPolicy.STICKY
        or policy == RouterPolicy.PREFIX_AWARE
        or policy == RouterPolicy.LOP_BINARY
        or _uncached_policy_nb(policy)
    )


@njit(cache=True, nogil=True, _nrt=False, inline="always")
def _uncached_policy_nb(policy):
    """Whether a router's load is the prompt tokens outside the replica's prefix cache.

    Mutates: nothing.
    Returns: bool.
    """
    return (
        policy == RouterPolicy.LOP_UNCACHED
        or policy == RouterPolicy.TOLERANT_STICKY_LOP_UNCACHED
        or policy == RouterPolicy.RANKED_STICKY_LOP_UNCACHED
    )


@njit(cache=True, nogil=True, _nrt=False, inline="always")
def _counts_nb(policy):
    """Whether a router's load is requests routed and not finished (lor, sticky_lor).

    Mutates: nothing.
    Returns: bool.
    """
    return policy == RouterPolicy.LOR or policy == RouterPolicy.STICKY_LOR


@njit(cache=True, nogil=True, _nrt=False, inline="always")
def _g_argmin_nb(x, ids, lo, hi):
    """Replica of ids[lo:hi] with the smallest x (ties: lowest id).

    Mutates: nothing.
    Returns: replica index.
    """
    best = ids[lo]
    for k in range(lo + 1, hi):
        if x[ids[k]] < x[best]:
            best = ids[k]
    return best


@njit(cache=True, nogil=True, _nrt=False, inline="always")
def _g_least_waiting_nb(reps, rt, lo, hi):
    """Replica of rt.ids[lo:hi] with the fewest waiting requests: its waiting queue and the
    hand-offs held for it (ties: lowest id).

    Mutates: nothing.
    Returns: replica index.
    """
    best = rt.ids[lo]
    for k in range(lo + 1, hi):
        r = rt.ids[k]
        if reps.wq_len[r] + rt.held[r] < reps.wq_len[best] + rt.held[best]:
            best = r
    return best


@njit(cache=True, nogil=True, _nrt=False)
def _g_imbalance_nb(pend, ids, lo, hi, r, add):
    """max - min of the loads of ids[lo:hi] if replica r took add more.

    Mutates: nothing.
    Returns: int.
    """
    top = pend[r] + add
    low = top
    for k in range(lo, hi):
        v = pend[ids[k]] + add if ids[k] == r else pend[ids[k]]
        if v > top:
            top = v
        if v < low:
            low = v
    return top - low


@njit(cache=True, nogil=True, _nrt=False)
def _g_least_imbalance_nb(pend, kv, reqs, p, ids, lo, hi, i):
    """Replica of ids[lo:hi] whose taking request i's uncached prompt leaves the loads most
    even (lowest id among equals).

    Mutates: nothing.
    Returns: replica index.
    """
    best = ids[lo]
    best_imb = _g_imbalance_nb(pend, ids, lo, hi, best, _uncached_nb(kv, reqs, p, best, i))
    for k in range(lo + 1, hi):
        r = ids[k]
        imb = _g_imbalance_nb(pend, ids, lo, hi, r, _uncached_nb(kv, reqs, p, r, i))
        if imb < best_imb:
            best, best_imb = r, imb
    return best


@njit(cache=True, nogil=True, _nrt=False)
def _g_keeps_session_nb(pend, kv, reqs, p, rt, g, i, pinned):
    """Whether group g's tolerant/ranked router keeps request i on its session's pinned
    replica. Tolerant: the pinned replica's imbalance is within the tolerance factor of the
    group's smallest. Ranked: fewer than top_k replicas rank before it (by imbalance, then id).

    Mutates: nothing.
    Returns: bool.
    """
    lo, hi = rt.off[g], rt.off[g + 1]
    mine = _g_imbalance_nb(pend, rt.ids, lo, hi, pinned, _uncached_nb(kv, reqs, p, pinned, i))
    least = mine
    ahead = 0
    for k in range(lo, hi):
        r = rt.ids[k]
        imb = _g_imbalance_nb(pend, rt.ids, lo, hi, r, _uncached_nb(kv, reqs, p, r, i))
        if imb < least:
            least = imb
        if imb < mine or (imb == mine and r < pinned):
            ahead += 1
    if rt.policy[g] == RouterPolicy.TOLERANT_STICKY_LOP_UNCACHED:
        return mine <= rt.tol[g] * least
    return ahead < rt.top_k[g]


@njit(cache=True, nogil=True, _nrt=False)
def _g_prefix_aware_nb(pend, kv, reqs, p, rt, g, i):
    """Group g's prefix_aware pick: its replica holding the longest cached prefix of request
    i's prompt among those whose load is within rt.imb[g] tokens of the least loaded; ties go
    to the lower load, then the lower id. Without any cached prefix: the least loaded.

    Mutates: nothing.
    Returns: replica index.
    """
    lo, hi = rt.off[g], rt.off[g + 1]
    least = _g_argmin_nb(pend, rt.ids, lo, hi)
    bound = pend[least] + rt.imb[g]
    best = least
    best_len = 0
    for k in range(lo, hi):
        r = rt.ids[k]
        if pend[r] > bound:
            continue
        m = cached_prefix_blocks_nb(kv, reqs, p, r, i)
        if m > best_len or (m == best_len and m > 0 and pend[r] < pend[best]):
            best = r
            best_len = m
    return best


@njit(cache=True, nogil=True, _nrt=False)
def _dp_lb_live_nb(reps, rt, p, r):
    """dp_lb's score of replica r as its engine counts now: waiting requests (with the
    hand-offs held for it, which wait in a decode engine's queue for their KV) x 4 + running
    (vllm_v1 keeps in-flight requests listed as running; the other schedulers' in-flight
    batches are added).

    Mutates: nothing.
    Returns: int.
    """
    running = reps.run_n[r]
    if p.policy != SchedPolicy.VLLM_V1:
        for s in range(reps.bat_end.shape[1]):
            if reps.bat_end[r, s] != NEVER:
                running += reps.bat_n[r, s]
    return DP_LB_WAITING_WEIGHT * (reps.wq_len[r] + rt.held[r]) + running


@njit(cache=True, nogil=True, _nrt=False)
def _g_dp_lb_nb(reps, rt, p, g, now, commit):
    """Group g's dp_lb pick at time now: the member with the least score as the front end
    sees it (ties: the first, its lowest id). At the first pick at or after a publication tick
    (every DP_LB_STATS_NS) the coordinator's counts replace the front end's, if any engine's
    counts changed since the last publication or DP_LB_IDLE_NS passed; counts are read at
    that pick, not at the tick itself. commit: the pick adds one waiting request to the
    member's score until the next publication (else only look; a publication that is due is
    made either way: it is the same at that time).

    Mutates: rt.lb_score, rt.lb_pub, rt.lb_next, rt.lb_last.
    Returns: replica index.
    """
    lo, hi = rt.off[g], rt.off[g + 1]
    if now >= rt.lb_next[g]:
        rt.lb_next[g] = (now // DP_LB_STATS_NS + 1) * DP_LB_STATS_NS
        changed = now - rt.lb_last[g] >= DP_LB_IDLE_NS
        for k in range(lo, hi):
            if _dp_lb_live_nb(reps, rt, p, rt.ids[k]) != rt.lb_pub[k]:
                changed = True
        if changed:
            rt.lb_last[g] = now
            for k in range(lo, hi):
                rt.lb_pub[k] = _dp_lb_live_nb(reps, rt, p, rt.ids[k])
                rt.lb_score[k] = rt.lb_pub[k]
    best = lo
    for k in range(lo + 1, hi):
        if rt.lb_score[k] < rt.lb_score[best]:
            best = k
    if commit:
        rt.lb_score[best] += DP_LB_WAITING_WEIGHT
    return rt.ids[best]


@njit(cache=True, nogil=True, _nrt=False, inline="always")
def _pick_nb(reps, kv, reqs, rt, p, g, pend, i, u, now, commit, cache_aware):
    """The replica group g's router picks for request i over its replicas (pend: the group's
    loads; u: the uniform of a random pick; now: the time of the pick). commit: advance the
    round-robin counter, pin the request's session and count dp_lb's pick (else only look).
    Adds no load.

    Session routers: a session stays on the replica of its first request, chosen by lop
    (sticky), round robin over sessions (sticky_round_robin), lor (sticky_lor) or least
    imbalance (tolerant/ranked, which re-pin the session when its replica falls out of their
    bound); requests without a session go by that same choice. least_waiting (Vidur main's
    lor): the shortest waiting queue (running requests not counted), hand-offs held counted.
    dp_lb: vLLM's DP front end (_g_dp_lb_nb).
    cache_aware: the group's router may be one of CACHE_ROUTERS; a constant where this is
    inlined, so that without it the branches that look up the prefix caches are dropped
    before typing, and so are the kernels they call.
    Mutates: rt.rr, rt.sess (commit only), rt.lb_* (dp_lb).
    Returns: replica index.
    """
    lo, hi = rt.off[g], rt.off[g + 1]
    n = hi - lo
    policy = rt.policy[g]
    sid = reqs.session[i]
    pins = _pins_sessions_nb(policy) and sid >= 0
    pinned = rt.sess[g, sid] if pins else -1
    if n == 1:
        r = rt.ids[lo]
    elif policy == RouterPolicy.ROUND_ROBIN or (
        policy == RouterPolicy.STICKY_ROUND_ROBIN and pinned < 0
    ):
        r = rt.ids[lo + rt.rr[g] % n]
        if commit:
            rt.rr[g] += 1
    elif policy == RouterPolicy.RANDOM:
        k = int(u * n)
        r = rt.ids[lo + (k if k < n else n - 1)]
    elif pinned >= 0 and (
        policy == RouterPolicy.STICKY
        or policy == RouterPolicy.STICKY_ROUND_ROBIN
        or policy == RouterPolicy.STICKY_LOR
        or (cache_aware and _g_keeps_session_nb(pend, kv, reqs, p, rt, g, i, pinned))
    ):
        r = pinned
    elif cache_aware and policy == RouterPolicy.PREFIX_AWARE:
        r = _g_prefix_aware_nb(pend, kv, reqs, p, rt, g, i)
    elif policy == RouterPolicy.LEAST_WAITING:
        r = _g_least_waiting_nb(reps, rt, lo, hi)
    elif policy == RouterPolicy.DP_LB:
        r = _g_dp_lb_nb(reps, rt, p, g, now, commit)
    elif cache_aware and _uncached_policy_nb(policy):
        r = _g_least_imbalance_nb(pend, kv, reqs, p, rt.ids, lo, hi, i)
    else:
        r = _g_argmin_nb(pend, rt.ids, lo, hi)
    if pins and commit:
        rt.sess[g, sid] = r
    return r


@njit(cache=True, nogil=True, _nrt=False)
def _g_pick_nb(reps, kv, reqs, rt, p, g, pend, i, u, now, commit):
    """_pick_nb for a group of any router (those of PD roles and pools with routers).

    Mutates: rt.rr, rt.sess (commit only), rt.lb_* (dp_lb).
    Returns: replica index.
    """
    return _pick_nb(reps, kv, reqs, rt, p, g, pend, i, u, now, commit, True)


@njit(cache=True, nogil=True, _nrt=False, inline="always")
def _load_nb(kv, reqs, p, policy, r, i, cache_aware):
    """What request i adds to replica r's load under a router (cache_aware: as _pick_nb).

    Mutates: nothing.
    Returns: int.
    """
    if _counts_nb(policy) or policy == RouterPolicy.LOP_BINARY:
        return 1
    if cache_aware and _uncached_policy_nb(policy):
        return _uncached_nb(kv, reqs, p, r, i)
    if _holds_until_prefill_nb(policy) or policy == RouterPolicy.LOP_BATCH_END:
        return reqs.prompt[i]
    return 0


@njit(cache=True, nogil=True, _nrt=False, inline="always")
def _add_load_nb(reps, kv, reqs, p, policy, r, i, cache_aware):
    """Request i routed to replica r: its first-level router's load (_load_nb) goes on
    reps.pending and is kept in reqs.route_load.

    Mutates: reps.pending, reqs.route_load.
    Returns: nothing.
    """
    load = _load_nb(kv, reqs, p, policy, r, i, cache_aware)
    reps.pending[r] += load
    reqs.route_load[i] = load


@njit(cache=True, nogil=True, _nrt=False, inline="always")
def route_nb(reps, kv, reqs, rt, p, i, now, cache_aware):
    """Route request i arriving at now with the one group of a cluster_group (all replicas,
    the cluster router): its pick and its load. Random picks read reqs.u_route[i].

    cache_aware: as _pick_nb (a constant of the compiled loop, kernels/loop.py).
    Mutates: reps.pending, reqs.route_load, rt.rr, rt.sess, rt.lb_*.
    Returns: replica index.
    """
    u = reqs.u_route[i]
    r = _pick_nb(reps, kv, reqs, rt, p, 0, reps.pending, i, u, now, True, cache_aware)
    _add_load_nb(reps, kv, reqs, p, rt.policy[0], r, i, cache_aware)
    return r


@njit(cache=True, nogil=True, _nrt=False)
def rt_route_nb(reps, kv, reqs, rt, p, role, i, stage, now):
    """Route request i over the replicas of role (ROLE_* index): the role's first-level
    router picks; when its pick lies in a pool with its own router, that router picks again
    within the pool. Each adds its load to the replica chosen. stage 0 = arrival, 1 = the
    hand-off to a decode replica (which holds its prefill-type loads until the request's
    first step there ends); now: its time. Random picks: the arrival's first-level pick reads
    reqs.u_route[i], the other three rt.u[i].

    Mutates: reps.pending, reqs.route_load, rt (counters, pins, pend2, load2, hold, held).
    Returns: replica index.
    """
    g = rt.first[role]
    u1 = reqs.u_route[i] if stage == 0 else rt.u[i, 1]
    r = _g_pick_nb(reps, kv, reqs, rt, p, g, reps.pending, i, u1, now, True)
    g2 = rt.sub[r]
    if g2 != NO_ID:
        r = _g_pick_nb(reps, kv, reqs, rt, p, g2, rt.pend2, i, rt.u[i, 2 * stage], now, True)
        load2 = _load_nb(kv, reqs, p, rt.policy[g2], r, i, True)
        rt.pend2[r] += load2
        rt.load2[i] = load2
    _add_load_nb(reps, kv, reqs, p, rt.policy[g], r, i, True)
    rt.hold[i] = stage
    rt.held[r] += stage
    return r


@njit(cache=True, nogil=True, _nrt=False)
def rt_peek_nb(reps, kv, reqs, rt, p, role, i, now):
    """The replica rt_route_nb would pick for request i arriving at now over the replicas
    of role, changing nothing but a dp_lb publication due at now (the decider asks it before
    routing).

    Mutates: rt.lb_* (dp_lb).
    Returns: replica index.
    """
    u = reqs.u_route[i]
    r = _g_pick_nb(reps, kv, reqs, rt, p, rt.first[role], reps.pending, i, u, now, False)
    g2 = rt.sub[r]
    if g2 != NO_ID:
        r = _g_pick_nb(reps, kv, reqs, rt, p, g2, rt.pend2, i, rt.u[i, 0], now, False)
    return r


@njit(cache=True, nogil=True, _nrt=False, inline="always")
def prefill_end_nb(reps, reqs, rt, r, i, two_level):
    """Request i's prefill completed on replica r (on a decode replica: its first step
    there): the routers whose load lasts until then take it off. two_level: rt may have
    second-level groups and hand-offs (PD pools, pools with routers of their own), a constant
    of the compiled loop; without it (a cluster_group) rt's per-request arrays are untouched.

    NOTE(fix): subtracts what was added at routing, not the current (restart-changed) prompt,
    so the counter cannot drift.
    Mutates: reps.pending, rt.pend2, rt.hold, rt.held.
    Returns: nothing.
    """
    if _holds_until_prefill_nb(rt.policy[rt.top[r]]):
        reps.pending[r] -= reqs.route_load[i]
    if two_level:
        rt.held[r] -= rt.hold[i]
        rt.hold[i] = 0
        g2 = rt.sub[r]
        if g2 != NO_ID and _holds_until_prefill_nb(rt.policy[g2]):
            rt.pend2[r] -= rt.load2[i]


@njit(cache=True, nogil=True, _nrt=False, inline="always")
def batch_end_nb(reps, rt, r, s, two_level):
    """lop_batch_end: replica r's finished batch in slot s takes its prompt tokens off the
    load (tokens served from the prefix cache are never taken off, as in Vidur canary).
    two_level: as prefill_end_nb.

    Mutates: reps.pending, rt.pend2.
    Returns: nothing.
    """
    if rt.policy[rt.top[r]] == RouterPolicy.LOP_BATCH_END:
        reps.pending[r] -= reps.bat_npre[r, s]
    if two_level:
        g2 = rt.sub[r]
        if g2 != NO_ID and rt.policy[g2] == RouterPolicy.LOP_BATCH_END:
            rt.pend2[r] -= reps.bat_npre[r, s]


@njit(cache=True, nogil=True, _nrt=False, inline="always")
def request_end_nb(reps, rt, r, two_level):
    """A request routed to replica r completed there (a prefill: handed off): lor and
    sticky_lor count it off. two_level: as prefill_end_nb.

    Mutates: reps.pending, rt.pend2.
    Returns: nothing.
    """
    if _counts_nb(rt.policy[rt.top[r]]):
        reps.pending[r] -= 1
    if two_level:
        g2 = rt.sub[r]
        if g2 != NO_ID and _counts_nb(rt.policy[g2]):
            rt.pend2[r] -= 1
