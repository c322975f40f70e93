"""Batch stage time from precomputed operator grids."""

from typing import NamedTuple

import numpy as np
from numba import njit
from vidur_fast.kernels.codes import (
    CLAMP_DECODE_BATCH,
    CLAMP_DECODE_KV,
    CLAMP_PREFILL_CHUNK,
    CLAMP_PREFILL_KV,
    CLAMP_TOKENS,
)


class TimingGrids(NamedTuple):
    """Per-layer operator times (ms) on dense grids; built by vidur_fast.timing.

    tok_ms[n]:        sum of the token-count ops of one layer (projections, MLP, norms, rope, add)
                      at n tokens (n rounded up to 8 by the caller's rule), n = 0..T
    kv_save_ms[n]:    KV-cache write at exactly n tokens, n = 0..T
    allreduce_ms[n]:  one TP all-reduce of n hidden rows incl. launch overheads (zeros if TP 1)
    sendrecv_ms[n]:   one PP activation transfer of n rows (zeros if PP 1)
    decode_ms[b, j]:  decode attention, batch b (1..B), mean kv length j*g
    prefill_ms[j, c]: prefill attention, cached kv j*g, equivalent chunk c*gc
    counters:         int64[codes.N_COUNTERS], incremented on every clamped lookup (mutated)
    """

    tok_ms: np.ndarray
    kv_save_ms: np.ndarray
    allreduce_ms: np.ndarray
    sendrecv_ms: np.ndarray
    decode_ms: np.ndarray
    prefill_ms: np.ndarray
    counters: np.ndarray


class TimingParams(NamedTuple):
    g: int  # kv granularity (tokens)
    gc: int  # prefill chunk granularity (tokens)
    layers_per_stage: int
    decode_overhead: float  # batching overhead fraction (0 unless GQA)
    prefill_overhead: float
    cpu_overhead_ms: float  # fixed per-stage host overhead
    kv_rule: int  # codes.KV_RULE_*
    tp: int
    pp: int
    cpu_overhead_per_seq_ms: float = 0.0  # host overhead per request in the batch, per stage
    sampler_ms: float = 0.0  # GPU time per step outside the layers (sampling), last stage
    sampler_per_seq_ms: float = 0.0  # the same per request in the batch
    pow2_tokens_below: int = 0  # batches of fewer tokens round up to a power of two, not to 8
    eager_ms_per_layer: float = 0.0  # floor per layer of a stage that carries prefill tokens
    graph_max_tokens: int = 0  # mixed batches of at most this many tokens replay CUDA graphs


@njit(cache=True, nogil=True, _nrt=False, inline="always")
def _clamp_nb(counters, slot, i, n):
    """Index i clamped into [0, n-1]; counts clamps above the edge.

    Mutates: counters.
    Returns: clamped index.
    """
    if i >= n:
        counters[slot] += 1
        return n - 1
    if i < 0:
        return 0
    return i


@njit(cache=True, nogil=True, _nrt=False, inline="always")
def ceil_to_nb(x, m):
    """x rounded up to a multiple of m.

    Mutates: nothing.
    Returns: int.
    """
    return (x + m - 1) // m * m


@njit(cache=True, nogil=True, _nrt=False, inline="always")
def _ceil_index_nb(x, m):
    """ceil(x / m): the grid index of x on a grid of step m (ceil_to_nb(x, m) // m, with one
    division instead of two: a 64-bit division costs 40-90 cycles, several per batch).

    Mutates: nothing.
    Returns: int.
    """
    return (x + m - 1) // m


@njit(cache=True, nogil=True, _nrt=False)
def host_time_ms_nb(tp_, n_seqs):
    """Host part of a stage time (fixed plus per-request overhead) for a batch of n_seqs.

    Mutates: nothing.
    Returns: ms (float); stage_time_ms_nb includes it (the sampler terms are GPU time, not
    host time).
    """
    return tp_.cpu_overhead_ms + tp_.cpu_overhead_per_seq_ms * n_seqs


@njit(cache=True, nogil=True, _nrt=False)
def stage_time_ms_nb(
    grids, tp_, n_tokens, n_dec, dec_kv_sum, n_pre, pre_kv, pre_chunk_sq_sum, last_stage
):
    """Duration of one pipeline stage of a batch, in ms.

    n_tokens: total tokens of the batch; n_dec / dec_kv_sum: decode requests and the sum of their
    processed tokens; n_pre / pre_kv / pre_chunk_sq_sum: prefill requests, their kv feature
    (already reduced by the kv rule, not yet rounded to g) and the sum of squared chunks.

    Mutates: grids.counters (clamped lookups).
    Returns: stage time in ms (float).
    """
    c = grids.counters
    t_rounded = ceil_to_nb(n_tokens, 8)
    if n_tokens < tp_.pow2_tokens_below:  # MoE models: CUDA-graph sizes 1, 2, 4 (then 8, 16..)
        t_rounded = 1
        while t_rounded < n_tokens:
            t_rounded *= 2
    layer = grids.tok_ms[_clamp_nb(c, CLAMP_TOKENS, t_rounded, grids.tok_ms.shape[0])]
    layer += grids.kv_save_ms[_clamp_nb(c, CLAMP_TOKENS, n_tokens, grids.kv_save_ms.shape[0])]
    if tp_.tp > 1:
        ar = grids.allreduce_ms[_clamp_nb(c, CLAMP_TOKENS, t_rounded, grids.allreduce_ms.shape[0])]
        layer += 2.0 * ar
    if n_dec > 0:
        kv_index = _ceil_index_nb(dec_kv_sum // n_dec, tp_.g)
        b = _clamp_nb(c, CLAMP_DECODE_BATCH, n_dec, grids.decode_ms.shape[0])
        j = _clamp_nb(c, CLAMP_DECODE_KV, kv_index, grids.decode_ms.shape[1])
        t = grids.decode_ms[b, j]
        if n_dec > 1:
            t *= 1.0 + tp_.decode_overhead
        layer += t
    if n_pre > 0:
        # builtin round (half to even, like np.round): np.round's code lives in Numba's
        # numba.np.arraymath, which a cached loop would then import when it loads
        chunk_eq = np.int64(round(np.sqrt(np.float64(pre_chunk_sq_sum))))
        ci = _ceil_index_nb(chunk_eq, tp_.gc)
        ci = _clamp_nb(c, CLAMP_PREFILL_CHUNK, ci, grids.prefill_ms.shape[1])
        j = _clamp_nb(
            c, CLAMP_PREFILL_KV, _ceil_index_nb(pre_kv, tp_.g), grids.prefill_ms.shape[0]
        )
        t = grids.prefill_ms[j, ci]
        if n_pre > 1:
            t *= 1.0 + tp_.prefill_overhead
        layer += t
    total = layer * tp_.layers_per_stage
    if n_pre > 0 and n_tokens > n_dec + n_pre and n_tokens > tp_.graph_max_tokens:
        # a step in which some request has more than one new token (a prompt chunk) runs
        # outside CUDA graphs: the host launches its kernels one by one, so it lasts at least
        # the launch time of its layers (a batch of one token per request is a decode batch
        # and replays its graph, even when a request's prompt came from the prefix cache; so
        # does a mixed batch within the captured sizes, graph_max_tokens)
        floor = tp_.eager_ms_per_layer * tp_.layers_per_stage
        if total < floor:
            total = floor
    total += tp_.cpu_overhead_ms
    total += tp_.cpu_overhead_per_seq_ms * (n_dec + n_pre)
    if last_stage:
        # the sampler runs once per step, on the logits of the last stage (GPU work: it does
        # not overlap the step the way host work does under async scheduling)
        total += tp_.sampler_ms + tp_.sampler_per_seq_ms * (n_dec + n_pre)
    if tp_.pp > 1 and not last_stage:
        total += grids.sendrecv_ms[
            _clamp_nb(c, CLAMP_TOKENS, t_rounded, grids.sendrecv_ms.shape[0])
        ]
    return total
