"""Ctrl-C safety and grid-cache recovery.

An interrupt during the simulation or while writing leaves no run directory (nor temp dirs or
parents the run created) and the CLI exits 130 with one line. A corrupt cached grid is caught
by its checksums before use and rebuilt with a one-line notice.
"""

import json
from pathlib import Path

import numpy as np
import pytest

import vidur_fast.engine.run as engine_run
import vidur_fast.outputs.writer as writer
from tests.helpers.cli import run_cli as _cli
from vidur_fast.commands.main import main
from vidur_fast.config.predictor import PredictorConfig
from vidur_fast.timing.build import build_timing
from vidur_fast.timing.grids import GRID_FIELDS

LLAMA3_8B = "meta-llama/Meta-Llama-3-8B"
GRID = ["--predictor.max-tokens", "8192", "--predictor.max-prefill-chunk", "4096"]
GRID += ["--predictor.max-batch-size", "64"]
ARGS = ["--quiet", "--predictor.source", "roofline", "--predictor.regressor", "polynomial"]
ARGS += [*GRID, "workload:synthetic", "--workload.num-requests", "60"]


@pytest.fixture(autouse=True)
def _cache(tmp_path, monkeypatch):
    monkeypatch.setenv("VIDUR_FAST_CACHE", str(tmp_path / "cache"))


def _assert_interrupted(code, lines, out_root: Path) -> None:
    assert code == 130
    assert len(lines) == 1 and "interrupted" in lines[0], lines
    assert not out_root.exists(), list(out_root.rglob("*"))


# ---- Ctrl-C ----


def test_interrupt_during_simulation(tmp_path, monkeypatch, capsys):
    # small kernel calls so the driver loop runs several times; interrupt on the third
    monkeypatch.setattr(engine_run, "STEPS_PER_CALL", 50)
    real, calls = engine_run.loop.run_nb, []

    def run_nb(*args):
        calls.append(1)
        if len(calls) == 3:
            raise KeyboardInterrupt
        return real(*args)

    monkeypatch.setattr(engine_run.loop, "run_nb", run_nb)
    out_root = tmp_path / "out"
    code, lines = _cli(["--output.dir", str(out_root / "nested" / "run"), *ARGS], capsys)
    assert len(calls) == 3
    _assert_interrupted(code, lines, out_root)


@pytest.mark.parametrize("where", ["h5", "csv", "rename"])
def test_interrupt_while_writing(where, tmp_path, monkeypatch, capsys):
    if where == "h5":
        real = writer.write_metrics_h5

        def half_written(path, *args):
            real(path, *args)  # a complete file in the temp dir, then Ctrl-C
            raise KeyboardInterrupt

        monkeypatch.setattr(writer, "write_metrics_h5", half_written)
    elif where == "csv":

        def csv(frame, path):
            Path(path).write_text("Request Id,request_e2e_time\n0,")
            raise KeyboardInterrupt

        monkeypatch.setattr(writer, "write_request_csv", csv)
    else:

        def replace(src, dst):
            raise KeyboardInterrupt

        monkeypatch.setattr(writer.os, "replace", replace)
    out_root = tmp_path / "out"
    code, lines = _cli(["--output.dir", str(out_root / "a" / "b" / "run"), *ARGS], capsys)
    _assert_interrupted(code, lines, out_root)


def test_interrupt_keeps_an_existing_run_when_overwriting(tmp_path, monkeypatch, capsys):
    run = tmp_path / "run"
    assert main(["--output.dir", str(run), *ARGS]) == 0
    before = {p.name: p.read_bytes() for p in run.iterdir()}
    capsys.readouterr()

    def boom(*args):
        raise KeyboardInterrupt

    monkeypatch.setattr(writer, "write_metrics_h5", boom)
    code, lines = _cli(["--output.dir", str(run), "--output.overwrite", *ARGS], capsys)
    assert code == 130 and len(lines) == 1
    assert {p.name: p.read_bytes() for p in run.iterdir()} == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cache", "run"]


# ---- corrupt grid cache ----


def _predictor(cache: Path) -> PredictorConfig:
    return PredictorConfig(
        source="roofline",
        regressor="polynomial",
        max_tokens=8192,
        max_prefill_chunk=4096,
        max_batch_size=64,
        cache_dir=str(cache),
    )


def _build(cache: Path):
    return build_timing(LLAMA3_8B, "h100", None, 1, 1, _predictor(cache))


def _corrupt(npz: Path, how: str) -> None:
    side = npz.with_suffix(".json")
    if how == "npz_truncated":
        npz.write_bytes(npz.read_bytes()[: npz.stat().st_size // 2])
    elif how == "npz_bitflip":
        raw = bytearray(npz.read_bytes())
        raw[-len(raw) // 3] ^= 0x40  # inside an array's data
        npz.write_bytes(bytes(raw))
    elif how == "npz_other_values":
        with np.load(npz) as data:
            arrays = {k: data[k] for k in data.files}
        arrays["tok_ms"] = arrays["tok_ms"] * 2.0  # a valid file with wrong contents
        with open(npz, "wb") as fh:
            np.savez(fh, **arrays)
    elif how == "npz_missing_array":
        with np.load(npz) as data:
            arrays = {k: data[k] for k in data.files if k != "decode_ms"}
        with open(npz, "wb") as fh:
            np.savez(fh, **arrays)
    elif how == "json_garbage":
        side.write_text("{ not json")
    elif how == "json_edited_checksum":
        record = json.loads(side.read_text())
        record["arrays"]["prefill_ms"]["sha256"] = "0" * 64
        side.write_text(json.dumps(record))
    elif how == "json_not_a_record":
        side.write_text("[1, 2, 3]")


CORRUPTIONS = (
    "npz_truncated",
    "npz_bitflip",
    "npz_other_values",
    "npz_missing_array",
    "json_garbage",
    "json_edited_checksum",
    "json_not_a_record",
)


@pytest.mark.parametrize("how", CORRUPTIONS)
def test_corrupt_cache_entry_is_rebuilt_with_one_notice(how, tmp_path, capsys):
    cache = tmp_path / "cache"
    first = _build(cache)
    npz = Path(first.meta["cache_path"])
    _corrupt(npz, how)
    capsys.readouterr()
    second = _build(cache)
    lines = [x for x in capsys.readouterr().err.splitlines() if x.strip()]
    assert len(lines) == 1 and lines[0].startswith("notice:") and "rebuilding" in lines[0]
    assert not second.meta["from_cache"]
    for name in GRID_FIELDS:
        np.testing.assert_array_equal(getattr(second.grids, name), getattr(first.grids, name))
    # the rebuilt entry is valid again: loaded silently
    third = _build(cache)
    assert third.meta["from_cache"] and capsys.readouterr().err == ""


def test_missing_cache_entry_builds_silently(tmp_path, capsys):
    model = _build(tmp_path / "cache")
    assert not model.meta["from_cache"] and capsys.readouterr().err == ""


def test_cli_run_with_corrupt_cache_rebuilds_and_succeeds(tmp_path, capsys):
    cache = tmp_path / "cache"
    npz = Path(_build(cache).meta["cache_path"])
    _corrupt(npz, "npz_bitflip")
    capsys.readouterr()
    code, lines = _cli(["--output.dir", str(tmp_path / "run"), *ARGS], capsys)
    assert code == 0
    assert len(lines) == 1 and lines[0].startswith("notice: timing grid cache"), lines
    assert (tmp_path / "run" / "summary.json").is_file()
