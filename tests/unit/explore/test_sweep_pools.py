"""Sweeps and capacity searches over pool layouts: whole pool lists and per-pool fields."""

import json

import pytest

from tests.helpers.sweeps import small_base
from vidur_fast.catalog import get_device
from vidur_fast.explore.run_capacity import run_capacity
from vidur_fast.explore.run_sweep import run_sweep

P1D1 = [{"role": "prefill"}, {"role": "decode"}]
P1D2 = [{"role": "prefill"}, {"role": "decode", "num_replicas": 2}]
AGG2 = [{"num_replicas": 2}]


def _pool_base(cache_dir) -> dict:
    base = small_base(cache_dir)
    base["cluster"] = {"pools": P1D1, "pd_decider": "always"}
    base["scheduler"] = {
        "type": "vllm_v1",
        "enable_prefix_caching": False,
        "async_scheduling": False,
    }
    base["router"] = "lor"
    return base


def _write(tmp_path, data, name="pools.json"):
    path = tmp_path / name
    path.write_text(json.dumps(data))
    return str(path)


def test_sweep_over_pool_layouts_has_layout_gpu_and_cost_columns(tmp_path):
    base = _pool_base(tmp_path / "grids")
    base["cluster"] = {}  # pd_decider is for PD pools only: the layouts bring their own
    data = {"base": base, "grid": {"cluster.pools": [P1D1, P1D2, AGG2]}}
    t = run_sweep(_write(tmp_path, data), str(tmp_path / "o"), workers=1, quiet=True).table
    assert t["status"].tolist() == ["ok"] * 3, t["error"].tolist()
    assert t["layout"].tolist() == [
        "1P h100 tp1 + 1D h100 tp1",
        "1P h100 tp1 + 2D h100 tp1",
        "2x h100 tp1",
    ]
    assert t["gpus"].tolist() == [2, 3, 2] and t["num_replicas"].tolist() == [2, 3, 2]
    assert t["num_pools"].tolist() == [2, 2, 1] and "cluster.pools" not in t
    price = get_device("h100").price_per_hour_usd
    assert t["cost_per_hour_usd"].tolist() == pytest.approx([2 * price, 3 * price, 2 * price])
    assert (t["num_completed"] == 120).all()


def test_per_pool_fields_by_index(tmp_path):
    data = {
        "base": _pool_base(tmp_path / "grids"),
        "grid": {
            "cluster.pools[1].num_replicas": [1, 2],
            "cluster.pools[0].device": ["h100", "a100"],
        },
    }
    t = run_sweep(_write(tmp_path, data), str(tmp_path / "o"), workers=1, quiet=True).table
    assert t["status"].eq("ok").all(), t["error"].tolist()
    assert t["layout"].tolist() == [
        "1P h100 tp1 + 1D h100 tp1",
        "1P a100 tp1 + 1D h100 tp1",
        "1P h100 tp1 + 2D h100 tp1",
        "1P a100 tp1 + 2D h100 tp1",
    ]
    assert t["device"].tolist() == ["h100", "a100+h100", "h100", "a100+h100"]
    h100, a100 = (get_device(d).price_per_hour_usd for d in ("h100", "a100"))
    want = [2 * h100, a100 + h100, 3 * h100, a100 + 2 * h100]
    assert t["cost_per_hour_usd"].tolist() == pytest.approx(want)
    assert t["cluster.pools[1].num_replicas"].tolist() == [1, 1, 2, 2]


def test_min_cost_over_pool_layouts_answers_the_cheapest_that_meets(tmp_path, capsys):
    from vidur_fast.commands.main import main

    # at 48 req/s a TP1 prefill replica misses TTFT p90 <= 48 ms (52-54 ms: TTFT holds the
    # transfer and the decode side's first step) and a TP2 one meets it (43-44 ms)
    data = {
        "base": _pool_base(tmp_path / "grids"),
        "grid": {"cluster.pools[0].tp": [1, 2], "cluster.pools[1].num_replicas": [1, 2]},
        "capacity": {"slo": {"ttft_p90": 0.048}},
    }
    path = _write(tmp_path, data)
    out = tmp_path / "cap"
    args = ["capacity", path, "--objective", "min-cost", "--load", "48", "--out", str(out)]
    assert main([*args, "--workers", "1"]) == 0
    printed = capsys.readouterr().out
    res = run_capacity(path, str(out), workers=1, quiet=True, objective="min-cost", load=48)
    t = res.table
    assert t["status"].eq("ok").all(), t["error"].tolist()
    assert t["met"].tolist() == [False, False, True, True], t[["layout", "met", "why"]]
    h100 = get_device("h100").price_per_hour_usd
    assert t["cost_per_hour_usd"].tolist() == pytest.approx(
        [2 * h100, 3 * h100, 3 * h100, 4 * h100]
    )
    assert t["gpus"].tolist() == [2, 3, 3, 4]
    assert res.answer["layout"] == "1P h100 tp2 + 1D h100 tp1"
    assert res.answer["cost_per_hour_usd"] == pytest.approx(3 * h100) and res.answer["gpus"] == 3
    line = next(x for x in printed.splitlines() if x.startswith("answer:"))
    assert "lowest cost" in line and "1P h100 tp2 + 1D h100 tp1" in line and "3 GPUs" in line


@pytest.mark.parametrize(
    "grid,needle",
    [
        ({"cluster.pools[2].num_replicas": [1, 2]}, "grid.cluster.pools[2].num_replicas"),
        ({"cluster.pools[0].replicas": [1]}, "grid.cluster.pools[0].replicas"),
        ({"cluster.pools[x].tp": [1]}, "grid.cluster.pools[x].tp"),
        ({"cluster.tp[0]": [1]}, "grid.cluster.tp[0]"),
    ],
)
def test_bad_pool_path_is_one_line(tmp_path, capsys, grid, needle):
    from tests.helpers.cli import assert_one_error, run_cli

    data = {"base": _pool_base(tmp_path / "grids"), "grid": grid}
    path = _write(tmp_path, data)
    code, lines = run_cli(["sweep", path, "--out", str(tmp_path / "o"), "--quiet"], capsys)
    assert_one_error(code, lines, needle)
    assert not (tmp_path / "o").exists()


def test_an_index_past_one_layouts_pools_is_that_points_error(tmp_path):
    base = _pool_base(tmp_path / "grids")
    base["cluster"] = {}
    grid = {"cluster.pools": [P1D1, AGG2], "cluster.pools[1]": [{"device": "h200"}]}
    data = {"base": base, "grid": grid}
    t = run_sweep(_write(tmp_path, data), str(tmp_path / "o"), workers=1, quiet=True).table
    assert t["status"].tolist() == ["ok", "error"]
    assert t["layout"][0] == "1P h100 tp1 + 1D h200 tp1"
    assert "cluster.pools[1]" in t["error"][1] and t["gpus"].isna()[1]
    h100, h200 = (get_device(d).price_per_hour_usd for d in ("h100", "h200"))
    assert t["cost_per_hour_usd"][0] == pytest.approx(h100 + h200)
