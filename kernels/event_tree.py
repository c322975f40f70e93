"""Tournament tree over per-replica next-event times: earliest replica in O(1), updates in
O(log R).

Layout (P = replicas rounded up to a power of two, at least 1):
    key[r]   next-event time of replica r (NEVER for padding leaves r >= R)
    node[i]  for internal node i in 1..P-1: the replica winning subtree i (heap numbering:
             children 2i and 2i+1; a child c >= P is the leaf of replica c - P)
Ties: the left subtree holds the lower replica ids and wins equal times, so the root is the
lowest id among the replicas with the earliest time (the same order as a linear scan).
"""

from numba import njit


def tree_size(n_replicas: int) -> int:
    """Number of leaves P for n_replicas (the smallest power of two >= n_replicas)."""
    p = 1
    while p < n_replicas:
        p *= 2
    return p


@njit(cache=True, nogil=True, _nrt=False)
def _winner_of_nb(node, p, c):
    """Replica winning heap node c (a leaf when c >= p).

    Mutates: nothing.
    Returns: replica id.
    """
    if c >= p:
        return c - p
    return node[c]


@njit(cache=True, nogil=True, _nrt=False)
def _replay_nb(key, node, i):
    """Recompute the winners from internal node i up to the root.

    Mutates: node.
    Returns: nothing.
    """
    p = key.shape[0]
    while i >= 1:
        a = _winner_of_nb(node, p, 2 * i)
        b = _winner_of_nb(node, p, 2 * i + 1)
        node[i] = a if key[a] <= key[b] else b
        i >>= 1


@njit(cache=True, nogil=True, _nrt=False)
def tree_set_nb(key, node, r, t):
    """Set replica r's next-event time to t.

    Mutates: key, node.
    Returns: nothing.
    """
    if key[r] == t:
        return
    key[r] = t
    _replay_nb(key, node, (key.shape[0] + r) >> 1)


@njit(cache=True, nogil=True, _nrt=False)
def tree_top_nb(key, node):
    """Replica with the earliest event (lowest id among equal times).

    Mutates: nothing.
    Returns: (replica, time); time is NEVER when no replica has an event.
    """
    r = node[1] if key.shape[0] > 1 else 0
    return r, key[r]


@njit(cache=True, nogil=True, _nrt=False)
def tree_build_nb(key, node):
    """Recompute every winner from key (padding leaves must hold NEVER).

    Mutates: node.
    Returns: nothing.
    """
    p = key.shape[0]
    for i in range(p - 1, 0, -1):
        a = _winner_of_nb(node, p, 2 * i)
        b = _winner_of_nb(node, p, 2 * i + 1)
        node[i] = a if key[a] <= key[b] else b
