"""Request transitions shared by the schedulers: batch slots, restarts, token updates."""

import math

import numpy as np
from numba import njit
from vidur_fast.kernels.blocks import release_nb
from vidur_fast.kernels.codes import ReqStatus
from vidur_fast.kernels.dtypes import NEVER
from vidur_fast.kernels.kv import cache_computed_nb
from vidur_fast.kernels.queues import wq_push_front_nb
from vidur_fast.kernels.state import (
    H_DECODE,
    H_FIRST_TOK_NS,
    H_GENERATED,
    H_LAST_TOK_NS,
    H_ORIG_DECODE,
    H_PLACEHOLDERS,
    H_PROCESSED,
    H_PROMPT,
    H_TBT_MAX_NS,
    H_TBT_N,
    H_TBT_SUM_NS,
    H_TOK_INFLIGHT,
    H_TOK_STALE,
)

# ---- batch slots ----


@njit(cache=True, nogil=True, _nrt=False)
def batch_add_nb(reps, r, s, i, n):
    """Append request i with n tokens to the batch being formed in slot s of replica r.

    Mutates: reps.bat_req, reps.bat_tok, reps.bat_n.
    Returns: nothing.
    """
    k = reps.bat_n[r, s]
    reps.bat_req[r, s, k] = i
    reps.bat_tok[r, s, k] = n
    reps.bat_n[r, s] = k + 1


# ---- Vidur (legacy) request transitions ----


@njit(cache=True, nogil=True, _nrt=False)
def restart_nb(reqs, i):
    """Recompute preemption: everything processed so far becomes prompt.

    NOTE(fix): Vidur shrinks the prompt of a request preempted mid-prefill and relabels the rest
    as decode tokens; here the prompt never shrinks.
    Mutates: reqs (prompt, decode, processed, prefill_done, restarts, status).
    Returns: nothing.
    """
    new_p = reqs.hot[i, H_PROCESSED]
    if new_p < reqs.hot[i, H_PROMPT]:
        new_p = reqs.hot[i, H_PROMPT]
    reqs.hot[i, H_PROMPT] = new_p
    reqs.hot[i, H_DECODE] = reqs.total[i] - new_p
    reqs.hot[i, H_PROCESSED] = 0
    reqs.prefill_done[i] = 0
    reqs.restarts[i] += 1
    reqs.status[i] = ReqStatus.WAITING


@njit(cache=True, nogil=True, _nrt=False)
def preempt_to_waiting_nb(reps, reqs, r, i, now_ns):
    """Restart request i, free its (counted) blocks and put it at the head of the waiting
    queue (Vidur's schedulers).

    Mutates: reqs, reps.
    Returns: nothing.
    """
    restart_nb(reqs, i)
    release_nb(reps, reqs, r, i, now_ns)
    wq_push_front_nb(reps, reqs, r, i)
    reps.preemptions[r] += 1


# emit_token_nb's gap when a token opens no gap (the first token): gaps are >= 0
NO_GAP = -1


@njit(cache=True, nogil=True, _nrt=False, inline="always")
def emit_token_nb(reqs, i, now_ns):
    """Record one output token of request i at now: first-token time or an inter-token gap.

    The gap goes to the TBT histogram through the caller (the loop counts a batch's equal gaps
    at once, hist_add_nb), not here: one histogram update per token was a chain of dependent
    loads and stores through the same bucket.
    Mutates: reqs (generated, first_tok_ns, last_tok_ns, tbt_*).
    Returns: the gap in ns, or NO_GAP.
    """
    gap = np.int64(NO_GAP)
    reqs.hot[i, H_GENERATED] += 1
    if reqs.hot[i, H_FIRST_TOK_NS] == NEVER:
        reqs.hot[i, H_FIRST_TOK_NS] = now_ns
    elif reqs.hot[i, H_GENERATED] > 1:
        gap = now_ns - reqs.hot[i, H_LAST_TOK_NS]
        reqs.hot[i, H_TBT_N] += 1
        reqs.hot[i, H_TBT_SUM_NS] += gap
        if gap > reqs.hot[i, H_TBT_MAX_NS]:
            reqs.hot[i, H_TBT_MAX_NS] = gap
    reqs.hot[i, H_LAST_TOK_NS] = now_ns
    return gap


# TBT histogram: bucket k holds gaps in [HIST_MIN_NS * HIST_RATIO^k, ... * HIST_RATIO^(k+1)).
HIST_MIN_NS = 1000.0
HIST_RATIO = 1.01
# The histogram array ends in two slots after its buckets: the last gap counted and its bucket.
# The decodes of one batch mostly share one gap (the step before), so the logarithm is taken
# about once per batch instead of once per token.
HIST_MEMO_SLOTS = 2


@njit(cache=True, nogil=True, _nrt=False)
def hist_add_nb(hist, gap_ns, count):
    """Count a gap `count` times in the log-bucket histogram (1% relative bucket width).

    Mutates: hist.
    Returns: nothing.
    """
    buckets = hist.shape[0] - HIST_MEMO_SLOTS
    if gap_ns == hist[buckets]:
        hist[hist[buckets + 1]] += count
        return
    if gap_ns <= HIST_MIN_NS:
        k = 0
    else:
        k = int(math.log(gap_ns / HIST_MIN_NS) / math.log(HIST_RATIO)) + 1
    if k >= buckets:
        k = buckets - 1
    hist[buckets] = gap_ns
    hist[buckets + 1] = k
    hist[k] += count


@njit(cache=True, nogil=True, _nrt=False, inline="always")
def advance_legacy_nb(reqs, i, n, now_ns):
    """Vidur's on_batch_end for one request: processed += n, a bonus token at prefill end.

    Mutates: reqs.
    Returns: (True when the request completed, the token's gap or NO_GAP).
    """
    gap = np.int64(NO_GAP)
    reqs.hot[i, H_PROCESSED] += n
    if reqs.prefill_done[i] == 0:
        if reqs.hot[i, H_PROCESSED] == reqs.hot[i, H_PROMPT]:
            reqs.prefill_done[i] = 1
            reqs.hot[i, H_PROCESSED] += 1
            gap = emit_token_nb(reqs, i, now_ns)
    else:
        gap = emit_token_nb(reqs, i, now_ns)
    return reqs.hot[i, H_PROCESSED] >= reqs.hot[i, H_PROMPT] + reqs.hot[i, H_DECODE], gap


@njit(cache=True, nogil=True, _nrt=False, inline="always")
def advance_v1_nb(reqs, i, n, now_ns):
    """vLLM v1 update_from_output for one request: a token is sampled only when the computed
    tokens reach the sequence length (prompt + generated).

    Mutates: reqs.
    Returns: (True when the request has produced all its output tokens, the token's gap or
    NO_GAP).
    """
    gap = np.int64(NO_GAP)
    reqs.hot[i, H_PROCESSED] += n
    if reqs.hot[i, H_PROCESSED] >= reqs.hot[i, H_PROMPT] + reqs.hot[i, H_GENERATED]:
        reqs.prefill_done[i] = 1
        gap = emit_token_nb(reqs, i, now_ns)
    return reqs.hot[i, H_GENERATED] >= reqs.hot[i, H_ORIG_DECODE], gap


@njit(cache=True, nogil=True, _nrt=False, inline="always")
def apply_v1_output_nb(kv, reqs, p, r, i, n, now_ns):
    """Apply request i's n tokens of a finished vLLM v1 step on replica r (async scheduling;
    synchronously the loop calls advance_v1_nb directly).

    NOTE(vllm): Scheduler.update_from_output (AsyncScheduler._update_request_with_output with
    async scheduling). Output of a step that was in flight when the request was preempted is
    stale: its token is still delivered (and may finish the request) but the reset progress is
    left alone. At most one step of a request is in flight when it is preempted (a step is
    formed only while at most one other is in flight), so a stale step samples iff the
    request has a placeholder. With async scheduling a running request caches the blocks its
    new token completes (computed tokens minus placeholders).
    Mutates: reqs, kv (cached blocks).
    Returns: (True when the request has produced all its output tokens, the token's gap or
    NO_GAP).
    """
    if reqs.hot[i, H_TOK_STALE] > 0:
        gap = np.int64(NO_GAP)
        reqs.hot[i, H_TOK_STALE] -= n
        if reqs.hot[i, H_PLACEHOLDERS] > 0:
            reqs.hot[i, H_PLACEHOLDERS] -= 1
            gap = emit_token_nb(reqs, i, now_ns)
        return reqs.hot[i, H_GENERATED] >= reqs.hot[i, H_ORIG_DECODE], gap
    reqs.hot[i, H_TOK_INFLIGHT] -= n
    g = reqs.hot[i, H_GENERATED]
    complete, gap = advance_v1_nb(reqs, i, n, now_ns)
    if reqs.hot[i, H_GENERATED] > g:
        reqs.hot[i, H_PLACEHOLDERS] -= 1
        known = reqs.hot[i, H_PROCESSED] + reqs.hot[i, H_TOK_INFLIGHT] - reqs.hot[i, H_PLACEHOLDERS]
        cache_computed_nb(kv, reqs, p, r, i, known)
    return complete, gap
