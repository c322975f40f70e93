"""Bad mixture-of-experts input is one line, exit code 2: an expert split that cannot be formed
(moe_ep not dividing the experts, tp x attention_dp not a multiple of moe_ep), expert options
on a dense model, a quantization the measured MoE tables lack, an inconsistent corpus row."""

import json
from pathlib import Path

import pytest

from tests.helpers.cli import assert_one_error, run_cli
from tests.helpers.cli_args import FAST_TIMING_ARGS
from vidur_fast.validation.silicon.sample import moe_row_settings

FAST = ["--quiet", *FAST_TIMING_ARGS, "--predictor.regressor", "polynomial"]
WL = ["workload:synthetic", "--workload.num-requests", "4"]


@pytest.fixture(autouse=True)
def _cache(tmp_path, monkeypatch):
    monkeypatch.setenv("VIDUR_FAST_CACHE", str(tmp_path / "cache"))


def _args(tmp_path, *extra):
    return ["--output.dir", str(tmp_path / "run"), *FAST, *extra, *WL]


@pytest.mark.parametrize(
    "extra, needle",
    [
        (["--predictor.moe-ep", "3"], "predictor.moe_ep: 3 does not divide"),
        (
            ["--cluster.tp", "2", "--predictor.moe-ep", "4"],
            "moe_tp x moe_ep must equal tp x attention_dp",
        ),
        (["--predictor.moe-ep", "0"], "predictor.moe_ep: must be >= 1"),
        (["--predictor.attention-dp", "0"], "predictor.attention_dp: must be >= 1"),
        (["--predictor.moe-routing", "zipf"], "moe-routing"),
        (
            ["--predictor.attention-dp", "2", "--predictor.moe-ep", "2"],
            "cluster.num_replicas: 1 is not a multiple of predictor.attention_dp 2",
        ),
    ],
)
def test_bad_expert_split_is_one_line(tmp_path, capsys, extra, needle):
    argv = _args(tmp_path, "--cluster.model", "Qwen/Qwen3-30B-A3B", *extra)
    assert_one_error(*run_cli(argv, capsys), needle)
    assert not (tmp_path / "run").exists()


def test_expert_options_on_a_dense_model(tmp_path, capsys):
    argv = _args(
        tmp_path, "--cluster.model", "meta-llama/Meta-Llama-3-8B", "--predictor.moe-ep", "2"
    )
    assert_one_error(*run_cli(argv, capsys), "has no MoE layers")


def test_quantization_the_moe_tables_lack(tmp_path, capsys):
    # NVFP4 experts: measured on Blackwell only, not in H100's moe_perf table
    entry = json.loads(
        (Path(__file__).parents[2] / "profiles/hf_configs/Qwen__Qwen3-30B-A3B.json").read_text()
    )
    cfg = dict(entry["config"])
    cfg["quantization_config"] = {"quant_method": "modelopt", "quant_algo": "NVFP4"}
    path = tmp_path / "q" / "config.json"
    path.parent.mkdir()
    path.write_text(json.dumps(cfg))
    small = FAST_TIMING_ARGS[2:]  # small grids, the default (aiconfigurator) source
    argv = ["--output.dir", str(tmp_path / "run"), "--quiet", "--cluster.model", str(path),
            "--cluster.device", "h100", *small, *WL]  # fmt: skip
    code, lines = run_cli(argv, capsys)
    assert_one_error(code, lines, "no MoE kernels for nvfp4 experts")
    assert "measured expert dtypes: bfloat16" in lines[0]


def test_corpus_row_with_an_inconsistent_split_is_not_simulated():
    rec = {"attention_dp_size": "2", "moe_tp_size": "1", "moe_ep_size": "2"}
    dp, ep, _, reason, conflict = moe_row_settings(
        Path("x.csv"), 0, rec, "Qwen/Qwen3-235B-A22B-FP8", 4
    )
    assert (dp, ep, conflict) == (2, 2, "")
    assert "moe_tp_size x moe_ep_size = 1 x 2 is not tp_size x attention_dp_size = 4 x 2" in reason


def test_moe_kernel_not_measured_is_one_line(tmp_path, capsys):
    small = FAST_TIMING_ARGS[2:]  # small grids, the default (aiconfigurator) source
    argv = ["--output.dir", str(tmp_path / "run"), "--quiet", "--cluster.model",
            "openai/gpt-oss-120b", "--cluster.device", "h100", "--cluster.tp", "2",
            "--predictor.moe-kernel", "cutlass-nope", *small, *WL]  # fmt: skip
    code, lines = run_cli(argv, capsys)
    assert_one_error(code, lines, "no w4a16_mxfp4 MoE kernel named like 'cutlass-nope'")
    assert "marlin" in lines[0]  # the kernels it has


def test_mla_shape_the_tables_lack(tmp_path, capsys):
    entry = json.loads(
        (
            Path(__file__).parents[2] / "profiles/hf_configs/deepseek-ai__DeepSeek-V3.json"
        ).read_text()
    )
    cfg = dict(entry["config"])
    cfg["kv_lora_rank"] = 256
    path = tmp_path / "q" / "config.json"
    path.parent.mkdir()
    path.write_text(json.dumps(cfg))
    small = FAST_TIMING_ARGS[2:]
    argv = ["--output.dir", str(tmp_path / "run"), "--quiet", "--cluster.model", str(path),
            "--cluster.device", "h200", "--cluster.tp", "8", *small, *WL]  # fmt: skip
    code, lines = run_cli(argv, capsys)
    assert_one_error(code, lines, "kv_lora_rank=256 (measured 512)")


def test_allreduce_rms_fusion_on_another_source(tmp_path, capsys):
    argv = [
        "--output.dir", str(tmp_path / "run"), "--quiet", "--predictor.source", "roofline",
        "--predictor.regressor", "polynomial", "--cluster.tp", "2",
        "--predictor.allreduce-rms-fusion", *WL,
    ]  # fmt: skip
    assert_one_error(*run_cli(argv, capsys), "allreduce_rms_fusion needs the aiconfigurator")
    assert not (tmp_path / "run").exists()


def test_block_fp8_experts_split_into_partial_blocks(tmp_path, capsys):
    # MiniMax-M2.5's FP8 checkpoint (128 x 128 blocks): 1536-column experts over 8 GPUs leave
    # 192 columns each, which vLLM refuses at start-up
    argv = _args(
        tmp_path,
        "--cluster.model", "MiniMaxAI/MiniMax-M2.5",
        "--cluster.device", "h200",
        "--cluster.tp", "8",
    )  # fmt: skip
    assert_one_error(*run_cli(argv, capsys), "predictor.moe_ep: moe_tp = 8 leaves each GPU 192")
    assert not (tmp_path / "run").exists()


def test_block_fp8_rule_takes_whole_blocks_and_other_formats():
    from vidur_fast.catalog import get_model
    from vidur_fast.catalog.arch import moe_parallel
    from vidur_fast.errors import ConfigError

    minimax = get_model("MiniMaxAI/MiniMax-M2.5")
    assert moe_parallel(minimax, 8, 1, 8, "fp8_block").moe_tp == 1  # expert parallel
    assert moe_parallel(minimax, 4, 1, 1, "fp8_block").moe_tp == 4  # 384 = 3 blocks
    assert moe_parallel(minimax, 8, 1, 1, "bf16").moe_tp == 8  # no blocks to respect
    with pytest.raises(ConfigError, match="not a multiple of the fp8_block"):
        moe_parallel(minimax, 8, 1, 1, "fp8_block")
