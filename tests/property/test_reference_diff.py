"""The kernel engine equals the plain-Python reference (tests/reference) exactly on small
random traces: per-request timestamps in ns, restarts, replicas, token gaps, and every batch
record."""

import numpy as np
import pytest
from vidur_fast.kernels.codes import KV_RULE_PER_REQUEST, KV_RULE_SUM, N_COUNTERS, SchedPolicy
from vidur_fast.kernels.dtypes import NEVER, NS_PER_S
from vidur_fast.kernels.state import SchedParams
from vidur_fast.kernels.timing import TimingGrids, TimingParams

from tests.reference.naive_sim import naive_sim
from tests.scenario.engine_harness import PLAIN_ROUTERS
from vidur_fast.engine.run import run_engine

T, B, G, GC = 2048, 64, 64, 32
CASES_PER_POLICY = 30
ROUTERS = PLAIN_ROUTERS
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
    sp = SchedParams(
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
        max_model_len=0,
        reserve_full_sequence=int(rng.integers(0, 2)),
    )
    kv_rule = KV_RULE_PER_REQUEST if rng.random() < 0.5 else KV_RULE_SUM
    tp = TimingParams(G, GC, 2 // pp, 0.1, 0.1, 0.0, kv_rule, 1, pp)
    u_route = rng.random(n)
    return arrival_s, prompt, decode, sp, grids, tp, u_route


def run_both(policy, seed):
    arrival_s, prompt, decode, sp, grids, tp, u_route = random_case(policy, seed)
    n = len(arrival_s)
    out = run_engine(
        arrival_s,
        prompt,
        decode,
        np.full(n, -1),
        np.zeros(n + 1, dtype=np.int64),
        np.zeros(n, dtype=np.uint8),
        grids,
        tp,
        sp,
        u_route,
    )
    arrival_ns = np.round(arrival_s * NS_PER_S).astype(np.int64)
    ref = naive_sim(arrival_ns, prompt, decode, sp, grids, tp, u_route)
    return out, ref, sp


def _ns(v):
    return NEVER if v is None else v


def assert_same(out, ref, sp):
    k = out.reqs
    got = {
        "sched_ns": k.sched_ns,
        "first_tok_ns": k.first_tok_ns,
        "done_ns": k.done_ns,
        "restarts": k.restarts,
        "replica": k.replica,
        "generated": k.generated,
        "exec_ns": k.exec_ns,
        "preempt_ns": k.preempt_ns,
        "tbt_n": k.tbt_n,
        "tbt_sum_ns": k.tbt_sum_ns,
        "tbt_max_ns": k.tbt_max_ns,
    }
    for name, col in got.items():
        want = [_ns(getattr(q, name)) for q in ref.requests]
        np.testing.assert_array_equal(col, want, err_msg=f"{name} ({sp})")
    b = out.batches
    assert len(b) == len(ref.batches), f"batch count {len(b)} != {len(ref.batches)} ({sp})"
    for col in (
        "start_ns",
        "end_ns",
        "replica",
        "size",
        "n_tokens",
        "n_prefill_tokens",
        "stage_ns",
        "alloc_blocks",
        "waiting",
        "preempted",
    ):
        want = [getattr(x, col) for x in ref.batches]
        np.testing.assert_array_equal(b[col].to_numpy(), want, err_msg=f"batch {col} ({sp})")
    np.testing.assert_array_equal(out.reps.preemptions, ref.preemptions)


@pytest.mark.parametrize("seed", range(CASES_PER_POLICY))
@pytest.mark.parametrize(
    "policy",
    [
        SchedPolicy.SARATHI,
        SchedPolicy.VLLM,
        SchedPolicy.ORCA,
        SchedPolicy.FASTER_TRANSFORMER,
        SchedPolicy.LIGHTLLM,
        SchedPolicy.VLLM_V1,
    ],
    ids=lambda p: p.name.lower(),
)
def test_engine_equals_reference(policy, seed):
    out, ref, sp = run_both(policy, seed)
    assert all(q.done_ns is not None for q in ref.requests)
    assert_same(out, ref, sp)


@pytest.mark.parametrize("policy", [SchedPolicy.SARATHI, SchedPolicy.VLLM, SchedPolicy.VLLM_V1])
def test_tight_kv_cases_do_preempt(policy):
    """The random cases exercise preemption (else the comparison would not cover restarts)."""
    restarts = sum(int(run_both(policy, s)[0].reqs.restarts.sum()) for s in range(10))
    assert restarts > 0
