"""`validate --silicon-sample` on the corpus's disaggregated rows (prefill and decode pools)."""

import math

import pytest

from vidur_fast.api import simulate
from vidur_fast.config.convert import build_dataclass
from vidur_fast.config.sim import SimConfig
from vidur_fast.errors import ConfigError
from vidur_fast.validation.run import PD_REFUSABLE, ValidateConfig, pd_engine_settings, row_config
from vidur_fast.validation.silicon.run import (
    SiliconValidateConfig,
    format_disagg,
    simulate_silicon,
)
from vidur_fast.validation.silicon.sample import read_silicon_sample

# the Hopper vLLM disaggregated rows (NVIDIA Dynamo vllm-runtime 0.8.0): row -> layout, clients
HOPPER = {
    1582: ("1P tp1 dp4 + 3D tp4", 72),
    1583: ("2P tp1 dp4 + 1D tp1 dp8 ep8", 56),
    1585: ("8P tp1 + 2D tp4", 448),
}


@pytest.fixture(scope="module")
def rows():
    return read_silicon_sample()


def test_disagg_rows_are_mapped(rows):
    dis = [r for r in rows if r.bench.mode == "disagg"]
    assert len(dis) == 1602
    hopper = {
        r.bench.index: r for r in dis if r.bench.backend == "vllm" and r.bench.device == "h100_sxm"
    }
    assert sorted(hopper) == sorted(HOPPER)
    for k, (label, clients) in HOPPER.items():
        b = hopper[k].bench
        assert b.pd.label() == label and b.concurrency == clients
        assert not hopper[k].concurrency_recorded and not hopper[k].skipped
    # the MoE rows split their experts per side: no moe_ep stated (0), vLLM's TP over tp x dp
    # (the prefill side's 4 GPUs: 384 of an expert's 1,536 FP8 columns each, 3 whole blocks),
    # unless vLLM would refuse that split: the decode side's 8 GPUs would hold 192 columns,
    # inside a 128-column block, so it ran expert-parallel
    pd = hopper[1583].bench.pd
    assert pd.prefill.moe_ep == 1 and pd.decode.attention_dp == 8 and pd.decode.moe_ep == 8
    # rows recording their client count: decode_batch_size x decode workers is that count
    kimi = [r for r in dis if r.bench.backend == "vllm" and r.bench.device == "gb200"]
    assert kimi and all(r.concurrency_recorded for r in kimi)
    assert all(
        r.bench.pd.decode.batch_size * r.bench.pd.decode.workers == r.bench.concurrency
        for r in kimi
    )
    other = [r for r in dis if r.bench.backend != "vllm"]
    assert other and all(r.skipped.startswith(f"backend {r.bench.backend}:") for r in other)


def test_pd_cluster_of_a_row(rows):
    b = rows[1582].bench
    cfg = row_config(b, ValidateConfig(csv=""))
    pre, dec = cfg.cluster.pools
    assert (pre.role, pre.tp, pre.num_replicas, pre.attention_dp) == ("prefill", 1, 4, 4)
    assert (dec.role, dec.tp, dec.num_replicas, dec.attention_dp) == ("decode", 4, 3, 1)
    assert cfg.workload.concurrency == 72  # every client, over both pools
    cfg, off = pd_engine_settings(cfg)
    assert set(off) <= set(PD_REFUSABLE)
    for name in off:
        assert getattr(cfg.scheduler, name) is False
    dense = row_config(rows[1585].bench, ValidateConfig(csv=""))
    assert all(p.attention_dp is None for p in dense.cluster.pools)
    assert [p.num_replicas for p in dense.cluster.pools] == [8, 2]


def test_default_holds_the_hopper_rows_out_and_lists_every_reason():
    df = simulate_silicon(SiliconValidateConfig(mode="disagg", system=("h100_sxm", "gb200")))
    assert (df["skipped"] != "").all()
    hop = df[df["row"].isin(list(HOPPER))]
    assert len(hop) == 3 and hop["skipped"].str.contains("concurrency not recorded").all()
    gb = df[df["system"] == "gb200"]
    assert len(gb) == 14 and gb["skipped"].str.contains("unknown device 'gb200'").all()
    text = format_disagg(df)
    assert "not simulated: 3 rows (1582-1585), h100_sxm: held out" in text


def test_hopper_vllm_rows_simulate_with_the_stand_in_client_count():
    cfg = SiliconValidateConfig(
        mode="disagg",
        system=("h100_sxm",),
        campaign_facts=False,
        sim=ValidateConfig(csv="", requests_per_client=2),
    )
    df = simulate_silicon(cfg).set_index("row")
    assert sorted(df.index) == sorted(HOPPER)
    assert (df["skipped"] == "").all()
    for k, (label, clients) in HOPPER.items():
        r = df.loc[k]
        assert r["layout"] == label and r["concurrency"] == clients
        assert math.isfinite(r["sim_ttft_ms"]) and r["sim_ttft_ms"] > 0
        assert math.isfinite(r["sim_tpot_ms"]) and r["sim_tpot_ms"] > 0
        # a 4,000-token prompt prefills in more than a decode step
        assert r["sim_ttft_ms"] > r["sim_tpot_ms"]
    text = format_disagg(df.reset_index())
    assert "1P tp1 dp4 + 3D tp4" in text and "mean TPOT: MAPE" in text


def _pool_cfg(pools, model="Qwen/Qwen3-235B-A22B-FP8") -> SimConfig:
    return build_dataclass(
        SimConfig,
        {
            "cluster": {"model": model, "pools": pools},
            "scheduler": {"type": "vllm_v1", "enable_prefix_caching": False,
                          "async_scheduling": False},
            "predictor": {"precision": "fp8_block"},
            "workload": {"type": "synthetic", "num_requests": 4},
            "quiet": True,
        },
        "",
    )  # fmt: skip


def test_pool_expert_split_is_the_pools_own():
    pools = [
        {"device": "h100", "tp": 1, "num_replicas": 4, "role": "prefill", "attention_dp": 4},
        {"device": "h100", "tp": 4, "num_replicas": 1, "role": "decode", "attention_dp": 1},
    ]
    res = simulate(_pool_cfg(pools))
    assert res.summary["num_completed"] == 4
    # the same cluster with the prefill pool's DP taken from the predictor (1): one TP1 GPU
    # cannot hold the experts, so the split decides whether the pool fits at all
    pools[0].pop("attention_dp")
    with pytest.raises(ConfigError, match=r"cluster.pools\[0\] \(h100\): cluster: .* weights need"):
        simulate(_pool_cfg(pools))
    dense = [{"device": "h100", "attention_dp": 2}]
    with pytest.raises(
        ConfigError, match=r"^cluster.pools\[0\].attention_dp: .* has no MoE layers"
    ):
        simulate(_pool_cfg(dense, model="meta-llama/Meta-Llama-3-8B"))


def test_cli_prints_the_disaggregated_section(capsys):
    from vidur_fast.commands.main import main

    rc = main(
        ["validate", "--silicon-sample", "--mode", "disagg", "--system", "h100_sxm", "--quiet"]
    )
    out = capsys.readouterr().out
    assert rc == 0
    assert out.startswith("Disaggregated rows (prefill and decode pools):")
    assert "held out: client concurrency not recorded" in out and "rows 3: simulated 0" in out
