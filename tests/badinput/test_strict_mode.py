"""Requests that can never run: rejected and counted by default, an up-front error in strict
mode (one line with how many and the first request row). Never a hang or an assertion."""

import json
from pathlib import Path

import pandas as pd
import pytest

from vidur_fast.api import simulate
from vidur_fast.commands.main import main
from vidur_fast.config.sim import SimConfig, VllmV1Scheduler
from vidur_fast.config.workload import TraceWorkload
from vidur_fast.errors import ConfigError

FAST = ["--quiet", "--predictor.source", "roofline", "--predictor.regressor", "polynomial"]
FAST += ["--predictor.max-tokens", "8192", "--predictor.max-prefill-chunk", "4096"]
FAST += ["--predictor.max-batch-size", "64"]


@pytest.fixture(autouse=True)
def _cache(tmp_path, monkeypatch):
    monkeypatch.setenv("VIDUR_FAST_CACHE", str(tmp_path / "cache"))


def _trace(tmp_path: Path, rows: list[str]) -> str:
    path = tmp_path / "trace.csv"
    path.write_text("\n".join(["arrived_at,num_prefill_tokens,num_decode_tokens", *rows]) + "\n")
    return str(path)


# rows 2 and 4 need more KV blocks (40 blocks of 16 tokens = 640 tokens) than a replica has
ROWS = ["0.0,100,10", "0.01,900,10", "0.02,50,5", "0.03,700,20", "0.04,30,3"]
KV_ARGS = ["scheduler:vllm_v1", "--scheduler.num-blocks", "41"]


def _run(argv, capsys):
    try:
        code = main(argv)
    except SystemExit as exc:
        code = exc.code
    return code, [x for x in capsys.readouterr().err.splitlines() if x.strip()]


def test_default_mode_rejects_and_counts(tmp_path, capsys):
    run = tmp_path / "run"
    argv = ["--output.dir", str(run), *FAST, *KV_ARGS, "workload:trace"]
    code, err = _run([*argv, "--workload.path", _trace(tmp_path, ROWS)], capsys)
    assert code == 0, err
    summary = json.loads((run / "summary.json").read_text())
    assert summary["num_rejected"] == 2 and summary["num_completed"] == 3
    req = pd.read_csv(run / "request_metrics.csv")
    assert req["rejected"].tolist() == [0, 1, 0, 1, 0]  # 1 = needs more KV blocks
    assert req["completed"].tolist() == [True, False, True, False, True]


def test_strict_mode_fails_up_front_naming_count_and_first_row(tmp_path, capsys):
    run = tmp_path / "run"
    argv = ["--output.dir", str(run), *FAST, "--strict", *KV_ARGS, "workload:trace"]
    code, err = _run([*argv, "--workload.path", _trace(tmp_path, ROWS)], capsys)
    assert code == 2
    assert len(err) == 1
    assert err[0].startswith("error: strict: 2 request(s) can never run; first: request row 2")
    assert "900 prompt + 10 output tokens" in err[0] and "KV blocks" in err[0]
    assert not run.exists()


def test_strict_mode_passes_when_every_request_fits(tmp_path, capsys):
    run = tmp_path / "run"
    argv = ["--output.dir", str(run), *FAST, "--strict", *KV_ARGS, "workload:trace"]
    code, _ = _run([*argv, "--workload.path", _trace(tmp_path, [ROWS[0], ROWS[2]])], capsys)
    assert code == 0
    assert json.loads((run / "summary.json").read_text())["num_rejected"] == 0


def test_strict_error_comes_before_any_timing_work(tmp_path, monkeypatch):
    import vidur_fast.api as api

    def no_timing(*a, **k):
        raise AssertionError("timing grids were built before the strict check")

    monkeypatch.setattr(api, "build_timing", no_timing)
    cfg = SimConfig(
        workload=TraceWorkload(path=_trace(tmp_path, ["0,10,5", "1,20,100"])),
        scheduler=VllmV1Scheduler(max_model_len=64),
        strict=True,
    )
    with pytest.raises(ConfigError, match=r"request row 2 .* per-request token bound"):
        simulate(cfg)
