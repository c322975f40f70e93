"""Bad sweep and capacity input through the real CLI: one `error:` line naming the key, exit
code 2, nothing written (and a damaged or unwritable output directory reported, not a
traceback)."""

import json
import os
from pathlib import Path

import pytest

from tests.helpers.cli import assert_one_error as _one_error
from tests.helpers.cli import run_cli as _cli
from tests.helpers.sweeps import small_base
from vidur_fast.commands.main import main


def _json(d: Path, data) -> str:
    p = d / "s.json"
    p.write_text(json.dumps(data))
    return str(p)


def _yaml(d: Path, text: str, encoding: str = "utf-8") -> str:
    p = d / "s.yaml"
    p.write_bytes(text.encode(encoding))
    return str(p)


BASE = "base:\n  workload: {type: synthetic, num_requests: 20}\n"

# (id, sweep file writer, needle)
CASES = [
    ("grid_value_wrong_type", lambda d: _json(d, {"grid": {"tp": [1, "two"]}}), "grid.tp"),
    ("grid_value_wrong_type_deep", lambda d: _json(d, {"grid": {"seed": [1.5]}}), "grid.seed"),
    (
        "grid_unknown_union_type",
        lambda d: _json(d, {"grid": {"scheduler": ["vllm_v1", "fifo"]}}),
        "grid.scheduler: unknown type 'fifo'",
    ),
    (
        "grid_union_unknown_knob",
        lambda d: _json(d, {"grid": {"scheduler": [{"type": "sarathi", "chunk_sz": 5}]}}),
        "grid.scheduler.chunk_sz",
    ),
    (
        "grid_duplicate_key_yaml",
        lambda d: _yaml(d, BASE + "grid:\n  tp: [1]\n  qps: [1, 2]\n  tp: [2]\n"),
        "key 'tp' given twice",
    ),
    (
        "grid_duplicate_key_json",
        lambda d: str(
            (d / "s.json").write_text('{"grid": {"qps": [1], "qps": [2]}}') and d / "s.json"
        ),
        "key 'qps' given twice",
    ),
    (
        "base_duplicate_key_yaml",
        lambda d: _yaml(d, "base:\n  seed: 1\n  seed: 2\n"),
        "key 'seed' given twice",
    ),
    (
        "sweep_file_not_text",
        lambda d: _yaml(d, BASE + "# café\n", "latin-1"),
        "not UTF-8 or UTF-16",
    ),
]


@pytest.fixture
def work(tmp_path, monkeypatch):
    monkeypatch.setenv("VIDUR_FAST_CACHE", str(tmp_path / "cache"))
    d = tmp_path / "in"
    d.mkdir()
    return d, tmp_path / "out"


@pytest.mark.parametrize("cmd", ["sweep", "capacity"])
@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_bad_sweep_file_is_one_line_and_writes_nothing(case, cmd, work, capsys):
    d, out = work
    path = case[1](d)
    if cmd == "capacity":  # the same file with a valid capacity section
        p = Path(path)
        if p.suffix == ".json" and "given twice" not in case[2]:
            data = json.loads(p.read_text())
            data["capacity"] = {"slo": {"tbt_p99": 1.0}}
            p.write_text(json.dumps(data))
        elif p.suffix == ".yaml" and "not UTF" not in case[2]:
            p.write_text(p.read_text() + "capacity: {slo: {tbt_p99: 1.0}}\n")
    code, lines = _cli([cmd, path, "--out", str(out), "--quiet", "--workers", "1"], capsys)
    _one_error(code, lines, case[2])
    assert not out.exists()


def test_a_utf16_sweep_file_is_read(work, capsys):
    # what Windows PowerShell's `>` writes: UTF-16 with a byte-order mark
    d, out = work
    text = (
        "base:\n"
        "  workload: {type: synthetic, num_requests: 20}\n"
        "  predictor: {source: roofline, max_tokens: 4096, max_prefill_chunk: 2048,"
        " max_batch_size: 32}\n"
        "grid:\n  seed: [1]\n"
    )
    path = _yaml(d, "\ufeff" + text, "utf-16-le")
    assert main(["sweep", path, "--out", str(out), "--quiet", "--workers", "1"]) == 0
    assert (out / "results.parquet").is_file()


def test_a_damaged_sweep_json_is_one_line(work, capsys):
    d, out = work
    out.mkdir()
    (out / "sweep.json").write_text('{"kind": "swe')  # cut short
    before = (out / "sweep.json").read_bytes()
    path = _json(d, {"base": small_base(d / "cache"), "grid": {"seed": [1]}})
    code, lines = _cli(["sweep", path, "--out", str(out), "--quiet", "--workers", "1"], capsys)
    _one_error(code, lines, "sweep.json is damaged")
    assert (out / "sweep.json").read_bytes() == before
    assert sorted(p.name for p in out.iterdir()) == ["sweep.json"]


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes anywhere")
def test_an_unwritable_out_is_one_line(work, capsys):
    d, out = work
    locked = d / "locked"
    locked.mkdir(mode=0o500)
    path = _json(d, {"base": small_base(d / "cache"), "grid": {"seed": [1]}})
    code, lines = _cli(["sweep", path, "--out", str(locked / "o"), "--quiet"], capsys)
    _one_error(code, lines, "out: cannot write")


def test_an_out_on_a_read_only_file_system_is_one_line(work, capsys):
    d, out = work
    if not Path("/proc").is_dir():
        pytest.skip("no /proc here")
    path = _json(d, {"base": small_base(d / "cache"), "grid": {"seed": [1]}})
    code, lines = _cli(["sweep", path, "--out", "/proc/vidur-fast-sweep", "--quiet"], capsys)
    _one_error(code, lines, "out: cannot write")


def test_an_out_under_a_file_is_one_line(work, capsys):
    d, out = work
    (d / "afile").write_text("x")
    path = _json(d, {"base": small_base(d / "cache"), "grid": {"seed": [1]}})
    code, lines = _cli(
        ["sweep", path, "--out", str(d / "afile" / "o"), "--quiet", "--workers", "1"], capsys
    )
    _one_error(code, lines, "out: cannot write")


@pytest.mark.parametrize("target", [".", ".."])
def test_out_is_never_the_working_directory(target, work, capsys, monkeypatch):
    d, out = work
    path = _json(d, {"base": small_base(d / "cache"), "grid": {"seed": [1]}})
    monkeypatch.chdir(d)
    code, lines = _cli(["sweep", path, "--out", target, "--quiet", "--workers", "1"], capsys)
    _one_error(code, lines, "working directory")
