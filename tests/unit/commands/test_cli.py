"""CLI behaviour: bad input is one line on stderr, exit code 2, and no run directory."""

import subprocess
import sys

import pytest

from tests.helpers.cli_args import FAST_TIMING_ARGS

FAST = [*FAST_TIMING_ARGS, "--quiet"]


def _cli(*args, cwd=None):
    return subprocess.run(
        [sys.executable, "-m", "vidur_fast.commands.main", *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        timeout=600,
    )


@pytest.mark.parametrize(
    "args,needle",
    [
        (["--cluster.tp", "3"], "cluster.tp"),
        (["--cluster.pp", "5"], "cluster.pp"),
        (["--cluster.model", "no-such-model"], "cluster.model"),
        (["--cluster.device", "tpu"], "cluster.device"),
        (["--cluster.num-replicas", "0"], "cluster.num_replicas"),
        (["scheduler:sarathi", "--scheduler.chunk-size", "0"], "scheduler.chunk_size"),
        (["scheduler:sarathi", "--scheduler.batch-size-cap", "0"], "scheduler.batch_size_cap"),
        (
            ["workload:synthetic", "workload.intervals:poisson", "--workload.intervals.qps", "0"],
            "qps",
        ),
        (["workload:trace", "--workload.path", "/nonexistent.csv"], "nonexistent"),
    ],
)
def test_bad_input_is_one_line_exit_2_no_output(tmp_path, args, needle):
    out = tmp_path / "run"
    res = _cli("--output.dir", str(out), *FAST, *args)
    assert res.returncode == 2, res.stderr
    lines = [x for x in res.stderr.strip().splitlines() if x.strip()]
    assert len(lines) == 1 and lines[0].startswith("error:"), res.stderr
    assert needle in lines[0]
    assert not out.exists()
    assert not any(tmp_path.iterdir())


def test_small_run_writes_a_complete_run_directory(tmp_path):
    out = tmp_path / "run"
    res = _cli(
        "--output.dir", str(out), *FAST, "workload:synthetic", "--workload.num-requests", "50"
    )
    assert res.returncode == 0, res.stderr
    names = sorted(p.name for p in out.iterdir())
    assert names == [
        ".vidur-fast-run",  # the marker that lets --output.overwrite replace it
        "config.json",
        "metrics.h5",
        "request_metrics.csv",
        "summary.json",
    ]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run"]  # no lock or temp dir left
    # existing directory without --output.overwrite is refused
    res2 = _cli("--output.dir", str(out), *FAST)
    assert res2.returncode == 2 and "already exists" in res2.stderr


def test_profiles_show_prints_times_and_plots(tmp_path):
    png = tmp_path / "grids.png"
    res = _cli("profiles", "show", *FAST[:-1], "--plot", str(png))
    assert res.returncode == 0, res.stderr
    assert "decode attn" in res.stdout and "prefill attn" in res.stdout
    assert png.stat().st_size > 10_000


def test_profiles_build_bad_parallelism_is_one_line():
    res = _cli("profiles", "build", "--cluster.tp", "3", *FAST[:-1])
    assert res.returncode == 2
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and "cluster.tp" in lines[0]
