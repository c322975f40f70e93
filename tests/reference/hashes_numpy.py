"""Whole-array numpy version of workload.hashes (the kernels in kernels/block_hashes.py must
give bit-identical values): uint64 wrapping arithmetic, one vectorised step per operation.
"""

import numpy as np
from vidur_fast.kernels.dtypes import NO_HASH

_U64 = np.uint64
_MASK63 = _U64(2**63 - 1)
_ODD_MUL = _U64(0x9E3779B97F4A7C15)  # golden-ratio constant, odd: h -> h*C is a bijection
_ID_SALT = _U64(0xD1B54A32D192ED03)
_CHAIN_START = _U64(0x6A09E667F3BCC909)  # fractional bits of sqrt(2)
_PRIVATE_START = _U64(0xBB67AE8584CAA73B)  # fractional bits of sqrt(3)


def _fmix64(z: np.ndarray) -> np.ndarray:
    """splitmix64 finalizer (bijective avalanche on uint64); overwrites and returns z."""
    z ^= z >> _U64(30)
    z *= _U64(0xBF58476D1CE4E5B9)
    z ^= z >> _U64(27)
    z *= _U64(0x94D049BB133111EB)
    z ^= z >> _U64(31)
    return z


def combine(h: np.ndarray, v: np.ndarray) -> np.ndarray:
    """Order-sensitive mix of a running hash h with a value v (both uint64 arrays)."""
    mixed = _fmix64(v ^ _ID_SALT)
    mixed += h * _ODD_MUL
    return _fmix64(mixed)


def as_u64(x: np.ndarray | int) -> np.ndarray:
    """int64 (two's complement) -> uint64 view; Python ints via int64."""
    return np.ascontiguousarray(np.asarray(x, dtype=np.int64)).view(_U64)


def to_hash_values(h: np.ndarray) -> np.ndarray:
    """Map uint64 hashes into [1, 2^63 - 1] as int64 (0 is NO_HASH); reuses h's memory."""
    h &= _MASK63
    out = h.view(np.int64)
    out[out == NO_HASH] = 1
    return out


def segment_positions(counts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """For CSR segment sizes, return (segment index, position inside the segment) per element."""
    counts = np.asarray(counts, dtype=np.int64)
    seg = np.repeat(np.arange(counts.size, dtype=np.int64), counts)
    starts = np.cumsum(counts) - counts
    return seg, np.arange(seg.size, dtype=np.int64) - starts[seg]


def offsets_from_counts(counts: np.ndarray) -> np.ndarray:
    out = np.zeros(len(counts) + 1, dtype=np.int64)
    np.cumsum(counts, out=out[1:])
    return out


def prefix_chain(offsets: np.ndarray, ids: np.ndarray) -> np.ndarray:
    """Chained prefix hash of every source block: P_j = combine(P_{j-1}, id_j) per request.

    Loops over positions (not rows): requests sorted longest first, so the ones still alive
    at position j are a prefix of that order and each step is one vectorised combine.
    """
    lengths = np.diff(offsets)
    order = np.argsort(-lengths, kind="stable")
    starts = offsets[:-1][order]
    sorted_len = lengths[order]
    out = np.empty(ids.size, dtype=_U64)
    if ids.size == 0:
        return out
    values = as_u64(ids)
    running = np.full(lengths.size, _CHAIN_START, dtype=_U64)
    max_len = int(sorted_len[0])
    alive = np.searchsorted(-sorted_len, -np.arange(max_len), side="left")
    for j in range(max_len):
        a = alive[j]
        idx = starts[:a] + j
        running[:a] = combine(running[:a], values[idx])
        out[idx] = running[:a]
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
    prefix = prefix_chain(offsets, ids)
    engine_counts = np.asarray(engine_counts, dtype=np.int64)
    engine_offsets = offsets_from_counts(engine_counts)
    # Outputs can reach 10^7+ elements: work in three buffers, in place (fresh memory is slow
    # to fault in on some VMs, and every temporary of this size is fresh memory).
    k = np.arange(engine_offsets[-1], dtype=np.int64)
    buf = np.repeat(engine_offsets[:-1], engine_counts)
    k -= buf  # position of each engine block inside its request
    np.add(k, 1, out=buf)
    buf *= engine_block
    buf -= 1
    buf //= src_block  # source block holding the block's last token
    src = np.repeat(offsets[:-1], engine_counts)
    src += buf
    hashes = np.take(prefix, src, out=buf.view(_U64))
    del src
    kv = k.view(_U64)
    kv *= _ODD_MUL
    hashes += kv
    return engine_offsets, to_hash_values(_fmix64(hashes))


def private_block_hashes(keys: np.ndarray, k: np.ndarray) -> np.ndarray:
    """Hashes for blocks no other request shares: keyed by a per-request key and position."""
    return to_hash_values(
        combine(combine(np.full(keys.size, _PRIVATE_START), as_u64(keys)), as_u64(k))
    )


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
    req, pos = segment_positions(new_counts)
    out = np.empty(req.size, dtype=np.int64)
    from_trace = pos < kept[req]
    out[from_trace] = hashes[offsets[:-1][req[from_trace]] + pos[from_trace]]
    pad = ~from_trace
    out[pad] = private_block_hashes(private_keys[req[pad]], pos[pad])
    return offsets_from_counts(new_counts), out
