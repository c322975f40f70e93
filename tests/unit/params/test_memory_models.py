"""The memory planner for models beyond dense GQA: MoE weights per EP rank, MLA's compressed
KV, sliding windows bounding KV, FP8/FP4/INT4 weight bytes."""

import pytest

from vidur_fast.catalog import get_device, get_model
from vidur_fast.errors import ConfigError
from vidur_fast.params.memory import (
    kv_bytes_per_sequence,
    kv_bytes_per_token,
    model_kv_bytes_per_token,
    model_weight_bytes,
    plan_model_memory,
    weight_bytes,
)

GIB, GB = 2**30, 1e9


def _total(name, tp=1, pp=1, ep=1, quantization=None) -> int:
    return sum(model_weight_bytes(get_model(name), tp, pp, ep, quantization).values())


def test_checkpoint_sizes_from_their_stored_formats():
    # gpt-oss (OpenAI's card): MXFP4 experts, bf16 attention/embeddings: 60.8 and 12.8 GiB
    assert _total("openai/gpt-oss-120b") / GIB == pytest.approx(60.8, rel=0.01)
    assert _total("openai/gpt-oss-20b") / GIB == pytest.approx(12.8, rel=0.01)
    # Qwen3-30B-A3B in bf16: 30.5B parameters, 61.1 GB of safetensors
    assert _total("Qwen/Qwen3-30B-A3B") / GB == pytest.approx(61.1, rel=0.005)
    # DeepSeek-V3 in block-scaled fp8 (embedding, head, norms, router in bf16), MTP not loaded
    ds = model_weight_bytes(get_model("deepseek-ai/DeepSeek-V3"), 1)
    assert ds["embeddings"] == 2 * 129280 * 7168
    assert sum(ds.values()) / GB == pytest.approx(673, rel=0.01)


def test_int4_experts_use_the_checkpoints_group_size():
    kimi = get_model("moonshotai/Kimi-K2.5")  # int4 weight-only experts, groups of 32
    w = model_weight_bytes(kimi, 1)
    n = kimi.params_per_device_by_group(1)
    assert w["experts"] == round(n["experts"] * (0.5 + 2 / 32))
    assert w["attention"] == 2 * n["attention"] and w["shared_experts"] == 2 * n["shared_experts"]


def test_expert_parallel_holds_whole_experts_per_rank():
    m = get_model("deepseek-ai/DeepSeek-V3")
    one = 3 * 7168 * 2048
    g = m.params_per_device_by_group(tp=8, ep=8)
    assert g["experts"] == 58 * 32 * one  # 256 experts / 8 ranks, 58 MoE layers
    assert g["router"] == 58 * 7168 * 256  # replicated
    g9 = m.params_per_device_by_group(tp=1, ep=9)  # uneven: the fullest rank, ceil(256 / 9)
    assert g9["experts"] == 58 * 29 * one
    # without EP every rank holds every expert, split over TP
    assert m.params_per_device_by_group(tp=8)["experts"] == 58 * 256 * one // 8


def test_mla_down_projections_are_replicated_over_tp():
    m = get_model("deepseek-ai/DeepSeek-V3")
    a1 = m.params_per_device_by_group(1)["attention"]
    a8 = m.params_per_device_by_group(8)["attention"]
    replicated = 61 * (7168 * (512 + 64) + 512 + 7168 * 1536 + 1536)
    assert a8 - replicated / 8 > a1 / 8  # more than an eighth: the replicated part
    assert (a1 - replicated) == 8 * (a8 - replicated)


def test_pipeline_stages_take_the_fullest_stage():
    m = get_model("deepseek-ai/DeepSeek-V3")  # 61 layers, the first 3 dense
    one_stage = m.params_per_device_by_group(1)
    two = m.params_per_device_by_group(1, pp=2)
    assert two["embeddings"] + two["lm_head"] == one_stage["embeddings"]  # one of the two
    assert two["experts"] >= one_stage["experts"] // 2


def test_mla_kv_is_not_split_over_tp_and_gqa_is():
    ds = get_model("deepseek-ai/DeepSeek-V3")
    assert kv_bytes_per_sequence(ds, 8, 4096) == kv_bytes_per_sequence(ds, 1, 4096)
    assert kv_bytes_per_sequence(ds, 1, 4096) == 4096 * 576 * 61 * 2
    assert model_kv_bytes_per_token(ds, 1, "fp8") == {"mla": 576 * 61}
    mix = get_model("mistralai/Mixtral-8x7B-v0.1")
    assert kv_bytes_per_sequence(mix, 2, 4096) * 2 == kv_bytes_per_sequence(mix, 1, 4096)


def test_sliding_layers_hold_at_most_the_window():
    oss = get_model("openai/gpt-oss-120b")  # 18 sliding layers (window 128), 18 full
    per_layer_tok = 2 * 8 * 64 * 2
    window_tokens = (-(-127 // 16) + 1) * 16  # the blocks a 128-token window can touch
    for seq in (65536, 131072):
        expect = 18 * per_layer_tok * (seq + window_tokens)
        assert kv_bytes_per_sequence(oss, 1, seq) == expect
    # short sequences: no bound reached, every layer holds every token
    assert kv_bytes_per_sequence(oss, 1, 64) == 36 * per_layer_tok * 64


def test_fp8_and_fp4_serving_of_a_bf16_checkpoint():
    name = "Qwen/Qwen3-30B-A3B"
    bf16 = model_weight_bytes(get_model(name), 1)
    fp8 = model_weight_bytes(get_model(name), 1, quantization="fp8")
    fp4 = model_weight_bytes(get_model(name), 1, quantization="nvfp4")
    assert fp8["experts"] * 2 == bf16["experts"] and fp8["embeddings"] == bf16["embeddings"]
    assert fp4["experts"] == round(bf16["experts"] / 2 * 0.5625)
    with pytest.raises(ConfigError, match="predictor.precision"):
        model_weight_bytes(get_model(name), 1, quantization="fp3")


def test_plan_counts_sequences_beside_the_weights():
    h200 = get_device("h200")
    plan = plan_model_memory(get_model("openai/gpt-oss-120b"), h200, 1, seq_len=8192)
    free = plan.available_bytes - plan.total_weight_bytes
    assert plan.max_sequences == free // plan.kv_bytes_per_sequence > 0
    qwen = plan_model_memory(get_model("Qwen/Qwen3-235B-A22B"), h200, 8, 8192, ep=8)
    # 235B bf16 parameters over 8 ranks (attention over TP, experts over EP)
    assert qwen.total_weight_bytes / GB == pytest.approx(2 * 235 / 8, rel=0.01)
    assert qwen.kv_bytes_per_token == {"full": 2 * 1 * 128 * 94 * 2}  # 4 KV heads, TP 8
    with pytest.raises(ConfigError, match="cluster: deepseek-ai/DeepSeek-V3 weights need"):
        plan_model_memory(get_model("deepseek-ai/DeepSeek-V3"), h200, 1, 8192)


def test_dense_models_plan_as_before():
    m = get_model("meta-llama/Meta-Llama-3-8B")
    w = model_weight_bytes(m, 2)
    assert w["attention"] + w["dense_mlp"] == weight_bytes(m, 2, 1)
    assert model_kv_bytes_per_token(m, 2)["full"] == kv_bytes_per_token(m, 2, m.num_layers)
