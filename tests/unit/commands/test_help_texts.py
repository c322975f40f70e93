"""Every command's --help reads well at 80 and 120 columns: no line wider than the terminal
(apart from usage lines and flag names longer than that), no help entry broken mid-sentence by
a newline in its source text, and no internal references (section numbers of design notes,
machine paths)."""

import re

import pytest

from vidur_fast.commands.main import main

HELPS = (
    [],
    ["simulate"],
    ["simulate", "workload:synthetic"],
    ["simulate", "workload:trace"],
    ["simulate", "workload:closed_loop"],
    ["simulate", "scheduler:vllm_v1"],
    ["simulate", "scheduler:sarathi"],
    ["simulate", "router:prefix_aware"],
    ["sweep"],
    ["capacity"],
    ["report"],
    ["validate"],
    ["profiles"],
    ["profiles", "list"],
    ["profiles", "build"],
    ["profiles", "show"],
    ["profiles", "model"],
    ["vidur-compat"],
    ["vidur-compat", "explore"],
)
INTERNAL = re.compile(r"SPEC\s*\d|\bSPEC\b|/work/|/home/|/root/|/Users/|/tmp/")
_BOX_LINE = re.compile(r"^│ (.*) │$")


def help_text(argv: list[str], columns: int, monkeypatch, capsys) -> str:
    monkeypatch.setenv("COLUMNS", str(columns))
    monkeypatch.setenv("LINES", "50")
    try:
        code = main([*argv, "--help"])
    except SystemExit as exc:
        code = exc.code
    out = capsys.readouterr()
    assert code in (0, None), (argv, out.err[-500:])
    return out.out


def _content(line: str) -> str:
    """A help line without the argument box's frame, ending in the one-space right pad."""
    m = _BOX_LINE.match(line)
    return m.group(1) + " " if m else line


def hard_wraps(text: str) -> list[str]:
    """Lines of the argument lists that end where the next word would still have fitted:
    a newline in the help source, not the help formatter's own wrapping."""
    found = []
    lines = text.splitlines()
    for k in range(len(lines) - 1):
        a, b = _content(lines[k]), _content(lines[k + 1])
        indent = len(b) - len(b.lstrip())
        words = b.split()
        if not words or indent < 8 or len(a) <= indent:
            continue  # a new entry, section or paragraph starts at the left
        own = len(a) - len(a.lstrip())
        if own < indent and a[indent - 2 : indent] != "  ":
            continue  # a flag running into the help column, alone on its line
        prev = a[indent:].rstrip()
        if not prev or prev.endswith((".", ":", ";")):
            continue  # the end of a sentence: a paragraph break is allowed
        if words[0].startswith(("(default", "(required")):
            continue
        if indent + len(prev) + 1 + len(words[0]) <= len(a) - 1:
            found.append(f"{lines[k]}\n{lines[k + 1]}")
    return found


@pytest.mark.parametrize("argv", HELPS, ids=lambda a: " ".join(a) or "top")
def test_help_reads_well_at_80_and_120_columns(argv, monkeypatch, capsys):
    for columns in (80, 120):
        text = help_text(argv, columns, monkeypatch, capsys)
        assert text.strip(), argv
        wide = [
            line
            for line in text.splitlines()
            if len(line) > columns
            and not line.startswith(("usage:", "       "))
            and len(line.split()) > 1  # a flag name longer than the terminal cannot break
        ]
        assert not wide, (columns, wide[:3])
        assert not hard_wraps(text), (columns, hard_wraps(text)[:3])
        assert not INTERNAL.search(text), INTERNAL.search(text).group(0)


def test_docs_cite_no_internal_sections_or_machine_paths():
    from tests.conftest import REPO

    for path in [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]:
        text = path.read_text()
        hit = INTERNAL.search(text)
        assert hit is None, (path.name, text[max(0, hit.start() - 60) : hit.end() + 20])


def test_help_in_a_terminal_box_has_no_hard_wraps(tmp_path):
    """The boxed layout the help takes when printed by the program itself."""
    import os
    import subprocess
    import sys

    for argv in (["simulate"], ["capacity"]):
        env = {**os.environ, "COLUMNS": "80"}
        out = subprocess.run(
            [sys.executable, "-m", "vidur_fast", *argv, "--help"],
            capture_output=True,
            text=True,
            env=env,
            timeout=120,
        ).stdout
        assert "│" in out, out[:300]
        assert not hard_wraps(out), hard_wraps(out)[:3]
        assert all(len(x) <= 80 for x in out.splitlines() if not x.startswith("usage")), argv


def test_profiles_list_is_short_lines_without_install_paths(capsys):
    assert main(["profiles", "list"]) == 0
    out = capsys.readouterr().out
    assert "source aiconfigurator" in out and "h100" in out
    assert all(len(line) <= 80 for line in out.splitlines()), out
    assert "site-packages" not in out and "{" not in out
