"""Prefix-block hashes of a workload, one pass per output element (see workload.hashes).

All arithmetic is on uint64 (wrapping) with a fixed splitmix64-style mixer, so the values are
identical in every process. Inputs that are ids or keys come in as uint64 views of int64 data
(two's complement), positions as int64. Outputs are allocated by the caller; the kernels only
fill them (numpy's whole-array version needed several temporaries of the output's size, and
fresh memory of that size is slow to fault in).
"""

import numpy as np
from numba import njit
from vidur_fast.kernels.dtypes import NO_HASH

_M1 = np.uint64(0xBF58476D1CE4E5B9)
_M2 = np.uint64(0x94D049BB133111EB)
_ODD_MUL = np.uint64(0x9E3779B97F4A7C15)  # golden-ratio constant, odd: h -> h*C is a bijection
_ID_SALT = np.uint64(0xD1B54A32D192ED03)
_CHAIN_START = np.uint64(0x6A09E667F3BCC909)  # fractional bits of sqrt(2)
_PRIVATE_START = np.uint64(0xBB67AE8584CAA73B)  # fractional bits of sqrt(3)
_MASK63 = np.uint64(0x7FFFFFFFFFFFFFFF)
_S30 = np.uint64(30)
_S27 = np.uint64(27)
_S31 = np.uint64(31)

# ---- scalar mixers ----


@njit(cache=True, nogil=True, _nrt=False)
def _fmix64_nb(z):
    """splitmix64 finalizer (bijective avalanche on uint64).

    Mutates: nothing.
    Returns: uint64.
    """
    z = (z ^ (z >> _S30)) * _M1
    z = (z ^ (z >> _S27)) * _M2
    return z ^ (z >> _S31)


@njit(cache=True, nogil=True, _nrt=False)
def _combine_nb(h, v):
    """Order-sensitive mix of a running hash h with a value v (both uint64).

    Mutates: nothing.
    Returns: uint64.
    """
    return _fmix64_nb(_fmix64_nb(v ^ _ID_SALT) + h * _ODD_MUL)


@njit(cache=True, nogil=True, _nrt=False)
def _hash_value_nb(z):
    """Map a uint64 hash into [1, 2^63 - 1] (0 is NO_HASH).

    Mutates: nothing.
    Returns: int64.
    """
    h = np.int64(z & _MASK63)
    if h == NO_HASH:
        h = np.int64(1)
    return h


@njit(cache=True, nogil=True, _nrt=False)
def _private_hash_nb(key, k):
    """Hash of block k of a request no other request shares, keyed by the request's key.

    Mutates: nothing.
    Returns: int64 in [1, 2^63 - 1].
    """
    return _hash_value_nb(_combine_nb(_combine_nb(_PRIVATE_START, key), np.uint64(k)))


# ---- whole arrays ----


@njit(cache=True, nogil=True, _nrt=False)
def combine_arrays_nb(out, h, v):
    """Element-wise combine of running hashes h with values v (uint64 arrays, same size).

    Mutates: out.
    Returns: nothing.
    """
    for x in range(out.size):
        out[x] = _combine_nb(h[x], v[x])


@njit(cache=True, nogil=True, _nrt=False)
def chain_prefix_nb(out, offsets, ids):
    """Chained prefix hash of every source block: P_j = combine(P_{j-1}, id_j) per request.

    Mutates: out (uint64, one per id).
    Returns: nothing.
    """
    for i in range(offsets.size - 1):
        running = _CHAIN_START
        for x in range(offsets[i], offsets[i + 1]):
            running = _combine_nb(running, ids[x])
            out[x] = running


@njit(cache=True, nogil=True, _nrt=False)
def derive_block_hashes_nb(out, offsets, ids, engine_offsets, src_block, engine_block):
    """Engine-block hashes h_k = fmix64(P_{j(k)} + k*C), j(k) = ((k+1)*engine_block - 1)
    // src_block, mapped into [1, 2^63 - 1]; the prefix chain P runs along as k grows.

    Mutates: out (int64, engine_offsets[-1] of them).
    Returns: -1, or the first request whose ids do not cover its engine blocks (out partial).
    """
    for i in range(offsets.size - 1):
        lo = offsets[i]
        o = engine_offsets[i]
        count = engine_offsets[i + 1] - o
        if count > 0 and (count * engine_block - 1) // src_block >= offsets[i + 1] - lo:
            return i
        running = _CHAIN_START
        chained = 0  # ids of request i folded into running
        for k in range(count):
            j = ((k + 1) * engine_block - 1) // src_block
            while chained <= j:
                running = _combine_nb(running, ids[lo + chained])
                chained += 1
            out[o + k] = _hash_value_nb(_fmix64_nb(running + np.uint64(k) * _ODD_MUL))
    return -1


@njit(cache=True, nogil=True, _nrt=False)
def private_block_hashes_nb(out, keys, k):
    """Hashes of blocks no other request shares, keyed by per-block key (uint64) and position.

    Mutates: out (int64, one per key).
    Returns: nothing.
    """
    for x in range(out.size):
        out[x] = _private_hash_nb(keys[x], k[x])


@njit(cache=True, nogil=True, _nrt=False)
def fit_block_hashes_nb(out, offsets, hashes, kept, new_offsets, private_keys):
    """Request i's first kept[i] hashes, then private hashes up to its new count.

    Mutates: out (int64, new_offsets[-1] of them).
    Returns: nothing.
    """
    for i in range(kept.size):
        src = offsets[i]
        dst = new_offsets[i]
        n_keep = kept[i]
        for p in range(new_offsets[i + 1] - dst):
            if p < n_keep:
                out[dst + p] = hashes[src + p]
            else:
                out[dst + p] = _private_hash_nb(private_keys[i], p)


@njit(cache=True, nogil=True, _nrt=False)
def gather_segments_nb(out, values, starts, new_offsets):
    """CSR regroup: segment s of out is values[starts[s] : starts[s] + its new length].

    Mutates: out.
    Returns: nothing.
    """
    for s in range(starts.size):
        src = starts[s]
        dst = new_offsets[s]
        for p in range(new_offsets[s + 1] - dst):
            out[dst + p] = values[src + p]
