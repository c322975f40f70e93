"""Counted KV-block accounting (Vidur's allocation map: counts per request, no block ids), and
the time integral of allocated blocks that every allocator keeps (Reps.kv_area).

The paged pool (vLLM v1 with prefix caching) lives in block_pool.py / hash_map.py /
req_blocks.py; kv.py picks between the two for the vLLM v1 scheduler.
"""

from numba import njit


@njit(cache=True, nogil=True, _nrt=False, inline="always")
def full_blocks_nb(p, n_tokens):
    """Whole blocks in n_tokens (floor(n_tokens / block size); by a shift for a power of two).

    Mutates: nothing.
    Returns: int.
    """
    if p.block_shift >= 0:
        return n_tokens >> p.block_shift
    return n_tokens // p.block_size


@njit(cache=True, nogil=True, _nrt=False, inline="always")
def blocks_for_nb(p, n_tokens):
    """Blocks that hold n_tokens (ceil(n_tokens / block size)), n_tokens >= 0.

    Mutates: nothing.
    Returns: int.
    """
    return full_blocks_nb(p, n_tokens + p.block_size - 1)


@njit(cache=True, nogil=True, _nrt=False)
def accrue_kv_area_nb(reps, r, now_ns):
    """Accumulate the time integral of allocated blocks up to now.

    Mutates: reps.kv_area, reps.kv_last_ns.
    Returns: nothing.
    """
    if now_ns > reps.kv_last_ns[r]:
        reps.kv_area[r] += reps.alloc_blocks[r] * float(now_ns - reps.kv_last_ns[r])
        reps.kv_last_ns[r] = now_ns


@njit(cache=True, nogil=True, _nrt=False)
def alloc_nb(reps, reqs, r, i, n, now_ns):
    """Give n more blocks to request i on replica r (caller checked capacity).

    Mutates: reps.alloc_*, reps.kv_area / kv_last_ns / kv_peak, reqs.blocks.
    Returns: nothing.
    """
    if n <= 0:
        return
    accrue_kv_area_nb(reps, r, now_ns)
    if reqs.blocks[i] == 0:
        reps.alloc_reqs[r] += 1
    reqs.blocks[i] += n
    reps.alloc_blocks[r] += n
    if reps.alloc_blocks[r] > reps.kv_peak[r]:
        reps.kv_peak[r] = reps.alloc_blocks[r]


@njit(cache=True, nogil=True, _nrt=False)
def release_nb(reps, reqs, r, i, now_ns):
    """Free all (counted) blocks of request i on replica r.

    Mutates: reps.alloc_*, reps.kv_area / kv_last_ns, reqs.blocks.
    Returns: blocks freed.
    """
    n = reqs.blocks[i]
    if n == 0:
        return 0
    accrue_kv_area_nb(reps, r, now_ns)
    reps.alloc_blocks[r] -= n
    reps.alloc_reqs[r] -= 1
    reqs.blocks[i] = 0
    return n


@njit(cache=True, nogil=True, _nrt=False)
def can_allocate_request_nb(reps, reqs, p, r, i):
    """Vidur vLLM/Sarathi admission test: a new request needs its whole prompt above the
    watermark (or, on an empty replica, just to fit); an admitted one needs one free block.

    Mutates: nothing.
    Returns: bool.
    """
    free = p.usable_blocks - reps.alloc_blocks[r]
    if reqs.blocks[i] == 0:
        need = blocks_for_nb(p, reqs.prompt[i])
        if reps.alloc_blocks[r] == 0:
            # NOTE(fix): a restart can grow a prompt into the watermark; an empty replica still
            # admits it, else it would wait forever (Vidur hangs here)
            return need <= p.usable_blocks
        return free - need >= p.watermark_blocks
    return free >= 1


@njit(cache=True, nogil=True, _nrt=False)
def allocate_request_nb(reps, reqs, p, r, i, now_ns):
    """Vidur vLLM/Sarathi allocation: the whole prompt on admission, then one block whenever
    the next token crosses a block boundary.

    Mutates: reps, reqs.blocks.
    Returns: nothing.
    """
    if reqs.blocks[i] == 0:
        alloc_nb(reps, reqs, r, i, blocks_for_nb(p, reqs.prompt[i]), now_ns)
        return
    reserved = reqs.blocks[i] * p.block_size
    if reqs.processed[i] > reserved:
        alloc_nb(reps, reqs, r, i, 1, now_ns)
