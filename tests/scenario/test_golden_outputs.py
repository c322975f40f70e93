"""Outputs of a few small reference configs are byte-identical to recorded ones.

Each case runs the CLI into a fresh run directory and compares the SHA-256 of
`request_metrics.csv` (every per-request timestamp and counter, printed with full precision)
with the value recorded when the case was added. A restructuring of the code must leave these
unchanged; a change of the model's semantics changes them on purpose, and then the new value
is recorded here in the same commit, with the reason in its message.

Record new values: VIDUR_FAST_RECORD_GOLDEN=1 pytest tests/scenario/test_golden_outputs.py -s
"""

import hashlib
import os
from pathlib import Path

import pytest

from tests.conftest import REPO
from tests.helpers.cli_args import FAST_TIMING_ARGS
from vidur_fast.commands.main import main

MULTITURN = str(REPO / "traces" / "examples" / "multiturn_shared_prefix.csv")
POISSON = str(REPO / "traces" / "examples" / "poisson_uniform_200.csv")

SYNTH = [
    "workload:synthetic",
    "--workload.num-requests",
    "300",
    "workload.lengths:uniform",
    "--workload.lengths.min-tokens",
    "32",
    "--workload.lengths.max-tokens",
    "3000",
    "workload.intervals:poisson",
    "--workload.intervals.qps",
    "30",
]

# name -> CLI arguments (global flags first, then the subcommands)
CASES = {
    # the measured default timing source, prefix caching and the cache-aware router on a trace
    # whose sessions share prefixes
    "v1_prefix_aware": [
        "--cluster.num-replicas",
        "2",
        "router:prefix_aware",
        "workload:trace",
        "--workload.path",
        MULTITURN,
    ],
    "v1_async_sticky": [
        *FAST_TIMING_ARGS,
        "--cluster.num-replicas",
        "3",
        "scheduler:vllm_v1",
        "--scheduler.async-scheduling",
        "--scheduler.num-blocks",
        "400",
        "router:sticky",
        "workload:trace",
        "--workload.path",
        MULTITURN,
    ],
    "v1_preempting": [
        *FAST_TIMING_ARGS,
        "--cluster.num-replicas",
        "2",
        "scheduler:vllm_v1",
        "--scheduler.num-blocks",
        "260",
        "--scheduler.max-num-seqs",
        "32",
        "router:lop",
        *SYNTH,
    ],
    "sarathi_pp2": [
        *FAST_TIMING_ARGS,
        "--cluster.tp",
        "2",
        "--cluster.pp",
        "2",
        "--cluster.num-replicas",
        "2",
        "scheduler:sarathi",
        "--scheduler.chunk-size",
        "256",
        "router:lor",
        *SYNTH,
    ],
    "vllm_v0_random": [
        *FAST_TIMING_ARGS,
        "--cluster.num-replicas",
        "2",
        "--seed",
        "5",
        "scheduler:vllm",
        "--scheduler.num-blocks",
        "500",
        "router:random",
        *SYNTH,
    ],
    "orca": [*FAST_TIMING_ARGS, "scheduler:orca", "workload:trace", "--workload.path", POISSON],
    "faster_transformer": [
        *FAST_TIMING_ARGS,
        "scheduler:faster_transformer",
        "workload:trace",
        "--workload.path",
        POISSON,
    ],
    "lightllm_least_waiting": [
        *FAST_TIMING_ARGS,
        "--cluster.num-replicas",
        "2",
        "scheduler:lightllm",
        "router:least_waiting",
        *SYNTH,
    ],
}

GOLDEN = {
    "v1_prefix_aware": "bfa93adf98d0338c20d123da280c0846ac141517fb92789b02f6f3b284d2d5b4",
    "v1_async_sticky": "bf83f51bae7fe2fa7895ba27eba86ea20119ce5c5c87e813c039c9e3db46f9a5",
    "v1_preempting": "59f64c547fde7f172629261f4b96366781020c40209b874fdf48b4c317983612",
    "sarathi_pp2": "d6304e96a16f8e9b52c78392ad5ab188467f261821362daa8440be39a19c6326",
    "vllm_v0_random": "5db7de09262ad53020b59dd9396d8e5265a6f567b938142bb2d8d6858dcbc3df",
    "orca": "ca8a293ca18acc7c071255abef304ea2067c9c9ee3e0f928ce66f7943c912dfe",
    "faster_transformer": "6a01e444380f42f5bb4c47a5888052623897ab3f14ddb6e3535127c2afc5eaf5",
    "lightllm_least_waiting": "ee5fc839bdda756738275d9b8ace2c36cde1d29fd7d80e0a03af5454d7f5e91e",
}


def run_case(args: list[str], out: Path) -> str:
    rc = main(["--quiet", "--output.dir", str(out), *args])
    assert rc == 0
    return hashlib.sha256((out / "request_metrics.csv").read_bytes()).hexdigest()


@pytest.mark.parametrize("name", list(CASES))
def test_request_metrics_unchanged(name, tmp_path):
    digest = run_case(CASES[name], tmp_path / "run")
    if os.environ.get("VIDUR_FAST_RECORD_GOLDEN"):
        print(f'\n    "{name}": "{digest}",')
        return
    assert digest == GOLDEN[name], f"{name}: request_metrics.csv changed"
