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
from vidur_fast.explore.slo import CapacitySettings, parse_capacity, slo_column
from vidur_fast.explore.spec import load_spec
from vidur_fast.explore.store import ResultLog, prepare_dir, release_dir, write_table
from vidur_fast.explore.worker import (
    _probe_dir,
    cost_per_hour_usd,
    error_text,
    evaluate_deployment,
    gpu_count,
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
    answer: dict | None = None
    """min_* objectives: the chosen deployment's row (None when no deployment met the SLOs,
    or for max_qps)."""


# the order in which each objective ranks the deployments that meet the SLOs
_RANK = {
    "min_replicas": ("num_replicas", "gpus", "cost_per_hour_usd"),
    "min_gpus": ("gpus", "cost_per_hour_usd", "num_replicas"),
    "min_cost": ("cost_per_hour_usd", "gpus", "num_replicas"),
}


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
    if row.get("num_pools"):
        return f"{model} {row['layout']} {row['scheduler']}"
    return (
        f"{model} {row['device']} tp{row['tp']} pp{row['pp']} x{row['num_replicas']} "
        f"{row['scheduler']}"
    )


def _check(spec, objective=None, load=None) -> CapacitySettings:
    settings = parse_capacity(spec.capacity, objective, load)
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
    objective: str | None = None,
    load: float | None = None,
    keep_runs: bool = False,
) -> CapacityOutcome:
    """Search every deployment of the file's grid (objective max_qps), or simulate each once at
    a fixed load and pick the smallest that meets the SLOs (min_replicas, min_gpus, min_cost);
    write the tables and pareto.png into out (default runs/capacity-<file stem>); with
    keep_runs every simulation's run directory under out/runs/. See docs/sweeps.md."""
    spec = load_spec(config_path)
    settings = _check(spec, objective, load)
    fixed = settings.objective != "max_qps"
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
            roots = _run_roots(points, ids, out_dir) if keep_runs else {}
            n_run, n_skipped = _search_all(
                points, ids, settings, log, pool, retry_errors, quiet, roots
            )
        finally:
            log.close()
        pool.close()
        if fixed:
            table, probes = _fixed_tables(spec, points, ids, log, settings), None
        else:
            table, probes = _tables(spec, points, ids, log, settings)
        if keep_runs:
            _add_run_dirs(table, probes, points, ids, out_dir, settings)
        write_table(table, out_dir, "capacity")
        if probes is not None:
            write_table(probes, out_dir, "probes")
        title = "; ".join(f"{k} <= {v:g} s" for k, v in settings.slo.items())
        if fixed:
            title += f" at load {settings.load:g}"
        answer = _answer(table, settings) if fixed else None
        if fixed:
            _write_answer(out_dir, answer, settings)
        at = f"at load {settings.load:g}" if fixed else "at capacity"
        plot_pareto(
            table,
            slo_column(settings.pareto_metric),
            "cost_per_million_requests_usd",
            "label",
            out_dir / "pareto.png",
            f"capacity under {title}",
            f"{settings.pareto_metric} {at} (s)",
            f"cost per million requests {at} (USD)",
        )
    except BaseException:
        pool.close(abort=True)  # an interrupt or a signal: no worker outlives the command
        raise
    finally:
        if out_dir is not None:
            release_dir(out_dir)
    if not quiet:
        if fixed:
            slos = [slo_column(n) for n in settings.slo]
            cols = ["label", "status", "met", *slos, "gpus", "cost_per_hour_usd", "answer"]
        else:
            cols = [
                "label",
                "status",
                "capacity_qps",
                "cost_per_hour_usd",
                "qps_per_usd_hour",
                slo_column(settings.pareto_metric),
                "pareto",
            ]
        with pd.option_context("display.width", 160, "display.max_colwidth", 60):
            print(table[cols].to_string(index=False))
        if fixed:
            print(answer_line(answer, table, settings))
        print(
            f"capacity: {len(points)} deployments ({n_run} "
            f"{'simulated' if fixed else 'searched'}, {n_skipped} already done) -> "
            f"{out_dir / 'capacity.parquet'}",
            file=sys.stderr,
        )
    if probes is None:
        probes = pd.DataFrame({"deployment": []})
    return CapacityOutcome(out_dir, table, probes, n_run, n_skipped, answer)


def _run_roots(points: list[Point], ids, out_dir: Path) -> dict[str, Path]:
    """Deployment id -> its directory under out/runs (kept runs)."""
    return {ids[p.index]: out_dir / "runs" / f"d{p.index}-{ids[p.index]}" for p in points}


def _search_all(points: list[Point], ids, settings, log, pool, retry_errors, quiet, roots):
    fixed = settings.objective != "max_qps"
    todo, n_skipped = {}, 0
    for p in points:
        pid = ids[p.index]
        done = log.entries.get(pid)
        kept = pid not in roots or done is None or done.get("status") == "error"
        kept = kept or roots[pid].is_dir()
        if done is not None and kept and (done.get("status") != "error" or not retry_errors):
            n_skipped += 1
            continue
        problem = p.error or qps_problem(p.config)
        if problem:
            log.add(pid, {"status": "error", "error": problem, "probes": []})
        else:
            task = (pid, p.config, settings)
            todo[pid] = task + (str(roots[pid]),) if pid in roots else task
    fn = evaluate_deployment if fixed else search_deployment
    if not quiet and not sys.stderr.isatty():  # no bar off a terminal: one line for the phase
        what = "to simulate at the load" if fixed else "to search"
        print(
            f"capacity: {len(todo)} deployments {what} ({n_skipped} already done), "
            f"{pool.workers} worker{'s' if pool.workers != 1 else ''}",
            file=sys.stderr,
        )
    if todo and pool.on_this_machine:
        warm_kernels([t[1] for t in todo.values()], quiet)
    with tqdm(
        total=len(todo), disable=True if quiet else None, file=sys.stderr, desc="capacity"
    ) as bar:
        for task, result, exc in pool.imap(fn, list(todo.values())):
            if exc is not None:
                result = (
                    task[0],
                    {"status": "error", "error": f"worker failed: {error_text(exc)}", "probes": []},
                )
            log.add(*result)
            bar.update()
    return len(todo), n_skipped


def _summary_names(entry: dict, settings) -> dict:
    """A finished deployment's record with its SLO metrics under their summary column names
    (prefill_e2e_time_p90 for ttft_p90, as in the probe and sweep tables); records written
    before the tables used those names carry the SLO names."""
    out = dict(entry)
    for name in [settings.pareto_metric, *settings.slo]:
        if name in out:
            out.setdefault(slo_column(name), out.pop(name))
    return out


def _cost(cfg: SimConfig | None) -> float | None:
    try:
        return cost_per_hour_usd(cfg) if cfg is not None else None
    except UserError:  # unknown device: the deployment's error says so
        return None


def _tables(spec, points, ids, log, settings):
    rows, probe_rows = [], []
    for p in points:
        entry = _summary_names(log.entries[ids[p.index]], settings)
        head = point_columns(spec, dataclasses.replace(p, id=ids[p.index]))
        head.pop("qps", None)
        head = {"deployment": head.pop("point"), "deployment_id": head.pop("point_id"), **head}
        for probe in entry.pop("probes", []):
            probe_rows.append({"deployment": head["deployment"], **probe})
        entry["cost_per_hour_usd"] = _cost(p.config)
        rows.append({**head, "label": deployment_label(head), **entry})
    table = build_table(rows)
    for col in ("capacity_qps", "cost_per_hour_usd", slo_column(settings.pareto_metric)):
        if col not in table:
            table[col] = np.nan
    # a trace deployment searched a rate multiplier: report it and the rate it stands for
    rates = {}
    multiplier = []
    for k, p in enumerate(points):
        w = p.config.workload if p.config is not None else None
        if isinstance(w, TraceWorkload):
            m = float(table.loc[k, "capacity_qps"])
            multiplier.append(m)
            table.loc[k, "capacity_qps"] = m * _trace_rate_memo(w, rates)
        else:
            multiplier.append(np.nan)
    table["capacity_rate_multiplier"] = multiplier
    qps = table["capacity_qps"].astype(float)
    cost = table["cost_per_hour_usd"].astype(float)
    served = qps > 0
    table["qps_per_usd_hour"] = np.where(served, qps / cost, np.where(qps == 0, 0.0, np.nan))
    table["cost_per_million_requests_usd"] = np.where(served, cost / (3600 * qps) * 1e6, np.nan)
    latency = table[slo_column(settings.pareto_metric)].astype(float).where(served)
    table["pareto"] = pareto_mask(latency.to_numpy(), table["cost_per_million_requests_usd"])
    probes = build_table(probe_rows) if probe_rows else pd.DataFrame({"deployment": []})
    return table, probes


def _trace_rate_memo(w: TraceWorkload, rates: dict) -> float:
    """The trace's own arrival rate (req/s), read once per workload (NaN when unreadable)."""
    if w not in rates:
        try:
            rates[w] = trace_rate(w)
        except UserError:
            rates[w] = np.nan
    return rates[w]


def _head(spec, p: Point, ids) -> dict:
    head = point_columns(spec, dataclasses.replace(p, id=ids[p.index]))
    head.pop("qps", None)
    return {"deployment": head.pop("point"), "deployment_id": head.pop("point_id"), **head}


def _fixed_tables(spec, points, ids, log, settings) -> pd.DataFrame:
    """One row per deployment simulated at the fixed load, the answer marked."""
    rows = []
    rates: dict = {}
    for p in points:
        entry = _summary_names(log.entries[ids[p.index]], settings)
        entry.pop("probes", None)
        head = _head(spec, p, ids)
        w = p.config.workload if p.config is not None else None
        qps = settings.load
        if isinstance(w, TraceWorkload):
            qps = settings.load * _trace_rate_memo(w, rates)
        c = p.config.cluster if p.config is not None else None
        extra = {
            "load": settings.load,
            "qps": qps,
            "gpus": gpu_count(p.config) if c is not None else None,
            "cost_per_hour_usd": _cost(p.config),
        }
        rows.append({**head, "label": deployment_label(head), **extra, **entry})
    table = build_table(rows)
    slos = [slo_column(n) for n in [settings.pareto_metric, *settings.slo]]
    for col in ("met", "cost_per_hour_usd", "gpus", *slos):
        if col not in table:
            table[col] = np.nan
    table["met"] = table["met"].fillna(False).astype(bool)
    qps = table["qps"].astype(float)
    cost = table["cost_per_hour_usd"].astype(float)
    table["cost_per_million_requests_usd"] = cost / (3600 * qps) * 1e6
    latency = table[slo_column(settings.pareto_metric)].astype(float).where(table["met"])
    table["pareto"] = pareto_mask(latency.to_numpy(), table["cost_per_million_requests_usd"])
    table["answer"] = False
    met = table[table["met"]]
    if len(met):
        order = met.sort_values([*_RANK[settings.objective], "deployment"], kind="stable")
        table.loc[order.index[0], "answer"] = True
    return table


def _answer(table: pd.DataFrame, settings) -> dict | None:
    hit = table[table["answer"]]
    if not len(hit):
        return None
    row = hit.iloc[0].to_dict()
    return {k: (v.item() if hasattr(v, "item") else v) for k, v in row.items()}


def _load_text(table: pd.DataFrame, settings) -> str:
    traces = table["workload"].astype(str).eq("trace").all() if "workload" in table else False
    if traces:
        rate = table["qps"].astype(float).dropna()
        at = f" ({rate.iloc[0]:.3g} req/s)" if len(rate) else ""
        return f"{settings.load:g}x the trace's rate{at}"
    return f"{settings.load:g} req/s"


def answer_line(answer: dict | None, table: pd.DataFrame, settings) -> str:
    """The one-line answer of a min_* objective."""
    slo = ", ".join(f"{k} <= {v:g} s" for k, v in settings.slo.items())
    load = _load_text(table, settings)
    if answer is None:
        return (
            f"answer: none of the {len(table)} deployments meets {slo} at {load}; "
            "add larger deployments to the grid"
        )
    n_rep, n_gpu, cost = (
        int(answer["num_replicas"]),
        int(answer["gpus"]),
        answer["cost_per_hour_usd"],
    )
    goal, value = {
        "min_replicas": ("fewest replicas", n_rep),
        "min_gpus": ("fewest GPUs", n_gpu),
        "min_cost": ("lowest cost", f"${cost:.2f}/h"),
    }[settings.objective]
    gpus = f"{n_gpu} GPU{'s' if n_gpu != 1 else ''}"
    detail = f"{answer['label']}; {gpus}, ${cost:.2f}/h"
    return f"answer: {goal} meeting {slo} at {load}: {value} ({detail})"


def _write_answer(out_dir: Path, answer: dict | None, settings) -> None:
    import json

    data = {
        "objective": settings.objective,
        "load": settings.load,
        "slo": settings.slo,
        "answer": answer,
    }
    tmp = out_dir / ".answer.json.tmp"
    tmp.write_text(json.dumps(data, indent=2, default=str) + "\n")
    tmp.replace(out_dir / "answer.json")


def _add_run_dirs(table, probes, points, ids, out_dir: Path, settings) -> None:
    """Kept runs: the run directory (relative to out) of each row: the deployment's run at the
    load, or its run at capacity; each probe's run."""
    rel = {ids[p.index]: f"runs/d{p.index}-{ids[p.index]}" for p in points}
    dirs = []
    for _, row in table.iterrows():
        root = rel[row["deployment_id"]]
        if settings.objective != "max_qps":
            path = root
        elif row.get("status") in ("ok", "capped", "probe_limit") and row["capacity_qps"] > 0:
            mult = row.get("capacity_rate_multiplier")
            q = mult if mult == mult and mult is not None else row["capacity_qps"]
            path = _probe_dir(root, float(q))
        else:
            path = None
        dirs.append(path if path is not None and (out_dir / path).is_dir() else None)
    table["run_dir"] = dirs
    if probes is not None and len(probes):
        by_dep = dict(zip(table["deployment"], table["deployment_id"], strict=True))
        probes["run_dir"] = [
            _probe_dir(rel[by_dep[d]], float(q))
            for d, q in zip(probes["deployment"], probes["qps"], strict=True)
        ]
