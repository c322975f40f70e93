"""metrics.h5: one group per table, one dataset per column, units as dataset attributes.

Layout (format_version 4; docs/outputs.md lists every column):

    /                      attrs: format_version, vidur_fast_version, config_json, summary_json,
                                  timing_cache_key, timing_source, data_versions (JSON)
    /requests/<column>     one row per request (arrival order)
    /batches/<column>      one row per batch (formation order)
    /replicas/<column>     one row per replica
    /timeseries/replica_<r>/<column>   batch-log samples of replica r (attr layout "columns");
                                       big runs: no groups, the samples are the rows of
                                       /batches of replica r (layout "batches_by_replica")
    /tbt_histogram/{count, upper_edge_s}

Every dataset has attrs `unit` and `description`. Booleans are stored as uint8.
h5py is imported when a file is written or read, not with this module (start-up); pandas
only when a file is read.
"""

from __future__ import annotations

import json
import os
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from vidur_fast import __version__

if TYPE_CHECKING:
    import h5py
    import pandas as pd
from vidur_fast.engine.batch_store import BATCH_LOG_NAMES
from vidur_fast.engine.chunk_codec import CHUNK_ROWS, GZIP_LEVEL, encode_chunk, shuffled
from vidur_fast.metrics.table import Columns
from vidur_fast.outputs.schema import (
    BY_REPLICA,
    FORMAT_VERSION,
    TIMESERIES_DROPPED,
    TIMESERIES_FULL_MAX_ROWS,
    TIMESERIES_RENAME,
    column_unit,
)
from vidur_fast.outputs.timeseries import (
    HIT_TOKENS,
    PREFILL_TOKENS,
    has_prefix_cache,
    order_by_replica,
    replica_timeseries,
    running_hit_rate,
)
from vidur_fast.timing.input_memo import package_version

PACKAGES = ("numpy", "numba", "pandas", "scikit-learn", "h5py", "aiconfigurator-core")


def _package_version(name: str) -> str:
    found = package_version(name)
    return "not installed" if found is None else found


def data_versions(timing_meta: dict) -> dict:
    """Versions of the data and packages a run depended on (for root attribute data_versions)."""
    timing = {k: timing_meta.get(k) for k in ("source", "key", "versions", "provenance")}
    return {"timing": timing, "packages": {p: _package_version(p) for p in PACKAGES}}


def _write_frame(g: h5py.Group, group_name: str, frame, pool) -> None:
    """frame: a pandas DataFrame or a metrics.table.Columns."""
    _write_columns(g, group_name, ((c, np.asarray(frame[c])) for c in frame.columns), pool)


def _table(result, name: str):
    """result's table `name` (requests, replicas) as its numpy columns when it keeps them
    (api.Result), else as it has it (a DataFrame)."""
    columns = getattr(result, f"{name[:-1]}_columns", None)
    return getattr(result, name) if columns is None else columns


def _write_columns(g: h5py.Group, group_name: str, columns, pool) -> None:
    """Write (name, array) pairs as datasets with unit/description attributes."""
    for col, data in columns:
        if data.dtype == bool:
            data = data.astype(np.uint8)
        if data.dtype == object:
            data = data.astype("S")
        _write_column(g, group_name, str(col), data.shape[0], iter(()), data, pool)


def _write_column(
    g: h5py.Group, group_name: str, name: str, rows: int, chunks, rest: np.ndarray, pool
) -> None:
    """One column of `rows` rows: the compressed chunks (engine/chunk_codec.py) of its first
    rows, then `rest`, the values of the rows after them, compressed by the threads of pool."""
    if rows == 0 or rest.dtype.kind not in "biuf":  # empty or text: HDF5 compresses (if at all)
        ds = g.create_dataset(
            name,
            data=rest,
            compression="gzip" if rows else None,
            compression_opts=GZIP_LEVEL if rows else None,
            shuffle=rows > 0 and shuffled(name),
            track_times=False,  # byte-identical files for identical runs
        )
    else:
        size = min(rows, CHUNK_ROWS)
        shuffle = shuffled(name)
        ds = g.create_dataset(
            name,
            shape=(rows,),
            dtype=rest.dtype,
            chunks=(size,),
            compression="gzip",
            compression_opts=GZIP_LEVEL,
            shuffle=shuffle,
            track_times=False,
        )
        at = 0
        for blob in chunks:
            ds.id.write_direct_chunk((at,), blob)
            at += size
        if rest.shape[0] != rows - at:
            raise ValueError(f"{group_name}/{name}: {at} + {rest.shape[0]} rows, not {rows}")
        starts = range(0, rest.shape[0], size)
        if len(starts) > 1:
            blobs = pool.map(lambda lo: encode_chunk(rest[lo : lo + size], size, shuffle), starts)
        else:
            blobs = (encode_chunk(rest[lo : lo + size], size, shuffle) for lo in starts)
        for blob in blobs:
            ds.id.write_direct_chunk((at,), blob)
            at += size
    unit, desc = column_unit(group_name, name)
    ds.attrs["unit"] = unit
    ds.attrs["description"] = desc


def write_metrics_h5(
    path: Path,
    result,
    cfg_json: str,
    summary_json: str,
    tbt_upper_edge_s: np.ndarray,
    timeseries_full_max_rows: int | None = None,
) -> None:
    """Write result (requests, batches, replicas, tbt_histogram, timing_meta) to path.

    The per-replica time series are copies of the batch columns up to timeseries_full_max_rows
    batches (default TIMESERIES_FULL_MAX_ROWS); above, /batches itself (layout BY_REPLICA).
    """
    if timeseries_full_max_rows is None:
        timeseries_full_max_rows = TIMESERIES_FULL_MAX_ROWS
    import h5py

    meta = result.timing_meta or {}
    threads = min(os.cpu_count() or 1, 8)
    with (
        ThreadPoolExecutor(threads, thread_name_prefix="vidur-fast-h5") as pool,
        h5py.File(path, "w", track_order=True) as f,
    ):
        f.attrs["format_version"] = FORMAT_VERSION
        f.attrs["vidur_fast_version"] = __version__
        f.attrs["config_json"] = cfg_json
        f.attrs["summary_json"] = summary_json
        f.attrs["timing_cache_key"] = str(meta.get("key", ""))
        f.attrs["timing_source"] = str(meta.get("source", ""))
        f.attrs["data_versions"] = json.dumps(data_versions(meta), sort_keys=True, default=str)
        for name in ("requests", "replicas"):
            group = f.create_group(name, track_order=True)
            _write_frame(group, name, _table(result, name), pool)
        batch_log = getattr(result, "batch_log", None)
        g = f.create_group("batches", track_order=True)
        if batch_log is None:
            _write_frame(g, "batches", result.batches, pool)
            columns = result.batches.__getitem__
            names = list(result.batches.columns)
            batch_rows = len(result.batches)
        else:  # streamed: one batch column in memory at a time
            if hasattr(batch_log, "encoded_columns"):  # chunks compressed during the run
                for name, rows, chunks, rest in batch_log.encoded_columns():
                    _write_column(g, "batches", name, rows, chunks, rest, pool)
            else:
                _write_columns(g, "batches", batch_log.columns(), pool)
            columns = batch_log.column
            names = batch_log.column_names()
            batch_rows = len(batch_log)
            replicas = _table(result, "replicas")
            # a BatchStore reads the ids as int16 (below 2^15)
            if hasattr(batch_log, "column_ns") and len(np.asarray(replicas["replica"])) <= 1 << 15:
                columns = _narrow_replica_column(batch_log)
        _write_replica_timeseries(
            f.create_group("timeseries", track_order=True),
            columns,
            names,
            _table(result, "replicas"),
            batch_rows,
            timeseries_full_max_rows,
            pool,
        )
        hist = {"count": np.asarray(result.tbt_histogram), "upper_edge_s": tbt_upper_edge_s}
        hist = Columns(hist)
        _write_frame(f.create_group("tbt_histogram", track_order=True), "tbt_histogram", hist, pool)


def _write_replica_timeseries(
    ts: h5py.Group, column, names: list[str], replicas, batch_rows: int, full_max_rows: int, pool
) -> None:
    """The per-replica time series (same columns as timeseries.replica_timeseries), written
    column by column so that a long run never holds them all in memory. Above full_max_rows
    batches nothing is copied (layout BY_REPLICA): replica r's samples are the rows of /batches
    whose `replica` is r, which a reader selects itself."""
    if batch_rows > full_max_rows:
        ts.attrs["layout"] = BY_REPLICA
        return
    rep_ids = np.asarray(replicas["replica"])
    rep_col = _narrow_ids(np.asarray(column("replica")))
    groups = [ts.create_group(f"replica_{int(r)}", track_order=True) for r in rep_ids]
    order = order_by_replica(rep_col)
    bounds = _rows_below(rep_col, rep_ids)  # where each replica's rows start in order
    ends = np.append(bounds[1:], order.shape[0])
    del rep_col

    def emit(name: str, values_of) -> None:
        for grp, lo, hi, r in zip(groups, bounds, ends, rep_ids, strict=True):
            _write_columns(grp, "timeseries", [(name, values_of(order[lo:hi], int(r)))], pool)

    ts.attrs["layout"] = "columns"
    if "start_s" in names:
        start = np.asarray(column("start_s"))
        emit("time_s", lambda idx, r: start[idx])
        del start
    for c in names:
        if c in TIMESERIES_DROPPED or c == "start_s":  # start_s is time_s, written first
            continue
        data = np.asarray(column(c))
        if not np.issubdtype(data.dtype, np.number) and data.dtype != bool:
            continue
        emit(TIMESERIES_RENAME.get(c, c), lambda idx, r, d=data: d[idx])
        del data
    if "alloc_blocks" in names:
        blocks = dict(
            zip(rep_ids.tolist(), np.asarray(replicas["num_blocks"]).tolist(), strict=True)
        )
        alloc = np.asarray(column("alloc_blocks"))
        emit("kv_usage_fraction", lambda idx, r: alloc[idx] / max(int(blocks.get(r, 0)), 1))
        del alloc
    if "end_s" in names and "start_s" in names:
        dur = np.asarray(column("end_s")) - np.asarray(column("start_s"))
        emit("duration_s", lambda idx, r: dur[idx])
        del dur
    if has_prefix_cache(names, replicas):
        hits_all = np.asarray(column(HIT_TOKENS))
        pre_all = np.asarray(column(PREFILL_TOKENS))
        emit("prefix_cache_hit_rate", lambda idx, r: running_hit_rate(hits_all[idx], pre_all[idx]))


def _narrow_replica_column(batch_log):
    """batch_log.column, but the replica column read as int16 (ids below 2^15): no int64 copy
    of a column of tens of millions of batches."""

    def column(name: str) -> np.ndarray:
        if name == "replica":
            return batch_log.column_ns(name, np.int16)
        return batch_log.column(name)

    return column


def _narrow_ids(rep_col: np.ndarray) -> np.ndarray:
    """Replica ids as int16 when they fit (a quarter of the memory of int64)."""
    if rep_col.size and rep_col.min() >= -(1 << 15) and rep_col.max() < (1 << 15):
        return rep_col.astype(np.int16)
    return rep_col


def _rows_below(rep_col: np.ndarray, rep_ids: np.ndarray) -> np.ndarray:
    """For each replica id, the rows of rep_col with a smaller id (counted, not searched in
    the sorted column: 28M rows 0.03 instead of 0.55 s)."""
    if rep_col.size == 0:
        return np.zeros(rep_ids.shape[0], dtype=np.int64)
    lo = min(int(rep_col.min()), int(rep_ids.min(initial=0)))
    counts = np.bincount(rep_col - lo if lo else rep_col)  # no copy of the column for ids >= 0
    below = np.concatenate([[0], np.cumsum(counts)])
    return below[np.clip(rep_ids - lo, 0, counts.shape[0])]


def _read_frame(g: h5py.Group) -> pd.DataFrame:
    import pandas as pd

    cols = {}
    for k, ds in g.items():
        data = ds[()]
        if ds.attrs.get("unit") == "bool":
            data = data.astype(bool)
        cols[k] = data
    return pd.DataFrame(cols)


def read_metrics_h5(path: Path) -> dict:
    """{'attrs', 'requests', 'batches', 'replicas', 'timeseries': {r: df}, 'tbt_histogram'}."""
    import h5py
    import pandas as pd

    with h5py.File(path, "r") as f:
        out = {"attrs": {k: _attr(v) for k, v in f.attrs.items()}}
        for name in ("requests", "batches", "replicas", "tbt_histogram"):
            out[name] = _read_frame(f[name]) if name in f else pd.DataFrame()
        if int(out["attrs"].get("format_version", 0)) < 3:  # /batches under the field names
            out["batches"] = out["batches"].rename(columns=BATCH_LOG_NAMES)
        out["timeseries"] = {}
        ts = f["timeseries"] if "timeseries" in f else {}
        layout = _attr(ts.attrs.get("layout", "columns")) if "timeseries" in f else "columns"
        if layout == BY_REPLICA:
            out["timeseries"] = replica_timeseries(out["batches"], out["replicas"])
        elif layout == "batch_row":  # format_version 2-3: each replica's rows of /batches
            rows = {_replica_of(key): g["batch_row"][()] for key, g in ts.items()}
            out["timeseries"] = replica_timeseries(out["batches"], out["replicas"], rows)
        else:
            for key, g in ts.items():
                out["timeseries"][_replica_of(key)] = _read_frame(g)
    return out


def _replica_of(group_name: str) -> int:
    return int(group_name.rsplit("_", 1)[1])


def _attr(v):
    if isinstance(v, bytes):
        return v.decode()
    if isinstance(v, np.generic):
        return v.item()
    return v
