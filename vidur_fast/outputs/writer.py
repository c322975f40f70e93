"""Write a run directory atomically: everything goes to a temp dir that is renamed at the end."""

import contextlib
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
    if path.exists() and not path.is_dir():
        raise ConfigError(f"output.dir: {path} exists and is not a directory")
    parent = path.parent if str(path.parent) else Path(".")
    probe = parent
    while not probe.exists():
        probe = probe.parent
    if not probe.is_dir():
        raise ConfigError(f"output.dir: {probe} is not a directory")
    # os.access says yes to root on read-only file systems: try a real (removed) directory
    try:
        Path(tempfile.mkdtemp(prefix=".vidur-fast-probe.", dir=probe)).rmdir()
    except OSError:
        raise ConfigError(f"output.dir: cannot write under {probe}") from None
    return path


def _json_default(obj):
    if isinstance(obj, np.integer):
        return int(obj)
    if isinstance(obj, np.floating):
        return float(obj)
    return str(obj)


def _write_h5(path: Path, result: Result, cfg_json: str) -> None:
    with h5py.File(path, "w", track_order=True) as f:
        f.attrs["config_json"] = cfg_json
        f.attrs["vidur_fast_version"] = __version__
        f.attrs["timing_cache_key"] = str(result.timing_meta.get("key", ""))
        f.attrs["timing_source"] = str(result.timing_meta.get("source", ""))
        for name, frame in (
            ("requests", result.requests),
            ("batches", result.batches),
            ("replicas", result.replicas),
        ):
            g = f.create_group(name)
            for col in frame.columns:
                data = frame[col].to_numpy()
                if data.dtype == bool:
                    data = data.astype(np.uint8)
                g.create_dataset(
                    col, data=data, compression="gzip", compression_opts=1, track_times=False
                )
        g = f.create_group("tbt_histogram")
        from vidur_fast.metrics.summary import hist_bucket_upper_s

        g.create_dataset("count", data=result.tbt_histogram, track_times=False)
        g.create_dataset("upper_edge_s", data=hist_bucket_upper_s(), track_times=False)


def _missing_parents(path: Path) -> list[Path]:
    """Ancestors of path that do not exist yet, outermost first."""
    out = []
    for p in path.parents:
        if p.exists():
            break
        out.append(p)
    return out[::-1]


def write_run(result: Result, out: OutputConfig) -> Path:
    """Write config.json, summary.json, metrics.h5 and the request tables under out.dir.

    Atomic: files go to a hidden temp dir beside the target, renamed at the end; on any error
    or interrupt the temp dir (and parents this call created) are removed. summary.json is
    deterministic except its `wall_time` section (seconds each phase took on this machine).
    """
    path = check_output_dir(out)
    if path is None:
        raise ConfigError("output.dir: no run directory given")
    created = _missing_parents(path)
    tmp = None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent))
        cfg_json = json.dumps(config_dict(result.config), indent=2, default=_json_default)
        (tmp / "config.json").write_text(cfg_json + "\n")
        summary = dict(result.summary)
        summary["wall_time"] = {k: round(float(v), 6) for k, v in result.phases_s.items()}
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
    except BaseException as exc:
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)
        for p in reversed(created):
            with contextlib.suppress(OSError):
                p.rmdir()
        if isinstance(exc, OSError):
            raise ConfigError(f"output.dir: cannot write {path} ({exc.strerror or exc})") from None
        raise
    return path
