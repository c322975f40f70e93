"""The embedded Hugging Face configs against their model cards: total and active parameters,
KV-cache bytes per token, and the architecture read from each config.json.

Model cards round (30.5B, 3.3B, ...); the counts here cover every weight (norms and biases
included) and must land within the card's rounding. Cards differ in what they call active:
most count the input embedding and the LM head (Qwen3, Mixtral, DeepSeek-V3, Kimi: "all");
gpt-oss's card counts the LM head but not the input embedding, a lookup ("head"); the GLM-4.5
and MiniMax-M2.5 figures match the transformer layers alone ("layers").
"""

from dataclasses import replace

import pytest

from vidur_fast.catalog import ModelSpec, get_model, list_models
from vidur_fast.catalog.arch import DENSE, FULL, MOE, SLIDING
from vidur_fast.catalog.hf_config import spec_from_hf

B = 1e9
# name -> (published total, published active, what the card's active count covers, relative
# tolerance: the card's rounding)
CARDS = {
    "Qwen/Qwen3-30B-A3B": (30.5 * B, 3.3 * B, "all", 0.02),
    "Qwen/Qwen3-235B-A22B": (235 * B, 22 * B, "all", 0.01),
    "openai/gpt-oss-20b": (20.91 * B, 3.61 * B, "head", 0.005),
    "openai/gpt-oss-120b": (116.83 * B, 5.13 * B, "head", 0.005),
    "mistralai/Mixtral-8x7B-v0.1": (46.7 * B, 12.9 * B, "all", 0.005),
    "deepseek-ai/DeepSeek-V3": (671 * B, 37 * B, "all", 0.02),
    "moonshotai/Kimi-K2.5": (1000 * B, 32 * B, "all", 0.03),
    "MiniMaxAI/MiniMax-M2.5": (230 * B, 10 * B, "layers", 0.03),
    "zai-org/GLM-4.5": (355 * B, 32 * B, "layers", 0.01),
}


def _near(value: float, card: float, rel: float) -> bool:
    return abs(value - card) <= rel * card


@pytest.mark.parametrize("name", list(CARDS))
def test_total_and_active_params_match_the_model_card(name):
    total, active, covers, rel = CARDS[name]
    m = get_model(name)
    c = m.param_count
    left_out = {"all": 0, "head": c.embedding, "layers": c.embedding + c.lm_head}[covers]
    got_active = c.active - left_out
    assert _near(m.params_total, total, rel), (name, m.params_total / B)
    assert _near(got_active, active, rel), (name, got_active / B)
    assert m.params_active == c.active < m.params_total


def test_every_listed_model_has_an_embedded_config_and_a_card():
    embedded = [n for n in list_models() if get_model(n).model_type]
    assert sorted(embedded) == sorted(CARDS)


def test_deepseek_v3_mtp_module_is_counted_apart():
    # the card: 671B main model + 14B multi-token-prediction module = the 685B checkpoint
    # (the checkpoint stores the MTP module's own copy of the embedding and LM head)
    c = get_model("deepseek-ai/DeepSeek-V3").param_count
    assert get_model("deepseek-ai/DeepSeek-V3").num_mtp_layers == 1
    assert _near(c.total + c.mtp + c.embedding + c.lm_head, 685 * B, 0.005)
    assert c.mtp not in (0, c.total)


def test_kv_bytes_per_token_of_each_embedded_config():
    bf16 = 2
    # GQA: 2 (K, V) x kv heads x head_dim x layers; MLA (DeepSeek-V2 paper): (kv_lora_rank +
    # qk_rope_head_dim) x layers, one latent per token and layer
    expect = {
        "Qwen/Qwen3-30B-A3B": {"full": 2 * 4 * 128 * 48 * bf16},
        "Qwen/Qwen3-235B-A22B": {"full": 2 * 4 * 128 * 94 * bf16},
        "openai/gpt-oss-20b": {"full": 2 * 8 * 64 * 12 * bf16, "sliding": 2 * 8 * 64 * 12 * bf16},
        "openai/gpt-oss-120b": {"full": 2 * 8 * 64 * 18 * bf16, "sliding": 2 * 8 * 64 * 18 * bf16},
        "mistralai/Mixtral-8x7B-v0.1": {"full": 2 * 8 * 128 * 32 * bf16},
        "deepseek-ai/DeepSeek-V3": {"mla": (512 + 64) * 61 * bf16},
        "moonshotai/Kimi-K2.5": {"mla": (512 + 64) * 61 * bf16},
        "MiniMaxAI/MiniMax-M2.5": {"full": 2 * 8 * 128 * 62 * bf16},
        "zai-org/GLM-4.5": {"full": 2 * 8 * 128 * 92 * bf16},
    }
    for name, kv in expect.items():
        assert get_model(name).kv_bytes_per_token_by_kind(1, bf16) == kv, name
    assert expect["deepseek-ai/DeepSeek-V3"]["mla"] == 70272  # ~68.6 KiB per token


def test_kv_per_tp_rank_gqa_splits_heads_mla_does_not():
    qwen = get_model("Qwen/Qwen3-30B-A3B")
    assert (
        qwen.kv_bytes_per_token_by_kind(2)["full"] * 2 == qwen.kv_bytes_per_token_by_kind(1)["full"]
    )
    # 4 KV heads over TP 8: each rank keeps one (replicated), as vLLM does
    assert qwen.kv_bytes_per_token_by_kind(8) == qwen.kv_bytes_per_token_by_kind(4)
    ds = get_model("deepseek-ai/DeepSeek-V3")
    assert ds.kv_bytes_per_token_by_kind(8) == ds.kv_bytes_per_token_by_kind(1)


def test_layer_kinds_read_from_the_configs():
    ds = get_model("deepseek-ai/DeepSeek-V3")
    assert ds.mlp_layers[:4] == (DENSE, DENSE, DENSE, MOE) and ds.mlp_layers.count(MOE) == 58
    assert ds.moe.num_shared_experts == 1 and ds.moe.shared_expert_dim == 2048
    assert ds.mla.q_lora_rank == 1536 and ds.head_dim == 192 and ds.num_kv_heads == 128
    assert ds.quantization == "fp8_block"
    kimi = get_model("moonshotai/Kimi-K2.5")  # nested in text_config
    assert kimi.mlp_layers.count(DENSE) == 1 and kimi.moe.num_experts == 384
    assert kimi.quantization == "int4_wo" and kimi.quantized_groups == ("experts",)
    assert kimi.quant_group_size == 32
    oss = get_model("openai/gpt-oss-120b")
    assert oss.layer_attention[:2] == (SLIDING, FULL) and oss.sliding_window == 128
    assert oss.moe.top_k == 4 and oss.moe.expert_dim == 2880
    assert oss.quantization == "mxfp4" and "attention" not in oss.quantized_groups
    assert get_model("MiniMaxAI/MiniMax-M2.5").num_mtp_layers == 3
    glm = get_model("zai-org/GLM-4.5")
    assert glm.mlp_layers.count(DENSE) == 3 and glm.qk_norm and glm.qkv_bias
    qwen = get_model("Qwen/Qwen3-30B-A3B")
    assert qwen.mlp_layers == (MOE,) * 48 and qwen.layer_attention == ()
    assert qwen.moe.expert_dim == 768 and qwen.quantization == ""


def _qwen_moe(**override) -> dict:
    cfg = {
        "model_type": "qwen3_moe",
        "hidden_size": 256,
        "num_hidden_layers": 8,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "head_dim": 64,
        "intermediate_size": 1024,
        "moe_intermediate_size": 128,
        "num_experts": 16,
        "num_experts_per_tok": 2,
        "vocab_size": 1000,
        "max_position_embeddings": 4096,
        "rms_norm_eps": 1e-6,
    }
    cfg.update(override)
    return cfg


def test_moe_layer_patterns():
    kinds = lambda **o: spec_from_hf(_qwen_moe(**o), "t", "t").mlp_layers  # noqa: E731
    assert kinds(decoder_sparse_step=2) == (DENSE, MOE) * 4
    assert kinds(mlp_only_layers=[0, 7]) == (DENSE,) + (MOE,) * 6 + (DENSE,)
    assert kinds(first_k_dense_replace=3, moe_layer_freq=2) == (DENSE,) * 4 + (MOE, DENSE) * 2
    m = spec_from_hf(_qwen_moe(decoder_sparse_step=2), "t", "t")
    assert m.mlp_hidden_dim == 1024  # the dense layers' width, not the expert's


def test_qwen2_style_shared_expert_and_sliding_from_max_window_layers():
    m = spec_from_hf(
        _qwen_moe(
            model_type="qwen2_moe",
            shared_expert_intermediate_size=512,
            sliding_window=1024,
            use_sliding_window=True,
            max_window_layers=6,
        ),
        "t",
        "t",
    )
    assert (m.moe.num_shared_experts, m.moe.shared_expert_dim) == (1, 512)
    assert m.layer_attention == (FULL,) * 6 + (SLIDING,) * 2
    no_window = spec_from_hf(_qwen_moe(sliding_window=1024, use_sliding_window=False), "t", "t")
    assert no_window.layer_attention == () and no_window.sliding_window == 0


def test_quantization_config_formats():
    q = lambda qc: spec_from_hf(_qwen_moe(quantization_config=qc), "t", "t")  # noqa: E731
    assert q({"quant_method": "fp8"}).quantization == "fp8"
    assert q({"quant_method": "fp8", "weight_block_size": [128, 128]}).quantization == "fp8_block"
    assert q({"quant_method": "modelopt", "quant_algo": "NVFP4"}).quantization == "nvfp4"
    awq = q({"quant_method": "awq", "bits": 4, "group_size": 64})
    assert (awq.quantization, awq.quant_group_size) == ("int4_wo", 64)
    ct = {"weights": {"num_bits": 4, "type": "float"}, "input_activations": {"num_bits": 4}}
    assert q({"quant_method": "compressed-tensors", "config_groups": {"g": ct}}).quantization == (
        "nvfp4"
    )


def test_tied_embeddings_count_once():
    tied = spec_from_hf(_qwen_moe(tie_word_embeddings=True), "t", "t").param_count
    untied = spec_from_hf(_qwen_moe(), "t", "t").param_count
    assert tied.lm_head == 0 and untied.lm_head == untied.embedding == 1000 * 256
    assert untied.total - tied.total == 1000 * 256


def test_dense_catalog_models_are_unchanged_and_modelled():
    for name in ("meta-llama/Llama-3.1-8B", "Qwen/Qwen3-8B", "microsoft/phi-2"):
        m = get_model(name)
        assert m.is_dense and m.unmodelled_features() == [] and m.model_type == ""
        m.check_modelled()
        assert m == replace(m)  # hashable, comparable (the timing memo keys on it)
        hash(m)
    llama = get_model("meta-llama/Llama-3.1-8B")
    assert _near(llama.params_total, 8.03 * B, 0.005)
    # the transformer-layer count the dense timing and memory use is the group sum
    g = llama.params_per_device_by_group(4)
    assert g["attention"] + g["dense_mlp"] == llama.params_per_device(4, 1)
    assert isinstance(llama, ModelSpec)
