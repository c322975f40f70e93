"""Write a run directory atomically: everything goes to a temp dir that is renamed at the end."""

import json
import os
import shutil
import tempfile
from pathlib import Path

import h5py
import numpy as np

from vidur_fast import __version__
from vidur_fast.api import Result, config_dict
from vidur_fast.config import OutputConfig
from vidur_fast.errors import ConfigError

VIDUR_REQUEST_COLUMNS = {"request_id": "Request Id"}


def check_output_dir(out: OutputConfig) -> Path | None:
    """Fail early (before simulating) if the run directory cannot be created."""
    if out.dir is None:
        return None
    path = Path(out.dir)
    if path.exists() and not out.overwrite:
        raise ConfigError(f"output.dir: {path} already exists (pass --output.overwrite)")
    parent = path.parent if str(path.parent) else Path(".")
    probe = parent
    while not probe.exists():
        probe = probe.parent
    if not os.access(probe, os.W_OK):
        raise ConfigError(f"output.dir: cannot write under {probe}")
    if probe != parent and not probe.is_dir():
        raise ConfigError(f"output.dir: {probe} is not a directory")
    return path


def _json_default(obj):
    if isinstance(obj, np.integer):
        return int(obj)
    if isinstance(obj, np.floating):
        return float(obj)
    return str(obj)


def _frame_columns(frame):
    return ((col, frame[col].to_numpy()) for col in frame.columns)


def _write_h5(path: Path, result: Result, cfg_json: str) -> None:
    with h5py.File(path, "w", track_order=True) as f:
        f.attrs["config_json"] = cfg_json
        f.attrs["vidur_fast_version"] = __version__
        f.attrs["timing_cache_key"] = str(result.timing_meta.get("key", ""))
        f.attrs["timing_source"] = str(result.timing_meta.get("source", ""))
        for name, columns in (
            ("requests", _frame_columns(result.requests)),
            ("batches", result.batch_log.columns()),  # streamed: one column in memory at a time
            ("replicas", _frame_columns(result.replicas)),
        ):
            g = f.create_group(name)
            for col, data in columns:
                if data.dtype == bool:
                    data = data.astype(np.uint8)
                # byte shuffle first: ~2x faster gzip and smaller files on int64 columns
                g.create_dataset(
                    col, data=data, shuffle=True, compression="gzip", compression_opts=1
                )
        g = f.create_group("tbt_histogram")
        from vidur_fast.metrics.summary import hist_bucket_upper_s

        g.create_dataset("count", data=result.tbt_histogram)
        g.create_dataset("upper_edge_s", data=hist_bucket_upper_s())


def write_run(result: Result, out: OutputConfig) -> Path:
    """Write config.json, summary.json, metrics.h5 and the request tables under out.dir."""
    path = check_output_dir(out)
    if path is None:
        raise ConfigError("output.dir: no run directory given")
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent))
    try:
        cfg_json = json.dumps(config_dict(result.config), indent=2, default=_json_default)
        (tmp / "config.json").write_text(cfg_json + "\n")
        summary = dict(result.summary)
        (tmp / "summary.json").write_text(
            json.dumps(summary, indent=2, default=_json_default) + "\n"
        )
        if out.write_request_csv:
            result.requests.rename(columns=VIDUR_REQUEST_COLUMNS).to_csv(
                tmp / "request_metrics.csv", index=False, float_format="%.9g"
            )
        if out.write_parquet:
            result.requests.to_parquet(tmp / "requests.parquet", index=False)
        if out.write_metrics_h5:
            _write_h5(tmp / "metrics.h5", result, cfg_json)
        if path.exists():
            shutil.rmtree(path)
        os.replace(tmp, path)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return path
