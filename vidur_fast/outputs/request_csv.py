"""request_metrics.csv: the per-request table with Vidur's column names, written by Arrow.

pandas formats every float in Python (~30 s of CPU for 1M rows); Arrow's writer is vectorised
and prints the shortest text that reads back as the same double, so the file is exact as well
as deterministic. Missing values (NaN) are empty fields and booleans are `True`/`False`, as
pandas wrote them.
"""

import csv
import io
from pathlib import Path

import numpy as np
import pandas as pd

# the request table's names -> Vidur's (canary names the arrival time request_arrived_at)
VIDUR_REQUEST_COLUMNS = {"request_id": "Request Id", "arrived_at": "request_arrived_at"}


def _arrow_column(values: np.ndarray):
    import pyarrow as pa

    if values.dtype == bool:
        return pa.array(np.where(values, "True", "False"))
    # from_pandas: NaN becomes null, written as an empty field
    return pa.array(values, from_pandas=True)


def write_request_csv(requests: pd.DataFrame, path: Path) -> None:
    """Write the request table to path (header names as in Vidur's request_metrics.csv)."""
    import pyarrow as pa
    import pyarrow.csv as pacsv

    names = [VIDUR_REQUEST_COLUMNS.get(str(c), str(c)) for c in requests.columns]
    # Arrow quotes every string under "needed"; with only numbers and booleans nothing needs it
    text = any(requests[c].dtype.kind not in "biuf" for c in requests.columns)
    table = pa.table([_arrow_column(requests[c].to_numpy()) for c in requests.columns], names=names)
    with open(path, "wb") as f:
        # the header by hand: Arrow quotes every column name, pandas (and Vidur) none
        header = io.StringIO()
        csv.writer(header, lineterminator="\n").writerow(names)
        f.write(header.getvalue().encode())
        options = pacsv.WriteOptions(
            include_header=False, batch_size=1 << 16, quoting_style="needed" if text else "none"
        )
        pacsv.write_csv(table, f, options)
