"""Prefill/decode disaggregation (vLLM's disaggregated serving with a KV connector).

A request of a PD cluster is routed over the prefill replicas and runs there as a one-token
request (the prefill instance's max_tokens=1): its prompt is computed and a token sampled,
which the proxy discards. At that step's end it is handed off: the decode router picks a
decode replica, which reserves the prompt's KV blocks (vLLM's WAITING_FOR_REMOTE_KVS) when
they fit and the replica's reservation queue is empty, else the request joins that queue
(FIFO, retried at each of the replica's batch ends). The transfer starts with the
reservation and lasts latency + bytes / bandwidth over the pair's link kind: NVLink when
both replicas sit on one node (PDState.node), else the network. With fair-share contention
(link[2]) the transfers on one egress link of a prefill replica (two per replica: its NIC
and its NVLink) share that link's bandwidth equally while they overlap, and a transfer ends
the link's latency after its last byte leaves. At its end the prefill replica frees the
request's blocks and the request joins the decode replica's running list with all prompt
tokens but the last computed: its next step recomputes that token and samples the first
output token the client sees (TTFT), and the decode side produces every output token. A
decode replica whose running list is full keeps arrived requests in a second FIFO until a
running slot frees.

A decider picks, per arriving request, disaggregated or mixed serving: always, never, or
only prompts with more than N uncached tokens (without prefix caching: the prompt). A mixed
request is routed over the mixed replicas and runs there as in an aggregated cluster.

Every array is empty (role has no rows) when the cluster has no prefill/decode pools; the
loop then never calls these kernels.
"""

from typing import NamedTuple

import numpy as np
from numba import njit
from vidur_fast.kernels.blocks import accrue_kv_area_nb, blocks_for_nb, release_nb
from vidur_fast.kernels.codes import ReqStatus
from vidur_fast.kernels.dtypes import NEVER, NO_ID
from vidur_fast.kernels.kv import (
    admit_blocks_nb,
    cache_computed_nb,
    cached_prefix_blocks_nb,
    free_request_nb,
    lookup_cached_nb,
)
from vidur_fast.kernels.pools import pool_sched_nb
from vidur_fast.kernels.queues import run_append_nb
from vidur_fast.kernels.router import (
    RouteGroups,
    cluster_group,
    no_groups,
    rt_peek_nb,
    rt_route_nb,
)

ROLE_MIXED = 0
ROLE_PREFILL = 1
ROLE_DECODE = 2

# PDState.ctl slots (0, 1 and 5 unused)
PD_HEAP_N = 2  # transfers in flight (heap size)
PD_STARTED = 3  # transfers started
PD_WAITED = 4  # hand-offs that queued for decode KV blocks
PD_LINK_NEXT = 6  # earliest last-byte time over the links (NEVER: none, or contention none)
PD_CTL = 8

# the decider (PDState.decide[0]); decide[1] is the threshold of DECIDE_UNCACHED_ABOVE
DECIDE_ALWAYS = 0
DECIDE_NEVER = 1
DECIDE_UNCACHED_ABOVE = 2

# link contention (PDState.link[2])
CONTENTION_NONE = 0  # every transfer has the whole bandwidth
CONTENTION_FAIR_SHARE = 1  # transfers on one egress link of a prefill replica share it

# link kinds (PDState.kind); the fair-share link of prefill replica s and kind k is 2 s + k
LINK_NET = 0  # between nodes: link[0] bandwidth, link[1] latency
LINK_NVLINK = 1  # inside a node: link[3] bandwidth, link[4] latency


class PDState(NamedTuple):
    """Disaggregation parameters and state: R replicas, N requests."""

    role: np.ndarray  # int64[R], ROLE_* of each replica (empty: no PD)
    prefill_ids: np.ndarray  # int64[Rp], the prefill replicas in id order
    decode_ids: np.ndarray  # int64[Rd], the decode replicas in id order
    mixed_ids: np.ndarray  # int64[Rm], the mixed replicas in id order
    decide: np.ndarray  # int64[2], DECIDE_* and its threshold in tokens
    tok_bytes: np.ndarray  # float64[R], KV bytes per token sent from this replica
    link: np.ndarray  # float64[5], network bandwidth (bytes per ns = GB/s), latency (ns),
    # CONTENTION_*, NVLink bandwidth, latency (ns)
    node: np.ndarray  # int64[R], the node index of each replica (its first node)
    ctl: np.ndarray  # int64[PD_CTL]
    real_decode: np.ndarray  # int64[N], the request's output tokens (orig_decode is 1 meanwhile)
    src: np.ndarray  # int64[N], prefill replica (NO_ID: not disaggregated)
    dst: np.ndarray  # int64[N], decode replica (NO_ID until the hand-off)
    need: np.ndarray  # int64[N], blocks reserved on the decode replica
    handoff_ns: np.ndarray  # int64[N], prefill end (NEVER: no hand-off)
    start_ns: np.ndarray  # int64[N], transfer start (NEVER: none)
    end_ns: np.ndarray  # int64[N], transfer end
    nbytes: np.ndarray  # int64[N], bytes moved
    kind: np.ndarray  # int64[N], LINK_* of the transfer (NO_ID: none)
    waited: np.ndarray  # int64[N], 1 when the hand-off queued for decode blocks
    q_next: np.ndarray  # int64[N], next request in a decode replica's FIFO
    dq_head: np.ndarray  # int64[R], FIFO of hand-offs waiting for KV blocks
    dq_tail: np.ndarray  # int64[R]
    aq_head: np.ndarray  # int64[R], FIFO of arrived transfers waiting for a running slot
    aq_tail: np.ndarray  # int64[R]
    heap_t: np.ndarray  # int64[N], transfers in flight: end time
    heap_i: np.ndarray  # int64[N], and request
    # fair-share links, two per prefill replica's egress (2 s + LINK_*; processor sharing,
    # virtual time)
    lk_head: np.ndarray  # int64[2R], transfers sending on the link (linked by x_next)
    lk_n: np.ndarray  # int64[2R], how many
    lk_t: np.ndarray  # int64[2R], time of the link's last update
    lk_next: np.ndarray  # int64[2R], the link's next last byte (NEVER: idle)
    lk_min: np.ndarray  # int64[2R], the transfer sending it
    lk_v: np.ndarray  # float64[2R], virtual time: bytes each active transfer has sent
    x_next: np.ndarray  # int64[N], next transfer on the same link
    tag: np.ndarray  # float64[N], virtual time at which the transfer's last byte leaves
    # prefix caching: the decode replica's hit, and the prefill replica's block list of the
    # request (KvPool.req_slot, Reqs.blocks, KvPool.req_cached) from the hand-off to the
    # transfer's end, while the request's own fields hold its decode-side list
    hit: np.ndarray  # int64[N], prompt blocks found cached on the decode replica
    src_slot: np.ndarray  # int64[N]
    src_blocks: np.ndarray  # int64[N]
    src_cached: np.ndarray  # int64[N]
    rt: RouteGroups  # the routers over the mixed, prefill and decode replicas (kernels/router.py)


def no_pd(cluster: tuple, num_replicas: int) -> PDState:
    """The PDState of a cluster without prefill/decode pools: every array empty, and its
    routers the one group of the cluster router `cluster` = (RouterPolicy,
    tolerance_factor, top_k, max_imbalance_tokens) over all num_replicas replicas
    (router.cluster_group: what the loop routes such a cluster with)."""
    i = np.zeros(0, dtype=np.int64)
    f = np.zeros(0, dtype=np.float64)
    ctl = np.zeros(PD_CTL, np.int64)
    rt = cluster_group(cluster, num_replicas)
    return PDState(i, i, i, i, i, f, f, i, ctl, *([i] * 17), *([i] * 5), f, i, f, i, i, i, i, rt)


def make_pd(
    role,
    tok_bytes,
    bandwidth_gbps: float,
    latency_us: float,
    n: int,
    decide: int = DECIDE_ALWAYS,
    threshold: int = 0,
    contention: int = CONTENTION_NONE,
    routers: RouteGroups | None = None,
    node=None,
    intra_bandwidth_gbps: float | None = None,
    intra_latency_us: float | None = None,
) -> PDState:
    """PDState of a PD cluster: role and tok_bytes per replica, the network link, n
    requests, the decider and its threshold, the links' contention model (CONTENTION_*), the
    routers (router.route_groups; None = the cluster router over each role's replicas, filled
    in by engine.run.run_engine), each replica's node index (None: every replica on a node
    of its own) and the NVLink figures inside a node (None: the network's)."""
    role = np.asarray(role, dtype=np.int64)
    r = role.shape[0]
    node = np.arange(r, dtype=np.int64) if node is None else np.asarray(node, dtype=np.int64)
    nv_bw = bandwidth_gbps if intra_bandwidth_gbps is None else intra_bandwidth_gbps
    nv_lat = latency_us if intra_latency_us is None else intra_latency_us

    def full(k, v):
        return np.full(k, v, dtype=np.int64)

    ctl = np.zeros(PD_CTL, np.int64)
    ctl[PD_LINK_NEXT] = NEVER
    return PDState(
        role=role,
        prefill_ids=np.flatnonzero(role == ROLE_PREFILL).astype(np.int64),
        decode_ids=np.flatnonzero(role == ROLE_DECODE).astype(np.int64),
        mixed_ids=np.flatnonzero(role == ROLE_MIXED).astype(np.int64),
        decide=np.array([decide, threshold], dtype=np.int64),
        tok_bytes=np.asarray(tok_bytes, dtype=np.float64),
        link=np.array(
            [bandwidth_gbps, latency_us * 1000.0, contention, nv_bw, nv_lat * 1000.0],
            dtype=np.float64,
        ),
        node=node,
        ctl=ctl,
        real_decode=full(n, 0),
        src=full(n, NO_ID),
        dst=full(n, NO_ID),
        need=full(n, 0),
        handoff_ns=full(n, NEVER),
        start_ns=full(n, NEVER),
        end_ns=full(n, NEVER),
        nbytes=full(n, 0),
        kind=full(n, NO_ID),
        waited=full(n, 0),
        q_next=full(n, NO_ID),
        dq_head=full(r, NO_ID),
        dq_tail=full(r, NO_ID),
        aq_head=full(r, NO_ID),
        aq_tail=full(r, NO_ID),
        heap_t=full(n, NEVER),
        heap_i=full(n, NO_ID),
        lk_head=full(2 * r, NO_ID),
        lk_n=full(2 * r, 0),
        lk_t=full(2 * r, 0),
        lk_next=full(2 * r, NEVER),
        lk_min=full(2 * r, NO_ID),
        lk_v=np.zeros(2 * r, dtype=np.float64),
        x_next=full(n, NO_ID),
        tag=np.zeros(n, dtype=np.float64),
        hit=full(n, 0),
        src_slot=full(n, NO_ID),
        src_blocks=full(n, 0),
        src_cached=full(n, 0),
        rt=routers if routers is not None else no_groups(),
    )


# ---- transfers in flight: a binary min-heap on (end time, request id) ----


@njit(cache=True, nogil=True, _nrt=False)
def _before_nb(pd, a, b):
    """Whether heap entry a orders before entry b.

    Mutates: nothing.
    Returns: bool.
    """
    ta, tb = pd.heap_t[a], pd.heap_t[b]
    return ta < tb or (ta == tb and pd.heap_i[a] < pd.heap_i[b])


@njit(cache=True, nogil=True, _nrt=False)
def _swap_nb(pd, a, b):
    """Swap heap entries a and b.

    Mutates: pd.heap_t, pd.heap_i.
    Returns: nothing.
    """
    pd.heap_t[a], pd.heap_t[b] = pd.heap_t[b], pd.heap_t[a]
    pd.heap_i[a], pd.heap_i[b] = pd.heap_i[b], pd.heap_i[a]


@njit(cache=True, nogil=True, _nrt=False)
def _heap_push_nb(pd, t, i):
    """Add the transfer of request i ending at t.

    Mutates: pd.heap_*, pd.ctl.
    Returns: nothing.
    """
    k = pd.ctl[PD_HEAP_N]
    pd.heap_t[k] = t
    pd.heap_i[k] = i
    pd.ctl[PD_HEAP_N] = k + 1
    while k > 0:
        up = (k - 1) // 2
        if not _before_nb(pd, k, up):
            break
        _swap_nb(pd, k, up)
        k = up


@njit(cache=True, nogil=True, _nrt=False)
def _heap_pop_nb(pd):
    """Remove the earliest transfer.

    Mutates: pd.heap_*, pd.ctl.
    Returns: its request id.
    """
    i = pd.heap_i[0]
    n = pd.ctl[PD_HEAP_N] - 1
    pd.ctl[PD_HEAP_N] = n
    pd.heap_t[0] = pd.heap_t[n]
    pd.heap_i[0] = pd.heap_i[n]
    k = 0
    while True:
        a = 2 * k + 1
        if a >= n:
            break
        b = a + 1
        c = b if b < n and _before_nb(pd, b, a) else a
        if not _before_nb(pd, c, k):
            break
        _swap_nb(pd, c, k)
        k = c
    return i


@njit(cache=True, nogil=True, _nrt=False)
def pd_next_ns_nb(pd):
    """End of the earliest transfer in flight.

    Mutates: nothing.
    Returns: int64 ns (NEVER when none).
    """
    t = pd.heap_t[0] if pd.ctl[PD_HEAP_N] > 0 else NEVER
    if pd.ctl[PD_LINK_NEXT] < t:
        t = pd.ctl[PD_LINK_NEXT]
    return t


# ---- fair-share links: processor sharing, two per prefill replica's egress ----


@njit(cache=True, nogil=True, _nrt=False)
def _bw_nb(pd, kind):
    """Bandwidth (bytes per ns) of link kind.

    Mutates: nothing.
    Returns: float.
    """
    return pd.link[3] if kind == LINK_NVLINK else pd.link[0]


@njit(cache=True, nogil=True, _nrt=False)
def _lat_nb(pd, kind):
    """Latency (ns, rounded) of link kind.

    Mutates: nothing.
    Returns: int64.
    """
    return np.int64(round(pd.link[4] if kind == LINK_NVLINK else pd.link[1]))


@njit(cache=True, nogil=True, _nrt=False)
def _link_advance_nb(pd, s, now_ns):
    """Bring link s to now: each active transfer has sent bandwidth / n bytes per ns since
    the link's last update.

    Mutates: pd.lk_v, pd.lk_t.
    Returns: nothing.
    """
    if pd.lk_n[s] > 0:
        pd.lk_v[s] += (now_ns - pd.lk_t[s]) * _bw_nb(pd, s % 2) / pd.lk_n[s]
    pd.lk_t[s] = now_ns


@njit(cache=True, nogil=True, _nrt=False)
def _link_plan_nb(pd, s):
    """Link s's next last byte: its transfer with the smallest tag (ties to the lowest
    request id), at the link's last update + the bytes it has left * n / bandwidth; then the
    earliest over all links.

    Mutates: pd.lk_next, pd.lk_min, pd.ctl[PD_LINK_NEXT].
    Returns: nothing.
    """
    best = NO_ID
    i = pd.lk_head[s]
    while i != NO_ID:
        if best == NO_ID or pd.tag[i] < pd.tag[best] or (pd.tag[i] == pd.tag[best] and i < best):
            best = i
        i = pd.x_next[i]
    pd.lk_min[s] = best
    if best == NO_ID:
        pd.lk_next[s] = NEVER
    else:
        left = max(0.0, pd.tag[best] - pd.lk_v[s])
        pd.lk_next[s] = pd.lk_t[s] + np.int64(round(left * pd.lk_n[s] / _bw_nb(pd, s % 2)))
    t = NEVER
    for k in range(pd.prefill_ids.shape[0]):
        for j in range(2):
            if pd.lk_next[2 * pd.prefill_ids[k] + j] < t:
                t = pd.lk_next[2 * pd.prefill_ids[k] + j]
    pd.ctl[PD_LINK_NEXT] = t


@njit(cache=True, nogil=True, _nrt=False)
def _link_add_nb(pd, s, i, nbytes, now_ns):
    """Request i's transfer of nbytes starts sending on link s at now.

    Mutates: pd.lk_*, pd.x_next, pd.tag, pd.ctl[PD_LINK_NEXT].
    Returns: nothing.
    """
    _link_advance_nb(pd, s, now_ns)
    pd.tag[i] = pd.lk_v[s] + nbytes
    pd.x_next[i] = pd.lk_head[s]
    pd.lk_head[s] = i
    pd.lk_n[s] += 1
    _link_plan_nb(pd, s)


@njit(cache=True, nogil=True, _nrt=False)
def pd_link_due_nb(pd, now_ns):
    """Whether a last byte leaves a fair-share link at now (before transfer ends at now).

    Mutates: nothing.
    Returns: bool.
    """
    return pd.ctl[PD_LINK_NEXT] == now_ns


@njit(cache=True, nogil=True, _nrt=False)
def pd_link_done_nb(pd, now_ns):
    """The last byte of one transfer leaves its link at now (the lowest link id of those
    due): the link's other transfers share the bandwidth from now, and the transfer ends the
    latency later.

    Mutates: pd.lk_*, pd.x_next, pd.end_ns, pd.heap_*, pd.ctl.
    Returns: the request.
    """
    s = NO_ID
    for k in range(pd.prefill_ids.shape[0]):
        for j in range(2):
            if s == NO_ID and pd.lk_next[2 * pd.prefill_ids[k] + j] == now_ns:
                s = 2 * pd.prefill_ids[k] + j
    i = pd.lk_min[s]
    prev = NO_ID
    j = pd.lk_head[s]
    while j != i:
        prev = j
        j = pd.x_next[j]
    if prev == NO_ID:
        pd.lk_head[s] = pd.x_next[i]
    else:
        pd.x_next[prev] = pd.x_next[i]
    pd.x_next[i] = NO_ID
    pd.lk_n[s] -= 1
    pd.lk_v[s] = pd.tag[i] if pd.lk_n[s] > 0 else 0.0
    pd.lk_t[s] = now_ns
    end = now_ns + _lat_nb(pd, s % 2)
    pd.end_ns[i] = end
    _heap_push_nb(pd, end, i)
    _link_plan_nb(pd, s)
    return i


# ---- routing ----


@njit(cache=True, nogil=True, _nrt=False)
def _uncached_on_pick_nb(reps, kv, reqs, pd, p, i, now):
    """Prompt tokens of request i outside the prefix cache of the prefill replica the router
    would pick (full blocks from the first, as the prefix-aware router counts them; the whole
    prompt without prefix caching). The pick itself is not counted.

    Mutates: nothing.
    Returns: int.
    """
    r = rt_peek_nb(reps, kv, reqs, pd.rt, p, ROLE_PREFILL, i, now)
    return reqs.prompt[i] - cached_prefix_blocks_nb(kv, reqs, p, r, i) * p.block_size


@njit(cache=True, nogil=True, _nrt=False)
def pd_route_nb(reps, kv, reqs, pd, p, i, now):
    """Route request i arriving at now: disaggregated (the decider's choice) to a prefill replica,
    where it runs with one output token; else to a mixed replica (pd.rt's routers).

    Mutates: reps.pending, reqs.orig_decode, reqs.route_load, pd.
    Returns: replica index.
    """
    mode = pd.decide[0]
    mixed = mode == DECIDE_NEVER
    if mode == DECIDE_UNCACHED_ABOVE:
        mixed = _uncached_on_pick_nb(reps, kv, reqs, pd, p, i, now) <= pd.decide[1]
    if mixed:
        return rt_route_nb(reps, kv, reqs, pd.rt, p, ROLE_MIXED, i, 0, now)
    r = rt_route_nb(reps, kv, reqs, pd.rt, p, ROLE_PREFILL, i, 0, now)
    pd.src[i] = r
    pd.real_decode[i] = reqs.orig_decode[i]
    if reqs.orig_decode[i] > 1:
        reqs.orig_decode[i] = 1
    return r


@njit(cache=True, nogil=True, _nrt=False)
def pd_hands_off_nb(reqs, pd, r, i):
    """Whether request i, complete on replica r, is a prefill that moves to a decode replica
    (every disaggregated request does: the decode side produces all its output tokens).

    Mutates: nothing.
    Returns: bool.
    """
    return pd.src[i] == r and pd.dst[i] == NO_ID


@njit(cache=True, nogil=True, _nrt=False)
def _fits_nb(reps, kv, reqs, pd, pools, p, i):
    """Whether request i's prompt blocks fit on its decode replica now. With prefix caching
    the decode replica first matches the prompt against its own cache (vLLM's
    get_computed_blocks: full blocks, at most prompt - 1 tokens): only the other blocks are
    new, a free hit block costs a free block, and a block list must be free.

    Mutates: pd.need, pd.hit, the decode replica's lookup memo.
    Returns: bool.
    """
    d = pd.dst[i]
    blocks = blocks_for_nb(p, reqs.prompt[i])
    if not p.enable_prefix_caching:
        pd.need[i] = blocks
        return blocks <= pools.usable_blocks[pools.rep_pool[d]] - reps.alloc_blocks[d]
    hit, evictable = lookup_cached_nb(kv, reqs, p, d, i, reqs.prompt[i])
    pd.hit[i] = hit
    pd.need[i] = blocks - hit
    return kv.slot_top[d] > 0 and pd.need[i] + evictable <= kv.nfree[d]


@njit(cache=True, nogil=True, _nrt=False)
def _start_transfer_nb(reps, kv, reqs, pd, pools, p, i, now_ns):
    """Reserve request i's prompt blocks on its decode replica (with prefix caching: take its
    hit blocks and the new ones into a block list there) and start the transfer of the
    prompt tokens not cached there.

    Mutates: reps (blocks, peak, kv area of the decode replica), kv, reqs.blocks, pd.
    Returns: nothing.
    """
    d = pd.dst[i]
    if p.enable_prefix_caching:
        pd_p = pool_sched_nb(p, pools, d)
        hit = pd.hit[i]
        admit_blocks_nb(
            reps, kv, reqs, pd_p, d, i, hit, pd.need[i], hit * p.block_size, reqs.prompt[i], now_ns
        )
    else:
        accrue_kv_area_nb(reps, d, now_ns)
        reps.alloc_blocks[d] += pd.need[i]
        if reps.alloc_blocks[d] > reps.kv_peak[d]:
            reps.kv_peak[d] = reps.alloc_blocks[d]
    nbytes = (reqs.prompt[i] - pd.hit[i] * p.block_size) * pd.tok_bytes[pd.src[i]]
    pd.nbytes[i] = np.int64(round(nbytes))
    pd.start_ns[i] = now_ns
    pd.ctl[PD_STARTED] += 1
    kind = LINK_NVLINK if pd.node[pd.src[i]] == pd.node[d] else LINK_NET
    pd.kind[i] = kind
    if pd.link[2] == CONTENTION_FAIR_SHARE:
        _link_add_nb(pd, 2 * pd.src[i] + kind, i, nbytes, now_ns)
        return
    dur = _lat_nb(pd, kind) + np.int64(round(nbytes / _bw_nb(pd, kind)))
    pd.end_ns[i] = now_ns + dur
    _heap_push_nb(pd, now_ns + dur, i)


@njit(cache=True, nogil=True, _nrt=False)
def _push_nb(pd, head, tail, r, i):
    """Append request i to the FIFO (head, tail) of replica r.

    Mutates: head, tail, pd.q_next.
    Returns: nothing.
    """
    pd.q_next[i] = NO_ID
    if tail[r] == NO_ID:
        head[r] = i
    else:
        pd.q_next[tail[r]] = i
    tail[r] = i


@njit(cache=True, nogil=True, _nrt=False)
def _pop_nb(pd, head, tail, r):
    """Remove the head of the FIFO (head, tail) of replica r.

    Mutates: head, tail.
    Returns: its request id.
    """
    i = head[r]
    head[r] = pd.q_next[i]
    if head[r] == NO_ID:
        tail[r] = NO_ID
    return i


@njit(cache=True, nogil=True, _nrt=False)
def pd_handoff_nb(reps, kv, reqs, pd, pools, p, i, now_ns):
    """Request i finished its prefill: pick its decode replica, reserve there and start the
    transfer, or queue for the blocks. The caller has taken it off the prefill replica's
    running list and router load (or, with async scheduling, its waiting queue when stale
    output of a step in flight at its preemption finished it); its prefill blocks stay until
    the transfer ends.

    NOTE(vllm): the proxy discards the prefill instance's sampled token; the decode
    instance's connector loads the KV of all prompt tokens but the last, which its first step
    recomputes, sampling the client's first token. So the request leaves with no output token
    and prompt - 1 computed tokens (its prefill counted done: that step is timed as a decode).
    Mutates: reps (decode replica blocks, pending), kv, reqs (orig_decode, token state,
    blocks), pd.
    Returns: the decode replica.
    """
    if p.enable_prefix_caching:  # the prefill-side block list, kept until the transfer ends
        pd.src_slot[i] = kv.req_slot[i]
        pd.src_blocks[i] = reqs.blocks[i]
        pd.src_cached[i] = kv.req_cached[i]
        kv.req_slot[i] = NO_ID
        reqs.blocks[i] = 0
        kv.req_cached[i] = 0
    reqs.orig_decode[i] = pd.real_decode[i]
    reqs.generated[i] = 0
    reqs.first_tok_ns[i] = NEVER
    reqs.last_tok_ns[i] = 0
    reqs.processed[i] = reqs.prompt[i] - 1
    reqs.prefill_done[i] = 1  # also after a preemption whose stale output finished it
    d = rt_route_nb(reps, kv, reqs, pd.rt, p, ROLE_DECODE, i, 1, now_ns)
    pd.dst[i] = d
    pd.handoff_ns[i] = now_ns
    if pd.dq_head[d] == NO_ID and _fits_nb(reps, kv, reqs, pd, pools, p, i):
        _start_transfer_nb(reps, kv, reqs, pd, pools, p, i, now_ns)
    else:
        pd.waited[i] = 1
        pd.ctl[PD_WAITED] += 1
        _push_nb(pd, pd.dq_head, pd.dq_tail, d, i)
    return d


@njit(cache=True, nogil=True, _nrt=False)
def _max_seqs_nb(p, pools, r):
    """Running requests replica r's pool allows.

    Mutates: nothing.
    Returns: int.
    """
    return pools.max_num_seqs[pools.rep_pool[r]]


@njit(cache=True, nogil=True, _nrt=False)
def _enter_running_nb(reps, reqs, r, i):
    """Arrived request i joins decode replica r's running list.

    Mutates: reps.run, reps.run_n, reqs.status.
    Returns: nothing.
    """
    run_append_nb(reps, r, i)
    reqs.status[i] = ReqStatus.RUNNING


@njit(cache=True, nogil=True, _nrt=False)
def _free_src_nb(reps, kv, reqs, pd, pools, p, i, now_ns):
    """Free request i's prefill-side block list (prefix caching), its decode-side one kept.

    Mutates: reps (prefill replica blocks, kv area), kv, pd.src_slot.
    Returns: nothing.
    """
    slot, blocks, cached = kv.req_slot[i], reqs.blocks[i], kv.req_cached[i]
    kv.req_slot[i] = pd.src_slot[i]
    reqs.blocks[i] = pd.src_blocks[i]
    kv.req_cached[i] = pd.src_cached[i]
    s = pd.src[i]
    free_request_nb(reps, kv, reqs, pool_sched_nb(p, pools, s), s, i, now_ns)
    pd.src_slot[i] = NO_ID
    kv.req_slot[i], reqs.blocks[i], kv.req_cached[i] = slot, blocks, cached


@njit(cache=True, nogil=True, _nrt=False)
def pd_transfer_end_nb(reps, kv, reqs, pd, p, pools, now_ns):
    """The earliest transfer ends at now: the prefill replica frees the request's blocks, the
    decode replica holds the reserved ones and runs the request (or keeps it until a running
    slot frees). With prefix caching the received blocks enter the decode replica's cache as
    computed ones (vLLM caches all prompt tokens but the last once the KV has arrived).

    Mutates: reps, kv, reqs, pd.
    Returns: (request, prefill replica, decode replica).
    """
    i = _heap_pop_nb(pd)
    s = pd.src[i]
    d = pd.dst[i]
    if p.enable_prefix_caching:
        _free_src_nb(reps, kv, reqs, pd, pools, p, i, now_ns)
        cache_computed_nb(kv, reqs, p, d, i, reqs.prompt[i] - 1)
    else:
        release_nb(reps, reqs, s, i, now_ns)
        reqs.blocks[i] = pd.need[i]
        reps.alloc_reqs[d] += 1
    reqs.replica[i] = d
    if pd.aq_head[d] == NO_ID and reps.run_n[d] < _max_seqs_nb(p, pools, d):
        _enter_running_nb(reps, reqs, d, i)
    else:
        reqs.status[i] = ReqStatus.WAITING
        _push_nb(pd, pd.aq_head, pd.aq_tail, d, i)
    return i, s, d


@njit(cache=True, nogil=True, _nrt=False)
def pd_drain_nb(reps, kv, reqs, pd, p, pools, r, now_ns):
    """After a batch end of decode replica r: arrived requests take free running slots, then
    queued hand-offs whose blocks now fit start their transfers (both FIFO).

    Mutates: reps, reqs, pd.
    Returns: nothing.
    """
    cap = _max_seqs_nb(p, pools, r)
    while pd.aq_head[r] != NO_ID and reps.run_n[r] < cap:
        _enter_running_nb(reps, reqs, r, _pop_nb(pd, pd.aq_head, pd.aq_tail, r))
    while pd.dq_head[r] != NO_ID and _fits_nb(reps, kv, reqs, pd, pools, p, pd.dq_head[r]):
        i = _pop_nb(pd, pd.dq_head, pd.dq_tail, r)
        _start_transfer_nb(reps, kv, reqs, pd, pools, p, i, now_ns)
