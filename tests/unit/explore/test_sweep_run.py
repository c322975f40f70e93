"""Sweeps end to end: results table, recorded failures, resume, and process-pool equality."""

import json

import pandas as pd
import pytest

from tests.helpers.sweeps import small_sweep
from vidur_fast.explore.run_sweep import run_sweep


def write(path, data) -> str:
    path.write_text(json.dumps(data))
    return str(path)


@pytest.fixture(scope="module")
def grid_cache(tmp_path_factory):
    return tmp_path_factory.mktemp("grids")


@pytest.fixture(scope="module")
def inline_sweep(tmp_path_factory, grid_cache):
    d = tmp_path_factory.mktemp("sweep")
    cfg = write(d / "s.json", small_sweep(grid_cache))
    return cfg, run_sweep(cfg, str(d / "out"), workers=1, quiet=True)


def test_one_row_per_point_in_grid_order_with_failures_recorded(inline_sweep):
    _, res = inline_sweep
    t = res.table
    assert len(t) == 8 and list(t["point"]) == list(range(8))
    assert list(t["tp"]) == [1] * 4 + [3] * 4
    assert list(t["qps"]) == [4.0, 16.0] * 4
    assert list(t["scheduler"][:4]) == ["vllm_v1"] * 2 + ["sarathi(chunk_size=256)"] * 2
    ok, bad = t[t["tp"] == 1], t[t["tp"] == 3]
    assert (ok["status"] == "ok").all() and (bad["status"] == "error").all()
    assert bad["error"].str.contains("cluster.tp: 3 does not divide").all()
    assert (ok["num_completed"] == 120).all()
    # four times the arrival rate, more throughput; cost is GPUs x price
    thr = ok["throughput_requests_per_s"].to_numpy()
    assert (thr[[1, 3]] > 2 * thr[[0, 2]]).all()
    assert ok["cost_per_hour_usd"].tolist() == [6.98] * 4
    on_disk = pd.read_parquet(res.out_dir / "results.parquet")
    pd.testing.assert_frame_equal(on_disk, t)
    assert len(pd.read_csv(res.out_dir / "results.csv")) == 8


def test_rerun_skips_finished_points_and_runs_only_new_ones(inline_sweep, tmp_path):
    cfg, first = inline_sweep
    log = first.out_dir / "points.jsonl"
    n_lines = len(log.read_text().splitlines())
    again = run_sweep(cfg, str(first.out_dir), workers=1, quiet=True)
    assert (again.n_run, again.n_skipped) == (0, 8)
    assert len(log.read_text().splitlines()) == n_lines
    pd.testing.assert_frame_equal(again.table, first.table)
    # a grid with one more qps: only the 4 new points run (2 ok, 2 recorded errors)
    data = json.loads(open(cfg).read())
    data["grid"]["qps"] = [4, 16, 32]
    bigger = write(tmp_path / "bigger.json", data)
    grown = run_sweep(bigger, str(first.out_dir), workers=1, quiet=True)
    assert (grown.n_run, grown.n_skipped) == (4, 8)
    same = grown.table[grown.table["qps"] != 32].drop(columns="point").reset_index(drop=True)
    pd.testing.assert_frame_equal(same, first.table.drop(columns="point"))


def test_process_pool_gives_identical_results(inline_sweep, tmp_path):
    cfg, first = inline_sweep
    res = run_sweep(cfg, str(tmp_path / "pool"), workers=2, quiet=True)
    assert res.n_run == 8
    pd.testing.assert_frame_equal(res.table, first.table)
    assert (res.out_dir / "results.csv").read_text() == first.table.to_csv(index=False)


def test_out_dir_of_something_else_is_refused(inline_sweep, tmp_path):
    from vidur_fast.explore.errors import SweepFileError

    cfg, _ = inline_sweep
    other = tmp_path / "other"
    other.mkdir()
    (other / "notes.txt").write_text("x")
    with pytest.raises(SweepFileError, match="not a sweep directory"):
        run_sweep(cfg, str(other), workers=1, quiet=True)


def test_cli_sweep_runs_and_resumes(inline_sweep, tmp_path, capsys):
    from vidur_fast.commands.main import main

    cfg, first = inline_sweep
    out = tmp_path / "cli"
    assert main(["sweep", cfg, "--out", str(out), "--workers", "1"]) == 0
    assert "8 points (8 run, 0 already done, 4 with errors)" in capsys.readouterr().err
    pd.testing.assert_frame_equal(pd.read_parquet(out / "results.parquet"), first.table)
    assert main(["sweep", cfg, "--out", str(out), "--workers", "1", "--quiet"]) == 0
    assert capsys.readouterr().err == ""


def test_point_ids_ignore_where_grids_are_cached(inline_sweep, tmp_path):
    cfg, first = inline_sweep
    data = json.loads(open(cfg).read())
    data["base"]["predictor"]["cache_mode"] = "use"
    data["base"]["predictor"]["cache_dir"] = str(tmp_path / "elsewhere")
    moved = run_sweep(write(tmp_path / "m.json", data), str(first.out_dir), workers=1, quiet=True)
    assert moved.n_run == 0


def test_a_sweep_prints_its_table_and_no_bar_without_a_terminal(tmp_path, grid_cache, capsys):
    cfg = write(tmp_path / "s.json", small_sweep(grid_cache))
    run_sweep(cfg, str(tmp_path / "out"), workers=1)
    io = capsys.readouterr()
    lines = io.out.splitlines()
    assert lines[0].split()[:4] == ["point", "tp", "scheduler", "qps"] and len(lines) == 9
    assert "\r" not in io.err  # stderr is not a terminal here: no progress bar


def test_keep_runs_keeps_each_point_for_report(tmp_path, grid_cache, capsys):
    from vidur_fast.commands.main import main
    from vidur_fast.outputs.reader import read_summary

    data = small_sweep(grid_cache)
    data["grid"] = {"qps": [4, 16]}
    cfg = write(tmp_path / "s.json", data)
    out = tmp_path / "out"
    assert main(["sweep", cfg, "--out", str(out), "--workers", "1", "--keep-runs"]) == 0
    table = pd.read_parquet(out / "results.parquet")
    assert table["run_dir"].tolist() == [f"runs/p{k}-{i}" for k, i in enumerate(table["point_id"])]
    for rel, p90 in zip(table["run_dir"], table["prefill_e2e_time_p90"], strict=True):
        assert read_summary(out / rel)["prefill_e2e_time"]["p90"] == p90
    capsys.readouterr()
    # report on the sweep directory: its table, then the kept runs side by side
    assert main(["report", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "point 0" in printed and "point 1" in printed and "TTFT p90 (s)" in printed
    # a removed run directory is run again on resume; the others are kept
    import shutil

    shutil.rmtree(out / table["run_dir"][1])
    again = run_sweep(cfg, str(out), workers=1, quiet=True, keep_runs=True)
    assert (again.n_run, again.n_skipped) == (1, 1)
    assert (out / table["run_dir"][1] / "summary.json").is_file()
    # without --keep-runs the table says so and report prints only the table
    plain = run_sweep(cfg, str(tmp_path / "plain"), workers=1, quiet=True)
    assert "run_dir" not in plain.table
    assert main(["report", str(tmp_path / "plain")]) == 0
    assert "--keep-runs" in capsys.readouterr().out
