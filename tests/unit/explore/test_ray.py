"""The Ray executor gives the same tables as the in-process run; a bad address fails fast."""

import json
import os
import socket
import subprocess
import sys

import pandas as pd
import pytest

from tests.helpers.sweeps import small_base, small_sweep
from vidur_fast.explore.executors import RayExecutor
from vidur_fast.explore.run_capacity import run_capacity
from vidur_fast.explore.run_sweep import run_sweep

ray = pytest.importorskip(
    "ray", reason="ray is not installed (pip install -e '.[ray]'); Ray executor tests skipped"
)


@pytest.fixture(scope="module")
def local_ray():
    ray.init(num_cpus=2, include_dashboard=False, logging_level="WARNING")
    yield
    ray.shutdown()


@pytest.fixture(scope="module")
def grid_cache(tmp_path_factory):
    return tmp_path_factory.mktemp("grids")


def test_sweep_on_ray_matches_inline(local_ray, grid_cache, tmp_path):
    cfg = tmp_path / "s.json"
    cfg.write_text(json.dumps(small_sweep(grid_cache)))
    inline = run_sweep(str(cfg), str(tmp_path / "inline"), workers=1, quiet=True)
    on_ray = run_sweep(str(cfg), str(tmp_path / "ray"), executor="ray", workers=2, quiet=True)
    assert on_ray.n_run == 8
    pd.testing.assert_frame_equal(on_ray.table, inline.table)


def test_capacity_on_ray_matches_inline(local_ray, grid_cache, tmp_path):
    data = {
        "base": small_base(grid_cache),
        "grid": {"scheduler": ["vllm_v1", {"type": "sarathi", "chunk_size": 256}]},
        "capacity": {"slo": {"ttft_p90": 0.15, "scheduling_delay_p99": 0.1}, "start_qps": 8},
    }
    cfg = tmp_path / "c.json"
    cfg.write_text(json.dumps(data))
    inline = run_capacity(str(cfg), str(tmp_path / "inline"), workers=1, quiet=True)
    on_ray = run_capacity(str(cfg), str(tmp_path / "ray"), executor="ray", quiet=True)
    assert (inline.table["status"] == "ok").all()
    pd.testing.assert_frame_equal(on_ray.table, inline.table)
    pd.testing.assert_frame_equal(on_ray.probes, inline.probes)


def test_items_run_on_warm_actors_one_per_worker(local_ray):
    pool = RayExecutor(2, None)
    try:
        got = list(pool.imap(lambda item: (item, os.getpid()), range(12)))
    finally:
        pool.close()
    assert all(exc is None for _, _, exc in got)
    assert sorted(item for item, _, _ in got) == list(range(12))
    assert len({pid for _, (_, pid), _ in got}) <= 2  # two processes ran all twelve


def test_a_dead_actor_fails_its_item_only(local_ray):
    pool = RayExecutor(2, None)
    try:
        got = list(pool.imap(lambda item: os._exit(1) if item == 3 else item * 10, range(8)))
    finally:
        pool.close()
    failed = [item for item, _, exc in got if exc is not None]
    assert failed == [3]
    assert sorted(res for item, res, exc in got if exc is None) == [0, 10, 20, 40, 50, 60, 70]


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]  # closed again on exit: nothing listens there


def test_unreachable_ray_address_is_one_line_exit_2(grid_cache, tmp_path):
    cfg = tmp_path / "s.json"
    cfg.write_text(json.dumps(small_sweep(grid_cache)))
    out = tmp_path / "out"
    res = subprocess.run(
        [
            sys.executable,
            "-m",
            "vidur_fast.commands.main",
            "sweep",
            str(cfg),
            "--out",
            str(out),
            "--executor",
            "ray",
            "--ray-address",
            f"127.0.0.1:{_closed_port()}",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert res.returncode == 2, res.stderr
    lines = [x for x in res.stderr.splitlines() if x.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: ray_address: cannot reach"), lines
    assert not out.exists()
