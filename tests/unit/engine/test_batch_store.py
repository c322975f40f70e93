"""The on-disk batch store gives back exactly the int64 values the kernel logged, and the
chunks it compresses for metrics.h5 read back as the same columns."""

from concurrent.futures import ThreadPoolExecutor

import h5py
import numpy as np
import pytest
from numpy.testing import assert_array_equal

from vidur_fast.engine import batch_store
from vidur_fast.engine.batch_store import BatchStore
from vidur_fast.engine.state import alloc_log
from vidur_fast.outputs import h5

_FIELDS = tuple(k for k in alloc_log(1)._fields if k != "n")


def test_store_columns_are_the_batch_log_names():
    store = BatchStore.for_log(alloc_log(4))
    assert store.names == tuple(batch_store.BATCH_LOG_NAMES.get(k, k) for k in _FIELDS)
    assert not set(store.names) & set(batch_store.BATCH_LOG_NAMES)  # no field name survives
    assert {"batch_size", "num_tokens", "waiting_requests", "preemptions"} <= set(store.names)


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
    log = store.flush(log)
    # a count beyond int32 in a later chunk widens that column's file, earlier rows intact
    big = 1 << 40
    second = {"replica": np.arange(8), "n_tokens": np.full(8, big), "start_ns": np.full(8, big)}
    _fill(log, second)
    log = store.flush(log)
    _fill(log, {"replica": np.array([3]), "n_tokens": np.array([-5]), "start_ns": np.array([9])})
    store.keep_tail(log)
    assert len(store) == 17 and store.spilled_rows == 16
    for k in first:  # BatchLog fields, stored under their column names
        got = store.column_ns(batch_store.BATCH_LOG_NAMES.get(k, k))
        assert got.dtype == np.int64
        assert_array_equal(got[:8], first[k])
        assert_array_equal(got[8:16], second[k])
    assert store.column_ns("num_tokens")[16] == -5
    size = store.column_ns("batch_size")
    assert size.dtype == np.int64 and not size.any()
    assert_array_equal(store.column("start_s")[:8], np.arange(8) / 1e9)


def _spilled_store(monkeypatch, chunk_rows: int, compress: bool = True) -> BatchStore:
    """A store with several flushes of random rows, compressing chunks of chunk_rows rows."""
    monkeypatch.setattr(batch_store, "CHUNK_ROWS", chunk_rows)
    monkeypatch.setattr(h5, "CHUNK_ROWS", chunk_rows)
    log = alloc_log(8)
    store = BatchStore.for_log(log, compress)
    rng = np.random.default_rng(3)
    for n in (8, 6, 8, 3, 2):
        top = 1 << 40 if n == 3 else 1000  # one chunk widens the counts' spill files
        _fill(log, {k: rng.integers(0, top, n) for k in _FIELDS})
        log = store.flush(log)
    _fill(log, {k: rng.integers(0, 1000, 2) for k in _FIELDS})
    store.keep_tail(log)
    return store


def _write_batches(store: BatchStore, path) -> None:
    with ThreadPoolExecutor(2) as pool, h5py.File(path, "w") as f:
        for name, rows, chunks, rest in store.encoded_columns():
            h5._write_column(f, "batches", name, rows, chunks, rest, pool)


@pytest.mark.parametrize("compress", [True, False])
def test_chunks_compressed_while_spilling_read_back_with_plain_h5py(
    monkeypatch, tmp_path, compress
):
    # without compression during the run (no metrics.h5 asked for), writing one compresses all
    store = _spilled_store(monkeypatch, 5, compress)
    assert store.spilled_rows == 27
    _write_batches(store, tmp_path / "a.h5")
    _write_batches(store, tmp_path / "b.h5")
    assert (tmp_path / "a.h5").read_bytes() == (tmp_path / "b.h5").read_bytes()
    with h5py.File(tmp_path / "a.h5") as f:
        assert list(f) == sorted(store.column_names())
        for name, values in store.columns():
            ds = f[name]
            assert ds.chunks == (5,) and ds.compression == "gzip"
            assert ds.shuffle == (name != "stage_s")
            assert ds.dtype == values.dtype and ds.shape == (29,)
            assert_array_equal(ds[()], values)


def _spilling_four_rows(monkeypatch, encode) -> tuple[BatchStore, object]:
    """A store whose spill thread compresses 4 rows (chunks of 2) with encode; the next log."""
    monkeypatch.setattr(batch_store, "encode_chunk", encode)
    monkeypatch.setattr(batch_store, "CHUNK_ROWS", 2)
    log = alloc_log(4)
    store = BatchStore.for_log(log)
    _fill(log, {"replica": np.arange(4)})
    return store, store.flush(log)


def test_error_in_the_spill_thread_is_raised(monkeypatch):
    def broken(*args):
        raise OSError("disk full")

    store, log = _spilling_four_rows(monkeypatch, broken)
    store.keep_tail(log)  # the run ends while the spill thread may still be working
    with pytest.raises(OSError, match="disk full"):
        store.column_ns("replica")  # the first read waits for it and raises its error
    assert store._worker._shutdown  # and the thread was told to end


def test_columns_read_after_the_run_wait_for_the_last_spill(monkeypatch):
    """keep_tail returns before the spill thread is done; reads see every spilled row."""
    import threading

    release = threading.Event()
    encode = batch_store.encode_chunk

    def slow(*args):
        release.wait(5)
        return encode(*args)

    store, log = _spilling_four_rows(monkeypatch, slow)
    _fill(log, {"replica": np.arange(4, 7)})
    store.keep_tail(log)
    assert store._pending is not None  # still compressing the first log
    release.set()
    assert_array_equal(store.column_ns("replica"), np.arange(7))
    assert store._pending is None and store._worker._shutdown


def test_long_columns_are_written_in_chunks_that_read_back_exactly(tmp_path):
    rng = np.random.default_rng(5)
    n = h5.CHUNK_ROWS * 3 + 17
    cols = {
        "start_s": rng.random(n) * 1e4,
        "stage_s": rng.integers(0, 9, n) / 7.0,
        "batch_size": rng.integers(0, 1 << 40, n),
        "done": rng.random(n) < 0.5,
        "short": np.arange(3, dtype=np.int16),
    }
    with ThreadPoolExecutor(2) as pool, h5py.File(tmp_path / "c.h5", "w") as f:
        h5._write_columns(f, "batches", cols.items(), pool)
    with h5py.File(tmp_path / "c.h5") as f:
        for k, v in cols.items():
            want = v.astype(np.uint8) if v.dtype == bool else v
            assert f[k].dtype == want.dtype
            assert_array_equal(f[k][()], want)
        assert f["batch_size"].chunks == (h5.CHUNK_ROWS,) and f["short"].chunks == (3,)


def test_store_dropped_while_spilling_is_closed_by_the_spill_thread(monkeypatch):
    """The spill job holds the store: when the store's last other reference goes first, the
    store is finalised on the spill thread itself, which cannot wait for itself. The spill
    files are still removed and nothing is reported."""
    import gc
    import sys
    import threading

    release = threading.Event()
    closed = threading.Event()
    encode = batch_store.encode_chunk

    def slow(*args):
        release.wait(5)
        return encode(*args)

    def close(worker, path):
        try:
            real_close(worker, path)
        finally:
            closed.set()

    real_close = batch_store._close
    monkeypatch.setattr(batch_store, "_close", close)
    unraisable = []
    monkeypatch.setattr(sys, "unraisablehook", unraisable.append)
    store, _ = _spilling_four_rows(monkeypatch, slow)
    spill_dir = store._dir
    del store
    gc.collect()
    assert spill_dir.exists()  # the spill thread still holds the store
    release.set()
    assert closed.wait(5)
    assert not spill_dir.exists()
    assert unraisable == []
