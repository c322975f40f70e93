"""SLOs and capacity-search settings: the `capacity` section of a sweep file."""

import math
import re
from dataclasses import dataclass, field

from vidur_fast.explore.errors import SweepFileError

# SLO metric stem -> summary metric (flattened summary columns are <metric>_<stat>)
SLO_METRICS = {
    "ttft": "prefill_e2e_time",
    "tbt": "tbt",
    "scheduling_delay": "request_scheduling_delay",
    "e2e": "request_e2e_time",
    "tpot": "decode_time_execution_plus_preemption_normalized",
}
SLO_STATS = ("p50", "p90", "p95", "p99", "mean", "max")
_SLO_RE = re.compile(rf"({'|'.join(SLO_METRICS)})_({'|'.join(SLO_STATS)})")
_EXAMPLE = "ttft_p90, tbt_p99, scheduling_delay_p99"
# what a capacity run answers: the highest rate per deployment, or the cheapest deployment
# (fewest replicas, fewest GPUs, lowest price per hour) that meets the SLOs at a fixed load
OBJECTIVES = ("max_qps", "min_replicas", "min_gpus", "min_cost")


@dataclass(frozen=True)
class CapacitySettings:
    """How the maximum QPS is searched and what it must satisfy."""

    slo: dict[str, float]
    """SLO name (e.g. ttft_p90) -> limit in seconds; every one must hold."""
    start_qps: float = 1.0
    """First QPS tried; doubled (or halved) until the SLOs flip, then bisected."""
    rel_tol: float = 0.05
    """Stop bisecting when (fail - pass) <= rel_tol x fail."""
    max_qps: float = 4096.0
    """Stop doubling here; a deployment meeting the SLOs at max_qps is reported capped."""
    min_qps: float = 0.01
    """Stop halving here; a deployment failing at min_qps is reported unreachable."""
    max_probes: int = 60
    """Upper bound on simulations per deployment."""
    pareto_metric: str = field(default="")
    """SLO-style metric on the latency axis of the Pareto frontier (default: first SLO)."""
    objective: str = "max_qps"
    """max_qps: search each deployment's highest rate; min_replicas, min_gpus, min_cost:
    simulate every deployment once at `load` and pick the smallest one that meets the SLOs."""
    load: float | None = None
    """The fixed load of a min_* objective: requests/s for a synthetic workload, a replay
    speed (rate multiplier) for a trace."""


def slo_column(name: str) -> str:
    """Flattened summary column of an SLO name: ttft_p90 -> prefill_e2e_time_p90."""
    metric, stat = _SLO_RE.fullmatch(name).groups()
    return f"{SLO_METRICS[metric]}_{stat}"


def _positive(key: str, value, allow_int_only: bool = False) -> float:
    ok = isinstance(value, int | float) and not isinstance(value, bool)
    if not ok or not math.isfinite(value) or value <= 0:
        raise SweepFileError(f"capacity.{key}: must be a number > 0 (got {value!r})")
    if allow_int_only and not isinstance(value, int):
        raise SweepFileError(f"capacity.{key}: must be an integer (got {value!r})")
    return value


def parse_capacity(
    section: dict | None, objective: str | None = None, load: float | None = None
) -> CapacitySettings:
    """Check the `capacity` section (objective and load given on the command line take the
    place of the file's); raise SweepFileError naming the bad key."""
    if section is None:
        raise SweepFileError(f"capacity: missing section; give at least capacity.slo ({_EXAMPLE})")
    section = dict(section)
    if objective is not None:
        section["objective"] = objective
    if load is not None:
        section["load"] = load
    allowed = [f for f in CapacitySettings.__dataclass_fields__]
    for key in section:
        if key not in allowed:
            raise SweepFileError(f"capacity.{key}: unknown key; allowed: {', '.join(allowed)}")
    slo = section.get("slo")
    if not isinstance(slo, dict) or not slo:
        raise SweepFileError(f"capacity.slo: give at least one SLO in seconds ({_EXAMPLE})")
    limits = {}
    for name, limit in slo.items():
        if not isinstance(name, str) or not _SLO_RE.fullmatch(name):
            raise SweepFileError(
                f"capacity.slo.{name}: unknown SLO; use <metric>_<stat> with metric one of "
                f"{', '.join(SLO_METRICS)} and stat one of {', '.join(SLO_STATS)}"
            )
        limits[name] = float(_positive(f"slo.{name}", limit))
    kwargs = {"slo": limits}
    for key in ("start_qps", "rel_tol", "max_qps", "min_qps"):
        if key in section:
            kwargs[key] = float(_positive(key, section[key]))
    if "max_probes" in section:
        kwargs["max_probes"] = int(_positive("max_probes", section["max_probes"], True))
    metric = section.get("pareto_metric", next(iter(limits)))
    if not isinstance(metric, str) or not _SLO_RE.fullmatch(metric):
        raise SweepFileError(
            f"capacity.pareto_metric: must be an SLO-style name such as ttft_p90 (got {metric!r})"
        )
    kwargs["pareto_metric"] = metric
    goal = section.get("objective", "max_qps")
    goal = goal.replace("-", "_") if isinstance(goal, str) else goal
    if goal not in OBJECTIVES:
        raise SweepFileError(
            f"capacity.objective: must be one of {', '.join(OBJECTIVES)} (got {goal!r})"
        )
    kwargs["objective"] = goal
    if "load" in section and goal == "max_qps":
        raise SweepFileError(
            "capacity.load: only the min_replicas, min_gpus and min_cost objectives take a "
            "fixed load (max_qps searches the rate)"
        )
    if "load" in section:
        kwargs["load"] = float(_positive("load", section["load"]))
    elif goal != "max_qps":
        raise SweepFileError(
            f"capacity.load: the objective {goal} needs the load to meet (requests/s for a "
            "synthetic workload, a rate multiplier for a trace); give capacity.load or --load"
        )
    s = CapacitySettings(**kwargs)
    if s.rel_tol >= 1:
        raise SweepFileError(f"capacity.rel_tol: must be < 1 (got {s.rel_tol})")
    if not s.min_qps <= s.start_qps <= s.max_qps:
        raise SweepFileError(
            f"capacity.start_qps: must lie in [min_qps, max_qps] = [{s.min_qps}, {s.max_qps}] "
            f"(got {s.start_qps})"
        )
    return s


def meets_slo(row: dict, slo: dict[str, float]) -> tuple[bool, str | None]:
    """Whether a simulated point (flattened summary row) meets every SLO, and why not.

    A point also fails when requests were rejected or left unfinished: their latencies are
    missing from the percentiles, which would otherwise look better than they are.
    """
    if row.get("status") != "ok":
        return False, row.get("error") or "simulation failed"
    if row.get("num_rejected"):
        return False, f"{row['num_rejected']} requests rejected (cannot fit a replica)"
    if row.get("num_completed") != row.get("num_requests"):
        return False, f"only {row.get('num_completed')} of {row.get('num_requests')} finished"
    for name, limit in slo.items():
        value = row.get(slo_column(name))
        if value is None or not value <= limit:
            return False, f"{name} {value} > {limit}"
    return True, None
