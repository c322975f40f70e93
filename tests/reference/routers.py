"""Routers of the reference: round_robin, random (pre-drawn uniforms), lor, lop,
least_waiting, sticky (sessions pinned to a replica) and prefix_aware (longest cached prefix
among replicas whose load is close to the least loaded)."""

from vidur_fast.kernels.codes import RouterPolicy

# routers whose load is prompt tokens routed and not yet through their prefill
_PREFILL_LOAD = (RouterPolicy.LOP, RouterPolicy.STICKY, RouterPolicy.PREFIX_AWARE)


class Router:
    def __init__(self, policy: int, n_replicas: int, imbalance: int = 0):
        self.policy = policy
        self.n = n_replicas
        self.imbalance = imbalance  # prefix_aware: allowed load above the least loaded
        self.counter = 0
        self.pending = [0] * n_replicas  # lor: requests; else prompt tokens before prefill end
        self.session_replica: dict[int, int] = {}  # sticky

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

    def route(self, req, u: float, waiting_lengths, pools) -> int:
        if self.n == 1:
            r = 0
        elif self.policy == RouterPolicy.ROUND_ROBIN:
            r = self.counter % self.n
            self.counter += 1
        elif self.policy == RouterPolicy.RANDOM:
            r = min(int(u * self.n), self.n - 1)
        elif self.policy == RouterPolicy.LEAST_WAITING:
            r = min(range(self.n), key=lambda k: (waiting_lengths[k], k))
        elif self.policy == RouterPolicy.STICKY:
            if req.session in self.session_replica:
                r = self.session_replica[req.session]
            else:
                r = self._least_loaded()
                if req.session >= 0:
                    self.session_replica[req.session] = r
        elif self.policy == RouterPolicy.PREFIX_AWARE:
            r = self._prefix_aware(req, pools)
        else:
            r = self._least_loaded()
        if self.policy == RouterPolicy.LOR:
            self.pending[r] += 1
        elif self.policy in _PREFILL_LOAD:
            self.pending[r] += req.prompt_asked
        return r

    def on_prefill_end(self, req) -> None:
        if self.policy in _PREFILL_LOAD:
            self.pending[req.replica] -= req.prompt_asked

    def on_request_end(self, req) -> None:
        if self.policy == RouterPolicy.LOR:
            self.pending[req.replica] -= 1
