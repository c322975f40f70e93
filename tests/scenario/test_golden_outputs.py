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
    "v1_prefix_aware": "5da65c0c91e37e0ac83f4960297e2cb9835b0659f47f0b6e91b2279376bcd551",
    "v1_async_sticky": "5b76b17983cf2d6ea31bbe1f38ea045f1e43457a7963d9d9a83109404f710c14",
    "v1_preempting": "bcf2855b16a6eba610b9fca930f1ebe9c9f1d91c058463897b024a0ec0cb4534",
    "sarathi_pp2": "ebbe993b0275a302f2525a457784a1919851bd63f0cb093fb179e29f33f1c28d",
    "vllm_v0_random": "13138f6ed0f5c37e662fd9674fd61f08b413913d45fba6408a05ac012b5b222d",
    "orca": "25a8e8797f92c50741cc88077285c939eefd8f09dfa2675dd646fbb46c347f61",
    "faster_transformer": "7ac8e594125a3b0f1987364ffaa6ed443a13a8a2e3dea4ea50eff824f1787fb1",
    "lightllm_least_waiting": "cfef960a7a2d05ba8798ffa0d515d3ee3e3ccecb2b7c9562742adbe6c187feb9",
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
