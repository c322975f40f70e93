"""Inputs that are not plain files, and messages that must name things: a trace given as a
FIFO or a shell pipe (`<(zcat ...)`) is read as a stream; a bad one names the pipe and its
row; a model config in the working directory still has a name in messages."""

import json
import os
import shutil
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from tests.helpers.cli import run_cli as _cli
from tests.helpers.cli_args import FAST_TIMING_ARGS
from vidur_fast.commands.main import main

RUN = ["--quiet", *FAST_TIMING_ARGS, "--predictor.regressor", "polynomial"]
HEADER = "arrived_at,num_prefill_tokens,num_decode_tokens\n"
GOOD = HEADER + "".join(f"{0.1 * i:.1f},{100 + i},{10 + i}\n" for i in range(30))


@pytest.fixture(autouse=True)
def _cache(tmp_path, monkeypatch):
    monkeypatch.setenv("VIDUR_FAST_CACHE", str(tmp_path / "cache"))


def _fifo_with(tmp_path: Path, text: str) -> tuple[Path, threading.Thread]:
    fifo = tmp_path / "trace_fifo"
    os.mkfifo(fifo)

    def feed():
        with open(fifo, "w") as f:  # blocks until the reader opens it
            f.write(text)

    t = threading.Thread(target=feed, daemon=True)
    t.start()
    return fifo, t


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs here")
def test_a_fifo_trace_is_read_as_a_stream(tmp_path, capsys):
    fifo, feeder = _fifo_with(tmp_path, GOOD)
    run = tmp_path / "run"
    argv = ["--output.dir", str(run), *RUN, "workload:trace", "--workload.path", str(fifo)]
    assert main(argv) == 0
    feeder.join(timeout=30)
    assert json.loads((run / "summary.json").read_text())["num_requests"] == 30
    assert not list(Path(os.environ.get("TMPDIR", "/tmp")).glob("vidur-fast-trace.*"))


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs here")
def test_a_bad_fifo_trace_names_the_fifo_and_the_row(tmp_path, capsys):
    fifo, feeder = _fifo_with(tmp_path, HEADER + "0,10,5\n1,ten,5\n")
    run = tmp_path / "run"
    argv = ["--output.dir", str(run), *RUN, "workload:trace", "--workload.path", str(fifo)]
    code, lines = _cli(argv, capsys)
    feeder.join(timeout=30)
    assert code == 2 and len(lines) == 1, lines
    assert str(fifo) in lines[0] and "row 2" in lines[0], lines[0]
    assert not run.exists()


@pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash for <(...)")
def test_a_shell_pipe_trace_runs(tmp_path):
    trace = tmp_path / "t.csv"
    trace.write_text(GOOD)
    run = tmp_path / "run"
    cli = [sys.executable, "-m", "vidur_fast.commands.main", "--output.dir", str(run), *RUN]
    cmd = " ".join(cli) + f" workload:trace --workload.path <(cat {trace})"
    res = subprocess.run(["bash", "-c", cmd], capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr
    assert res.stderr == ""
    assert json.loads((run / "summary.json").read_text())["num_requests"] == 30


def test_a_model_config_in_the_working_directory_is_named(tmp_path, capsys, monkeypatch):
    model = tmp_path / "mymodel"
    model.mkdir()
    hf = {
        "architectures": ["LlamaForCausalLM"],
        "hidden_size": 4096,
        "num_attention_heads": 32,
        "num_key_value_heads": 8,
        "num_hidden_layers": 32,
        "intermediate_size": 14336,
        "max_position_embeddings": 8192,
        "rms_norm_eps": 1e-5,
    }
    (model / "config.json").write_text(json.dumps(hf))
    monkeypatch.chdir(model)
    code, lines = _cli(["--output.dir", "../run", *RUN, "--cluster.model", "./config.json",
                        "--cluster.tp", "3"], capsys)  # fmt: skip
    assert code == 2 and len(lines) == 1, lines
    assert "does not divide mymodel's 32 query heads" in lines[0], lines[0]


def test_an_extra_field_trace_prints_no_third_party_warning(tmp_path):
    trace = tmp_path / "t.csv"
    trace.write_text(HEADER + "0,10,5,7\n1,20,6\n")
    res = subprocess.run(
        [sys.executable, "-m", "vidur_fast.commands.main", "--output.dir", str(tmp_path / "r")]
        + [*RUN, "workload:trace", "--workload.path", str(trace)],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "PYTHONWARNINGS": "default"},
    )
    assert res.returncode == 2
    lines = [x for x in res.stderr.splitlines() if x.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: ") and "row 1" in lines[0], res.stderr
