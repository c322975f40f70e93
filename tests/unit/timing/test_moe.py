"""MoE and sliding-window timing: expert split, layer shares, the measured expert curve and its
nearest-shape rule, attention-DP token scaling, window pairs, and the validator's DP ranks
(the lockstep itself: tests/unit/engine/test_dp_lockstep.py)."""

import numpy as np
import pytest

from vidur_fast.catalog import get_device, get_model
from vidur_fast.catalog.arch import expert_format, moe_parallel
from vidur_fast.errors import ConfigError
from vidur_fast.timing.sources._aic_data import get_system
from vidur_fast.timing.sources._aic_moe import (
    expert_curve,
    expert_roofline_ms,
    layer_weights,
    moe_rows,
    tokens_curve,
)
from vidur_fast.timing.sources.aiconfigurator import equivalent_chunk_pairs, window_pairs


def test_expert_split():
    m = get_model("Qwen/Qwen3-235B-A22B")
    p = moe_parallel(m, tp=2, dp=2, ep=1)
    assert (p.moe_tp, p.moe_ep) == (4, 1)
    assert moe_parallel(m, tp=4, dp=1, ep=4).moe_tp == 1
    with pytest.raises(ConfigError, match="does not divide"):
        moe_parallel(m, 4, 1, 3)
    with pytest.raises(ConfigError, match="moe_tp x moe_ep must equal tp x attention_dp"):
        moe_parallel(m, 2, 1, 4)


def test_layer_shares_and_formats():
    kimi = get_model("moonshotai/Kimi-K2.5")  # 1 dense layer, then 60 MoE layers
    w = layer_weights(kimi)
    assert w["mlp_up_proj"] == pytest.approx(1 / 61) and w["moe_experts"] == pytest.approx(60 / 61)
    assert expert_format(kimi, "bf16") == "int4_wo"
    assert expert_format(get_model("openai/gpt-oss-120b"), "bf16") == "mxfp4"
    assert expert_format(get_model("Qwen/Qwen3-30B-A3B"), "fp8_block") == "fp8_block"


def _curve(model, device, tp, dp, ep, fmt, routing="power_law_1.2"):
    m, dev = get_model(model), get_device(device)
    _, _, rows = moe_rows(get_system(dev.aiconfigurator_system), "vllm")
    return expert_curve(rows, dev, m, moe_parallel(m, tp, dp, ep), fmt, routing, "t")


def test_exact_measured_shape_and_routing():
    n, t, prov = _curve("Qwen/Qwen3-235B-A22B", "h200", 4, 1, 1, "fp8_block")
    assert prov["exact"] and prov["moe_dtype"] == "fp8_block"
    assert np.all(np.diff(n) > 0) and np.all(t > 0)
    _, tb, pb = _curve("Qwen/Qwen3-235B-A22B", "h200", 4, 1, 1, "fp8_block", "balanced")
    assert pb["distribution"] == "balanced" and not np.allclose(t, tb)


def test_nearest_shape_is_scaled_and_recorded():
    # MiniMax-M2.5 at moe_tp 8: fp8_block (3072, 1536) is measured up to moe_tp 4 only
    n, t, prov = _curve("MiniMaxAI/MiniMax-M2.5", "h200", 8, 1, 1, "fp8_block")
    assert not prov["exact"] and "roofline ratio" in prov["rule"]
    assert prov["measured_shape"] != prov["shape"]
    n4, t4, _ = _curve("MiniMaxAI/MiniMax-M2.5", "h200", 4, 1, 1, "fp8_block")
    big = n == 16384
    assert t[big][0] < t4[n4 == 16384][0]  # half the expert width per GPU: less work


def test_dp_ranks_share_the_experts():
    n = np.array([1, 2, 4, 8, 16])
    t = np.array([1.0, 2.0, 4.0, 8.0, 16.0])
    assert np.allclose(tokens_curve(n, t, np.array([2, 4]), dp=2), [4.0, 8.0])
    assert np.allclose(tokens_curve(n, t, np.array([32]), dp=1), [32.0])  # linear beyond


def test_expert_roofline_is_weight_bound_at_few_tokens():
    h100 = get_device("h100")
    one = expert_roofline_ms(h100, "bfloat16", [1], 2048, 768, 8, 128)[0]
    many = expert_roofline_ms(h100, "bfloat16", [16384], 2048, 768, 8, 128)[0]
    touched = 128 * (1 - (1 - 1 / 128) ** 8)  # experts a token's 8 picks land on
    weights = touched * 3 * 2048 * 768 * 2 / (h100.hbm_bandwidth_gbps * 1e9 * 0.8) * 1e3
    assert one == pytest.approx(weights + 0.006, rel=0.02)  # + two kernel launches
    assert many > 30 * one  # compute-bound at 16K tokens


def test_window_pairs():
    kv, c = np.array([0, 0, 100]), np.array([64, 300, 10])
    causal = c * kv + c * (c + 1) / 2
    assert np.allclose(window_pairs(kv, c, 10**6), causal)
    w = 128
    assert window_pairs(0, 300, w) == pytest.approx(w * (w + 1) / 2 + (300 - w) * w)
    assert window_pairs(1000, 10, w) == pytest.approx(10 * w)
    assert equivalent_chunk_pairs(36) == pytest.approx(8)


def test_dp_ranks_of_a_closed_loop_are_replicas():
    # 5 clients over 2 DP ranks: both ranks simulated (one engine of two replicas stepping in
    # lockstep), every client, routed as vLLM's DP front end does, the expert split passed on
    from vidur_fast.config.sim import DpLoadBalanceRouter, RoundRobinRouter
    from vidur_fast.validation.bench_csv import BenchRow
    from vidur_fast.validation.run import ValidateConfig, row_config

    row = BenchRow(0, "r", "Qwen/Qwen3-235B-A22B-FP8", "h200", 1, 1, 5, 1000, 100,
                   "fp8_block", "", "vllm", "0.12.0", "agg", 0, 100.0, 10.0,
                   attention_dp=2, moe_ep=1)  # fmt: skip
    cfg = row_config(row, ValidateConfig(csv=""))
    assert cfg.workload.concurrency == 5 and cfg.cluster.num_replicas == 2
    assert isinstance(cfg.router, DpLoadBalanceRouter)
    assert (cfg.predictor.attention_dp, cfg.predictor.moe_ep) == (2, 1)
    dense = row_config(
        BenchRow(0, "d", "Qwen/Qwen3-32B", "h100", 2, 1, 5, 1000, 100, "", "", "vllm", "0.12.0",
                 "agg", 0, 100.0, 10.0), ValidateConfig(csv="")
    )  # fmt: skip
    assert dense.workload.concurrency == 5 and dense.predictor.attention_dp == 1
    assert dense.cluster.num_replicas == 1 and isinstance(dense.router, RoundRobinRouter)


def test_kernel_preference_takes_that_kernels_nearest_shape():
    # gpt-oss's shape is measured with the Triton MXFP4 kernel only; Marlin at another shape
    n, t, prov = _curve("openai/gpt-oss-120b", "h200", 4, 1, 1, "mxfp4")
    m = get_model("openai/gpt-oss-120b")
    dev = get_device("h200")
    _, _, rows = moe_rows(get_system(dev.aiconfigurator_system), "vllm")
    nm, tm, pm = expert_curve(
        rows, dev, m, moe_parallel(m, 4, 1, 1), "mxfp4", "power_law_1.2", "t", kernel="marlin"
    )
    assert prov["exact"] and not pm["exact"] and "marlin" in pm["kernel"][0]
    assert tm[nm == 8192][0] > 1.5 * t[n == 8192][0]  # Marlin: slower at prefill sizes


def test_scaled_shape_keeps_the_kernels_latency_floor():
    # gpt-oss at moe_tp 8 on Marlin: the measured shape (hidden 3584, width 3072 per GPU) is
    # ~10x the bytes per expert; scaled down, the curve stops at the fastest latency the Marlin
    # kernels reached at any measured configuration of this GPU
    m, dev = get_model("openai/gpt-oss-120b"), get_device("h100")
    _, _, rows = moe_rows(get_system(dev.aiconfigurator_system), "vllm")
    n, t, prov = expert_curve(
        rows, dev, m, moe_parallel(m, 8, 1, 1), "mxfp4", "power_law_1.2", "t", kernel="marlin"
    )
    marlin = rows[rows.kernel_source.astype(str).str.contains("marlin")]
    marlin = marlin[(marlin.moe_dtype == "w4a16_mxfp4") & (marlin.distribution == "power_law_1.2")]
    floor = prov["floor_ms"]
    assert floor == pytest.approx(marlin.groupby(
        ["hidden_size", "inter_size", "topk", "num_experts", "moe_tp_size", "moe_ep_size",
         "num_tokens"]).latency.median().min())  # fmt: skip
    assert "latency floor" in prov["rule"]
    assert t.min() == pytest.approx(floor) and t[n == 1][0] == pytest.approx(floor)
    assert t[n == 8192][0] > 10 * floor  # large batches scale with the work as before
    # an exact shape is the table as measured, below any other configuration's floor
    _, te, pe = _curve("Qwen/Qwen3-235B-A22B", "h200", 4, 1, 1, "fp8_block")
    assert pe["exact"] and "floor_ms" not in pe


def test_mla_module_tables_time_kimi():
    from vidur_fast.catalog import default_node_for, get_node
    from vidur_fast.timing.sources import load_samples

    m = get_model("moonshotai/Kimi-K2.5")
    s = load_samples(
        "aiconfigurator", m, get_device("h200"), get_node(default_node_for("h200")), 8, 1
    )
    assert s.provenance["mla"]["local_heads"] == 8
    ops = set(s.token_ops.op.unique())
    assert "attn_pre_proj" not in ops and "attn_post_proj" not in ops  # inside the module
    assert {"moe_experts", "moe_router", "moe_shared"} <= ops
    dec = s.decode.set_index(["batch_size", "kv_len"]).time_ms
    assert dec[(8, 8192)] > dec[(8, 1024)] > 0
    pre = s.prefill.set_index(["kv_len", "chunk"]).time_ms
    assert pre[(0, 8192)] > pre[(0, 1024)] > 0


def test_shared_experts_overlap_the_routed_experts_in_small_batches():
    # vLLM's second CUDA stream: up to 256 tokens the layer lasts max(shared, routed)
    from vidur_fast.timing.sources._aic_moe import SHARED_STREAM_MAX_TOKENS, overlap_shared

    n = np.array([1, 64, 256, 512, 4096])
    shared = np.array([0.02, 0.03, 0.05, 0.08, 0.4])
    routed = np.array([0.05, 0.02, 0.04, 0.3, 1.0])
    assert SHARED_STREAM_MAX_TOKENS == 256
    assert np.allclose(overlap_shared(n, shared, routed), [0.0, 0.01, 0.01, 0.08, 0.4])


def test_kimi_shared_expert_is_hidden_at_decode_sizes():
    from vidur_fast.catalog import default_node_for, get_node
    from vidur_fast.timing.sources import load_samples

    m = get_model("moonshotai/Kimi-K2.5")
    s = load_samples(
        "aiconfigurator", m, get_device("h200"), get_node(default_node_for("h200")), 8, 1
    )
    ops = s.token_ops.set_index(["op", "num_tokens"]).time_ms
    assert s.provenance["moe"]["shared_overlap_max_tokens"] == 256
    assert ops[("moe_shared", 8)] == 0.0 < ops[("moe_experts", 8)]  # routed experts outlast it
    assert ops[("moe_shared", 8192)] > 0.0  # large batches: one stream


def test_allreduce_rms_fusion_folds_the_norms_into_the_allreduce():
    from vidur_fast.catalog import default_node_for, get_node
    from vidur_fast.errors import ProfileError
    from vidur_fast.timing.sources import load_samples
    from vidur_fast.timing.sources._common import ALLREDUCE_RMS_FUSION_MAX_MB

    m, dev = get_model("moonshotai/Kimi-K2.5"), get_device("h200")
    node = get_node(default_node_for("h200"))
    plain = load_samples("aiconfigurator", m, dev, node, 8, 1)
    fused = load_samples("aiconfigurator", m, dev, node, 8, 1, allreduce_rms_fusion=True)
    p = plain.token_ops.set_index(["op", "num_tokens"]).time_ms
    f = fused.token_ops.set_index(["op", "num_tokens"]).time_ms
    rule = fused.provenance["allreduce_rms_fusion"]
    # vLLM's limit at TP 8: 1 MB of bf16 rows of 7168 -> 73 tokens
    assert rule["max_tokens"] == int(ALLREDUCE_RMS_FUSION_MAX_MB[8] * 2**20 // (7168 * 2)) == 73
    for op in ("input_layernorm", "post_attention_layernorm", "add"):
        assert f[(op, 8)] == 0.0 < p[(op, 8)]
        assert f[(op, 8192)] == p[(op, 8192)] > 0.0  # above the limit: separate kernels
    assert f[("moe_experts", 8)] == p[("moe_experts", 8)]
    assert "allreduce_rms_fusion" not in plain.provenance
    assert plain.provenance["layer_weights"] == fused.provenance["layer_weights"]  # MoE shares
    one = load_samples("aiconfigurator", m, dev, node, 1, 1, allreduce_rms_fusion=True)
    assert "allreduce_rms_fusion" not in one.provenance  # no TP all-reduce to fuse into
    with pytest.raises(ProfileError, match="allreduce_rms_fusion needs the aiconfigurator"):
        load_samples("roofline", get_model("Qwen/Qwen3-32B"), dev, node, 2, 1,
                     allreduce_rms_fusion=True)  # fmt: skip


def test_minimax_router_gate_runs_in_fp32():
    # vLLM's MiniMax-M2 keeps the gate in fp32: a cast and an FP32 GEMM on the CUDA cores
    from dataclasses import replace

    from vidur_fast.catalog import default_node_for, get_node
    from vidur_fast.catalog.arch import router_gate_fp32
    from vidur_fast.errors import ProfileError
    from vidur_fast.timing.sources import load_samples
    from vidur_fast.timing.sources._aic_moe import fp32_router_ms

    mm, qw = get_model("MiniMaxAI/MiniMax-M2.5"), get_model("Qwen/Qwen3-235B-A22B")
    assert router_gate_fp32(mm) and not router_gate_fp32(qw)
    assert not router_gate_fp32(get_model("moonshotai/Kimi-K2.5"))
    dev = get_device("h200")
    node = get_node(default_node_for("h200"))
    n = np.array([1.0, 8192.0])
    t = fp32_router_ms(dev, n, 3072, 256, np.zeros(2))
    gemm = 2 * 8192 * 3072 * 256 / (dev.peak_fp32_tflops * 1e12 * 0.8) * 1e3
    assert t[1] > gemm > 0.2  # ms: the FP32 GEMM of a 8192-token prompt
    assert np.all(fp32_router_ms(dev, n, 3072, 256, np.array([1.0, 1.0])) > 1.0)  # not below
    for source in ("aiconfigurator", "roofline"):
        s = load_samples(source, mm, dev, node, 4, 1)
        assert s.provenance["moe"]["router"].startswith("fp32 gate")
        r = s.token_ops.set_index(["op", "num_tokens"]).time_ms
        assert r[("moe_router", 8192)] > gemm
        q = load_samples(source, qw, dev, node, 4, 1)
        assert "router" not in q.provenance["moe"]
        assert q.token_ops.set_index(["op", "num_tokens"]).time_ms[("moe_router", 8192)] < gemm
    with pytest.raises(ProfileError, match="no FP32 peak"):
        fp32_router_ms(replace(dev, peak_fp32_tflops=0.0), n, 3072, 256, np.zeros(2))


def test_marlin_mxfp4_scaling_counts_the_kernels_padding():
    from vidur_fast.timing.sources._aic_moe import (
        _shape_terms,
        expert_roofline_ms,
        marlin_mxfp4_terms,
    )

    # vLLM's Marlin MXFP4 path pads hidden to 256 and the per-GPU width to 128:
    # gpt-oss's 2880 x 720 slice (moe_tp 4) runs as 3072 x 768; the measured 3584 x 3072 is
    # already a multiple of both
    assert marlin_mxfp4_terms(2880, 2880, 4, 128, 4, 1) == (3072.0, 768.0, 4.0, 128.0)
    assert marlin_mxfp4_terms(3584, 3072, 16, 896, 1, 1) == _shape_terms(3584, 3072, 16, 896, 1, 1)
    m, dev = get_model("openai/gpt-oss-120b"), get_device("h100")
    _, _, rows = moe_rows(get_system(dev.aiconfigurator_system), "vllm")
    par = moe_parallel(m, 4, 1, 1)
    n, t, prov = expert_curve(rows, dev, m, par, "mxfp4", "power_law_1.2", "t", kernel="marlin")
    assert prov["padded_shape"] == {"hidden_size": 3072.0, "inter_size_per_gpu": 768.0}
    # at prefill sizes (above the floor) the curve is the measured one times the padded
    # shape's roofline ratio, larger than the unpadded ratio by the padding
    best = tuple(prov["measured_shape"].values())
    want = tuple(prov["shape"].values())
    k = n == 8192
    pad = expert_roofline_ms(dev, "w4a16_mxfp4", n[k], *marlin_mxfp4_terms(*want))
    raw = expert_roofline_ms(dev, "w4a16_mxfp4", n[k], *_shape_terms(*want))
    assert 1.1 < (pad / raw)[0] < 1.14
    meas = rows[(rows.moe_dtype == "w4a16_mxfp4") & (rows.distribution == "power_law_1.2")]
    meas = meas[meas.kernel_source.astype(str).str.contains("marlin")]
    for key, v in prov["measured_shape"].items():
        meas = meas[meas[key] == v]
    m8192 = meas[meas.num_tokens == 8192].latency.median()
    ref = expert_roofline_ms(dev, "w4a16_mxfp4", n[k], *marlin_mxfp4_terms(*best))
    assert t[k][0] == pytest.approx(m8192 * (pad / ref)[0], rel=1e-9)
    # Triton's rows are measured at gpt-oss's own shape: no scaling, no padding
    _, _, pe = expert_curve(rows, dev, m, par, "mxfp4", "power_law_1.2", "t", kernel="oaitriton")
    assert pe["exact"] and "padded_shape" not in pe
