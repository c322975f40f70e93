"""Turn the command-line parser's multi-line error panels into one `error: ...` line."""

import contextlib
import io
import re
import sys

from vidur_fast.errors import ConfigError

_BORDER = "│╭╮╰╯┃┏┓┗┛"
_ANSI = re.compile(r"\x1b\[[0-9;]*m")


def _first_section(text: str) -> str:
    """The first paragraph inside a parser error panel, as one line. The panel's first row is
    its title (a box top, or a plain line when the output is not a terminal)."""
    rows = [r for r in _ANSI.sub("", text).splitlines() if r.strip()]
    lines = []
    for raw in rows[1:]:
        line = raw.strip().strip(_BORDER).strip()
        if raw.lstrip().startswith(("╰", "┗")):
            break
        if not line or set(line) <= set("-─━ ") or line.startswith("For full helptext"):
            if lines:
                break
            continue
        lines.append(line)
    if not lines and rows:
        lines = [rows[0].strip().strip(_BORDER).strip(" ─━")]
    return re.sub(r"\s+", " ", " ".join(lines)).strip()


def _suggestion(text: str) -> str | None:
    """The first flag of the parser's "Perhaps you meant" list, if it has one."""
    rows = [r.strip().strip(_BORDER).strip() for r in _ANSI.sub("", text).splitlines()]
    for k, row in enumerate(rows):
        if row.startswith("Perhaps you meant"):
            for nxt in rows[k + 1 :]:
                if nxt.startswith("--"):
                    return nxt.split()[0]
    return None


def parse_args_or_raise(parse, prog: str):
    """Run parse() (a tyro.cli call); a parse error becomes a one-line ConfigError, while help
    and its exit code 0 pass through unchanged."""
    buf = io.StringIO()
    try:
        with contextlib.redirect_stderr(buf):
            return parse()
    except SystemExit as exc:
        if exc.code in (0, None):
            sys.stderr.write(buf.getvalue())
            raise
        text = buf.getvalue()
        summary = _first_section(text) or "invalid command line"
        hint = _suggestion(text)
        if hint:
            summary += f"; did you mean {hint}?"
        raise ConfigError(f"{summary} (see {prog} --help)") from None
