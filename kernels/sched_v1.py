"""vLLM v1 scheduler (token budget, running first, recompute preemption from the tail).

NOTE(vllm): mirrors vllm/v1/core/sched/scheduler.py Scheduler.schedule (0.32): one budget of
max_num_batched_tokens shared by decodes and prefill chunks; RUNNING requests in admission
order, then WAITING requests FCFS only when nothing was preempted this step, stopping at the
first that does not fit; block 0 is reserved (usable blocks = num_blocks - 1 is applied by the
planner).
"""

from numba import njit
from vidur_fast.kernels.blocks import _ceil_div_nb, alloc_nb, release_nb
from vidur_fast.kernels.dtypes import NO_ID, ReqStatus
from vidur_fast.kernels.lifecycle import batch_add_nb
from vidur_fast.kernels.queues import (
    run_append_nb,
    run_pop_last_nb,
    wq_pop_front_nb,
    wq_push_front_nb,
)


@njit(cache=True, nogil=True, _nrt=False)
def _cap_tokens_nb(reqs, reps, p, r, i, n, budget):
    """Apply the per-step caps to n new tokens of request i.

    Mutates: nothing.
    Returns: capped token count.
    """
    # NOTE(vllm): long_prefill_token_threshold only applies when more than one request is
    # running or waiting.
    if p.long_prefill_threshold > 0 and reps.run_n[r] + reps.wq_len[r] > 1:
        if n > p.long_prefill_threshold:
            n = p.long_prefill_threshold
    if n > budget:
        n = budget
    room = p.max_model_len - reqs.processed[i] - 1
    if p.max_model_len > 0 and n > room:
        n = room
    return n


@njit(cache=True, nogil=True, _nrt=False)
def _preempt_v1_nb(reps, reqs, r, i, now_ns):
    """Recompute preemption: free all blocks, computed tokens to 0, front of the queue.

    Mutates: reps, reqs.
    Returns: nothing.
    """
    release_nb(reps, reqs, r, i, now_ns)
    reqs.processed[i] = 0
    reqs.prefill_done[i] = 0
    reqs.restarts[i] += 1
    reqs.status[i] = ReqStatus.PREEMPTED
    wq_push_front_nb(reps, reqs, r, i)
    reps.preemptions[r] += 1


@njit(cache=True, nogil=True, _nrt=False)
def schedule_vllm_v1_nb(reps, reqs, p, r, s, now_ns):
    """One vLLM v1 scheduling step on replica r into batch slot s.

    Mutates: reps, reqs.
    Returns: requests in the batch.
    """
    budget = p.chunk_size
    preempted = False
    n_prefill = 0  # requests of this batch still in their prefill (max_partial_prefills)
    k = 0
    while k < reps.run_n[r] and budget > 0:
        i = reps.run[r, k]
        seq = reqs.prompt[i] + reqs.generated[i]
        if reqs.processed[i] < reqs.prompt[i]:
            n_prefill += 1
        n = _cap_tokens_nb(reqs, reps, p, r, i, seq - reqs.processed[i], budget)
        if n <= 0:
            k += 1
            continue
        need = _ceil_div_nb(reqs.processed[i] + n, p.block_size) - reqs.blocks[i]
        scheduled = True
        while need > p.num_blocks - reps.alloc_blocks[r]:
            victim = run_pop_last_nb(reps, r)
            _preempt_v1_nb(reps, reqs, r, victim, now_ns)
            preempted = True
            if victim == i:
                scheduled = False
                break
        if not scheduled:
            break
        alloc_nb(reps, reqs, r, i, need, now_ns)
        batch_add_nb(reps, r, s, i, n)
        budget -= n
        k += 1
    if preempted:
        return reps.bat_n[r, s]
    while reps.wq_head[r] != NO_ID and budget > 0 and reps.run_n[r] < p.batch_cap:
        if p.max_partial_prefills > 0 and n_prefill >= p.max_partial_prefills:
            break
        i = reps.wq_head[r]
        hit = 0  # prefix caching is applied by the block-pool variant
        seq = reqs.prompt[i] + reqs.generated[i]
        n = _cap_tokens_nb(reqs, reps, p, r, i, seq - hit, budget)
        if n <= 0:
            break
        free = p.num_blocks - reps.alloc_blocks[r]
        if p.reserve_full_seq:
            # NOTE(vllm): scheduler_reserve_full_isl gate: the whole current sequence must fit
            # now, although only the scheduled chunk is allocated.
            if _ceil_div_nb(seq, p.block_size) > free:
                break
        need = _ceil_div_nb(hit + n, p.block_size)
        if need > free:
            break
        wq_pop_front_nb(reps, reqs, r)
        reqs.status[i] = ReqStatus.RUNNING
        reqs.processed[i] = hit
        run_append_nb(reps, r, i)
        alloc_nb(reps, reqs, r, i, need, now_ns)
        batch_add_nb(reps, r, s, i, n)
        budget -= n
        n_prefill += 1
    return reps.bat_n[r, s]
