"""Timing sources: aiconfigurator (installed package), vidur (shared profile dir), roofline."""

import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from tests.conftest import SHARED
from vidur_fast.catalog import get_device, get_model, get_node
from vidur_fast.errors import ProfileError
from vidur_fast.timing.samples import TOKEN_OPS, OperatorSamples
from vidur_fast.timing.sources import SOURCES, available, load_samples
from vidur_fast.timing.sources import aiconfigurator as aic
from vidur_fast.timing.sources._aic_data import get_system, newest_table
from vidur_fast.timing.sources._aic_gemm import gemm_holdout_errors, gemm_table
from vidur_fast.timing.sources.roofline import Roofline, prefill_ms

VIDUR_DIR = SHARED / "profiles" / "vidur_format"
needs_vidur = pytest.mark.skipif(not VIDUR_DIR.is_dir(), reason="shared Vidur profiles absent")

LLAMA3_8B = "meta-llama/Meta-Llama-3-8B"


def load(source, model, device, node, tp=1, pp=1, **kw) -> OperatorSamples:
    return load_samples(source, get_model(model), get_device(device), get_node(node), tp, pp, **kw)


def check_frames(s: OperatorSamples, tp: int, pp: int) -> None:
    """Column layout, finite positive times, collectives present iff TP/PP > 1."""
    assert list(s.token_ops.columns) == ["op", "num_tokens", "time_ms"]
    assert list(s.decode.columns) == ["batch_size", "kv_len", "time_ms"]
    assert list(s.prefill.columns) == ["kv_len", "chunk", "time_ms"]
    assert set(s.token_ops.op) <= set(TOKEN_OPS)
    for f in (s.token_ops, s.decode, s.prefill, s.all_reduce, s.send_recv):
        assert np.isfinite(f.time_ms).all()
        assert (f.time_ms >= 0).all()
    assert s.all_reduce.empty == (tp == 1)
    assert s.send_recv.empty == (pp == 1)
    assert (s.prefill.chunk > 0).all() and (s.decode.batch_size > 0).all()


def op_curve(s: OperatorSamples, op: str) -> pd.Series:
    rows = s.token_ops[s.token_ops.op == op]
    return rows.groupby("num_tokens").time_ms.median()


def nondecreasing(a, rtol=1e-12) -> bool:
    a = np.asarray(a, dtype=np.float64)
    return bool((np.diff(a) >= -rtol * np.abs(a[:-1])).all())


# ---- dispatch ----


def test_unknown_source_and_bad_parallelism():
    assert SOURCES == ("aiconfigurator", "vidur", "roofline")
    with pytest.raises(ProfileError, match="available: aiconfigurator, vidur, roofline"):
        load("measured", LLAMA3_8B, "h100", "h100_dgx")
    with pytest.raises(ProfileError, match="tp and pp"):
        load("roofline", LLAMA3_8B, "h100", "h100_dgx", tp=0)


def test_available_lists_each_source():
    aic_av = available("aiconfigurator")
    assert {"a100_sxm", "h100_sxm", "h200_sxm"} <= set(aic_av["systems"])
    assert aic_av["devices"]["h100"] == "h100_sxm" and "a40" not in aic_av["devices"]
    assert "0.24.0" in aic_av["systems"]["h100_sxm"]["gemm"]["vllm"]
    roof = available("roofline")
    assert roof["devices"]["a40"] == ["bf16"] and "fp8" in roof["devices"]["h100"]
    if VIDUR_DIR.is_dir():
        vid = available("vidur", VIDUR_DIR)
        assert "attention.csv" in vid["devices"]["a100"][LLAMA3_8B]
        assert "all_reduce.csv" not in vid["nodes"]["a40_pairwise_nvlink"]


# ---- aiconfigurator ----


def h100_gemm():
    _, path = newest_table(get_system("h100_sxm"), "gemm", "vllm", "gemm_perf.parquet")
    return gemm_table(path, "bfloat16", envelope=False)


def test_aic_raw_gemm_units():
    t = h100_gemm()
    i, j, k = (int(np.searchsorted(a, 4096)) for a in (t.m, t.n, t.k))
    assert 0.15 < t.t[i, j, k] < 0.19  # 4096^3 bf16 GEMM ~ 0.166 ms (~830 TFLOP/s)


def test_aic_gemm_envelope_is_monotone_and_only_lowers():
    from vidur_fast.timing.sources._aic_gemm import fastest_envelope

    _, path = newest_table(get_system("b200_sxm"), "gemm", "vllm", "gemm_perf.parquet")
    raw, env = gemm_table(path, "fp8", envelope=False), gemm_table(path, "fp8")
    ok = np.isfinite(raw.t)
    assert (np.isfinite(env.t) == ok).all() and (env.t[ok] <= raw.t[ok]).all()
    for axis in range(3):  # never faster for a larger shape (unmeasured cells: no constraint)
        filled = np.where(ok, env.t, np.nanmax(env.t) * 10)
        both = ok & np.roll(ok, -1, axis=axis)
        d = np.diff(filled, axis=axis, append=np.take(filled, [-1], axis=axis))
        assert (d[both] >= 0).all()
    # B200's per-tensor FP8 kernel: 30 us at m=4, n=1536, k=8192 between 10-12 us neighbours
    i, j, k = (
        int(np.searchsorted(raw.m, 4)),
        int(np.searchsorted(raw.n, 1536)),
        int(np.searchsorted(raw.k, 8192)),
    )
    assert raw.t[i, j, k] > 0.025 and env.t[i, j, k] < 0.013
    # a toy table: the running minimum from above in every dimension, NaN kept
    t = np.array([[[3.0, 1.0], [np.nan, 2.0]]])
    assert np.allclose(fastest_envelope(t), [[[1.0, 1.0], [np.nan, 2.0]]], equal_nan=True)


def test_aic_allreduce_envelope():
    from vidur_fast.timing.sources.aiconfigurator import allreduce_curve

    sys_ = get_system("b200_sxm")
    x, raw, _, _ = allreduce_curve(sys_, "vllm", 8, envelope=False)
    _, env, _, _ = allreduce_curve(sys_, "vllm", 8)
    assert (np.diff(env) >= 0).all() and (env <= raw).all()
    assert (np.diff(raw) < 0).any()  # the measured curve is not monotone


@pytest.mark.parametrize(
    ("dim", "value"), [("n", 3072), ("n", 12288), ("n", 16384), ("k", 5120), ("k", 12288)]
)
def test_aic_gemm_interpolation_holdout(dim, value):
    err = np.abs(gemm_holdout_errors(h100_gemm(), **{dim: value}))
    assert len(err) > 1000
    assert np.median(err) < 0.08 and np.percentile(err, 90) < 0.2


@pytest.mark.parametrize(
    ("model", "device", "node", "tp", "pp"),
    [
        (LLAMA3_8B, "h100", "h100_dgx", 1, 1),
        ("Qwen/Qwen3-32B", "h200", "h200_dgx", 2, 2),
        ("meta-llama/Llama-2-70b-hf", "a100", "a100_dgx", 8, 2),
        (LLAMA3_8B, "l40s", "h100_dgx", 2, 1),
    ],
)
def test_aic_loads(model, device, node, tp, pp):
    s = load("aiconfigurator", model, device, node, tp, pp)
    check_frames(s, tp, pp)
    assert set(s.token_ops.op) == set(TOKEN_OPS)
    assert s.token_ops.num_tokens.max() == 131072
    assert s.prefill.kv_len.max() == 131072 and s.prefill.chunk.max() == 16384
    assert s.decode.kv_len.max() >= 131071
    for op in TOKEN_OPS:
        # GEMMs are kept as measured: kernel switches and timing noise at small m make them
        # dip (by up to ~20 %; L40S has 2x outliers at m < 16); the compute-bound tail is clean
        t = op_curve(s, op).to_numpy()
        floor = 0.75 if device != "l40s" else 0.4
        assert (t >= floor * np.maximum.accumulate(t)).all(), op
        assert nondecreasing(t[-12:]), op
    assert s.provenance["versions"]["gemm"] and s.provenance["files"]


def test_aic_llama3_gemm_and_provenance():
    s = load("aiconfigurator", LLAMA3_8B, "h100", "h100_dgx")
    qkv = op_curve(s, "attn_pre_proj")
    # m=4096, n=(32+16)*128=6144, k=4096: 0.21 ms at peak, measured ~0.26 ms
    assert 0.2 < qkv[4096] < 0.35
    up = op_curve(s, "mlp_up_proj")  # n = 28672 interpolated between 16384 and 51200
    assert 0.8 < up[4096] / (qkv[4096] * 28672 / 6144) < 1.25
    assert s.provenance["versions"] == {"gemm": "0.24.0", "attention": "0.24.0"}
    assert s.provenance["prefill_heads"] == "q=32 kv=8 d=128"
    assert s.provenance["package"].startswith("aiconfigurator_core")


def test_aic_prefill_derivation():
    s = load("aiconfigurator", LLAMA3_8B, "h100", "h100_dgx")
    grid = s.prefill.pivot(index="kv_len", columns="chunk", values="time_ms")
    assert not grid.isna().any().any()
    assert (np.diff(grid.to_numpy(), axis=0) >= 0).all()  # monotone in kv
    assert (np.diff(grid.to_numpy(), axis=1) >= 0).all()  # monotone in chunk

    # kv = 0 reproduces the measured full prefill (after the running max over isl)
    system = get_system("h100_sxm")
    _, path = newest_table(system, "attention", "vllm", "context_attention_perf.parquet")
    ctx = aic.attention_rows(path, context=True)
    raw = aic.select_heads(ctx, aic.match_heads(ctx, 32, 8, 128), ["isl"]).set_index("isl").latency
    at0 = grid.loc[0, raw.index]
    np.testing.assert_allclose(at0, np.maximum.accumulate(raw.to_numpy()), rtol=1e-9)
    np.testing.assert_allclose(at0, raw, rtol=0.05)

    # one new token over a long prefix costs at least one request's measured decode
    dec = s.decode.set_index(["batch_size", "kv_len"]).time_ms
    for k in (4095, 16383, 65535):
        ratio = grid.loc[grid.index[grid.index >= k][0], 1] / dec[(1, k)]
        assert 1.0 <= ratio < 1.3, (k, ratio)

    # against the analytic model where either one is compute- or bandwidth-bound
    rf = Roofline.of(get_device("h100"))
    big = s.prefill[(s.prefill.kv_len >= 4096) | (s.prefill.chunk >= 2048)]
    ref = prefill_ms(rf, big.kv_len, big.chunk, 32, 8, 128)
    ratio = big.time_ms.to_numpy() / ref
    assert 0.5 < ratio.min() and ratio.max() < 2.0


def test_aic_head_scaling_against_measured_mha():
    """SGLang's decode table also measures MHA heads: derive (32, 32) from (32, 8)."""
    _, path = newest_table(
        get_system("h100_sxm"), "attention", "sglang", "generation_attention_perf.parquet"
    )
    rows = aic.attention_rows(path, context=False)
    keys = ["batch_size", "step"]
    target = aic.select_heads(rows, aic.HeadMatch(32, 32, 128, 1, 1), keys)
    target = target.set_index(keys).latency
    derived, _ = aic.decode_samples(rows, aic.HeadMatch(32, 8, 128, 1.0, 4.0))
    derived = derived.set_index(["batch_size", "kv_len"]).time_ms
    common = target.index.intersection(derived.index)
    err = np.abs(derived[common] / target[common] - 1)
    assert len(common) > 100 and err.mean() < 0.25


def test_aic_equivalent_chunk_is_exact_at_zero_prefix():
    c = np.array([1, 16, 1000, 16384])
    np.testing.assert_array_equal(aic.equivalent_chunk(0, c), c)
    assert aic.equivalent_chunk(1000, 10) > 10


def test_aic_decode_fill_is_linear():
    s = load("aiconfigurator", LLAMA3_8B, "h100", "h100_dgx")
    dec = s.decode.set_index(["batch_size", "kv_len"]).time_ms
    # (2048, 131071) was not measured: filled as batch * (kv + 1) scaling
    assert dec[(2048, 131071)] == pytest.approx(2 * dec[(1024, 131071)])
    assert s.provenance["decode_filled_cells"] > 0
    at_long = s.decode[s.decode.kv_len == 131071].sort_values("batch_size")
    assert nondecreasing(at_long.time_ms)


def test_aic_collectives():
    system = get_system("h100_sxm")
    s = load("aiconfigurator", LLAMA3_8B, "h100", "h100_dgx", tp=4, pp=2)
    check_frames(s, 4, 2)
    ar = s.all_reduce.set_index("num_tokens").time_ms
    assert ar.index.min() == 1 and ar.index.max() == 131072
    assert nondecreasing(ar[ar.index >= 64])
    assert 0.002 < ar[1] < 0.05  # latency-bound custom all-reduce, a few microseconds
    assert s.provenance["versions"]["custom_allreduce"] == "vllm/0.24.0"
    sr = s.send_recv.set_index("num_tokens").time_ms
    e = 4096
    expect = (system.node("p2p_latency") + 4096 * e * 2 / system.node("intra_node_bw")) * 1e3
    assert sr[4096] == pytest.approx(expect)
    cross = load("aiconfigurator", LLAMA3_8B, "h100", "h100_dgx", tp=8, pp=2)
    assert cross.provenance["send_recv_link"] == "inter_node"
    assert cross.send_recv.time_ms.iloc[-1] > s.send_recv.time_ms.iloc[-1]


def test_aic_backends_and_fp8():
    trt = load("aiconfigurator", LLAMA3_8B, "h100", "h100_dgx", tp=2, backend="trtllm")
    assert trt.provenance["versions"]["gemm"] == "1.3.0rc20"
    bf16 = op_curve(load("aiconfigurator", LLAMA3_8B, "h100", "h100_dgx"), "mlp_up_proj")
    fp8 = op_curve(
        load("aiconfigurator", LLAMA3_8B, "h100", "h100_dgx", precision="fp8"), "mlp_up_proj"
    )
    assert fp8[8192] < 0.8 * bf16[8192]


@pytest.mark.parametrize(
    ("device", "node", "tp", "kw", "needle"),
    [
        ("a40", "a40_pairwise_nvlink", 1, {}, "device a40 has no aiconfigurator system"),
        ("h100", "h100_dgx", 16, {}, "TP 16 .* measured TP: 2, 4, 8"),
        ("a100", "a100_dgx", 1, {"precision": "fp8"}, "gemm_dtype=fp8"),
        ("h100", "h100_dgx", 1, {"backend": "tgi"}, "unknown backend 'tgi'"),
        ("h100", "h100_dgx", 1, {"profile_dir": "/nonexistent"}, "does not exist"),
    ],
)
def test_aic_errors(device, node, tp, kw, needle):
    with pytest.raises(ProfileError, match=needle) as exc:
        load("aiconfigurator", LLAMA3_8B, device, node, tp=tp, **kw)
    assert "\n" not in str(exc.value)


# ---- vidur ----


@needs_vidur
def test_vidur_loads_llama3_a100():
    s = load("vidur", LLAMA3_8B, "a100", "a100_pairwise_nvlink", 2, 2, profile_dir=VIDUR_DIR)
    check_frames(s, 2, 2)
    assert set(s.token_ops.op) == set(TOKEN_OPS)
    mlp = pd.read_csv(VIDUR_DIR / "compute/a100" / LLAMA3_8B / "mlp.csv")
    mlp = mlp[mlp.num_tensor_parallel_workers == 2].drop_duplicates()
    up = s.token_ops[s.token_ops.op == "mlp_up_proj"]
    assert len(up) == len(mlp)
    np.testing.assert_allclose(
        up.time_ms.to_numpy(), mlp["time_stats.mlp_up_proj.median"].fillna(0).to_numpy()
    )
    # all-reduce: num_workers == devices_per_node == TP; tokens = bytes / E / 2
    net = pd.read_csv(VIDUR_DIR / "network/a100_pairwise_nvlink/all_reduce.csv")
    net = net[(net.num_workers == 2) & (net.devices_per_node == 2)]
    np.testing.assert_allclose(s.all_reduce.num_tokens, net["size"] / 4096 / 2)
    assert (s.prefill.chunk > 0).all() and s.provenance["files"]
    kv_save = s.token_ops[s.token_ops.op == "attn_kv_cache_save"]
    assert (kv_save.time_ms > 0).all()


@needs_vidur
def test_vidur_send_recv_rows_follow_replica_span():
    within = load("vidur", LLAMA3_8B, "a100", "a100_pairwise_nvlink", 2, 2, profile_dir=VIDUR_DIR)
    across = load("vidur", LLAMA3_8B, "a100", "a100_pairwise_nvlink", 4, 2, profile_dir=VIDUR_DIR)
    net = pd.read_csv(VIDUR_DIR / "network/a100_pairwise_nvlink/send_recv.csv")
    for s, dpn in ((within, 2), (across, 1)):
        want = net[(net.collective == "send_recv") & (net.devices_per_node == dpn)]
        np.testing.assert_allclose(s.send_recv.time_ms, want["time_stats.send_recv.median"])


@needs_vidur
def test_vidur_old_layout_has_zero_kv_save():
    s = load("vidur", "meta-llama/Llama-2-7b-hf", "a100", "a100_dgx", profile_dir=VIDUR_DIR)
    check_frames(s, 1, 1)
    kv_save = s.token_ops[s.token_ops.op == "attn_kv_cache_save"]
    assert len(kv_save) > 0 and (kv_save.time_ms == 0).all()


def _vidur_copy(tmp_path: Path, edit_mlp=None, drop_all_reduce=False, device="a100") -> Path:
    """A Vidur dir for Llama-3-8B: attention.csv and network files are symlinks to the shared
    ones, mlp.csv is (an edited) copy."""
    src = VIDUR_DIR / "compute/a100" / LLAMA3_8B
    dst = tmp_path / "compute" / device / LLAMA3_8B
    dst.mkdir(parents=True)
    (dst / "attention.csv").symlink_to(src / "attention.csv")
    if edit_mlp is None:
        shutil.copy(src / "mlp.csv", dst / "mlp.csv")
    else:
        edit_mlp(pd.read_csv(src / "mlp.csv")).to_csv(dst / "mlp.csv", index=False)
    for node in ("a100_pairwise_nvlink",):
        (tmp_path / "network" / node).mkdir(parents=True)
        for name in ("all_reduce.csv", "send_recv.csv"):
            if name == "all_reduce.csv" and drop_all_reduce:
                continue
            (tmp_path / "network" / node / name).symlink_to(VIDUR_DIR / "network" / node / name)
    return tmp_path


@needs_vidur
def test_vidur_missing_tp_lists_available(tmp_path):
    root = _vidur_copy(tmp_path, lambda df: df[df.num_tensor_parallel_workers <= 2], device="h100")
    with pytest.raises(ProfileError) as exc:
        load("vidur", LLAMA3_8B, "h100", "h100_dgx", 4, 1, profile_dir=root)
    assert str(exc.value) == (
        f"predictor.source=vidur: no mlp.csv rows for {LLAMA3_8B} at TP 4 on h100 in {root}; "
        "available TP: 1, 2"
    )


@needs_vidur
def test_vidur_missing_column_names_file_and_column(tmp_path):
    root = _vidur_copy(tmp_path, lambda df: df.drop(columns=["time_stats.mlp_act.median"]))
    with pytest.raises(ProfileError, match=r"mlp\.csv lacks column 'time_stats\.mlp_act\.median'"):
        load("vidur", LLAMA3_8B, "a100", "a100_pairwise_nvlink", profile_dir=root)


@needs_vidur
def test_vidur_corrupt_or_missing_files(tmp_path):
    root = _vidur_copy(tmp_path, drop_all_reduce=True)
    with pytest.raises(ProfileError, match="TP 2 needs network/a100_pairwise_nvlink/all_reduce"):
        load("vidur", LLAMA3_8B, "a100", "a100_pairwise_nvlink", 2, 1, profile_dir=root)
    (root / "compute/a100" / LLAMA3_8B / "mlp.csv").write_bytes(b"\xff\xfe\x00garbage\x00")
    with pytest.raises(ProfileError, match="mlp.csv"):
        load("vidur", LLAMA3_8B, "a100", "a100_pairwise_nvlink", profile_dir=root)
    with pytest.raises(ProfileError, match="models profiled on a100"):
        load("vidur", "Qwen/Qwen3-8B", "a100", "a100_dgx", profile_dir=root)
    with pytest.raises(ProfileError, match="profile_dir"):
        load("vidur", LLAMA3_8B, "a100", "a100_dgx")


# ---- roofline ----


@pytest.mark.parametrize(
    ("model", "device", "node", "tp", "pp"),
    [
        ("meta-llama/Llama-2-7b-hf", "a40", "a40_pairwise_nvlink", 2, 2),
        (LLAMA3_8B, "l40s", "h100_dgx", 1, 1),
        ("meta-llama/Llama-3.1-70B", "b200", "b200_dgx", 8, 2),
        ("microsoft/phi-2", "a100", "a100_dgx", 1, 1),
    ],
)
def test_roofline_loads_and_is_monotone(model, device, node, tp, pp):
    s = load("roofline", model, device, node, tp, pp)
    check_frames(s, tp, pp)
    has_post_norm = get_model(model).post_attn_norm
    assert ("post_attention_layernorm" in set(s.token_ops.op)) == has_post_norm
    for op in set(s.token_ops.op):
        assert nondecreasing(op_curve(s, op)), op
    assert s.token_ops.num_tokens.max() == 131072
    dec = s.decode.pivot(index="batch_size", columns="kv_len", values="time_ms")
    assert dec.index.max() == 512 and dec.columns.max() == 131072
    assert (np.diff(dec.to_numpy(), axis=0) >= 0).all() and (np.diff(dec, axis=1) >= 0).all()
    pre = s.prefill.pivot(index="kv_len", columns="chunk", values="time_ms")
    assert pre.index.max() == 131072 and pre.columns.max() == 16384
    assert (np.diff(pre.to_numpy(), axis=0) >= 0).all() and (np.diff(pre, axis=1) >= 0).all()
    for f in (s.all_reduce, s.send_recv):
        assert nondecreasing(f.time_ms)


def test_roofline_values_and_links():
    s = load("roofline", LLAMA3_8B, "h100", "h100_dgx")
    o_proj = op_curve(s, "attn_post_proj")[4096]  # 4096^3: 2*4096^3 / (0.8*989e12) + 3 us
    assert o_proj == pytest.approx(2 * 4096**3 / (0.8 * 989e12) * 1e3 + 0.003)
    dgx = load("roofline", LLAMA3_8B, "a100", "a100_dgx", tp=4)
    pairwise = load("roofline", LLAMA3_8B, "a100", "a100_pairwise_nvlink", tp=4)
    assert pairwise.all_reduce.time_ms.iloc[-1] > 5 * dgx.all_reduce.time_ms.iloc[-1]
    with pytest.raises(ProfileError, match="a40 has no fp8"):
        load("roofline", LLAMA3_8B, "a40", "a40_pairwise_nvlink", precision="fp8")
