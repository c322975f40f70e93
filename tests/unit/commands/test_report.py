"""`vidur-fast report`: side-by-side table with relative differences, plots, bad input exit 2."""

import csv
import math
import subprocess
import sys

import pytest

from tests.helpers.outputs_fixtures import small_config, write_plain
from vidur_fast.api import simulate
from vidur_fast.commands.main import main
from vidur_fast.commands.report import relative_diff


@pytest.fixture(scope="module")
def second_run(tmp_path_factory):
    """Same workload at a higher load, so the figures differ from the base run."""
    result = simulate(small_config(qps=12.0))
    return write_plain(result, tmp_path_factory.mktemp("runs") / "busier")


def test_report_two_runs_prints_relative_differences(
    small_result, small_run_dir, second_run, tmp_path, capsys
):
    out = tmp_path / "cmp"
    assert main(["report", str(small_run_dir), str(second_run), "--out", str(out)]) == 0
    text = capsys.readouterr().out
    lines = text.splitlines()
    assert "base" in lines[0] and "busier" in lines[0]
    ttft = next(line for line in lines if line.startswith("TTFT p99"))
    base = small_result.summary["prefill_e2e_time"]["p99"]
    assert f"{base:.4g}" in ttft and "%)" in ttft
    assert (out / "latency_cdfs.png").stat().st_size > 5000
    rows = list(csv.reader((out / "report.csv").open()))
    assert rows[0] == ["metric", "base", "busier", "busier vs base (%)"]
    row = next(r for r in rows if r[0] == "TTFT p99 (s)")
    a, b = float(row[1]), float(row[2])
    assert a == base
    assert float(row[3]) == pytest.approx(100 * (b - a) / a, abs=1e-3)
    assert f"({100 * (b - a) / a:+.1f}%)" in ttft


def test_report_single_run_writes_the_full_plot_set(small_run_dir, tmp_path, capsys):
    out = tmp_path / "one"
    assert main(["report", str(small_run_dir), "--out", str(out)]) == 0
    names = sorted(p.name for p in out.iterdir())
    assert names == ["latency_cdfs.png", "replica_ttft.png", "report.csv", "timeseries.png"]
    assert "report written to" in capsys.readouterr().out


def test_report_writes_only_where_told(small_result, tmp_path, capsys):
    run = write_plain(small_result, tmp_path / "r")
    before = sorted(p.name for p in run.iterdir())
    assert main(["report", str(run)]) == 0
    assert sorted(p.name for p in run.iterdir()) == before  # nothing written into the run
    assert "TTFT p50" in capsys.readouterr().out
    assert main(["report", str(run), "--no-plots", "--out", str(tmp_path / "o")]) == 0
    assert sorted(p.name for p in (tmp_path / "o").iterdir()) == ["report.csv"]


def test_report_bad_inputs_exit_2_with_one_line(small_result, small_run_dir, tmp_path, capsys):
    no_h5 = write_plain(small_result, tmp_path / "no_h5", write_metrics_h5=False)
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "summary.json").write_text("{not json")
    cases = [
        ([str(tmp_path / "missing")], "not a directory"),
        ([str(tmp_path)], "not a run directory"),
        ([str(small_run_dir), str(no_h5)], "no metrics.h5"),
        ([str(broken)], "cannot read JSON"),
    ]
    for args, needle in cases:
        with pytest.raises(SystemExit) as exc:
            main(["report", *args, "--out", str(tmp_path / "out")])
        assert exc.value.code == 2, args
        captured = capsys.readouterr()
        lines = [x for x in captured.err.splitlines() if x.strip()]
        assert len(lines) == 1 and lines[0].startswith("error:") and needle in lines[0], lines
        assert not captured.out and not (tmp_path / "out").exists()
    # the table alone needs only summary.json
    assert (
        main(["report", str(small_run_dir), str(no_h5), "--no-plots", "--out", str(tmp_path / "t")])
        == 0
    )
    assert "(+0.0%)" in capsys.readouterr().out


def test_report_cli_entry_point(tmp_path):
    res = subprocess.run(
        [sys.executable, "-m", "vidur_fast.commands.main", "report", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert res.returncode == 2 and res.stderr.startswith("error: ")
    assert len(res.stderr.strip().splitlines()) == 1


def test_relative_diff():
    assert relative_diff(1.1, 1.0) == pytest.approx(0.1)
    assert relative_diff(0.0, 0.0) == 0.0
    assert math.isnan(relative_diff(1.0, 0.0))
    assert math.isnan(relative_diff(math.nan, 1.0))
