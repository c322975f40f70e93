"""Sweep files: conversion to configs, grid expansion, and one-line errors for bad input."""

import json

import pytest

from vidur_fast.commands.main import main
from vidur_fast.config.sim import SarathiScheduler, VllmV1Scheduler
from vidur_fast.config.workload import PoissonIntervals, UniformLengths
from vidur_fast.explore.errors import ExecutorError, SweepFileError
from vidur_fast.explore.executors import make_executor
from vidur_fast.explore.points import expand
from vidur_fast.explore.slo import parse_capacity
from vidur_fast.explore.spec import load_spec


def _write(tmp_path, data, name="s.json"):
    path = tmp_path / name
    path.write_text(json.dumps(data))
    return str(path)


def test_base_and_grid_resolve_to_configs_in_row_major_order(tmp_path):
    path = _write(
        tmp_path,
        {
            "base": {
                "cluster": {"device": "a100"},
                "scheduler": {"type": "vllm_v1", "max_num_seqs": 64},
                "workload": {
                    "lengths": {"type": "uniform", "min_tokens": 100, "max_tokens": 200},
                    "intervals": {"type": "poisson", "qps": 2},
                },
            },
            "grid": {
                "tp": [1, 2],
                "scheduler": ["vllm_v1", {"type": "SarathiScheduler", "chunk_size": 256}],
                "qps": [1.5, 3],
            },
        },
    )
    points = expand(load_spec(path))
    assert len(points) == 8
    first, last = points[0].config, points[-1].config
    assert first.cluster.device == "a100" and first.cluster.tp == 1
    # same member type as the base: the base's knobs are kept
    assert first.scheduler == VllmV1Scheduler(max_num_seqs=64)
    assert last.cluster.tp == 2 and last.scheduler == SarathiScheduler(chunk_size=256)
    assert first.workload.lengths == UniformLengths(min_tokens=100, max_tokens=200)
    assert [p.config.workload.intervals for p in points[:2]] == [
        PoissonIntervals(qps=1.5),
        PoissonIntervals(qps=3.0),
    ]
    assert len({p.id for p in points}) == 8
    # ids depend on the resolved config only
    assert [p.id for p in expand(load_spec(path))] == [p.id for p in points]


def test_a_knob_missing_from_the_chosen_member_makes_an_error_point(tmp_path):
    path = _write(
        tmp_path,
        {"grid": {"scheduler": ["vllm_v1", "sarathi"], "scheduler.chunk_size": [128]}},
    )
    points = expand(load_spec(path))
    assert points[0].config is None and "chunk_size" in points[0].error
    assert points[1].config.scheduler == SarathiScheduler(chunk_size=128)


@pytest.mark.parametrize(
    "data,needle",
    [
        ({"bsae": {}}, "bsae: unknown top-level key"),
        ({"base": {"cluster": {"tpp": 2}}}, "base.cluster.tpp: unknown field"),
        ({"base": {"scheduler": {"type": "fifo"}}}, "base.scheduler: unknown type 'fifo'"),
        ({"base": {"cluster": {"tp": "two"}}}, "base.cluster.tp: must be an integer"),
        ({"grid": {"cluster.tpp": [1]}}, "grid.cluster.tpp"),
        ({"grid": {"scheduler.chunk_sz": [1]}}, "grid.scheduler.chunk_sz"),
        ({"grid": {"tp": []}}, "grid.tp: empty list"),
        ({"grid": {"tp": 2}}, "grid.tp: must be a list"),
        ({"grid": {"tp": [1], "cluster.tp": [2]}}, "same field"),
    ],
)
def test_bad_sweep_files_name_the_key(tmp_path, data, needle):
    with pytest.raises(SweepFileError) as info:
        load_spec(_write(tmp_path, data))
    assert needle in str(info.value)


@pytest.mark.parametrize(
    "section,needle",
    [
        (None, "capacity: missing section"),
        ({}, "capacity.slo: give at least one SLO"),
        ({"slo": {}}, "capacity.slo: give at least one SLO"),
        ({"slo": {"ttft_p91": 1.0}}, "capacity.slo.ttft_p91: unknown SLO"),
        ({"slo": {"ttft_p90": 0}}, "capacity.slo.ttft_p90: must be a number > 0"),
        ({"slo": {"tbt_p99": 0.1}, "rel_tol": 2}, "capacity.rel_tol"),
        ({"slo": {"tbt_p99": 0.1}, "tolerance": 0.1}, "capacity.tolerance: unknown key"),
        ({"slo": {"tbt_p99": 0.1}, "start_qps": 0.001}, "capacity.start_qps"),
    ],
)
def test_bad_capacity_sections(section, needle):
    with pytest.raises(SweepFileError) as info:
        parse_capacity(section)
    assert needle in str(info.value)


def test_capacity_settings_defaults():
    s = parse_capacity({"slo": {"tbt_p99": 0.1, "ttft_p90": 2}})
    assert s.slo == {"tbt_p99": 0.1, "ttft_p90": 2.0}
    assert s.pareto_metric == "tbt_p99"


def test_executor_settings_are_checked():
    with pytest.raises(ExecutorError, match="workers"):
        make_executor("local", 0)
    with pytest.raises(ExecutorError, match="executor"):
        make_executor("dask", 2)
    with pytest.raises(ExecutorError, match="ray_address"):
        make_executor("local", 2, "127.0.0.1:6379")


def test_ray_executor_without_ray_installed(monkeypatch):
    monkeypatch.setitem(__import__("sys").modules, "ray", None)
    with pytest.raises(ExecutorError, match="ray is not installed"):
        make_executor("ray", 2)


@pytest.mark.parametrize(
    "cmd,data,needle",
    [
        ("sweep", {"base": {"clustr": {}}}, "clustr"),
        ("sweep", {"grid": {"qps": []}}, "grid.qps: empty list"),
        ("capacity", {"grid": {"tp": [1]}, "capacity": {"slo": {}}}, "capacity.slo"),
        ("capacity", {"grid": {"qps": [1]}, "capacity": {"slo": {"tbt_p99": 1}}}, "grid.qps"),
    ],
)
def test_cli_bad_input_is_one_line_exit_2_and_no_output(tmp_path, capsys, cmd, data, needle):
    out = tmp_path / "out"
    with pytest.raises(SystemExit) as info:
        main([cmd, _write(tmp_path, data), "--out", str(out), "--quiet"])
    assert info.value.code == 2
    lines = [x for x in capsys.readouterr().err.splitlines() if x.strip()]
    assert len(lines) == 1 and lines[0].startswith("error:") and needle in lines[0], lines
    assert not out.exists()


def test_missing_and_unparsable_files(tmp_path):
    with pytest.raises(SweepFileError, match="does not exist"):
        load_spec(str(tmp_path / "nope.yaml"))
    bad = tmp_path / "bad.yaml"
    bad.write_text("base: [1, 2\n")
    with pytest.raises(SweepFileError, match="not valid yaml"):
        load_spec(str(bad))
