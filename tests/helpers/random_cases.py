"""Small random cases for the differential tests: a trace, scheduler parameters and timing
grids where every operator family changes the stage time."""

import numpy as np
from vidur_fast.kernels.codes import (
    KV_RULE_PER_REQUEST,
    KV_RULE_SUM,
    N_COUNTERS,
    RouterPolicy,
    SchedPolicy,
)
from vidur_fast.kernels.timing import TimingGrids, TimingParams

from tests.helpers.engine_harness import sched_params

T, B, G, GC = 2048, 64, 64, 32
ROUTERS = tuple(RouterPolicy)
PP_CAPABLE = (
    SchedPolicy.SARATHI,
    SchedPolicy.VLLM,
    SchedPolicy.ORCA,
    SchedPolicy.FASTER_TRANSFORMER,
)


def rich_grids() -> TimingGrids:
    """Every operator family non-zero, so each batch feature changes the stage time."""
    n = np.arange(T + 1, dtype=np.float64)
    b = np.arange(B + 1, dtype=np.float64)[:, None]
    j = np.arange(T // G + 1, dtype=np.float64)
    c = np.arange(T // GC + 1, dtype=np.float64)
    return TimingGrids(
        0.5 + 0.003 * n,
        0.0001 * n,
        np.zeros(T + 1),
        0.05 + 0.0002 * n,
        0.01 * b + 0.002 * j[None, :],
        0.001 * j[:, None] + 0.004 * c[None, :],
        np.zeros(N_COUNTERS, dtype=np.int64),
    )


def whole_ms_grids() -> TimingGrids:
    """Every stage takes a whole number of ms, so arrivals on a ms grid often coincide with
    batch ends (the tie rule: arrivals first)."""
    g = rich_grids()
    zero = np.zeros_like
    return TimingGrids(
        np.ones(T + 1),
        zero(g.kv_save_ms),
        zero(g.allreduce_ms),
        zero(g.sendrecv_ms),
        zero(g.decode_ms),
        zero(g.prefill_ms),
        zero(g.counters),
    )


def random_case(policy: SchedPolicy, seed: int):
    """A small trace, parameters and timing grids; about a third of the cases have KV tight
    enough to force preemptions where the policy preempts, a third run on whole-ms steps with
    arrivals on whole ms."""
    rng = np.random.default_rng([int(policy), seed])
    n = int(rng.integers(4, 28))
    whole_ms = rng.random() < 0.35
    if whole_ms:
        arrival_s = np.cumsum(rng.integers(0, 5, n)) * 1e-3
        grids = whole_ms_grids()
    else:
        gaps_us = rng.exponential(3000.0, n).astype(np.int64)
        gaps_us[rng.random(n) < 0.2] = 0  # simultaneous arrivals
        arrival_s = np.cumsum(gaps_us) * 1e-6
        grids = rich_grids()
    prompt = rng.integers(1, 200, n)
    decode = rng.integers(1, 40, n)
    total = prompt + decode
    pp = int(rng.choice([1, 2])) if policy in PP_CAPABLE else 1
    batch_cap = int(rng.choice([2, 3, 4, 8, 16])) * pp
    block_size = 1 if policy == SchedPolicy.LIGHTLLM else int(rng.choice([4, 8, 16]))
    tight = rng.random() < 0.4
    need = int(np.max(-(-total // block_size)))
    if policy == SchedPolicy.LIGHTLLM:
        need = int(np.max(prompt + 1 + np.maximum(decode - 2, 0))) + 1
    max_blocks_per_seq = need
    num_blocks = need + int(rng.integers(0, 4 if tight else 4 * need))
    watermark = int(rng.integers(0, 3)) if policy in (SchedPolicy.SARATHI, SchedPolicy.VLLM) else 0
    num_blocks += watermark
    chunk = int(rng.choice([8, 32, 64, 256]))
    sp = sched_params(
        policy=int(policy),
        router=int(rng.choice(ROUTERS)),
        num_replicas=int(rng.integers(1, 4)),
        pp=pp,
        block_size=block_size,
        usable_blocks=num_blocks,
        watermark_blocks=watermark,
        batch_size_cap=batch_cap,
        batch_size_cap_per_stage=batch_cap // pp,
        planned_batch_size=batch_cap,
        chunk_size=chunk,
        # restarts grow prompts up to the whole sequence, which must still fit a prefill batch
        max_tokens_in_batch=int(total.max()) * int(rng.integers(1, 4)),
        max_blocks_per_seq=max_blocks_per_seq,
        max_waiting_iters=int(rng.integers(0, 5)),
        max_num_seqs=batch_cap,
        max_num_batched_tokens=chunk,
        long_prefill_token_threshold=int(rng.choice([0, 0, 16, 48])),
        reserve_full_sequence=int(rng.integers(0, 2)),
    )
    kv_rule = KV_RULE_PER_REQUEST if rng.random() < 0.5 else KV_RULE_SUM
    tp = TimingParams(G, GC, 2 // pp, 0.1, 0.1, 0.0, kv_rule, 1, pp)
    u_route = rng.random(n)
    # sessions for the sticky router; no block hashes (the prefix-aware router sees no cache)
    session = np.where(rng.random(n) < 0.7, rng.choice([3, 17, 1000, 2**40], n), -1)
    case = Case(arrival_s, prompt, decode, session, [[] for _ in range(n)], u_route)
    # host overhead per stage (model time excludes it)
    tp = tp._replace(cpu_overhead_ms=float(rng.choice([0.0, 0.0, 0.3])))
    return case.reject_some(rng, 0.05), sp, grids, tp


class Case:
    """A trace: per request arrival (s), prompt and decode tokens, session (-1: none), the
    workload hash of each leading KV block, a uniform for the random router, and whether the
    request is rejected at arrival (never routed)."""

    def __init__(self, arrival_s, prompt, decode, session, hashes, u_route):
        self.arrival_s = np.asarray(arrival_s, dtype=np.float64)
        self.prompt = np.asarray(prompt, dtype=np.int64)
        self.decode = np.asarray(decode, dtype=np.int64)
        self.session = np.asarray(session, dtype=np.int64)
        self.hashes = hashes
        self.u_route = np.asarray(u_route, dtype=np.float64)
        self.rejected = np.zeros(len(self.arrival_s), dtype=np.uint8)

    def reject_some(self, rng, p: float) -> "Case":
        self.rejected = (rng.random(len(self.arrival_s)) < p).astype(np.uint8)
        return self
