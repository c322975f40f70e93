"""Turn the command-line parser's multi-line error panels into one `error: ...` line."""

import contextlib
import io
import re
import sys

from vidur_fast.config.markers import use_tyro_markers
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


def _join_lines(text: str | None) -> str | None:
    """A help text written over several source lines as one paragraph per blank-line-separated
    block, so the help formatter wraps it to the terminal instead of keeping the source's
    line breaks mid-sentence."""
    if not text:
        return text
    blocks = re.split(r"\n\s*\n", text)
    return "\n\n".join(re.sub(r"\s*\n\s*", " ", b).strip() for b in blocks)


def _wrap_description(lines: list, width: int) -> list:
    """The help's free text (a command's description) wrapped to the terminal; the parser
    prints it as one unwrapped line."""
    import textwrap

    out = []
    for line in lines:
        plain = isinstance(line, str) and "\x1b" not in line
        if plain and len(line) > width and not line.startswith(("usage", " ", "│", "╭", "╰")):
            out += textwrap.wrap(line, width - 1, break_on_hyphens=False)
        else:
            out.append(line)
    return out


def tune_help() -> None:
    """Help that reads well at any terminal width (once per process): every field's docstring
    read as flowing text (the config classes wrap them at the source's line length, which
    the help boxes would otherwise keep mid-sentence), and descriptions wrapped to the
    terminal."""
    import shutil

    try:
        from tyro import _docstrings
        from tyro._backends import _tyro_help_formatting as fmt
    except ImportError:  # pragma: no cover
        return
    field_doc = getattr(_docstrings, "get_field_docstring", None)
    if field_doc is not None and not getattr(field_doc, "_vidur_fast", False):

        def get_field_docstring(*args, **kwargs):
            return _join_lines(field_doc(*args, **kwargs))

        get_field_docstring._vidur_fast = True
        _docstrings.get_field_docstring = get_field_docstring
    format_help = getattr(fmt, "format_help", None)
    if format_help is not None and not getattr(format_help, "_vidur_fast", False):

        def wrapped_format_help(*args, **kwargs):
            width = shutil.get_terminal_size().columns
            return _wrap_description(format_help(*args, **kwargs), width)

        wrapped_format_help._vidur_fast = True
        fmt.format_help = wrapped_format_help


def parse_args_or_raise(parse, prog: str):
    """Run parse() (a tyro.cli call); a parse error becomes a one-line ConfigError, while help
    and its exit code 0 pass through unchanged."""
    use_tyro_markers()  # the config classes' CLI markers as tyro's (config/markers.py)
    tune_help()
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
