"""The block-hash kernels against the whole-array numpy version, on random and edge inputs.

Hash values feed prefix-cache hits (and the vLLM replays), so they must never drift: besides
the differential checks, a few values are pinned.
"""

import numpy as np
import pytest

from tests.reference import hashes_numpy as ref
from vidur_fast.workload import hashes
from vidur_fast.workload.table import make_table


def _random_trace(rng: np.random.Generator, n: int, src_block: int, engine_block: int):
    """CSR ids (some requests empty, some ids negative or huge) and engine counts they cover."""
    n_ids = rng.integers(0, 12, n)
    n_ids[rng.random(n) < 0.2] = 0
    offsets = hashes.offsets_from_counts(n_ids)
    # few distinct ids so that requests share prefixes
    ids = rng.choice(np.array([0, 1, 2, -1, 2**62, -(2**63)]), int(offsets[-1]))
    max_blocks = n_ids * src_block // engine_block
    counts = np.floor(rng.random(n) * (max_blocks + 1)).astype(np.int64)
    return offsets, ids, counts


@pytest.mark.parametrize(
    ("src_block", "engine_block"), [(512, 16), (16, 16), (16, 32), (16, 64), (32, 16), (4, 2)]
)
@pytest.mark.parametrize("seed", range(4))
def test_derive_block_hashes_matches_numpy(src_block, engine_block, seed):
    rng = np.random.default_rng(seed)
    offsets, ids, counts = _random_trace(rng, 60, src_block, engine_block)
    got = hashes.derive_block_hashes(offsets, ids, src_block, engine_block, counts)
    want = ref.derive_block_hashes(offsets, ids, src_block, engine_block, counts)
    np.testing.assert_array_equal(got[0], want[0])
    np.testing.assert_array_equal(got[1], want[1])
    assert got[1].dtype == np.int64 and np.all(got[1] >= 1)
    np.testing.assert_array_equal(hashes.prefix_chain(offsets, ids), ref.prefix_chain(offsets, ids))


def test_no_requests_and_no_blocks():
    empty = np.zeros(0, np.int64)
    off, h = hashes.derive_block_hashes(np.zeros(1, np.int64), empty, 512, 16, empty)
    assert off.tolist() == [0] and h.size == 0
    off, h = hashes.derive_block_hashes(np.array([0, 0, 2]), np.array([1, 2]), 4, 8, [0, 0])
    assert off.tolist() == [0, 0, 0] and h.size == 0


def test_pinned_values():
    off, h = hashes.derive_block_hashes(
        np.array([0, 3, 3, 5]), np.array([0, 7, -1, 2**62, 5]), 4, 2, np.array([5, 0, 4])
    )
    assert off.tolist() == [0, 5, 5, 9]
    assert h.tolist() == [
        8223707631820047964,
        8598077192004987266,
        5492891979262501087,
        1215066191241591012,
        2336986167688932148,
        6083366272137879426,
        8745584893424829531,
        4014563305528561945,
        3079022865214620761,
    ]
    _, h = hashes.derive_block_hashes(np.array([0, 4]), np.array([11, 12, 13, 14]), 16, 32, [2])
    assert h.tolist() == [3432581639700542040, 6807012639896473019]
    private = hashes.private_block_hashes(np.array([0, 3, -2]), np.array([0, 1, 70]))
    assert private.tolist() == [5011182988233782081, 2285317434127881244, 2692427389003241026]
    mixed = hashes.combine(np.array([1, 2**64 - 1], np.uint64), np.array([0, 5], np.uint64))
    assert mixed.tolist() == [2158877437495972032, 16241298815930264630]


def test_too_few_ids_is_refused():
    with pytest.raises(ValueError, match="request 1 has too few source ids"):
        hashes.derive_block_hashes(np.array([0, 1, 2]), np.array([1, 2]), 16, 16, [1, 2])
    with pytest.raises(ValueError, match="offsets"):
        hashes.derive_block_hashes(np.array([0, 3]), np.array([1, 2]), 16, 16, [1])


@pytest.mark.parametrize("seed", range(6))
def test_fit_block_hashes_matches_numpy(seed):
    rng = np.random.default_rng(seed)
    n = 50
    have = rng.integers(0, 9, n)
    offsets = hashes.offsets_from_counts(have)
    values = rng.integers(1, 2**63 - 1, int(offsets[-1]), dtype=np.int64)
    keep = rng.integers(0, 12, n)
    need = np.minimum(rng.integers(0, 12, n), keep + rng.integers(0, 3, n))
    keys = rng.integers(-(2**63), 2**63 - 1, n, dtype=np.int64)
    got = hashes.fit_block_hashes(offsets, values, keep, need, keys)
    want = ref.fit_block_hashes(offsets, values, keep, need, keys)
    np.testing.assert_array_equal(got[0], want[0])
    np.testing.assert_array_equal(got[1], want[1])


def test_private_hashes_and_combine_match_numpy():
    rng = np.random.default_rng(1)
    keys = rng.integers(-(2**63), 2**63 - 1, 1000, dtype=np.int64)
    k = rng.integers(0, 10**6, 1000)
    np.testing.assert_array_equal(
        hashes.private_block_hashes(keys, k), ref.private_block_hashes(keys, k)
    )
    h, v = keys.view(np.uint64), rng.integers(0, 2**63, 1000).view(np.uint64)
    np.testing.assert_array_equal(hashes.combine(h, v), ref.combine(h, v))
    assert hashes.combine(h[:0], v[:0]).size == 0


def test_make_table_reorders_hash_lists_with_their_requests():
    rng = np.random.default_rng(3)
    n = 40
    arrival = rng.integers(0, 10, n).astype(np.float64)
    counts = rng.integers(0, 5, n)
    offsets = hashes.offsets_from_counts(counts)
    values = np.arange(1, int(offsets[-1]) + 1, dtype=np.int64)
    table = make_table(
        arrival,
        counts * 16,
        np.ones(n),
        hash_offsets=offsets,
        hashes=values,
        hash_block_size=16,
    )
    order = np.argsort(arrival, kind="stable")
    for new, old in enumerate(order):
        np.testing.assert_array_equal(table.hashes_of(new), values[offsets[old] : offsets[old + 1]])
