"""`--config FILE`: a YAML/JSON file of config fields, or a run directory, read through the one
converter; rerunning a run's config.json gives the same outputs."""

import pytest

from tests.helpers.cli_args import FAST_TIMING_ARGS
from vidur_fast.commands.main import main
from vidur_fast.config.convert import config_dict
from vidur_fast.config.files import load_config
from vidur_fast.config.sim import SarathiScheduler, SimConfig

SMALL = [
    "--quiet",
    *FAST_TIMING_ARGS,
    "--cluster.num-replicas",
    "2",
    "scheduler:sarathi",
    "--scheduler.chunk-size",
    "256",
    "workload:synthetic",
    "--workload.num-requests",
    "40",
]


def test_a_run_directory_reruns_to_identical_outputs(tmp_path):
    first, second = tmp_path / "a", tmp_path / "b"
    assert main([*SMALL[:1], "--output.dir", str(first), *SMALL[1:]]) == 0
    assert main(["--quiet", "--config", str(first), "--output.dir", str(second)]) == 0
    assert (first / "request_metrics.csv").read_bytes() == (
        second / "request_metrics.csv"
    ).read_bytes()
    a, b = config_dict(load_config(str(first))), config_dict(load_config(str(second)))
    assert a["output"]["dir"] != b["output"]["dir"]
    assert {**a, "output": None} == {**b, "output": None}


def test_yaml_fields_override_defaults_and_flags_override_the_file(tmp_path):
    f = tmp_path / "c.yaml"
    f.write_text("cluster: {num_replicas: 3}\nscheduler: {type: sarathi, chunk_size: 128}\n")
    cfg = load_config(str(f))
    assert cfg.cluster.num_replicas == 3
    assert cfg.scheduler == SarathiScheduler(chunk_size=128)
    assert cfg.workload == SimConfig().workload


@pytest.mark.parametrize(
    "content,message",
    [
        (None, "does not exist"),
        ("- a list\n", "must hold a mapping"),
        ("cluster: {tp: two}\n", "cluster.tp: must be an integer"),
        ("schedulr: {}\n", "schedulr: unknown field"),
    ],
)
def test_bad_config_files_are_one_line_errors(tmp_path, capsys, content, message):
    f = tmp_path / "c.yaml"
    if content is not None:
        f.write_text(content)
    with pytest.raises(SystemExit) as exc:
        main(["--quiet", "--config", str(f), "--output.dir", str(tmp_path / "out")])
    assert exc.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error:") and message in err[0], err
    assert not (tmp_path / "out").exists()
