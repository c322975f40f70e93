"""Vidur's replica schedulers, one plain object per replica.

Each scheduler owns a waiting deque and a running list of Request objects (requests of an
in-flight batch are in neither) and a block pool. `next_batch(now)` returns [(request,
tokens)] (empty: nothing to run); `on_batch_end(items, finished_ids)` puts unfinished
requests back.
"""

from collections import deque

import numpy as np


def ceil_div(a: int, b: int) -> int:
    return -(-a // b)


class VidurScheduler:
    """Shared machinery: counted blocks, waiting queue, running list, recompute preemption."""

    def __init__(self, p, pool):
        self.p = p
        self.pool = pool
        self.waiting: deque = deque()
        self.running: list = []
        self.preemptions = 0

    def add_request(self, req) -> None:
        self.waiting.append(req)

    @staticmethod
    def next_tokens(req) -> int:
        """1 after the prefill, else the whole prompt."""
        return 1 if req.prefill_done else req.prompt

    def is_decode(self, req, n) -> bool:
        return req.prefill_done

    def kv_before(self, req, n) -> int:
        return req.processed

    def on_batch_end(self, items, finished: set) -> None:
        for req, _ in items:
            if req.rid not in finished:
                self.running.append(req)

    # ---- vLLM / Sarathi block rules ----

    def can_allocate_request(self, req) -> bool:
        if self.pool.blocks_of(req.rid) == 0:
            need = ceil_div(req.prompt, self.p.block_size)
            return self.pool.free - need >= self.p.watermark_blocks
        return self.pool.free >= 1

    def allocate_request(self, req) -> None:
        held = self.pool.blocks_of(req.rid)
        if held == 0:
            self.pool.allocate(req.rid, ceil_div(req.prompt, self.p.block_size))
            return
        extra = max(0, req.processed - held * self.p.block_size)
        assert extra in (0, 1)
        self.pool.allocate(req.rid, extra)

    def preempt(self, req) -> None:
        req.vidur_restart()
        self.pool.release(req.rid)
        self.waiting.appendleft(req)
        self.preemptions += 1

    def admit_decode(self, req, batch) -> None:
        """Victim loop: restart the last running request until req gets its block; with no
        victim left, restart req itself."""
        while not self.can_allocate_request(req):
            if not self.running:
                self.preempt(req)
                return
            self.preempt(self.running.pop())
        self.allocate_request(req)
        batch.append((req, 1))


class Sarathi(VidurScheduler):
    def next_batch(self, now_ns):
        p = self.p
        batch = []
        used = 0
        partial = []
        while self.running and len(batch) < p.batch_size_cap_per_stage:
            req = self.running.pop(0)
            if not req.prefill_done:
                partial.append(req)
                continue
            before = len(batch)
            self.admit_decode(req, batch)
            used += len(batch) - before
        skipped = []
        for req in partial:
            n = min(req.prompt - req.processed, p.chunk_size - used)
            if n <= 0:
                skipped.append(req)
                continue
            batch.append((req, n))
            used += n
        self.running = sorted(skipped + self.running, key=lambda q: q.arrival_ns)
        while self.waiting:
            if (
                self.pool.num_requests >= p.batch_size_cap
                or len(batch) >= p.batch_size_cap_per_stage
            ):
                break
            req = self.waiting[0]
            if not self.can_allocate_request(req):
                break
            n = min(req.prompt - req.processed, p.chunk_size - used)
            if n <= 0:
                break
            self.waiting.popleft()
            self.allocate_request(req)
            batch.append((req, n))
            used += n
        return batch


class VllmV0(VidurScheduler):
    def next_batch(self, now_ns):
        p = self.p
        batch = []
        longest = 0
        while self.waiting:
            req = self.waiting[0]
            if not self.can_allocate_request(req):
                break
            n = req.prompt
            if (len(batch) + 1) * max(longest, n) > p.max_tokens_in_batch:
                break
            if (
                self.pool.num_requests == p.batch_size_cap
                or len(batch) == p.batch_size_cap_per_stage
            ):
                break
            self.waiting.popleft()
            self.allocate_request(req)
            batch.append((req, n))
            longest = max(longest, n)
        if batch:
            return batch
        self.running.sort(key=lambda q: q.arrival_ns)
        while self.running and len(batch) < p.batch_size_cap_per_stage:
            self.admit_decode(self.running.pop(0), batch)
        return batch


class Orca(VidurScheduler):
    def _admit_reserving(self, batch):
        p = self.p
        while self.waiting and len(batch) < p.planned_batch_size:
            if self.pool.free < p.max_blocks_per_seq:
                break
            req = self.waiting.popleft()
            self.pool.allocate(req.rid, p.max_blocks_per_seq)
            batch.append((req, self.next_tokens(req)))
        return batch

    def next_batch(self, now_ns):
        batch = []
        while self.running and len(batch) < self.p.planned_batch_size:
            req = self.running.pop(0)
            batch.append((req, self.next_tokens(req)))
        return self._admit_reserving(batch)


class FasterTransformer(Orca):
    """Static batching; unfinished batches continue oldest first. Requests that finish are
    freed at once (Vidur leaks them until their whole batch is done)."""

    def __init__(self, p, pool):
        super().__init__(p, pool)
        self.unfinished_batches: list[list] = []

    def next_batch(self, now_ns):
        if self.unfinished_batches:
            return [(req, self.next_tokens(req)) for req in self.unfinished_batches.pop(0)]
        return self._admit_reserving([])

    def on_batch_end(self, items, finished):
        rest = [req for req, _ in items if req.rid not in finished]
        if rest:
            self.unfinished_batches.append(rest)


class LightLLM(VidurScheduler):
    """KV in tokens; prefill batches admitted by LightLLM's future-memory estimate."""

    def __init__(self, p, pool):
        super().__init__(p, pool)
        self.waiting_iters = 0

    @staticmethod
    def held_left(req, scheduled: bool):
        if scheduled:
            held = req.processed
            left = req.decode - max(req.processed - req.prompt, 0) - 1
        else:
            held = req.prompt + 1
            left = req.decode - 2
        return held, max(0, left)

    def fits(self, entries) -> bool:
        entries = sorted(entries, key=lambda e: -e[1])
        left = np.array([e[1] for e in entries])
        held_cum = np.cumsum([e[0] for e in entries])
        need = (left * np.arange(1, len(entries) + 1) + held_cum).max()
        return need < self.p.usable_blocks

    def prefill_batch(self):
        p = self.p
        entries = [self.held_left(q, True) for q in self.running]
        batch = []
        tokens = 0
        while self.waiting:
            req = self.waiting[0]
            n = req.prompt
            if tokens + n > p.max_tokens_in_batch:
                break
            if (
                self.pool.num_requests == p.batch_size_cap
                or len(batch) == p.batch_size_cap_per_stage
            ):
                break
            entries.append(self.held_left(req, False))
            if not self.fits(entries):
                break
            self.waiting.popleft()
            self.pool.allocate(req.rid, req.prompt)
            batch.append((req, n))
            tokens += n
        return batch

    def decode_batch(self):
        # instead of Vidur's OOM error: recompute-preempt the latest running requests
        while len(self.running) > self.pool.free:
            self.preempt(self.running.pop())
        batch = []
        while self.running:
            req = self.running.pop(0)
            self.pool.allocate(req.rid, 1)
            batch.append((req, 1))
        return batch

    def next_batch(self, now_ns):
        if not self.running:
            batch = self.prefill_batch()
            if batch:
                self.waiting_iters = 0
            return batch
        if self.waiting_iters >= self.p.max_waiting_iters:
            self.waiting_iters = 0
            batch = self.prefill_batch()
            if batch:
                return batch
        self.waiting_iters += 1
        return self.decode_batch()
