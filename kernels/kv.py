"""KV blocks of the vLLM v1 scheduler, behind one facade: the counted allocator (blocks.py)
without prefix caching, the paged pool (block_pool.py, hash_map.py, req_blocks.py) with it.

The scheduler asks the same questions either way; only these kernels look at
p.enable_prefix_caching. With both back-ends the decisions are the same when nothing is cached.
With prefix caching, a replica of a run without hashes keeps its pool as counts until its
first preemption (block_counts.py): the same decisions and counters at a few counter updates
per allocation or free.
"""

from numba import njit
from vidur_fast.kernels.block_counts import counted_free_nb, counted_pop_nb, materialize_nb
from vidur_fast.kernels.blocks import accrue_kv_area_nb, alloc_nb, release_nb
from vidur_fast.kernels.dtypes import NO_ID
from vidur_fast.kernels.req_blocks import (
    acquire_slot_nb,
    allocate_new_nb,
    cache_full_blocks_nb,
    free_request_blocks_nb,
    index_private_blocks_nb,
    longest_cached_prefix_nb,
    lookup_hit_nb,
    touch_hit_nb,
)


@njit(cache=True, nogil=True, _nrt=False)
def free_blocks_nb(reps, kv, p, r):
    """Blocks a request may take on replica r (free ones, cached-but-unreferenced included).

    Mutates: nothing.
    Returns: int.
    """
    if p.enable_prefix_caching:
        return kv.nfree[r]
    return p.usable_blocks - reps.alloc_blocks[r]


@njit(cache=True, nogil=True, _nrt=False)
def lookup_cached_nb(kv, reqs, p, r, i, n_tokens):
    """Cached prefix of request i (whose sequence is n_tokens long) on replica r.

    Mutates: the lookup memo (req_blocks.lookup_hit_nb).
    Returns: (hit blocks, hit blocks that are free); (0, 0) without prefix caching or on a
    counted replica.
    """
    # a counted replica has no block anyone can hit (block_counts.py)
    if p.enable_prefix_caching and kv.counted[r] == 0:
        return lookup_hit_nb(kv, reqs, p, r, i, n_tokens)
    return 0, 0


@njit(cache=True, nogil=True, _nrt=False)
def cached_prefix_blocks_nb(kv, reqs, p, r, i):
    """Full blocks of request i's prompt cached on replica r (the prefix-aware router's
    estimate); 0 without prefix caching.

    Mutates: nothing.
    Returns: number of blocks.
    """
    if p.enable_prefix_caching:
        return longest_cached_prefix_nb(kv, reqs, p, r, i)
    return 0


@njit(cache=True, nogil=True, _nrt=False)
def _pool_used_nb(kv, p, r):
    """Blocks of replica r's pool in use: its blocks (p.usable_blocks; a replica of a pool
    with fewer blocks than the largest owns only the first ones) less the free ones.

    Mutates: nothing.
    Returns: int.
    """
    owned = kv.blk.shape[1]
    if p.usable_blocks < owned:
        owned = p.usable_blocks
    return owned - kv.nfree[r]


@njit(cache=True, nogil=True, _nrt=False)
def _account_pool_nb(reps, kv, p, r):
    """Refresh the used-block count and its peak after the pool changed.

    Mutates: reps.alloc_blocks, reps.kv_peak.
    Returns: nothing.
    """
    reps.alloc_blocks[r] = _pool_used_nb(kv, p, r)
    if reps.alloc_blocks[r] > reps.kv_peak[r]:
        reps.kv_peak[r] = reps.alloc_blocks[r]


@njit(cache=True, nogil=True, _nrt=False, inline="always")
def _take_new_nb(kv, reqs, r, i, n):
    """Append n free blocks to request i: counted, or popped from the paged pool's queue.

    Mutates: kv, reqs.blocks.
    Returns: nothing.
    """
    if kv.counted[r] != 0:
        counted_pop_nb(kv, r, n)
        reqs.blocks[i] += n
    else:
        allocate_new_nb(kv, reqs, r, i, n)


@njit(cache=True, nogil=True, _nrt=False)
def admit_blocks_nb(reps, kv, reqs, p, r, i, hit_blocks, need, n_tokens, seq, now_ns):
    """Blocks of waiting request i (sequence of seq tokens) as it is admitted: its hit_blocks
    cached blocks and `need` new ones; the blocks full once n_tokens are computed are cached.

    NOTE(vllm): allocate_slots touches the hit blocks before popping new ones, so a hit block
    that sat in the free queue can never be evicted by its own request's allocation.
    Mutates: reps (blocks, peak, kv area), kv, reqs.blocks.
    Returns: nothing.
    """
    if not p.enable_prefix_caching:
        alloc_nb(reps, reqs, r, i, need, now_ns)
        return
    accrue_kv_area_nb(reps, r, now_ns)
    if not acquire_slot_nb(kv, reqs, r, i):
        raise ValueError("block-list slots exhausted: more running requests than max_num_seqs")
    reps.alloc_reqs[r] += 1
    touch_hit_nb(kv, reqs, r, i, hit_blocks)
    _take_new_nb(kv, reqs, r, i, need)
    cache_full_blocks_nb(kv, reqs, p, r, i, n_tokens)
    kv.query_tokens[r] += seq
    kv.hit_tokens[r] += hit_blocks * p.block_size
    _account_pool_nb(reps, kv, p, r)


@njit(cache=True, nogil=True, _nrt=False)
def grow_blocks_nb(reps, kv, reqs, p, r, i, need, n_tokens, now_ns):
    """Give running request i `need` more blocks; the blocks full once n_tokens are computed
    are cached.

    Mutates: reps (blocks, peak, kv area), kv, reqs.blocks.
    Returns: nothing.
    """
    if not p.enable_prefix_caching:
        alloc_nb(reps, reqs, r, i, need, now_ns)
        return
    accrue_kv_area_nb(reps, r, now_ns)
    _take_new_nb(kv, reqs, r, i, need)
    cache_full_blocks_nb(kv, reqs, p, r, i, n_tokens)
    _account_pool_nb(reps, kv, p, r)


@njit(cache=True, nogil=True, _nrt=False)
def cache_computed_nb(kv, reqs, p, r, i, n_tokens):
    """Cache the blocks of request i that are full once n_tokens are computed (nothing without
    prefix caching).

    Mutates: kv.
    Returns: nothing.
    """
    if p.enable_prefix_caching:
        cache_full_blocks_nb(kv, reqs, p, r, i, n_tokens)


@njit(cache=True, nogil=True, _nrt=False, inline="always")
def _free_counted_nb(kv, reqs, r, i):
    """Release request i's blocks and list slot on counted replica r: its cached blocks (the
    full ones it computed, all private: nothing is shared without hashes) go to the tail of
    the free queue, the rest to the head, as req_blocks.free_request_blocks_nb puts them.

    Mutates: kv (nfree, free_cached, slot stack, req_slot, req_cached), reqs.blocks.
    Returns: blocks released.
    """
    n = reqs.blocks[i]
    counted_free_nb(kv, r, n, kv.req_cached[i])
    kv.slot_stack[r, kv.slot_top[r]] = kv.req_slot[i]
    kv.slot_top[r] += 1
    kv.req_slot[i] = NO_ID
    reqs.blocks[i] = 0
    kv.req_cached[i] = 0
    return n


@njit(cache=True, nogil=True, _nrt=False)
def free_request_nb(reps, kv, reqs, p, r, i, now_ns):
    """Free every block of request i on replica r (finished or preempted).

    Mutates: reps (blocks, kv area), kv, reqs.blocks.
    Returns: blocks freed.
    """
    if not p.enable_prefix_caching:
        return release_nb(reps, reqs, r, i, now_ns)
    if kv.req_slot[i] == NO_ID:
        return 0
    accrue_kv_area_nb(reps, r, now_ns)
    if kv.counted[r] != 0:
        n = _free_counted_nb(kv, reqs, r, i)
    else:
        n = free_request_blocks_nb(kv, reqs, r, i)
    reps.alloc_blocks[r] = _pool_used_nb(kv, p, r)
    reps.alloc_reqs[r] -= 1
    return n


@njit(cache=True, nogil=True, _nrt=False)
def free_preempted_nb(reps, kv, reqs, p, r, i, now_ns):
    """Free the blocks of request i as it is preempted; its cached private blocks enter the
    hash map first, so that its re-admission can hit them.

    Mutates: reps (blocks, kv area), kv, reqs.blocks.
    Returns: blocks freed.
    """
    if p.enable_prefix_caching:
        if kv.counted[r] != 0:
            # its re-admission may hit its own blocks: from now on they need ids
            materialize_nb(reps, kv, reqs, r, i)
        index_private_blocks_nb(kv, reqs, r, i)
    return free_request_nb(reps, kv, reqs, p, r, i, now_ns)
