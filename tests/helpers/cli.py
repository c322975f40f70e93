"""Running the CLI in-process in tests and checking its one-line errors."""

from vidur_fast.commands.main import main


def run_cli(argv, capsys) -> tuple[int, list[str]]:
    """(exit code, non-empty stderr lines) of `vidur-fast argv`."""
    try:
        code = main(argv)
    except SystemExit as exc:
        code = exc.code
    err = capsys.readouterr().err
    return code, [x for x in err.splitlines() if x.strip()]


def assert_one_error(code, lines, needle):
    """Exit 2 and exactly one `error:` line that mentions needle."""
    assert code == 2, lines
    assert len(lines) == 1 and lines[0].startswith("error: "), lines
    assert needle in lines[0], lines[0]
    assert "Traceback" not in lines[0]
