"""A slow, plain-Python simulator with the engine's scheduling semantics, for differential
tests: one object per request, lists for queues, a loop over events.

Event order (as the engine documents it): an arrival at time t is routed before any replica
event at t; replica events at equal times go in replica-id order. A replica event finishes the
batch that ended (if any), then forms batches while fewer than PP are in flight (with vLLM v1
async scheduling, PP + 1: the next step is formed while the previous one runs). A formation
that only preempted and leaves the replica idle is retried at once. A batch runs through the
pipeline stages in order, each stage starting when both the previous stage of this batch and
this stage's previous batch are done. With async scheduling (PP = 1) the host part of a step
overlaps the step before it: the GPU starts after the step's host time or when the previous
step ends, whichever is later, and the step ends its GPU time (stage time minus host time)
after that.

Prefill/decode disaggregation (pd given): arrivals the decider disaggregates go to the prefill
replicas (the others to the mixed replicas) and run there with one output token, which is
discarded; at that step's end the request picks a decode replica, which reserves its prompt's
blocks when they fit
and no earlier hand-off waits there (else a FIFO served after the replica's batch ends), and
its transfer (latency + bytes / bandwidth) starts. Transfer ends come before arrivals and
replica events at the same time (equal ends by request id): the prefill replica frees the
request's blocks and the request joins the decode replica's running list (or a FIFO while
that list is full, served at its batch ends before the reservations) with all prompt tokens
but the last computed: its first step there recomputes that token and samples the first
output token. With fair_share
contention the transfers leaving one prefill replica share its bandwidth equally (processor
sharing): a transfer's last byte leaves when the bytes it was owed are sent, it ends the
latency later; last bytes come before transfer ends at the same time (lowest link first).
Each role's replicas are routed by one router (the cluster's, or its one pool's own); where
the role has several pools, one with a router of its own re-picks within itself after the
cluster router's pick fell there. The decode side holds a prefill-type load (lop, sticky,
...) until the request's first step there ends, and least_waiting counts such hand-offs as
waiting there.
With prefix caching the prefill replica serves the prompt from its cache as any replica; the
decode replica first matches the prompt against its own cache and reserves (and receives)
only the other blocks, which enter its cache once received (the full blocks of all prompt
tokens but the last); the decider counts the prompt tokens outside the cache of the prefill
replica the router would pick. Each replica then has 2 x max_num_seqs block lists, held by
its running requests and its disaggregated requests in transfer or waiting to run: a prefill
replica admits no request while none is free, a reservation waits for one.
"""

from collections import deque
from dataclasses import dataclass, field

import numpy as np
from vidur_fast.kernels.codes import SchedPolicy
from vidur_fast.kernels.dtypes import NS_PER_MS

from tests.reference.block_pool import CountedBlockPool
from tests.reference.prefix_pool import PrefixCachingBlockPool
from tests.reference.request import Request
from tests.reference.routers import GroupRouter, Router
from tests.reference.sched_v1 import VllmV1
from tests.reference.sched_vidur import FasterTransformer, LightLLM, Orca, Sarathi, VllmV0
from tests.reference.timing import batch_features, host_ns, stage_ns

INF = float("inf")

SCHEDULERS = {
    SchedPolicy.SARATHI: Sarathi,
    SchedPolicy.VLLM: VllmV0,
    SchedPolicy.ORCA: Orca,
    SchedPolicy.FASTER_TRANSFORMER: FasterTransformer,
    SchedPolicy.LIGHTLLM: LightLLM,
    SchedPolicy.VLLM_V1: VllmV1,
}


@dataclass
class BatchRecord:
    start_ns: int
    end_ns: int
    replica: int
    batch_size: int
    num_tokens: int
    num_prefill_tokens: int
    stage_ns: int  # first stage
    alloc_blocks: int  # after formation
    waiting_requests: int  # after formation
    preemptions: int  # during formation
    num_cached_tokens: int  # prompt tokens admitted from the prefix cache


@dataclass
class InFlight:
    seq: int
    end_ns: int
    items: list
    prefill_tokens: int = 0


@dataclass
class Replica:
    rid: int
    sched: object
    pp: int
    stage_free: list
    p: object = None  # scheduler parameters of the replica's pool
    grids: object = None  # timing grids of the replica's pool
    tparams: object = None
    wake: float = INF
    batches: list = field(default_factory=list)  # in flight
    n_formed: int = 0
    busy_ns: list = field(default_factory=list)  # per stage: time it ran batches

    def next_event(self) -> float:
        return min([self.wake] + [b.end_ns for b in self.batches])


def running_count(rep: Replica) -> int:
    """Requests running on a replica as vLLM's engine counts them for the dp_lb router: v1
    lists them while in flight, Vidur's schedulers take them off their list into a batch."""
    n = len(rep.sched.running)
    if rep.p.policy != SchedPolicy.VLLM_V1:
        n += sum(len(b.items) for b in rep.batches)
    return n


@dataclass
class SimResult:
    requests: list
    batches: list
    preemptions: list  # per replica
    pools: list  # per replica
    busy_ns: list  # per replica, per stage


def _launch(rep: Replica, items, now_ns, grids, tparams, p, preempted, cached, log):
    sched = rep.sched
    feats = batch_features(items, tparams, sched.is_decode, sched.kv_before)
    t = max(now_ns, rep.stage_free[0])
    stage_times = []
    # model time: the stage times without their fixed host overhead
    cpu_ns = int(round(tparams.cpu_overhead_ms * NS_PER_MS))
    if p.async_scheduling:
        dur = stage_ns(grids, tparams, feats, True)
        host = min(host_ns(tparams, feats), dur - 1)
        gpu_start = max(now_ns + host, rep.stage_free[0])
        end = gpu_start + dur - host
        rep.stage_free[0] = end
        stage_times.append((t, end))  # one span: from the replica's start to the GPU's end
        rep.busy_ns[0] += end - t
        model_ns = dur - cpu_ns
    else:
        for st in range(p.pp):
            dur = stage_ns(grids, tparams, feats, st == p.pp - 1)
            begin = max(t, rep.stage_free[st])
            t = begin + dur
            rep.stage_free[st] = t
            stage_times.append((begin, t))
            rep.busy_ns[st] += dur
        model_ns = sum(end - begin for begin, end in stage_times) - cpu_ns * p.pp
    for req, _ in items:
        if req.sched_ns is None:
            req.sched_ns = now_ns
        for begin, end in stage_times:
            if req.last_stage_end_ns != 0:
                req.preempt_ns += begin - req.last_stage_end_ns
            req.exec_ns += end - begin
            req.last_stage_end_ns = end
        req.model_ns += model_ns
    end = stage_times[-1][1]
    rep.batches.append(InFlight(rep.n_formed, end, items, feats[6]))
    rep.n_formed += 1
    log.append(
        BatchRecord(
            start_ns=stage_times[0][0] if p.async_scheduling else now_ns,
            end_ns=end,
            replica=rep.rid,
            batch_size=len(items),
            num_tokens=feats[0],
            num_prefill_tokens=feats[6],
            stage_ns=stage_times[0][1] - stage_times[0][0],
            alloc_blocks=sched.pool.allocated,
            waiting_requests=len(sched.waiting),
            preemptions=preempted,
            num_cached_tokens=cached,
        )
    )


def make_requests(arrival_ns, prompt, decode, session=None, hashes=None) -> list[Request]:
    """One Request per trace row (session -1 and no hashes where not given)."""
    return [
        Request(
            rid=k,
            arrival_ns=int(arrival_ns[k]),
            prompt=int(prompt[k]),
            decode=int(decode[k]),
            total=int(prompt[k]) + int(decode[k]),
            asked_decode=int(decode[k]),
            session=-1 if session is None else int(session[k]),
            hashes=[] if hashes is None else [int(h) for h in hashes[k]],
        )
        for k in range(len(arrival_ns))
    ]


@dataclass
class PD:
    """Disaggregation of a run: per replica its role ("prefill" / "decode") and the KV bytes
    of one token it sends; the link."""

    roles: list
    tok_bytes: list
    bandwidth_gbps: float
    latency_us: float
    decider: str = "always"  # or never, uncached_tokens_above (threshold: prompt tokens)
    threshold: int = 0
    contention: str = "none"  # or fair_share: two links per prefill replica, each shared
    # routers: per replica its pool, per pool its own router's knobs (policy, tolerance
    # factor, top_k, max_imbalance_tokens) or None, and per request the uniforms of the random
    # picks after the first (3 each); None = the cluster router over each role's replicas
    rep_pool: list | None = None
    pool_routers: list | None = None
    u: object = None
    # per replica its node (None: each on a node of its own; see place_nodes) and the link
    # inside a node (None: the network's figures)
    node: list | None = None
    intra_bandwidth_gbps: float | None = None
    intra_latency_us: float | None = None


def place_nodes(gpus, per_node, node_type, packed=True):
    """Each replica's (first) node and the node count, replicas in order: a replica joins the
    last node when it is of the same type and has the GPUs free, else starts a new node; one
    larger than a node takes whole nodes that nothing else joins. Not packed: every replica
    starts a new node."""
    out, nodes, free, kind = [], 0, 0, None
    for g, per, t in zip(gpus, per_node, node_type, strict=True):
        if packed and g <= per and t == kind and g <= free:
            out.append(nodes - 1)
            free -= g
            continue
        out.append(nodes)
        k = -(-g // per)
        nodes += k
        free, kind = (per - g, t) if k == 1 else (0, None)
    return out, nodes


class PDFlow:
    """The reference's disaggregation state: its own routing loads, the transfers in
    flight, and per decode replica the reservation and arrival FIFOs."""

    def __init__(self, pd: PD, p, reps, n):
        self.pd = pd
        self.reps = reps
        self.pre = [r for r, x in enumerate(pd.roles) if x == "prefill"]
        self.dec = [r for r, x in enumerate(pd.roles) if x == "decode"]
        self.mixed = [r for r, x in enumerate(pd.roles) if x == "mixed"]
        self._groups(p, n)
        self.transfers = []  # (end ns, request)
        self.reserve_q = [deque() for _ in pd.roles]
        self.arrived_q = [deque() for _ in pd.roles]
        # fair share, per prefill replica: [virtual time (bytes sent by each active transfer),
        # time of last update, {request id: (virtual time of its last byte, request)}]
        # two links per prefill replica: (replica, 0) its NIC, (replica, 1) its NVLink
        self.links = {(r, k): [0.0, 0, {}] for r in self.pre for k in (0, 1)}
        self.node = pd.node if pd.node is not None else list(range(len(pd.roles)))
        nv_bw = pd.intra_bandwidth_gbps
        nv_lat = pd.intra_latency_us
        self.bw = (pd.bandwidth_gbps, pd.bandwidth_gbps if nv_bw is None else nv_bw)
        self.lat = (pd.latency_us, pd.latency_us if nv_lat is None else nv_lat)

    def _groups(self, p, n):
        """Per role a router over its replicas; in a role of several pools, each pool with a
        router of its own re-picks within the pool (the engine's route_groups)."""
        pd = self.pd
        rep_pool = pd.rep_pool if pd.rep_pool is not None else [0] * len(pd.roles)
        own = pd.pool_routers or [None] * (max(rep_pool) + 1)
        cluster = (p.router, p.router_tolerance_factor, p.router_top_k, p.max_imbalance_tokens)
        self.u = pd.u if pd.u is not None else np.random.default_rng([0, 2]).random((n, 3))
        self.first, self.top, self.sub = {}, {}, {}
        self.held = [0] * len(pd.roles)  # hand-offs to a replica not past their first step
        for role, mine in (("mixed", self.mixed), ("prefill", self.pre), ("decode", self.dec)):
            if not mine:
                continue
            qs = sorted({rep_pool[r] for r in mine})
            single = own[qs[0]] if len(qs) == 1 else None
            g = GroupRouter(p, mine, single if single is not None else cluster)
            self.first[role] = g
            self.top.update({r: g for r in mine})
            if single is not None:
                continue
            for q in qs:
                if own[q] is not None:
                    ids = [r for r in mine if rep_pool[r] == q]
                    g2 = GroupRouter(p, ids, own[q])
                    self.sub.update({r: g2 for r in ids})

    def _route(self, req, role, stage, u_route, now):
        waiting = [len(x.sched.waiting) + self.held[x.rid] for x in self.reps]
        pools = [x.sched.pool for x in self.reps]
        run = [running_count(x) for x in self.reps]
        g = self.first[role]
        u1 = u_route if stage == 0 else self.u[req.rid][1]
        r = g.pick(req, u1, waiting, pools, True, run, now)
        g2 = self.sub.get(r)
        if g2 is not None:
            r = g2.pick(req, self.u[req.rid][2 * stage], waiting, pools, True, run, now)
            g2.add(req, r, pools)
        g.add(req, r, pools)
        req.hold = stage == 1
        self.held[r] += stage
        return r

    def prefill_end(self, req, r):
        if getattr(req, "hold", False):
            self.held[r] -= 1
        req.hold = False
        for g in (self.top[r], self.sub.get(r)):
            if g is not None:
                g.prefill_end(req, r)

    def batch_end(self, r, prefill_tokens):
        for g in (self.top[r], self.sub.get(r)):
            if g is not None:
                g.batch_end(r, prefill_tokens)

    def _peek(self, req, u_route):
        """The prefill replica _route would pick, changing nothing (but a dp_lb publication
        due at the arrival, the same either way)."""
        waiting = [len(x.sched.waiting) + self.held[x.rid] for x in self.reps]
        pools = [x.sched.pool for x in self.reps]
        run = [running_count(x) for x in self.reps]
        now = req.arrival_ns
        r = self.first["prefill"].pick(req, u_route, waiting, pools, False, run, now)
        g2 = self.sub.get(r)
        if g2 is not None:
            r = g2.pick(req, self.u[req.rid][0], waiting, pools, False, run, now)
        return r

    def _uncached(self, req, r):
        """Prompt tokens of req outside replica r's prefix cache (full blocks from the
        first, as the prefix-aware router counts them; the whole prompt without caching)."""
        pool = self.reps[r].sched.pool
        return req.prompt - pool.longest_cached_prefix(req) * self.reps[r].p.block_size

    def route(self, req, u_route):
        d = self.pd.decider
        req.src = None
        if d == "never" or (
            d == "uncached_tokens_above"
            and self._uncached(req, self._peek(req, u_route)) <= self.pd.threshold
        ):
            return self._route(req, "mixed", 0, u_route, req.arrival_ns)
        req.src = self._route(req, "prefill", 0, u_route, req.arrival_ns)
        req.dst = None
        req.pd_decode = req.asked_decode
        req.asked_decode = min(req.asked_decode, 1)
        return req.src

    def hands_off(self, req, r):
        return req.src == r and req.dst is None

    def request_end(self, r):
        for g in (self.top[r], self.sub.get(r)):
            if g is not None:
                g.request_end(r)

    def hand_off(self, req, now_ns):
        # the prefill's token is discarded; the decode side recomputes the last prompt token,
        # which samples the first output token
        req.asked_decode = req.pd_decode
        req.generated = 0
        req.first_tok_ns = None
        req.last_tok_ns = 0
        req.processed = req.prompt - 1
        req.prefill_done = True  # also after a preemption whose stale output finished it
        assert req.inflight == 0 and req.placeholders == 0 and req.stale == 0
        d = self._route(req, "decode", 1, None, now_ns)
        req.dst = d
        # the prefill replica keeps the request's blocks (and its block list) until the
        # transfer ends
        src = self.reps[req.src].sched
        req.src_list = src.pool.caching and req.rid in src.pool.requests
        src.held += req.src_list
        if not self.reserve_q[d] and self._fits(req):
            self._start(req, now_ns)
        else:
            self.reserve_q[d].append(req)

    def _fits(self, req):
        """Whether req's prompt blocks fit on its decode replica now. With prefix caching
        the decode replica first matches the prompt against its own cache: only the other
        blocks are new (free hit blocks cost a free block each), and a block list must be
        free."""
        rep = self.reps[req.dst]
        pool = rep.sched.pool
        blocks = -(-req.prompt // rep.p.block_size)
        if not pool.caching:
            req.hit, req.need = 0, blocks
            return req.need <= pool.free
        hit, hit_free = pool.lookup(req, req.prompt)
        req.hit, req.need = hit, blocks - hit
        return rep.sched.lists_free() and req.need + hit_free <= pool.free

    def _start(self, req, now_ns):
        rep = self.reps[req.dst]
        pool = rep.sched.pool
        if pool.caching:
            pool.admit(req, req.hit, req.need)
            rep.sched.held += 1
        else:
            pool.allocate(req.rid, req.need)
        # bytes: the prompt tokens not cached on the decode replica
        nbytes = (req.prompt - req.hit * rep.p.block_size) * self.pd.tok_bytes[req.src]
        kind = 1 if self.node[req.src] == self.node[req.dst] else 0
        if self.pd.contention == "fair_share":
            link = self.links[(req.src, kind)]
            self._advance(link, kind, now_ns)
            link[2][req.rid] = (link[0] + nbytes, req)
            return
        dur = round(self.lat[kind] * 1000.0) + round(nbytes / self.bw[kind])
        self.transfers.append((now_ns + dur, req.rid, req))

    def _advance(self, link, kind, now_ns):
        if link[2]:
            link[0] += (now_ns - link[1]) * self.bw[kind] / len(link[2])
        link[1] = now_ns

    def _last_byte(self, link, kind):
        """(time, request id) of the link's next last byte, or None when it is idle."""
        if not link[2]:
            return None
        rid = min(link[2], key=lambda k: (link[2][k][0], k))
        left = max(0.0, link[2][rid][0] - link[0])
        return link[1] + round(left * len(link[2]) / self.bw[kind]), rid

    def _due_link(self):
        """(time, link) of the earliest last byte over the links (lowest link first: by
        prefill replica, its NIC before its NVLink)."""
        best = None
        for r in self.pre:
            for k in (0, 1):
                x = self._last_byte(self.links[(r, k)], k)
                if x is not None and (best is None or x[0] < best[0]):
                    best = (x[0], (r, k))
        return best

    def next_end(self):
        t = min((t, i) for t, i, _ in self.transfers)[0] if self.transfers else INF
        due = self._due_link()
        return min(t, due[0]) if due is not None else t

    def _link_done(self, key, now_ns):
        link = self.links[key]
        _, rid = self._last_byte(link, key[1])
        tag, req = link[2].pop(rid)
        link[0] = tag if link[2] else 0.0
        link[1] = now_ns
        self.transfers.append((now_ns + round(self.lat[key[1]] * 1000.0), req.rid, req))

    def _enter(self, rep, req):
        rep.sched.running.append(req)
        if rep.sched.pool.caching:
            rep.sched.held -= 1  # its block list now counts as a running request's

    def transfer_end(self, now_ns):
        due = self._due_link()
        if due is not None and due[0] == now_ns:
            self._link_done(due[1], now_ns)
            return
        k = min(range(len(self.transfers)), key=lambda j: self.transfers[j][:2])
        _, _, req = self.transfers.pop(k)
        self.reps[req.src].sched.pool.release(req.rid)
        self.reps[req.src].sched.held -= req.src_list
        rep = self.reps[req.dst]
        if rep.sched.pool.caching:
            # the received blocks enter the cache as computed ones: all prompt tokens but
            # the last
            rep.sched.pool.cache_full_blocks(req, req.prompt - 1)
        req.replica = req.dst
        if not self.arrived_q[req.dst] and len(rep.sched.running) < rep.p.max_num_seqs:
            self._enter(rep, req)
        else:
            self.arrived_q[req.dst].append(req)
        for r in (req.src, req.dst):
            x = self.reps[r]
            if len(x.batches) < x.pp and x.wake == INF:
                x.wake = now_ns

    def drain(self, rep, now_ns):
        q = self.arrived_q[rep.rid]
        while q and len(rep.sched.running) < rep.p.max_num_seqs:
            self._enter(rep, q.popleft())
        q = self.reserve_q[rep.rid]
        while q and self._fits(q[0]):
            self._start(q.popleft(), now_ns)


def _finish(rep: Replica, batch: InFlight, now_ns, router, v1: bool, flow=None) -> None:
    finished = set()
    for req, n in batch.items:
        had_token = req.generated > 0
        done = rep.sched.apply_output(req, n, now_ns) if v1 else req.vidur_advance(n, now_ns)
        if flow is not None:
            dst = getattr(req, "dst", None)
            # a prefill ends (a disaggregated request's first token on its decode replica is
            # none); on a decode replica the first step of a hand-off ends
            if (not had_token and req.generated > 0 and dst != rep.rid) or (
                getattr(req, "hold", False) and dst == rep.rid
            ):
                flow.prefill_end(req, rep.rid)
            if done:
                flow.request_end(rep.rid)
                finished.add(req.rid)
                if flow.hands_off(req, rep.rid):
                    flow.hand_off(req, now_ns)
                else:
                    req.done_ns = now_ns
                    rep.sched.pool.release(req.rid)
            continue
        if not had_token and req.generated > 0:
            router.on_prefill_end(req)
        if done:
            req.done_ns = now_ns
            rep.sched.pool.release(req.rid)
            router.on_request_end(req)
            finished.add(req.rid)
    rep.sched.on_batch_end(batch.items, finished)
    if flow is not None:
        flow.batch_end(rep.rid, batch.prefill_tokens)
    else:
        router.on_batch_end(rep.rid, batch.prefill_tokens)
    rep.batches.remove(batch)


def _pool(p):
    if p.enable_prefix_caching:
        assert p.policy == SchedPolicy.VLLM_V1, "prefix caching is a vLLM v1 feature"
        return PrefixCachingBlockPool(p.usable_blocks, p.block_size)
    return CountedBlockPool(p.usable_blocks)


def naive_sim(
    arrival_ns,
    prompt,
    decode,
    p,
    grids,
    tparams,
    u_route,
    rejected=None,
    session=None,
    hashes=None,
    replica_params=None,
    pd=None,
):
    """Simulate to completion. p: the engine's scheduler parameters (policy code, caps, block
    counts, prefix caching, async scheduling); grids/tparams: the timing grids and their
    parameters; u_route: one uniform per request for the random router; session: session id
    per request (-1: none; the sticky router); hashes: per request, the workload hash of each
    leading block (prefix caching and the prefix-aware router). Requests are in arrival order.
    replica_params: a cluster of pools: per replica its pool's (p, grids, tparams) (its stages,
    KV blocks and timing); p then holds what the router reads. None: every replica uses p.
    pd: disaggregation (PD; vllm_v1; every router, per-pool routers), also a cluster of mixed
    pools with routers of their own (roles all mixed, decider never); None: none.
    Returns per-request objects, per-batch records and the replicas' pools."""
    n = len(arrival_ns)
    reqs = make_requests(arrival_ns, prompt, decode, session, hashes)
    policy = SchedPolicy(p.policy)
    v1 = policy == SchedPolicy.VLLM_V1
    if replica_params is None:
        replica_params = [(p, grids, tparams)] * p.num_replicas
    reps = []
    for r, (pr, gr, tr) in enumerate(replica_params):
        assert not pr.async_scheduling or (v1 and pr.pp == 1), "async scheduling: v1, PP = 1"
        reps.append(
            Replica(
                rid=r,
                sched=SCHEDULERS[policy](pr, _pool(pr)),
                pp=pr.pp,
                stage_free=[0] * pr.pp,
                busy_ns=[0] * pr.pp,
                p=pr,
                grids=gr,
                tparams=tr,
            )
        )
    router = Router(p)
    flow = PDFlow(pd, p, reps, n) if pd is not None else None
    if flow is not None and p.enable_prefix_caching:
        for rep in reps:  # block lists: twice the running requests (the engine's sizing)
            rep.sched.slots = 2 * p.max_num_seqs
    log: list[BatchRecord] = []
    nxt = 0
    while True:
        t_arr = reqs[nxt].arrival_ns if nxt < n else INF
        rep = min(reps, key=lambda x: (x.next_event(), x.rid))
        t_rep = rep.next_event()
        t_x = flow.next_end() if flow is not None else INF
        if t_arr == INF and t_rep == INF and t_x == INF:
            break
        if t_x <= t_arr and t_x <= t_rep:
            flow.transfer_end(int(t_x))
            continue
        if t_arr <= t_rep:
            req = reqs[nxt]
            nxt += 1
            if rejected is not None and rejected[req.rid]:
                req.rejected = True  # never routed
                continue
            if flow is not None:
                req.replica = flow.route(req, float(u_route[req.rid]))
            else:
                req.replica = router.route(
                    req,
                    float(u_route[req.rid]),
                    [len(x.sched.waiting) for x in reps],
                    [x.sched.pool for x in reps],
                    [running_count(x) for x in reps],
                    t_arr,
                )
            target = reps[req.replica]
            target.sched.add_request(req)
            if len(target.batches) < target.pp and target.wake == INF:
                target.wake = t_arr
            continue
        now = int(t_rep)
        ending = [b for b in rep.batches if b.end_ns == now]
        if ending:
            _finish(rep, min(ending, key=lambda b: b.seq), now, router, v1, flow)
            if flow is not None and flow.pd.roles[rep.rid] == "decode":
                flow.drain(rep, now)
        rep.wake = INF
        # preemptions of steps that formed no batch count with the next batch formed
        logged = rep.sched.preemptions
        # batches a replica may have in flight
        slots = rep.pp + 1 if rep.p.async_scheduling else rep.pp
        while len(rep.batches) < slots:
            before = rep.sched.preemptions
            hits_before = getattr(rep.sched.pool, "hit_tokens", 0)
            items = rep.sched.next_batch(now)
            if not items:
                if rep.sched.preemptions != before and not rep.batches:
                    continue
                break
            cached = getattr(rep.sched.pool, "hit_tokens", 0) - hits_before
            preempted = rep.sched.preemptions - logged
            _launch(rep, items, now, rep.grids, rep.tparams, rep.p, preempted, cached, log)
            logged = rep.sched.preemptions
    return SimResult(
        reqs,
        log,
        [r.sched.preemptions for r in reps],
        [r.sched.pool for r in reps],
        [r.busy_ns for r in reps],
    )
