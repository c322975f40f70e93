"""`vidur-fast profiles show` on a MoE model names the router, expert, dispatch and combine
operators of one MoE layer and their times, with where the expert times come from."""

import pytest

from tests.helpers.cli_args import FAST_TIMING_ARGS
from vidur_fast.commands.main import main


@pytest.fixture(autouse=True)
def _cache(tmp_path, monkeypatch):
    monkeypatch.setenv("VIDUR_FAST_CACHE", str(tmp_path / "cache"))


def _show(capsys, *args) -> str:
    argv = ["profiles", "show", *args, "--predictor.regressor", "polynomial"]
    assert main(argv) == 0
    return capsys.readouterr().out


def test_tp_moe_layer_operators(capsys):
    out = _show(capsys, "--cluster.model", "Qwen/Qwen3-30B-A3B", "--cluster.tp", "2",
                *FAST_TIMING_ARGS)  # fmt: skip
    assert "MoE layers (48 of 48): 128 experts, top-8, width 768" in out
    assert "moe_tp 2 x moe_ep 1" in out
    assert "experts: bfloat16 fused MoE kernel" in out
    assert "dispatch: none" in out and "combine: the layer's TP all-reduce" in out
    header = next(x for x in out.splitlines() if x.strip().startswith("tokens") and "experts" in x)
    assert header.split() == ["tokens", "router", "experts", "combine"]
    rows = [x.split() for x in out.splitlines()[out.splitlines().index(header) + 1 :]][:7]
    times = [float(r[2]) for r in rows]
    assert times == sorted(times) and times[0] > 0  # expert time grows with the tokens


def test_dp_dispatch_and_combine_are_listed(capsys):
    out = _show(capsys, "--cluster.model", "Qwen/Qwen3-30B-A3B", "--cluster.tp", "1",
                "--predictor.attention-dp", "2", "--predictor.moe-ep", "2",
                *FAST_TIMING_ARGS)  # fmt: skip
    assert "tp 1 x attention_dp 2 = moe_tp 1 x moe_ep 2" in out
    assert "dispatch: ring all-gather over 2 GPUs" in out
    assert "combine: ring reduce-scatter over 2 GPUs" in out
    header = next(x for x in out.splitlines() if x.strip().startswith("tokens") and "experts" in x)
    assert header.split() == ["tokens", "router", "experts", "dispatch", "combine"]
