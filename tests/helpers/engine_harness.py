"""Run the kernel loop directly on hand-made requests and a linear step-time grid."""

import numpy as np
from vidur_fast.kernels.codes import N_COUNTERS, RouterPolicy, SchedPolicy
from vidur_fast.kernels.state import SchedParams, block_shift_of
from vidur_fast.kernels.timing import TimingGrids, TimingParams

from vidur_fast.engine.run import run_engine

# routers that need no sessions or prefix hashes (randomised tests draw from these)
PLAIN_ROUTERS = (
    RouterPolicy.ROUND_ROBIN,
    RouterPolicy.RANDOM,
    RouterPolicy.LOR,
    RouterPolicy.LOP,
    RouterPolicy.LEAST_WAITING,
)


T, B, G, GC = 4096, 64, 64, 32


def linear_grids(base_ms: float = 1.0, per_token_ms: float = 0.01) -> TimingGrids:
    """Stage time = base + per_token * tokens (one layer, no attention cost)."""
    tok = base_ms + per_token_ms * np.arange(T + 1, dtype=np.float64)
    return TimingGrids(
        tok,
        np.zeros(T + 1),
        np.zeros(T + 1),
        np.zeros(T + 1),
        np.zeros((B + 1, T // G + 1)),
        np.zeros((T // G + 1, T // GC + 1)),
        np.zeros(N_COUNTERS, dtype=np.int64),
    )


def params(
    policy,
    n_replicas=1,
    pp=1,
    num_blocks=1000,
    block_size=16,
    batch_cap=16,
    chunk=512,
    router=RouterPolicy.ROUND_ROBIN,
    watermark=0,
    max_tokens_in_batch=4096,
    max_blocks_per_seq=64,
    long_prefill=0,
    max_model_len=0,
    reserve_full=1,
    max_waiting_iters=10,
):
    """SchedParams for any policy: batch_cap is both batch_size_cap and max_num_seqs, chunk both
    chunk_size and max_num_batched_tokens, num_blocks the usable blocks."""
    return SchedParams(
        policy=int(policy),
        router=int(router),
        num_replicas=n_replicas,
        pp=pp,
        block_size=block_size,
        block_shift=block_shift_of(block_size),
        usable_blocks=num_blocks,
        watermark_blocks=watermark,
        batch_size_cap=batch_cap,
        batch_size_cap_per_stage=batch_cap // pp,
        planned_batch_size=batch_cap,
        chunk_size=chunk,
        max_tokens_in_batch=max_tokens_in_batch,
        max_blocks_per_seq=max_blocks_per_seq,
        max_waiting_iters=max_waiting_iters,
        max_num_seqs=batch_cap,
        max_num_batched_tokens=chunk,
        long_prefill_token_threshold=long_prefill,
        max_model_len=max_model_len,
        reserve_full_sequence=reserve_full,
    )


def run(arrival_s, prompt, decode, sp, grids=None, pp=1):
    n = len(arrival_s)
    # a 2-layer model: each of the pp stages runs 2 // pp layers
    tp = TimingParams(G, GC, 2 // pp, 0.0, 0.0, 0.0, 1, 1, pp)
    return run_engine(
        np.asarray(arrival_s, dtype=np.float64),
        np.asarray(prompt),
        np.asarray(decode),
        np.full(n, -1),
        np.zeros(n + 1, dtype=np.int64),
        np.zeros(n, dtype=np.uint8),
        grids if grids is not None else linear_grids(),
        tp,
        sp,
        np.zeros(n),
    )


ALL_POLICIES = (
    SchedPolicy.SARATHI,
    SchedPolicy.VLLM,
    SchedPolicy.ORCA,
    SchedPolicy.FASTER_TRANSFORMER,
    SchedPolicy.LIGHTLLM,
    SchedPolicy.VLLM_V1,
)


def sched_params(**kw) -> SchedParams:
    """SchedParams with every cap and feature the policy does not read at 0, unless kw sets it
    (the differential tests build theirs here; field names as in the config)."""
    defaults = dict(
        watermark_blocks=0,
        batch_size_cap=0,
        batch_size_cap_per_stage=0,
        planned_batch_size=0,
        chunk_size=0,
        max_tokens_in_batch=0,
        max_blocks_per_seq=0,
        max_waiting_iters=0,
        max_num_seqs=0,
        max_num_batched_tokens=0,
        long_prefill_token_threshold=0,
        max_model_len=0,
        reserve_full_sequence=0,
        max_num_partial_prefills=0,
        enable_prefix_caching=0,
        max_imbalance_tokens=0,
        async_scheduling=0,
    )
    defaults.update(kw)
    if "block_size" in defaults and "block_shift" not in defaults:
        defaults["block_shift"] = block_shift_of(defaults["block_size"])
    return SchedParams(**defaults)
