"""`vidur-fast simulate`: one deployment from the command line (or a preset) to a run directory."""

import datetime
from dataclasses import replace

import tyro

from vidur_fast.api import simulate
from vidur_fast.commands.errors import parse_args_or_raise
from vidur_fast.commands.main import freeze_heap
from vidur_fast.config.presets import format_presets, get_preset, split_preset_arg
from vidur_fast.config.sim import SimConfig
from vidur_fast.outputs.console import format_summary
from vidur_fast.outputs.writer import check_output_dir, write_run


def cmd_simulate(argv: list[str]) -> int:
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
