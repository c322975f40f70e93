"""`vidur-fast vidur-compat`: run a simulation from Vidur's own command-line flags (its main
and canary lines), into a run directory laid out as Vidur names it."""

import datetime
import sys
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Literal

from vidur_fast.api import simulate
from vidur_fast.commands.main import freeze_heap
from vidur_fast.config.vidur_flags import CANARY, accepted_flags, read_vidur_command
from vidur_fast.errors import ConfigError
from vidur_fast.outputs.console import format_summary
from vidur_fast.outputs.writer import claim_output_dir, write_run

USAGE = """usage: vidur-fast vidur-compat [VIDUR FLAGS] [--output-dir DIR]
       vidur-fast vidur-compat explore --config-path CONFIG.yml --output-dir DIR

Runs a Vidur command line unchanged: its main line, or canary when any
canary-only flag or value appears (vllm_v1, --cache_config_*, lop/sticky
routers, the trace generator, random_forest). Without Vidur's profiling data
(data/profiling, or --*_compute_input_file) the embedded timing data for the
model and device are used, with a notice. The run directory is --output-dir, or
<--metrics_config_output_dir>/<timestamp> (default
simulator_output/<timestamp>). Flags read, by section, with their defaults:
"""
_WIDTH = 79


def format_help() -> str:
    import textwrap

    lines = [USAGE]
    section = None
    rows = accepted_flags()
    width = min(max(len(flag) for _, flag, _ in rows), 44)
    for sec, flag, default in rows:
        if sec != section:
            lines.append(f"{sec}:")
            section = sec
        text = str(default)
        if len(flag) <= width and 2 + width + 2 + len(text) <= _WIDTH:
            lines.append(f"  {flag:<{width}}  {text}")
        else:  # the default below the flag, wrapped
            lines.append(f"  {flag}")
            lines += textwrap.wrap(text, _WIDTH, initial_indent=" " * 6, subsequent_indent=" " * 6)
    return "\n".join(lines)


def _take_output_dir(argv: list[str]) -> tuple[str | None, list[str]]:
    for k, a in enumerate(argv):
        if a == "--output-dir":
            if k + 1 >= len(argv) or argv[k + 1].startswith("--"):
                raise ConfigError("vidur-compat: --output-dir needs a directory")
            return argv[k + 1], argv[:k] + argv[k + 2 :]
        if a.startswith("--output-dir="):
            return a.split("=", 1)[1], argv[:k] + argv[k + 1 :]
    return None, argv


@dataclass(frozen=True)
class ExplorerArgs:
    """Vidur's config explorer: per job of the YAML the highest QPS whose
    scheduling-delay quantile meets the SLO; OUTPUT/results.csv with
    max_qps_under_sla, cost and Pareto flags."""

    config_path: str
    """Explorer YAML (clusters, schedulers, traces, batch_sizes, tp/pp_dimensions, models)."""
    output_dir: str
    """Results and every probe's run directory (runs/<job hash>/<qps>/); a rerun resumes."""
    num_threads: int | None = None
    """Parallel searches (default: CPU cores - 2)."""
    min_search_granularity: float = 2.5
    """Stop a search when its bracket is narrower than this percentage of the QPS."""
    scheduling_delay_slo_value: float = 5.0
    """SLO on the scheduling delay (s)."""
    scheduling_delay_slo_quantile: float = 0.99
    """Quantile of the scheduling delay held to the SLO."""
    max_iterations: int = 20
    """Probes per job at most."""
    time_limit: float = 30.0
    """Simulated time limit of one probe (minutes)."""
    cache_dir: str | None = None
    """Accepted for Vidur's command line (timing grids are cached by vidur-fast itself)."""
    debug: bool = False
    """Accepted for Vidur's command line."""
    skip_cache_warmup: bool = False
    """Accepted for Vidur's command line (no warm-up pass is needed)."""
    executor: Literal["local", "ray"] = "local"
    """local: a process pool on this machine; ray: tasks on a Ray cluster."""
    ray_address: str | None = None
    """Existing Ray cluster (HOST:PORT, ray://HOST:PORT or auto)."""
    quiet: bool = False


def main_explore(argv: list[str]) -> int:
    # tyro only here: a simulation from Vidur's flags never needs it (~40 ms of imports)
    import tyro

    from vidur_fast.commands.errors import parse_args_or_raise
    from vidur_fast.explore.vidur_explorer import SearchSettings, run_explorer

    prog = "vidur-fast vidur-compat explore"
    a = parse_args_or_raise(lambda: tyro.cli(ExplorerArgs, args=argv, prog=prog), prog)
    settings = SearchSettings(
        min_search_granularity=a.min_search_granularity,
        scheduling_delay_slo_value=a.scheduling_delay_slo_value,
        scheduling_delay_slo_quantile=a.scheduling_delay_slo_quantile,
        max_iterations=a.max_iterations,
        time_limit_min=a.time_limit,
    )
    for name, value, ok in (
        ("--min-search-granularity", a.min_search_granularity, a.min_search_granularity > 0),
        (
            "--scheduling-delay-slo-value",
            a.scheduling_delay_slo_value,
            a.scheduling_delay_slo_value > 0,
        ),
        (
            "--scheduling-delay-slo-quantile",
            a.scheduling_delay_slo_quantile,
            0 < a.scheduling_delay_slo_quantile <= 1,
        ),
        ("--max-iterations", a.max_iterations, a.max_iterations >= 1),
        ("--time-limit", a.time_limit, a.time_limit >= 0),
        ("--num-threads", a.num_threads, a.num_threads is None or a.num_threads >= 1),
    ):
        if not ok:
            raise ConfigError(f"vidur-compat explore: {name} out of range (got {value})")
    df = run_explorer(
        a.config_path,
        a.output_dir,
        settings,
        executor=a.executor,
        workers=a.num_threads,
        ray_address=a.ray_address,
        quiet=a.quiet,
    )
    print(f"{len(df)} jobs; results: {Path(a.output_dir) / 'results.csv'}")
    return 0


def main_compat(argv: list[str]) -> int:
    """Run a simulation from Vidur flags and write its run directory."""
    freeze_heap()  # the imports are done (main turned the collector off for them)
    if argv and argv[0] == "explore":
        return main_explore(argv[1:])
    if any(a in ("-h", "--help") for a in argv):
        print(format_help())
        return 0
    out_dir, argv = _take_output_dir(argv)
    cmd = read_vidur_command(argv, embedded_fallback=True)
    for notice in cmd.notices:
        print(f"notice: {notice}", file=sys.stderr)
    if cmd.line == CANARY:
        print("notice: read as Vidur's canary line", file=sys.stderr)
    if out_dir is None:
        stamp = datetime.datetime.now().strftime("%Y-%m-%d_%H-%M-%S-%f")
        out_dir = str(Path(cmd.output_base) / stamp)
    cfg = replace(cmd.config, output=replace(cmd.config.output, dir=out_dir))
    with claim_output_dir(cfg.output) as claim:
        result = simulate(cfg, progress=True)
        path = write_run(result, cfg.output, claim)
    print(format_summary(result.summary))
    print(f"run directory: {path}")
    return 0
