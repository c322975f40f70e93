"""`vidur-fast profiles model`: architecture, parameters and memory plan of any catalog model,
including those `simulate` refuses."""

import json

from vidur_fast.commands.main import main


def _run(capsys, *argv: str) -> tuple[int, str, str]:
    try:
        code = main(["profiles", "model", *argv])
    except SystemExit as exc:
        code = exc.code
    out = capsys.readouterr()
    return code, out.out, out.err


def test_moe_mla_model_is_described_not_simulated(capsys):
    code, out, _ = _run(capsys, "--model", "deepseek-ai/DeepSeek-V3", "--tp", "8", "--ep", "8",
                        "--device", "h200")  # fmt: skip
    assert code == 0
    assert "256 (n_routed_experts), top-8" in out and "58 MoE + 3 dense layers" in out
    assert "kv_lora_rank 512" in out and "mla 70272" in out
    assert "total 671.03B" in out and "MTP layers 1" in out
    assert "checkpoint: fp8_block" in out
    assert "not modelled yet" not in out  # MoE and MLA are timed


def test_sliding_and_quantized_groups(capsys):
    code, out, _ = _run(capsys, "--model", "gpt-oss-120b")
    assert code == 0
    assert "18 sliding (window 128) + 18 full" in out
    assert "checkpoint: mxfp4 (experts), rest bf16" in out
    assert "without the input embedding 5.13B" in out


def test_dense_model_and_a_config_path(capsys, tmp_path):
    code, out, _ = _run(capsys, "--model", "meta-llama/Meta-Llama-3-8B")
    assert code == 0 and "MLP: dense, width 14336" in out and "not modelled" not in out
    cfg = {
        "model_type": "qwen3_moe", "hidden_size": 256, "num_hidden_layers": 4,
        "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 64,
        "intermediate_size": 1024, "moe_intermediate_size": 128, "num_experts": 8,
        "num_experts_per_tok": 2, "vocab_size": 1000, "rms_norm_eps": 1e-6,
    }  # fmt: skip
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    code, out, _ = _run(capsys, "--model", str(path))
    assert code == 0 and "8 (num_experts), top-2" in out


def test_bad_values_are_one_line(capsys):
    for argv, needle in (
        (["--ep", "0"], "ep: must be >= 1"),
        (["--model", "deepseek-ai/DeepSeek-V3"], "weights need"),
        (["--quantization", "fp3"], "unknown weight format"),
    ):
        code, out, err = _run(capsys, *argv)
        lines = err.strip().splitlines()
        assert code == 2 and len(lines) == 1 and needle in lines[0], err
