"""`vidur-fast capacity`: maximum QPS under SLOs per deployment, cost, Pareto frontier."""

import dataclasses
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
from tqdm import tqdm

from vidur_fast.config.sim import SimConfig
from vidur_fast.config.workload import TraceWorkload
from vidur_fast.errors import UserError
from vidur_fast.explore.errors import SweepFileError
from vidur_fast.explore.executors import make_executor
from vidur_fast.explore.pareto import pareto_mask, plot_pareto
from vidur_fast.explore.points import Point, config_id, expand
from vidur_fast.explore.run_sweep import build_table, point_columns
from vidur_fast.explore.slo import CapacitySettings, parse_capacity
from vidur_fast.explore.spec import load_spec
from vidur_fast.explore.store import ResultLog, prepare_dir, release_dir, write_table
from vidur_fast.explore.worker import (
    cost_per_hour_usd,
    error_text,
    search_deployment,
    warm_kernels,
)

QPS_PATH = "workload.intervals.qps"


@dataclass(frozen=True)
class CapacityOutcome:
    """What a capacity run produced."""

    out_dir: Path
    table: pd.DataFrame
    """One row per deployment (capacity.parquet)."""
    probes: pd.DataFrame
    """One row per simulation of the searches (probes.parquet)."""
    n_run: int
    n_skipped: int


def trace_rate(workload: TraceWorkload) -> float:
    """Mean arrival rate (requests/s) of the trace as the workload replays it (its offset,
    window, count and time_scale applied)."""
    from vidur_fast.workload.build import build_workload

    table = build_workload(workload, seed=0)
    span = float(table.arrival_s[-1] - table.arrival_s[0]) if len(table) > 1 else 0.0
    if span <= 0:
        raise SweepFileError(
            f"base.workload.path: {workload.path}: its arrivals span no time, so its rate "
            "cannot be scaled"
        )
    return (len(table) - 1) / span


def qps_problem(cfg: SimConfig) -> str | None:
    """Why the search cannot vary cfg's arrival rate, or None when it can (a synthetic rate, or
    a trace's replay speed)."""
    if isinstance(cfg.workload, TraceWorkload):
        return None
    intervals = getattr(cfg.workload, "intervals", None)
    if intervals is None or "qps" not in {f.name for f in dataclasses.fields(intervals)}:
        return (
            "workload.intervals: the capacity search needs a trace, or a synthetic workload "
            "whose intervals have a qps (poisson, gamma or uniform)"
        )
    return None


def deployment_label(row: dict) -> str:
    """Short text naming a deployment in plots: model device tp/pp/replicas scheduler."""
    model = str(row["model"]).rsplit("/", 1)[-1]
    return (
        f"{model} {row['device']} tp{row['tp']} pp{row['pp']} x{row['num_replicas']} "
        f"{row['scheduler']}"
    )


def _check(spec) -> CapacitySettings:
    settings = parse_capacity(spec.capacity)
    for key, (path, _) in spec.grid.items():
        if path == QPS_PATH:
            raise SweepFileError(f"grid.{key}: the capacity search chooses qps; remove it")
    if not any(path.startswith("workload") for path, _ in spec.grid.values()):
        problem = qps_problem(spec.base)
        if problem:
            raise SweepFileError(f"base.{problem}")
        if isinstance(spec.base.workload, TraceWorkload):
            try:
                trace_rate(spec.base.workload)  # readable, with arrival times, before any run
            except UserError as exc:
                raise SweepFileError(str(exc)) from None
    return settings


def run_capacity(
    config_path: str,
    out: str | None = None,
    *,
    executor: str = "local",
    workers: int | None = None,
    ray_address: str | None = None,
    retry_errors: bool = False,
    quiet: bool = False,
) -> CapacityOutcome:
    """Search every deployment of the file's grid; write capacity/probes tables and
    pareto.png into out (default runs/capacity-<file stem>); see docs/sweeps.md."""
    spec = load_spec(config_path)
    settings = _check(spec)
    points = expand(spec)
    extra = dataclasses.asdict(settings)
    ids = {p.index: config_id(p.config, extra) if p.config else p.id for p in points}
    out = out or f"runs/capacity-{Path(config_path).stem}"
    pool = make_executor(executor, workers, ray_address)
    out_dir = None
    try:
        out_dir = prepare_dir(out, "capacity", {"source": str(config_path), **extra})
        log = ResultLog(out_dir / "deployments.jsonl")
        try:
            n_run, n_skipped = _search_all(points, ids, settings, log, pool, retry_errors, quiet)
        finally:
            log.close()
        pool.close()
        table, probes = _tables(spec, points, ids, log, settings)
        write_table(table, out_dir, "capacity")
        write_table(probes, out_dir, "probes")
        title = "; ".join(f"{k} <= {v:g} s" for k, v in settings.slo.items())
        plot_pareto(
            table,
            settings.pareto_metric,
            "cost_per_million_requests_usd",
            "label",
            out_dir / "pareto.png",
            f"capacity under {title}",
        )
    except BaseException:
        pool.close(abort=True)  # an interrupt or a signal: no worker outlives the command
        raise
    finally:
        if out_dir is not None:
            release_dir(out_dir)
    if not quiet:
        cols = [
            "label",
            "status",
            "capacity_qps",
            "cost_per_hour_usd",
            "qps_per_usd_hour",
            settings.pareto_metric,
            "pareto",
        ]
        with pd.option_context("display.width", 160, "display.max_colwidth", 60):
            print(table[cols].to_string(index=False))
        print(
            f"capacity: {len(points)} deployments ({n_run} searched, {n_skipped} already "
            f"done) -> {out_dir / 'capacity.parquet'}",
            file=sys.stderr,
        )
    return CapacityOutcome(out_dir, table, probes, n_run, n_skipped)


def _search_all(points: list[Point], ids, settings, log, pool, retry_errors, quiet):
    todo, n_skipped = {}, 0
    for p in points:
        pid = ids[p.index]
        done = log.entries.get(pid)
        if done is not None and (done.get("status") != "error" or not retry_errors):
            n_skipped += 1
            continue
        problem = p.error or qps_problem(p.config)
        if problem:
            log.add(pid, {"status": "error", "error": problem, "probes": []})
        else:
            todo[pid] = (pid, p.config, settings)
    if todo and pool.on_this_machine:
        warm_kernels(next(iter(todo.values()))[1], quiet)
    with tqdm(
        total=len(todo), disable=True if quiet else None, file=sys.stderr, desc="capacity"
    ) as bar:
        for task, result, exc in pool.imap(search_deployment, list(todo.values())):
            if exc is not None:
                result = (
                    task[0],
                    {"status": "error", "error": f"worker failed: {error_text(exc)}", "probes": []},
                )
            log.add(*result)
            bar.update()
    return len(todo), n_skipped


def _cost(cfg: SimConfig | None) -> float | None:
    try:
        return cost_per_hour_usd(cfg) if cfg is not None else None
    except UserError:  # unknown device: the deployment's error says so
        return None


def _tables(spec, points, ids, log, settings):
    rows, probe_rows = [], []
    for p in points:
        entry = dict(log.entries[ids[p.index]])
        head = point_columns(spec, dataclasses.replace(p, id=ids[p.index]))
        head.pop("qps", None)
        head = {"deployment": head.pop("point"), "deployment_id": head.pop("point_id"), **head}
        for probe in entry.pop("probes", []):
            probe_rows.append({"deployment": head["deployment"], **probe})
        entry["cost_per_hour_usd"] = _cost(p.config)
        rows.append({**head, "label": deployment_label(head), **entry})
    table = build_table(rows)
    for col in ("capacity_qps", "cost_per_hour_usd", settings.pareto_metric):
        if col not in table:
            table[col] = np.nan
    # a trace deployment searched a rate multiplier: report it and the rate it stands for
    rates = {}
    multiplier = []
    for k, p in enumerate(points):
        w = p.config.workload if p.config is not None else None
        if isinstance(w, TraceWorkload):
            if w not in rates:
                try:
                    rates[w] = trace_rate(w)
                except UserError:
                    rates[w] = np.nan
            m = float(table.loc[k, "capacity_qps"])
            multiplier.append(m)
            table.loc[k, "capacity_qps"] = m * rates[w]
        else:
            multiplier.append(np.nan)
    table["capacity_rate_multiplier"] = multiplier
    qps = table["capacity_qps"].astype(float)
    cost = table["cost_per_hour_usd"].astype(float)
    served = qps > 0
    table["qps_per_usd_hour"] = np.where(served, qps / cost, np.where(qps == 0, 0.0, np.nan))
    table["cost_per_million_requests_usd"] = np.where(served, cost / (3600 * qps) * 1e6, np.nan)
    latency = table[settings.pareto_metric].astype(float).where(served)
    table["pareto"] = pareto_mask(latency.to_numpy(), table["cost_per_million_requests_usd"])
    probes = build_table(probe_rows) if probe_rows else pd.DataFrame({"deployment": []})
    return table, probes
