"""vLLM v1 scheduling step (token budget, running first, recompute preemption from the tail,
admissions only in steps without preemption), as vidur-fast's README states the rules."""

from collections import deque

from tests.reference.sched_vidur import ceil_div


class VllmV1:
    def __init__(self, p, pool):
        self.p = p
        self.pool = pool
        self.waiting: deque = deque()
        self.running: list = []  # admission order; stays while in flight
        self.preemptions = 0

    def add_request(self, req) -> None:
        self.waiting.append(req)

    def is_decode(self, req, n) -> bool:
        return req.prefill_done and n == 1

    def _cap(self, req, n: int, budget: int) -> int:
        p = self.p
        if p.long_prefill_token_threshold > 0 and len(self.running) + len(self.waiting) > 1:
            n = min(n, p.long_prefill_token_threshold)
        n = min(n, budget)
        if p.max_model_len > 0:
            n = min(n, p.max_model_len - req.processed - 1)
        return n

    def _preempt(self, req) -> None:
        self.pool.release(req.rid)
        req.v1_reset()
        self.waiting.appendleft(req)
        self.preemptions += 1

    def next_batch(self, now_ns):
        p = self.p
        bs = p.block_size
        budget = p.max_num_batched_tokens
        batch = []
        preempted = False
        k = 0
        while k < len(self.running) and budget > 0:
            req = self.running[k]
            n = self._cap(req, req.seq_len - req.processed, budget)
            if n <= 0:
                k += 1
                continue
            need = ceil_div(req.processed + n, bs) - self.pool.blocks_of(req.rid)
            lost = False
            while need > self.pool.free:
                victim = self.running.pop()
                self._preempt(victim)
                preempted = True
                if victim is req:
                    lost = True
                    break
            if lost:
                break
            self.pool.allocate(req.rid, need)
            batch.append((req, n))
            budget -= n
            k += 1
        if preempted:
            return batch
        while self.waiting and budget > 0 and len(self.running) < p.max_num_seqs:
            req = self.waiting[0]
            hit = self.pool.cached_prefix_tokens(req)
            n = self._cap(req, req.seq_len - hit, budget)
            if n <= 0:
                break
            if p.reserve_full_sequence and ceil_div(req.seq_len, bs) > self.pool.free:
                break
            need = ceil_div(hit + n, bs)
            if need > self.pool.free:
                break
            self.waiting.popleft()
            req.processed = hit
            self.running.append(req)
            self.pool.allocate(req.rid, need)
            batch.append((req, n))
            budget -= n
        return batch

    def on_batch_end(self, items, finished) -> None:
        self.running = [q for q in self.running if q.rid not in finished]
