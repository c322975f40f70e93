"""Fault injection: what a hostile but realistic user (or machine) does to a run.

- --output.overwrite on a directory that is not a run (user files, the working directory or
  a parent of it) is refused with one line and deletes nothing;
- two runs on one output directory: the second is refused while the first holds it;
- SIGTERM / SIGHUP in each phase of a run: exit 128+n, one line, no run dir, no temp dir, no
  lock file, no parent the run created;
- temp dirs left by a killed process are removed by the next run in that parent;
- kill -9 of a sweep: no process survives, and the resumed sweep equals an uninterrupted one;
- a trace edited under a finished sweep reruns the points that read it.
"""

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers.cli import assert_one_error as _one_error
from tests.helpers.cli import run_cli as _cli
from tests.helpers.cli_args import FAST_TIMING_ARGS
from tests.helpers.faults import hidden_leftovers, session_pids, start_stalled, wait_for
from vidur_fast.commands.main import main
from vidur_fast.config.sim import OutputConfig
from vidur_fast.outputs.writer import MARKER, claim_output_dir

RUN = ["--quiet", *FAST_TIMING_ARGS, "--predictor.regressor", "polynomial"]
RUN += ["workload:synthetic", "--workload.num-requests", "60"]
TIMEOUT_S = 120  # generous: the machine running the tests may be loaded


@pytest.fixture
def cache_env(tmp_path, monkeypatch):
    cache = str(tmp_path / "cache")
    monkeypatch.setenv("VIDUR_FAST_CACHE", cache)
    return {"VIDUR_FAST_CACHE": cache}


def _snapshot(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in root.rglob("*") if p.is_file()}


# ---- overwrite refusals ----


def test_overwrite_refuses_a_directory_of_user_files(tmp_path, cache_env, capsys):
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("precious")
    (mine / "sub").mkdir()
    (mine / "sub" / "data.csv").write_text("a,b\n1,2\n")
    before = _snapshot(mine)
    code, lines = _cli(["--output.dir", str(mine), "--output.overwrite", *RUN], capsys)
    _one_error(code, lines, "not a vidur-fast run directory")
    assert _snapshot(mine) == before
    assert hidden_leftovers(tmp_path) == []


@pytest.mark.parametrize("target", [".", "..", "sub/.."])
def test_overwrite_refuses_the_working_directory_and_its_parents(
    target, tmp_path, cache_env, capsys, monkeypatch
):
    work = tmp_path / "work"
    (work / "sub").mkdir(parents=True)
    (work / "keep.txt").write_text("keep")
    (work / MARKER).write_text("{}")  # even a marked one: the working directory is never replaced
    monkeypatch.chdir(work)
    before = _snapshot(tmp_path)
    code, lines = _cli(["--output.dir", target, "--output.overwrite", *RUN], capsys)
    _one_error(code, lines, "working directory")
    assert _snapshot(tmp_path) == before


def test_empty_output_dir_is_refused(tmp_path, cache_env, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    code, lines = _cli(["--output.dir", "", *RUN], capsys)
    _one_error(code, lines, "output.dir: empty path")
    assert list(tmp_path.iterdir()) == []


def test_overwrite_replaces_a_run_and_an_empty_dir(tmp_path, cache_env, capsys):
    run = tmp_path / "run"
    run.mkdir()  # empty: nothing to lose
    assert main(["--output.dir", str(run), "--output.overwrite", *RUN]) == 0
    assert (run / MARKER).is_file()
    (run / "summary.json").write_text("stale")
    assert main(["--output.dir", str(run), "--output.overwrite", *RUN]) == 0
    assert json.loads((run / "summary.json").read_text())["num_requests"] == 60
    assert hidden_leftovers(tmp_path) == []


# ---- two runs on one output directory ----


def test_a_claimed_output_dir_is_refused_to_another_process(tmp_path, cache_env):
    run = tmp_path / "out" / "run"
    argv = [sys.executable, "-m", "vidur_fast.commands.main", "--output.dir", str(run), *RUN]
    env = {**os.environ, **cache_env}
    with claim_output_dir(OutputConfig(dir=str(run))):
        res = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=TIMEOUT_S)
        assert res.returncode == 2, res.stderr
        lines = res.stderr.strip().splitlines()
        assert len(lines) == 1 and "being written by another run" in lines[0], res.stderr
        assert not run.exists()
    # released: the parents the claim created are gone, and the next run may have it
    assert not (tmp_path / "out").exists()
    res = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=TIMEOUT_S)
    assert res.returncode == 0, res.stderr
    assert (run / MARKER).is_file() and hidden_leftovers(tmp_path) == []


def test_the_later_of_two_runs_never_deletes_the_earlier(tmp_path, cache_env):
    # the first run is stalled after claiming; the second (with --output.overwrite) is
    # refused, and once the first finishes its results are intact
    run = tmp_path / "run"
    flag = tmp_path / "flag"
    first = start_stalled("write", flag, ["--output.dir", str(run), *RUN], cache_env)
    try:
        wait_for(lambda: flag.exists() or first.poll() is not None, TIMEOUT_S, "the first run")
        assert first.poll() is None, first.communicate()
        argv = [sys.executable, "-m", "vidur_fast.commands.main", "--output.dir", str(run)]
        res = subprocess.run(
            [*argv, "--output.overwrite", *RUN],
            capture_output=True,
            text=True,
            env={**os.environ, **cache_env},
            timeout=TIMEOUT_S,
        )
        assert res.returncode == 2 and "being written by another run" in res.stderr
    finally:
        os.killpg(first.pid, signal.SIGTERM)
        first.communicate(timeout=TIMEOUT_S)
    assert first.returncode == 128 + signal.SIGTERM


# ---- signals in each phase ----


@pytest.mark.parametrize(
    "phase,sig",
    [
        ("claim", signal.SIGTERM),
        ("simulate", signal.SIGTERM),
        ("write", signal.SIGTERM),
        ("write", signal.SIGHUP),
    ],
    ids=["claim-term", "simulate-term", "write-term", "write-hup"],
)
def test_signal_leaves_no_run_temp_or_lock(phase, sig, tmp_path, cache_env):
    out_root = tmp_path / "out"
    flag = tmp_path / "flag"
    proc = start_stalled(
        phase, flag, ["--output.dir", str(out_root / "a" / "run"), *RUN], cache_env
    )
    try:
        wait_for(lambda: flag.exists() or proc.poll() is not None, TIMEOUT_S, f"phase {phase}")
        assert proc.poll() is None, proc.communicate()
        if phase == "write":
            assert hidden_leftovers(out_root), "the temp dir should exist while writing"
        proc.send_signal(sig)
        _, err = proc.communicate(timeout=TIMEOUT_S)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == 128 + sig, err
    lines = [x for x in err.splitlines() if x.strip()]
    assert len(lines) == 1 and "interrupted" in lines[0], err
    assert not out_root.exists(), sorted(str(p) for p in out_root.rglob("*"))
    assert hidden_leftovers(tmp_path) == []
    assert session_pids(proc.pid) == []


def test_temp_dirs_of_a_killed_run_are_cleaned_by_the_next(tmp_path, cache_env):
    out_root = tmp_path / "out"
    flag = tmp_path / "flag"
    run = out_root / "run"
    proc = start_stalled("write", flag, ["--output.dir", str(run), *RUN], cache_env)
    wait_for(lambda: flag.exists() or proc.poll() is not None, TIMEOUT_S, "the write phase")
    os.killpg(proc.pid, signal.SIGKILL)  # no chance to clean up
    proc.communicate(timeout=TIMEOUT_S)
    left = hidden_leftovers(out_root)
    assert any(x.endswith(".tmp") for x in left), left
    assert any(x.endswith(".lock") for x in left), left
    (out_root / "other.txt").write_text("not ours")
    run = out_root / "another"  # a different run in the same parent cleans up after the dead one
    res = subprocess.run(
        [sys.executable, "-m", "vidur_fast.commands.main", "--output.dir", str(run), *RUN],
        capture_output=True,
        text=True,
        env={**os.environ, **cache_env},
        timeout=TIMEOUT_S,
    )
    assert res.returncode == 0, res.stderr
    assert hidden_leftovers(out_root) == []
    assert sorted(p.name for p in out_root.iterdir()) == ["another", "other.txt"]


# ---- sweeps ----


def _sweep_file(d: Path, cache: str, grid: dict, workload: dict | None = None) -> str:
    from tests.helpers.sweeps import small_base

    base = small_base(cache)
    if workload is not None:
        base["workload"] = workload
    path = d / "sweep.json"
    path.write_text(json.dumps({"base": base, "grid": grid}))
    return str(path)


def _start_long_sweep(tmp_path, cache_env):
    """A 60-point sweep on two workers in its own process group: (sweep file, out dir,
    process). Enough points that it cannot finish between its first point and a signal."""
    grid = {"qps": list(range(2, 32)), "seed": [1, 2]}
    cfg = _sweep_file(tmp_path, cache_env["VIDUR_FAST_CACHE"], grid)
    out = tmp_path / "out"
    proc = subprocess.Popen(
        [sys.executable, "-m", "vidur_fast.commands.main", "sweep", cfg, "--out", str(out)]
        + ["--workers", "2", "--quiet"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, **cache_env},
        start_new_session=True,
    )
    return cfg, out, proc


def test_kill_9_of_a_sweep_leaves_no_process_and_resumes_exactly(tmp_path, cache_env):
    from vidur_fast.explore.run_sweep import run_sweep

    cfg, out, proc = _start_long_sweep(tmp_path, cache_env)
    log = out / "points.jsonl"
    try:
        wait_for(
            lambda: (log.is_file() and log.stat().st_size > 0) or proc.poll() is not None,
            TIMEOUT_S,
            "the first finished points",
        )
        assert proc.poll() is None, "the sweep ended before it could be killed"
        # main, fork server, workers (a loaded machine may still be starting the second)
        wait_for(lambda: len(session_pids(proc.pid)) >= 3, TIMEOUT_S, "the worker processes")
        os.kill(proc.pid, signal.SIGKILL)  # the main process only: nothing can clean up
        proc.communicate(timeout=TIMEOUT_S)
        wait_for(lambda: session_pids(proc.pid) == [], 60, "the workers to exit", every_s=0.2)
    finally:
        for pid in session_pids(proc.pid):
            os.kill(pid, signal.SIGKILL)
    done_before = len(log.read_text().splitlines())
    assert 0 < done_before < 60
    resumed = run_sweep(cfg, str(out), workers=1, quiet=True)
    assert resumed.n_skipped >= 1 and resumed.n_run + resumed.n_skipped == 60
    fresh = run_sweep(cfg, str(tmp_path / "fresh"), workers=1, quiet=True)
    import pandas as pd

    pd.testing.assert_frame_equal(resumed.table, fresh.table)
    assert (resumed.table["status"] == "ok").all()


def test_an_edited_trace_reruns_the_points_that_read_it(tmp_path, cache_env):
    from vidur_fast.explore.run_sweep import run_sweep

    trace = tmp_path / "trace.csv"
    rows = [f"{0.1 * i:.1f},{200 + 10 * i},{20 + i}" for i in range(40)]
    trace.write_text("arrived_at,num_prefill_tokens,num_decode_tokens\n" + "\n".join(rows) + "\n")
    workload = {"type": "trace", "path": str(trace)}
    cfg = _sweep_file(tmp_path, cache_env["VIDUR_FAST_CACHE"], {"seed": [1, 2]}, workload)
    out = str(tmp_path / "out")
    first = run_sweep(cfg, out, workers=1, quiet=True)
    assert (first.n_run, first.n_skipped) == (2, 0)
    assert run_sweep(cfg, out, workers=1, quiet=True).n_skipped == 2  # unchanged: skipped
    rows = [f"{0.1 * i:.1f},{900 + 10 * i},{60 + i}" for i in range(40)]
    trace.write_text("arrived_at,num_prefill_tokens,num_decode_tokens\n" + "\n".join(rows) + "\n")
    edited = run_sweep(cfg, out, workers=1, quiet=True)
    assert (edited.n_run, edited.n_skipped) == (2, 0)
    assert (edited.table["status"] == "ok").all()
    assert set(edited.table["point_id"]).isdisjoint(first.table["point_id"])
    before = first.table["request_e2e_time_mean"].to_numpy()
    after = edited.table["request_e2e_time_mean"].to_numpy()
    assert (after > before).all()


def test_two_sweeps_on_one_out_dir(tmp_path, cache_env, capsys):
    from vidur_fast.explore.store import prepare_dir, release_dir

    cfg = _sweep_file(tmp_path, cache_env["VIDUR_FAST_CACHE"], {"seed": [1]})
    out = tmp_path / "out"
    held = prepare_dir(str(out), "sweep", {"source": cfg, "points": 1})
    try:
        code, lines = _cli(["sweep", cfg, "--out", str(out), "--quiet", "--workers", "1"], capsys)
        _one_error(code, lines, "in use by another run")
    finally:
        release_dir(held)
    assert not (out / "points.jsonl").exists()


def test_sigterm_of_a_sweep_stops_its_workers_and_keeps_finished_points(tmp_path, cache_env):
    cfg, out, proc = _start_long_sweep(tmp_path, cache_env)
    log = out / "points.jsonl"
    try:
        wait_for(
            lambda: (log.is_file() and log.stat().st_size > 0) or proc.poll() is not None,
            TIMEOUT_S,
            "the first finished points",
        )
        assert proc.poll() is None, "the sweep ended before it could be signalled"
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=TIMEOUT_S)
        wait_for(lambda: session_pids(proc.pid) == [], 60, "the workers to exit", every_s=0.2)
    finally:
        for pid in session_pids(proc.pid):
            os.kill(pid, signal.SIGKILL)
    assert proc.returncode == 128 + signal.SIGTERM, err
    lines = [x for x in err.splitlines() if x.strip()]
    assert len(lines) == 1 and "interrupted by SIGTERM" in lines[0] and "resume" in lines[0], err
    assert log.read_text().strip()
    assert not (out / "results.parquet").exists()


def test_sigterm_while_overwriting_keeps_the_old_run(tmp_path, cache_env, capsys):
    run = tmp_path / "run"
    assert main(["--output.dir", str(run), *RUN]) == 0
    before = _snapshot(run)
    flag = tmp_path / "flag"
    argv = ["--output.dir", str(run), "--output.overwrite", *RUN]
    argv[-1] = "80"  # another workload: the new run would differ
    proc = start_stalled("write", flag, argv, cache_env)
    try:
        wait_for(lambda: flag.exists() or proc.poll() is not None, TIMEOUT_S, "the write phase")
        assert proc.poll() is None, proc.communicate()
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=TIMEOUT_S)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == 128 + signal.SIGTERM, err
    assert _snapshot(run) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cache", "flag", "run"]
