"""The config's CLI markers: no tyro on the Python path, tyro's own markers for the CLI."""

import dataclasses
import subprocess
import sys
from typing import Annotated, get_args

import tyro

from vidur_fast.config.markers import Subcommand, Suppress, tyro_type, use_tyro_markers
from vidur_fast.config.sim import ClusterConfig, SimConfig


@dataclasses.dataclass(frozen=True)
class _A:
    x: int = 0


@dataclasses.dataclass(frozen=True)
class _B:
    y: int = 0


def test_markers_become_tyros_own():
    ours = Annotated[_A, Subcommand("a")] | Annotated[_B, Subcommand("b")] | None
    want = Annotated[_A, tyro.conf.subcommand("a")] | Annotated[_B, tyro.conf.subcommand("b")]
    # (unions compare their members as a set, and tyro's markers hash by identity)
    assert list(get_args(tyro_type(ours))) == [*get_args(want), type(None)]
    assert tyro_type(Suppress[tuple[int, ...]]) == tyro.conf.Suppress[tuple[int, ...]]
    assert tyro_type(int | None) == int | None


def test_the_cli_sees_tyros_markers_in_the_config_classes():
    use_tyro_markers()
    pools = {f.name: f.type for f in dataclasses.fields(ClusterConfig)}["pools"]
    assert pools.__metadata__ == tyro.conf.Suppress[int].__metadata__
    assert ClusterConfig.__annotations__["pools"] is pools
    workload = [a.__metadata__ for a in get_args(SimConfig.__annotations__["workload"])]
    want = [(tyro.conf.subcommand(n),) for n in ("synthetic", "trace", "closed_loop")]
    assert workload == want


def test_a_run_from_python_does_not_import_tyro():
    code = "import sys, vidur_fast.api, vidur_fast.outputs.writer; print('tyro' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.stdout.strip() == "False", out.stderr
