"""Bad engine settings on the command line: one `error: ...` line, exit code 2, no run dir."""

import subprocess
import sys

import pytest

from vidur_fast.commands.main import main

FAST = ["--predictor.source", "roofline", "--quiet"]

BAD = [
    (["scheduler:sarathi", "--scheduler.chunk-size", "0"], "scheduler.chunk_size"),
    (["scheduler:sarathi", "--scheduler.batch-size-cap", "0"], "scheduler.batch_size_cap"),
    (["scheduler:vllm", "--scheduler.batch-size-cap", "0"], "scheduler.batch_size_cap"),
    (["scheduler:orca", "--scheduler.batch-size-cap", "0"], "scheduler.batch_size_cap"),
    (["scheduler:lightllm", "--scheduler.batch-size-cap", "0"], "scheduler.batch_size_cap"),
    (["scheduler:vllm", "--scheduler.max-tokens-in-batch", "0"], "max_tokens_in_batch"),
    (["scheduler:vllm_v1", "--scheduler.max-num-batched-tokens", "0"], "max_num_batched"),
    (["scheduler:vllm_v1", "--scheduler.max-num-seqs", "0"], "scheduler.max_num_seqs"),
    (["scheduler:lightllm", "--scheduler.block-size", "16"], "scheduler.block_size"),
    (["scheduler:lightllm", "--scheduler.max-waiting-iters", "0"], "max_waiting_iters"),
    (["scheduler:lightllm", "--scheduler.max-tokens-in-batch", "0"], "max_tokens_in_batch"),
    (["--cluster.pp", "2", "scheduler:lightllm"], "cluster.pp"),
    # parameters the chosen scheduler does not have, or no such scheduler
    (["scheduler:orca", "--scheduler.chunk-size", "5"], "--scheduler.chunk-size"),
    (["scheduler:lightllm", "--scheduler.no-such-param", "3"], "--scheduler.no-such-param"),
    (["scheduler:nosuch"], "scheduler:nosuch"),
    (["scheduler:sarathi", "--scheduler.chunk-size", "abc"], "--scheduler.chunk-size"),
]


@pytest.mark.parametrize("args,needle", BAD, ids=[" ".join(a) for a, _ in BAD])
def test_bad_engine_input_is_one_line_exit_2(tmp_path, capsys, args, needle):
    out = tmp_path / "run"
    with pytest.raises(SystemExit) as exc:
        main(["--output.dir", str(out), *FAST, *args])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    lines = [x for x in err.splitlines() if x.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), err
    assert needle in lines[0]
    assert not any(tmp_path.iterdir())


def test_unknown_parameter_in_a_real_process(tmp_path):
    out = tmp_path / "run"
    res = subprocess.run(
        [sys.executable, "-m", "vidur_fast.commands.main", "--output.dir", str(out), *FAST]
        + ["scheduler:orca", "--scheduler.chunk-size", "5"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert res.returncode == 2
    lines = [x for x in res.stderr.splitlines() if x.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), res.stderr
    assert not any(tmp_path.iterdir())


def test_help_still_prints_and_exits_0(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["scheduler:lightllm", "--help"])
    assert exc.value.code in (0, None)
    assert "max-waiting-iters" in capsys.readouterr().out


def test_unknown_profiles_option_is_one_line(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["profiles", "build", "--no-such-option", "2"])
    assert exc.value.code == 2
    lines = [x for x in capsys.readouterr().err.splitlines() if x.strip()]
    assert len(lines) == 1 and "--no-such-option" in lines[0], lines
