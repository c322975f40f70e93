"""Pools of a heterogeneous cluster: each replica's pool, and per pool the scheduler fields
that depend on the device and layout (pipeline stages, KV blocks) and its timing grids.

A cluster of one pool passes empty arrays (rep_pool has no rows): the loop then reads the one
SchedParams, TimingGrids and TimingParams it was given, as before pools existed.
"""

from typing import NamedTuple

import numpy as np
from numba import njit
from vidur_fast.kernels.state import SchedParams
from vidur_fast.kernels.timing import TimingGrids, TimingParams


class PoolParams(NamedTuple):
    """Per-pool columns (P pools) and the pool of each replica (R replicas, numbered pool by
    pool). Every array is empty when the cluster is one pool."""

    rep_pool: np.ndarray  # int64[R], pool of each replica
    # SchedParams fields that differ by pool
    pp: np.ndarray  # int64[P]
    usable_blocks: np.ndarray  # int64[P]
    watermark_blocks: np.ndarray  # int64[P]
    batch_size_cap_per_stage: np.ndarray  # int64[P]
    planned_batch_size: np.ndarray  # int64[P]
    chunk_size: np.ndarray  # int64[P]
    max_num_seqs: np.ndarray  # int64[P]
    max_num_batched_tokens: np.ndarray  # int64[P]
    long_prefill_token_threshold: np.ndarray  # int64[P]
    max_num_partial_prefills: np.ndarray  # int64[P]
    # DP engines: every dp_group[q] consecutive replicas of pool q from its first replica
    # first_rep[q] step in lockstep (SchedParams.dp_group of the pool)
    dp_group: np.ndarray  # int64[P]
    first_rep: np.ndarray  # int64[P]
    # TimingParams per pool
    g: np.ndarray  # int64[P]
    gc: np.ndarray  # int64[P]
    layers_per_stage: np.ndarray  # int64[P]
    kv_rule: np.ndarray  # int64[P]
    tp: np.ndarray  # int64[P]
    pow2_tokens_below: np.ndarray  # int64[P]
    graph_max_tokens: np.ndarray  # int64[P]
    decode_overhead: np.ndarray  # float64[P]
    prefill_overhead: np.ndarray  # float64[P]
    cpu_overhead_ms: np.ndarray  # float64[P]
    cpu_overhead_per_seq_ms: np.ndarray  # float64[P]
    sampler_ms: np.ndarray  # float64[P]
    sampler_per_seq_ms: np.ndarray  # float64[P]
    eager_ms_per_layer: np.ndarray  # float64[P]
    # TimingGrids per pool, stacked on a leading pool axis (the grids share their shapes)
    tok_ms: np.ndarray  # float64[P, T]
    kv_save_ms: np.ndarray  # float64[P, T]
    allreduce_ms: np.ndarray  # float64[P, T]
    sendrecv_ms: np.ndarray  # float64[P, T]
    decode_ms: np.ndarray  # float64[P, B, J]
    prefill_ms: np.ndarray  # float64[P, J, C]


@njit(cache=True, nogil=True, _nrt=False, inline="always")
def pool_sched_nb(p, pools, r):
    """The scheduler parameters of replica r: p, with its pool's stages, KV blocks, batch
    limits (chunk, running requests, token budget, long-prefill cap, partial prefills) and DP
    engine size when the cluster has several pools.

    Mutates: nothing.
    Returns: SchedParams.
    """
    pp = p.pp
    usable = p.usable_blocks
    watermark = p.watermark_blocks
    cap_stage = p.batch_size_cap_per_stage
    planned = p.planned_batch_size
    chunk = p.chunk_size
    seqs = p.max_num_seqs
    budget = p.max_num_batched_tokens
    long_cap = p.long_prefill_token_threshold
    partial = p.max_num_partial_prefills
    if pools.rep_pool.shape[0] > 0:
        q = pools.rep_pool[r]
        pp = pools.pp[q]
        usable = pools.usable_blocks[q]
        watermark = pools.watermark_blocks[q]
        cap_stage = pools.batch_size_cap_per_stage[q]
        planned = pools.planned_batch_size[q]
        chunk = pools.chunk_size[q]
        seqs = pools.max_num_seqs[q]
        budget = pools.max_num_batched_tokens[q]
        long_cap = pools.long_prefill_token_threshold[q]
        partial = pools.max_num_partial_prefills[q]
    return SchedParams(
        p.policy,
        p.router,
        p.num_replicas,
        pp,
        p.block_size,
        usable,
        watermark,
        p.batch_size_cap,
        cap_stage,
        planned,
        chunk,
        p.max_tokens_in_batch,
        p.max_blocks_per_seq,
        p.max_waiting_iters,
        seqs,
        budget,
        long_cap,
        p.max_model_len,
        p.reserve_full_sequence,
        partial,
        p.enable_prefix_caching,
        p.max_imbalance_tokens,
        p.async_scheduling,
        p.router_tolerance_factor,
        p.router_top_k,
        p.block_shift,
        pools.dp_group[pools.rep_pool[r]] if pools.rep_pool.shape[0] > 0 else p.dp_group,
    )


@njit(cache=True, nogil=True, _nrt=False, inline="always")
def pool_grids_nb(grids, pools, q):
    """Pool q's timing grids (views into the stacked arrays; one shared clamp counter).

    Mutates: nothing.
    Returns: TimingGrids.
    """
    return TimingGrids(
        pools.tok_ms[q],
        pools.kv_save_ms[q],
        pools.allreduce_ms[q],
        pools.sendrecv_ms[q],
        pools.decode_ms[q],
        pools.prefill_ms[q],
        grids.counters,
    )


@njit(cache=True, nogil=True, _nrt=False, inline="always")
def pool_timing_nb(pools, q):
    """Pool q's timing parameters.

    Mutates: nothing.
    Returns: TimingParams.
    """
    return TimingParams(
        pools.g[q],
        pools.gc[q],
        pools.layers_per_stage[q],
        pools.decode_overhead[q],
        pools.prefill_overhead[q],
        pools.cpu_overhead_ms[q],
        pools.kv_rule[q],
        pools.tp[q],
        pools.pp[q],
        pools.cpu_overhead_per_seq_ms[q],
        pools.sampler_ms[q],
        pools.sampler_per_seq_ms[q],
        pools.pow2_tokens_below[q],
        pools.eager_ms_per_layer[q],
        pools.graph_max_tokens[q],
    )


def one_pool() -> PoolParams:
    """The PoolParams of a one-pool cluster: every array empty."""
    i = np.zeros(0, dtype=np.int64)
    f = np.zeros(0, dtype=np.float64)
    f2 = np.zeros((0, 0), dtype=np.float64)
    f3 = np.zeros((0, 0, 0), dtype=np.float64)
    return PoolParams(*([i] * 20), *([f] * 7), f2, f2, f2, f2, f3, f3)


def stack_pools(rep_pool, sched: list, timing: list, grids: list) -> PoolParams:
    """PoolParams of several pools from each pool's SchedParams, TimingParams and TimingGrids
    (the grids must have equal shapes; the caller checks)."""

    def ints(xs):
        return np.array(xs, dtype=np.int64)

    def floats(xs):
        return np.array(xs, dtype=np.float64)

    def stack(name):
        return np.ascontiguousarray(np.stack([getattr(g, name) for g in grids]), np.float64)

    return PoolParams(
        rep_pool=ints(rep_pool),
        pp=ints([s.pp for s in sched]),
        usable_blocks=ints([s.usable_blocks for s in sched]),
        watermark_blocks=ints([s.watermark_blocks for s in sched]),
        batch_size_cap_per_stage=ints([s.batch_size_cap_per_stage for s in sched]),
        planned_batch_size=ints([s.planned_batch_size for s in sched]),
        chunk_size=ints([s.chunk_size for s in sched]),
        max_num_seqs=ints([s.max_num_seqs for s in sched]),
        max_num_batched_tokens=ints([s.max_num_batched_tokens for s in sched]),
        long_prefill_token_threshold=ints([s.long_prefill_token_threshold for s in sched]),
        max_num_partial_prefills=ints([s.max_num_partial_prefills for s in sched]),
        dp_group=ints([s.dp_group for s in sched]),
        first_rep=np.searchsorted(np.asarray(rep_pool), np.arange(len(sched))).astype(np.int64),
        g=ints([t.g for t in timing]),
        gc=ints([t.gc for t in timing]),
        layers_per_stage=ints([t.layers_per_stage for t in timing]),
        kv_rule=ints([t.kv_rule for t in timing]),
        tp=ints([t.tp for t in timing]),
        pow2_tokens_below=ints([t.pow2_tokens_below for t in timing]),
        graph_max_tokens=ints([t.graph_max_tokens for t in timing]),
        decode_overhead=floats([t.decode_overhead for t in timing]),
        prefill_overhead=floats([t.prefill_overhead for t in timing]),
        cpu_overhead_ms=floats([t.cpu_overhead_ms for t in timing]),
        cpu_overhead_per_seq_ms=floats([t.cpu_overhead_per_seq_ms for t in timing]),
        sampler_ms=floats([t.sampler_ms for t in timing]),
        sampler_per_seq_ms=floats([t.sampler_per_seq_ms for t in timing]),
        eager_ms_per_layer=floats([t.eager_ms_per_layer for t in timing]),
        tok_ms=stack("tok_ms"),
        kv_save_ms=stack("kv_save_ms"),
        allreduce_ms=stack("allreduce_ms"),
        sendrecv_ms=stack("sendrecv_ms"),
        decode_ms=stack("decode_ms"),
        prefill_ms=stack("prefill_ms"),
    )
