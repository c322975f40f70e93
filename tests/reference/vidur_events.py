"""Vidur's discrete-event chain for pipeline parallelism, event by event, as a
second reference for the engine's collapsed per-replica pipeline.

One heap of events keyed (time, creation number): ties at equal times go in creation order,
and every arrival is created before the run, so arrivals at t come first. The events:

* arrival -> a global-schedule event at t;
* global schedule: route every request queued so far; one replica-schedule event per replica
  that received requests, in replica-id order;
* replica schedule: form batches while fewer than PP are in flight (a formation that only
  preempted and leaves the replica idle is retried, as the engine does); each batch is
  scheduled at t and arrives at stage 0;
* stage arrival: append to the stage's FIFO, then a stage-schedule event;
* stage schedule: if the stage is idle and its FIFO is not empty, run the FIFO head for its
  stage time (non-last stages include the send/recv term) and create its stage-end event;
* stage end: the stage is idle; a stage-schedule event for it, then the batch's arrival at
  the next stage or, after the last stage, its batch-end event;
* batch end: token accounting, frees, unfinished requests back to the scheduler, one fewer in
  flight, then a replica-schedule event.

So a replica forms a new micro-batch only when a request is routed to it or when one of its
batches leaves the last stage, never at the end of an earlier stage; a request is in at most
one batch in flight. Batch features are taken at formation (requests of a batch in flight do
not change).
"""

import heapq
import itertools

from vidur_fast.kernels.codes import SchedPolicy

from tests.reference.block_pool import CountedBlockPool
from tests.reference.naive_sim import SCHEDULERS, make_requests
from tests.reference.routers import Router
from tests.reference.timing import batch_features, stage_ns

ARRIVAL, GLOBAL_SCHEDULE, REPLICA_SCHEDULE = "arrival", "global", "replica"
STAGE_ARRIVAL, STAGE_SCHEDULE, STAGE_END, BATCH_END = "arrive", "stage", "stage_end", "end"


class _Replica:
    def __init__(self, sched, pp: int):
        self.sched = sched
        self.running = 0  # batches formed and not ended
        self.in_flight = 0  # requests in those batches (dp_lb counts them as running)
        self.fifo = [[] for _ in range(pp)]
        self.busy = [False] * pp


def vidur_event_sim(arrival_ns, prompt, decode, p, grids, tparams, u_route, session=None):
    """Simulate to completion with Vidur's event chain. Same inputs as naive_sim (policies
    that allow pp > 1; no request rejected up front); returns the per-request objects."""
    policy = SchedPolicy(p.policy)
    assert policy != SchedPolicy.VLLM_V1, "vllm_v1 has no pipeline stages"
    reqs = make_requests(arrival_ns, prompt, decode, session)
    pp = p.pp
    reps = [
        _Replica(SCHEDULERS[policy](p, CountedBlockPool(p.usable_blocks)), pp)
        for _ in range(p.num_replicas)
    ]
    router = Router(p)
    heap: list = []
    seq = itertools.count()

    def push(t, kind, *args):
        heapq.heappush(heap, (t, next(seq), kind, args))

    for req in reqs:
        push(req.arrival_ns, ARRIVAL, req)
    global_queue: list = []
    while heap:
        t, _, kind, args = heapq.heappop(heap)
        if kind == ARRIVAL:
            global_queue.append(args[0])
            push(t, GLOBAL_SCHEDULE)
        elif kind == GLOBAL_SCHEDULE:
            targets = set()
            for req in sorted(global_queue, key=lambda q: (q.arrival_ns, q.rid)):
                waiting = [len(x.sched.waiting) for x in reps]
                pools = [x.sched.pool for x in reps]
                run = [len(x.sched.running) + x.in_flight for x in reps]
                u = float(u_route[req.rid])
                req.replica = router.route(req, u, waiting, pools, run, t)
                reps[req.replica].sched.add_request(req)
                targets.add(req.replica)
            global_queue.clear()
            for r in sorted(targets):
                push(t, REPLICA_SCHEDULE, r)
        elif kind == REPLICA_SCHEDULE:
            rep = reps[args[0]]
            while rep.running < pp:
                before = rep.sched.preemptions
                items = rep.sched.next_batch(t)
                if not items:
                    if rep.sched.preemptions != before and rep.running == 0:
                        continue
                    break
                rep.running += 1
                rep.in_flight += len(items)
                feats = batch_features(items, tparams, rep.sched.is_decode, rep.sched.kv_before)
                for req, _ in items:
                    if req.sched_ns is None:
                        req.sched_ns = t
                push(t, STAGE_ARRIVAL, args[0], 0, (items, feats))
        elif kind == STAGE_ARRIVAL:
            r, st, batch = args
            reps[r].fifo[st].append(batch)
            push(t, STAGE_SCHEDULE, r, st)
        elif kind == STAGE_SCHEDULE:
            r, st = args
            rep = reps[r]
            if rep.busy[st] or not rep.fifo[st]:
                continue
            rep.busy[st] = True
            items, feats = batch = rep.fifo[st].pop(0)
            dur = stage_ns(grids, tparams, feats, st == pp - 1)
            for req, _ in items:
                if req.last_stage_end_ns != 0:
                    req.preempt_ns += t - req.last_stage_end_ns
            push(t + dur, STAGE_END, r, st, batch, dur)
        elif kind == STAGE_END:
            r, st, batch, dur = args
            reps[r].busy[st] = False
            for req, _ in batch[0]:
                req.exec_ns += dur
                req.last_stage_end_ns = t
            push(t, STAGE_SCHEDULE, r, st)
            if st == pp - 1:
                push(t, BATCH_END, r, batch)
            else:
                push(t, STAGE_ARRIVAL, r, st + 1, batch)
        else:  # BATCH_END
            r, (items, feats) = args
            rep = reps[r]
            finished = set()
            for req, n in items:
                had_token = req.generated > 0
                done = req.vidur_advance(n, t)
                if not had_token and req.generated > 0:
                    router.on_prefill_end(req)
                if done:
                    req.done_ns = t
                    rep.sched.pool.release(req.rid)
                    router.on_request_end(req)
                    finished.add(req.rid)
            rep.sched.on_batch_end(items, finished)
            router.on_batch_end(r, feats[6])
            rep.running -= 1
            rep.in_flight -= len(items)
            push(t, REPLICA_SCHEDULE, r)
    return reqs
