"""Paged KV block pool with prefix caching (per replica): ref counts, an LRU free list, a
hash -> block table and the ordered block list of every request that holds blocks.

NOTE(vllm): mirrors vllm/v1/core/block_pool.py (BlockPool, FreeKVCacheBlockQueue,
BlockHashToBlockMap) and single_type_kv_cache_manager.py (req_to_blocks, num_cached_block) for
one full-attention group. Block ids here are vLLM's ids minus one: vLLM's block 0 is the null
block and is never handed out, so the usable pool is ids 0..U-1 in vLLM's initial free order.

Layout (all in Reps, rows indexed by replica r). The fields a block operation touches together
share one 16-byte record and a table cell is one 16-byte pair, so a block costs one cache line
where separate arrays cost one each (the pool of a replica is megabytes, the accesses random):
  kv_blk[r, b, _REF]   references to block b (0 = free, possibly still cached)
  kv_blk[r, b, _DUP]   next block registered under the same hash (insertion order), NO_ID at
                       end; _UNINDEXED for a block with a private hash that is not in the table
  kv_blk[r, b, _PREV], kv_blk[r, b, _NEXT]
                       intrusive doubly linked free list; head = next to evict (LRU)
  kv_hash[r, b]        chained block hash, NO_HASH when b holds no full cached block
  ht[r, c, _KEY], ht[r, c, _VAL]
                       open-addressing (linear probing) table hash -> first block with that hash
  kv_list[r, s, :]  block ids of the request in list slot s, in token order
  kv_slot_stack     free list slots (a stack of slot ids), kv_slot_top its size
  memo_*, kv_mark    the last lookup of the waiting head, valid until one of its hit blocks
                    is evicted or changes between free and referenced, or its next chain hash
                    is registered (a blocked head is looked up again every step)
Requests hold a slot only while they hold blocks (running), so memory is bounded by
replicas x max_num_seqs x max blocks per request, whatever the number of requests.

Private hashes (blocks past the workload's hash list, e.g. a request's own output) can only be
looked up by their own request, and only after it was preempted: such blocks are marked cached
(kv_hash set, so frees and evictions behave as for any cached block) but enter the hash table
only when their request is preempted (index_private_blocks_nb). Without shared hashes (plain
synthetic workloads) the table then stays almost empty.
"""

import numpy as np
from numba import njit
from vidur_fast.kernels.dtypes import NO_HASH, NO_ID
from vidur_fast.kernels.prefetch import prefetch_nb

_U64_MUL = np.uint64(0x9E3779B97F4A7C15)
_U64_M1 = np.uint64(0xBF58476D1CE4E5B9)
_U64_M2 = np.uint64(0x94D049BB133111EB)
_PRIVATE_SALT = np.uint64(0x3C6EF372FE94F82B)
_MASK63 = np.uint64(0x7FFFFFFFFFFFFFFF)
_EMPTY = 0  # key of an empty table cell (NO_HASH never is a key)
_UNINDEXED = -2  # _DUP of a cached block whose private hash is not in the hash table
# fields of a block record (kv_blk) and of a table cell (ht)
_REF = 0
_DUP = 1
_PREV = 2
_NEXT = 3
_KEY = 0
_VAL = 1
# blocks ahead of the current one whose table cell is prefetched (registration, eviction)
_PREFETCH_AHEAD = 8

# ---- hashes ----


@njit(cache=True, nogil=True, _nrt=False)
def _fmix64_nb(z):
    """splitmix64 finalizer on a uint64.

    Mutates: nothing.
    Returns: uint64.
    """
    z = (z ^ (z >> np.uint64(30))) * _U64_M1
    z = (z ^ (z >> np.uint64(27))) * _U64_M2
    return z ^ (z >> np.uint64(31))


@njit(cache=True, nogil=True, _nrt=False)
def block_hash_nb(reqs, i, k):
    """Chained hash of block k of request i: from the workload's hash list while it lasts,
    else a hash private to the request (tokens no other request shares, e.g. its own output).

    Mutates: nothing.
    Returns: int64 in [1, 2^63 - 1].
    """
    lo = reqs.hash_off[i]
    if k < reqs.hash_off[i + 1] - lo:
        return reqs.hashes[lo + k]
    z = _fmix64_nb(np.uint64(i) * _U64_MUL + _PRIVATE_SALT)
    z = _fmix64_nb(z + np.uint64(k) * _U64_MUL)
    h = np.int64(z & _MASK63)
    if h == NO_HASH:
        h = 1
    return h


# ---- free list (LRU: evict from the head, freed blocks go to the tail) ----


@njit(cache=True, nogil=True, _nrt=False)
def _fl_remove_nb(reps, r, b):
    """Unlink block b from replica r's free list.

    Mutates: reps.kv_blk (links), kv_fhead, kv_ftail, kv_nfree.
    Returns: nothing.
    """
    pv = reps.kv_blk[r, b, _PREV]
    nx = reps.kv_blk[r, b, _NEXT]
    if pv == NO_ID:
        reps.kv_fhead[r] = nx
    else:
        reps.kv_blk[r, pv, _NEXT] = nx
    if nx == NO_ID:
        reps.kv_ftail[r] = pv
    else:
        reps.kv_blk[r, nx, _PREV] = pv
    reps.kv_blk[r, b, _PREV] = NO_ID
    reps.kv_blk[r, b, _NEXT] = NO_ID
    reps.kv_nfree[r] -= 1


@njit(cache=True, nogil=True, _nrt=False)
def _fl_push_back_nb(reps, r, b):
    """Append block b at the tail of replica r's free list (evicted last).

    Mutates: reps.kv_blk (links), kv_fhead, kv_ftail, kv_nfree.
    Returns: nothing.
    """
    t = reps.kv_ftail[r]
    reps.kv_blk[r, b, _PREV] = t
    reps.kv_blk[r, b, _NEXT] = NO_ID
    if t == NO_ID:
        reps.kv_fhead[r] = b
    else:
        reps.kv_blk[r, t, _NEXT] = b
    reps.kv_ftail[r] = b
    reps.kv_nfree[r] += 1


@njit(cache=True, nogil=True, _nrt=False)
def _fl_push_front_nb(reps, r, b):
    """Put block b at the head of replica r's free list (reused first).

    Mutates: reps.kv_blk (links), kv_fhead, kv_ftail, kv_nfree.
    Returns: nothing.
    """
    h = reps.kv_fhead[r]
    reps.kv_blk[r, b, _PREV] = NO_ID
    reps.kv_blk[r, b, _NEXT] = h
    if h == NO_ID:
        reps.kv_ftail[r] = b
    else:
        reps.kv_blk[r, h, _PREV] = b
    reps.kv_fhead[r] = b
    reps.kv_nfree[r] += 1


# ---- hash table: hash -> first block registered with it ----


@njit(cache=True, nogil=True, _nrt=False)
def _ht_find_nb(reps, r, h):
    """Cell of hash h in replica r's table.

    Mutates: nothing.
    Returns: cell index, or NO_ID when absent.
    """
    mask = reps.ht.shape[1] - 1
    c = h & mask
    while True:
        key = reps.ht[r, c, _KEY]
        if key == h:
            return c
        if key == _EMPTY:
            return NO_ID
        c = (c + 1) & mask


@njit(cache=True, nogil=True, _nrt=False)
def _ht_insert_nb(reps, r, h, b):
    """Map hash h (absent) to block b.

    Mutates: reps.ht.
    Returns: nothing.
    """
    mask = reps.ht.shape[1] - 1
    c = h & mask
    while reps.ht[r, c, _KEY] != _EMPTY:
        c = (c + 1) & mask
    reps.ht[r, c, _KEY] = h
    reps.ht[r, c, _VAL] = b


@njit(cache=True, nogil=True, _nrt=False)
def _ht_delete_nb(reps, r, c):
    """Delete cell c with backward-shift deletion (no tombstones, probes stay short).

    Mutates: reps.ht.
    Returns: nothing.
    """
    mask = reps.ht.shape[1] - 1
    hole = c
    j = (c + 1) & mask
    while reps.ht[r, j, _KEY] != _EMPTY:
        home = reps.ht[r, j, _KEY] & mask
        # move j into the hole unless its home lies cyclically in (hole, j]
        if (j - home) & mask >= (j - hole) & mask:
            reps.ht[r, hole, _KEY] = reps.ht[r, j, _KEY]
            reps.ht[r, hole, _VAL] = reps.ht[r, j, _VAL]
            hole = j
        j = (j + 1) & mask
    reps.ht[r, hole, _KEY] = _EMPTY
    reps.ht[r, hole, _VAL] = NO_ID


@njit(cache=True, nogil=True, _nrt=False)
def cached_block_nb(reps, r, h):
    """A cached block holding hash h on replica r (the earliest registered).

    NOTE(vllm): BlockHashToBlockMap.get_one_block returns the first of duplicate blocks.
    Mutates: nothing.
    Returns: block id, or NO_ID.
    """
    c = _ht_find_nb(reps, r, h)
    if c == NO_ID:
        return NO_ID
    return reps.ht[r, c, _VAL]


@njit(cache=True, nogil=True, _nrt=False)
def _register_nb(reps, r, b, h):
    """Cache block b under hash h (after any block already cached under h).

    NOTE(vllm): duplicates are kept (BlockHashToBlockMap.insert): two requests that computed
    the same block without hitting each other both register it.
    Mutates: reps.kv_hash, kv_blk (dup links), ht.
    Returns: nothing.
    """
    reps.kv_hash[r, b] = h
    _index_nb(reps, r, b, h)


@njit(cache=True, nogil=True, _nrt=False)
def _index_nb(reps, r, b, h):
    """Enter block b (holding hash h) into the hash table, after any block already there.

    Mutates: reps.kv_blk (dup links), ht, memo_req.
    Returns: nothing.
    """
    reps.kv_blk[r, b, _DUP] = NO_ID
    if h == reps.memo_next_hash[r]:
        reps.memo_req[r] = NO_ID
    c = _ht_find_nb(reps, r, h)
    if c == NO_ID:
        _ht_insert_nb(reps, r, h, b)
        return
    x = reps.ht[r, c, _VAL]
    while reps.kv_blk[r, x, _DUP] != NO_ID:
        x = reps.kv_blk[r, x, _DUP]
    reps.kv_blk[r, x, _DUP] = b


@njit(cache=True, nogil=True, _nrt=False)
def _evict_nb(reps, r, b):
    """Drop block b's hash from the cache (it is being reused for other tokens).

    NOTE(vllm): BlockPool._maybe_evict_cached_block.
    Mutates: reps.kv_hash, kv_blk (dup links), ht, pc_evictions.
    Returns: nothing.
    """
    _memo_touch_nb(reps, r, b)
    reps.pc_evictions[r] += 1
    if reps.kv_blk[r, b, _DUP] == _UNINDEXED:
        reps.kv_blk[r, b, _DUP] = NO_ID
        reps.kv_hash[r, b] = NO_HASH
        return
    h = reps.kv_hash[r, b]
    c = _ht_find_nb(reps, r, h)
    head = reps.ht[r, c, _VAL]
    if head == b:
        if reps.kv_blk[r, b, _DUP] == NO_ID:
            _ht_delete_nb(reps, r, c)
        else:
            reps.ht[r, c, _VAL] = reps.kv_blk[r, b, _DUP]
    else:
        x = head
        while reps.kv_blk[r, x, _DUP] != b:
            x = reps.kv_blk[r, x, _DUP]
        reps.kv_blk[r, x, _DUP] = reps.kv_blk[r, b, _DUP]
    reps.kv_blk[r, b, _DUP] = NO_ID
    reps.kv_hash[r, b] = NO_HASH


# ---- request-level operations ----


@njit(cache=True, nogil=True, _nrt=False)
def _memo_touch_nb(reps, r, b):
    """Drop the memoised head lookup if block b is one of its hit blocks.

    Mutates: reps.memo_req.
    Returns: nothing.
    """
    # no memo, nothing to drop (and no cache miss on kv_mark)
    if reps.memo_req[r] != NO_ID and reps.kv_mark[r, b] == reps.memo_stamp[r]:
        reps.memo_req[r] = NO_ID


@njit(cache=True, nogil=True, _nrt=False)
def lookup_hit_nb(reps, reqs, p, r, i, n_tokens):
    """Longest cached prefix of request i (whose sequence is n_tokens long) on replica r.

    NOTE(vllm): kv_cache_manager.get_computed_blocks: only full blocks hit, consecutive from
    block 0, and at most n_tokens - 1 tokens (the last token is recomputed for its logits),
    rounded down to a block.
    Mutates: reps.memo_*, reps.kv_mark (the memo of the last lookup; results are unaffected).
    Returns: (hit blocks, hit blocks that are free, i.e. must be taken off the free list).
    """
    if reps.memo_req[r] == i:
        return reps.memo_hit[r], reps.memo_evictable[r]
    max_blocks = (n_tokens - 1) // p.block_size
    stamp = reps.memo_stamp[r] + 1
    hit = 0
    evictable = 0
    while hit < max_blocks:
        b = cached_block_nb(reps, r, block_hash_nb(reqs, i, hit))
        if b == NO_ID:
            break
        if reps.kv_blk[r, b, _REF] == 0:
            evictable += 1
        reps.kv_mark[r, b] = stamp
        hit += 1
    reps.memo_stamp[r] = stamp
    reps.memo_req[r] = i
    reps.memo_hit[r] = hit
    reps.memo_evictable[r] = evictable
    reps.memo_next_hash[r] = block_hash_nb(reqs, i, hit) if hit < max_blocks else NO_HASH
    return hit, evictable


@njit(cache=True, nogil=True, _nrt=False)
def acquire_slot_nb(reps, reqs, r, i):
    """Give request i a block-list slot on replica r.

    Mutates: reps.kv_slot_*, reqs.kv_slot.
    Returns: False when no slot is left (broken invariant: slots = max running requests).
    """
    top = reps.kv_slot_top[r]
    if top == 0:
        return False
    top -= 1
    reqs.kv_slot[i] = reps.kv_slot_stack[r, top]
    reps.kv_slot_top[r] = top
    reqs.blocks[i] = 0
    reqs.kv_cached[i] = 0
    return True


@njit(cache=True, nogil=True, _nrt=False)
def touch_hit_nb(reps, reqs, r, i, n_hit):
    """Take the first n_hit cached blocks of request i: one more reference each, off the free
    list if they were free.

    NOTE(vllm): BlockPool.touch via allocate_new_computed_blocks; hit blocks count as cached.
    Mutates: reps.kv_blk (refs, free list), kv_list; reqs.blocks, reqs.kv_cached.
    Returns: nothing.
    """
    s = reqs.kv_slot[i]
    reps.memo_req[r] = NO_ID
    for k in range(n_hit):
        b = cached_block_nb(reps, r, block_hash_nb(reqs, i, k))
        if reps.kv_blk[r, b, _REF] == 0:
            _fl_remove_nb(reps, r, b)
        reps.kv_blk[r, b, _REF] += 1
        reps.kv_list[r, s, k] = b
    reqs.blocks[i] = n_hit
    reqs.kv_cached[i] = n_hit


@njit(cache=True, nogil=True, _nrt=False)
def allocate_new_nb(reps, reqs, r, i, n):
    """Append n blocks from the head of the free list to request i (caller checked n_free).

    NOTE(vllm): BlockPool.get_new_blocks pops the LRU head and evicts its cached hash.
    Mutates: reps (kv_blk, kv_hash, ht, kv_list, pc_evictions), reqs.blocks.
    Returns: nothing.
    """
    s = reqs.kv_slot[i]
    k = reqs.blocks[i]
    # two walkers ahead on the free list: `far` fetches the hash of the block
    # 2 * _PREFETCH_AHEAD ahead, `near` then the table cell of the one _PREFETCH_AHEAD ahead
    mask = reps.ht.shape[1] - 1
    far = reps.kv_fhead[r]
    near = far
    for j in range(2 * _PREFETCH_AHEAD):
        if j >= n or far == NO_ID:
            break
        far = reps.kv_blk[r, far, _NEXT]
        if j < _PREFETCH_AHEAD and near != NO_ID:
            near = reps.kv_blk[r, near, _NEXT]
    for j in range(n):
        if far != NO_ID and j + 2 * _PREFETCH_AHEAD < n:
            prefetch_nb(reps.kv_hash, (r, far))
            far = reps.kv_blk[r, far, _NEXT]
        if near != NO_ID and j + _PREFETCH_AHEAD < n:
            h = reps.kv_hash[r, near]
            if h != NO_HASH:
                prefetch_nb(reps.ht, (r, h & mask, _KEY))
            near = reps.kv_blk[r, near, _NEXT]
        b = reps.kv_fhead[r]
        _fl_remove_nb(reps, r, b)
        if reps.kv_hash[r, b] != NO_HASH:
            _evict_nb(reps, r, b)
        reps.kv_blk[r, b, _REF] = 1
        reps.kv_list[r, s, k] = b
        k += 1
    reqs.blocks[i] = k


@njit(cache=True, nogil=True, _nrt=False)
def cache_full_blocks_nb(reps, reqs, p, r, i, n_tokens):
    """Register the blocks of request i that are full once n_tokens are computed.

    NOTE(vllm): kv_cache_manager.allocate_slots caches min(computed + scheduled, num_tokens)
    tokens at schedule time, so a request admitted later in the same step can already hit them.
    Mutates: reps.kv_hash, kv_blk (dup links), ht; reqs.kv_cached.
    Returns: nothing.
    """
    full = n_tokens // p.block_size
    s = reqs.kv_slot[i]
    lo = reqs.hash_off[i]
    shared = reqs.hash_off[i + 1] - lo
    mask = reps.ht.shape[1] - 1
    for k in range(reqs.kv_cached[i], full):
        b = reps.kv_list[r, s, k]
        if k < shared:
            if k + _PREFETCH_AHEAD < shared:
                prefetch_nb(reps.ht, (r, reqs.hashes[lo + k + _PREFETCH_AHEAD] & mask, _KEY))
            _register_nb(reps, r, b, reqs.hashes[lo + k])
        else:
            reps.kv_hash[r, b] = block_hash_nb(reqs, i, k)
            reps.kv_blk[r, b, _DUP] = _UNINDEXED
    if full > reqs.kv_cached[i]:
        reqs.kv_cached[i] = full


@njit(cache=True, nogil=True, _nrt=False)
def index_private_blocks_nb(reps, reqs, r, i):
    """Enter request i's cached private blocks into the hash table before it is preempted, so
    that its re-admission can hit them (in registration order, as if entered when cached).

    Mutates: reps.kv_blk (dup links), ht, memo_req.
    Returns: nothing.
    """
    s = reqs.kv_slot[i]
    if s == NO_ID:
        return
    shared = reqs.hash_off[i + 1] - reqs.hash_off[i]
    for k in range(shared, reqs.kv_cached[i]):
        b = reps.kv_list[r, s, k]
        if reps.kv_blk[r, b, _DUP] == _UNINDEXED:
            _index_nb(reps, r, b, reps.kv_hash[r, b])


@njit(cache=True, nogil=True, _nrt=False)
def free_request_blocks_nb(reps, reqs, r, i):
    """Release every block of request i, last block first, and its list slot.

    NOTE(vllm): single_type_kv_cache_manager.free walks the blocks in reverse order and
    BlockPool.free_blocks appends the cached ones that drop to ref 0 at the LRU tail (so a
    request's tail is evicted before its prefix; they keep their hash for later hits) and puts
    the uncached ones (the partial last block) at the head, in walk order, to be reused first.
    Mutates: reps (kv_blk, free list, slot stack), reqs.blocks, reqs.kv_slot, reqs.kv_cached.
    Returns: blocks released.
    """
    s = reqs.kv_slot[i]
    if s == NO_ID:
        return 0
    n = reqs.blocks[i]
    for k in range(n - 1, -1, -1):
        b = reps.kv_list[r, s, k]
        reps.kv_blk[r, b, _REF] -= 1
        if reps.kv_blk[r, b, _REF] == 0:
            _memo_touch_nb(reps, r, b)
            if reps.kv_hash[r, b] != NO_HASH:
                _fl_push_back_nb(reps, r, b)
    # uncached blocks: pushing to the head in forward order leaves them in walk order
    for k in range(n):
        b = reps.kv_list[r, s, k]
        if reps.kv_blk[r, b, _REF] == 0 and reps.kv_hash[r, b] == NO_HASH:
            _fl_push_front_nb(reps, r, b)
    reps.kv_slot_stack[r, reps.kv_slot_top[r]] = s
    reps.kv_slot_top[r] += 1
    reqs.kv_slot[i] = NO_ID
    reqs.blocks[i] = 0
    reqs.kv_cached[i] = 0
    return n


@njit(cache=True, nogil=True, _nrt=False)
def init_pool_nb(reps):
    """Set up every replica's pool: all blocks free in id order, nothing cached, slots free.

    The arrays come zeroed from allocation (np.zeros) and zero is the initial value of ref
    counts, hashes (NO_HASH), memo marks and table keys (_EMPTY; a value is read only under a
    key), so those are not written: their pages stay unmapped until a run touches them (the
    table of a workload without shared prefixes hardly ever is).
    Mutates: reps pool arrays.
    Returns: nothing.
    """
    R = reps.kv_blk.shape[0]
    U = reps.kv_blk.shape[1]
    for r in range(R):
        for b in range(U):
            reps.kv_blk[r, b, _DUP] = NO_ID
            reps.kv_blk[r, b, _PREV] = b - 1
            reps.kv_blk[r, b, _NEXT] = b + 1 if b + 1 < U else NO_ID
        reps.memo_req[r] = NO_ID
        reps.memo_stamp[r] = 1
        reps.memo_next_hash[r] = NO_HASH
        reps.kv_fhead[r] = 0 if U > 0 else NO_ID
        reps.kv_ftail[r] = U - 1 if U > 0 else NO_ID
        reps.kv_nfree[r] = U
        S = reps.kv_slot_stack.shape[1]
        for k in range(S):
            reps.kv_slot_stack[r, k] = S - 1 - k
        reps.kv_slot_top[r] = S


@njit(cache=True, nogil=True, _nrt=False)
def longest_cached_prefix_nb(reps, reqs, p, r, i):
    """Full blocks of request i's prompt cached on replica r (router estimate; no hit cap).

    Mutates: nothing.
    Returns: number of blocks.
    """
    n = reqs.hash_off[i + 1] - reqs.hash_off[i]
    full = reqs.prompt[i] // p.block_size
    if n > full:
        n = full
    k = 0
    while k < n:
        if cached_block_nb(reps, r, reqs.hashes[reqs.hash_off[i] + k]) == NO_ID:
            break
        k += 1
    return k
