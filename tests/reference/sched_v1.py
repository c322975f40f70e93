"""vLLM v1 scheduling step (token budget, running first, recompute preemption from the tail,
admissions only in steps without preemption), as vidur-fast's README states the rules, with
either block pool (counted, or paged with prefix caching) and optional async scheduling.

Async scheduling (vLLM's AsyncScheduler): step N+1 is formed while step N runs, before step
N's output is applied. A step that reaches the end of the known sequence samples a token; it
leaves an output placeholder that counts as a known token, so the request's next decode can
be scheduled at once. A request whose step in flight samples its last token is not scheduled
again. Preempting a request with a step in flight makes that step's tokens stale: its output
is still delivered (its token counts, and may finish the request), but the reset progress is
left alone, and the waiting pass skips the request until that output has come back.
"""

from collections import deque

from tests.reference.sched_vidur import ceil_div


class VllmV1:
    def __init__(self, p, pool):
        self.p = p
        self.pool = pool
        self.waiting: deque = deque()
        self.running: list = []  # admission order; stays while in flight
        self.preemptions = 0
        # block lists (prefix caching): None = one per running request, never short; with
        # prefill/decode pools a replica has `slots`, held by its running requests and
        # `held` more (disaggregated requests whose KV is in transfer or waits to run)
        self.slots = None
        self.held = 0

    def lists_free(self) -> bool:
        return self.slots is None or len(self.running) + self.held < self.slots

    def add_request(self, req) -> None:
        self.waiting.append(req)

    def is_decode(self, req, n) -> bool:
        """Timing class of req's n tokens in the step just formed: a decode is one token after
        a sampled one (with async scheduling that token may still be in flight: this step's
        own placeholder plus one from the step before)."""
        return n == 1 and (req.prefill_done or req.placeholders > 1)

    def kv_before(self, req, n) -> int:
        """Tokens of req computed before its n tokens of the step just formed."""
        return req.computed - n

    def _cap(self, req, n: int, budget: int, running: bool) -> int:
        p = self.p
        if p.long_prefill_token_threshold > 0 and len(self.running) + len(self.waiting) > 1:
            n = min(n, p.long_prefill_token_threshold)
        n = min(n, budget)
        if running and p.max_model_len > 0:
            n = min(n, p.max_model_len - req.computed - 1)
        return n

    def _preempt(self, req) -> None:
        self.pool.release(req.rid)
        req.v1_reset()
        self.waiting.appendleft(req)
        self.preemptions += 1

    def _schedule(self, req, comp: int, n: int, batch: list) -> None:
        batch.append((req, n))
        req.inflight += n
        if self.p.async_scheduling and comp + n >= req.seq_len + req.placeholders:
            req.placeholders += 1

    def _last_token_in_flight(self, req) -> bool:
        """Async: the step in flight samples req's last output token (vLLM's rule: placeholders
        > 0 and computed + 2 - placeholders reaches prompt + max tokens)."""
        ph = req.placeholders
        return ph > 0 and req.computed + 2 - ph >= req.prompt + req.asked_decode

    def next_batch(self, now_ns):
        p = self.p
        bs = p.block_size
        caching = self.pool.caching
        budget = p.max_num_batched_tokens
        batch = []
        preempted = False
        in_prefill = 0  # requests of this step still in their prompt (max_partial_prefills)
        k = 0
        while k < len(self.running) and budget > 0:
            req = self.running[k]
            if self._last_token_in_flight(req):
                k += 1
                continue
            comp = req.computed
            if comp < req.prompt:
                in_prefill += 1
            n = self._cap(req, req.seq_len + req.placeholders - comp, budget, True)
            if n <= 0:
                k += 1
                continue
            need = ceil_div(comp + n, bs) - self.pool.blocks_of(req.rid)
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
            if caching:
                self.pool.grow(req, max(need, 0))
                self.pool.cache_full_blocks(req, min(comp + n, req.seq_len))
            else:
                self.pool.allocate(req.rid, need)
            self._schedule(req, comp, n, batch)
            budget -= n
            k += 1
        if preempted:
            return batch
        q = 0  # position in the waiting queue
        while (
            q < len(self.waiting)
            and budget > 0
            and len(self.running) < p.max_num_seqs
            and (not caching or self.lists_free())
        ):
            if p.max_num_partial_prefills > 0 and in_prefill >= p.max_num_partial_prefills:
                break
            req = self.waiting[q]
            if req.stale > 0:
                q += 1  # skipped, not a stop: its stale output is still in flight
                continue
            seq = req.seq_len
            hit_blocks, hit_free = self.pool.lookup(req, seq) if caching else (0, 0)
            hit = hit_blocks * bs
            n = self._cap(req, seq - hit, budget, False)
            if n <= 0:
                break
            # free hit blocks sit in the free queue: taking them costs a free block each
            need_all = ceil_div(seq, bs) - hit_blocks + hit_free
            if p.reserve_full_sequence and need_all > self.pool.free:
                break
            need = ceil_div(hit + n, bs) - hit_blocks
            if need + hit_free > self.pool.free:
                break
            del self.waiting[q]
            if req.cached_tokens is None:
                req.cached_tokens = hit
            req.processed = hit
            self.running.append(req)
            if caching:
                self.pool.admit(req, hit_blocks, need)
                self.pool.cache_full_blocks(req, min(hit + n, seq))
            else:
                self.pool.allocate(req.rid, need)
            self._schedule(req, hit, n, batch)
            budget -= n
            in_prefill += 1
        return batch

    def apply_output(self, req, n: int, now_ns: int) -> bool:
        """The step that computed n tokens of req ended: sample, cache. Returns whether req has
        all its output tokens."""
        if req.stale > 0:
            req.stale -= n
            # at most one step of a request is in flight when it is preempted: it sampled iff
            # the request has a placeholder
            if req.placeholders > 0:
                req.placeholders -= 1
                req.emit_token(now_ns)
            return req.generated >= req.asked_decode
        req.inflight -= n
        before = req.generated
        done = req.v1_advance(n, now_ns)
        if self.p.async_scheduling and req.generated > before:
            req.placeholders -= 1
            if self.pool.caching:
                # the new token may complete a block that held a placeholder
                self.pool.cache_full_blocks(req, req.computed - req.placeholders)
        return done

    def on_batch_end(self, items, finished) -> None:
        self.running = [q for q in self.running if q.rid not in finished]
        # stale output can finish a preempted request: it leaves the waiting queue
        self.waiting = deque(q for q in self.waiting if q.rid not in finished)
