"""Per-request block lists of each replica's paged KV cache: which blocks a request holds, how
many of them are cached, and the lookups and frees that work on a whole request.

NOTE(vllm): mirrors single_type_kv_cache_manager.py (req_to_blocks, num_cached_block) and the
request-level parts of kv_cache_manager.py (get_computed_blocks, allocate_slots, free) for one
full-attention group.

A request holds a list slot (KvPool.req_slot[i]; KvPool.lists[r, s, :] are its block ids in
token order) only while it holds blocks (running), so memory is bounded by replicas x
max_num_seqs x max blocks per request, whatever the number of requests. KvPool.slot_stack is
the stack of free slots, slot_top its size.

Private hashes (blocks past the workload's hash list, e.g. a request's own output) can only be
looked up by their own request, and only after it was preempted: such blocks are counted as
cached (req_cached) while their request holds them, marked cached when it frees them (so the
free queue and evictions treat them as any cached block) and enter the hash map only when it is
preempted (index_private_blocks_nb). Without shared hashes (plain synthetic workloads) caching
then costs nothing per block and the map stays almost empty.
"""

import numpy as np
from numba import njit
from vidur_fast.kernels.block_pool import (
    PREFETCH_AHEAD,
    cache_block_nb,
    cache_block_unindexed_nb,
    free_list_blocks_nb,
    get_new_blocks_nb,
    touch_nb,
)
from vidur_fast.kernels.blocks import full_blocks_nb
from vidur_fast.kernels.codes import BLK_DUP, BLK_REF, BLK_UNINDEXED, HT_KEY
from vidur_fast.kernels.dtypes import NO_HASH, NO_ID
from vidur_fast.kernels.hash_map import cached_block_nb, insert_block_nb
from vidur_fast.kernels.prefetch import prefetch_nb

_U64_MUL = np.uint64(0x9E3779B97F4A7C15)
_U64_M1 = np.uint64(0xBF58476D1CE4E5B9)
_U64_M2 = np.uint64(0x94D049BB133111EB)
_PRIVATE_SALT = np.uint64(0x3C6EF372FE94F82B)
_MASK63 = np.uint64(0x7FFFFFFFFFFFFFFF)

# ---- block hashes of a request ----


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


# ---- lookups ----


@njit(cache=True, nogil=True, _nrt=False)
def lookup_hit_nb(kv, reqs, p, r, i, n_tokens):
    """Longest cached prefix of request i (whose sequence is n_tokens long) on replica r.

    NOTE(vllm): kv_cache_manager.get_computed_blocks: only full blocks hit, consecutive from
    block 0, and at most n_tokens - 1 tokens (the last token is recomputed for its logits),
    rounded down to a block.
    Mutates: kv.memo_*, kv.mark (the memo of the last lookup; results are unaffected).
    Returns: (hit blocks, hit blocks that are free, i.e. must be taken off the free queue).
    """
    if kv.memo_req[r] == i:
        return kv.memo_hit[r], kv.memo_evictable[r]
    max_blocks = full_blocks_nb(p, n_tokens - 1)
    stamp = kv.memo_stamp[r] + 1
    hit = np.int64(0)  # not a literal 0: block_hash_nb is compiled once
    evictable = 0
    while hit < max_blocks:
        b = cached_block_nb(kv, r, block_hash_nb(reqs, i, hit))
        if b == NO_ID:
            break
        if kv.blk[r, b, BLK_REF] == 0:
            evictable += 1
        kv.mark[r, b] = stamp
        hit += 1
    kv.memo_stamp[r] = stamp
    kv.memo_req[r] = i
    kv.memo_hit[r] = hit
    kv.memo_evictable[r] = evictable
    kv.memo_next_hash[r] = block_hash_nb(reqs, i, hit) if hit < max_blocks else NO_HASH
    return hit, evictable


@njit(cache=True, nogil=True, _nrt=False)
def longest_cached_prefix_nb(kv, reqs, p, r, i):
    """Full blocks of request i's prompt cached on replica r (router estimate; no hit cap).

    Mutates: nothing.
    Returns: number of blocks.
    """
    n = reqs.hash_off[i + 1] - reqs.hash_off[i]
    full = full_blocks_nb(p, reqs.prompt[i])
    if n > full:
        n = full
    k = 0
    while k < n:
        if cached_block_nb(kv, r, reqs.hashes[reqs.hash_off[i] + k]) == NO_ID:
            break
        k += 1
    return k


# ---- allocation ----


@njit(cache=True, nogil=True, _nrt=False)
def acquire_slot_nb(kv, reqs, r, i):
    """Give request i a block-list slot on replica r.

    Mutates: kv.slot_*, kv.req_slot, kv.req_cached, reqs.blocks.
    Returns: False when no slot is left (broken invariant: slots = max running requests).
    """
    top = kv.slot_top[r]
    if top == 0:
        return False
    top -= 1
    kv.req_slot[i] = kv.slot_stack[r, top]
    kv.slot_top[r] = top
    reqs.blocks[i] = 0
    kv.req_cached[i] = 0
    return True


@njit(cache=True, nogil=True, _nrt=False)
def touch_hit_nb(kv, reqs, r, i, n_hit):
    """Take the first n_hit cached blocks of request i: one more reference each, off the free
    queue if they were free.

    NOTE(vllm): BlockPool.touch via allocate_new_computed_blocks; hit blocks count as cached.
    Mutates: kv (blk, free-block queue, lists, memo_req, req_cached), reqs.blocks.
    Returns: nothing.
    """
    s = kv.req_slot[i]
    kv.memo_req[r] = NO_ID
    for k in range(n_hit):
        b = cached_block_nb(kv, r, block_hash_nb(reqs, i, k))
        touch_nb(kv, r, b)
        kv.lists[r, s, k] = b
    reqs.blocks[i] = n_hit
    kv.req_cached[i] = n_hit


@njit(cache=True, nogil=True, _nrt=False)
def allocate_new_nb(kv, reqs, r, i, n):
    """Append n blocks from the free queue to request i (caller checked nfree).

    Mutates: kv (see block_pool.get_new_blocks_nb), reqs.blocks.
    Returns: nothing.
    """
    get_new_blocks_nb(kv, r, kv.req_slot[i], reqs.blocks[i], n)
    reqs.blocks[i] += n


@njit(cache=True, nogil=True, _nrt=False)
def cache_full_blocks_nb(kv, reqs, p, r, i, n_tokens):
    """Cache the blocks of request i that are full once n_tokens are computed.

    NOTE(vllm): kv_cache_manager.allocate_slots caches min(computed + scheduled, num_tokens)
    tokens at schedule time, so a request admitted later in the same step can already hit them.
    Only blocks under the workload's hash list are entered here (another request may hit them
    at once); private ones (past the list) are only counted in req_cached: nobody can look
    them up while their request holds them, so their block records are marked when the request
    lets them go (_mark_private_nb), and a request without shared hashes costs no work per
    block here.
    Mutates: kv.hash, kv.blk (dup links), kv.ht, kv.req_cached.
    Returns: nothing.
    """
    full = full_blocks_nb(p, n_tokens)
    lo = reqs.hash_off[i]
    shared = reqs.hash_off[i + 1] - lo
    top = full if full < shared else shared
    if kv.req_cached[i] < top:
        s = kv.req_slot[i]
        mask = kv.ht.shape[1] - 1
        for k in range(kv.req_cached[i], top):
            if k + PREFETCH_AHEAD < shared:
                prefetch_nb(kv.ht, (r, reqs.hashes[lo + k + PREFETCH_AHEAD] & mask, HT_KEY))
            cache_block_nb(kv, r, kv.lists[r, s, k], reqs.hashes[lo + k])
    if full > kv.req_cached[i]:
        kv.req_cached[i] = full


@njit(cache=True, nogil=True, _nrt=False)
def _mark_private_nb(kv, reqs, r, i):
    """Mark request i's cached private blocks (list positions from the end of its hash list
    to req_cached) that are not marked yet as cached under their private hash, without entering
    them into the hash map, as cache_full_blocks_nb leaves them to be: before they are freed
    (so the free queue treats them as cached blocks) or indexed at a preemption.

    A private block is unmarked (NO_HASH) exactly while its request holds it and has not
    exposed it: hits of a re-admission take blocks that are marked and indexed already.
    Mutates: kv.hash, kv.blk (dup link).
    Returns: nothing.
    """
    s = kv.req_slot[i]
    shared = reqs.hash_off[i + 1] - reqs.hash_off[i]
    top = kv.req_cached[i]
    for k in range(shared, top):
        if k + PREFETCH_AHEAD < top:  # the records of the block PREFETCH_AHEAD on
            ahead = kv.lists[r, s, k + PREFETCH_AHEAD]
            prefetch_nb(kv.hash, (r, ahead))
            prefetch_nb(kv.blk, (r, ahead, 0))
        b = kv.lists[r, s, k]
        if kv.hash[r, b] == NO_HASH:
            cache_block_unindexed_nb(kv, r, b, block_hash_nb(reqs, i, k))


@njit(cache=True, nogil=True, _nrt=False)
def index_private_blocks_nb(kv, reqs, r, i):
    """Enter request i's cached private blocks into the hash map before it is preempted, so
    that its re-admission can hit them (in caching order, as if entered when cached).

    Mutates: kv.blk (dup links), kv.ht, kv.memo_req.
    Returns: nothing.
    """
    s = kv.req_slot[i]
    if s == NO_ID:
        return
    _mark_private_nb(kv, reqs, r, i)
    shared = reqs.hash_off[i + 1] - reqs.hash_off[i]
    for k in range(shared, kv.req_cached[i]):
        b = kv.lists[r, s, k]
        if kv.blk[r, b, BLK_DUP] == BLK_UNINDEXED:
            insert_block_nb(kv, r, b, kv.hash[r, b])


# ---- free ----


@njit(cache=True, nogil=True, _nrt=False)
def free_request_blocks_nb(kv, reqs, r, i):
    """Release every block of request i, last block first (block_pool.free_list_blocks_nb),
    and its list slot.

    Mutates: kv (blk, free-block queue, slot stack, req_slot, req_cached), reqs.blocks.
    Returns: blocks released.
    """
    s = kv.req_slot[i]
    if s == NO_ID:
        return 0
    n = reqs.blocks[i]
    _mark_private_nb(kv, reqs, r, i)
    free_list_blocks_nb(kv, r, s, n)
    kv.slot_stack[r, kv.slot_top[r]] = s
    kv.slot_top[r] += 1
    kv.req_slot[i] = NO_ID
    reqs.blocks[i] = 0
    kv.req_cached[i] = 0
    return n
