"""`vidur-fast validate FILE.csv [--plot PATH]` and `validate --silicon-sample`: argument
handling and printing."""

import json
import sys

import tyro

from vidur_fast.commands.errors import parse_args_or_raise
from vidur_fast.errors import ConfigError
from vidur_fast.outputs.writer import check_output_file
from vidur_fast.validation.run import ValidateConfig, format_report, run_validation, write_plot
from vidur_fast.validation.silicon.run import (
    SiliconValidateConfig,
    format_silicon,
    simulate_silicon,
)


def cmd_validate(argv: list[str]) -> int:
    # aiconfigurator's silicon corpus: the installed one, or a file with its own columns
    from vidur_fast.validation.silicon.sample import is_silicon_sample

    if "--silicon-sample" in argv or (argv and is_silicon_sample(argv[0])):
        if argv[0] != "--silicon-sample" and not argv[0].startswith("-"):
            argv = ["--file", argv[0], *argv[1:]]
        return cmd_validate_silicon([a for a in argv if a != "--silicon-sample"])
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


def cmd_validate_silicon(argv: list[str]) -> int:
    cfg = parse_args_or_raise(
        lambda: tyro.cli(SiliconValidateConfig, args=argv, prog="vidur-fast validate"),
        "vidur-fast validate",
    )

    def progress(rec: dict) -> None:
        if not cfg.quiet:
            what = rec["skipped"] or (
                f"ttft {rec['sim_ttft_ms']:.1f} ms ({rec['ttft_err_pct']:+.1f}%), "
                f"tpot {rec['sim_tpot_ms']:.2f} ms ({rec['tpot_err_pct']:+.1f}%)"
            )
            print(f"row {rec['row']}: {what}", file=sys.stderr)

    df = simulate_silicon(cfg, progress=progress)
    print(format_silicon(df, per_row=not cfg.quiet))
    if cfg.out:
        df.to_csv(cfg.out, index=False)
    return 0
