"""Batch-log storage: chunks flushed from the kernel's fixed-size log spill to disk, so a long
run holds at most two log buffers of batch records in memory.

One raw file per column (appended per flush) in a private temporary directory, removed when
the store is garbage collected. Per-batch counts are stored as int32 (widened back on reading):
56 instead of 88 bytes a batch to write and read back. The last, partial chunk stays in memory;
short runs never touch the disk.

A flushed log is spilled by one worker thread while the kernel (which runs without the GIL)
fills a second log. The worker also compresses the rows as metrics.h5 stores them (times in
seconds; engine/chunk_codec.py) into one file of finished chunks per column, so that writing
/batches afterwards only copies those bytes.
"""

import shutil
import tempfile
import threading
import weakref
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

import numpy as np

from vidur_fast.engine.chunk_codec import CHUNK_ROWS, encode_chunk, shuffled
from vidur_fast.kernels.dtypes import NS_PER_S
from vidur_fast.kernels.state import BatchLog

# kernel BatchLog field -> column name of the store: Result.batches, metrics.h5 /batches, the
# time series and the trace spell each concept the same way (docs/outputs.md, Column names).
# Fields not listed keep their name. metrics.h5 files of format_version 2 and older stored
# /batches under the field names; read_metrics_h5 renames them.
BATCH_LOG_NAMES = {
    "size": "batch_size",
    "n_tokens": "num_tokens",
    "n_prefill_tokens": "num_prefill_tokens",
    "n_decode_tokens": "num_decode_tokens",
    "waiting": "waiting_requests",
    "preempted": "preemptions",
    "n_cached_tokens": "num_cached_tokens",
}
# columns stored in ns and reported in seconds (name_ns -> name_s), listed last in frame()
_TIME_COLUMNS = ("start_ns", "end_ns", "stage_ns")
# counts that fit int32 on disk (a column that ever does not is widened to int64)
_NARROW = frozenset(
    ("replica", "batch_size", "num_tokens", "num_prefill_tokens", "num_decode_tokens")
    + ("alloc_blocks", "waiting_requests", "preemptions", "num_cached_tokens")
)
_I32 = np.iinfo(np.int32)


class BatchStore:
    """Append-only per-batch records of one run (the BatchLog columns, int64), under the
    column names of BATCH_LOG_NAMES."""

    def __init__(self, fields: tuple[str, ...], compress: bool = True):
        """fields: the BatchLog fields to keep; compress: also compress the spilled rows for
        metrics.h5 (when one will be written)."""
        names = tuple(BATCH_LOG_NAMES.get(k, k) for k in fields)
        self.names = names
        self._field = dict(zip(names, fields, strict=True))  # column -> BatchLog field
        self._compressing = compress
        self._dir: Path | None = None
        self._on_disk = 0
        self._tail: dict[str, np.ndarray] = {k: np.zeros(0, np.int64) for k in names}
        self._ended = False  # keep_tail was called: nothing more will be spilled
        self._disk_dtype = {k: np.dtype(np.int32 if k in _NARROW else np.int64) for k in names}
        self._worker: ThreadPoolExecutor | None = None
        self._pending: tuple[Future, BatchLog] | None = None
        # per stored column: compressed sizes of its finished chunks, and the rows after them
        self._chunk_sizes: dict[str, list[int]] = {_stored_name(k): [] for k in names}
        self._carry: dict[str, np.ndarray] = {}

    @classmethod
    def for_log(cls, log: BatchLog, compress: bool = True) -> "BatchStore":
        return cls(tuple(k for k in log._fields if k != "n"), compress)

    def __len__(self) -> int:
        return self._on_disk + len(self._tail[self.names[0]])

    @property
    def spilled_rows(self) -> int:
        """Rows written to the spill files (0 when everything fit in one log buffer)."""
        return self._on_disk

    def flush(self, log: BatchLog) -> BatchLog:
        """Hand the log's n rows to the spill thread; returns an empty log (of the same
        capacity) to go on with. `log` belongs to the store from then on.

        Raises what the spill thread raised on an earlier flush.
        """
        n = int(log.n[0])
        if n == 0:
            return log
        if self._dir is None:
            self._dir = Path(tempfile.mkdtemp(prefix="vidur-fast-batches-"))
            self._worker = ThreadPoolExecutor(1, thread_name_prefix="vidur-fast-spill")
            weakref.finalize(self, _close, self._worker, self._dir)
        spare = self._wait()  # at most one log waits to be spilled
        if spare is None:
            # np.zeros maps fresh zero pages; zeros_like would write every byte first
            spare = type(log)(*(np.zeros(a.shape, a.dtype) for a in log))
        self._pending = (self._worker.submit(self._spill, log, n), log)
        self._on_disk += n
        spare.n[0] = 0
        return spare

    def _wait(self) -> BatchLog | None:
        """Wait for the spill thread (re-raising its error); the log it had, if any. After
        keep_tail the thread has nothing more to do and ends here."""
        if self._pending is None:
            return None
        job, log = self._pending
        self._pending = None
        try:
            job.result()
        finally:
            if self._ended and self._worker is not None:
                self._worker.shutdown()  # its last job is done: the thread ends now
        return log

    def _spill(self, log: BatchLog, n: int) -> None:
        """Append n rows to the raw files and to the compressed chunks (spill thread)."""
        for k in self.names:
            values = getattr(log, self._field[k])[:n]
            raw = values
            if self._disk_dtype[k] == np.int32:
                if values.min() < _I32.min or values.max() > _I32.max:
                    self._widen(k)
                else:
                    raw = values.astype(np.int32)
            with open(self._dir / f"{k}.bin", "ab") as f:
                raw.tofile(f)
            if self._compressing:
                self._compress(_stored_name(k), _stored(k, values))

    def _compress(self, name: str, values: np.ndarray) -> None:
        """Append the finished chunks of carry + values to name's chunk file; keep the rest."""
        carry = self._carry.get(name)
        if carry is not None and carry.size:
            values = np.concatenate([carry, values])
        full = values.shape[0] - values.shape[0] % CHUNK_ROWS
        if full:
            sizes = self._chunk_sizes[name]
            with open(self._dir / f"{name}.chunks", "ab") as f:
                for lo in range(0, full, CHUNK_ROWS):
                    blob = encode_chunk(values[lo : lo + CHUNK_ROWS], CHUNK_ROWS, shuffled(name))
                    f.write(blob)
                    sizes.append(len(blob))
        self._carry[name] = values[full:].copy()  # values may be the log, which is reused

    def _widen(self, name: str) -> None:
        """Rewrite one int32 spill file as int64 (a count outgrew int32)."""
        path = self._dir / f"{name}.bin"
        if path.exists():
            np.fromfile(path, dtype=np.int32).astype(np.int64).tofile(path)
        self._disk_dtype[name] = np.dtype(np.int64)

    def keep_tail(self, log: BatchLog) -> None:
        """Keep the log's last, partial chunk in memory (a copy) at the end of the run.

        The spill thread may still be compressing the previous log (up to ~0.1 s on a short
        run); the first read of a column waits for it, so the metrics and the run directory's
        first files are made meanwhile. Its error, if any, is raised by that read."""
        n = int(log.n[0])
        self._tail = {k: getattr(log, self._field[k])[:n].copy() for k in self.names}
        self._ended = True
        if self._pending is None and self._worker is not None:
            self._worker.shutdown()

    def column_ns(self, name: str, dtype=np.int64) -> np.ndarray:
        """One column over all batches, as stored (int64; times in ns). dtype: a narrower
        integer type for a column whose values the caller knows fit it (replica ids)."""
        self._wait()
        tail = self._tail[name]
        if self._on_disk == 0:
            return tail.astype(dtype, copy=False)
        head = np.fromfile(self._dir / f"{name}.bin", dtype=self._disk_dtype[name])
        if tail.size:
            return np.concatenate([head, tail], dtype=dtype, casting="unsafe")
        return head.astype(dtype, copy=False)

    def column_names(self) -> list[str]:
        """Column names in frame() order (times as name_s)."""
        rest = [k for k in self.names if k not in _TIME_COLUMNS]
        return rest + [k.replace("_ns", "_s") for k in _TIME_COLUMNS if k in self.names]

    def column(self, name: str) -> np.ndarray:
        """One column by its frame() name (times in s)."""
        if name.endswith("_s") and name.replace("_s", "_ns") in _TIME_COLUMNS:
            return self.column_ns(name.replace("_s", "_ns")) / NS_PER_S
        if name not in self.names:
            raise KeyError(name)
        return self.column_ns(name)

    def columns(self) -> Iterator[tuple[str, np.ndarray]]:
        """(name, values) in frame() order, one column in memory at a time; times in s."""
        for k in self.names:
            if k not in _TIME_COLUMNS:
                yield k, self.column_ns(k)
        for k in _TIME_COLUMNS:
            if k in self.names:
                yield k.replace("_ns", "_s"), self.column_ns(k) / NS_PER_S

    def encoded_columns(self) -> Iterator[tuple[str, int, Iterator[bytes], np.ndarray]]:
        """(name, rows, chunks, rest) per column in frame() order, one column in memory at a
        time: `chunks` yields the finished compressed chunks (engine/chunk_codec.py) of the
        first rows, `rest` holds the values of the rows after them."""
        self._wait()
        if not self._compressing:
            for name, values in self.columns():
                yield name, values.shape[0], iter(()), values
            return
        for k in self.names:
            if k not in _TIME_COLUMNS:
                yield self._encoded(k)
        for k in _TIME_COLUMNS:
            if k in self.names:
                yield self._encoded(k)

    def _encoded(self, key: str) -> tuple[str, int, Iterator[bytes], np.ndarray]:
        name = _stored_name(key)
        sizes = self._chunk_sizes[name]
        rest = _stored(key, self._tail[key])
        carry = self._carry.get(name)
        if carry is not None and carry.size:
            rest = np.concatenate([carry, rest])
        return name, len(sizes) * CHUNK_ROWS + rest.shape[0], self._read_chunks(name), rest

    def _read_chunks(self, name: str) -> Iterator[bytes]:
        sizes = self._chunk_sizes[name]
        if not sizes:
            return
        with open(self._dir / f"{name}.chunks", "rb") as f:
            for size in sizes:
                yield f.read(size)

    def frame(self):
        """All batches as a DataFrame with times in seconds (start_s, end_s, stage_s last)."""
        import pandas as pd  # not at start-up: only a DataFrame needs it

        return pd.DataFrame(dict(self.columns()))

    def frame_ns(self):
        """All batches as a DataFrame in the kernel's units (int64 ns), BatchLog order
        (start_ns, end_ns, stage_ns)."""
        import pandas as pd

        return pd.DataFrame({k: self.column_ns(k) for k in self.names})


def _stored_name(key: str) -> str:
    """The frame() / metrics.h5 name of a log column (times as name_s)."""
    return key.replace("_ns", "_s") if key in _TIME_COLUMNS else key


def _stored(key: str, values: np.ndarray) -> np.ndarray:
    """Log values as columns() gives them (times in seconds)."""
    return values / NS_PER_S if key in _TIME_COLUMNS else values


def _close(worker: ThreadPoolExecutor, path: Path) -> None:
    """End the spill thread (after its current job), then remove the spill files.

    A spill job holds its store, so the store's last reference can go with the job, and this
    then runs on the spill thread itself: its job is done, and it must not wait for itself.
    """
    worker.shutdown(wait=threading.current_thread() not in worker._threads, cancel_futures=True)
    shutil.rmtree(path, ignore_errors=True)
