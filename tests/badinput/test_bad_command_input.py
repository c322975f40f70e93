"""Every command through the one-line error printer: parser errors, unwritable outputs found
before the work starts, a grid cache path that is a file. Exit code 2, one `error:` line,
nothing written."""

from pathlib import Path

import pytest

from tests.helpers.cli_args import FAST_TIMING_ARGS
from vidur_fast.commands.main import main

FAST = ["--quiet", *FAST_TIMING_ARGS, "--predictor.regressor", "polynomial"]


def _csv(d: Path) -> str:
    p = d / "bench.csv"
    p.write_text("model,device,tp,batch_size,prompt_tokens,output_tokens,ttft_ms,tpot_ms\n")
    return str(p)


def _cachefile(d: Path) -> Path:
    p = d / "cachefile"
    p.write_text("not a directory")
    return p


# (id, argv from the inputs dir, needle, environment overrides from the inputs dir)
CASES = [
    ("validate_parser_error", lambda d: ["validate", "--bogus"], "--csv", None),
    (
        "validate_unknown_flag",
        lambda d: ["validate", _csv(d), "--bogus"],
        "--bogus",
        None,
    ),
    ("report_parser_error", lambda d: ["report", "--bogus"], "--bogus", None),
    ("sweep_parser_error", lambda d: ["sweep", "--bogus"], "sweep", None),
    ("profiles_parser_error", lambda d: ["profiles", "show", "--bogus"], "--bogus", None),
    (
        "validate_out_unwritable",
        lambda d: ["validate", _csv(d), "--out", str(d / "missing" / "o.csv")],
        "--out: directory",
        None,
    ),
    (
        "validate_out_is_a_directory",
        lambda d: ["validate", _csv(d), "--out", str(d)],
        "is a directory",
        None,
    ),
    (
        "validate_plot_missing_dir",
        lambda d: ["validate", _csv(d), "--plot", str(d / "missing" / "p.png")],
        "--plot: directory",
        None,
    ),
    (
        "profiles_show_plot_missing_dir",
        lambda d: ["profiles", "show", *FAST[1:], "--plot", str(d / "missing" / "g.png")],
        "--plot: directory",
        None,
    ),
    (
        "vidur_compat_output_dir_no_value",
        lambda d: ["vidur-compat", "--output-dir"],
        "--output-dir",
        None,
    ),
    (
        "vidur_compat_output_dir_then_flag",
        lambda d: ["vidur-compat", "--output-dir", "--replica_config_device", "h100"],
        "--output-dir needs a directory",
        None,
    ),
    (
        "cache_env_is_a_file",
        lambda d: ["--output.dir", str(d / "out" / "run"), *FAST],
        "VIDUR_FAST_CACHE",
        lambda d: {"VIDUR_FAST_CACHE": str(_cachefile(d))},
    ),
    (
        "cache_dir_is_a_file",
        lambda d: (
            ["--output.dir", str(d / "out" / "run"), *FAST]
            + ["--predictor.cache-dir", str(_cachefile(d))]
        ),
        "predictor.cache_dir",
        None,
    ),
]


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_command_error_is_one_line_exit_2(case, tmp_path, monkeypatch, capsys):
    _, argv_of, needle, env_of = case
    d = tmp_path / "in"
    d.mkdir()
    monkeypatch.setenv("VIDUR_FAST_CACHE", str(tmp_path / "cache"))
    for k, v in (env_of(d) if env_of else {}).items():
        monkeypatch.setenv(k, v)
    argv = argv_of(d)
    before = sorted(p.name for p in d.rglob("*"))
    try:
        code = main(argv)
    except SystemExit as exc:
        code = exc.code
    cap = capsys.readouterr()
    lines = [x for x in cap.err.splitlines() if x.strip()]
    assert code == 2, cap.err
    assert len(lines) == 1 and lines[0].startswith("error: "), cap.err
    assert needle in lines[0], lines[0]
    assert cap.out == ""
    assert sorted(p.name for p in d.rglob("*")) == before
