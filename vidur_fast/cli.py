"""`vidur-fast` command line: simulate (default), profiles {list,build,show}."""

import contextlib
import datetime
import io
import re
import sys
from dataclasses import dataclass, field, replace

import tyro

from vidur_fast.errors import UserError

COMMANDS = ("simulate", "profiles", "vidur-compat")


def _die(msg: str) -> None:
    print(f"error: {msg}", file=sys.stderr)
    raise SystemExit(2)


_BOX_CHARS = "│╭╮╰╯─━┃┏┓┗┛ "
_ANSI = re.compile(r"\x1b\[[0-9;]*m")


def _parse_error_line(text: str) -> str:
    """One line out of tyro's boxed parse error: the first paragraph of the box body."""
    rows = [_ANSI.sub("", line).strip(_BOX_CHARS) for line in text.splitlines()]
    body: list[str] = []
    for row in rows[1:]:  # rows[0] is the box title
        rule = not row or set(row) <= set("-─━ ") or row.startswith("For full helptext")
        if rule:  # a blank line or a horizontal rule ends the first paragraph
            if body:
                break
            continue
        body.append(row)
    title = next((r for r in rows if r), "invalid command line")
    line = " ".join(body) or title
    return " ".join(line.split())


def parse_cli(spec, argv: list[str], prog: str):
    """tyro.cli, but a parse error becomes one `error:` line and exit code 2."""
    buf = io.StringIO()
    try:
        with contextlib.redirect_stderr(buf):
            return tyro.cli(spec, args=argv, prog=prog)
    except SystemExit as exc:
        if exc.code in (0, None):
            sys.stderr.write(buf.getvalue())
            raise
        _die(_parse_error_line(buf.getvalue()))


def cmd_simulate(argv: list[str]) -> int:
    from vidur_fast.api import simulate
    from vidur_fast.config import SimConfig
    from vidur_fast.outputs.writer import check_output_dir, write_run
    from vidur_fast.report_table import format_summary

    cfg = parse_cli(SimConfig, argv, "vidur-fast simulate")
    if cfg.output.dir is None:
        stamp = datetime.datetime.now().strftime("%Y-%m-%d_%H-%M-%S-%f")
        cfg = replace(cfg, output=replace(cfg.output, dir=f"runs/{stamp}"))
    check_output_dir(cfg.output)
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


def _profiles_types():
    from vidur_fast.timing.config import PredictorConfig

    @dataclass(frozen=True)
    class Build:
        """Fit the operator models and build (or refresh) the cached timing grids."""

        model: str = "meta-llama/Meta-Llama-3-8B"
        """Catalog model name or HF config.json path."""
        device: str = "h100"
        """GPU type."""
        node: str | None = None
        """Node type; None = the usual node for the device."""
        tp: int = 1
        """Tensor parallel size."""
        pp: int = 1
        """Pipeline stages."""
        predictor: PredictorConfig = field(default_factory=PredictorConfig)

    @dataclass(frozen=True)
    class Show(Build):
        """Print per-layer operator times (ms) for a configuration at a few batch shapes."""

    return Build, Show


def cmd_profiles(argv: list[str]) -> int:
    from typing import Annotated

    build_t, show_t = _profiles_types()
    sub = parse_cli(
        Annotated[ProfilesList, tyro.conf.subcommand("list")]
        | Annotated[build_t, tyro.conf.subcommand("build")]
        | Annotated[show_t, tyro.conf.subcommand("show")],
        argv,
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
        if cmd == "vidur-compat":
            from vidur_fast.vidur_compat import main_compat

            return main_compat(argv)
        return cmd_profiles(argv)
    except UserError as exc:
        _die(str(exc).splitlines()[0] if str(exc) else type(exc).__name__)
    except MemoryError:
        _die("out of memory: the workload or cluster is too large for this machine")
    except KeyboardInterrupt:
        print("interrupted (no run directory written)", file=sys.stderr)
        return 130
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
