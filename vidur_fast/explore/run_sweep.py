"""`vidur-fast sweep`: run every grid point (resuming a previous run) and tabulate them."""

import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd
from tqdm import tqdm

from vidur_fast.explore.chunking import make_chunks
from vidur_fast.explore.executors import make_executor
from vidur_fast.explore.points import Point, describe, expand, grid_value_label
from vidur_fast.explore.spec import SweepSpec, load_spec
from vidur_fast.explore.store import ResultLog, prepare_dir, release_dir, write_table
from vidur_fast.explore.worker import error_text, run_chunk, warm_kernels

DESCRIBED_PATHS = {
    "cluster.model",
    "cluster.device",
    "cluster.node",
    "cluster.tp",
    "cluster.pp",
    "cluster.num_replicas",
    "cluster.pools",
    "scheduler",
    "router",
    "workload",
    "workload.intervals.qps",
    "seed",
}


@dataclass(frozen=True)
class SweepOutcome:
    """What a sweep run did."""

    out_dir: Path
    table: pd.DataFrame
    n_run: int
    n_skipped: int


def point_columns(spec: SweepSpec, point: Point) -> dict[str, Any]:
    """Identifying columns of a point: index, id, deployment/load description, and the grid
    keys the description does not already show."""
    row: dict[str, Any] = {"point": point.index, "point_id": point.id}
    desc = describe(point.config if point.config is not None else spec.base)
    if point.config is None:  # show what the grid asked for where the description has a slot
        names = {
            "workload.intervals.qps": "qps",
            "cluster.num_replicas": "num_replicas",
            "cluster.pools": "layout",
        }
        for key, value in point.overrides.items():
            path = spec.grid[key][0]
            if path in DESCRIBED_PATHS:
                desc[names.get(path, path.split(".")[-1])] = grid_value_label(value)
            if path.startswith("cluster.pools"):  # the base's counts are not this layout's
                desc["gpus"] = None
    row.update(desc)
    for key, value in point.overrides.items():
        if spec.grid[key][0] not in DESCRIBED_PATHS:
            row[spec.grid[key][0]] = grid_value_label(value)
    return row


def build_table(rows: list[dict[str, Any]]) -> pd.DataFrame:
    df = pd.DataFrame(rows)
    for col in df.columns:  # parquet needs one type per column
        if df[col].dtype == object:
            kinds = {type(v) for v in df[col] if v is not None and v == v}
            if len(kinds) > 1:
                df[col] = [None if v is None else str(v) for v in df[col]]
    return df


def run_sweep(
    config_path: str,
    out: str | None = None,
    *,
    executor: str = "local",
    workers: int | None = None,
    ray_address: str | None = None,
    retry_errors: bool = False,
    quiet: bool = False,
    keep_runs: bool = False,
) -> SweepOutcome:
    """Run the sweep file's grid into out (default runs/sweep-<file stem>); with keep_runs
    each point's run directory goes to out/runs/p<index>-<id>. See docs/sweeps.md."""
    spec = load_spec(config_path)
    points = expand(spec)
    out = out or f"runs/sweep-{Path(config_path).stem}"
    pool = make_executor(executor, workers, ray_address)  # before any file is written
    out_dir = None
    try:
        out_dir = prepare_dir(out, "sweep", {"source": str(config_path), "points": len(points)})
        log = ResultLog(out_dir / "points.jsonl")
        try:
            runs = {p.id: f"runs/p{p.index}-{p.id}" for p in points} if keep_runs else {}
            n_run, n_skipped = _run_points(points, log, pool, retry_errors, quiet, runs, out_dir)
            rows = [{**point_columns(spec, p), **log.entries[p.id]} for p in points]
            if keep_runs:
                for p, row in zip(points, rows, strict=True):
                    kept = (out_dir / runs[p.id]).is_dir()
                    row["run_dir"] = runs[p.id] if kept else None
        finally:
            log.close()
        pool.close()
        table = build_table(rows)
        write_table(table, out_dir, "results")
    except BaseException:
        pool.close(abort=True)  # an interrupt or a signal: no worker outlives the command
        raise
    finally:
        if out_dir is not None:
            release_dir(out_dir)
    if not quiet:
        from vidur_fast.outputs.console import format_sweep_table

        print(format_sweep_table(table))
        n_err = int((table["status"] != "ok").sum())
        print(
            f"sweep: {len(points)} points ({n_run} run, {n_skipped} already done, "
            f"{n_err} with errors) -> {out_dir / 'results.parquet'}",
            file=sys.stderr,
        )
    return SweepOutcome(out_dir, table, n_run, n_skipped)


def _run_points(points, log: ResultLog, pool, retry_errors: bool, quiet: bool, runs, out_dir):
    todo, n_skipped = [], 0
    for p in points:
        done = log.entries.get(p.id)
        # a finished point whose run directory is asked for but missing runs again
        missing = p.id in runs and done is not None and done.get("status") == "ok"
        missing = missing and not (out_dir / runs[p.id]).is_dir()
        if done is not None and not missing and (done.get("status") == "ok" or not retry_errors):
            n_skipped += 1
        elif p.config is None:
            log.add(p.id, {"status": "error", "error": p.error})
        else:
            todo.append(p)
    # same config twice: once
    unique = list(
        {
            p.id: (p.id, p.config, str(out_dir / runs[p.id])) if p.id in runs else (p.id, p.config)
            for p in todo
        }.values()
    )
    if not quiet and not sys.stderr.isatty():  # no bar off a terminal: one line for the phase
        print(
            f"sweep: {len(unique)} points to run ({n_skipped} already done), "
            f"{pool.workers} worker{'s' if pool.workers != 1 else ''}",
            file=sys.stderr,
        )
    if unique and pool.on_this_machine:
        warm_kernels([u[1] for u in unique], quiet)
    with tqdm(
        total=len(unique), disable=True if quiet else None, file=sys.stderr, desc="sweep"
    ) as bar:
        for chunk, results, exc in pool.imap(run_chunk, make_chunks(unique, pool.workers)):
            if exc is not None:
                results = [
                    (pid, {"status": "error", "error": f"worker failed: {error_text(exc)}"})
                    for pid, _ in chunk
                ]
            for pid, row in results:
                log.add(pid, row)
            bar.update(len(chunk))
    return len(unique), n_skipped
