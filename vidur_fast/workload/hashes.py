"""Prefix-block hashes: map a trace's block ids onto the engine's KV block size.

The per-element work runs in kernels/block_hashes.py: uint64 (wrapping) arithmetic with a fixed
splitmix64-style mixer, so the values are identical in every process (Python's hash() is
salted per process).

Semantics: a trace gives, per request, ids of consecutive source blocks of `src_block` tokens.
We first chain them into prefix hashes P_j = combine(P_{j-1}, id_j): equal P_j means equal ids
0..j. Engine block k (tokens [k*b, (k+1)*b)) then gets h_k = mix(P_{j(k)}, k) where
j(k) = ((k+1)*b - 1) // src_block is the source block holding its last token. So two requests
share h_k iff they share every source id up to the one covering block k (the prefix property),
and engine blocks inside one source block still get distinct hashes (k is mixed in:
h_k = fmix64(P_{j(k)} + k*C), one pass since P_j is already well mixed).
"""

import numpy as np


def _kernels():
    # imported on first use: configs import this package, and loading numba costs ~0.3 s
    from vidur_fast.jit_start import start_numba_target
    from vidur_fast.kernels import block_hashes

    start_numba_target()
    return block_hashes


def as_u64(x: np.ndarray | int) -> np.ndarray:
    """int64 (two's complement) -> uint64 view; Python ints via int64."""
    return np.ascontiguousarray(np.asarray(x, dtype=np.int64)).view(np.uint64)


def _i64(x: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(x, dtype=np.int64)


def _check_csr(offsets: np.ndarray, size: int, where: str) -> None:
    # the kernels index without bounds checks
    if offsets.size == 0 or offsets[0] != 0 or offsets[-1] != size or np.any(np.diff(offsets) < 0):
        raise ValueError(f"{where}: offsets must rise from 0 to {size}")


def combine(h: np.ndarray, v: np.ndarray) -> np.ndarray:
    """Order-sensitive mix of running hashes h with values v (uint64 arrays of one size)."""
    h = np.ascontiguousarray(h, dtype=np.uint64)
    v = np.ascontiguousarray(v, dtype=np.uint64)
    if h.shape != v.shape:
        raise ValueError(f"combine: shapes differ ({h.shape} vs {v.shape})")
    out = np.empty(h.size, dtype=np.uint64)
    _kernels().combine_arrays_nb(out, h.ravel(), v.ravel())
    return out.reshape(h.shape)


def offsets_from_counts(counts: np.ndarray) -> np.ndarray:
    out = np.zeros(len(counts) + 1, dtype=np.int64)
    np.cumsum(counts, out=out[1:])
    return out


def prefix_chain(offsets: np.ndarray, ids: np.ndarray) -> np.ndarray:
    """Chained prefix hash (uint64) of every source block: P_j = combine(P_{j-1}, id_j)."""
    offsets = _i64(offsets)
    _check_csr(offsets, ids.size, "prefix_chain")
    out = np.empty(ids.size, dtype=np.uint64)
    _kernels().chain_prefix_nb(out, offsets, as_u64(ids))
    return out


def derive_block_hashes(
    offsets: np.ndarray,
    ids: np.ndarray,
    src_block: int,
    engine_block: int,
    engine_counts: np.ndarray,
) -> tuple[np.ndarray, np.ndarray]:
    """Engine-block hashes (CSR) from source block ids at another block size.

    engine_counts[i] engine blocks are derived for request i; the caller guarantees that the
    source ids cover them, i.e. ((count*engine_block) - 1) // src_block < number of ids.
    Returns (hash_offsets int64[n+1], hashes int64[m]) with values in [1, 2^63 - 1].
    """
    offsets, engine_counts = _i64(offsets), _i64(engine_counts)
    _check_csr(offsets, ids.size, "derive_block_hashes")
    if engine_counts.size != offsets.size - 1 or np.any(engine_counts < 0):
        raise ValueError("derive_block_hashes: need one count >= 0 per request")
    engine_offsets = offsets_from_counts(engine_counts)
    out = np.empty(int(engine_offsets[-1]), dtype=np.int64)
    bad = _kernels().derive_block_hashes_nb(
        out, offsets, as_u64(ids), engine_offsets, int(src_block), int(engine_block)
    )
    if bad >= 0:
        raise ValueError(f"derive_block_hashes: request {bad} has too few source ids")
    return engine_offsets, out


def private_block_hashes(keys: np.ndarray, k: np.ndarray) -> np.ndarray:
    """Hashes for blocks no other request shares: keyed by a per-request key and position."""
    keys, k = as_u64(keys), _i64(k)
    if keys.shape != k.shape:
        raise ValueError(f"private_block_hashes: shapes differ ({keys.shape} vs {k.shape})")
    out = np.empty(keys.size, dtype=np.int64)
    _kernels().private_block_hashes_nb(out, keys, k)
    return out


def gather_rows(
    offsets: np.ndarray, hashes: np.ndarray, pick: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """The hash lists (CSR) of rows pick[0], pick[1], ... (rows may repeat)."""
    counts = np.diff(offsets)[pick]
    new_offsets = offsets_from_counts(counts)
    start = np.repeat(offsets[pick] - new_offsets[:-1], counts)
    return new_offsets, hashes[start + np.arange(int(new_offsets[-1]), dtype=np.int64)]


def fit_block_hashes(
    offsets: np.ndarray,
    hashes: np.ndarray,
    keep: np.ndarray,
    need: np.ndarray,
    private_keys: np.ndarray,
) -> tuple[np.ndarray, np.ndarray]:
    """Resize each request's hash list after its lengths changed (scaling, clipping).

    Request i keeps its first min(len_i, keep[i]) hashes and, if that is below need[i], is
    padded with private hashes up to need[i] (the extra tokens are unique to the request).
    """
    have = np.diff(offsets)
    kept = np.minimum(have, keep)
    new_counts = np.maximum(kept, need)
    if np.array_equal(new_counts, have):
        return offsets, hashes
    if private_keys.size != have.size or np.any(new_counts < 0):
        raise ValueError("fit_block_hashes: need one key and a count >= 0 per request")
    new_offsets = offsets_from_counts(new_counts)
    out = np.empty(int(new_offsets[-1]), dtype=np.int64)
    _kernels().fit_block_hashes_nb(
        out, _i64(offsets), _i64(hashes), _i64(kept), new_offsets, as_u64(private_keys)
    )
    return new_offsets, out


def gather_segments(
    values: np.ndarray, offsets: np.ndarray, order: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """CSR int64 lists reordered: new list s is old list order[s]. Returns (offsets, values)."""
    offsets, order = _i64(offsets), _i64(order)
    _check_csr(offsets, values.size, "gather_segments")
    new_offsets = offsets_from_counts(np.diff(offsets)[order])
    out = np.empty(int(new_offsets[-1]), dtype=np.int64)
    _kernels().gather_segments_nb(out, _i64(values), offsets[:-1][order], new_offsets)
    return new_offsets, out
