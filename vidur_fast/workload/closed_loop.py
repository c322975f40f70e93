"""Closed-loop workload: lengths up front, arrival times decided by the engine during the run.

Request i is the i-th request the clients send (release order). The first min(N, n) go to
clients 0..N-1 at their start times; every later one is sent by the client whose request ended
first, at that completion + think time (kernels/closed_loop.py). Until then its arrival is
unknown: the table holds +inf there and the engine reports the real times.
"""

from dataclasses import dataclass

import numpy as np

from vidur_fast.config.validate_workload import validate_closed_loop
from vidur_fast.config.workload import ClosedLoopWorkload
from vidur_fast.kernels.closed_loop import ClosedLoop
from vidur_fast.kernels.dtypes import NEVER, NO_ID, NS_PER_S
from vidur_fast.workload.clipping import clip_proportional
from vidur_fast.workload.generators import Stream, draw_lengths, rng_for
from vidur_fast.workload.table import RequestTable, make_table

# Random stream of the think times (after the Stream members of the open-loop generators).
THINK_STREAM = 3


@dataclass(frozen=True)
class ClosedLoopPlan:
    """What the engine needs beyond the request table, and the measurement window."""

    n_clients: int
    start_s: np.ndarray
    """float64[n_clients] first send time of each client."""
    think_s: np.ndarray
    """float64[n] think time before request i (unused for each client's first request)."""
    stop_s: float | None
    warmup_requests: int
    warmup_s: float
    measure_s: float | None
    ingest_s: np.ndarray
    """float64[n] front-end time of request i."""
    response_s: float
    front_ends: int = 1
    """API servers in front of the engine (one per replica that takes arrivals)."""


def build_closed_loop(
    cfg: ClosedLoopWorkload, seed: int, where: str = "workload", block_size: int = 16
) -> tuple[RequestTable, ClosedLoopPlan]:
    """Request lengths in release order (arrivals +inf except each client's first) and the
    plan the engine runs the loop with. Same cfg and seed give identical arrays."""
    validate_closed_loop(cfg, where)
    n = cfg.num_requests
    prompt, decode = draw_lengths(
        cfg.lengths, rng_for(seed, Stream.LENGTHS), n, seed, f"{where}.lengths"
    )
    if cfg.max_tokens is not None:
        prompt, decode = clip_proportional(prompt, decode, cfg.max_tokens)
    n_clients = min(cfg.concurrency, n)
    start = np.arange(n_clients, dtype=np.float64) * (cfg.ramp_up_s / cfg.concurrency)
    if cfg.think_time == "exponential" and cfg.think_time_s > 0:
        rng = np.random.default_rng(np.random.SeedSequence(seed, spawn_key=(THINK_STREAM,)))
        think = rng.exponential(cfg.think_time_s, n)
    else:
        think = np.full(n, float(cfg.think_time_s))
    think[:n_clients] = 0.0
    arrival = np.full(n, np.inf)
    arrival[:n_clients] = start
    lengths = type(cfg.lengths).__name__
    pool: dict = {}
    if cfg.prompt_pool:  # a reused prompt pool: lengths and prefix-block ids per pool entry
        from vidur_fast.workload.prompt_pool import pool_prompts

        _, prompt, offsets, hashes = pool_prompts(prompt, cfg.prompt_pool, seed, block_size)
        pool = {"hash_offsets": offsets, "hashes": hashes, "hash_block_size": block_size}
    table = make_table(
        arrival, prompt, decode, source=f"closed_loop({cfg.concurrency} clients, {lengths})",
        **pool,
    )  # fmt: skip
    plan = ClosedLoopPlan(
        n_clients=n_clients,
        start_s=start,
        think_s=think,
        stop_s=cfg.duration_s,
        warmup_requests=cfg.warmup_requests,
        warmup_s=cfg.warmup_s,
        measure_s=cfg.measure_s,
        # None (the engine's default, config.engine) left unresolved: no front end
        ingest_s=1e-3 * (cfg.ingest_ms or 0.0) + 1e-6 * cfg.ingest_us_per_token * prompt,
        response_s=1e-3 * (cfg.response_ms or 0.0),
    )
    return table, plan


def _ns(seconds: np.ndarray) -> np.ndarray:
    return np.round(np.asarray(seconds, dtype=np.float64) * NS_PER_S).astype(np.int64)


def closed_loop_state(plan: ClosedLoopPlan | None, n: int) -> ClosedLoop:
    """Kernel state for plan over n requests; plan None gives the open-loop (empty) state."""
    if plan is None:
        z = np.zeros(0, dtype=np.int64)
        one = np.zeros(1, dtype=np.int64)
        return ClosedLoop(
            heap_t=z,
            heap_i=z.copy(),
            heap_n=one,
            next_release=one.copy(),
            think_ns=z.copy(),
            client=z.copy(),
            stop_ns=np.full(1, NEVER, dtype=np.int64),
            ingest_ns=z.copy(),
            ingested=np.zeros(0, dtype=np.int8),
            fe_free=one.copy(),
            respond_ns=one.copy(),
        )
    k = plan.n_clients
    client = np.full(n, NO_ID, dtype=np.int64)
    client[:k] = np.arange(k)
    stop = NEVER if plan.stop_s is None else int(_ns(np.array([plan.stop_s]))[0])
    # the first k requests, sorted by (start, id), already form a valid min-heap
    return ClosedLoop(
        heap_t=_ns(plan.start_s),
        heap_i=np.arange(k, dtype=np.int64),
        heap_n=np.full(1, k, dtype=np.int64),
        next_release=np.full(1, k, dtype=np.int64),
        think_ns=_ns(plan.think_s),
        client=client,
        stop_ns=np.full(1, stop, dtype=np.int64),
        ingest_ns=_ns(plan.ingest_s),
        ingested=np.zeros(n, dtype=np.int8),
        fe_free=np.zeros(max(1, plan.front_ends), dtype=np.int64),
        respond_ns=np.full(1, int(round(plan.response_s * NS_PER_S)), dtype=np.int64),
    )


def measurement_mask(plan: ClosedLoopPlan, arrival_s: np.ndarray) -> np.ndarray:
    """Requests counted in the metrics: released, past the warm-up, inside the window."""
    a = np.asarray(arrival_s, dtype=np.float64)
    keep = np.isfinite(a) & (np.arange(a.shape[0]) >= plan.warmup_requests)
    keep &= a >= plan.warmup_s
    if plan.measure_s is not None:
        keep &= a < plan.warmup_s + plan.measure_s
    return keep
