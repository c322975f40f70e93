"""`vidur-fast vidur-compat`: run a simulation from Vidur's own command-line flags (its main
and canary lines), into a run directory laid out as Vidur names it."""

import datetime
import sys
from dataclasses import replace
from pathlib import Path

from vidur_fast.api import simulate
from vidur_fast.config.vidur_flags import CANARY, accepted_flags, read_vidur_command
from vidur_fast.errors import ConfigError
from vidur_fast.outputs.console import format_summary
from vidur_fast.outputs.writer import check_output_dir, write_run

USAGE = """usage: vidur-fast vidur-compat [VIDUR FLAGS] [--output-dir DIR]

Runs a Vidur command line unchanged (main line, or canary when any canary-only flag or value
appears: vllm_v1, --cache_config_*, lop/sticky routers, the trace generator, random_forest).
Without Vidur's profiling data (data/profiling, or --*_compute_input_file) the embedded timing
data for the model and device are used, with a notice. The run directory is --output-dir, or
<--metrics_config_output_dir>/<timestamp> (default simulator_output/<timestamp>).
Flags read, by section, with their defaults:
"""


def format_help() -> str:
    lines = [USAGE]
    section = None
    rows = accepted_flags()
    width = min(max(len(flag) for _, flag, _ in rows), 56)
    for sec, flag, default in rows:
        if sec != section:
            lines.append(f"{sec}:")
            section = sec
        if len(flag) > width:
            lines.append(f"  {flag}\n  {'':<{width}}  {default}")
        else:
            lines.append(f"  {flag:<{width}}  {default}")
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


def main_compat(argv: list[str]) -> int:
    """Run a simulation from Vidur flags and write its run directory."""
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
    check_output_dir(cfg.output)
    result = simulate(cfg, progress=True)
    path = write_run(result, cfg.output)
    print(format_summary(result.summary))
    print(f"run directory: {path}")
    return 0
