"""The run keeps its tables as numpy columns; Result.requests / .replicas are the same values as
DataFrames, built once; the CSV is the same from either."""

import numpy as np
import pandas as pd
import pytest

from vidur_fast.metrics.table import Columns
from vidur_fast.outputs.request_csv import write_request_csv


def test_frames_are_the_columns(small_result):
    for cols, frame in (
        (small_result.request_columns, small_result.requests),
        (small_result.replica_columns, small_result.replicas),
    ):
        assert isinstance(cols, Columns)
        assert isinstance(frame, pd.DataFrame)
        assert list(frame.columns) == cols.columns
        assert isinstance(frame.index, pd.RangeIndex) and len(frame) == len(cols)
        for c in cols:
            assert frame[c].dtype == cols[c].dtype, c
            assert np.array_equal(frame[c].to_numpy(), cols[c], equal_nan=cols[c].dtype.kind == "f")
    assert small_result.requests is small_result.requests  # built once


def test_csv_same_from_columns_and_frame(small_result, tmp_path):
    write_request_csv(small_result.request_columns, tmp_path / "a.csv")
    write_request_csv(small_result.requests, tmp_path / "b.csv")
    assert (tmp_path / "a.csv").read_bytes() == (tmp_path / "b.csv").read_bytes()


def test_row_selection_keeps_positions_as_the_index():
    t = Columns({"x": np.arange(5.0), "ok": np.array([True, False, True, False, True])})
    sel = t[t["ok"]]
    assert len(sel) == 3 and sel.index.tolist() == [0, 2, 4]
    assert sel.to_frame().index.tolist() == [0, 2, 4]
    wider = sel.assign(y=sel["x"] * 2)
    assert wider.columns == ["x", "ok", "y"] and wider.index.tolist() == [0, 2, 4]
    with pytest.raises(ValueError):
        Columns({"a": np.zeros(2), "b": np.zeros(3)})
    with pytest.raises(TypeError):
        t[np.array([0, 1])]
