"""Routers of the reference: round_robin, random (pre-drawn uniforms), lor, lop, least_waiting."""

from vidur_fast.kernels.codes import RouterPolicy


class Router:
    def __init__(self, policy: int, n_replicas: int):
        self.policy = policy
        self.n = n_replicas
        self.counter = 0
        self.pending = [0] * n_replicas  # lor: requests; lop: prompt tokens before prefill end

    def route(self, req, u: float, waiting_lengths=None) -> int:
        if self.n == 1:
            r = 0
        elif self.policy == RouterPolicy.ROUND_ROBIN:
            r = self.counter % self.n
            self.counter += 1
        elif self.policy == RouterPolicy.RANDOM:
            r = min(int(u * self.n), self.n - 1)
        elif self.policy == RouterPolicy.LEAST_WAITING:
            r = min(range(self.n), key=lambda k: (waiting_lengths[k], k))
        else:
            r = min(range(self.n), key=lambda k: (self.pending[k], k))
        if self.policy == RouterPolicy.LOR:
            self.pending[r] += 1
        elif self.policy == RouterPolicy.LOP:
            self.pending[r] += req.prompt_asked
        return r

    def on_prefill_end(self, req) -> None:
        if self.policy == RouterPolicy.LOP:
            self.pending[req.replica] -= req.prompt_asked

    def on_request_end(self, req) -> None:
        if self.policy == RouterPolicy.LOR:
            self.pending[req.replica] -= 1
