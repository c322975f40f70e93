"""`vidur-fast validate --silicon-sample`: aiconfigurator's silicon corpus as validation rows."""

import pytest

from vidur_fast.commands.main import main
from vidur_fast.validation.silicon.physics import check_row
from vidur_fast.validation.silicon.run import (
    SiliconValidateConfig,
    group_table,
    select_rows,
    simulate_silicon,
)
from vidur_fast.validation.silicon.sample import (
    campaign_of,
    is_silicon_sample,
    read_silicon_sample,
    sample_path,
)


@pytest.fixture(scope="module")
def rows():
    return read_silicon_sample()


def test_installed_sample_is_found_and_mapped(rows):
    assert sample_path().name == "silicon_sample.csv" and is_silicon_sample(sample_path())
    dense = SiliconValidateConfig(
        mode="agg",
        model=("Qwen/Qwen3-32B", "meta-llama/Llama-3.1-70B", "nvidia/Llama-3.1-8B-Instruct-FP8"),
        system=("h100", "h200_sxm", "b200"),
    )
    sel = select_rows(rows, dense)
    assert len(sel) == 339
    qwen = [r for r in sel if r.bench.model == "Qwen/Qwen3-32B" and r.precision == "bf16"]
    assert len(qwen) == 90
    r = qwen[0]
    assert (r.bench.device, r.bench.tp, r.bench.concurrency, r.bench.isl, r.bench.osl) == (
        "h100_sxm", 2, 8, 1024, 128
    )  # fmt: skip
    assert r.concurrency_recorded and r.bench.precision == ""
    # nvfp4 rows: kept, not simulated later; other backends are skipped with a reason
    assert sum(r.precision == "nvfp4" for r in sel) == 60
    # MoE rows: kept, with the corpus's expert and attention-DP split
    moe_vllm = [r for r in rows if r.bench.backend == "vllm" and r.bench.mode == "agg"]
    moe = [
        r for r in moe_vllm
        if "MiniMax" in r.bench.model and r.bench.device in ("h100_sxm", "h200_sxm")
    ]  # fmt: skip
    dp4 = [r for r in moe if "the id states tp4 ep4" in r.label_conflict]
    # filed with attention DP 4 x moe_ep 16 (16 GPUs) under ids stating tp4_ep4: read with the
    # id's layout, and skipped unless the campaign says that layout ran (run.py)
    assert len(dp4) == 15 and all(r.skipped == r.label_conflict for r in dp4)
    assert all(r.bench.device == "h100_sxm" for r in dp4)
    assert {(r.bench.tp, r.bench.attention_dp, r.bench.moe_ep) for r in dp4} == {(4, 1, 4)}
    assert not any(r.skipped or r.label_conflict for r in moe if r not in dp4)
    assert all(r.bench.precision == "fp8_block" for r in moe)  # the checkpoint's
    qwen_moe = [r for r in moe_vllm if "Qwen3-235B" in r.bench.model]
    # attention_dp_size empty: DP implied by moe_tp x moe_ep = tp x dp
    assert {(r.bench.tp, r.bench.attention_dp, r.bench.moe_ep) for r in qwen_moe} == {
        (1, 2, 1), (1, 4, 1), (2, 1, 2), (2, 1, 1), (2, 2, 1), (4, 1, 4), (4, 1, 1)
    }  # fmt: skip
    oss = [r for r in moe_vllm if "gpt-oss" in r.bench.model]
    assert oss and all(r.bench.precision == "" for r in oss)  # bf16 attention (mxfp4 experts)
    other = [r for r in rows if r.bench.backend == "trtllm"]
    assert other and all("only vllm" in r.skipped or "mode" in r.skipped for r in other)


def test_campaign_label_drops_per_row_ids():
    src = (
        "source_file=/a/b/data/h200_sxm/vllm/0.12.0/x.csv; silicon_concurrency=64; "
        "gtl_task_id=7; image=nvcr.io/nvidia/ai-dynamo/vllm-runtime:0.8.0"
    )
    assert (
        campaign_of(src)
        == "source_file=0.12.0/x.csv; image=nvcr.io/nvidia/ai-dynamo/vllm-runtime:0.8.0"
    )


def test_physics_flags_prefill_beyond_measured_gemms():
    # Llama-3.1-8B-FP8 on one H200, c64, isl 2000 / osl 100: 1.7 PFLOP/s of prefill per GPU
    c = check_row("nvidia/Llama-3.1-8B-Instruct-FP8", "h200", "fp8", 1, 1, 64, 2000, 100,
                  121.73, 9.74)  # fmt: skip
    assert 1600 < c.prefill_tflops_per_gpu < 1800 and 0.8 < c.prefill_util < 0.9
    assert c.gemm_util > 1.0 and "prefill GEMMs" in c.flag
    # the calibration group is well inside the device
    q = check_row("Qwen/Qwen3-32B", "h100", "bf16", 2, 1, 8, 1024, 128, 154.2, 18.04)
    assert q.flag == "" and q.gemm_util < 0.2 and q.tpot_floor_ms < 18.04


def test_small_subset_aggregate(capsys):
    cfg = SiliconValidateConfig(
        model=("Qwen/Qwen3-32B", "Llama-3.1-70B"), system=("h100", "b200"), mode="agg",
        max_rows_per_group=2, quiet=True,
    )  # fmt: skip
    df = simulate_silicon(cfg)
    g = group_table(df).set_index(["model", "system", "precision"])
    qwen = g.loc[("Qwen/Qwen3-32B", "h100_sxm", "bf16")]
    assert qwen.rows == qwen.simulated == 2
    assert qwen.ttft_mape < 20 and qwen.tpot_mape < 6
    fp4 = g.loc[("meta-llama/Llama-3.1-70B", "b200_sxm", "nvfp4")]
    held = df[(df.model == "Qwen/Qwen3-32B") & (df.precision == "fp8")]
    assert len(held) == 2 and held.skipped.str.startswith("held out: client concurrency").all()
    # nvfp4 rows run on B200's measured NVFP4 GEMM tables
    assert fp4.rows == fp4.simulated == 2
    assert fp4.ttft_mape < 60 and fp4.tpot_mape < 30


def test_inferencemax_hopper_groups_within_loose_bars():
    # held-out rows (not calibration): 6 of each Llama-70B Hopper group, campaign facts on
    cfg = SiliconValidateConfig(
        model=("Llama-3.1-70B",), system=("h100", "h200"), mode="agg", max_rows_per_group=6,
        quiet=True,
    )  # fmt: skip
    g = group_table(simulate_silicon(cfg)).set_index("system")
    for system in ("h100_sxm", "h200_sxm"):
        r = g.loc[system]
        assert r.rows == r.simulated == 6
        assert r.ttft_mape < 20 and r.tpot_mape < 10


def test_cli_filters_and_bad_input(tmp_path, capsys):
    rc = main(["validate", "--silicon-sample", "--model", "Qwen3-32B", "--system", "h100_sxm",
               "--mode", "agg", "--max-rows-per-group", "1", "--quiet"])  # fmt: skip
    assert rc == 0
    out = capsys.readouterr().out
    assert "Qwen/Qwen3-32B" in out and "TTFT MAPE" in out
    bad = tmp_path / "s.csv"
    bad.write_text("id,silicon_data_source,silicon_ttft_ms\nx,y,1\n")
    with pytest.raises(SystemExit) as exc:
        main(["validate", str(bad)])
    assert exc.value.code == 2
    err = capsys.readouterr().err.strip()
    assert "missing silicon-sample column(s)" in err and "\n" not in err
    with pytest.raises(SystemExit) as exc:
        main(["validate", "--silicon-sample", "--model", "no-such-model"])
    assert exc.value.code == 2
    assert "no row matches" in capsys.readouterr().err


def test_campaign_facts(rows):
    from vidur_fast.validation.silicon.campaigns import campaign_for, client_lengths

    llama = [
        r for r in rows if r.bench.model == "meta-llama/Llama-3.1-70B" and r.bench.backend == "vllm"
    ]
    assert llama and {campaign_for(r).name for r in llama} == {"inferencex"}
    c = campaign_for(llama[0])
    assert (c.kv_cache_dtype, c.length_range_ratio, c.prefix_caching) == ("fp8", 0.8, False)
    qwen = [r for r in rows if r.bench.model == "Qwen/Qwen3-32B" and r.precision == "bf16"]
    assert {campaign_for(r).name for r in qwen} == {"gap-analysis"}
    assert campaign_for(qwen[0]).kv_cache_dtype == ""  # nothing stated: validator defaults
    # --async-scheduling, and benchmark_serving.py sends temperature 0 (argmax, no sampler)
    assert c.async_scheduling and c.greedy and not c.held_out
    # the B200 scripts fuse the TP all-reduce with the residual add and RMSNorm
    assert c.allreduce_rms_fusion_devices == ("b200",) and c.no_mixed_graph_devices == ("b200",)
    assert campaign_for(qwen[0]).async_scheduling is None and not campaign_for(qwen[0]).greedy
    # rows that cannot be reproduced as measured are held out, with the reason
    for model, name in (("nvidia/Llama-3.1-8B-Instruct-FP8", "gap-analysis-reuse"),):
        sel = [r for r in rows if r.bench.model == model and r.bench.backend == "vllm"]
        assert sel and {campaign_for(r).name for r in sel} == {name}
        assert "prefix cache" in campaign_for(sel[0]).held_out
    dyn = [
        r
        for r in rows
        if r.bench.model == "Qwen/Qwen3-32B"
        and r.precision == "fp8"
        and r.bench.backend == "vllm"
        and r.bench.mode == "agg"
    ]
    assert dyn and {campaign_for(r).name for r in dyn} == {"dynamo-gtl"}
    assert "concurrency not recorded" in campaign_for(dyn[0]).held_out
    p, d = client_lengths(1024, 8192, 4000, 0.8, seed=0)
    assert p.min() >= 819 and p.max() <= 1024 and d.min() >= 6553 and d.max() <= 8192
    assert abs(p.mean() - 0.9 * 1024) < 5


def test_bad_options_are_one_line(capsys):
    for args, needle in (
        (["--max-rows-per-group", "-1"], "max_rows_per_group: must be >= 0"),
        (["--prompt-pool", "-3"], "prompt_pool: must be >= 0"),
        (["--file", "/nonexistent/silicon.csv"], "no such file"),
    ):
        with pytest.raises(SystemExit) as exc:
            main(["validate", "--silicon-sample", *args])
        assert exc.value.code == 2
        err = capsys.readouterr().err.strip()
        assert needle in err and "\n" not in err and "Traceback" not in err


def test_gpt_oss_campaigns_by_measurement_date(rows):
    from vidur_fast.validation.silicon.moe_campaigns import moe_campaign_for

    oss = [
        r for r in rows
        if "gpt-oss" in r.bench.model and r.bench.backend == "vllm" and r.bench.mode == "agg"
        and r.bench.device in ("h100_sxm", "h200_sxm") and r.bench.concurrency < 512
    ]  # fmt: skip
    names = {}
    for r in oss:
        names.setdefault(moe_campaign_for(r).name, []).append(r)
    # measured on 2025-11-02 (vLLM 0.10.2, no image recorded): no VLLM_MXFP4_USE_MARLIN
    early = names["inferencex-gpt-oss-hopper-v0.10"]
    assert len(early) == 11 and all("measured=2025-11-02" in r.source for r in early)
    assert all("image=" not in r.source for r in early)
    assert {moe_campaign_for(r).moe_kernel for r in early} == {"oaitritonmxfp4"}
    late = names["inferencex-gpt-oss-hopper"]
    assert late and all("image=vllm/vllm-openai:v0.18.0" in r.source for r in late)
    assert {moe_campaign_for(r).moe_kernel for r in late} == {"marlin"}
    assert set(names) == {"inferencex-gpt-oss-hopper-v0.10", "inferencex-gpt-oss-hopper"}


def test_minimax_h200_rows_from_march_13_run_expert_parallel(rows):
    """The sweep's H200 MiniMax-M2.5 script passes --enable-expert-parallel from 2026-03-13 on
    (EP_SIZE >= 1, always): those rows (all TP 8) get moe_ep = 8; the TP 4 rows of 2026-03-01,
    whose script had no such flag, keep their tensor-parallel experts."""
    from vidur_fast.validation.silicon.moe_campaigns import moe_campaign_for

    minimax = [
        r for r in rows
        if "MiniMax" in r.bench.model and r.bench.backend == "vllm" and r.bench.mode == "agg"
        and r.bench.device == "h200_sxm"
    ]  # fmt: skip
    ep = [r for r in minimax if getattr(moe_campaign_for(r), "expert_parallel", False)]
    tp = [r for r in minimax if r not in ep]
    assert len(ep) == 54 and {r.bench.tp for r in ep} == {8}
    assert all("measured=2026-03-2" in r.source for r in ep)
    assert len(tp) == 30 and {r.bench.tp for r in tp} == {4}
    assert all("measured=2026-03-01" in r.source for r in tp)
    # the corpus says moe_ep 1 for all of them
    assert {r.bench.moe_ep for r in minimax} == {1}


def test_minimax_h100_rows_filed_with_attention_dp_run_the_sweeps_layout(rows, tmp_path):
    """The sweep's MiniMax-M2.5 H100 config ({tp: 4, ep: 4}, no dp-attn) and script (TP with
    --enable-expert-parallel) ran 4 GPUs: the 15 rows its 2026-04-06 file states as attention
    DP 4 x moe_ep 16 are simulated as their ids say, TP 4 EP 4; without campaign facts they
    stay skipped with the conflict as the reason."""
    from vidur_fast.validation.run import ValidateConfig
    from vidur_fast.validation.silicon.moe_campaigns import moe_campaign_for
    from vidur_fast.validation.silicon.run import SiliconValidateConfig, _simulate_rows

    conflicted = [
        r for r in rows
        if r.label_conflict and r.bench.device == "h100_sxm" and r.bench.backend == "vllm"
        and r.bench.mode == "agg"
    ]  # fmt: skip
    assert len(conflicted) == 15
    assert {moe_campaign_for(r).name for r in conflicted} == {"inferencex-minimax-h100"}
    one = [min(conflicted, key=lambda r: r.bench.isl * r.bench.concurrency)]
    sim_cfg = ValidateConfig(csv="silicon_sample.csv")
    (done,) = _simulate_rows(one, SiliconValidateConfig(), sim_cfg, tmp_path, None)
    assert done["skipped"] == "" and done["sim_tpot_ms"] > 0
    facts_off = SiliconValidateConfig(campaign_facts=False)
    (held,) = _simulate_rows(one, facts_off, sim_cfg, tmp_path, None)
    assert "the id states tp4 ep4" in held["skipped"]


def test_campaign_memory_share_reaches_the_simulation(rows, monkeypatch, tmp_path):
    """The Kimi-K2.5 and MiniMax-M2.5 H200 scripts pass --gpu-memory-utilization 0.95 in
    every version the rows ran (the other InferenceX MoE scripts 0.9, vLLM's default): those
    rows' engines plan their KV cache in 0.95 of each GPU, the others in the validator's."""
    from vidur_fast.validation.run import ValidateConfig
    from vidur_fast.validation.silicon import run as silicon_run
    from vidur_fast.validation.silicon.moe_campaigns import moe_campaign_for

    hopper_moe = [
        r for r in rows
        if r.bench.backend == "vllm" and r.bench.mode == "agg"
        and r.bench.device in ("h100_sxm", "h200_sxm") and moe_campaign_for(r) is not None
    ]  # fmt: skip
    share = {}
    for r in hopper_moe:
        key = (r.bench.model.split("/")[0], r.bench.device)
        share.setdefault(key, set()).add(moe_campaign_for(r).gpu_memory_utilization)
    assert share[("moonshotai", "h200_sxm")] == {0.95}
    assert share[("MiniMaxAI", "h200_sxm")] == {0.95}
    assert share[("MiniMaxAI", "h100_sxm")] == {0.0}
    assert share[("openai", "h100_sxm")] == share[("openai", "h200_sxm")] == {0.0}

    margins = []

    def capture(b, cfg):
        margins.append(cfg.memory_margin_fraction)
        raise silicon_run.ConfigError("captured")

    monkeypatch.setattr(silicon_run, "row_config", capture)
    kimi = next(r for r in hopper_moe if "Kimi" in r.bench.model)
    gpt = next(r for r in hopper_moe if "gpt-oss" in r.bench.model)
    sim_cfg = ValidateConfig(csv="silicon_sample.csv")
    for r in (kimi, gpt):
        silicon_run._simulate(r.bench, sim_cfg, moe_campaign_for(r), tmp_path)
    assert margins == [0.05, sim_cfg.memory_margin_fraction]


def test_moe_physics_floor_counts_the_experts_a_step_reaches():
    from vidur_fast.validation.silicon.physics import check_moe_row, moe_decode_floor_ms

    # MiniMax-M2.5 (block FP8) on H200 at 4 clients: ~30 of 256 experts per layer, 7.3 GB per
    # GPU at TP 4 and half of it at TP 8
    tp4 = moe_decode_floor_ms("MiniMaxAI/MiniMax-M2.5", "h200", "fp8_block", 4, 1, 4)
    tp8 = moe_decode_floor_ms("MiniMaxAI/MiniMax-M2.5", "h200", "fp8_block", 8, 1, 4)
    assert 1.4 < tp4 < 1.7 and 0.45 < tp8 / tp4 < 0.55
    # more clients reach more experts, up to every local weight
    c512 = moe_decode_floor_ms("openai/gpt-oss-120b", "h100", "", 2, 1, 512)
    assert moe_decode_floor_ms("openai/gpt-oss-120b", "h100", "", 2, 1, 4) < c512
    # a gpt-oss TP 2 row of 512 clients decoding in 5.6 ms reads less than its weights
    c = check_moe_row("openai/gpt-oss-120b", "h100", "", 2, 1, 512, 5.61)
    assert "weight read" in c.flag and "512 sequences" in c.flag and c.tpot_floor_ms == c512
    # gpt-oss TP 4 at 32 clients measured 15.9 ms on H100 (7.2 ms on H200): slow, not impossible
    assert check_moe_row("openai/gpt-oss-120b", "h100", "", 4, 1, 32, 15.92).flag == ""
