"""vLLM v1 scheduler (token budget, running first, recompute preemption from the tail).

NOTE(vllm): mirrors vllm/v1/core/sched/scheduler.py Scheduler.schedule (0.32): one budget of
max_num_batched_tokens shared by decodes and prefill chunks; RUNNING requests in admission
order, then WAITING requests FCFS only when nothing was preempted this step, stopping at the
first that does not fit; block 0 is reserved (usable blocks = num_blocks - 1 is applied by the
planner).

Blocks come from kv.py, which hides whether prefix caching is on (counted blocks without it,
the paged pool with block ids, LRU eviction and hits with it).

Computed tokens (vLLM's num_computed_tokens) are reqs.processed (applied outputs) plus
reqs.tok_inflight (scheduled in batches not yet applied). Synchronously the previous batch is
always applied before the next is formed, so tok_inflight is 0 at every scheduling call.

NOTE(vllm): async scheduling (AsyncScheduler, p.async_scheduling) forms step N+1 while step N
runs, before its outputs are applied. A step that completes a request's sequence adds an output
placeholder (reqs.placeholders) that counts as a known token, so the request's next decode can
be scheduled at once; a request whose in-flight step already samples its last token is not
scheduled again. Preempting a request whose step is in flight marks those tokens stale
(reqs.tok_stale): their output is still delivered when the step ends, and the request is skipped
(not a stop) by the waiting pass until then. vLLM zeroes the placeholders at preemption; here
they are kept until the stale output drains, so that its ending step knows whether it samples
(nothing else reads them meanwhile). Outputs are applied by apply_output_v1_nb (through
sched.apply_output_nb).
"""

import numpy as np
from numba import njit
from vidur_fast.kernels.blocks import blocks_for_nb
from vidur_fast.kernels.codes import ReqStatus
from vidur_fast.kernels.dtypes import NO_ID
from vidur_fast.kernels.kv import (
    admit_blocks_nb,
    cache_computed_nb,
    free_blocks_nb,
    free_preempted_nb,
    grow_blocks_nb,
    lookup_cached_nb,
)
from vidur_fast.kernels.lifecycle import advance_v1_nb, apply_v1_output_nb, batch_add_nb
from vidur_fast.kernels.queues import (
    run_append_nb,
    run_pop_last_nb,
    run_remove_at_nb,
    wq_push_front_nb,
    wq_remove_after_nb,
)
from vidur_fast.kernels.state import (
    H_BLOCKS,
    H_GENERATED,
    H_ORIG_DECODE,
    H_PLACEHOLDERS,
    H_PROCESSED,
    H_PROMPT,
    H_TOK_INFLIGHT,
    H_TOK_STALE,
)


@njit(cache=True, nogil=True, _nrt=False)
def computed_tokens_nb(reqs, i):
    """vLLM's num_computed_tokens of request i: applied plus scheduled in flight.

    Mutates: nothing.
    Returns: int.
    """
    return reqs.hot[i, H_PROCESSED] + reqs.hot[i, H_TOK_INFLIGHT]


@njit(cache=True, nogil=True, _nrt=False)
def _cap_tokens_nb(reqs, reps, p, r, comp, n, budget, running):
    """Apply the per-step caps to n new tokens of a request with comp computed tokens.

    Mutates: nothing.
    Returns: capped token count.
    """
    # NOTE(vllm): long_prefill_token_threshold only applies when more than one request is
    # running or waiting.
    if p.long_prefill_token_threshold > 0 and reps.run_n[r] + reps.wq_len[r] > 1:
        if n > p.long_prefill_token_threshold:
            n = p.long_prefill_token_threshold
    if n > budget:
        n = budget
    # NOTE(vllm): only running requests are capped at max_model_len - 1 - computed.
    if running and p.max_model_len > 0:
        room = p.max_model_len - comp - 1
        if n > room:
            n = room
    return n


@njit(cache=True, nogil=True, _nrt=False)
def _preempt_v1_nb(reps, kv, reqs, p, r, i, now_ns):
    """Recompute preemption: free all blocks, computed tokens to 0, front of the queue.

    NOTE(vllm): Scheduler._preempt_request: tokens of a step in flight become stale output.
    Mutates: reps, kv, reqs.
    Returns: nothing.
    """
    free_preempted_nb(reps, kv, reqs, p, r, i, now_ns)
    reqs.hot[i, H_TOK_STALE] += reqs.hot[i, H_TOK_INFLIGHT]
    reqs.hot[i, H_TOK_INFLIGHT] = 0
    reqs.hot[i, H_PROCESSED] = 0
    reqs.prefill_done[i] = 0
    reqs.restarts[i] += 1
    reqs.status[i] = ReqStatus.PREEMPTED
    wq_push_front_nb(reps, reqs, r, i)
    reps.preemptions[r] += 1


@njit(cache=True, nogil=True, _nrt=False)
def _scheduled_nb(reps, reqs, p, r, s, i, comp, n):
    """Put n tokens of request i (comp computed tokens before) into the batch in slot s.

    NOTE(vllm): Scheduler._update_after_schedule advances num_computed_tokens at once;
    AsyncScheduler._update_after_schedule adds an output placeholder when the step completes
    the known sequence (placeholders included), i.e. when it samples a token.
    Mutates: reps.bat_*, reqs.tok_inflight, reqs.placeholders.
    Returns: nothing.
    """
    batch_add_nb(reps, r, s, i, n)
    reqs.hot[i, H_TOK_INFLIGHT] += n
    if p.async_scheduling:
        if (
            comp + n
            >= reqs.hot[i, H_PROMPT] + reqs.hot[i, H_GENERATED] + reqs.hot[i, H_PLACEHOLDERS]
        ):
            reqs.hot[i, H_PLACEHOLDERS] += 1


@njit(cache=True, nogil=True, _nrt=False)
def _admit_nb(reps, kv, reqs, p, r, prev, i, hit_blocks, need, n, now_ns):
    """Move waiting request i (queued after prev; NO_ID = the head) to running with
    hit_blocks cached blocks and `need` new ones.

    Mutates: reps (queues, blocks), kv, reqs.
    Returns: nothing.
    """
    seq = reqs.hot[i, H_PROMPT] + reqs.hot[i, H_GENERATED]
    hit = hit_blocks * p.block_size
    wq_remove_after_nb(reps, reqs, r, prev)
    if reqs.status[i] == ReqStatus.WAITING:
        # NOTE(vllm): num_cached_tokens is the hit of the first admission only.
        reqs.cached_tokens[i] = hit
    reqs.status[i] = ReqStatus.RUNNING
    reqs.hot[i, H_PROCESSED] = hit
    run_append_nb(reps, r, i)
    upto = hit + n
    admit_blocks_nb(
        reps, kv, reqs, p, r, i, hit_blocks, need, upto if upto < seq else seq, seq, now_ns
    )


@njit(cache=True, nogil=True, _nrt=False, inline="always")
def schedule_vllm_v1_nb(reps, kv, reqs, p, r, s, now_ns):
    """One vLLM v1 scheduling step on replica r into batch slot s.

    Mutates: reps, kv, reqs.
    Returns: requests in the batch.
    """
    budget = p.max_num_batched_tokens
    preempted = False
    n_prefill = 0  # requests of this batch still in their prefill (max_partial_prefills)
    k = 0
    while k < reps.run_n[r] and budget > 0:
        i = reps.run[r, k]
        comp = computed_tokens_nb(reqs, i)
        seq = reqs.hot[i, H_PROMPT] + reqs.hot[i, H_GENERATED]
        ph = reqs.hot[i, H_PLACEHOLDERS]
        # NOTE(vllm): AsyncScheduler: a request whose step in flight samples its last token is
        # not scheduled again (comp + 1 - (ph - 1) tokens are known once that step ends).
        if ph > 0 and comp + 2 - ph >= reqs.hot[i, H_PROMPT] + reqs.hot[i, H_ORIG_DECODE]:
            k += 1
            continue
        if comp < reqs.hot[i, H_PROMPT]:
            n_prefill += 1
        # NOTE(vllm): placeholders count as known tokens: a decode can follow a step in flight.
        # (np.bool_: not a literal, so that Numba compiles one _cap_tokens_nb for both calls)
        n = _cap_tokens_nb(reqs, reps, p, r, comp, seq + ph - comp, budget, np.bool_(True))
        if n <= 0:
            k += 1
            continue
        need = blocks_for_nb(p, comp + n) - reqs.hot[i, H_BLOCKS]
        scheduled = True
        # NOTE(vllm): on allocation failure preempt the last running request (the most recently
        # admitted) and retry; if that is the request itself, the running pass ends.
        while need > free_blocks_nb(reps, kv, p, r):
            victim = run_pop_last_nb(reps, r)
            _preempt_v1_nb(reps, kv, reqs, p, r, victim, now_ns)
            preempted = True
            if victim == i:
                scheduled = False
                break
        if not scheduled:
            break
        upto = comp + n
        if need > 0:
            grow_blocks_nb(reps, kv, reqs, p, r, i, need, upto if upto < seq else seq, now_ns)
        else:
            cache_computed_nb(kv, reqs, p, r, i, upto if upto < seq else seq)
        _scheduled_nb(reps, reqs, p, r, s, i, comp, n)
        budget -= n
        k += 1
    # NOTE(vllm): no admissions in a step that preempted.
    if preempted:
        return reps.bat_n[r, s]
    prev = np.int64(NO_ID)  # the waiting request before i (NO_ID: i is the head)
    i = reps.wq_head[r]
    while i != NO_ID and budget > 0 and reps.run_n[r] < p.max_num_seqs:
        # a block list must be free (prefix caching; with prefill/decode pools transfers hold
        # lists too, else every running request has one and a list is free here)
        if p.enable_prefix_caching and kv.slot_top[r] == 0:
            break
        if p.max_num_partial_prefills > 0 and n_prefill >= p.max_num_partial_prefills:
            break
        if reqs.hot[i, H_TOK_STALE] > 0:
            # NOTE(vllm): a request whose stale output is still in flight is skipped, not a
            # stop: resuming it now could sample a position that output will deliver.
            prev = i
            i = reqs.q_next[i]
            continue
        seq = reqs.hot[i, H_PROMPT] + reqs.hot[i, H_GENERATED]
        hit_blocks, evictable = lookup_cached_nb(kv, reqs, p, r, i, seq)
        hit = hit_blocks * p.block_size
        n = _cap_tokens_nb(reqs, reps, p, r, hit, seq - hit, budget, np.bool_(False))
        if n <= 0:
            break
        free = free_blocks_nb(reps, kv, p, r)
        # NOTE(vllm): cached hit blocks nobody references sit in the free queue; taking them
        # costs a free block each (get_num_blocks_to_allocate counts them).
        if p.reserve_full_sequence:
            # NOTE(vllm): scheduler_reserve_full_isl gate: the whole current sequence must fit
            # now, although only the scheduled chunk is allocated.
            if blocks_for_nb(p, seq) - hit_blocks + evictable > free:
                break
        need = blocks_for_nb(p, hit + n) - hit_blocks
        if need + evictable > free:
            break
        _admit_nb(reps, kv, reqs, p, r, prev, i, hit_blocks, need, n, now_ns)
        _scheduled_nb(reps, reqs, p, r, s, i, hit, n)
        budget -= n
        n_prefill += 1
        i = reps.wq_head[r] if prev == NO_ID else reqs.q_next[prev]
    return reps.bat_n[r, s]


# ---- hooks for the loop (kernels/sched.py) ----


@njit(cache=True, nogil=True, _nrt=False)
def is_decode_v1_nb(reqs, i, n):
    """Whether request i's n tokens in the batch just formed count as decode (timing).

    Mutates: nothing.
    Returns: bool.
    """
    # with async scheduling the sampled token may still be in flight: this step's own
    # placeholder plus one from the step before
    return n == 1 and (reqs.prefill_done[i] == 1 or reqs.hot[i, H_PLACEHOLDERS] > 1)


@njit(cache=True, nogil=True, _nrt=False)
def kv_before_v1_nb(reqs, i, n):
    """Tokens of request i computed before its n tokens in the batch just formed: the v1
    scheduler counts the batch's tokens in flight at once.

    Mutates: nothing.
    Returns: int.
    """
    return reqs.hot[i, H_PROCESSED] + reqs.hot[i, H_TOK_INFLIGHT] - n


@njit(cache=True, nogil=True, _nrt=False, inline="always")
def apply_output_v1_nb(kv, reqs, p, r, i, n, now_ns):
    """Apply request i's n tokens of a finished step.

    Mutates: reqs, kv (async: cached blocks).
    Returns: (True when the request has produced all its output tokens, the token's gap for
    the TBT histogram or lifecycle.NO_GAP).
    """
    if p.async_scheduling:
        return apply_v1_output_nb(kv, reqs, p, r, i, n, now_ns)
    reqs.hot[i, H_TOK_INFLIGHT] -= n
    return advance_v1_nb(reqs, i, n, now_ns)


@njit(cache=True, nogil=True, _nrt=False)
def leave_running_v1_nb(reps, r, i):
    """A completed request leaves replica r's running list (v1 keeps running requests listed
    while their steps are in flight).

    Mutates: reps.run, reps.run_n.
    Returns: nothing.
    """
    for j in range(reps.run_n[r]):
        if reps.run[r, j] == i:
            run_remove_at_nb(reps, r, j)
            break
