"""PoolParams carries every per-pool timing parameter: a TimingParams field added without a
pool column would make pool_timing_nb build a shorter tuple (a typing error at compile time)
or give pools the default instead of their own value."""

from vidur_fast.kernels.pools import PoolParams, one_pool
from vidur_fast.kernels.timing import TimingParams

# the same for every replica of a run: TimingParams fields that are not pool columns
SHARED = {"pp"}  # a pool's stage count is its SchedParams pp column


def test_every_timing_field_has_a_pool_column():
    missing = [f for f in TimingParams._fields if f not in PoolParams._fields and f not in SHARED]
    assert missing == []


def test_one_pool_fills_every_field_with_an_empty_array():
    p = one_pool()
    assert len(p) == len(PoolParams._fields)
    assert all(a.shape[0] == 0 for a in p)
