"""Batch-log storage: chunks flushed from the kernel's fixed-size log spill to disk, so a long
run holds at most one log buffer of batch records in memory.

One raw file per column (appended per flush) in a private temporary directory, removed when
the store is garbage collected. Per-batch counts are stored as int32 (widened back on reading):
56 instead of 88 bytes a batch to write and read back. The last, partial chunk stays in memory;
short runs never touch the disk.
"""

import shutil
import tempfile
import weakref
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pandas as pd

from vidur_fast.kernels.dtypes import NS_PER_S
from vidur_fast.kernels.state import BatchLog

# columns stored in ns and reported in seconds (name_ns -> name_s), listed last in frame()
_TIME_COLUMNS = ("start_ns", "end_ns", "stage_ns")
# counts that fit int32 on disk (a column that ever does not is widened to int64)
_NARROW = frozenset(
    ("replica", "size", "n_tokens", "n_prefill_tokens", "n_decode_tokens", "alloc_blocks")
    + ("waiting", "preempted")
)
_I32 = np.iinfo(np.int32)


class BatchStore:
    """Append-only per-batch records of one run (the BatchLog columns, int64)."""

    def __init__(self, names: tuple[str, ...]):
        self.names = names
        self._dir: Path | None = None
        self._on_disk = 0
        self._tail: dict[str, np.ndarray] = {k: np.zeros(0, np.int64) for k in names}
        self._disk_dtype = {k: np.dtype(np.int32 if k in _NARROW else np.int64) for k in names}

    @classmethod
    def for_log(cls, log: BatchLog) -> "BatchStore":
        return cls(tuple(k for k in log._fields if k != "n"))

    def __len__(self) -> int:
        return self._on_disk + len(self._tail[self.names[0]])

    @property
    def spilled_rows(self) -> int:
        """Rows written to the spill files (0 when everything fit in one log buffer)."""
        return self._on_disk

    def flush(self, log: BatchLog) -> None:
        """Append the log's n rows to the spill files; the caller then resets log.n[0]."""
        n = int(log.n[0])
        if n == 0:
            return
        if self._dir is None:
            self._dir = Path(tempfile.mkdtemp(prefix="vidur-fast-batches-"))
            weakref.finalize(self, shutil.rmtree, self._dir, True)
        for k in self.names:
            values = getattr(log, k)[:n]
            if self._disk_dtype[k] == np.int32:
                if values.min() < _I32.min or values.max() > _I32.max:
                    self._widen(k)
                else:
                    values = values.astype(np.int32)
            with open(self._dir / f"{k}.bin", "ab") as f:
                values.tofile(f)
        self._on_disk += n

    def _widen(self, name: str) -> None:
        """Rewrite one int32 spill file as int64 (a count outgrew int32)."""
        path = self._dir / f"{name}.bin"
        if path.exists():
            np.fromfile(path, dtype=np.int32).astype(np.int64).tofile(path)
        self._disk_dtype[name] = np.dtype(np.int64)

    def keep_tail(self, log: BatchLog) -> None:
        """Keep the log's last, partial chunk in memory (a copy) at the end of the run."""
        n = int(log.n[0])
        self._tail = {k: getattr(log, k)[:n].copy() for k in self.names}

    def column_ns(self, name: str) -> np.ndarray:
        """One column over all batches, as stored (int64; times in ns)."""
        tail = self._tail[name]
        if self._on_disk == 0:
            return tail
        head = np.fromfile(self._dir / f"{name}.bin", dtype=self._disk_dtype[name])
        if tail.size:
            return np.concatenate([head, tail])  # int64, as the tail is
        return head.astype(np.int64, copy=False)

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

    def frame(self) -> pd.DataFrame:
        """All batches as a DataFrame with times in seconds (start_s, end_s, stage_s last)."""
        return pd.DataFrame(dict(self.columns()))

    def frame_ns(self) -> pd.DataFrame:
        """All batches as a DataFrame in the kernel's units (int64 ns), BatchLog order."""
        return pd.DataFrame({k: self.column_ns(k) for k in self.names})
