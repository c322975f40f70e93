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


@dataclass(frozen=True)
class CapacityArgs(SweepArgs):
    """Per deployment, the highest QPS that meets the SLOs of the file's `capacity` section;
    cost per QPS and the cost-latency Pareto frontier."""

    out: str | None = None
    """Output directory (default runs/capacity-<file stem>); rerunning resumes it."""
    retry_errors: bool = False
    """On resume, search again the deployments that ended with an error."""
    quiet: bool = False
    """No progress bar, results table or closing line."""


def _main(args_type, prog: str, runner, argv: list[str]) -> int:
    from vidur_fast.commands.errors import parse_args_or_raise

    a = parse_args_or_raise(lambda: tyro.cli(args_type, args=argv, prog=prog), prog)
    runner(
        a.config,
        a.out,
        executor=a.executor,
        workers=a.workers,
        ray_address=a.ray_address,
        retry_errors=a.retry_errors,
        quiet=a.quiet,
    )
    return 0


def main_sweep(argv: list[str]) -> int:
    from vidur_fast.explore.run_sweep import run_sweep

    return _main(SweepArgs, "vidur-fast sweep", run_sweep, argv)


def main_capacity(argv: list[str]) -> int:
    from vidur_fast.explore.run_capacity import run_capacity

    return _main(CapacityArgs, "vidur-fast capacity", run_capacity, argv)
