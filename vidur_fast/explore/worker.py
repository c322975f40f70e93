"""Code that runs inside executor worker processes: simulate configs, flatten summaries.

A worker process (a pool process or a Ray actor) runs many points and keeps what they share:
the timing models it has built or loaded (a small LRU keyed by model, device, node, TP, PP,
predictor), the trace files it has parsed (lengths, arrivals, block hashes; a small LRU keyed
by file identity and read options), and the Numba kernels, loaded from their cache once per
process. None of it changes a result: each point computes what a one-off simulate does.
"""

import dataclasses
import sys
import traceback
from collections import OrderedDict
from typing import Any

from vidur_fast.api import simulate
from vidur_fast.catalog import get_device
from vidur_fast.config.sim import OutputConfig, SimConfig, cluster_pools
from vidur_fast.config.workload import FixedLengths, SyntheticWorkload, TraceWorkload
from vidur_fast.errors import UserError
from vidur_fast.explore.search import find_capacity
from vidur_fast.explore.slo import meets_slo, slo_column
from vidur_fast.workload.readers import trace_memo

_TIMING_CACHE_SIZE = 8
_TRACE_CACHE_SIZE = 4


class _LruCache(OrderedDict):
    """A MutableMapping that forgets its least recently used entries beyond maxsize."""

    def __init__(self, maxsize: int):
        super().__init__()
        self.maxsize = maxsize

    def get(self, key, default=None):
        if key in self:
            self.move_to_end(key)
            return self[key]
        return default

    def __setitem__(self, key, value):
        super().__setitem__(key, value)
        self.move_to_end(key)
        while len(self) > self.maxsize:
            self.popitem(last=False)


# Per process, deliberately: worker processes are reused across chunks.
_TIMING_CACHE = _LruCache(_TIMING_CACHE_SIZE)
_TRACE_CACHE = _LruCache(_TRACE_CACHE_SIZE)


def flatten(d: dict, prefix: str = "") -> dict[str, Any]:
    """{"tbt": {"p99": x}} -> {"tbt_p99": x}. Per-replica breakdowns are left out: a sweep row
    describes a deployment (each point's own run outputs keep the per-replica figures)."""
    out = {}
    for key, value in d.items():
        name = f"{prefix}_{key}" if prefix else str(key)
        if isinstance(value, list) or str(key).endswith(("_replicawise", "_per_replica")):
            continue
        if isinstance(value, dict):
            out.update(flatten(value, name))
        else:
            out[name] = value
    return out


def gpu_count(cfg: SimConfig) -> int:
    """GPUs of the deployment: replicas x tp x pp, summed over its pools."""
    return sum(p.num_replicas * p.tp * p.pp for p in cluster_pools(cfg.cluster))


def cost_per_hour_usd(cfg: SimConfig) -> float:
    """Price of the deployment's GPUs: replicas x tp x pp x device price per GPU-hour, summed
    over its pools."""
    return sum(
        p.num_replicas * p.tp * p.pp * get_device(p.device).price_per_hour_usd
        for p in cluster_pools(cfg.cluster)
    )


def error_text(exc: BaseException) -> str:
    """One line: the message of a user error, or type and message of anything else."""
    if isinstance(exc, UserError):
        msg = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        return msg
    lines = traceback.format_exception_only(type(exc), exc)
    return lines[-1].strip() if lines else type(exc).__name__


def run_config(cfg: SimConfig, run_dir: str | None = None) -> dict[str, Any]:
    """Simulate cfg; return {"status": "ok", metrics...} or {"status": "error", "error": ...}.
    With run_dir, the run's directory is written there too (sweep --keep-runs)."""
    try:
        with trace_memo(_TRACE_CACHE):
            result = simulate(cfg, timing_cache=_TIMING_CACHE)
        if run_dir is not None:
            from vidur_fast.outputs.writer import write_run

            write_run(result, dataclasses.replace(cfg.output, dir=run_dir, overwrite=True))
        summary = dict(result.summary)
        row = {"status": "ok", "error": None, "sim_status": summary.pop("status")}
        row["cost_per_hour_usd"] = cost_per_hour_usd(cfg)
        row.update(flatten(summary))
        return row
    except Exception as exc:  # a failing point is recorded; the sweep goes on
        return {"status": "error", "error": error_text(exc)}


def warm_kernels(cfgs: list[SimConfig], quiet: bool) -> None:
    """Compile the kernels once in this process when Numba's cache lacks them, before the
    workers start: they then load the cached code instead of each compiling it (a minute of
    CPU per worker otherwise), and the first run says what it compiles. The loop is compiled
    per scheduler, pools, PD pools, kind of router and DP engines (kernels/loop.py loop_kernel):
    for each such variant among cfgs that is not cached, a 1-request run of the first config of
    that variant (its timing grids built or loaded here too, and cached for the workers);
    nothing when all are cached already. A failure is left to the workers to report."""
    from vidur_fast.catalog import get_model
    from vidur_fast.config.validate import has_route_groups
    from vidur_fast.engine.run import kernel_cached
    from vidur_fast.jit_start import start_numba_target
    from vidur_fast.kernels import loop
    from vidur_fast.params.setup import lockstep_on, router_code, scheduler_policy

    start_numba_target()
    todo = {}  # one config per loop variant (several routers share one)
    for cfg in cfgs:
        try:
            c = cfg.cluster
            key = (scheduler_policy(cfg.scheduler), bool(c.pools), has_route_groups(c))
            dp_on = lockstep_on(cfg, get_model(c.model))
            kernel = loop.loop_kernel(*key, router_code(cfg), dp_on)
        except Exception:  # a malformed point: its worker reports it
            continue
        if id(kernel) not in todo and kernel_cached(kernel) is False:
            todo[id(kernel)] = cfg
    if todo and not quiet:
        print("compiling the kernels once before the workers start", file=sys.stderr)
    tiny = SyntheticWorkload(num_requests=1, lengths=FixedLengths(16, 2))
    for cfg in todo.values():
        one = dataclasses.replace(cfg, workload=tiny, output=OutputConfig(dir=None), quiet=True)
        try:
            simulate(one, progress=not quiet, timing_cache=_TIMING_CACHE)
        except Exception:  # each point runs (and reports its error) on its own anyway
            pass


def run_chunk(chunk: list[tuple]) -> list[tuple[str, dict[str, Any]]]:
    """Run a chunk of (point id, config[, run directory]) in this process, in order."""
    return [(item[0], run_config(*item[1:])) for item in chunk]


# ---- capacity search ----


def with_qps(cfg: SimConfig, qps: float) -> SimConfig:
    """cfg at the searched rate: a synthetic workload's arrival rate set to qps; a trace
    replayed qps times as fast (the search variable is then a rate multiplier)."""
    if isinstance(cfg.workload, TraceWorkload):
        scaled = dataclasses.replace(cfg.workload, time_scale=cfg.workload.time_scale / float(qps))
        return dataclasses.replace(cfg, workload=scaled)
    intervals = dataclasses.replace(cfg.workload.intervals, qps=float(qps))
    return dataclasses.replace(cfg, workload=dataclasses.replace(cfg.workload, intervals=intervals))


def _probe_dir(run_root: str | None, qps: float) -> str | None:
    return None if run_root is None else f"{run_root}/qps-{qps:.6g}"


def search_deployment(task: tuple) -> tuple[str, dict[str, Any]]:
    """Capacity search of one deployment: (id, config, CapacitySettings[, run root]) ->
    (id, result). With a run root every probe's run directory is kept under it."""
    dep_id, cfg, settings, *root = task
    run_root = root[0] if root else None
    rows: dict[float, dict] = {}
    failure: list[str] = []

    def meets(qps: float) -> bool:
        row = run_config(with_qps(cfg, qps), _probe_dir(run_root, qps))
        ok, why = meets_slo(row, settings.slo)
        rows[qps] = {**row, "met": ok, "why": why}
        if row["status"] != "ok":
            failure.append(row["error"])
            raise _Abort
        return ok

    try:
        found = find_capacity(meets, settings)
    except _Abort:
        return dep_id, {"status": "error", "error": failure[0], "probes": _probe_rows(rows)}
    best = rows.get(found.capacity_qps) if found.capacity_qps > 0 else None
    result = {"status": found.status, "error": None, "capacity_qps": found.capacity_qps}
    result["num_probes"] = len(found.probes)
    if best is None:  # nothing met the SLOs: say why at the lowest rate tried
        result["error"] = rows[min(rows)]["why"]
    for name in settings.slo | {settings.pareto_metric: 0}:
        result[slo_column(name)] = best.get(slo_column(name)) if best else None
    for col in _CAPACITY_EXTRA:
        result[col] = best.get(col) if best else None
    result["probes"] = _probe_rows(rows)
    return dep_id, result


def evaluate_deployment(task: tuple) -> tuple[str, dict[str, Any]]:
    """One deployment at the fixed load of a min-replicas/GPUs/cost objective: (id, config,
    CapacitySettings[, run directory]) -> (id, result with `met` and `why`)."""
    dep_id, cfg, settings, *run_dir = task
    row = run_config(with_qps(cfg, settings.load), run_dir[0] if run_dir else None)
    if row["status"] != "ok":
        return dep_id, {"status": "error", "error": row["error"], "met": False}
    ok, why = meets_slo(row, settings.slo)
    result = {"status": "ok", "error": None, "met": ok, "why": why}
    for name in settings.slo | {settings.pareto_metric: 0}:
        result[slo_column(name)] = row.get(slo_column(name))
    for col in (*_CAPACITY_EXTRA, "num_rejected", "num_completed", "num_requests"):
        result[col] = row.get(col)
    return dep_id, result


class _Abort(Exception):
    """A probe failed for a reason other than the SLOs (bad config): stop this search."""


_CAPACITY_EXTRA = (
    "throughput_requests_per_s",
    "throughput_output_tokens_per_s",
    "kv_usage_mean",
    "batch_fill_mean",
    "busy_fraction_mean",
    "num_preemptions",
)
_PROBE_COLUMNS = (
    "met",
    "why",
    "prefill_e2e_time_p90",
    "tbt_p99",
    "request_scheduling_delay_p99",
    "request_e2e_time_p90",
    "throughput_requests_per_s",
)


def _probe_rows(rows: dict[float, dict]) -> list[dict]:
    return [{"qps": q, **{c: r.get(c) for c in _PROBE_COLUMNS}} for q, r in rows.items()]
