"""Routers of the reference: round_robin, random (pre-drawn uniforms), lor, lop, least_waiting,
sticky (sessions pinned to a replica, new ones by lop), prefix_aware (longest cached prefix
among replicas whose load is close to the least loaded), and Vidur canary's lop_binary,
lop_batch_end, lop_uncached, sticky_round_robin, sticky_lor, tolerant_sticky_lop_uncached and
ranked_sticky_lop_uncached, and dp_lb (vLLM's DP front end: least waiting x 4 + running from
counts published on 100 ms ticks while they change, else after 5 s, each pick since counted as
one more waiting request). Ties go to the lowest replica id."""

from vidur_fast.kernels.codes import RouterPolicy as P

# routers whose load of a request lasts until its first prefill ends
_UNTIL_PREFILL_END = (
    P.LOP,
    P.STICKY,
    P.PREFIX_AWARE,
    P.LOP_BINARY,
    P.LOP_UNCACHED,
    P.TOLERANT_STICKY_LOP_UNCACHED,
    P.RANKED_STICKY_LOP_UNCACHED,
)
_UNCACHED = (P.LOP_UNCACHED, P.TOLERANT_STICKY_LOP_UNCACHED, P.RANKED_STICKY_LOP_UNCACHED)
_SESSIONS = (
    P.STICKY,
    P.STICKY_ROUND_ROBIN,
    P.STICKY_LOR,
    P.TOLERANT_STICKY_LOP_UNCACHED,
    P.RANKED_STICKY_LOP_UNCACHED,
)


class Router:
    def __init__(self, p):
        self.policy = p.router
        self.n = p.num_replicas
        self.imbalance = p.max_imbalance_tokens  # prefix_aware
        self.tolerance = p.router_tolerance_factor
        self.top_k = p.router_top_k
        self.block_size = p.block_size
        self.counter = 0
        self.pending = [0] * self.n  # the router's load of each replica
        self.load: dict[int, int] = {}  # request id -> what it added to its replica's load
        self.session_replica: dict[int, int] = {}
        # dp_lb: the scores the front end sees, those last published, the next tick, the
        # last publication
        self.front = [0] * self.n
        self.published = [0] * self.n
        self.next_tick = 0
        self.last_published = 0

    def _dp_lb(self, waiting, running, now, commit) -> int:
        tick, idle = 100_000_000, 5_000_000_000
        if now >= self.next_tick:
            self.next_tick = (now // tick + 1) * tick
            live = [4 * w + k for w, k in zip(waiting, running, strict=True)]
            if live != self.published or now - self.last_published >= idle:
                self.published = live
                self.front = list(live)
                self.last_published = now
        r = min(range(self.n), key=lambda k: (self.front[k], k))
        if commit:
            self.front[r] += 4
        return r

    def _least_loaded(self) -> int:
        return min(range(self.n), key=lambda k: (self.pending[k], k))

    def _prefix_aware(self, req, pools) -> int:
        """Among replicas within `imbalance` of the least load, the one with the most cached
        prompt blocks of req (ties: lower load, then lower id); none cached: least loaded."""
        least = self._least_loaded()
        bound = self.pending[least] + self.imbalance
        close = [r for r in range(self.n) if self.pending[r] <= bound]
        cached = {r: pools[r].longest_cached_prefix(req) for r in close}
        best_len = max(cached.values())
        if best_len == 0:
            return least
        return min((r for r in close if cached[r] == best_len), key=lambda r: (self.pending[r], r))

    def _uncached(self, req, pools, r) -> int:
        return req.prompt - pools[r].longest_cached_prefix(req) * self.block_size

    def _imbalances(self, req, pools) -> list[int]:
        """max - min of the loads if replica r took req's uncached prompt, for every r."""
        out = []
        for r in range(self.n):
            loads = list(self.pending)
            loads[r] += self._uncached(req, pools, r)
            out.append(max(loads) - min(loads))
        return out

    def _keeps(self, req, pools, pinned: int) -> bool:
        imb = self._imbalances(req, pools)
        if self.policy == P.TOLERANT_STICKY_LOP_UNCACHED:
            return imb[pinned] <= self.tolerance * min(imb)
        ranked = sorted(range(self.n), key=lambda r: (imb[r], r))
        return ranked.index(pinned) < self.top_k

    def _choose(self, req, u, waiting_lengths, pools, commit, running, now) -> int:
        policy = self.policy
        if policy in (P.ROUND_ROBIN, P.STICKY_ROUND_ROBIN):
            r = self.counter % self.n
            self.counter += commit
            return r
        if policy == P.RANDOM:
            return min(int(u * self.n), self.n - 1)
        if policy == P.LEAST_WAITING:
            return min(range(self.n), key=lambda k: (waiting_lengths[k], k))
        if policy == P.DP_LB:
            return self._dp_lb(waiting_lengths, running, now, commit)
        if policy == P.PREFIX_AWARE:
            return self._prefix_aware(req, pools)
        if policy in _UNCACHED:
            imb = self._imbalances(req, pools)
            return min(range(self.n), key=lambda r: (imb[r], r))
        return self._least_loaded()

    def route(self, req, u: float, waiting_lengths, pools, running=None, now=0) -> int:
        r = self.pick(req, u, waiting_lengths, pools, True, running, now)
        self.add(req, r, pools)
        return r

    def pick(self, req, u: float, waiting_lengths, pools, commit=True, running=None, now=0) -> int:
        """The replica for req (its session pinned there unless commit is off, which also
        leaves the round-robin counter and dp_lb's count); no load added. running: requests
        running on each replica, now: the time (dp_lb)."""
        pinned = self.session_replica.get(req.session) if self.policy in _SESSIONS else None
        if self.n == 1:
            r = 0
        elif pinned is not None and (
            self.policy in (P.STICKY, P.STICKY_ROUND_ROBIN, P.STICKY_LOR)
            or self._keeps(req, pools, pinned)
        ):
            r = pinned
        else:
            r = self._choose(req, u, waiting_lengths, pools, commit, running, now)
        if commit and self.policy in _SESSIONS and req.session >= 0:
            self.session_replica[req.session] = r
        return r

    def add(self, req, r: int, pools) -> None:
        """req's load on replica r."""
        if self.policy in (P.LOR, P.STICKY_LOR, P.LOP_BINARY):
            load = 1
        elif self.policy in _UNCACHED:
            load = self._uncached(req, pools, r)
        elif self.policy in _UNTIL_PREFILL_END or self.policy == P.LOP_BATCH_END:
            load = req.prompt
        else:
            load = 0
        self.pending[r] += load
        self.load[req.rid] = load

    def on_prefill_end(self, req) -> None:
        if self.policy in _UNTIL_PREFILL_END:
            self.pending[req.replica] -= self.load[req.rid]

    def on_batch_end(self, replica: int, prefill_tokens: int) -> None:
        """lop_batch_end: a finished batch takes its prompt tokens off the load."""
        if self.policy == P.LOP_BATCH_END:
            self.pending[replica] -= prefill_tokens

    def on_request_end(self, req) -> None:
        if self.policy in (P.LOR, P.STICKY_LOR):
            self.pending[req.replica] -= 1


class GroupRouter:
    """A router over the replicas ids (ascending) with its own knobs (policy, tolerance
    factor, top_k, max_imbalance_tokens): it picks as Router would over that subset alone."""

    def __init__(self, p, ids, knobs):
        code, tol, top_k, imb = knobs
        self.r = Router(
            p._replace(
                router=int(code),
                num_replicas=len(ids),
                router_tolerance_factor=float(tol),
                router_top_k=int(top_k),
                max_imbalance_tokens=int(imb),
            )
        )
        self.ids = list(ids)
        self.at = {x: k for k, x in enumerate(self.ids)}

    def pick(self, req, u, waiting_lengths, pools, commit=True, running=None, now=0) -> int:
        w = [waiting_lengths[x] for x in self.ids]
        run = None if running is None else [running[x] for x in self.ids]
        return self.ids[self.r.pick(req, u, w, [pools[x] for x in self.ids], commit, run, now)]

    def add(self, req, r, pools) -> None:
        self.r.add(req, self.at[r], [pools[x] for x in self.ids])

    def prefill_end(self, req, r) -> None:
        if self.r.policy in _UNTIL_PREFILL_END:
            self.r.pending[self.at[r]] -= self.r.load[req.rid]

    def request_end(self, r) -> None:
        if self.r.policy in (P.LOR, P.STICKY_LOR):
            self.r.pending[self.at[r]] -= 1

    def batch_end(self, r, prefill_tokens) -> None:
        if self.r.policy == P.LOP_BATCH_END:
            self.r.pending[self.at[r]] -= prefill_tokens
