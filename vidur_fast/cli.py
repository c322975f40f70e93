"""`vidur-fast` command line: simulate (default), profiles, vidur-compat, report, sweep..."""

import datetime
import gc
import sys
from dataclasses import dataclass, replace

import tyro

from vidur_fast.cli_errors import parse_args_or_raise
from vidur_fast.errors import UserError

COMMANDS = (
    "simulate",
    "profiles",
    "vidur-compat",
    "report",
    "sweep",
    "capacity",
    "validate",
)


def freeze_heap() -> None:
    """Put every object alive now out of the cyclic garbage collector's reach. The imports
    (pandas, numba, h5py, ...) leave over a million long-lived objects, and each full
    collection walks them all, several times at interpreter exit: 0.3-0.5 s of a 1-3 s run.
    Called after the imports and before exit; objects created later are collected as usual."""
    gc.freeze()


def _die(msg: str) -> None:
    print(f"error: {msg}", file=sys.stderr)
    raise SystemExit(2)


def cmd_simulate(argv: list[str]) -> int:
    from vidur_fast.api import simulate
    from vidur_fast.config import SimConfig
    from vidur_fast.outputs.writer import check_output_dir, write_run
    from vidur_fast.presets import format_presets, get_preset, split_preset_arg
    from vidur_fast.report_table import format_summary

    preset, argv = split_preset_arg(argv)
    if preset == "list":
        print(format_presets())
        return 0
    cfg = parse_args_or_raise(
        lambda: tyro.cli(
            SimConfig,
            args=argv,
            prog="vidur-fast simulate",
            default=get_preset(preset) if preset else None,
            description="Simulate one deployment. `--preset NAME` starts from a named config "
            "(`--preset list` shows them); other flags override its fields.",
        ),
        "vidur-fast simulate",
    )
    if cfg.output.dir is None:
        stamp = datetime.datetime.now().strftime("%Y-%m-%d_%H-%M-%S-%f")
        cfg = replace(cfg, output=replace(cfg.output, dir=f"runs/{stamp}"))
    check_output_dir(cfg.output)
    freeze_heap()
    result = simulate(cfg, progress=not cfg.quiet)
    path = write_run(result, cfg.output)
    if not cfg.quiet:
        print(format_summary(result.summary))
        print(f"run directory: {path}")
    return 0


@dataclass(frozen=True)
class ProfilesList:
    """List the models, devices, nodes and timing sources available."""

    profile_dir: str | None = None
    """A Vidur-layout profile directory to inspect as well."""


def cmd_profiles(argv: list[str]) -> int:
    from typing import Annotated

    from vidur_fast.profiles_cmd import ProfilesBuild as build_t
    from vidur_fast.profiles_cmd import ProfilesShow as show_t

    sub = parse_args_or_raise(
        lambda: tyro.cli(
            Annotated[ProfilesList, tyro.conf.subcommand("list")]
            | Annotated[build_t, tyro.conf.subcommand("build")]
            | Annotated[show_t, tyro.conf.subcommand("show")],
            args=argv,
            prog="vidur-fast profiles",
        ),
        "vidur-fast profiles",
    )
    from vidur_fast.profiles_cmd import profiles_build, profiles_list, profiles_show

    if isinstance(sub, ProfilesList):
        return profiles_list(sub.profile_dir)
    if isinstance(sub, show_t):
        return profiles_show(sub)
    return profiles_build(sub)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    cmd = "simulate"
    if argv and argv[0] in COMMANDS:
        cmd = argv.pop(0)
    elif argv and not argv[0].startswith("-") and ":" not in argv[0]:
        _die(f"unknown command {argv[0]!r}; commands: {', '.join(COMMANDS)}")
    try:
        if cmd == "simulate":
            return cmd_simulate(argv)
        if cmd in ("sweep", "capacity"):
            from vidur_fast.sweep.cli import main_capacity, main_sweep

            return (main_sweep if cmd == "sweep" else main_capacity)(argv)
        if cmd == "vidur-compat":
            from vidur_fast.vidur_compat import main_compat

            return main_compat(argv)
        if cmd == "report":
            from vidur_fast.report import main_report

            return main_report(argv)
        if cmd == "validate":
            from vidur_fast.validate_cmd import cmd_validate

            return cmd_validate(argv)
        return cmd_profiles(argv)
    except UserError as exc:
        _die(str(exc).splitlines()[0] if str(exc) else type(exc).__name__)
    except MemoryError:
        _die("out of memory: the workload or cluster is too large for this machine")
    except KeyboardInterrupt:
        print("interrupted (no run directory written)", file=sys.stderr)
        return 130
    finally:
        freeze_heap()  # interpreter exit then skips walking everything once more
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
