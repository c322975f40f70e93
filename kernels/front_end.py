"""The API-server front ends between clients and the engine: one per replica that takes
arrivals, each serving one request at a time (request parsing, tokenization).

Requests are taken in arrival order by the first front end free: a FIFO with c servers, whose
free times sit in a binary min-heap (only the earliest matters, not which server it is). With
routing after the front end this stands for one API server per replica: equal service times
and balanced routing load the servers alike.
"""

import numpy as np
from numba import njit


@njit(cache=True, nogil=True, _nrt=False)
def take_server_nb(free, t, service):
    """A request ready at t takes the earliest free server for service.

    Mutates: free (a min-heap of server free times; its root becomes the new end, sifted down).
    Returns: when the request leaves the front end.
    """
    start = t if t > free[0] else free[0]
    end = start + service
    c = free.shape[0]
    k = 0
    while True:
        lo = 2 * k + 1
        if lo >= c:
            break
        m = lo
        if lo + 1 < c and free[lo + 1] < free[lo]:
            m = lo + 1
        if free[m] >= end:
            break
        free[k] = free[m]
        k = m
    free[k] = end
    return end


@njit(cache=True, nogil=True, _nrt=False)
def fifo_servers_nb(arrival_s, service_s, free, out):
    """Time each request (arrivals in time order) leaves a FIFO front end whose servers'
    free times are free (all zero at the start); arrivals that are not finite pass through
    unchanged.

    Mutates: free, out (the times, float64 like arrival_s).
    """
    for i in range(arrival_s.shape[0]):
        a = arrival_s[i]
        if not np.isfinite(a):
            out[i] = a
        else:
            out[i] = take_server_nb(free, a, service_s[i])
