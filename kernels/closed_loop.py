"""Closed-loop arrivals: N clients, each sends its next request when its previous one ends.

Requests are released in index order: the first N go to clients 0..N-1 at their start times,
and every completion (or up-front rejection) releases the next unreleased request to the same
client at completion + think time. Released, not yet routed arrivals sit in a binary min-heap
on (arrival, request id), so think times of any distribution keep arrivals in time order.
An empty heap array (N = 0) means open loop: the loop then never calls these kernels.

Between the client and the engine sit the front ends (API servers: request parsing,
tokenization; one per replica that takes arrivals, kernels/front_end.py): request i occupies the
first free one for ingest_ns[i], in send order, so a burst of sends reaches the engine spread
out. The last token reaches the client respond_ns after the engine emits it,
and only then does the client send again.

vLLM's async scheduling (a request reaching the engine during step k joins step k+2) is the
engine's own behaviour (scheduler.async_scheduling, kernels/loop.py), the same for open-loop
and closed-loop arrivals; nothing here holds requests back.
"""

from typing import NamedTuple

import numpy as np
from numba import njit
from vidur_fast.kernels.dtypes import NEVER, NO_ID
from vidur_fast.kernels.front_end import take_server_nb


class ClosedLoop(NamedTuple):
    """Closed-loop release state (allocated in Python; heap_t.shape[0] == 0: open loop)."""

    heap_t: np.ndarray  # int64[N], arrival time of each pending arrival (heap order)
    heap_i: np.ndarray  # int64[N], request id of each pending arrival
    heap_n: np.ndarray  # int64[1], pending arrivals in the heap
    next_release: np.ndarray  # int64[1], lowest request id not yet released
    think_ns: np.ndarray  # int64[n], think time before request i (pre-drawn)
    client: np.ndarray  # int64[n], client of request i (NO_ID until released)
    stop_ns: np.ndarray  # int64[1], no request is released to arrive after this (NEVER: none)
    ingest_ns: np.ndarray  # int64[n], front-end service time of request i before the engine
    ingested: np.ndarray  # int8[n], 1 once request i passed the front end
    fe_free: np.ndarray  # int64[c], min-heap of the c front ends' free times
    respond_ns: np.ndarray  # int64[1], engine -> client latency of each streamed token


@njit(cache=True, nogil=True, _nrt=False)
def _less_nb(t_a, i_a, t_b, i_b):
    """Heap order: earlier arrival first, then lower request id.

    Mutates: nothing.
    Returns: bool.
    """
    return t_a < t_b or (t_a == t_b and i_a < i_b)


@njit(cache=True, nogil=True, _nrt=False)
def heap_push_nb(cl, t, i):
    """Insert pending arrival (t, i) into the heap.

    Mutates: cl.heap_t, cl.heap_i, cl.heap_n.
    Returns: False if the heap is full (more pending arrivals than clients), else True.
    """
    k = cl.heap_n[0]
    if k >= cl.heap_t.shape[0]:
        return False
    cl.heap_n[0] = k + 1
    while k > 0:
        parent = (k - 1) // 2
        if not _less_nb(t, i, cl.heap_t[parent], cl.heap_i[parent]):
            break
        cl.heap_t[k] = cl.heap_t[parent]
        cl.heap_i[k] = cl.heap_i[parent]
        k = parent
    cl.heap_t[k] = t
    cl.heap_i[k] = i
    return True


@njit(cache=True, nogil=True, _nrt=False)
def heap_peek_nb(cl):
    """Earliest pending arrival.

    Mutates: nothing.
    Returns: (request id, arrival ns), or (NO_ID, NEVER) when none is pending.
    """
    if cl.heap_n[0] == 0:
        return NO_ID, NEVER
    return cl.heap_i[0], cl.heap_t[0]


@njit(cache=True, nogil=True, _nrt=False)
def heap_pop_nb(cl):
    """Remove the earliest pending arrival (the heap must not be empty).

    Mutates: cl.heap_t, cl.heap_i, cl.heap_n.
    Returns: nothing.
    """
    n = cl.heap_n[0] - 1
    cl.heap_n[0] = n
    if n == 0:
        return
    t = cl.heap_t[n]
    i = cl.heap_i[n]
    k = 0
    while True:
        c = 2 * k + 1
        if c >= n:
            break
        if c + 1 < n and _less_nb(cl.heap_t[c + 1], cl.heap_i[c + 1], cl.heap_t[c], cl.heap_i[c]):
            c += 1
        if not _less_nb(cl.heap_t[c], cl.heap_i[c], t, i):
            break
        cl.heap_t[k] = cl.heap_t[c]
        cl.heap_i[k] = cl.heap_i[c]
        k = c
    cl.heap_t[k] = t
    cl.heap_i[k] = i


@njit(cache=True, nogil=True, _nrt=False)
def release_next_nb(cl, reqs, done_req, now_ns):
    """Request done_req ended at now: its client sends the next unreleased request after its
    think time (unless every request is released or it would arrive after stop_ns).

    Mutates: cl (heap, next_release, client), reqs.arrival_ns.
    Returns: the released request id, or NO_ID.
    """
    j = cl.next_release[0]
    if j >= reqs.arrival_ns.shape[0]:
        return NO_ID
    t = now_ns + cl.respond_ns[0] + cl.think_ns[j]
    if t > cl.stop_ns[0]:
        return NO_ID
    if not heap_push_nb(cl, t, j):
        return NO_ID
    cl.next_release[0] = j + 1
    cl.client[j] = cl.client[done_req]
    reqs.arrival_ns[j] = t
    return j


@njit(cache=True, nogil=True, _nrt=False)
def front_end_nb(cl, i, t_ns):
    """Request i, popped from the heap at t, passes the front ends: the first time it
    queues there (FIFO in send order, since pops come in time order) and is pushed back at the
    time it reaches the engine; the second time (or with no ingest time) it is at the engine.

    Mutates: cl (heap, ingested, fe_free).
    Returns: True when request i is at the engine now (route it), False when deferred.
    """
    if cl.ingested[i] != 0 or cl.ingest_ns[i] == 0:
        return True
    t_engine = take_server_nb(cl.fe_free, t_ns, cl.ingest_ns[i])
    cl.ingested[i] = 1
    heap_push_nb(cl, t_engine, i)
    return False
