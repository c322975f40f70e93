"""`vidur-fast vidur-compat`: run a simulation from Vidur's own command-line flags."""

import datetime
from dataclasses import replace

from vidur_fast.api import simulate
from vidur_fast.config.vidur_flags import config_from_vidur_args
from vidur_fast.errors import ConfigError
from vidur_fast.outputs.console import format_summary
from vidur_fast.outputs.writer import claim_output_dir, write_run


def main_compat(argv: list[str]) -> int:
    """Run a simulation from Vidur flags; the run directory comes from --output-dir if given."""
    from vidur_fast.commands.simulate import take_option

    out_dir, argv = take_option(argv, "--output-dir", "a directory")
    if out_dir is not None and (not out_dir.strip() or out_dir.startswith("--")):
        raise ConfigError("--output-dir: needs a directory")
    cfg = config_from_vidur_args(argv)
    if out_dir is None:
        out_dir = "runs/" + datetime.datetime.now().strftime("%Y-%m-%d_%H-%M-%S-%f")
    cfg = replace(cfg, output=replace(cfg.output, dir=out_dir))
    with claim_output_dir(cfg.output) as claim:
        result = simulate(cfg, progress=True)
        path = write_run(result, cfg.output, claim)
    print(format_summary(result.summary))
    print(f"run directory: {path}")
    return 0
