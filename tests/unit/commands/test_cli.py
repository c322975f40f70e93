"""CLI behaviour: bad input is one line on stderr, exit code 2, and no run directory."""

import json
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


@pytest.mark.parametrize("args", [["--help"], ["--preset", "list"]])
def test_a_closed_pipe_ends_the_command_quietly(args):
    import subprocess
    import sys

    cmd = " ".join([sys.executable, "-m", "vidur_fast", *args]) + " | head -c 1 >/dev/null"
    out = subprocess.run(["bash", "-o", "pipefail", "-c", cmd], capture_output=True, text=True)
    assert "Traceback" not in out.stderr and "BrokenPipe" not in out.stderr, out.stderr
    assert out.returncode == 0


def test_rejected_requests_are_announced_with_their_bound(tmp_path, capsys):
    from tests.helpers.cli_args import FAST_TIMING_ARGS
    from vidur_fast.commands.main import main

    trace = tmp_path / "t.csv"
    rows = ["arrived_at,num_prefill_tokens,num_decode_tokens"]
    rows += [f"{0.1 * i},{9000 if i % 3 == 0 else 500},50" for i in range(30)]
    trace.write_text("\n".join(rows) + "\n")
    out = tmp_path / "run"
    argv = [
        "--output.dir",
        str(out),
        *FAST_TIMING_ARGS,
        "workload:trace",
        "--workload.path",
        str(trace),
    ]
    assert main(argv) == 0
    io = capsys.readouterr()
    warn = [x for x in io.err.splitlines() if x.startswith("warning:")]
    assert len(warn) == 1 and "10 of 30 requests rejected" in warn[0] and "8192" in warn[0], warn
    assert io.out.splitlines()[0].startswith(
        "meta-llama/Meta-Llama-3-8B on h100 (TP1 PP1, 1 replica)"
    )
    summary = json.loads((out / "summary.json").read_text())
    assert summary["rejected_by_reason"]["max_len"]["count"] == 10
    assert summary["run"]["scheduler"] == "vllm_v1" and summary["run"]["requests"] == 30


def test_top_level_help_lists_every_command(capsys):
    from vidur_fast.commands.main import COMMANDS, main

    assert main(["--help"]) == 0
    out = capsys.readouterr().out
    for command in COMMANDS:
        assert f"\n  {command} " in out, command
    assert "common invocations" in out and len(max(out.splitlines(), key=len)) <= 100


def test_a_misspelt_command_gets_a_suggestion(capsys):
    from vidur_fast.commands.main import main

    with pytest.raises(SystemExit) as exc:
        main(["simlate"])
    assert exc.value.code == 2
    assert "did you mean 'simulate'" in capsys.readouterr().err


def test_run_flags_may_follow_a_subcommand(tmp_path):
    """A misplaced-looking flag: --output.dir (and other run-wide flags) after workload: ..."""
    from tests.helpers.cli_args import FAST_TIMING_ARGS
    from vidur_fast.commands.main import main

    out = tmp_path / "zipf"
    argv = ["--quiet", *FAST_TIMING_ARGS, "workload:synthetic", "workload.lengths:zipf"]
    argv += ["--workload.num-requests", "30", "--output.dir", str(out), "--seed", "4"]
    assert main(argv) == 0
    cfg = json.loads((out / "config.json").read_text())
    assert cfg["seed"] == 4 and cfg["workload"]["lengths"]["type"] == "ZipfLengths"


def test_a_misspelt_flag_gets_a_suggestion(capsys):
    from vidur_fast.commands.main import main

    with pytest.raises(SystemExit) as exc:
        main(["--cluster.devce", "h100"])
    assert exc.value.code == 2
    err = [x for x in capsys.readouterr().err.splitlines() if x.strip()]
    assert len(err) == 1 and "did you mean --cluster.device?" in err[0], err
