"""request_metrics.csv: the per-request table with Vidur's column names, written by Arrow.

pandas formats every float in Python (~30 s of CPU for 1M rows); Arrow's writer is vectorised
and prints the shortest text that reads back as the same double, so the file is exact as well
as deterministic. Missing values (NaN) are empty fields and booleans are `True`/`False`, as
pandas wrote them.
"""

import csv
import io
import os
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

# the request table's names -> Vidur's (canary names the arrival time request_arrived_at)
VIDUR_REQUEST_COLUMNS = {"request_id": "Request Id", "arrived_at": "request_arrived_at"}


# rows formatted per task: rows are independent, so slices written one after another give the
# same bytes as the whole table, and Arrow formats them without the GIL, one slice per thread
# (a 1M-request file is ~430 MB of text and ~6 s of one core's formatting)
SLICE_ROWS = 1 << 15

# the two texts a boolean is written as, padded to one width (row 0: False, row 1: True)
_BOOL_TEXT = np.frombuffer(b"FalseTrue\0", dtype=np.uint8).reshape(2, 5)


def _arrow_column(values: np.ndarray):
    """values as an Arrow array: NaN as null (an empty field), booleans as True/False.

    Numbers and booleans are laid into Arrow buffers directly: pa.array() would import pandas
    (half a second of start-up) to look for pandas types."""
    import pyarrow as pa

    n = values.shape[0]
    if values.dtype == bool:
        lengths = np.where(values, 4, 5)
        offsets = np.zeros(n + 1, dtype=np.int32)
        np.cumsum(lengths, out=offsets[1:])
        row = np.repeat(np.arange(n), lengths)
        pos = np.arange(offsets[-1]) - offsets[:-1][row]
        text = _BOOL_TEXT[values[row].astype(np.intp), pos]
        return pa.Array.from_buffers(
            pa.string(), n, [None, pa.py_buffer(offsets), pa.py_buffer(text)]
        )
    if values.dtype.kind in "iuf" and values.dtype.isnative:
        values = np.ascontiguousarray(values)
        valid = None
        if values.dtype.kind == "f":
            nan = np.isnan(values)
            if nan.any():
                valid = pa.py_buffer(np.packbits(~nan, bitorder="little"))
        kind = pa.from_numpy_dtype(values.dtype)
        return pa.Array.from_buffers(kind, n, [valid, pa.py_buffer(values)])
    # anything else (text): from_pandas makes NaN a null
    return pa.array(values, from_pandas=True)


def write_request_csv(requests, path: Path) -> None:
    """Write the request table to path (header names as in Vidur's request_metrics.csv).

    requests: a metrics.table.Columns or a pandas DataFrame (the same file from either).
    """
    import pyarrow as pa
    import pyarrow.csv as pacsv

    columns = [(str(c), np.asarray(requests[c])) for c in requests.columns]
    names = [VIDUR_REQUEST_COLUMNS.get(c, c) for c, _ in columns]
    # Arrow quotes every string under "needed"; with only numbers and booleans nothing needs it
    text = any(v.dtype.kind not in "biuf" for _, v in columns)
    table = pa.table([_arrow_column(v) for _, v in columns], names=names)
    options = pacsv.WriteOptions(
        include_header=False, batch_size=1 << 16, quoting_style="needed" if text else "none"
    )

    def formatted(lo: int):
        sink = pa.BufferOutputStream()
        pacsv.write_csv(table.slice(lo, SLICE_ROWS), sink, options)
        return sink.getvalue()

    threads = max(1, min(os.cpu_count() or 1, 4))
    with open(path, "wb") as f, ThreadPoolExecutor(threads, "vidur-fast-csv") as pool:
        # the header by hand: Arrow quotes every column name, pandas (and Vidur) none
        header = io.StringIO()
        csv.writer(header, lineterminator="\n").writerow(names)
        f.write(header.getvalue().encode())
        # slices in order, at most threads + 1 formatted ahead of the write (bounded memory)
        pending = deque()
        for lo in range(0, table.num_rows, SLICE_ROWS):
            pending.append(pool.submit(formatted, lo))
            if len(pending) > threads:
                f.write(pending.popleft().result())
        while pending:
            f.write(pending.popleft().result())
