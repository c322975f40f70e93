"""Per-replica waiting queues (linked through request rows) and ordered running lists."""

import numpy as np
from numba import njit
from vidur_fast.kernels.dtypes import NO_ID

# ---- waiting queue: singly linked list over Reqs.q_next ----


@njit(cache=True, nogil=True, _nrt=False)
def wq_push_back_nb(reps, reqs, r, i):
    """Append request i to replica r's waiting queue.

    Mutates: reps.wq_*, reqs.q_next.
    Returns: nothing.
    """
    reqs.q_next[i] = NO_ID
    if reps.wq_tail[r] == NO_ID:
        reps.wq_head[r] = i
    else:
        reqs.q_next[reps.wq_tail[r]] = i
    reps.wq_tail[r] = i
    reps.wq_len[r] += 1


@njit(cache=True, nogil=True, _nrt=False)
def wq_push_front_nb(reps, reqs, r, i):
    """Put request i at the head of replica r's waiting queue (preempted requests).

    Mutates: reps.wq_*, reqs.q_next.
    Returns: nothing.
    """
    reqs.q_next[i] = reps.wq_head[r]
    reps.wq_head[r] = i
    if reps.wq_tail[r] == NO_ID:
        reps.wq_tail[r] = i
    reps.wq_len[r] += 1


@njit(cache=True, nogil=True, _nrt=False)
def wq_pop_front_nb(reps, reqs, r):
    """Remove the head of replica r's waiting queue.

    Mutates: reps.wq_*, reqs.q_next.
    Returns: the request row, or NO_ID when empty.
    """
    i = reps.wq_head[r]
    if i == NO_ID:
        return NO_ID
    reps.wq_head[r] = reqs.q_next[i]
    if reps.wq_head[r] == NO_ID:
        reps.wq_tail[r] = NO_ID
    reqs.q_next[i] = NO_ID
    reps.wq_len[r] -= 1
    return i


@njit(cache=True, nogil=True, _nrt=False)
def wq_remove_after_nb(reps, reqs, r, prev):
    """Remove the request that follows prev in replica r's waiting queue (the head when prev
    is NO_ID).

    Mutates: reps.wq_*, reqs.q_next.
    Returns: the removed request row, or NO_ID when there is none.
    """
    if prev == NO_ID:
        return wq_pop_front_nb(reps, reqs, r)
    i = reqs.q_next[prev]
    if i == NO_ID:
        return NO_ID
    reqs.q_next[prev] = reqs.q_next[i]
    if reps.wq_tail[r] == i:
        reps.wq_tail[r] = prev
    reqs.q_next[i] = NO_ID
    reps.wq_len[r] -= 1
    return i


@njit(cache=True, nogil=True, _nrt=False)
def wq_remove_nb(reps, reqs, r, i):
    """Remove request i from replica r's waiting queue, wherever it is (O(queue length)).

    Mutates: reps.wq_*, reqs.q_next.
    Returns: False when i is not queued.
    """
    prev = np.int64(NO_ID)  # not a literal: wq_remove_after_nb is compiled once
    j = reps.wq_head[r]
    while j != NO_ID:
        if j == i:
            wq_remove_after_nb(reps, reqs, r, prev)
            return True
        prev = j
        j = reqs.q_next[j]
    return False


# ---- running list: dense ordered array per replica ----


@njit(cache=True, nogil=True, _nrt=False)
def run_append_nb(reps, r, i):
    """Append request i to replica r's running list.

    Mutates: reps.run, reps.run_n.
    Returns: False when the list is full (caller treats it as a broken invariant).
    """
    k = reps.run_n[r]
    if k >= reps.run.shape[1]:
        return False
    reps.run[r, k] = i
    reps.run_n[r] = k + 1
    return True


@njit(cache=True, nogil=True, _nrt=False)
def run_remove_at_nb(reps, r, k):
    """Remove position k from replica r's running list, keeping order.

    Mutates: reps.run, reps.run_n.
    Returns: the removed request row.
    """
    i = reps.run[r, k]
    n = reps.run_n[r]
    for j in range(k, n - 1):
        reps.run[r, j] = reps.run[r, j + 1]
    reps.run_n[r] = n - 1
    return i


@njit(cache=True, nogil=True, _nrt=False)
def run_pop_last_nb(reps, r):
    """Remove the last request of replica r's running list.

    Mutates: reps.run_n.
    Returns: the request row, or NO_ID when empty.
    """
    n = reps.run_n[r]
    if n == 0:
        return NO_ID
    reps.run_n[r] = n - 1
    return reps.run[r, n - 1]


@njit(cache=True, nogil=True, _nrt=False)
def run_sort_by_arrival_nb(reps, reqs, r):
    """Stable sort of replica r's running list by (arrival, row): insertion sort, since the
    list is almost sorted between steps.

    Mutates: reps.run.
    Returns: nothing.
    """
    n = reps.run_n[r]
    for k in range(1, n):
        i = reps.run[r, k]
        a = reqs.arrival_ns[i]
        j = k - 1
        while j >= 0 and reqs.arrival_ns[reps.run[r, j]] > a:
            reps.run[r, j + 1] = reps.run[r, j]
            j -= 1
        reps.run[r, j + 1] = i
