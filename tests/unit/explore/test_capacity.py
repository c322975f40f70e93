"""Capacity search: the bracketing/bisection rule, the Pareto frontier, and full runs."""

import json

import numpy as np
import pandas as pd
import pytest

from tests.helpers.sweeps import small_base
from vidur_fast.explore.pareto import pareto_mask
from vidur_fast.explore.run_capacity import run_capacity
from vidur_fast.explore.search import find_capacity
from vidur_fast.explore.slo import CapacitySettings, slo_column

SLO = {"ttft_p90": 0.15, "tbt_p99": 0.05, "scheduling_delay_p99": 0.1}


def _settings(**kw):
    return CapacitySettings(slo={"tbt_p99": 1.0}, **kw)


@pytest.mark.parametrize("threshold,start", [(10.3, 1.0), (10.3, 64.0), (0.7, 1.0), (1.0, 1.0)])
def test_search_brackets_then_bisects_to_the_tolerance(threshold, start):
    s = _settings(start_qps=start, rel_tol=0.05)
    res = find_capacity(lambda q: q <= threshold, s)
    assert res.status == "ok"
    assert threshold * (1 - 0.05) <= res.capacity_qps <= threshold
    passed = [q for q, ok in res.probes if ok]
    failed = [q for q, ok in res.probes if not ok]
    assert max(passed) == res.capacity_qps and all(q > threshold for q in failed)
    assert min(failed) - res.capacity_qps <= 0.05 * min(failed)
    assert len(res.probes) == len(set(q for q, _ in res.probes))


def test_search_edges():
    assert find_capacity(lambda q: True, _settings(max_qps=100.0)).status == "capped"
    assert find_capacity(lambda q: True, _settings(max_qps=100.0)).capacity_qps == 100.0
    never = find_capacity(lambda q: False, _settings(min_qps=0.1))
    assert (never.status, never.capacity_qps) == ("unreachable", 0.0)
    assert never.probes[-1] == (0.1, False)
    limited = find_capacity(lambda q: q < 1000, _settings(max_probes=3))
    assert (limited.status, limited.capacity_qps, len(limited.probes)) == ("probe_limit", 4.0, 3)


def test_pareto_mask():
    latency = np.array([1.0, 2.0, 0.5, 3.0, np.nan, 2.0])
    cost = np.array([5.0, 4.0, 9.0, 4.0, 1.0, 4.0])
    # 3 is dominated by 1 (same cost, more latency); 4 has no latency; 1 and 5 tie
    assert pareto_mask(latency, cost).tolist() == [True, True, True, False, False, True]


def _capacity_file(tmp_path, cache_dir, **extra):
    data = {
        "base": small_base(cache_dir),
        "grid": {"tp": [1, 2], "scheduler": ["vllm_v1", {"type": "sarathi", "chunk_size": 256}]},
        "capacity": {"slo": SLO, "start_qps": 4, "rel_tol": 0.1, "max_qps": 1024, **extra},
    }
    path = tmp_path / "cap.json"
    path.write_text(json.dumps(data))
    return str(path)


@pytest.fixture(scope="module")
def inline_capacity(tmp_path_factory):
    d = tmp_path_factory.mktemp("capacity")
    cfg = _capacity_file(d, tmp_path_factory.mktemp("grids"))
    return cfg, run_capacity(cfg, str(d / "out"), workers=1, quiet=True)


def test_capacity_table_cost_and_frontier(inline_capacity):
    _, res = inline_capacity
    t = res.table
    assert len(t) == 4 and (t["status"] == "ok").all()
    assert t["cost_per_hour_usd"].tolist() == [6.98, 6.98, 13.96, 13.96]
    assert np.allclose(t["qps_per_usd_hour"], t["capacity_qps"] / t["cost_per_hour_usd"])
    for name, limit in SLO.items():  # under the summary's names, as in probes and sweeps
        assert (t[slo_column(name)] <= limit).all()
    assert t["pareto"].any()
    for _, row in t.iterrows():  # the bracket closed within the tolerance
        probes = res.probes[res.probes["deployment"] == row["deployment"]]
        above = probes.loc[~probes["met"], "qps"]
        assert probes.loc[probes["qps"] == row["capacity_qps"], "met"].item()
        assert above.min() > row["capacity_qps"] >= above.min() * 0.9
        assert len(probes) == row["num_probes"]
    out = res.out_dir
    assert (out / "pareto.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    pd.testing.assert_frame_equal(pd.read_parquet(out / "capacity.parquet"), t)
    assert len(pd.read_csv(out / "probes.csv")) == len(res.probes)


def test_capacity_resume_and_process_pool_equality(inline_capacity, tmp_path):
    cfg, first = inline_capacity
    again = run_capacity(cfg, str(first.out_dir), workers=1, quiet=True)
    assert (again.n_run, again.n_skipped) == (0, 4)
    pd.testing.assert_frame_equal(again.table, first.table)
    pooled = run_capacity(cfg, str(tmp_path / "pool"), workers=2, quiet=True)
    pd.testing.assert_frame_equal(pooled.table, first.table)
    pd.testing.assert_frame_equal(pooled.probes, first.probes)


def test_unservable_and_invalid_deployments_are_rows_not_crashes(tmp_path):
    data = {
        "base": small_base(tmp_path / "grids"),
        "grid": {"tp": [3]},
        "capacity": {"slo": {"ttft_p90": 1e-6}},
    }
    path = tmp_path / "c.json"
    path.write_text(json.dumps(data))
    t = run_capacity(str(path), str(tmp_path / "out"), workers=1, quiet=True).table
    assert t["status"].tolist() == ["error"] and "cluster.tp" in t["error"].item()
    data["grid"] = {"tp": [1]}
    data["capacity"]["min_qps"] = 0.5
    path.write_text(json.dumps(data))
    t = run_capacity(str(path), str(tmp_path / "out2"), workers=1, quiet=True).table
    assert t["status"].tolist() == ["unreachable"] and t["capacity_qps"].item() == 0.0
    assert "ttft_p90" in t["error"].item() and not t["pareto"].item()


def test_a_workload_whose_rate_cannot_vary_is_refused_up_front(tmp_path):
    from vidur_fast.explore.errors import SweepFileError

    data = {
        "base": {"workload": {"type": "synthetic", "intervals": "static", "num_requests": 9}},
        "capacity": {"slo": {"tbt_p99": 0.1}},
    }
    path = tmp_path / "c.json"
    path.write_text(json.dumps(data))
    with pytest.raises(SweepFileError, match="base.workload.intervals"):
        run_capacity(str(path), str(tmp_path / "out"), workers=1, quiet=True)
    assert not (tmp_path / "out").exists()
    data["base"]["workload"] = {"type": "trace", "path": str(tmp_path / "x.csv")}
    path.write_text(json.dumps(data))
    with pytest.raises(SweepFileError, match="x.csv: file not found"):
        run_capacity(str(path), str(tmp_path / "out"), workers=1, quiet=True)
    assert not (tmp_path / "out").exists()


def test_capacity_of_a_trace_searches_its_replay_speed(tmp_path):
    from tests.conftest import REPO
    from tests.helpers.sweeps import FAST_PREDICTOR
    from vidur_fast.explore.run_capacity import trace_rate
    from vidur_fast.workload import TraceWorkload

    trace = str(REPO / "traces" / "examples" / "poisson_uniform_200.csv")
    data = {
        "base": {
            "workload": {"type": "trace", "path": trace, "num_requests": 120},
            "predictor": {**FAST_PREDICTOR, "cache_dir": str(tmp_path / "g")},
        },
        "grid": {"num_replicas": [1, 2]},
        "capacity": {"slo": {"ttft_p90": 0.5}, "start_qps": 1.0, "rel_tol": 0.2, "max_qps": 512},
    }
    path = tmp_path / "c.json"
    path.write_text(json.dumps(data))
    t = run_capacity(str(path), str(tmp_path / "out"), workers=1, quiet=True).table
    assert (t["status"] == "ok").all(), t[["status", "error"]]
    m = t["capacity_rate_multiplier"].to_numpy()
    rate = trace_rate(TraceWorkload(trace, num_requests=120))
    np.testing.assert_allclose(t["capacity_qps"].to_numpy(), m * rate)
    assert m[1] > m[0] > 1.0  # two replicas serve a faster replay than one


def test_capacity_of_a_trace_without_arrival_times_is_one_line(tmp_path, capsys):
    from vidur_fast.commands.main import main

    lengths = tmp_path / "lengths.csv"
    lengths.write_text("num_prefill_tokens,num_decode_tokens\n100,10\n200,20\n")
    data = {
        "base": {"workload": {"type": "trace", "path": str(lengths)}},
        "capacity": {"slo": {"ttft_p90": 0.5}},
    }
    path = tmp_path / "c.json"
    path.write_text(json.dumps(data))
    with pytest.raises(SystemExit) as exc:
        main(["capacity", str(path), "--out", str(tmp_path / "out"), "--quiet"])
    assert exc.value.code == 2
    err = [x for x in capsys.readouterr().err.splitlines() if x.strip()]
    assert len(err) == 1 and err[0].startswith("error:") and "arrived_at" in err[0], err
    assert not (tmp_path / "out").exists()


def _fixed_load_file(tmp_path, **capacity):
    data = {
        "base": small_base(tmp_path / "grids"),
        "grid": {"num_replicas": [1, 2, 4]},
        "capacity": {"slo": {"ttft_p90": 0.05}, **capacity},
    }
    path = tmp_path / "fixed.json"
    path.write_text(json.dumps(data))
    return str(path)


def test_min_replicas_at_a_fixed_load_answers_with_the_smallest_deployment(tmp_path, capsys):
    from vidur_fast.commands.main import main

    path = _fixed_load_file(tmp_path)
    out = tmp_path / "out"
    code = main(
        ["capacity", path, "--objective", "min-replicas", "--load", "96", "--out", str(out)]
        + ["--workers", "1", "--keep-runs"]
    )
    assert code == 0
    printed = capsys.readouterr().out
    t = pd.read_parquet(out / "capacity.parquet")
    assert t["num_replicas"].tolist() == [1, 2, 4] and (t["qps"] == 96).all()
    met = t[t["met"]]
    assert len(met) and not t["met"].all(), t[["num_replicas", "met", "why"]]
    best = t[t["answer"]]
    assert len(best) == 1 and best["num_replicas"].item() == met["num_replicas"].min()
    assert (met["prefill_e2e_time_p90"] <= 0.05).all()
    answer = json.loads((out / "answer.json").read_text())
    assert answer["objective"] == "min_replicas"
    assert answer["answer"]["num_replicas"] == best["num_replicas"].item()
    line = [x for x in printed.splitlines() if x.startswith("answer:")]
    assert line and f": {best['num_replicas'].item()} (" in line[0] and "96 req/s" in line[0]
    # --keep-runs: one run directory per deployment, which report reads
    for rel in t["run_dir"]:
        assert (out / rel / "summary.json").is_file()
    assert main(["report", *(str(out / r) for r in t["run_dir"])]) == 0


def test_min_gpus_and_min_cost_rank_by_their_own_figure(tmp_path):
    path = _fixed_load_file(tmp_path, objective="min_cost", load=96)
    res = run_capacity(path, str(tmp_path / "cost"), workers=1, quiet=True)
    met = res.table[res.table["met"]]
    assert res.answer["cost_per_hour_usd"] == met["cost_per_hour_usd"].min()
    res = run_capacity(path, str(tmp_path / "gpus"), workers=1, quiet=True, objective="min-gpus")
    assert res.answer["gpus"] == res.table[res.table["met"]]["gpus"].min()


def test_no_deployment_meeting_the_slos_is_an_answer_too(tmp_path, capsys):
    path = _fixed_load_file(tmp_path, objective="min_replicas", load=96, slo={"ttft_p90": 1e-6})
    res = run_capacity(path, str(tmp_path / "none"), workers=1)
    assert res.answer is None and not res.table["answer"].any()
    assert "answer: none of the 3 deployments" in capsys.readouterr().out


@pytest.mark.parametrize(
    "capacity,needle",
    [
        ({"objective": "min_replicas"}, "capacity.load"),
        ({"objective": "fewest"}, "capacity.objective"),
        ({"load": 4}, "capacity.load"),
        ({"objective": "min_gpus", "load": -1}, "capacity.load"),
    ],
)
def test_bad_objective_or_load_is_one_line(tmp_path, capsys, capacity, needle):
    from tests.helpers.cli import assert_one_error, run_cli

    path = _fixed_load_file(tmp_path, **capacity)
    code, lines = run_cli(["capacity", path, "--out", str(tmp_path / "o"), "--quiet"], capsys)
    assert_one_error(code, lines, needle)
    assert not (tmp_path / "o").exists()


def test_capacity_keep_runs_keeps_each_probe(tmp_path):
    data = {
        "base": small_base(tmp_path / "grids"),
        "capacity": {"slo": {"ttft_p90": 0.3}, "start_qps": 8, "rel_tol": 0.3, "max_qps": 64},
    }
    path = tmp_path / "c.json"
    path.write_text(json.dumps(data))
    res = run_capacity(str(path), str(tmp_path / "out"), workers=1, quiet=True, keep_runs=True)
    for rel in res.probes["run_dir"]:
        assert (res.out_dir / rel / "summary.json").is_file(), rel
    row = res.table.iloc[0]
    kept = json.loads((res.out_dir / row["run_dir"] / "summary.json").read_text())
    assert kept["prefill_e2e_time"]["p90"] == pytest.approx(row["prefill_e2e_time_p90"])
