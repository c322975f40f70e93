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
    "v1_prefix_aware": "8b90fd0336a7771d09165bfe252a3f8c35c7051881fb835d740da25f444b4da9",
    "v1_async_sticky": "026a0a6f0ee9b664acb185370defdd352135f92fa8eff99f6f5585828465a95c",
    "v1_preempting": "9728bae1657aba728455fc3670d34ba79f3c5fbec26105c7e8af170ec56e98f6",
    "sarathi_pp2": "eca027dde7d74e5cd7e5974cc4b13aa9ff216512f2a844f9f3f5262824e4edd2",
    "vllm_v0_random": "8dabb7a247627c42ad6930e134106c152c7a6be22a7afaa69306accbd4ad4672",
    "orca": "02ddab9f5710bcfe61a93bd39198460e35a3919d4232c9a2c25b54043078fb79",
    "faster_transformer": "04859c78f0f0594768a766ecaa97664ff459352078f9a41d7240cbf526451a14",
    "lightllm_least_waiting": "289a4355d130a1c0ad5d9fcc910da038c77a1d24633aa533ee517abb5c59d101",
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
