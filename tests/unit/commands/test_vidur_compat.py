"""`vidur-fast vidur-compat` runs Vidur's own command lines, main and canary, unchanged: the
canary guide's command, every modelled router, -h, the bare command and Vidur's README
command, each in a directory without Vidur's profiling data."""

import json
import shutil
from pathlib import Path

import pandas as pd
import pytest

from tests.conftest import REPO
from vidur_fast.commands.main import main
from vidur_fast.config.vidur_flags import (
    CANARY,
    MAIN,
    ROUTERS,
    read_vidur_command,
)

MULTITURN = REPO / "traces" / "examples" / "multiturn_shared_prefix.csv"
CANARY_TRACE = "./data/processed_traces/mooncake_conversation_trace.csv"
SPLITWISE = "./data/processed_traces/splitwise_conv.csv"

# the command Vidur canary's how-to-run guide opens with, verbatim
GUIDE = (
    "--time_limit 10800 --replica_config_model_name meta-llama/Meta-Llama-3-8B "
    "--replica_config_tensor_parallel_size 1 --replica_config_num_pipeline_stages 1 "
    "--replica_config_device h100 --replica_config_network_device h100_dgx "
    "--cluster_config_num_replicas 8 "
    "--request_generator_config_type synthetic "
    "--synthetic_request_generator_config_num_requests 128 "
    "--length_generator_config_type trace "
    f"--trace_request_length_generator_config_trace_file {CANARY_TRACE} "
    "--interval_generator_config_type poisson --poisson_request_interval_generator_config_qps 8.0 "
    "--global_scheduler_config_type round_robin --replica_scheduler_config_type vllm_v1 "
    "--vllm_v1_scheduler_config_chunk_size 512 --vllm_v1_scheduler_config_batch_size_cap 512 "
    "--cache_config_enable_prefix_caching"
).split()

# Vidur main's README command (Sarathi on Llama-3-8B, A100, splitwise lengths), verbatim
README_SARATHI = (
    "--replica_config_device a100 --replica_config_model_name meta-llama/Meta-Llama-3-8B "
    "--cluster_config_num_replicas 1 --replica_config_tensor_parallel_size 1 "
    "--replica_config_num_pipeline_stages 1 --request_generator_config_type synthetic "
    "--synthetic_request_generator_config_num_requests 512 --length_generator_config_type trace "
    "--trace_request_length_generator_config_max_tokens 16384 "
    f"--trace_request_length_generator_config_trace_file {SPLITWISE} "
    "--interval_generator_config_type poisson --poisson_request_interval_generator_config_qps 6.45 "
    "--replica_scheduler_config_type sarathi --sarathi_scheduler_config_batch_size_cap 512 "
    "--sarathi_scheduler_config_chunk_size 512 "
    "--random_forrest_execution_time_predictor_config_prediction_max_prefill_chunk_size 16384 "
    "--random_forrest_execution_time_predictor_config_prediction_max_batch_size 512 "
    "--random_forrest_execution_time_predictor_config_prediction_max_tokens_per_request 16384"
).split()


@pytest.fixture
def workdir(tmp_path, monkeypatch):
    """A working directory with Vidur's trace paths filled by small files, and no
    data/profiling."""
    traces = tmp_path / "data" / "processed_traces"
    traces.mkdir(parents=True)
    shutil.copy(MULTITURN, traces / "mooncake_conversation_trace.csv")
    lines = ["num_prefill_tokens,num_decode_tokens"]
    lines += [f"{300 + 37 * (i % 50)},{20 + 7 * (i % 13)}" for i in range(200)]
    (traces / "splitwise_conv.csv").write_text("\n".join(lines) + "\n")
    monkeypatch.chdir(tmp_path)
    return tmp_path


def run(argv, capsys) -> tuple[int, str, str]:
    try:
        code = main(["vidur-compat", *argv])
    except SystemExit as exc:
        code = exc.code
    out = capsys.readouterr()
    return code, out.out, out.err


def run_dir(out: str) -> Path:
    line = [x for x in out.splitlines() if x.startswith("run directory: ")][-1]
    return Path(line.removeprefix("run directory: "))


def test_the_canary_guide_command_runs_and_hits_the_prefix_cache(workdir, capsys):
    code, out, err = run(GUIDE, capsys)
    assert code == 0, err
    path = run_dir(out)
    assert path.parent == Path("simulator_output")
    summary = json.loads((path / "summary.json").read_text())
    assert summary["num_completed"] == 128
    assert summary["prefix_cache_hit_rate"] > 0.1
    assert "canary" in err and "embedded" in err


@pytest.mark.parametrize(
    "line,router", [(line, r) for line in (MAIN, CANARY) for r in ROUTERS[line]]
)
def test_every_modelled_router_runs(workdir, capsys, line, router):
    args = [
        "--synthetic_request_generator_config_num_requests",
        "40",
        "--cluster_config_num_replicas",
        "2",
        "--length_generator_config_type",
        "trace",
        "--trace_request_length_generator_config_trace_file",
        CANARY_TRACE,
        "--global_scheduler_config_type",
        router,
    ]
    if line == CANARY:
        args += ["--replica_scheduler_config_type", "vllm_v1"]
    assert read_vidur_command(args).line == line
    code, out, err = run(args, capsys)
    assert code == 0, err
    assert (run_dir(out) / "request_metrics.csv").is_file()


def test_help_lists_every_section_with_defaults(capsys):
    for flag in ("-h", "--help"):
        code, out, _ = run([flag], capsys)
        assert code == 0
        for needle in (
            "cluster:",
            "replica scheduler:",
            "cache (canary):",
            "--vllm_v1_scheduler_config_chunk_size",
            "--replica_config_model_name",
            "meta-llama/Llama-2-7b-hf",
            "prediction_max_tokens_per_request",
        ):
            assert needle in out, needle


def test_the_bare_command_runs_on_embedded_data(workdir, capsys):
    code, out, err = run([], capsys)
    assert code == 0, err
    assert "embedded" in err
    summary = json.loads((run_dir(out) / "summary.json").read_text())
    assert summary["num_completed"] == 128


def test_vidurs_readme_sarathi_command_runs(workdir, capsys):
    code, out, err = run(README_SARATHI, capsys)
    assert code == 0, err
    summary = json.loads((run_dir(out) / "summary.json").read_text())
    assert summary["num_completed"] == 512


@pytest.mark.parametrize(
    "args,needle",
    [
        (["--global_scheduler_config_type", "nearest"], "--global_scheduler_config_type"),
        (
            [
                "--replica_scheduler_config_type",
                "vllm_v1",
                "--global_scheduler_config_type",
                "tolerant_sticky_lop_uncached",
                "--tolerant_sticky_lop_uncached_global_scheduler_config_tolerance_factor",
                "0",
            ],
            "router.tolerance_factor",
        ),
        (
            [
                "--replica_scheduler_config_type",
                "vllm_v1",
                "--global_scheduler_config_type",
                "ranked_sticky_lop_uncached",
                "--ranked_sticky_lop_uncached_global_scheduler_config_top_k",
                "two",
            ],
            "top_k",
        ),
        (
            [
                "--replica_scheduler_config_type",
                "vllm_v1",
                "--global_scheduler_config_type",
                "sticky",
                "--length_generator_config_type",
                "trace",
                "--trace_request_length_generator_config_trace_file",
                SPLITWISE,
            ],
            "sticky",
        ),
        (
            [
                "--length_generator_config_type",
                "trace",
                "--trace_request_length_generator_config_trace_file",
                "bad_hashes.csv",
                "--replica_scheduler_config_type",
                "vllm_v1",
                "--cache_config_enable_prefix_caching",
            ],
            "block_hash_ids",
        ),
        (["--cache_config_enable_prefix_caching"], "vllm_v1"),
        (["--replica_scheduler_config_type", "vllm_v1_disk"], "disk"),
        (["--cache_config_enable_prefix_caching", "true"], "switch"),
        (["--output-dir"], "--output-dir"),
    ],
)
def test_bad_canary_input_is_one_line(workdir, capsys, args, needle):
    (workdir / "bad_hashes.csv").write_text(
        'num_prefill_tokens,num_decode_tokens,block_hash_ids,block_size\n40,5,"[1, two]",16\n'
    )
    code, out, err = run(args, capsys)
    lines = [x for x in err.splitlines() if x.strip() and not x.startswith("notice:")]
    assert code == 2, err
    assert len(lines) == 1 and lines[0].startswith("error: "), err
    assert needle in lines[0], lines[0]
    assert not (workdir / "simulator_output").exists()


def test_canary_runs_write_vidurs_plot_files(workdir, capsys):
    code, out, err = run(GUIDE, capsys)
    assert code == 0, err
    plots = run_dir(out) / "plots"
    cdf = pd.read_csv(plots / "prefill_e2e_time.csv")
    assert list(cdf.columns) == ["cdf", "prefill_e2e_time"] and len(cdf) == 101
    wise = pd.read_csv(plots / "prefill_e2e_time_replicawise.csv")
    assert sorted(wise["replica"].unique()) == list(range(8))
    cache = json.loads((plots / "replica_prefix_cache_metrics.json").read_text())
    hits = sum(v["cached_tokens_sum"] for v in cache.values())
    summary = json.loads((run_dir(out) / "summary.json").read_text())
    assert hits == summary["prefix_cache_hit_tokens"]
    header = (run_dir(out) / "request_metrics.csv").read_text().splitlines()[0].split(",")
    for name in (
        "Request Id",
        "replica",
        "request_arrived_at",
        "request_num_prefill_tokens_cached",
    ):
        assert name in header


def test_main_runs_write_vidurs_cdf_files(workdir, capsys):
    code, out, err = run(["--synthetic_request_generator_config_num_requests", "30"], capsys)
    assert code == 0, err
    cdf = pd.read_csv(run_dir(out) / "plots" / "request_scheduling_delay.csv", index_col=0)
    assert list(cdf.columns) == ["Request Id", "request_scheduling_delay", "cdf"]
    assert cdf["cdf"].is_monotonic_increasing and cdf["cdf"].iloc[-1] == 1.0
