"""Weight/KV precisions in the memory planner and timing sources; Qwen3 model features."""

from dataclasses import replace

import pytest

from vidur_fast.catalog import get_device, get_model, get_node
from vidur_fast.config.predictor import PredictorConfig
from vidur_fast.config.validate import validate_predictor
from vidur_fast.errors import ConfigError, ProfileError
from vidur_fast.params.memory import (
    kv_bytes_per_token,
    plan_tokens,
    vllm_runtime_bytes,
    weight_bytes,
)
from vidur_fast.timing.cache import cache_key
from vidur_fast.timing.sources import load_samples
from vidur_fast.timing.sources._common import linear_shapes

QWEN = "Qwen/Qwen3-32B"


def test_kv_bytes_per_token_by_dtype():
    m = get_model(QWEN)  # 8 KV heads of 128, 64 layers
    assert kv_bytes_per_token(m, 2, 64, "bf16") == 2 * 2 * 128 * 4 * 64
    assert kv_bytes_per_token(m, 2, 64, "fp16") == kv_bytes_per_token(m, 2, 64, "bf16")
    assert kv_bytes_per_token(m, 2, 64, "fp8") == 2 * 128 * 4 * 64
    # KV heads are replicated, not split, beyond their count
    assert kv_bytes_per_token(m, 16, 1, "bf16") == 2 * 2 * 128 * 1


def test_fp8_kv_cache_doubles_the_planned_tokens():
    m, d = get_model(QWEN), get_device("h100")
    bf16 = plan_tokens(m, d, 2, 1, 16)
    fp8 = plan_tokens(m, d, 2, 1, 16, kv_dtype="fp8")
    assert fp8.kv_bytes_per_token * 2 == bf16.kv_bytes_per_token
    assert fp8.num_blocks in (2 * bf16.num_blocks, 2 * bf16.num_blocks + 1)


def test_fp8_weights_halve_layer_weights_but_not_embeddings():
    m = get_model(QWEN)
    layers = m.params_per_device(2, 1)
    emb = m.embedding_params_per_device(2, 1)
    assert weight_bytes(m, 2, 1, "bf16") == 2 * layers
    assert weight_bytes(m, 2, 1, "fp8") == layers
    assert weight_bytes(m, 2, 1, "fp8_block", embeddings=True) == layers + 2 * emb
    plan = plan_tokens(get_model(QWEN), get_device("h100"), 2, 1, 16, weight_dtype="fp8")
    assert plan.param_bytes == layers


def test_nvfp4_weights_take_4_bits_plus_a_scale_per_16():
    m = get_model(QWEN)
    layers = m.params_per_device(2, 1)
    emb = m.embedding_params_per_device(2, 1)
    assert weight_bytes(m, 2, 1, "nvfp4") == int(0.5625 * layers)
    assert weight_bytes(m, 2, 1, "nvfp4", embeddings=True) == int(0.5625 * layers) + 2 * emb
    validate_predictor(PredictorConfig(precision="nvfp4"))


def test_aiconfigurator_nvfp4_tables_on_blackwell_only():
    m, n = get_model("meta-llama/Llama-3.1-70B"), get_node("b200_dgx")
    b200 = get_device("b200")
    fp4 = load_samples("aiconfigurator", m, b200, n, 2, 1, precision="nvfp4")
    fp8 = load_samples("aiconfigurator", m, b200, n, 2, 1, precision="fp8")
    assert fp4.provenance["precision"] == "nvfp4"
    up = "mlp_up_proj"

    def t(s, tokens):
        sel = s.token_ops[(s.token_ops.op == up) & (s.token_ops.num_tokens == tokens)]
        return float(sel.time_ms.iloc[0])

    # compute-bound prefill: NVFP4 tensor cores are faster than FP8 ones
    assert t(fp4, 8192) < 0.8 * t(fp8, 8192)
    # the GEMM never beats the dense FP4 peak (9 PFLOP/s)
    n_up = 2 * (m.mlp_hidden_dim // 2)  # gated MLP, TP 2
    assert 2 * 8192 * m.embedding_dim * n_up / (t(fp4, 8192) * 1e-3) < 9e15
    with pytest.raises(ProfileError, match="nvfp4"):
        load_samples("aiconfigurator", m, get_device("h100"), get_node("h100_dgx"), 2, 1,
                     precision="nvfp4")  # fmt: skip
    with pytest.raises(ProfileError, match="nvfp4"):
        load_samples("roofline", m, b200, n, 2, 1, precision="nvfp4")


def test_tied_embeddings_are_counted_once():
    m = get_model(QWEN)
    one = -(-m.vocab_size // 4) * m.embedding_dim
    assert m.embedding_params_per_device(4, 1) == 2 * one
    assert replace(m, tie_word_embeddings=True).embedding_params_per_device(4, 1) == one
    # with pipeline stages the embedding and the head live on different stages
    assert m.embedding_params_per_device(4, 2) == one
    # Qwen3-32B: 64 layers + untied 151936 x 5120 embedding and head = 32.8B parameters
    total = m.params_per_device(1, 1) + m.embedding_params_per_device(1, 1)
    assert total == pytest.approx(32.76e9, rel=0.005)


def test_qwen3_head_dim_differs_from_hidden_over_heads():
    m = get_model(QWEN)
    assert m.head_dim == 128 and m.q_dim == 8192 != m.embedding_dim and m.qk_norm
    shapes = linear_shapes(m, 4)
    assert shapes["attn_pre_proj"] == ((16 + 2 * 2) * 128, 5120)
    assert shapes["attn_post_proj"] == (5120, 16 * 128)


def test_vllm_memory_model_reserves_more_than_vidur():
    m, d = get_model(QWEN), get_device("h100")
    runtime = vllm_runtime_bytes(m, 2, 8192, 1024)
    assert 1 * 2**30 < runtime < 4 * 2**30
    vidur = plan_tokens(m, d, 2, 1, 16)
    vllm = plan_tokens(m, d, 2, 1, 16, embeddings=True, runtime_bytes=runtime)
    assert vllm.num_blocks < vidur.num_blocks


def test_unknown_dtypes_are_config_errors():
    m, d = get_model(QWEN), get_device("h100")
    with pytest.raises(ConfigError, match="kv_cache_dtype"):
        plan_tokens(m, d, 2, 1, 16, kv_dtype="fp4")
    with pytest.raises(ConfigError, match=r"predictor\.precision"):
        validate_predictor(PredictorConfig(precision="int4"))
    with pytest.raises(ConfigError, match=r"predictor\.kv_cache_dtype"):
        validate_predictor(PredictorConfig(kv_cache_dtype="e5m2"))


def _roofline(precision="bf16", kv="bf16"):
    m, d = get_model(QWEN), get_device("h100")
    return load_samples(
        "roofline", m, d, get_node("h100_dgx"), 2, 1, precision=precision, kv_cache_dtype=kv
    )


def test_roofline_fp8_kv_speeds_up_long_decode_and_enters_the_key():
    bf16, fp8kv = _roofline(), _roofline(kv="fp8")
    big = (bf16.decode.batch_size == 64) & (bf16.decode.kv_len >= 8192)
    assert (fp8kv.decode.time_ms[big] < 0.7 * bf16.decode.time_ms[big]).all()
    cfg = PredictorConfig(source="roofline")
    keys = {
        cache_key(s, cfg, model=QWEN, tp=2, pp=1) for s in (bf16, fp8kv, _roofline(precision="fp8"))
    }
    assert len(keys) == 3
    # an fp16 cache has the bytes and kernels of bf16: same samples, same key
    assert cache_key(_roofline(kv="fp16"), cfg, model=QWEN, tp=2, pp=1) == cache_key(
        bf16, cfg, model=QWEN, tp=2, pp=1
    )


def test_aiconfigurator_fp8_tables():
    m, d, n = get_model(QWEN), get_device("h100"), get_node("h100_dgx")
    base = load_samples("aiconfigurator", m, d, n, 2, 1)
    kv8 = load_samples("aiconfigurator", m, d, n, 2, 1, kv_cache_dtype="fp8")
    blk = load_samples("aiconfigurator", m, d, n, 2, 1, precision="fp8_block")
    assert kv8.provenance["kv_cache_dtype"] == "fp8"
    assert "kv_cache_dtype" not in base.provenance
    assert not base.decode.time_ms.equals(kv8.decode.time_ms)
    up = "mlp_up_proj"
    t_bf16 = base.token_ops[(base.token_ops.op == up) & (base.token_ops.num_tokens == 4096)]
    t_blk = blk.token_ops[(blk.token_ops.op == up) & (blk.token_ops.num_tokens == 4096)]
    assert float(t_blk.time_ms.iloc[0]) < float(t_bf16.time_ms.iloc[0])
    with pytest.raises(ProfileError, match="fp8_block"):
        load_samples("roofline", m, d, n, 2, 1, precision="fp8_block")


def test_decode_attention_kv_dtype_times_decode_with_other_kernels():
    m, d, n = get_model(QWEN), get_device("h100"), get_node("h100_dgx")
    base = load_samples("aiconfigurator", m, d, n, 2, 1)
    kv8 = load_samples("aiconfigurator", m, d, n, 2, 1, kv_cache_dtype="fp8")
    mixed = load_samples(
        "aiconfigurator", m, d, n, 2, 1, kv_cache_dtype="fp8", decode_attention_kv_dtype="bf16"
    )
    # decode attention from the bf16 kernels; the KV-cache save stays that of the fp8 cache
    assert mixed.decode.time_ms.equals(base.decode.time_ms)
    assert mixed.token_ops.equals(kv8.token_ops)
    assert mixed.provenance["decode_attention_kv_dtype"] == "bf16"
    assert "decode_attention_kv_dtype" not in kv8.provenance
    with pytest.raises(ProfileError, match="aiconfigurator"):
        load_samples("roofline", m, d, n, 2, 1, decode_attention_kv_dtype="bf16")
    with pytest.raises(ConfigError, match=r"predictor\.decode_attention_kv_dtype"):
        validate_predictor(PredictorConfig(decode_attention_kv_dtype="fp4"))
