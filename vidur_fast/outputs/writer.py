"""Write a run directory atomically: everything goes to a temp dir that is renamed at the end."""

import contextlib
import json
import os
import shutil
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

from vidur_fast.config.convert import config_dict
from vidur_fast.config.sim import OutputConfig
from vidur_fast.config.validate import validate_output
from vidur_fast.errors import ConfigError
from vidur_fast.metrics.result import Result
from vidur_fast.metrics.summary import hist_bucket_upper_s
from vidur_fast.outputs.h5 import write_metrics_h5
from vidur_fast.outputs.request_csv import write_request_csv


def check_output_dir(out: OutputConfig) -> Path | None:
    """Fail early (before simulating) if the run directory cannot be created."""
    validate_output(out)
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


def _missing_parents(path: Path) -> list[Path]:
    """Ancestors of path that do not exist yet, outermost first."""
    out = []
    for p in path.parents:
        if p.exists():
            break
        out.append(p)
    return out[::-1]


def write_run(result: Result, out: OutputConfig) -> Path:
    """Write config.json, summary.json, metrics.h5, the request tables and, when asked, plots/
    and trace.json under out.dir.

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
        # the request tables are written by Arrow, which runs without the GIL: in a second
        # thread they overlap with metrics.h5 on big runs
        with ThreadPoolExecutor(max_workers=1) as pool:
            side = []
            if out.write_request_csv:
                side.append(
                    pool.submit(write_request_csv, result.requests, tmp / "request_metrics.csv")
                )
            if out.write_parquet:
                side.append(
                    pool.submit(result.requests.to_parquet, tmp / "requests.parquet", index=False)
                )
            if out.write_metrics_h5:
                # without wall_time, so that identical runs give identical files
                summary_json = json.dumps(result.summary, sort_keys=True, default=_json_default)
                write_metrics_h5(
                    tmp / "metrics.h5", result, cfg_json, summary_json, hist_bucket_upper_s()
                )
            for job in side:
                job.result()
        if out.write_plots or out.write_trace:
            _write_views(tmp, result, out, path.name)
        if out.vidur_plots != "none":
            from vidur_fast.outputs.vidur_layout import write_vidur_plots

            write_vidur_plots(result.requests, tmp / "plots", out.vidur_plots)
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


def _write_views(tmp: Path, result: Result, out: OutputConfig, name: str) -> None:
    from vidur_fast.outputs.reader import run_data_from_result

    run = run_data_from_result(result, name=name)
    if out.write_plots:
        from vidur_fast.outputs.plots import write_plots

        write_plots(run, tmp / "plots")
    if out.write_trace:
        from vidur_fast.outputs.perfetto import write_trace

        write_trace(
            tmp / "trace.json",
            run.batches,
            run.replicas,
            run.pp,
            out.trace_every,
            out.trace_start_s,
            out.trace_end_s,
        )
