"""Columns: a table as named numpy columns of equal length, without pandas.

The simulate path builds its request and replica tables, the summary and the run directory
from these, so a run that writes only its usual outputs never imports pandas (about 0.3 s of
start-up). `Result.requests` and `Result.replicas` turn them into DataFrames on first access.
"""

from collections.abc import Iterator

import numpy as np


class Columns:
    """Named 1-D numpy arrays of one length, in insertion order.

    `t[name]` is a column; `t[mask]` (a boolean array) the rows where mask is true, with
    `index` the rows' positions in the full table (as a DataFrame's index after a row
    selection); `len(t)` the rows.
    """

    def __init__(self, columns: dict[str, np.ndarray], index: np.ndarray | None = None):
        self._cols = {str(k): np.asarray(v) for k, v in columns.items()}
        n = len(next(iter(self._cols.values()))) if self._cols else 0
        for k, v in self._cols.items():
            if v.ndim != 1 or v.shape[0] != n:
                raise ValueError(f"column {k}: shape {v.shape}, not ({n},)")
        self.index = np.arange(n) if index is None else np.asarray(index)

    @property
    def columns(self) -> list[str]:
        return list(self._cols)

    def __len__(self) -> int:
        return self.index.shape[0]

    def __contains__(self, name: object) -> bool:
        return name in self._cols

    def __iter__(self) -> Iterator[str]:
        return iter(self._cols)

    def __getitem__(self, key):
        if isinstance(key, str):
            return self._cols[key]
        mask = np.asarray(key)
        if mask.dtype != bool:
            raise TypeError("rows are selected by a boolean mask")
        return Columns({k: v[mask] for k, v in self._cols.items()}, self.index[mask])

    def items(self):
        return self._cols.items()

    def assign(self, **columns: np.ndarray) -> "Columns":
        """A new table with columns added (or replaced, in place in the column order)."""
        return Columns({**self._cols, **columns}, self.index)

    def to_frame(self):
        """The table as a pandas DataFrame (index: `index`, as a RangeIndex when it is one)."""
        import pandas as pd

        n = len(self)
        frame = pd.DataFrame(self._cols)
        if not np.array_equal(self.index, np.arange(n)):
            frame.index = self.index
        return frame
