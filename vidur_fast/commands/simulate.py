"""`vidur-fast simulate`: one deployment from the command line (starting from a preset or a
config file) to a run directory."""

import datetime
import sys
from dataclasses import replace

import tyro

from vidur_fast.api import simulate
from vidur_fast.commands.errors import parse_args_or_raise
from vidur_fast.commands.main import freeze_heap, release_freed_memory
from vidur_fast.config.files import load_config
from vidur_fast.config.presets import format_presets, get_preset
from vidur_fast.config.sim import SimConfig
from vidur_fast.errors import ConfigError
from vidur_fast.outputs.console import format_summary, format_warnings
from vidur_fast.outputs.writer import claim_output_dir, write_run


def take_option(argv: list[str], name: str, what: str) -> tuple[str | None, list[str]]:
    """Take `NAME VALUE` / `NAME=VALUE` out of argv (tyro parses the rest)."""
    rest: list[str] = []
    value = None
    k = 0
    while k < len(argv):
        a = argv[k]
        if a == name:
            if k + 1 >= len(argv):
                raise ConfigError(f"{name}: needs {what}")
            value = argv[k + 1]
            k += 2
            continue
        if a.startswith(name + "="):
            value = a.split("=", 1)[1]
        else:
            rest.append(a)
        k += 1
    return value, rest


def starting_config(argv: list[str]) -> tuple[SimConfig | None, list[str]]:
    """The config the flags override: a preset, a config file, or None (the defaults)."""
    preset, argv = take_option(argv, "--preset", "a name (or `list`)")
    path, argv = take_option(argv, "--config", "a YAML/JSON file or a run directory")
    if preset is not None and path is not None:
        raise ConfigError("--config: give either --preset or --config, not both")
    if preset is not None:
        return get_preset(preset), argv
    return (load_config(path) if path is not None else None), argv


def cmd_simulate(argv: list[str]) -> int:
    if take_option(argv, "--preset", "a name (or `list`)")[0] == "list":
        print(format_presets())
        return 0
    start, argv = starting_config(argv)
    cfg = parse_args_or_raise(
        lambda: tyro.cli(
            SimConfig,
            args=argv,
            prog="vidur-fast simulate",
            default=start,
            # run-wide flags (--output.dir, --cluster.*, --seed, ...) may also follow a
            # `name:` subcommand
            config=(tyro.conf.CascadeSubcommandArgs,),
            description="Simulate one deployment. `--preset NAME` starts from a named\n"
            "config (`--preset list` shows them), `--config FILE` from a YAML/JSON file of\n"
            "config fields or a run directory's config.json; other flags override its\n"
            "fields.",
        ),
        "vidur-fast simulate",
    )
    if cfg.output.dir is None:
        stamp = datetime.datetime.now().strftime("%Y-%m-%d_%H-%M-%S-%f")
        cfg = replace(cfg, output=replace(cfg.output, dir=f"runs/{stamp}"))
    with claim_output_dir(cfg.output) as claim:  # before the simulation: no run can race it
        freeze_heap()
        result = simulate(cfg, progress=not cfg.quiet)
        release_freed_memory()  # the engine's state, before the writers allocate theirs
        path = write_run(result, cfg.output, claim)
    for line in format_warnings(result.summary):
        print(line, file=sys.stderr)
    if not cfg.quiet:
        print(format_summary(result.summary))
        print(f"run directory: {path}")
    return 0
