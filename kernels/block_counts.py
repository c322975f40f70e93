"""The paged pool of a replica kept as counts while no block of it can be hit.

A block can be hit only under a hash some request looks up: a workload hash (shared prefixes)
or the private hashes of a request that was preempted (its re-admission looks them up). In a
run whose workload carries no hashes, a replica's blocks are therefore interchangeable until
its first preemption, and its free-block queue is fully described by two counts
(KvPool.nfree, KvPool.free_cached):

- freeing a request puts its cached blocks (the full ones it computed, req_cached) at the tail
  and its uncached ones (the partial last block, blocks not yet computed) at the head
  (block_pool.free_list_blocks_nb), and nothing else moves blocks in or out of the queue while
  nothing is hit; so the queue is always the uncached free blocks, then the cached ones;
- allocation pops from the head: uncached blocks first, then cached ones, each an eviction.

So an allocation or a free costs a few counter updates instead of a visit to every block's
record (docs/performance.md). The counts give every decision and counter the paged pool gives
(free blocks, evictions, used blocks; lookups find nothing). At the replica's first preemption
the pool is laid out block by block (materialize_nb), as the paged pool would hold it up to
the block ids, which no output shows, and the replica goes on with the paged pool.
"""

from numba import njit
from vidur_fast.kernels.codes import BLK_DUP, BLK_REF, BLK_SLOT, BLK_UNINDEXED
from vidur_fast.kernels.dtypes import NO_HASH, NO_ID

# the hash a counted cached block gets when its replica is laid out: any value but NO_HASH
# marks it cached (it is evicted, and counted, when reused); unindexed, so no lookup finds it
COUNTED_HASH = 1


@njit(cache=True, nogil=True, _nrt=False, inline="always")
def counted_pop_nb(kv, r, n):
    """Take n blocks from the head of counted replica r's free queue (the caller checked
    nfree): uncached ones first, then cached ones, each counted as an eviction.

    Mutates: kv.nfree, kv.free_cached, kv.evictions.
    Returns: nothing.
    """
    uncached = kv.nfree[r] - kv.free_cached[r]
    if n > uncached:
        evicted = n - uncached
        kv.free_cached[r] -= evicted
        kv.evictions[r] += evicted
    kv.nfree[r] -= n


@njit(cache=True, nogil=True, _nrt=False, inline="always")
def counted_free_nb(kv, r, n, cached):
    """Return n blocks of a request to counted replica r's free queue, the first `cached` of
    them cached (tail) and the rest uncached (head).

    Mutates: kv.nfree, kv.free_cached.
    Returns: nothing.
    """
    kv.nfree[r] += n
    kv.free_cached[r] += cached


@njit(cache=True, nogil=True, _nrt=False)
def _lay_out_request_nb(kv, reqs, r, i, b):
    """Give request i's blocks the ids from b on, in its list (referenced once, not yet marked
    cached).

    Mutates: kv (blk, hash, lists).
    Returns: the next free id.
    """
    s = kv.req_slot[i]
    for j in range(reqs.blocks[i]):
        kv.blk[r, b, BLK_REF] = 1
        kv.blk[r, b, BLK_DUP] = NO_ID
        kv.blk[r, b, BLK_SLOT] = NO_ID
        kv.hash[r, b] = NO_HASH
        kv.lists[r, s, j] = b
        b += 1
    return b


@njit(cache=True, nogil=True, _nrt=False)
def materialize_nb(reps, kv, reqs, r, victim):
    """Lay counted replica r's pool out block by block, as the paged pool would hold it: the
    blocks of each running request and of `victim` (a request being preempted, already off
    the running list), then the free queue: the uncached free blocks, then the cached ones
    (unindexed, under COUNTED_HASH). Block ids are given in that order. From then on r uses
    the paged pool.

    Mutates: kv (blk, hash, lists, fring, fhead, ftail, memo_req, counted).
    Returns: nothing.
    """
    owned = kv.nfree[r] + reqs.blocks[victim]
    for k in range(reps.run_n[r]):
        if reps.run[r, k] != victim:
            owned += reqs.blocks[reps.run[r, k]]
    if owned > kv.blk.shape[1]:
        raise ValueError("counted block pool: running requests hold more blocks than it has")
    mask = kv.fring.shape[1] - 1
    b = _lay_out_request_nb(kv, reqs, r, victim, 0)
    for k in range(reps.run_n[r]):
        if reps.run[r, k] != victim:
            b = _lay_out_request_nb(kv, reqs, r, reps.run[r, k], b)
    uncached_end = b + kv.nfree[r] - kv.free_cached[r]
    pos = 0
    while b < owned:
        kv.blk[r, b, BLK_REF] = 0
        kv.blk[r, b, BLK_SLOT] = pos & mask
        if b < uncached_end:
            kv.blk[r, b, BLK_DUP] = NO_ID
            kv.hash[r, b] = NO_HASH
        else:
            kv.blk[r, b, BLK_DUP] = BLK_UNINDEXED
            kv.hash[r, b] = COUNTED_HASH
        kv.fring[r, pos & mask] = b
        pos += 1
        b += 1
    for j in range(owned, kv.blk.shape[1]):  # rows past a smaller pool's blocks
        kv.blk[r, j, BLK_DUP] = NO_ID
        kv.blk[r, j, BLK_SLOT] = NO_ID
    kv.fhead[r] = 0
    kv.ftail[r] = pos
    kv.memo_req[r] = NO_ID
    kv.counted[r] = 0
