"""Request transitions shared by the schedulers: batch slots, restarts, token updates."""

import math

from numba import njit
from vidur_fast.kernels.blocks import release_nb
from vidur_fast.kernels.codes import ReqStatus
from vidur_fast.kernels.dtypes import NEVER
from vidur_fast.kernels.kv import cache_computed_nb
from vidur_fast.kernels.queues import wq_push_front_nb

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
    new_p = reqs.processed[i]
    if new_p < reqs.prompt[i]:
        new_p = reqs.prompt[i]
    reqs.prompt[i] = new_p
    reqs.decode[i] = reqs.total[i] - new_p
    reqs.processed[i] = 0
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


@njit(cache=True, nogil=True, _nrt=False)
def emit_token_nb(reqs, hist, i, now_ns):
    """Record one output token of request i at now: first-token time or an inter-token gap.

    Mutates: reqs (generated, first_tok_ns, last_tok_ns, tbt_*), hist (TBT histogram).
    Returns: nothing.
    """
    reqs.generated[i] += 1
    if reqs.first_tok_ns[i] == NEVER:
        reqs.first_tok_ns[i] = now_ns
    elif reqs.generated[i] > 1:
        gap = now_ns - reqs.last_tok_ns[i]
        reqs.tbt_n[i] += 1
        reqs.tbt_sum_ns[i] += gap
        if gap > reqs.tbt_max_ns[i]:
            reqs.tbt_max_ns[i] = gap
        _hist_add_nb(hist, gap)
    reqs.last_tok_ns[i] = now_ns


# TBT histogram: bucket k holds gaps in [HIST_MIN_NS * HIST_RATIO^k, ... * HIST_RATIO^(k+1)).
HIST_MIN_NS = 1000.0
HIST_RATIO = 1.01


@njit(cache=True, nogil=True, _nrt=False)
def _hist_add_nb(hist, gap_ns):
    """Count one gap in the log-bucket histogram (1% relative bucket width).

    Mutates: hist.
    Returns: nothing.
    """
    if gap_ns <= HIST_MIN_NS:
        k = 0
    else:
        k = int(math.log(gap_ns / HIST_MIN_NS) / math.log(HIST_RATIO)) + 1
    if k >= hist.shape[0]:
        k = hist.shape[0] - 1
    hist[k] += 1


@njit(cache=True, nogil=True, _nrt=False)
def advance_legacy_nb(reqs, hist, i, n, now_ns):
    """Vidur's on_batch_end for one request: processed += n, a bonus token at prefill end.

    Mutates: reqs, hist.
    Returns: True when the request completed.
    """
    reqs.processed[i] += n
    if reqs.prefill_done[i] == 0:
        if reqs.processed[i] == reqs.prompt[i]:
            reqs.prefill_done[i] = 1
            reqs.processed[i] += 1
            emit_token_nb(reqs, hist, i, now_ns)
    else:
        emit_token_nb(reqs, hist, i, now_ns)
    return reqs.processed[i] >= reqs.prompt[i] + reqs.decode[i]


@njit(cache=True, nogil=True, _nrt=False)
def advance_v1_nb(reqs, hist, i, n, now_ns):
    """vLLM v1 update_from_output for one request: a token is sampled only when the computed
    tokens reach the sequence length (prompt + generated).

    Mutates: reqs, hist.
    Returns: True when the request has produced all its output tokens.
    """
    reqs.processed[i] += n
    if reqs.processed[i] >= reqs.prompt[i] + reqs.generated[i]:
        reqs.prefill_done[i] = 1
        emit_token_nb(reqs, hist, i, now_ns)
    return reqs.generated[i] >= reqs.orig_decode[i]


@njit(cache=True, nogil=True, _nrt=False)
def apply_v1_output_nb(kv, reqs, hist, p, r, i, n, now_ns):
    """Apply request i's n tokens of a finished vLLM v1 step on replica r (async scheduling;
    synchronously the loop calls advance_v1_nb directly).

    NOTE(vllm): Scheduler.update_from_output (AsyncScheduler._update_request_with_output with
    async scheduling). Output of a step that was in flight when the request was preempted is
    stale: its token is still delivered (and may finish the request) but the reset progress is
    left alone. At most one step of a request is in flight when it is preempted (a step is
    formed only while at most one other is in flight), so a stale step samples iff the
    request has a placeholder. With async scheduling a running request caches the blocks its
    new token completes (computed tokens minus placeholders).
    Mutates: reqs, hist, kv (cached blocks).
    Returns: True when the request has produced all its output tokens.
    """
    if reqs.tok_stale[i] > 0:
        reqs.tok_stale[i] -= n
        if reqs.placeholders[i] > 0:
            reqs.placeholders[i] -= 1
            emit_token_nb(reqs, hist, i, now_ns)
        return reqs.generated[i] >= reqs.orig_decode[i]
    reqs.tok_inflight[i] -= n
    g = reqs.generated[i]
    complete = advance_v1_nb(reqs, hist, i, n, now_ns)
    if reqs.generated[i] > g:
        reqs.placeholders[i] -= 1
        known = reqs.processed[i] + reqs.tok_inflight[i] - reqs.placeholders[i]
        cache_computed_nb(kv, reqs, p, r, i, known)
    return complete
