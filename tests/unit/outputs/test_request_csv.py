"""request_metrics.csv reads back to exactly the in-memory request table."""

import numpy as np
import pandas as pd
import pyarrow.csv as pacsv
from numpy.testing import assert_array_equal

from vidur_fast.outputs.request_csv import write_request_csv


def _read(path) -> pd.DataFrame:
    # Arrow's reader parses floats exactly (pandas 2's default parser may be off by an ulp)
    return pacsv.read_csv(path).to_pandas()


def test_csv_round_trips_every_value(small_result, small_run_dir):
    req = small_result.requests
    back = _read(small_run_dir / "request_metrics.csv")
    vidur_names = {"request_id": "Request Id", "arrived_at": "request_arrived_at"}
    assert list(back.columns) == [vidur_names.get(c, c) for c in req.columns]
    assert len(back) == len(req)
    for src, dst in zip(req.columns, back.columns, strict=True):
        x, y = req[src].to_numpy(), back[dst].to_numpy()
        if x.dtype.kind == "f":
            assert_array_equal(np.isnan(x), np.isnan(y), err_msg=src)
            # exact: the shortest text that reads back as the same double
            assert_array_equal(x[~np.isnan(x)], y[~np.isnan(x)], err_msg=src)
        else:
            assert_array_equal(x, y, err_msg=src)


def test_csv_text_format(tmp_path):
    frame = pd.DataFrame(
        {
            "request_id": np.arange(3),
            "completed": np.array([True, False, True]),
            "x": np.array([0.1, np.nan, 1e-12]),
            "n": np.array([5, 0, -2], dtype=np.int64),
        }
    )
    write_request_csv(frame, tmp_path / "r.csv")
    lines = (tmp_path / "r.csv").read_text().splitlines()
    # unquoted header, pandas-style booleans, NaN as an empty field
    assert lines[0] == "Request Id,completed,x,n"
    assert lines[1].startswith("0,True,0.1,5")
    assert lines[2] == "1,False,,0"
    back = _read(tmp_path / "r.csv")
    assert back["x"].iloc[2] == 1e-12 and back["completed"].dtype == bool


def test_slices_written_in_order_are_the_whole_table(tmp_path, monkeypatch):
    # the file is formatted in slices by several threads: any slice size gives the same bytes
    # as one slice of the whole table, header once, rows in order
    import vidur_fast.outputs.request_csv as request_csv

    rng = np.random.default_rng(7)
    n = 1000
    x = rng.lognormal(size=n)
    x[rng.random(n) < 0.1] = np.nan
    frame = pd.DataFrame(
        {
            "request_id": np.arange(n),
            "completed": rng.random(n) < 0.5,
            "x": x,
            "n": rng.integers(-5, 1 << 40, size=n),
        }
    )
    monkeypatch.setattr(request_csv, "SLICE_ROWS", 1 << 20)
    write_request_csv(frame, tmp_path / "whole.csv")
    whole = (tmp_path / "whole.csv").read_bytes()
    assert whole.count(b"\n") == n + 1
    for rows in (1, 7, 64, 999):
        monkeypatch.setattr(request_csv, "SLICE_ROWS", rows)
        write_request_csv(frame, tmp_path / f"s{rows}.csv")
        assert (tmp_path / f"s{rows}.csv").read_bytes() == whole, rows
    empty = frame.iloc[:0]
    write_request_csv(empty, tmp_path / "empty.csv")
    assert (tmp_path / "empty.csv").read_text() == "Request Id,completed,x,n\n"
