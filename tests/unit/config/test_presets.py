"""Presets: every one is a valid, runnable config; flags after --preset override it."""

import json
from dataclasses import replace

import pytest

from vidur_fast.catalog import get_device, get_model
from vidur_fast.commands.main import main
from vidur_fast.commands.simulate import take_option
from vidur_fast.config.presets import PRESETS, get_preset
from vidur_fast.params.setup import build_setup
from vidur_fast.workload.build import build_workload


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_preset_is_valid(name):
    cfg = get_preset(name)
    setup = build_setup(cfg, get_model(cfg.cluster.model), get_device(cfg.cluster.device))
    wl = build_workload(
        replace(cfg.workload, num_requests=50), cfg.seed, block_size=setup.profile_block_size
    )
    assert len(wl) == 50
    # nothing in a preset is rejected up front: every request fits a replica
    from vidur_fast.params.setup import rejection_codes

    assert not rejection_codes(wl.prompt_tokens, wl.decode_tokens, setup).any()


def test_split_preset_arg():
    assert take_option(["--preset", "a", "--seed", "1"], "--preset", "") == ("a", ["--seed", "1"])
    assert take_option(["--preset=b"], "--preset", "") == ("b", [])
    assert take_option(["--seed", "1"], "--preset", "") == (None, ["--seed", "1"])


def test_preset_list_and_unknown(capsys):
    assert main(["--preset", "list"]) == 0
    assert "llama3-8b-h100" in capsys.readouterr().out
    with pytest.raises(SystemExit) as exc:
        main(["--preset", "no-such"])
    assert exc.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--preset" in err[0]


def test_flags_override_the_preset(tmp_path):
    out = tmp_path / "run"
    argv = ["--preset", "qwen3-32b-h100-tp2", "--output.dir", str(out), "--quiet"]
    argv += ["--predictor.source", "roofline", "--predictor.max-tokens", "8192"]
    argv += ["--predictor.max-prefill-chunk", "4096", "--predictor.max-batch-size", "64"]
    argv += ["workload:synthetic", "--workload.num-requests", "20"]
    assert main(argv) == 0
    cfg = json.loads((out / "config.json").read_text())
    cfg = cfg.get("config", cfg)
    assert cfg["cluster"]["model"] == "Qwen/Qwen3-32B" and cfg["cluster"]["tp"] == 2
    assert cfg["workload"]["num_requests"] == 20
    assert cfg["workload"]["lengths"]["prefill_tokens"] == 1024
