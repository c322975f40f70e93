"""Vidur's replica schedulers: vllm (v0), sarathi, orca, faster_transformer,
lightllm. Each fills batch slot s of replica r and returns the number of requests in it.
"""

from numba import njit
from vidur_fast.kernels.blocks import (
    alloc_nb,
    allocate_request_nb,
    can_allocate_request_nb,
)
from vidur_fast.kernels.codes import ReqStatus
from vidur_fast.kernels.dtypes import NO_ID
from vidur_fast.kernels.lifecycle import batch_add_nb, preempt_to_waiting_nb
from vidur_fast.kernels.queues import (
    run_append_nb,
    run_pop_last_nb,
    run_remove_at_nb,
    run_sort_by_arrival_nb,
    wq_pop_front_nb,
)


@njit(cache=True, nogil=True, _nrt=False)
def _next_tokens_nb(reqs, i):
    """Vidur's default next-token count: 1 when prefilled, else the whole remaining prompt.

    Mutates: nothing.
    Returns: int.
    """
    if reqs.prefill_done[i]:
        return 1
    return reqs.prompt[i] - reqs.processed[i]


@njit(cache=True, nogil=True, _nrt=False, inline="always")
def _schedule_decode_nb(reps, reqs, p, r, s, i, now_ns):
    """Vidur's decode admission with the victim loop: while request i cannot get a block,
    restart the latest running request; with none left, restart i itself.

    Mutates: reps, reqs.
    Returns: True when i joined the batch.
    """
    while not can_allocate_request_nb(reps, reqs, p, r, i):
        victim = run_pop_last_nb(reps, r)
        if victim == NO_ID:
            preempt_to_waiting_nb(reps, reqs, r, i, now_ns)
            return False
        preempt_to_waiting_nb(reps, reqs, r, victim, now_ns)
    allocate_request_nb(reps, reqs, p, r, i, now_ns)
    batch_add_nb(reps, r, s, i, 1)
    return True


@njit(cache=True, nogil=True, _nrt=False, inline="always")
def schedule_sarathi_nb(reps, reqs, p, r, s, now_ns):
    """Sarathi-Serve: decodes first, then running partial prefills, then new requests, all
    within a chunk of p.chunk_size tokens (decodes consume the budget but are never cut).

    Mutates: reps, reqs.
    Returns: requests in the batch.
    """
    budget_used = 0
    n_pref = 0
    # 1. running list in its current order; partial prefills are set aside in a scratch
    #    region at the tail of the batch slot (filled from the end).
    cap = reps.bat_req.shape[2]
    while reps.run_n[r] > 0 and reps.bat_n[r, s] < p.batch_size_cap_per_stage:
        i = run_remove_at_nb(reps, r, 0)
        if reqs.prefill_done[i] == 0:
            n_pref += 1
            reps.bat_req[r, s, cap - n_pref] = i
            continue
        if _schedule_decode_nb(reps, reqs, p, r, s, i, now_ns):
            budget_used += 1
    # 2. partial prefills (their prompt blocks are already reserved)
    n_skipped = 0
    for k in range(n_pref):
        i = reps.bat_req[r, s, cap - 1 - k]
        nxt = reqs.prompt[i] - reqs.processed[i]
        left = p.chunk_size - budget_used
        if left < nxt:
            nxt = left
        if nxt <= 0:
            # put back in front of the running list (order restored by the sort below)
            reps.bat_tok[r, s, cap - 1 - n_skipped] = i
            n_skipped += 1
            continue
        batch_add_nb(reps, r, s, i, nxt)
        budget_used += nxt
    # 3. skipped prefills back to the front, then a stable sort by arrival
    if n_skipped > 0:
        n = reps.run_n[r]
        for j in range(n - 1, -1, -1):
            reps.run[r, j + n_skipped] = reps.run[r, j]
        for k in range(n_skipped):
            reps.run[r, k] = reps.bat_tok[r, s, cap - 1 - k]
        reps.run_n[r] = n + n_skipped
    run_sort_by_arrival_nb(reps, reqs, r)
    # 4. new requests from the waiting queue
    while reps.wq_head[r] != NO_ID:
        if reps.alloc_reqs[r] >= p.batch_size_cap:
            break
        if reps.bat_n[r, s] >= p.batch_size_cap_per_stage:
            break
        i = reps.wq_head[r]
        if not can_allocate_request_nb(reps, reqs, p, r, i):
            break
        nxt = reqs.prompt[i] - reqs.processed[i]
        left = p.chunk_size - budget_used
        if left < nxt:
            nxt = left
        if nxt <= 0:
            break
        wq_pop_front_nb(reps, reqs, r)
        reqs.status[i] = ReqStatus.RUNNING
        allocate_request_nb(reps, reqs, p, r, i, now_ns)
        batch_add_nb(reps, r, s, i, nxt)
        budget_used += nxt
    return reps.bat_n[r, s]


@njit(cache=True, nogil=True, _nrt=False)
def schedule_vllm_nb(reps, reqs, p, r, s, now_ns):
    """vLLM v0 as Vidur models it: a prefill-only batch of whole prompts when any waiting
    request fits (padded tokens <= max_tokens_in_batch), else one decode token per running
    request with recompute preemption.

    Mutates: reps, reqs.
    Returns: requests in the batch.
    """
    max_len = 0
    while reps.wq_head[r] != NO_ID:
        i = reps.wq_head[r]
        if not can_allocate_request_nb(reps, reqs, p, r, i):
            break
        nxt = reqs.prompt[i] - reqs.processed[i]
        m = max_len if max_len > nxt else nxt
        if (reps.bat_n[r, s] + 1) * m > p.max_tokens_in_batch:
            # a restart can grow a prompt past the bound: it then runs alone instead of never
            if reps.bat_n[r, s] > 0 or reqs.restarts[i] == 0:
                break
        if reps.alloc_reqs[r] >= p.batch_size_cap:
            break
        if reps.bat_n[r, s] >= p.batch_size_cap_per_stage:
            break
        wq_pop_front_nb(reps, reqs, r)
        reqs.status[i] = ReqStatus.RUNNING
        allocate_request_nb(reps, reqs, p, r, i, now_ns)
        batch_add_nb(reps, r, s, i, nxt)
        max_len = m
    if reps.bat_n[r, s] > 0:
        return reps.bat_n[r, s]
    run_sort_by_arrival_nb(reps, reqs, r)
    while reps.run_n[r] > 0 and reps.bat_n[r, s] < p.batch_size_cap_per_stage:
        i = run_remove_at_nb(reps, r, 0)
        _schedule_decode_nb(reps, reqs, p, r, s, i, now_ns)
    return reps.bat_n[r, s]


@njit(cache=True, nogil=True, _nrt=False)
def _admit_reserving_nb(reps, reqs, p, r, s, now_ns):
    """Admit waiting requests with their whole prompt while the batch has room and a
    worst-case reservation of max_blocks_per_seq blocks fits (Orca, FasterTransformer).

    Mutates: reps, reqs.
    Returns: requests in the batch.
    """
    while reps.wq_head[r] != NO_ID and reps.bat_n[r, s] < p.planned_batch_size:
        if p.usable_blocks - reps.alloc_blocks[r] < p.max_blocks_per_seq:
            break
        i = wq_pop_front_nb(reps, reqs, r)
        reqs.status[i] = ReqStatus.RUNNING
        alloc_nb(reps, reqs, r, i, p.max_blocks_per_seq, now_ns)
        batch_add_nb(reps, r, s, i, _next_tokens_nb(reqs, i))
    return reps.bat_n[r, s]


@njit(cache=True, nogil=True, _nrt=False)
def schedule_orca_nb(reps, reqs, p, r, s, now_ns):
    """Orca: every running request (one token each), then new requests with their whole
    prompt, each reserving max_blocks_per_seq blocks (no preemption).

    Mutates: reps, reqs.
    Returns: requests in the batch.
    """
    while reps.run_n[r] > 0 and reps.bat_n[r, s] < p.planned_batch_size:
        i = run_remove_at_nb(reps, r, 0)
        batch_add_nb(reps, r, s, i, _next_tokens_nb(reqs, i))
    return _admit_reserving_nb(reps, reqs, p, r, s, now_ns)


@njit(cache=True, nogil=True, _nrt=False)
def schedule_faster_transformer_nb(reps, reqs, p, r, s, now_ns):
    """FasterTransformer static batching: continue the oldest unfinished batch (its members
    sit contiguously in the running list under one group id); only when none is left, form a
    new batch of whole prompts reserving max_blocks_per_seq each.

    Mutates: reps, reqs.
    Returns: requests in the batch.
    """
    if reps.run_n[r] > 0:
        g = reqs.group[reps.run[r, 0]]
        while reps.run_n[r] > 0 and reqs.group[reps.run[r, 0]] == g:
            i = run_remove_at_nb(reps, r, 0)
            batch_add_nb(reps, r, s, i, _next_tokens_nb(reqs, i))
        return reps.bat_n[r, s]
    return _admit_reserving_nb(reps, reqs, p, r, s, now_ns)


@njit(cache=True, nogil=True, _nrt=False)
def requeue_after_batch_legacy_nb(reps, reqs, r, i, group_id):
    """Vidur's on_batch_end for an unfinished request: back to the end of the running list.

    Mutates: reps.run, reqs.group.
    Returns: False if the running list overflowed (broken invariant).
    """
    reqs.group[i] = group_id
    return run_append_nb(reps, r, i)


# ---- hooks for the loop (kernels/sched.py), shared with LightLLM ----


@njit(cache=True, nogil=True, _nrt=False)
def is_decode_legacy_nb(reqs, i):
    """Whether request i's tokens in the batch just formed count as decode (timing).

    Mutates: nothing.
    Returns: bool.
    """
    return reqs.prefill_done[i] == 1
