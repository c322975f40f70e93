"""The on-disk batch store gives back exactly the int64 values the kernel logged."""

import numpy as np
from numpy.testing import assert_array_equal

from vidur_fast.engine.batch_store import BatchStore
from vidur_fast.engine.state import alloc_log


def _fill(log, rows: dict[str, np.ndarray]) -> None:
    n = len(next(iter(rows.values())))
    for k, v in rows.items():
        getattr(log, k)[:n] = v
    log.n[0] = n


def test_spilled_counts_round_trip_and_widen_when_needed():
    log = alloc_log(8)
    store = BatchStore.for_log(log)
    first = {"replica": np.arange(8), "n_tokens": np.arange(8) * 1000, "start_ns": np.arange(8)}
    _fill(log, first)
    store.flush(log)
    # a count beyond int32 in a later chunk widens that column's file, earlier rows intact
    big = 1 << 40
    second = {"replica": np.arange(8), "n_tokens": np.full(8, big), "start_ns": np.full(8, big)}
    _fill(log, second)
    store.flush(log)
    _fill(log, {"replica": np.array([3]), "n_tokens": np.array([-5]), "start_ns": np.array([9])})
    store.keep_tail(log)
    assert len(store) == 17 and store.spilled_rows == 16
    for k in first:
        got = store.column_ns(k)
        assert got.dtype == np.int64
        assert_array_equal(got[:8], first[k])
        assert_array_equal(got[8:16], second[k])
    assert store.column_ns("n_tokens")[16] == -5
    assert store.column_ns("size").dtype == np.int64 and not store.column_ns("size").any()
    assert_array_equal(store.column("start_s")[:8], np.arange(8) / 1e9)
