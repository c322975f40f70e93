"""metrics.h5: one group per table, one dataset per column, units as dataset attributes.

Layout (format_version 1; docs/outputs.md lists every column):

    /                      attrs: format_version, vidur_fast_version, config_json, summary_json,
                                  timing_cache_key, timing_source, data_versions (JSON)
    /requests/<column>     one row per request (arrival order)
    /batches/<column>      one row per batch (formation order)
    /replicas/<column>     one row per replica
    /timeseries/replica_<r>/<column>   batch-log samples of replica r
    /tbt_histogram/{count, upper_edge_s}

Every dataset has attrs `unit` and `description`. Booleans are stored as uint8.
"""

import json
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

import h5py
import numpy as np
import pandas as pd

from vidur_fast import __version__
from vidur_fast.outputs.schema import FORMAT_VERSION, column_unit
from vidur_fast.outputs.timeseries import replica_timeseries

PACKAGES = ("numpy", "numba", "pandas", "scikit-learn", "h5py", "aiconfigurator-core")


def _package_version(name: str) -> str:
    try:
        return version(name)
    except PackageNotFoundError:
        return "not installed"


def data_versions(timing_meta: dict) -> dict:
    """Versions of the data and packages a run depended on (for root attribute data_versions)."""
    timing = {k: timing_meta.get(k) for k in ("source", "key", "versions", "provenance")}
    return {"timing": timing, "packages": {p: _package_version(p) for p in PACKAGES}}


def _write_frame(g: h5py.Group, group_name: str, frame: pd.DataFrame) -> None:
    for col in frame.columns:
        data = frame[col].to_numpy()
        if data.dtype == bool:
            data = data.astype(np.uint8)
        if data.dtype == object:
            data = data.astype("S")
        chunked = data.shape[0] > 0
        ds = g.create_dataset(
            str(col),
            data=data,
            compression="gzip" if chunked else None,
            compression_opts=1 if chunked else None,
            shuffle=chunked,
            track_times=False,  # byte-identical files for identical runs
        )
        unit, desc = column_unit(group_name, str(col))
        ds.attrs["unit"] = unit
        ds.attrs["description"] = desc


def write_metrics_h5(
    path: Path,
    result,
    cfg_json: str,
    summary_json: str,
    tbt_upper_edge_s: np.ndarray,
) -> None:
    """Write result (requests, batches, replicas, tbt_histogram, timing_meta) to path."""
    meta = result.timing_meta or {}
    with h5py.File(path, "w", track_order=True) as f:
        f.attrs["format_version"] = FORMAT_VERSION
        f.attrs["vidur_fast_version"] = __version__
        f.attrs["config_json"] = cfg_json
        f.attrs["summary_json"] = summary_json
        f.attrs["timing_cache_key"] = str(meta.get("key", ""))
        f.attrs["timing_source"] = str(meta.get("source", ""))
        f.attrs["data_versions"] = json.dumps(data_versions(meta), sort_keys=True, default=str)
        for name in ("requests", "batches", "replicas"):
            _write_frame(f.create_group(name, track_order=True), name, getattr(result, name))
        ts = f.create_group("timeseries", track_order=True)
        for r, frame in replica_timeseries(result.batches, result.replicas).items():
            _write_frame(ts.create_group(f"replica_{r}", track_order=True), "timeseries", frame)
        hist = pd.DataFrame({"count": result.tbt_histogram, "upper_edge_s": tbt_upper_edge_s})
        _write_frame(f.create_group("tbt_histogram", track_order=True), "tbt_histogram", hist)


def _read_frame(g: h5py.Group) -> pd.DataFrame:
    cols = {}
    for k, ds in g.items():
        data = ds[()]
        if ds.attrs.get("unit") == "bool":
            data = data.astype(bool)
        cols[k] = data
    return pd.DataFrame(cols)


def read_metrics_h5(path: Path) -> dict:
    """{'attrs', 'requests', 'batches', 'replicas', 'timeseries': {r: df}, 'tbt_histogram'}."""
    with h5py.File(path, "r") as f:
        out = {"attrs": {k: _attr(v) for k, v in f.attrs.items()}}
        for name in ("requests", "batches", "replicas", "tbt_histogram"):
            out[name] = _read_frame(f[name]) if name in f else pd.DataFrame()
        out["timeseries"] = {}
        if "timeseries" in f:
            for key, g in f["timeseries"].items():
                out["timeseries"][int(key.rsplit("_", 1)[1])] = _read_frame(g)
    return out


def _attr(v):
    if isinstance(v, bytes):
        return v.decode()
    if isinstance(v, np.generic):
        return v.item()
    return v
