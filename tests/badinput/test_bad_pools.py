"""Bad cluster.pools input through the real CLI: one `error:` line naming the field, exit code
2, no run directory."""

import json

import pytest

from tests.badinput.test_bad_input_matrix import (
    FAST,
    _assert_one_error_line,
    _profile_dir,
    _vidur_src,
    run_cli,
)


def _pools_file(d, pools, **cluster) -> str:
    path = d / "pools.json"
    path.write_text(json.dumps({"cluster": {"pools": pools, **cluster}}))
    return str(path)


CASES = {
    "zero_replicas": (
        [{"device": "h100", "num_replicas": 2}, {"device": "a100", "num_replicas": 0}],
        {},
        [],
        "cluster.pools[1].num_replicas",
    ),
    "unknown_role": ([{"device": "h100", "role": "both"}], {}, [], "cluster.pools[0].role"),
    "prefill_role": (
        [{"device": "h100", "role": "prefill"}, {"device": "h100", "role": "decode"}],
        {},
        [],
        "not simulated yet",
    ),
    "unknown_device": ([{"device": "h100"}, {"device": "z900"}], {}, [], "cluster.pools[1]"),
    "tp_not_dividing_heads": (
        [{"device": "h100"}, {"device": "a100", "tp": 3}],
        {},
        [],
        "cluster.pools[1]",
    ),
    "cluster_field_with_pools": ([{"device": "h100"}], {"tp": 2}, [], "cluster.tp"),
    "pools_not_a_list": ("h100", {}, [], "cluster.pools: must be a list"),
    "pool_unknown_field": ([{"device": "h100", "gpus": 2}], {}, [], "cluster.pools[0].gpus"),
    # the profile directory has TP 1 rows only: pool 1 (TP 2) has no timing data
    "pool_tp_without_data": (
        [{"device": "h100"}, {"device": "h100", "tp": 2}],
        {},
        ["vidur"],
        "cluster.pools[1]",
    ),
}


@pytest.mark.parametrize("case", list(CASES))
def test_bad_pools_one_line_exit_2(case, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("VIDUR_FAST_CACHE", str(tmp_path / "cache"))
    pools, cluster, extra, needle = CASES[case]
    inputs = tmp_path / "in"
    inputs.mkdir()
    args = ["--config", _pools_file(inputs, pools, **cluster)]
    if extra:
        args += _vidur_src(_profile_dir(inputs))
    out_root = tmp_path / "out"
    code, err = run_cli(["--output.dir", str(out_root / "run"), *FAST, *args], capsys)
    _assert_one_error_line(code, err, needle)
    assert not out_root.exists()


@pytest.mark.parametrize("cmd", ["sweep", "capacity"])
@pytest.mark.parametrize("where", ["base", "grid"])
def test_sweep_over_pools_is_refused(cmd, where, tmp_path, capsys):
    pools = [{"device": "h100"}, {"device": "a100"}]
    spec = {"base": {"cluster": {"pools": pools}}, "grid": {"seed": [1, 2]}}
    if where == "grid":
        spec = {"grid": {"cluster.pools": [pools]}}
    path = tmp_path / "sweep.json"
    path.write_text(json.dumps(spec))
    out = tmp_path / "out"
    code, err = run_cli([cmd, str(path), "--out", str(out), "--quiet"], capsys)
    _assert_one_error_line(code, err, "cluster.pools: sweeps and capacity searches")
    assert not out.exists()
