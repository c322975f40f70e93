"""Vectorised column checks that turn bad trace data into one-line TraceErrors.

Each check finds the FIRST offending row with numpy and names file, 1-based data row and column.
"""

from __future__ import annotations

import json
from itertools import chain
from typing import TYPE_CHECKING

import numpy as np

from vidur_fast.errors import TraceError

if TYPE_CHECKING:
    import pandas as pd


class RowLocator:
    """Formats errors for one file; maps array positions to 1-based data rows."""

    def __init__(self, path: str, row_numbers: np.ndarray | None = None) -> None:
        self.path = path
        self.row_numbers = row_numbers  # None: position i is data row i + 1

    def row(self, i: int) -> int:
        return int(self.row_numbers[i]) if self.row_numbers is not None else int(i) + 1

    def error(self, i: int, column: str, problem: str) -> TraceError:
        return TraceError(f"{self.path}: row {self.row(i)}, column '{column}': {problem}")

    def file_error(self, problem: str) -> TraceError:
        return TraceError(f"{self.path}: {problem}")


def _first(mask: np.ndarray) -> int | None:
    hits = np.flatnonzero(mask)
    return int(hits[0]) if hits.size else None


def require_columns(columns: list[str], required: list[str], loc: RowLocator, fmt: str) -> None:
    missing = [c for c in required if c not in columns]
    if missing:
        raise loc.file_error(
            f"missing column(s) {', '.join(missing)} (a {fmt} trace needs "
            f"{', '.join(required)}; found {', '.join(map(str, columns)) or 'none'})"
        )


def _short(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def numeric_column(
    series: pd.Series, column: str, loc: RowLocator, *, must_be: str | None = "> 0"
) -> np.ndarray:
    """float64 values of a numeric column; rejects missing, non-numeric, inf and out-of-range.

    must_be: "> 0", ">= 0" or None (any finite number).
    """
    missing = series.isna().to_numpy()
    values = _to_float(series)
    i = _first(missing)
    if i is not None:
        raise loc.error(i, column, "missing value; must be a number")
    i = _first(np.isnan(values))
    if i is not None:
        raise loc.error(i, column, f"not a number (got {_short(series.iloc[i])})")
    return checked_numbers(values, column, loc, must_be=must_be)


def checked_numbers(
    values: np.ndarray, column: str, loc: RowLocator, *, must_be: str | None = "> 0"
) -> np.ndarray:
    """numeric_column's checks of float64 values already parsed (none missing or NaN)."""
    i = _first(~np.isfinite(values))
    if i is not None:
        raise loc.error(i, column, f"must be finite (got {values[i]})")
    if must_be is not None:
        i = _first(values < 0 if must_be == ">= 0" else values <= 0)
        if i is not None:
            raise loc.error(i, column, f"must be {must_be} (got {values[i]:g})")
    return values


def _to_float(series: pd.Series) -> np.ndarray:
    import pandas as pd

    if pd.api.types.is_numeric_dtype(series.dtype) and not pd.api.types.is_bool_dtype(series):
        return series.to_numpy(dtype=np.float64, na_value=np.nan)
    # Object columns (strings, lists from JSON): anything that is not a plain number -> NaN.
    as_num = pd.to_numeric(series.map(_scalar_or_nan), errors="coerce")
    return as_num.to_numpy(dtype=np.float64, na_value=np.nan)


def _scalar_or_nan(x: object) -> object:
    return np.nan if isinstance(x, list | dict | bool) else x


def integer_column(values: np.ndarray, column: str, loc: RowLocator) -> np.ndarray:
    """int64 from float64 values that must be whole numbers."""
    i = _first(values != np.floor(values))
    if i is not None:
        raise loc.error(i, column, f"must be a whole number (got {values[i]:g})")
    return values.astype(np.int64)


def check_sorted(values: np.ndarray, column: str, loc: RowLocator) -> None:
    i = _first(np.diff(values) < 0)
    if i is not None:
        raise loc.error(
            i + 1,
            column,
            f"arrival {values[i + 1]:g} is earlier than the previous row's {values[i]:g}; "
            "rows must be sorted by arrival time",
        )


def lists_to_csr(
    lists: list | np.ndarray, column: str, loc: RowLocator
) -> tuple[np.ndarray, np.ndarray]:
    """Per-row lists of ints -> (offsets int64[n+1], values int64[m]); else a row error."""
    is_list = np.fromiter((type(x) is list for x in lists), dtype=bool, count=len(lists))
    i = _first(~is_list)
    if i is not None:
        raise loc.error(i, column, f"must be a list of integers (got {_short(lists[i])})")
    counts = np.fromiter(map(len, lists), dtype=np.int64, count=len(lists))
    offsets = np.zeros(len(lists) + 1, dtype=np.int64)
    np.cumsum(counts, out=offsets[1:])
    flat = list(chain.from_iterable(lists))
    try:
        # Plain Python ints in int64 range give an int64 array; anything else changes the dtype.
        values = np.array(flat) if flat else np.zeros(0, np.int64)
    except (TypeError, ValueError, OverflowError):
        values = np.zeros(0, dtype=object)
    if values.dtype != np.int64 or values.ndim != 1:
        j = next(
            (k for k, v in enumerate(flat) if type(v) is not int or not -(2**63) <= v < 2**63), 0
        )
        i = int(np.searchsorted(offsets, j, side="right") - 1)
        raise loc.error(
            i,
            column,
            f"must be a list of 64-bit integers (element {j - offsets[i]} is {_short(flat[j])})",
        )
    return offsets, values


def parse_json_lists(cells: np.ndarray, column: str, loc: RowLocator) -> list:
    """Parse a column of JSON list strings in one json.loads; on failure find the bad row."""
    import pandas as pd

    missing = pd.isna(cells)
    i = _first(missing)
    if i is not None:
        raise loc.error(i, column, "missing value; must be a JSON list of integers")
    try:
        parsed = json.loads("[" + ",".join(cells.tolist()) + "]")
    except (json.JSONDecodeError, TypeError):
        parsed = None
    # A cell like "1, 2" would still parse when joined, so also check the row count.
    if parsed is None or len(parsed) != len(cells):
        for i, cell in enumerate(cells):
            try:
                value = json.loads(cell)
            except json.JSONDecodeError:
                raise loc.error(i, column, f"malformed JSON (got {_short(cell)})") from None
            if type(value) is not list:
                raise loc.error(i, column, f"must be a JSON list of integers (got {_short(cell)})")
        raise loc.file_error(f"column '{column}': could not parse the JSON lists")
    return parsed
