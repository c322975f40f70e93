"""Same config + seed => byte-identical outputs, in one process and across processes.

Compared: config.json, request_metrics.csv and summary.json byte for byte (summary.json without
its `wall_time` section, the only wall-clock field by design), and every metrics.h5 dataset's
bytes, dtype and shape plus every attribute.
"""

import json
import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import h5py
import numpy as np
import pytest

from tests.helpers.cli_args import FAST_TIMING_ARGS
from vidur_fast.api import simulate
from vidur_fast.commands.main import main
from vidur_fast.config.predictor import PredictorConfig
from vidur_fast.config.sim import (
    ClusterConfig,
    LeastOutstandingPrefillRouter,
    OutputConfig,
    RandomRouter,
    SarathiScheduler,
    SimConfig,
    VllmV1Scheduler,
)
from vidur_fast.config.workload import GammaIntervals, SyntheticWorkload, UniformLengths
from vidur_fast.outputs.writer import write_run

WALL_CLOCK_KEYS = {"wall_time"}
CLI_ARGS = [
    "--quiet",
    "--seed",
    "11",
    *FAST_TIMING_ARGS,
    "--predictor.regressor",
    "polynomial",
    "--cluster.num-replicas",
    "2",
    "scheduler:vllm_v1",
    "--scheduler.num-blocks",
    "300",
    "router:random",
    "workload:synthetic",
    "--workload.num-requests",
    "150",
    "workload.lengths:uniform",
    "--workload.lengths.min-tokens",
    "64",
    "--workload.lengths.max-tokens",
    "2048",
    "workload.intervals:gamma",
    "--workload.intervals.qps",
    "40",
    "--workload.intervals.cv",
    "2",
]


def _config(tmp: Path, scheduler, router) -> SimConfig:
    return SimConfig(
        cluster=ClusterConfig(num_replicas=2),
        workload=SyntheticWorkload(
            num_requests=150,
            lengths=UniformLengths(min_tokens=64, max_tokens=2048),
            intervals=GammaIntervals(qps=40.0, cv=2.0),
        ),
        scheduler=scheduler,
        router=router,
        predictor=PredictorConfig(
            source="roofline",
            regressor="polynomial",
            max_tokens=8192,
            max_prefill_chunk=4096,
            max_batch_size=64,
            cache_dir=str(tmp / "cache"),
        ),
        output=OutputConfig(dir=str(tmp / "run")),
        seed=5,
        quiet=True,
    )


def summary_without_wall_clock(run: Path) -> bytes:
    data = json.loads((run / "summary.json").read_text())
    assert "wall_time" in data, "wall-clock timings belong in the wall_time section"
    for key in WALL_CLOCK_KEYS:
        data.pop(key, None)
    return json.dumps(data, sort_keys=True).encode()


def h5_contents(path: Path) -> dict:
    """Every dataset as (dtype, shape, bytes) and every attribute, keyed by object path."""
    out = {}
    with h5py.File(path, "r") as f:
        out["/attrs"] = {k: str(v) for k, v in f.attrs.items()}

        def visit(name, obj):
            if isinstance(obj, h5py.Dataset):
                data = obj[()]
                out[name] = (str(obj.dtype), obj.shape, np.ascontiguousarray(data).tobytes())
            out[name + "/attrs"] = {k: str(v) for k, v in obj.attrs.items()}

        f.visititems(visit)
    return out


def assert_same_run(a: Path, b: Path) -> None:
    assert summary_without_wall_clock(a) == summary_without_wall_clock(b)
    for name in ("config.json", "request_metrics.csv"):
        assert (a / name).read_bytes() == (b / name).read_bytes(), name
    ha, hb = h5_contents(a / "metrics.h5"), h5_contents(b / "metrics.h5")
    assert ha.keys() == hb.keys()
    for key in ha:
        assert ha[key] == hb[key], key
    assert len(ha) > 20  # requests, batches, replicas and histogram datasets were compared
    # no timestamps inside the HDF5 file either (datasets are written with track_times=False)
    assert (a / "metrics.h5").read_bytes() == (b / "metrics.h5").read_bytes()


def _run_twice(tmp_path: Path, produce) -> list[Path]:
    """Run produce(run_dir) twice into the same path (config.json names it), keep both."""
    kept = []
    for name in ("a", "b"):
        run = tmp_path / "run"
        produce(run)
        kept.append(run.rename(tmp_path / name))
    return kept


@pytest.mark.parametrize(
    "scheduler,router",
    [
        (VllmV1Scheduler(num_blocks=300), RandomRouter()),
        (SarathiScheduler(num_blocks=300, chunk_size=256), LeastOutstandingPrefillRouter()),
    ],
    ids=["vllm_v1-random", "sarathi-lop"],
)
def test_two_runs_in_one_process_are_identical(tmp_path, scheduler, router):
    cfg = _config(tmp_path, scheduler, router)
    # the first run builds the timing grids, the second reads them from the cache
    a, b = _run_twice(tmp_path, lambda run: write_run(simulate(cfg), cfg.output))
    assert_same_run(a, b)
    summary = json.loads((a / "summary.json").read_text())
    assert summary["num_completed"] + summary["num_rejected"] == 150


def test_different_seed_changes_results(tmp_path):
    cfg = _config(tmp_path, VllmV1Scheduler(num_blocks=300), RandomRouter())
    a = simulate(cfg)
    b = simulate(replace(cfg, seed=6))
    assert not a.requests["request_e2e_time"].equals(b.requests["request_e2e_time"])


def test_two_processes_and_this_one_are_identical(tmp_path, monkeypatch):
    def in_subprocess(run: Path) -> None:
        res = subprocess.run(
            [sys.executable, "-m", "vidur_fast.commands.main", "--output.dir", str(run), *CLI_ARGS],
            capture_output=True,
            text=True,
            timeout=600,
            # a cache per process: both build their own grids
            env={
                **os.environ,
                "VIDUR_FAST_CACHE": str(tmp_path / f"cache-{len(list(tmp_path.iterdir()))}"),
            },
        )
        assert res.returncode == 0, res.stderr

    a, b = _run_twice(tmp_path, in_subprocess)
    assert_same_run(a, b)
    monkeypatch.setenv("VIDUR_FAST_CACHE", str(tmp_path / "cache-here"))
    assert main(["--output.dir", str(tmp_path / "run"), *CLI_ARGS]) == 0
    assert_same_run(a, tmp_path / "run")
