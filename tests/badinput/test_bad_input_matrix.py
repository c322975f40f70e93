"""Bad input through the real CLI: one `error:` line naming the field or row, exit code 2, and
no run directory (nor its parents) left behind. Every case runs in-process through
`vidur_fast.commands.main.main`; a few also run as a subprocess to prove no traceback reaches
the user.
"""

import gzip
import json
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.helpers.cli_args import FAST_TIMING_ARGS
from vidur_fast.commands.main import main
from vidur_fast.config.predictor import PredictorConfig
from vidur_fast.timing.build import build_timing
from vidur_fast.timing.sources.vidur import MLP_OPS

# roofline timing with small polynomial grids: a cache miss costs well under a second
FAST = ["--quiet", *FAST_TIMING_ARGS, "--predictor.regressor", "polynomial"]
LLAMA3_8B = "meta-llama/Meta-Llama-3-8B"
MLP_HEADER = (
    "n_head,n_kv_head,n_embd,n_expanded_embd,use_gated_mlp,num_tensor_parallel_workers,"
    "num_tokens," + ",".join(f"time_stats.{op}.median" for op in MLP_OPS)
)
MLP_ROW = "32,8,4096,14336,True,{tp},{n}," + ",".join(["0.01"] * 9)
ATTN_HEADER = (
    "n_embd,n_q_head,n_kv_head,block_size,num_tensor_parallel_workers,batch_size,"
    "prefill_chunk_size,kv_cache_size,time_stats.attn_prefill.median,"
    "time_stats.attn_decode.median"
)


# ---- input files ----


def _write(path: Path, text: str) -> str:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return str(path)


def _trace(d: Path, name: str, rows: list[str], header: str | None = None) -> str:
    head = header or "arrived_at,num_prefill_tokens,num_decode_tokens"
    return _write(d / name, "\n".join([head, *rows]) + "\n")


def _profile_dir(d: Path, mlp: str | None = "ok", attention: bool = True, tp: int = 1) -> str:
    """A tiny Vidur-layout profile dir for Llama-3-8B on h100 (just enough to be parsed)."""
    root = d / "prof"
    model_dir = root / "compute" / "h100" / LLAMA3_8B
    model_dir.mkdir(parents=True, exist_ok=True)
    if mlp == "ok":
        rows = [MLP_ROW.format(tp=tp, n=n) for n in (1, 64, 512)]
        _write(model_dir / "mlp.csv", "\n".join([MLP_HEADER, *rows]) + "\n")
    elif mlp == "no_column":
        header = MLP_HEADER.replace("time_stats.mlp_act.median,", "")
        row = MLP_ROW.format(tp=tp, n=1).rsplit(",", 1)[0]
        _write(model_dir / "mlp.csv", f"{header}\n{row}\n")
    elif mlp == "garbage":
        (model_dir / "mlp.csv").write_bytes(gzip.compress(b"\x00\xff" * 64)[:40])
    if attention:
        _write(model_dir / "attention.csv", ATTN_HEADER + "\n4096,32,8,16,1,1,0,128,0.1,0.1\n")
    return str(root)


def _hf_config(d: Path, content) -> str:
    text = content if isinstance(content, str) else json.dumps(content)
    return _write(d / "hf" / "config.json", text)


def _llama_hf(**override) -> dict:
    cfg = {
        "architectures": ["LlamaForCausalLM"],
        "hidden_size": 4096,
        "num_attention_heads": 32,
        "num_key_value_heads": 8,
        "num_hidden_layers": 32,
        "intermediate_size": 14336,
        "max_position_embeddings": 8192,
        "rms_norm_eps": 1e-5,
    }
    cfg.update(override)
    return cfg


# ---- the matrix ----


@dataclass(frozen=True)
class Case:
    id: str
    args: Callable[[Path], list[str]]
    needle: str  # must appear in the error line (the field, file or row)


def _c(id_: str, args, needle: str) -> Case:
    return Case(id_, args if callable(args) else (lambda d, a=args: list(a)), needle)


def _synthetic(*extra: str) -> list[str]:
    return ["workload:synthetic", *extra]


def _trace_args(path: str, *extra: str) -> list[str]:
    return ["workload:trace", "--workload.path", path, *extra]


def _vidur_src(root: str, *extra: str) -> list[str]:
    return ["--predictor.source", "vidur", "--predictor.profile-dir", root, *extra]


CONFIG_CASES = [
    _c("wrong_type_int", ["--cluster.tp", "abc"], "cluster.tp"),
    _c("wrong_type_float", ["--cluster.memory-margin-fraction", "lots"], "memory-margin"),
    _c("wrong_type_bool", ["--output.overwrite", "maybe"], "maybe"),
    _c("unknown_flag", ["--cluster.gpus", "8"], "--cluster.gpus"),
    _c(
        "unknown_scheduler_param",
        ["scheduler:sarathi", "--scheduler.max-num-batched-tokens", "64"],
        "max-num-batched-tokens",
    ),
    _c("unknown_scheduler", ["scheduler:lightspeed"], "scheduler:lightspeed"),
    _c("unknown_model", ["--cluster.model", "no-such-model"], "cluster.model"),
    _c("unknown_device", ["--cluster.device", "tpu-v5"], "cluster.device"),
    _c("unknown_node", ["--cluster.node", "moon_dgx"], "cluster.node"),
    _c("tp_not_dividing_heads", ["--cluster.tp", "3"], "cluster.tp"),
    _c("pp_not_dividing_layers", ["scheduler:sarathi", "--cluster.pp", "5"], "cluster.pp"),
    _c("pp_with_vllm_v1", ["--cluster.pp", "2"], "cluster.pp"),
    _c("tp_zero", ["--cluster.tp", "0"], "cluster.tp"),
    _c("replicas_zero", ["--cluster.num-replicas", "0"], "cluster.num_replicas"),
    _c("replicas_negative", ["--cluster.num-replicas", "-2"], "cluster.num_replicas"),
    _c("replicas_huge", ["--cluster.num-replicas", "1000000000"], "cluster.num_replicas"),
    _c("margin_nan", ["--cluster.memory-margin-fraction", "nan"], "memory_margin_fraction"),
    _c("margin_one", ["--cluster.memory-margin-fraction", "1.0"], "memory_margin_fraction"),
    _c("chunk_zero", ["scheduler:sarathi", "--scheduler.chunk-size", "0"], "chunk_size"),
    _c(
        "batch_cap_zero", ["scheduler:sarathi", "--scheduler.batch-size-cap", "0"], "batch_size_cap"
    ),
    _c(
        "batch_cap_huge",
        ["scheduler:orca", "--scheduler.batch-size-cap", "10000000000"],
        "batch_size_cap",
    ),
    _c("max_num_seqs_zero", ["scheduler:vllm_v1", "--scheduler.max-num-seqs", "0"], "max_num_seqs"),
    _c(
        "token_budget_zero",
        ["scheduler:vllm_v1", "--scheduler.max-num-batched-tokens", "0"],
        "max_num_batched_tokens",
    ),
    _c("block_size_zero", ["scheduler:vllm_v1", "--scheduler.block-size", "0"], "block_size"),
    _c("num_blocks_one", ["scheduler:vllm_v1", "--scheduler.num-blocks", "1"], "num_blocks"),
    _c(
        "watermark_nan",
        ["scheduler:vllm", "--scheduler.watermark-blocks-fraction", "nan"],
        "watermark",
    ),
    _c(
        "orca_reservation_exceeds_kv",
        ["scheduler:orca", "--scheduler.num-blocks", "4"],
        "max_tokens",
    ),
    _c(
        "qps_zero", _synthetic("workload.intervals:poisson", "--workload.intervals.qps", "0"), "qps"
    ),
    _c("qps_nan", _synthetic("workload.intervals:gamma", "--workload.intervals.qps", "nan"), "qps"),
    _c(
        "qps_inf",
        _synthetic("workload.intervals:uniform", "--workload.intervals.qps", "inf"),
        "qps",
    ),
    _c("num_requests_zero", _synthetic("--workload.num-requests", "0"), "num_requests"),
    _c("num_requests_huge", _synthetic("--workload.num-requests", "1000000000000"), "num_requests"),
    _c(
        "prefill_negative",
        _synthetic("workload.lengths:fixed", "--workload.lengths.prefill-tokens", "-5"),
        "prefill_tokens",
    ),
    _c(
        "prefill_beyond_int64",
        _synthetic("workload.lengths:fixed", "--workload.lengths.prefill-tokens", "1" + "0" * 20),
        "prefill_tokens",
    ),
    _c(
        "uniform_min_above_max",
        _synthetic(
            "workload.lengths:uniform",
            "--workload.lengths.min-tokens",
            "500",
            "--workload.lengths.max-tokens",
            "100",
        ),  # fmt: skip
        "max_tokens",
    ),
    _c("time_limit_nan", ["--time-limit-s", "nan"], "time_limit_s"),
    _c("time_limit_negative", ["--time-limit-s", "-1"], "time_limit_s"),
    _c("seed_negative", ["--seed", "-1"], "seed"),
    _c("predictor_granularity_zero", ["--predictor.kv-granularity", "0"], "kv_granularity"),
    _c("predictor_grid_too_big", ["--predictor.max-tokens", "1000000000"], "predictor."),
    _c("predictor_overhead_nan", ["--predictor.cpu-overhead-ms", "nan"], "cpu_overhead_ms"),
    _c("predictor_sampler_negative", ["--predictor.sampler-ms", "-1"], "sampler_ms"),
]

TRACE_CASES = [
    _c("trace_missing_file", lambda d: _trace_args(str(d / "nope.csv")), "nope.csv"),
    _c(
        "trace_missing_column",
        lambda d: _trace_args(_trace(d, "t.csv", ["0,10"], "arrived_at,num_prefill_tokens")),
        "num_decode_tokens",
    ),
    _c(
        "trace_wrong_type",
        lambda d: _trace_args(_trace(d, "t.csv", ["0,10,5", "1,ten,5"])),
        "row 2",
    ),
    _c("trace_nan", lambda d: _trace_args(_trace(d, "t.csv", ["0,10,5", "1,NaN,5"])), "row 2"),
    _c("trace_negative", lambda d: _trace_args(_trace(d, "t.csv", ["0,10,5", "1,7,-3"])), "row 2"),
    _c("trace_zero_tokens", lambda d: _trace_args(_trace(d, "t.csv", ["0,0,5"])), "row 1"),
    _c(
        "trace_unsorted_arrivals",
        lambda d: _trace_args(_trace(d, "t.csv", ["0,10,5", "2,10,5", "1,10,5"])),
        "row 3",
    ),
    _c("trace_negative_arrival", lambda d: _trace_args(_trace(d, "t.csv", ["-1,10,5"])), "row 1"),
    _c("trace_header_only", lambda d: _trace_args(_trace(d, "t.csv", [])), "no data rows"),
    _c("trace_empty_file", lambda d: _trace_args(_write(d / "t.csv", "")), "empty"),
    _c("trace_huge_tokens", lambda d: _trace_args(_trace(d, "t.csv", ["0,1e30,5"])), "row 1"),
    _c("trace_inf_arrival", lambda d: _trace_args(_trace(d, "t.csv", ["inf,10,5"])), "row 1"),
    _c(
        "trace_too_few_rows",
        lambda d: _trace_args(_trace(d, "t.csv", ["0,10,5"]), "--workload.num-requests", "5"),
        "num_requests",
    ),
    _c(
        "trace_binary_garbage",
        lambda d: _trace_args(_write(d / "t.csv", "\x00\x01\x02garbage\x00\n\x00")),
        "t.csv",
    ),
    _c(
        "mooncake_malformed_hash_list",
        lambda d: _trace_args(
            _write(
                d / "t.jsonl",
                '{"timestamp": 0, "input_length": 600, "output_length": 5, "hash_ids": [1, 2]}\n'
                '{"timestamp": 5, "input_length": 600, "output_length": 5, "hash_ids": [1, 2,}\n',
            )
        ),
        "row 2",
    ),
    _c(
        "mooncake_duplicate_key",
        lambda d: _trace_args(
            _write(
                d / "t.jsonl",
                '{"timestamp": 0, "input_length": 600, "output_length": 5}\n'
                '{"timestamp": 5, "input_length": 600, "output_length": 5, "input_length": 9}\n',
            )
        ),
        "row 2",
    ),
    _c(
        "mooncake_not_object",
        lambda d: _trace_args(_write(d / "t.jsonl", "[1, 2, 3]\n")),
        "row 1",
    ),
    _c(
        "azure_bad_timestamp",
        lambda d: _trace_args(
            _trace(d, "az.csv", ["yesterday,10,5"], "TIMESTAMP,ContextTokens,GeneratedTokens")
        ),
        "TIMESTAMP",
    ),
    _c(
        "trace_scale_zero",
        lambda d: _trace_args(_trace(d, "t.csv", ["0,10,5"]), "--workload.time-scale", "0"),
        "time_scale",
    ),
    _c(
        "trace_clip_error",
        lambda d: _trace_args(
            _trace(d, "t.csv", ["0,10,5", "1,900,200"]),
            "--workload.max-tokens",
            "1000",
            "--workload.clip",
            "error",
        ),
        "row 2",
    ),
    _c(
        "trace_duplicate_column",
        lambda d: _trace_args(
            _trace(
                d,
                "t.csv",
                ["0,10,5,99"],
                "arrived_at,num_prefill_tokens,num_decode_tokens,num_prefill_tokens",
            )  # fmt: skip
        ),
        "'num_prefill_tokens' appears twice",
    ),
    _c(
        "trace_extra_field_first_row",
        lambda d: _trace_args(_trace(d, "t.csv", ["0,10,5,7", "1,20,6"])),
        "row 1",
    ),
    _c(
        "trace_extra_field_later_row",
        lambda d: _trace_args(_trace(d, "t.csv", ["0,10,5", "1,20,6", "2,30,7,9"])),
        "row 3",
    ),
    _c("trace_is_a_directory", lambda d: _trace_args(str(d)), "is a directory"),
    _c(
        "prefix_aware_without_hashes",
        lambda d: [
            "scheduler:vllm_v1",
            "router:prefix_aware",
            *_trace_args(_trace(d, "t.csv", ["0,10,5", "1,20,6"])),
        ],
        "router: prefix_aware needs prefix block hashes",
    ),
    _c(
        "strict_request_never_fits",
        lambda d: ["--strict", *_trace_args(_trace(d, "t.csv", ["0,10,5", "1,20000,5"]))],
        "request row 2",
    ),
]

PROFILE_CASES = [
    _c("vidur_without_profile_dir", ["--predictor.source", "vidur"], "profile_dir"),
    _c("vidur_profile_dir_missing", lambda d: _vidur_src(str(d / "none")), "none"),
    _c(
        "vidur_device_without_data",
        lambda d: _vidur_src(_profile_dir(d), "--cluster.device", "a100"),
        "compute/a100",
    ),
    _c(
        "vidur_model_without_data",
        lambda d: _vidur_src(_profile_dir(d), "--cluster.model", "meta-llama/Llama-2-7b-hf"),
        "Llama-2-7b-hf",
    ),
    _c("vidur_missing_mlp_csv", lambda d: _vidur_src(_profile_dir(d, mlp=None)), "mlp.csv"),
    _c(
        "vidur_mlp_missing_column",
        lambda d: _vidur_src(_profile_dir(d, mlp="no_column")),
        "mlp_act",
    ),
    _c("vidur_mlp_corrupt", lambda d: _vidur_src(_profile_dir(d, mlp="garbage")), "mlp.csv"),
    _c("vidur_tp_without_data", lambda d: _vidur_src(_profile_dir(d), "--cluster.tp", "2"), "TP"),
    _c(
        "vidur_missing_attention_csv",
        lambda d: _vidur_src(_profile_dir(d, attention=False)),
        "attention.csv",
    ),
    _c(
        "aiconfigurator_device_without_data",
        ["--predictor.source", "aiconfigurator", "--cluster.device", "a40"],
        "a40",
    ),
    _c(
        "aiconfigurator_tp_without_data",
        ["--predictor.source", "aiconfigurator", "--cluster.tp", "16"],
        "TP 16",
    ),
    _c("roofline_fp8_on_a100", ["--predictor.precision", "fp8", "--cluster.device", "a100"], "fp8"),
    _c("hf_config_missing", lambda d: ["--cluster.model", str(d / "absent.json")], "absent.json"),
    _c(
        "hf_config_not_json", lambda d: ["--cluster.model", _hf_config(d, "{oops")], "cluster.model"
    ),
    _c("hf_config_is_list", lambda d: ["--cluster.model", _hf_config(d, [1, 2])], "cluster.model"),
    _c(
        "hf_config_missing_field",
        lambda d: ["--cluster.model", _hf_config(d, {"hidden_size": 4096})],
        "num_attention_heads",
    ),
    _c(
        "hf_config_zero_heads",
        lambda d: ["--cluster.model", _hf_config(d, _llama_hf(num_attention_heads=0))],
        "cluster.model",
    ),
    _c(
        "hf_config_kv_heads_not_dividing",
        lambda d: ["--cluster.model", _hf_config(d, _llama_hf(num_key_value_heads=5))],
        "32 query heads are not a multiple of its 5 KV heads",
    ),
    _c(
        "hf_config_more_kv_than_q_heads",
        lambda d: ["--cluster.model", _hf_config(d, _llama_hf(num_key_value_heads=64))],
        "not a multiple of its 64 KV heads",
    ),
    _c(
        "hf_config_wrong_type",
        lambda d: ["--cluster.model", _hf_config(d, _llama_hf(num_hidden_layers="many"))],
        "cluster.model",
    ),
]


def _existing_run(d: Path) -> list[str]:
    (d / "existing").mkdir()
    return ["--output.dir", str(d / "existing")]


def _file_as_parent(d: Path) -> list[str]:
    return ["--output.dir", _write(d / "plainfile", "x") + "/run"]


def _user_files(d: Path) -> list[str]:
    _write(d / "mine" / "notes.txt", "precious")
    return ["--output.dir", str(d / "mine"), "--output.overwrite"]


OUTPUT_AND_CACHE_CASES = [
    _c("output_dir_exists", _existing_run, "already exists"),
    _c("output_overwrite_user_files", _user_files, "not a vidur-fast run directory"),
    _c("output_dir_empty_string", ["--output.dir", ""], "output.dir: empty path"),
    _c("output_parent_is_a_file", _file_as_parent, "output.dir"),
    _c("output_unwritable", ["--output.dir", "/proc/vidur-fast-run"], "output.dir"),
    _c(
        "cache_required_but_empty",
        lambda d: ["--predictor.cache-mode", "require", "--predictor.cache-dir", str(d / "c")],
        "cache_mode",
    ),
    _c("cache_mode_unknown", ["--predictor.cache-mode", "sometimes"], "cache-mode"),
]

CASES = CONFIG_CASES + TRACE_CASES + PROFILE_CASES + OUTPUT_AND_CACHE_CASES


def run_cli(argv: list[str], capsys) -> tuple[int, str]:
    try:
        code = main(argv)
    except SystemExit as exc:
        code = exc.code
    return code, capsys.readouterr().err


def _assert_one_error_line(code: int, err: str, needle: str) -> None:
    lines = [x for x in err.splitlines() if x.strip()]
    assert code == 2, err
    assert len(lines) == 1, err
    assert lines[0].startswith("error: "), err
    assert needle in lines[0], lines[0]
    assert "Traceback" not in err


@pytest.fixture
def dirs(tmp_path, monkeypatch):
    """(inputs dir, output root) with the grid cache kept inside tmp_path."""
    monkeypatch.setenv("VIDUR_FAST_CACHE", str(tmp_path / "cache"))
    inputs = tmp_path / "in"
    inputs.mkdir()
    return inputs, tmp_path / "out"


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_bad_input_one_line_exit_2_no_run_dir(case, dirs, capsys):
    inputs, out_root = dirs
    run_dir = out_root / "run"
    args = case.args(inputs)
    out_args = [] if "--output.dir" in args else ["--output.dir", str(run_dir)]
    code, err = run_cli([*out_args, *FAST, *args], capsys)
    _assert_one_error_line(code, err, case.needle)
    assert not out_root.exists(), "a run directory (or its parent) was left behind"
    if case.id == "output_overwrite_user_files":
        assert (inputs / "mine" / "notes.txt").read_text() == "precious"
    leftovers = [p.name for p in inputs.rglob("*") if p.name.startswith(".") and "tmp" in p.name]
    assert not leftovers


def test_matrix_size(request):
    # the matrix must keep covering every input family
    ids = [c.id for c in CASES]
    assert len(ids) == len(set(ids))
    assert len(CASES) >= 40
    tr = request.config.pluginmanager.get_plugin("terminalreporter")
    capture = request.config.pluginmanager.get_plugin("capturemanager")
    if tr is not None and capture is not None:
        with capture.global_and_fixture_disabled():
            tr.write_line(
                f"\nbad-input matrix: {len(CASES)} CLI cases (config {len(CONFIG_CASES)}, "
                f"trace {len(TRACE_CASES)}, profile/model {len(PROFILE_CASES)}, "
                f"output/cache {len(OUTPUT_AND_CACHE_CASES)}) + {len(CORRUPTIONS_REQUIRE)} "
                f"corrupt-cache + {len(SUBPROCESS_IDS)} subprocess runs"
            )
    for family in (CONFIG_CASES, TRACE_CASES, PROFILE_CASES, OUTPUT_AND_CACHE_CASES):
        assert len(family) >= 4


# ---- corrupt cache entry with cache_mode=require (needs a real entry first) ----


@pytest.fixture
def built_cache(tmp_path):
    cache = tmp_path / "cache"
    cfg = PredictorConfig(
        source="roofline",
        regressor="polynomial",
        max_tokens=8192,
        max_prefill_chunk=4096,
        max_batch_size=64,
        cache_dir=str(cache),
    )
    meta = build_timing(LLAMA3_8B, "h100", None, 1, 1, cfg).meta
    return cache, Path(meta["cache_path"])


CORRUPTIONS_REQUIRE = ("npz_truncated", "npz_bitflip", "sidecar_garbage")


@pytest.mark.parametrize("what", CORRUPTIONS_REQUIRE)
def test_corrupt_cache_with_require_is_one_line(what, built_cache, tmp_path, capsys):
    cache, npz = built_cache
    side = npz.with_suffix(".json")
    if what == "npz_truncated":
        npz.write_bytes(npz.read_bytes()[:100])
    elif what == "npz_bitflip":
        raw = bytearray(npz.read_bytes())
        raw[len(raw) // 2] ^= 0xFF
        npz.write_bytes(bytes(raw))
    else:
        side.write_text("{not json")
    run_dir = tmp_path / "out" / "run"
    argv = ["--output.dir", str(run_dir), *FAST]
    argv += ["--predictor.cache-dir", str(cache), "--predictor.cache-mode", "require"]
    code, err = run_cli(argv, capsys)
    _assert_one_error_line(code, err, "predictor.cache_mode")
    assert not (tmp_path / "out").exists()


# ---- a few through a real process: no traceback ever reaches the user ----

SUBPROCESS_IDS = (
    "unknown_scheduler_param",
    "wrong_type_int",
    "trace_unsorted_arrivals",
    "vidur_mlp_corrupt",
    "hf_config_is_list",
    "output_unwritable",
    "output_overwrite_user_files",
    "strict_request_never_fits",
)


@pytest.mark.parametrize("case_id", SUBPROCESS_IDS)
def test_bad_input_in_a_subprocess(case_id, dirs):
    inputs, out_root = dirs
    case = next(c for c in CASES if c.id == case_id)
    args = case.args(inputs)
    out_args = [] if "--output.dir" in args else ["--output.dir", str(out_root / "run")]
    res = subprocess.run(
        [sys.executable, "-m", "vidur_fast.commands.main", *out_args, *FAST, *args],
        capture_output=True,
        text=True,
        timeout=300,
    )
    _assert_one_error_line(res.returncode, res.stderr, case.needle)
    assert res.stdout == ""
    assert not out_root.exists()


# ---- cluster.pools (a config file): one line naming the pool's field ----


def _pools_file(d, pools, **cluster) -> str:
    path = d / "pools.json"
    path.write_text(json.dumps({"cluster": {"pools": pools, **cluster}}))
    return str(path)


POOL_CASES = {
    "zero_replicas": (
        [{"device": "h100", "num_replicas": 2}, {"device": "a100", "num_replicas": 0}],
        {},
        [],
        "cluster.pools[1].num_replicas",
    ),
    "unknown_role": ([{"device": "h100", "role": "both"}], {}, [], "cluster.pools[0].role"),
    "prefill_without_decode": (
        [{"device": "h100", "role": "prefill"}],
        {},
        [],
        "cluster.pools: a disaggregated cluster needs a decode pool",
    ),
    "unknown_device": ([{"device": "h100"}, {"device": "z900"}], {}, [], "cluster.pools[1]"),
    "tp_not_dividing_heads": (
        [{"device": "h100"}, {"device": "a100", "tp": 3}],
        {},
        [],
        "cluster.pools[1]",
    ),
    "cluster_field_with_pools": ([{"device": "h100"}], {"tp": 2}, [], "cluster.tp"),
    "pool_scheduler_other_type": (
        [{"device": "h100", "scheduler": {"type": "sarathi"}}],
        {},
        [],
        "cluster.pools[0].scheduler: must be the cluster's scheduler type",
    ),
    "pool_scheduler_fixed_field": (
        [{"device": "h100", "scheduler": {"type": "vllm_v1", "block_size": 32}}],
        {},
        [],
        "cluster.pools[0].scheduler.block_size: must equal scheduler.block_size",
    ),
    "pool_scheduler_bad_value": (
        [{"device": "h100", "scheduler": {"type": "vllm_v1", "max_num_seqs": 0}}],
        {},
        [],
        "cluster.pools[0]",
    ),
    "pools_not_a_list": ("h100", {}, [], "cluster.pools: must be a list"),
    "pool_unknown_field": ([{"device": "h100", "gpus": 2}], {}, [], "cluster.pools[0].gpus"),
    # a pool's own expert split: only for a MoE model, and formable on the pool's GPUs
    "pool_attention_dp_dense_model": (
        [{"device": "h100", "attention_dp": 2}],
        {},
        [],
        "cluster.pools[0].attention_dp: meta-llama/Meta-Llama-3-8B has no MoE",
    ),
    "pool_moe_ep_zero": (
        [{"device": "h100", "tp": 8, "moe_ep": 0}],
        {"model": "Qwen/Qwen3-235B-A22B-FP8"},
        [],
        "cluster.pools[0].moe_ep/attention_dp: must be >= 1",
    ),
    # the profile directory has TP 1 rows only: pool 1 (TP 2) has no timing data
    "pool_tp_without_data": (
        [{"device": "h100"}, {"device": "h100", "tp": 2}],
        {},
        ["vidur"],
        "cluster.pools[1]",
    ),
}


@pytest.mark.parametrize("case", list(POOL_CASES))
def test_bad_pools_one_line_exit_2(case, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("VIDUR_FAST_CACHE", str(tmp_path / "cache"))
    pools, cluster, extra, needle = POOL_CASES[case]
    inputs = tmp_path / "in"
    inputs.mkdir()
    args = ["--config", _pools_file(inputs, pools, **cluster)]
    if extra:
        args += _vidur_src(_profile_dir(inputs))
    out_root = tmp_path / "out"
    code, err = run_cli(["--output.dir", str(out_root / "run"), *FAST, *args], capsys)
    _assert_one_error_line(code, err, needle)
    assert not out_root.exists()
