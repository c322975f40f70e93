"""Mixture-of-experts and sliding-window models are timed (aiconfigurator tables or the
roofline) and simulated; multi-head latent attention is timed from aiconfigurator's MLA module
tables only, so a source without them refuses an MLA model with one line naming the feature
and the config field, exit code 2 — never simulated with another attention. A config.json
field the simulator cannot read is refused the same way."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers.cli_args import FAST_TIMING_ARGS
from tests.helpers.sweeps import small_sweep
from vidur_fast.commands.main import main

FAST = ["--quiet", *FAST_TIMING_ARGS, "--predictor.regressor", "polynomial"]

# a Qwen3-30B-A3B style config.json: dense-looking fields plus the expert fields
QWEN3_MOE = {
    "architectures": ["Qwen3MoeForCausalLM"],
    "model_type": "qwen3_moe",
    "hidden_size": 2048,
    "num_hidden_layers": 48,
    "num_attention_heads": 32,
    "num_key_value_heads": 4,
    "head_dim": 128,
    "intermediate_size": 6144,
    "moe_intermediate_size": 768,
    "num_experts": 128,
    "num_experts_per_tok": 8,
    "decoder_sparse_step": 1,
    "mlp_only_layers": [],
    "norm_topk_prob": True,
    "vocab_size": 151936,
    "max_position_embeddings": 40960,
    "rms_norm_eps": 1e-6,
    "sliding_window": None,
    "use_sliding_window": False,
}
# DeepSeek-style attention (MLA) on a model with dense MLPs only
MLA_DENSE = {
    "architectures": ["DeepseekV3ForCausalLM"],
    "model_type": "deepseek_v3",
    "hidden_size": 2048,
    "num_hidden_layers": 8,
    "num_attention_heads": 16,
    "num_key_value_heads": 16,
    "intermediate_size": 8192,
    "kv_lora_rank": 512,
    "q_lora_rank": None,
    "qk_rope_head_dim": 64,
    "qk_nope_head_dim": 128,
    "v_head_dim": 128,
    "vocab_size": 102400,
    "max_position_embeddings": 16384,
    "rms_norm_eps": 1e-6,
}
# gpt-oss style alternating sliding/full attention, dense MLPs
SLIDING_DENSE = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "hidden_size": 2880,
    "num_hidden_layers": 4,
    "num_attention_heads": 64,
    "num_key_value_heads": 8,
    "head_dim": 64,
    "intermediate_size": 2880,
    "sliding_window": 128,
    "layer_types": ["sliding_attention", "full_attention"] * 2,
    "vocab_size": 201088,
    "max_position_embeddings": 131072,
    "rms_norm_eps": 1e-5,
}


def _config(d: Path, cfg: dict, name: str = "hf") -> str:
    path = d / name / "config.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(cfg))
    return str(path)


def _with(base: dict, **override) -> dict:
    out = dict(base)
    out.update(override)
    return out


def _run(argv: list[str], capsys) -> tuple[int, str]:
    try:
        code = main(argv)
    except SystemExit as exc:
        code = exc.code
    return code, capsys.readouterr().err


def _one_line(code: int, err: str, *needles: str, prefix: str = "error: cluster.model: ") -> str:
    lines = [x for x in err.splitlines() if x.strip()]
    assert code == 2, err
    assert len(lines) == 1, err
    assert lines[0].startswith(prefix), err
    for needle in needles:
        assert needle in lines[0], lines[0]
    assert "Traceback" not in err
    return lines[0]


@pytest.fixture
def dirs(tmp_path, monkeypatch):
    monkeypatch.setenv("VIDUR_FAST_CACHE", str(tmp_path / "cache"))
    inputs = tmp_path / "in"
    inputs.mkdir()
    return inputs, tmp_path / "out"


ROOFLINE = "error: predictor.source=roofline: "
REFUSED = [
    (
        "mla_config",
        lambda d: _config(d, MLA_DENSE),
        ("multi-head latent attention", "kv_lora_rank=512", "MLA is timed from aiconfigurator"),
    ),
]

# MoE and sliding-window models are simulated (here with the roofline timing)
SIMULATED = [
    ("qwen3_moe_config", lambda d: _config(d, QWEN3_MOE), "moe"),
    ("sliding_config", lambda d: _config(d, SLIDING_DENSE), "sliding_window"),
    (
        "mixtral_local_experts",
        lambda d: _config(
            d,
            _with(
                SLIDING_DENSE,
                layer_types=None,
                sliding_window=None,
                model_type="mixtral",
                num_local_experts=8,
                num_experts_per_tok=2,
            ),
        ),
        "moe",
    ),
    ("embedded_gpt_oss", lambda d: "gpt-oss-20b", "moe"),
]

UNREADABLE = [
    (
        "unknown_model_type",
        _with(QWEN3_MOE, model_type="qwen9_hyper"),
        ("model_type 'qwen9_hyper'",),
    ),
    (
        "unread_moe_field",
        _with(QWEN3_MOE, num_experts_per_group=4),
        ("'num_experts_per_group'", "does not read"),
    ),
    (
        "unread_layer_type",
        _with(SLIDING_DENSE, layer_types=["linear_attention", "full_attention"] * 2),
        ("layer_types entry 'linear_attention'",),
    ),
    (
        "layer_types_wrong_length",
        _with(SLIDING_DENSE, layer_types=["full_attention"]),
        ("layer_types",),
    ),
    (
        "unknown_quant_method",
        _with(QWEN3_MOE, quantization_config={"quant_method": "bitsandbytes"}),
        ("quantization_config.quant_method 'bitsandbytes'",),
    ),
    ("top_k_missing", _with(QWEN3_MOE, num_experts_per_tok=None), ("num_experts_per_tok",)),
    (
        "top_k_above_experts",
        _with(QWEN3_MOE, num_experts_per_tok=256),
        ("num_experts_per_tok 256 exceeds",),
    ),
    (
        "expert_field_not_int",
        _with(QWEN3_MOE, first_k_dense_replace="three"),
        ("first_k_dense_replace",),
    ),
    ("mla_rope_missing", _with(MLA_DENSE, qk_rope_head_dim=None), ("qk_rope_head_dim",)),
    (
        "text_config_unknown_type",
        {"model_type": "kimi_k25", "text_config": _with(QWEN3_MOE, model_type="nope")},
        ("text_config", "'nope'"),
    ),
]


@pytest.mark.parametrize("case", REFUSED, ids=[c[0] for c in REFUSED])
def test_simulate_refuses_unmodelled_model(case, dirs, capsys):
    inputs, out_root = dirs
    _, model, needles = case
    argv = ["--output.dir", str(out_root / "run"), *FAST, "--cluster.model", model(inputs)]
    _one_line(*_run(argv, capsys), *needles, prefix=ROOFLINE)
    assert not out_root.exists()


@pytest.mark.parametrize("case", UNREADABLE, ids=[c[0] for c in UNREADABLE])
def test_unreadable_config_field_is_one_line(case, dirs, capsys):
    inputs, out_root = dirs
    _, cfg, needles = case
    argv = ["--output.dir", str(out_root / "run"), *FAST, "--cluster.model", _config(inputs, cfg)]
    _one_line(*_run(argv, capsys), *needles)
    assert not out_root.exists()


@pytest.mark.parametrize("case", SIMULATED, ids=[c[0] for c in SIMULATED])
def test_moe_and_sliding_models_are_simulated(case, dirs, capsys):
    inputs, out_root = dirs
    _, model, key = case
    argv = ["--output.dir", str(out_root / "run"), *FAST, "--cluster.model", model(inputs)]
    argv += ["workload:synthetic", "--workload.num-requests", "4"]
    code, err = _run(argv, capsys)
    assert code == 0, err
    summary = json.loads((out_root / "run" / "summary.json").read_text())
    assert summary["num_completed"] == 4
    assert f"timing_{key}" in summary  # which rule timed the layers


def test_dense_config_json_still_runs(dirs, capsys):
    # the same reader, a dense GQA model: simulated as before
    inputs, out_root = dirs
    dense = _with(SLIDING_DENSE, layer_types=None, sliding_window=None, num_hidden_layers=2)
    argv = ["--output.dir", str(out_root / "run"), *FAST, "--cluster.model", _config(inputs, dense)]
    argv += ["workload:synthetic", "--workload.num-requests", "4"]
    code, err = _run(argv, capsys)
    assert code == 0, err


def test_profiles_build_refuses_too(dirs, capsys):
    inputs, _ = dirs
    argv = ["profiles", "build", "--cluster.model", _config(inputs, MLA_DENSE), *FAST[1:]]
    _one_line(*_run(argv, capsys), "multi-head latent attention", prefix=ROOFLINE)


def test_sweep_records_the_refusal_per_point(tmp_path):
    from vidur_fast.explore.run_sweep import run_sweep

    spec = small_sweep(tmp_path / "grids")
    spec["base"]["cluster"] = {"model": _config(tmp_path, MLA_DENSE)}
    spec["grid"] = {"qps": [4, 16]}
    path = tmp_path / "s.json"
    path.write_text(json.dumps(spec))
    res = run_sweep(str(path), str(tmp_path / "out"), workers=1, quiet=True)
    t = res.table
    assert (t["status"] == "error").all()
    assert (
        t["error"]
        .str.contains("(kv_lora_rank=512); MLA is timed from aiconfigurator", regex=False)
        .all()
    )


def test_refusal_in_a_subprocess(dirs):
    inputs, out_root = dirs
    res = subprocess.run(
        [sys.executable, "-m", "vidur_fast.commands.main", "--output.dir", str(out_root / "r"),
         *FAST, "--cluster.model", _config(inputs, MLA_DENSE)],
        capture_output=True,
        text=True,
        timeout=300,
    )  # fmt: skip
    _one_line(res.returncode, res.stderr, "kv_lora_rank=512", prefix=ROOFLINE)
    assert res.stdout == ""


def test_validate_lists_mla_rows_without_mla_tables_and_runs_moe_rows(tmp_path, capsys):
    p = tmp_path / "rows.csv"
    p.write_text(
        "model,device,tp,concurrency,isl,osl,ttft_ms,tpot_ms\n"
        "deepseek-ai/DeepSeek-V3,h200,8,8,1024,128,90,8\n"
        "Qwen/Qwen3-30B-A3B,h100,1,2,256,16,90,8\n"
    )
    argv = ["validate", str(p), *FAST_TIMING_ARGS, "--predictor.regressor", "polynomial"]
    argv += ["--requests-per-client", "3", "--warmup-requests-per-client", "1"]
    assert main(argv) == 0
    out = capsys.readouterr().out
    lines = [x for x in out.splitlines() if x.startswith("not simulated")]
    assert len(lines) == 1, out
    assert "kv_lora_rank=512); MLA is timed from aiconfigurator" in lines[0]
