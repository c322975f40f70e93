"""Engine state allocation: one kernel signature whatever the inputs look like."""

import numba
import numpy as np

from vidur_fast.engine.state import alloc_reqs, kernel_array


def _frozen(x):
    x = np.array(x)
    x.flags.writeable = False
    return x


def test_read_only_inputs_give_the_same_kernel_types():
    n = 5
    plain = alloc_reqs(
        np.arange(n), np.full(n, 10), np.full(n, 3), np.full(n, -1), np.zeros(n + 1, np.int64)
    )
    frozen = alloc_reqs(
        _frozen(np.arange(n)),
        _frozen(np.full(n, 10, np.int32)),
        _frozen(np.full(n, 3)),
        _frozen(np.full(n, -1)),
        _frozen(np.zeros(n + 1, np.int64)),
    )
    assert numba.typeof(frozen) == numba.typeof(plain)


def test_hash_lists_read_only_or_not_give_the_same_kernel_types():
    n = 2
    args = (np.arange(n), np.full(n, 32), np.full(n, 3), np.full(n, -1), np.array([0, 2, 4]))
    hashes = np.arange(1, 5, dtype=np.int64)
    plain = alloc_reqs(*args, hashes)
    frozen = alloc_reqs(*args, _frozen(hashes))
    none = alloc_reqs(*args[:4], np.zeros(n + 1, np.int64))
    assert numba.typeof(frozen) == numba.typeof(plain) == numba.typeof(none)
    assert np.shares_memory(plain.hashes, hashes)  # never copied when already int64


def test_kernel_array_copies_only_when_needed():
    x = np.zeros(4)
    assert kernel_array(x, np.float64) is x
    strided = np.zeros(8)[::2]
    assert kernel_array(strided, np.float64).flags.c_contiguous
    y = kernel_array(_frozen(x), np.float64)
    assert y.flags.writeable and y is not x


def test_sparse_zeros_are_zeros_of_the_same_kernel_type():
    from vidur_fast.engine.state import sparse_zeros

    for shape in ((3, 5), (64, 1024, 40)):  # below and above numpy's huge-page threshold
        a = sparse_zeros(shape, np.int32)
        assert a.shape == shape and a.dtype == np.int32 and not a.any()
        assert a.flags.c_contiguous and a.flags.writeable
        assert numba.typeof(a) == numba.typeof(np.zeros(shape, np.int32))
        a[(-1,) * len(shape)] = 7
        assert a.sum() == 7
