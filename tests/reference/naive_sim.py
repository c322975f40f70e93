"""A slow, plain-Python simulator with the engine's scheduling semantics, for differential
tests: one object per request, lists for queues, a loop over events.

Event order (as the engine documents it): an arrival at time t is routed before any replica
event at t; replica events at equal times go in replica-id order. A replica event finishes the
batch that ended (if any), then forms batches while fewer than PP are in flight. A formation
that only preempted and leaves the replica idle is retried at once. A batch runs through the
pipeline stages in order, each stage starting when both the previous stage of this batch and
this stage's previous batch are done.
"""

from dataclasses import dataclass, field

from vidur_fast.kernels.codes import SchedPolicy

from tests.reference.block_pool import CountedBlockPool
from tests.reference.request import Request
from tests.reference.routers import Router
from tests.reference.sched_v1 import VllmV1
from tests.reference.sched_vidur import FasterTransformer, LightLLM, Orca, Sarathi, VllmV0
from tests.reference.timing import batch_features, stage_ns

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
    size: int
    n_tokens: int
    n_prefill_tokens: int
    stage_ns: int  # first stage
    alloc_blocks: int  # after formation
    waiting: int  # after formation
    preempted: int  # during formation


@dataclass
class InFlight:
    seq: int
    end_ns: int
    items: list


@dataclass
class Replica:
    rid: int
    sched: object
    pp: int
    stage_free: list
    wake: float = INF
    batches: list = field(default_factory=list)  # in flight
    n_formed: int = 0

    def next_event(self) -> float:
        return min([self.wake] + [b.end_ns for b in self.batches])


@dataclass
class SimResult:
    requests: list
    batches: list
    preemptions: list  # per replica


def _launch(rep: Replica, items, now_ns, grids, tparams, p, preempted, log):
    sched = rep.sched
    feats = batch_features(items, tparams, sched.is_decode)
    t = max(now_ns, rep.stage_free[0])
    stage_times = []
    for st in range(p.pp):
        dur = stage_ns(grids, tparams, feats, st == p.pp - 1)
        begin = max(t, rep.stage_free[st])
        t = begin + dur
        rep.stage_free[st] = t
        stage_times.append((begin, t))
    for req, _ in items:
        if req.sched_ns is None:
            req.sched_ns = now_ns
        for begin, end in stage_times:
            if req.last_stage_end_ns != 0:
                req.preempt_ns += begin - req.last_stage_end_ns
            req.exec_ns += end - begin
            req.last_stage_end_ns = end
    end = stage_times[-1][1]
    rep.batches.append(InFlight(rep.n_formed, end, items))
    rep.n_formed += 1
    log.append(
        BatchRecord(
            start_ns=now_ns,
            end_ns=end,
            replica=rep.rid,
            size=len(items),
            n_tokens=feats[0],
            n_prefill_tokens=feats[6],
            stage_ns=stage_times[0][1] - stage_times[0][0],
            alloc_blocks=sched.pool.allocated,
            waiting=len(sched.waiting),
            preempted=preempted,
        )
    )


def _finish(rep: Replica, batch: InFlight, now_ns, router, v1: bool) -> None:
    finished = set()
    for req, n in batch.items:
        had_token = req.generated > 0
        done = req.v1_advance(n, now_ns) if v1 else req.vidur_advance(n, now_ns)
        if not had_token and req.generated > 0:
            router.on_prefill_end(req)
        if done:
            req.done_ns = now_ns
            rep.sched.pool.release(req.rid)
            router.on_request_end(req)
            finished.add(req.rid)
    rep.sched.on_batch_end(batch.items, finished)
    rep.batches.remove(batch)


def naive_sim(arrival_ns, prompt, decode, p, grids, tparams, u_route, rejected=None):
    """Simulate to completion. p: the engine's scheduler parameters (policy code, caps, block
    counts); grids/tparams: the timing grids and their parameters; u_route: one uniform per
    request for the random router. Returns per-request objects and per-batch records."""
    n = len(arrival_ns)
    reqs = [
        Request(
            rid=k,
            arrival_ns=int(arrival_ns[k]),
            prompt=int(prompt[k]),
            decode=int(decode[k]),
            total=int(prompt[k]) + int(decode[k]),
            asked_decode=int(decode[k]),
        )
        for k in range(n)
    ]
    policy = SchedPolicy(p.policy)
    v1 = policy == SchedPolicy.VLLM_V1
    reps = [
        Replica(
            rid=r,
            sched=SCHEDULERS[policy](p, CountedBlockPool(p.usable_blocks)),
            pp=p.pp,
            stage_free=[0] * p.pp,
        )
        for r in range(p.num_replicas)
    ]
    router = Router(p.router, p.num_replicas)
    log: list[BatchRecord] = []
    nxt = 0
    while True:
        t_arr = reqs[nxt].arrival_ns if nxt < n else INF
        rep = min(reps, key=lambda x: (x.next_event(), x.rid))
        t_rep = rep.next_event()
        if t_arr == INF and t_rep == INF:
            break
        if t_arr <= t_rep:
            req = reqs[nxt]
            nxt += 1
            if rejected is not None and rejected[req.rid]:
                continue
            req.replica = router.route(
                req, float(u_route[req.rid]), [len(x.sched.waiting) for x in reps]
            )
            target = reps[req.replica]
            target.sched.add_request(req)
            if len(target.batches) < p.pp and target.wake == INF:
                target.wake = t_arr
            continue
        now = int(t_rep)
        ending = [b for b in rep.batches if b.end_ns == now]
        if ending:
            _finish(rep, min(ending, key=lambda b: b.seq), now, router, v1)
        rep.wake = INF
        # preemptions of steps that formed no batch count with the next batch formed
        logged = rep.sched.preemptions
        while len(rep.batches) < p.pp:
            before = rep.sched.preemptions
            items = rep.sched.next_batch(now)
            if not items:
                if rep.sched.preemptions != before and not rep.batches:
                    continue
                break
            _launch(rep, items, now, grids, tparams, p, rep.sched.preemptions - logged, log)
            logged = rep.sched.preemptions
    return SimResult(reqs, log, [r.sched.preemptions for r in reps])
