"""A warm worker (kernels, timing grids and parsed traces kept between points) computes for
each point exactly what a one-off simulate of the same config computes."""

import json
from pathlib import Path

import pandas as pd
import pytest

from tests.helpers.sweeps import small_base
from vidur_fast.api import simulate
from vidur_fast.explore import worker
from vidur_fast.explore.points import expand
from vidur_fast.explore.run_sweep import run_sweep
from vidur_fast.explore.spec import load_spec
from vidur_fast.workload.readers import read_trace, trace_memo

REPO = Path(__file__).resolve().parents[3]
TRACE = REPO / "traces" / "examples" / "multiturn_shared_prefix.csv"


@pytest.fixture(scope="module")
def sweep_file(tmp_path_factory):
    d = tmp_path_factory.mktemp("warm")
    base = small_base(d / "grids")
    data = {
        "base": base,
        "grid": {
            # a trace with shared prefixes (hashes read, prefix caching on) and a synthetic load
            "workload": [
                {"type": "trace", "path": str(TRACE)},
                base["workload"],
            ],
            "scheduler": ["vllm_v1", {"type": "sarathi", "chunk_size": 256}],
        },
    }
    path = d / "s.json"
    path.write_text(json.dumps(data))
    return path


def _configs(path):
    return [p.config for p in expand(load_spec(str(path)))]


def test_a_warm_worker_point_equals_a_standalone_run(sweep_file):
    cfgs = _configs(sweep_file)
    # every point twice through the worker's caches (the second time all of them are warm)
    warm = []
    for _ in range(2):
        for cfg in cfgs:
            with trace_memo(worker._TRACE_CACHE):
                warm.append(simulate(cfg, timing_cache=worker._TIMING_CACHE))
    assert any(key[0] == str(TRACE) for key in worker._TRACE_CACHE)
    for k, cfg in enumerate(cfgs):
        alone = simulate(cfg)  # no caches: reads the trace and loads the grids itself
        for got in (warm[k], warm[k + len(cfgs)]):
            pd.testing.assert_frame_equal(got.requests, alone.requests)
            assert got.summary == alone.summary
        assert worker.run_config(cfg) == {
            "status": "ok",
            "error": None,
            "sim_status": alone.summary["status"],
            "cost_per_hour_usd": worker.cost_per_hour_usd(cfg),
            **worker.flatten({k: v for k, v in alone.summary.items() if k != "status"}),
        }


def test_pool_sweep_rows_equal_standalone_runs(sweep_file, tmp_path):
    res = run_sweep(str(sweep_file), str(tmp_path / "out"), workers=2, quiet=True)
    assert (res.table["status"] == "ok").all()
    for k, cfg in enumerate(_configs(sweep_file)):
        alone = worker.flatten(simulate(cfg).summary)
        row = res.table.iloc[k]
        for name in ("num_completed", "tbt_p99", "prefill_e2e_time_p90", "request_e2e_time_p99"):
            assert row[name] == alone[name], name


def test_memoized_trace_is_read_only_and_follows_file_changes(tmp_path):
    path = tmp_path / "t.csv"
    path.write_text(TRACE.read_text())
    memo = {}
    with trace_memo(memo):
        first = read_trace(path, need_hashes=True)
        assert read_trace(path, need_hashes=True) is first
        assert not first.prompt_tokens.flags.writeable
        assert read_trace(path, need_hashes=False) is not first  # other options, other entry
        lines = TRACE.read_text().splitlines()
        path.write_text("\n".join(lines[:50]) + "\n")  # the file changes: read again
        assert len(read_trace(path, need_hashes=True)) == 49
    assert read_trace(path) is not read_trace(path)  # outside the block: no memo


def test_missing_kernels_are_compiled_once_before_the_workers_start(
    sweep_file, tmp_path, monkeypatch, capsys
):
    import vidur_fast.engine.run as engine_run

    monkeypatch.setattr(engine_run, "kernel_cached", lambda dispatcher: False)
    res = run_sweep(str(sweep_file), str(tmp_path / "out"), workers=1)
    assert (res.table["status"] == "ok").all()
    err = capsys.readouterr().err
    assert err.count("compiling the kernels once before the workers start") == 1
    assert "compiling the simulation loop" in err
    assert err.index("compiling the kernels once") < err.rindex("sweep: ")


def test_one_warm_up_run_per_loop_variant_not_cached(monkeypatch):
    import vidur_fast.engine.run as engine_run
    from vidur_fast.config.sim import SarathiScheduler, SimConfig

    runs = []
    monkeypatch.setattr(engine_run, "kernel_cached", lambda dispatcher: False)
    monkeypatch.setattr(worker, "simulate", lambda cfg, **kw: runs.append(type(cfg.scheduler)))
    v1, sarathi = SimConfig(), SimConfig(scheduler=SarathiScheduler())
    worker.warm_kernels([v1, sarathi, v1, sarathi], quiet=True)
    assert runs == [type(v1.scheduler), SarathiScheduler]
    runs.clear()
    monkeypatch.setattr(engine_run, "kernel_cached", lambda dispatcher: True)
    worker.warm_kernels([v1, sarathi], quiet=True)
    assert runs == []


def test_routers_share_a_loop_unless_they_read_the_prefix_caches(monkeypatch):
    import vidur_fast.engine.run as engine_run
    from vidur_fast.config.sim import (
        LeastOutstandingRequestsRouter,
        PrefixAwareRouter,
        SimConfig,
        StickyRouter,
    )

    runs = []
    monkeypatch.setattr(engine_run, "kernel_cached", lambda dispatcher: False)
    monkeypatch.setattr(worker, "simulate", lambda cfg, **kw: runs.append(type(cfg.router)))
    cfgs = [
        SimConfig(router=r)
        for r in (LeastOutstandingRequestsRouter(), StickyRouter(), PrefixAwareRouter())
    ]
    worker.warm_kernels([SimConfig(), *cfgs], quiet=True)
    assert runs == [type(SimConfig().router), PrefixAwareRouter]
