"""Block pool of each replica's paged KV cache: block records, the free-block queue, caching
and eviction of block hashes.

NOTE(vllm): mirrors BlockPool and FreeKVCacheBlockQueue (vllm/v1/core/block_pool.py,
kv_cache_utils.py) for one full-attention group. Block ids here are vLLM's ids minus one:
vLLM's block 0 is the null block and is never handed out, so the usable pool is ids 0..U-1 in
vLLM's initial free order.

Layout (KvPool, rows indexed by replica r). The fields a block operation touches together share
one 16-byte record, so a block costs one cache line where separate arrays cost one each (the
pool of a replica is megabytes, the accesses random):
  blk[r, b, BLK_REF]    references to block b (0 = free, possibly still cached)
  blk[r, b, BLK_DUP]    the hash map's duplicate link (hash_map.py)
  blk[r, b, BLK_SLOT]   b's slot in the free-block ring while b is free (NO_ID otherwise)
  hash[r, b]            chained block hash, NO_HASH when b holds no full cached block
  fring[r, c]           the free-block queue as a ring of block ids; head = next to evict
                        (LRU), NO_ID = a hole left by a block taken out of the middle
"""

from numba import njit
from vidur_fast.kernels.codes import (
    BLK_DUP,
    BLK_REF,
    BLK_SLOT,
    BLK_UNINDEXED,
    HT_KEY,
)
from vidur_fast.kernels.dtypes import NO_HASH, NO_ID
from vidur_fast.kernels.hash_map import insert_block_nb, memo_touch_nb, remove_block_nb
from vidur_fast.kernels.prefetch import prefetch_nb

# blocks ahead of the current one whose hash-map cell is prefetched (allocation)
PREFETCH_AHEAD = 8

# ---- free-block queue (LRU: evict from the head, freed blocks go to the tail) ----
# A ring of block ids per replica (KvPool.fring[r]), positions [fhead, ftail) in use (monotone
# int64 positions, slot = position & (ring size - 1)). A block taken out of the middle (a hit
# on a free cached block) leaves a hole (NO_ID) that pops skip, so popping n blocks reads n
# consecutive ids instead of chasing n links through the pool, and the records of the blocks
# ahead can be fetched in parallel. The ring is twice the blocks, so that a full ring (holes
# and all) compacts to at most half.


@njit(cache=True, nogil=True, _nrt=False)
def _queue_compact_nb(kv, r):
    """Close the holes of replica r's ring (in queue order) when it is full.

    Mutates: kv.fring, kv.blk (slots), kv.ftail.
    Returns: nothing.
    """
    mask = kv.fring.shape[1] - 1
    w = kv.fhead[r]
    for pos in range(kv.fhead[r], kv.ftail[r]):
        b = kv.fring[r, pos & mask]
        if b != NO_ID:
            kv.fring[r, w & mask] = b
            kv.blk[r, b, BLK_SLOT] = w & mask
            w += 1
    for pos in range(w, kv.ftail[r]):
        kv.fring[r, pos & mask] = NO_ID
    kv.ftail[r] = w


@njit(cache=True, nogil=True, _nrt=False)
def _queue_remove_nb(kv, r, b):
    """Take block b out of replica r's free-block queue (it leaves a hole).

    Mutates: kv.fring, kv.blk (slot), kv.nfree.
    Returns: nothing.
    """
    kv.fring[r, kv.blk[r, b, BLK_SLOT]] = NO_ID
    kv.blk[r, b, BLK_SLOT] = NO_ID
    kv.nfree[r] -= 1


@njit(cache=True, nogil=True, _nrt=False)
def _queue_push_back_nb(kv, r, b):
    """Append block b at the tail of replica r's free-block queue (evicted last).

    Mutates: kv.fring, kv.blk (slot), kv.ftail, kv.nfree.
    Returns: nothing.
    """
    if kv.ftail[r] - kv.fhead[r] == kv.fring.shape[1]:
        _queue_compact_nb(kv, r)
    slot = kv.ftail[r] & (kv.fring.shape[1] - 1)
    kv.fring[r, slot] = b
    kv.blk[r, b, BLK_SLOT] = slot
    kv.ftail[r] += 1
    kv.nfree[r] += 1


@njit(cache=True, nogil=True, _nrt=False)
def _queue_push_front_nb(kv, r, b):
    """Put block b at the head of replica r's free-block queue (reused first).

    Mutates: kv.fring, kv.blk (slot), kv.fhead, kv.nfree.
    Returns: nothing.
    """
    if kv.ftail[r] - kv.fhead[r] == kv.fring.shape[1]:
        _queue_compact_nb(kv, r)
    kv.fhead[r] -= 1
    slot = kv.fhead[r] & (kv.fring.shape[1] - 1)
    kv.fring[r, slot] = b
    kv.blk[r, b, BLK_SLOT] = slot
    kv.nfree[r] += 1


# ---- caching ----


@njit(cache=True, nogil=True, _nrt=False)
def cache_block_nb(kv, r, b, h):
    """Cache block b under hash h (after any block already cached under h).

    Mutates: kv.hash, kv.blk (dup links), kv.ht.
    Returns: nothing.
    """
    kv.hash[r, b] = h
    insert_block_nb(kv, r, b, h)


@njit(cache=True, nogil=True, _nrt=False)
def cache_block_unindexed_nb(kv, r, b, h):
    """Mark block b cached under a private hash h without entering it into the hash map
    (req_blocks.index_private_blocks_nb enters it when its request is preempted).

    Mutates: kv.hash, kv.blk (dup link).
    Returns: nothing.
    """
    kv.hash[r, b] = h
    kv.blk[r, b, BLK_DUP] = BLK_UNINDEXED


@njit(cache=True, nogil=True, _nrt=False)
def evict_cached_nb(kv, r, b):
    """Drop block b's hash from the cache (it is being reused for other tokens).

    NOTE(vllm): BlockPool._maybe_evict_cached_block.
    Mutates: kv.hash, kv.blk (dup links), kv.ht, kv.memo_req, kv.evictions.
    Returns: nothing.
    """
    memo_touch_nb(kv, r, b)
    kv.evictions[r] += 1
    if kv.blk[r, b, BLK_DUP] == BLK_UNINDEXED:
        kv.blk[r, b, BLK_DUP] = NO_ID
    else:
        remove_block_nb(kv, r, b, kv.hash[r, b])
    kv.hash[r, b] = NO_HASH


# ---- references ----


@njit(cache=True, nogil=True, _nrt=False)
def touch_nb(kv, r, b):
    """One more reference to cached block b, off the free-block queue if it was free.

    NOTE(vllm): BlockPool.touch.
    Mutates: kv.blk (ref, slot), kv.fring, kv.nfree.
    Returns: nothing.
    """
    if kv.blk[r, b, BLK_REF] == 0:
        _queue_remove_nb(kv, r, b)
    kv.blk[r, b, BLK_REF] += 1


@njit(cache=True, nogil=True, _nrt=False)
def get_new_blocks_nb(kv, r, s, k0, n):
    """Pop n blocks from the head of replica r's free-block queue into list row s at
    positions k0.. (the caller checked nfree), evicting their cached hashes.

    NOTE(vllm): BlockPool.get_new_blocks.
    Mutates: kv (blk, hash, ht, lists, free-block queue, evictions, memo_req).
    Returns: nothing.
    """
    # ahead of the block being popped: the record and hash of the one 2 * PREFETCH_AHEAD
    # ring positions on are fetched, then the map cell of the one PREFETCH_AHEAD on (holes
    # make these a few blocks nearer: a hint only)
    mask = kv.fring.shape[1] - 1
    hmask = kv.ht.shape[1] - 1
    tail = kv.ftail[r]
    pos = kv.fhead[r]
    k = k0
    for j in range(n):
        if j + 2 * PREFETCH_AHEAD < n and pos + 2 * PREFETCH_AHEAD < tail:
            far = kv.fring[r, (pos + 2 * PREFETCH_AHEAD) & mask]
            if far != NO_ID:
                prefetch_nb(kv.hash, (r, far))
                prefetch_nb(kv.blk, (r, far, 0))
                if kv.memo_req[r] != NO_ID:  # its eviction reads its memo mark
                    prefetch_nb(kv.mark, (r, far))
        if j + PREFETCH_AHEAD < n and pos + PREFETCH_AHEAD < tail:
            near = kv.fring[r, (pos + PREFETCH_AHEAD) & mask]
            if near != NO_ID:
                h = kv.hash[r, near]
                # an unindexed private block is not in the map: its eviction reads no cell
                if h != NO_HASH and kv.blk[r, near, BLK_DUP] != BLK_UNINDEXED:
                    prefetch_nb(kv.ht, (r, h & hmask, HT_KEY))
        b = kv.fring[r, pos & mask]
        while b == NO_ID:
            pos += 1
            b = kv.fring[r, pos & mask]
        kv.fring[r, pos & mask] = NO_ID
        pos += 1
        kv.blk[r, b, BLK_SLOT] = NO_ID
        kv.nfree[r] -= 1
        if kv.hash[r, b] != NO_HASH:
            evict_cached_nb(kv, r, b)
        kv.blk[r, b, BLK_REF] = 1
        kv.lists[r, s, k] = b
        k += 1
    kv.fhead[r] = pos


@njit(cache=True, nogil=True, _nrt=False)
def free_list_blocks_nb(kv, r, s, n):
    """Drop one reference to each of the first n blocks of list row s, last block first.

    NOTE(vllm): single_type_kv_cache_manager.free walks a request's blocks in reverse order
    and BlockPool.free_blocks appends the cached ones that drop to ref 0 at the LRU tail (so a
    request's tail is evicted before its prefix; they keep their hash for later hits) and puts
    the uncached ones (the partial last block) at the head, in walk order, to be reused first.
    Mutates: kv (blk, free-block queue, memo_req).
    Returns: nothing.
    """
    memo = kv.memo_req[r] != NO_ID
    for k in range(n - 1, -1, -1):
        if k >= PREFETCH_AHEAD:  # the records of the block PREFETCH_AHEAD on in the walk
            ahead = kv.lists[r, s, k - PREFETCH_AHEAD]
            prefetch_nb(kv.blk, (r, ahead, 0))
            prefetch_nb(kv.hash, (r, ahead))
            if memo:
                prefetch_nb(kv.mark, (r, ahead))
        b = kv.lists[r, s, k]
        kv.blk[r, b, BLK_REF] -= 1
        if kv.blk[r, b, BLK_REF] == 0:
            memo_touch_nb(kv, r, b)
            if kv.hash[r, b] != NO_HASH:
                _queue_push_back_nb(kv, r, b)
    # uncached blocks: pushing to the head in forward order leaves them in walk order
    for k in range(n):
        b = kv.lists[r, s, k]
        if kv.blk[r, b, BLK_REF] == 0 and kv.hash[r, b] == NO_HASH:
            _queue_push_front_nb(kv, r, b)


# ---- set-up ----


@njit(cache=True, nogil=True, _nrt=False)
def init_pool_nb(kv):
    """Set up every replica's pool: all blocks free in id order, nothing cached, slots free
    (a counted replica: its counts only).

    The arrays come zeroed from allocation (np.zeros) and zero is the initial value of ref
    counts, hashes (NO_HASH), memo marks and map keys (HT_EMPTY; a value is read only under a
    key), so those are not written: their pages stay unmapped until a run touches them (the
    map of a workload without shared prefixes hardly ever is).
    Mutates: kv.
    Returns: nothing.
    """
    R = kv.blk.shape[0]
    U = kv.blk.shape[1]
    for r in range(R):
        # a counted replica (kernels/block_counts.py) writes its block records only if it is
        # laid out
        for b in range(U if kv.counted[r] == 0 else 0):
            kv.blk[r, b, BLK_DUP] = NO_ID
            kv.blk[r, b, BLK_SLOT] = b
            kv.fring[r, b] = b  # ring slots past ftail are never read: left unwritten
        kv.memo_req[r] = NO_ID
        kv.memo_stamp[r] = 1
        kv.memo_next_hash[r] = NO_HASH
        kv.fhead[r] = 0
        kv.ftail[r] = U
        kv.nfree[r] = U
        S = kv.slot_stack.shape[1]
        for k in range(S):
            kv.slot_stack[r, k] = S - 1 - k
        kv.slot_top[r] = S
