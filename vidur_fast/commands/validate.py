"""`vidur-fast validate FILE.csv [--plot PATH]`: argument handling and printing."""

import json
import sys

import tyro

from vidur_fast.commands.errors import parse_args_or_raise
from vidur_fast.errors import ConfigError
from vidur_fast.outputs.writer import check_output_file
from vidur_fast.validation.run import ValidateConfig, format_report, run_validation, write_plot


def cmd_validate(argv: list[str]) -> int:
    # the CSV may come first, as a bare positional argument
    if argv and not argv[0].startswith("-"):
        argv = ["--csv", argv[0], *argv[1:]]
    cfg = parse_args_or_raise(
        lambda: tyro.cli(ValidateConfig, args=argv, prog="vidur-fast validate"),
        "vidur-fast validate",
    )
    # before the simulations: a path that cannot be written fails now, not after them
    for flag, path in (("--out", cfg.out), ("--plot", cfg.plot)):
        if path is not None:
            check_output_file(path, flag)

    def progress(res) -> None:
        if not cfg.quiet:
            b = res.row
            what = res.skipped or f"ttft {res.sim_ttft_ms:.1f} ms, tpot {res.sim_tpot_ms:.2f} ms"
            print(f"row {b.index}: {what}", file=sys.stderr)

    df, agg = run_validation(cfg, progress=progress)
    print(format_report(df, agg, per_row=not cfg.quiet))
    try:
        if cfg.out:
            df.to_csv(cfg.out, index=False)
        if cfg.plot:
            write_plot(df, cfg.plot)
            print(f"plot: {cfg.plot}")
    except OSError as exc:
        raise ConfigError(f"cannot write {exc.filename or cfg.out} ({exc.strerror})") from None
    if cfg.quiet:
        print(json.dumps(agg))
    return 0
