"""The TBT histogram's memo of the last gap changes no count: every gap lands in the bucket of
its logarithm, whether it repeats the gap before it or not."""

import math

import numpy as np
from vidur_fast.kernels.lifecycle import HIST_MIN_NS, HIST_RATIO, hist_add_nb

from vidur_fast.engine.state import HIST_BUCKETS, alloc_hist, hist_counts


def _bucket(gap_ns: int) -> int:
    if gap_ns <= HIST_MIN_NS:
        return 0
    k = int(math.log(gap_ns / HIST_MIN_NS) / math.log(HIST_RATIO)) + 1
    return min(k, HIST_BUCKETS - 1)


def test_repeated_and_changing_gaps_land_in_their_own_buckets():
    rng = np.random.default_rng(7)
    distinct = rng.integers(0, 10**13, size=400)  # 0 ns .. ~3 h: both ends clamp
    gaps = np.concatenate([distinct, [0, 1000, 1001, 10**15]])
    # runs of repeats, as the decodes of one batch have, interleaved with fresh gaps
    gaps = np.repeat(gaps, rng.integers(1, 6, size=gaps.size))
    hist = alloc_hist()
    expected = np.zeros(HIST_BUCKETS, dtype=np.int64)
    for g in gaps:
        hist_add_nb(hist, np.int64(g), np.int64(1))
        expected[_bucket(int(g))] += 1
    assert np.array_equal(hist_counts(hist), expected)
    assert hist_counts(hist).sum() == gaps.size


def test_a_new_histogram_remembers_no_gap():
    hist = alloc_hist()
    hist_add_nb(hist, np.int64(0), np.int64(1))  # the memo's empty mark is no gap (gaps are >= 0)
    assert hist_counts(hist)[0] == 1 and hist_counts(hist).sum() == 1


def test_a_run_counted_at_once_equals_its_gaps_one_by_one():
    gaps = [5_000, 5_000, 5_000, 7_000_000, 7_000_000, 5_000, 0, 10**15]
    one_by_one, runs = alloc_hist(), alloc_hist()
    for g in gaps:
        hist_add_nb(one_by_one, np.int64(g), np.int64(1))
    for g, n in ((5_000, 3), (7_000_000, 2), (5_000, 1), (0, 1), (10**15, 1)):
        hist_add_nb(runs, np.int64(g), np.int64(n))
    assert np.array_equal(hist_counts(one_by_one), hist_counts(runs))
    assert hist_counts(runs).sum() == len(gaps)
