"""Command-line entry points of `vidur-fast sweep` and `vidur-fast capacity`."""

from dataclasses import dataclass
from typing import Annotated, Literal

import tyro


@dataclass(frozen=True)
class SweepArgs:
    """Run every point of a grid of configs; one row of summary metrics per point."""

    config: Annotated[str, tyro.conf.Positional, tyro.conf.arg(metavar="CONFIG")]
    """Sweep file (YAML or JSON) with `base` and `grid` (see docs/sweeps.md)."""
    out: str | None = None
    """Output directory (default runs/sweep-<file stem>); rerunning resumes it."""
    executor: Literal["local", "ray"] = "local"
    """local: a process pool on this machine; ray: tasks on a Ray cluster."""
    workers: int | None = None
    """local: processes (default: CPU cores); ray: CPUs of the local cluster it starts."""
    ray_address: str | None = None
    """Existing Ray cluster (HOST:PORT, ray://HOST:PORT or auto); default: start a local one."""
    retry_errors: bool = False
    """On resume, run again the points that ended with an error."""
    quiet: bool = False
    """No progress bar or closing line."""
    keep_runs: bool = False
    """Keep each point's run directory under OUT/runs/ (for vidur-fast report)."""


@dataclass(frozen=True)
class CapacityArgs(SweepArgs):
    """Per deployment, the highest QPS that meets the SLOs of the file's `capacity`
    section (cost per QPS, cost-latency Pareto frontier); or, with --objective
    min-replicas, min-gpus or min-cost, the smallest deployment of the grid that
    meets them at a fixed --load."""

    out: str | None = None
    """Output directory (default runs/capacity-<file stem>); rerunning resumes it."""
    retry_errors: bool = False
    """On resume, search again the deployments that ended with an error."""
    quiet: bool = False
    """No progress bar, results table or closing line."""
    keep_runs: bool = False
    """Keep every simulation's run directory under OUT/runs/ (for vidur-fast report)."""
    objective: Literal["max-qps", "min-replicas", "min-gpus", "min-cost"] | None = None
    """What to answer (default: the file's capacity.objective, else max-qps): the highest
    rate per deployment, or the deployment with the fewest replicas, fewest GPUs or lowest
    price per hour that meets the SLOs at --load."""
    load: float | None = None
    """Fixed load of the min-* objectives (default: the file's capacity.load): requests/s for
    a synthetic workload, a rate multiplier for a trace (4 replays it 4 times as fast)."""


def _main(args_type, prog: str, runner, argv: list[str]) -> int:
    from vidur_fast.commands.errors import parse_args_or_raise

    a = parse_args_or_raise(lambda: tyro.cli(args_type, args=argv, prog=prog), prog)
    extra = {"keep_runs": a.keep_runs}
    if isinstance(a, CapacityArgs):
        extra.update(objective=a.objective, load=a.load)
    runner(
        a.config,
        a.out,
        executor=a.executor,
        workers=a.workers,
        ray_address=a.ray_address,
        retry_errors=a.retry_errors,
        quiet=a.quiet,
        **extra,
    )
    return 0


def main_sweep(argv: list[str]) -> int:
    from vidur_fast.explore.run_sweep import run_sweep

    return _main(SweepArgs, "vidur-fast sweep", run_sweep, argv)


def main_capacity(argv: list[str]) -> int:
    from vidur_fast.explore.run_capacity import run_capacity

    return _main(CapacityArgs, "vidur-fast capacity", run_capacity, argv)
