"""LightLLM scheduler as Vidur models it: whole-prompt prefill batches admitted by a
future-memory estimate, otherwise one decode token for every running request; every
max_waiting_iters decode steps a prefill batch gets a chance to jump in.

KV is accounted per token (block size 1): a new request takes its prompt, each decode step one
more token.
"""

from numba import njit
from vidur_fast.kernels.blocks import alloc_nb
from vidur_fast.kernels.codes import ReqStatus
from vidur_fast.kernels.dtypes import NO_ID
from vidur_fast.kernels.lifecycle import batch_add_nb, preempt_to_waiting_nb
from vidur_fast.kernels.queues import run_pop_last_nb, run_remove_at_nb, wq_pop_front_nb

# ---- future-memory estimate ----


@njit(cache=True, nogil=True, _nrt=False)
def _held_left_nb(reqs, i, admitted):
    """LightLLM's (tokens held, tokens still to generate) of request i; `admitted` says whether
    it already ran (else it is a candidate counted with its prompt plus the first token).

    Mutates: nothing.
    Returns: (held, left) with left clamped at >= 0.
    """
    if admitted:
        held = reqs.processed[i]
        done_dec = reqs.processed[i] - reqs.prompt[i]
        if done_dec < 0:
            done_dec = 0
        left = reqs.decode[i] - done_dec - 1
    else:
        held = reqs.prompt[i] + 1
        left = reqs.decode[i] - 2
    if left < 0:
        left = 0
    return held, left


@njit(cache=True, nogil=True, _nrt=False)
def _peak_need_nb(reps, reqs, r, s, cand):
    """Peak KV tokens if the running requests, the batch being formed and candidate `cand` all
    run to completion: with requests sorted by tokens left (descending),
    max_i left_i * (i + 1) + sum_{j <= i} held_j.

    Ties in `left` do not change the maximum (within a tie group the last index dominates), so
    for each request it suffices to sum over every request with at least as many tokens left:
    O(n^2) over at most batch_cap requests, no scratch arrays.
    Mutates: nothing.
    Returns: int tokens.
    """
    n_run = reps.run_n[r]
    n_bat = reps.bat_n[r, s]
    n = n_run + n_bat + 1
    best = 0
    for a in range(n):
        _, left_a = _member_nb(reps, reqs, r, s, cand, n_run, n_bat, a)
        count = 0
        held_sum = 0
        for b in range(n):
            held_b, left_b = _member_nb(reps, reqs, r, s, cand, n_run, n_bat, b)
            if left_b >= left_a:
                count += 1
                held_sum += held_b
        need = left_a * count + held_sum
        if need > best:
            best = need
    return best


@njit(cache=True, nogil=True, _nrt=False)
def _member_nb(reps, reqs, r, s, cand, n_run, n_bat, a):
    """Member a of the estimate's list: running requests, then the batch, then the candidate.

    Mutates: nothing.
    Returns: (held, left).
    """
    if a < n_run:
        return _held_left_nb(reqs, reps.run[r, a], True)
    if a < n_run + n_bat:
        return _held_left_nb(reqs, reps.bat_req[r, s, a - n_run], False)
    return _held_left_nb(reqs, cand, False)


# ---- batch formation ----


@njit(cache=True, nogil=True, _nrt=False)
def _prefill_batch_nb(reps, reqs, p, r, s, now_ns):
    """Admit waiting requests with their whole prompt while the token bound, the batch caps and
    the future-memory estimate allow.

    Mutates: reps, reqs.
    Returns: requests in the batch.
    """
    n_tok = 0
    while reps.wq_head[r] != NO_ID:
        i = reps.wq_head[r]
        nxt = reqs.prompt[i] - reqs.processed[i]
        if n_tok + nxt > p.max_tokens_in_batch:
            break
        if reps.alloc_reqs[r] >= p.batch_size_cap:
            break
        if reps.bat_n[r, s] >= p.batch_size_cap_per_stage:
            break
        if _peak_need_nb(reps, reqs, r, s, i) >= p.usable_blocks:
            break
        wq_pop_front_nb(reps, reqs, r)
        reqs.status[i] = ReqStatus.RUNNING
        alloc_nb(reps, reqs, r, i, reqs.prompt[i], now_ns)
        batch_add_nb(reps, r, s, i, nxt)
        n_tok += nxt
    return reps.bat_n[r, s]


@njit(cache=True, nogil=True, _nrt=False)
def _decode_batch_nb(reps, reqs, p, r, s, now_ns):
    """One token (and one KV token) for every running request, in running-list order.

    NOTE(fix): Vidur raises "OOM handling not implemented" when fewer tokens are free than
    requests run; here the latest running requests are preempted by recompute
    until the rest fit. The admission estimate normally keeps this from happening.
    Mutates: reps, reqs.
    Returns: requests in the batch.
    """
    while reps.run_n[r] > p.usable_blocks - reps.alloc_blocks[r]:
        victim = run_pop_last_nb(reps, r)
        preempt_to_waiting_nb(reps, reqs, r, victim, now_ns)
    while reps.run_n[r] > 0:
        i = run_remove_at_nb(reps, r, 0)
        alloc_nb(reps, reqs, r, i, 1, now_ns)
        batch_add_nb(reps, r, s, i, 1)
    return reps.bat_n[r, s]


@njit(cache=True, nogil=True, _nrt=False)
def schedule_lightllm_nb(reps, reqs, p, r, s, now_ns):
    """One LightLLM scheduling decision for replica r into batch slot s.

    Nothing running: a prefill batch (resets the waiting counter). Otherwise, once the counter
    reached p.max_waiting_iters, reset it and try a prefill batch; failing that, a decode batch
    of every running request (counter += 1).
    Mutates: reps (incl. lightllm_wait), reqs.
    Returns: requests in the batch.
    """
    if reps.run_n[r] == 0:
        n = _prefill_batch_nb(reps, reqs, p, r, s, now_ns)
        if n > 0:
            reps.lightllm_wait[r] = 0
        return n
    if reps.lightllm_wait[r] >= p.max_waiting_iters:
        reps.lightllm_wait[r] = 0
        n = _prefill_batch_nb(reps, reqs, p, r, s, now_ns)
        if n > 0:
            return n
    reps.lightllm_wait[r] += 1
    return _decode_batch_nb(reps, reqs, p, r, s, now_ns)
