"""`vidur-fast report ... --html FILE`: one self-contained page for one run, two runs side by
side, and a capacity directory; rendered by a real headless browser where one is installed."""

import json
import re
import shutil
import subprocess

import pytest

from tests.helpers.cli_args import FAST_TIMING_ARGS
from tests.helpers.sweeps import FAST_PREDICTOR
from vidur_fast.commands.main import main
from vidur_fast.explore.run_capacity import run_capacity

BROWSER = shutil.which("chromium") or shutil.which("chromium-browser")


def _run(tmp_path, name: str, *extra: str):
    out = tmp_path / name
    argv = ["--quiet", "--output.dir", str(out), *FAST_TIMING_ARGS, "--cluster.num-replicas", "2"]
    argv += [*extra, "workload:synthetic", "--workload.num-requests", "60"]
    assert main(argv) == 0
    return out


def _screenshot(page, png):
    """Render the page in headless Chromium; the PNG must exist and not be blank."""
    if BROWSER is None:
        return
    cmd = [BROWSER, "--headless", "--no-sandbox", "--disable-gpu", f"--screenshot={png}"]
    cmd += ["--window-size=1200,1600", page.as_uri()]
    subprocess.run(cmd, capture_output=True, timeout=120, check=False)
    assert png.is_file() and png.stat().st_size > 20_000


def _images(text: str) -> list[str]:
    return re.findall(r'<img alt="[^"]*" src="data:image/png;base64,', text)


@pytest.fixture(scope="module")
def two_runs(tmp_path_factory):
    d = tmp_path_factory.mktemp("runs")
    return _run(d, "a"), _run(d, "b", "router:lop")


def test_one_run_page_is_self_contained(two_runs, tmp_path, capsys):
    page = tmp_path / "one.html"
    assert main(["report", str(two_runs[0]), "--html", str(page)]) == 0
    text = page.read_text()
    assert "What ran" in text and "Key figures" in text and "Batch composition" in text
    assert len(_images(text)) >= 3  # CDFs, time series, batch composition, TTFT per replica
    assert "http" not in text.replace("http-equiv", "")  # nothing fetched from elsewhere
    assert not (two_runs[0] / "report").exists()  # only the page was written
    _screenshot(page, tmp_path / "one.png")


def test_two_runs_side_by_side(two_runs, tmp_path):
    page = tmp_path / "two.html"
    assert main(["report", *map(str, two_runs), "--html", str(page)]) == 0
    text = page.read_text()
    assert "b vs a (%)" in text and "lop" in text and "round_robin" in text
    assert len(_images(text)) >= 5
    _screenshot(page, tmp_path / "two.png")


def test_capacity_directory_page(tmp_path):
    spec = {
        "base": {
            "workload": {
                "type": "synthetic",
                "num_requests": 80,
                "lengths": {"type": "uniform", "min_tokens": 128, "max_tokens": 1024},
                "intervals": {"type": "poisson", "qps": 2.0},
            },
            "predictor": {**FAST_PREDICTOR, "cache_dir": str(tmp_path / "grids")},
        },
        "grid": {"num_replicas": [1, 2]},
        "capacity": {"slo": {"ttft_p90": 0.5}, "start_qps": 4, "rel_tol": 0.2, "max_qps": 256},
    }
    path = tmp_path / "cap.json"
    path.write_text(json.dumps(spec))
    run_capacity(str(path), str(tmp_path / "cap"), workers=1, quiet=True)
    page = tmp_path / "cap.html"
    assert main(["report", str(tmp_path / "cap"), "--html", str(page)]) == 0
    text = page.read_text()
    assert "capacity_qps" in text and "Pareto frontier" in text and _images(text)
    _screenshot(page, tmp_path / "cap.png")


@pytest.mark.parametrize(
    "args,needle",
    [
        (["{tmp}/not_a_run", "--html", "{tmp}/x.html"], "not_a_run"),
        (["{run}", "--html", "{tmp}/no/such/dir/x.html"], "--html"),
        (["{run}", "--html", "{tmp}"], "--html"),
    ],
)
def test_bad_html_requests_are_one_line(two_runs, tmp_path, capsys, args, needle):
    (tmp_path / "not_a_run").mkdir()
    argv = [a.format(tmp=tmp_path, run=two_runs[0]) for a in args]
    with pytest.raises(SystemExit) as exc:
        main(["report", *argv])
    assert exc.value.code == 2
    err = [x for x in capsys.readouterr().err.splitlines() if x.strip()]
    assert len(err) == 1 and err[0].startswith("error:") and needle in err[0], err


def test_html_to_an_unwritable_place_is_one_line_and_prints_nothing(two_runs, tmp_path, capsys):
    import os
    import sys

    if os.geteuid() != 0:
        locked = tmp_path / "locked"
        locked.mkdir()
        locked.chmod(0o500)
        target = locked / "x.html"
    elif sys.platform.startswith("linux"):
        target = type(tmp_path)("/proc/vidur-fast-report.html")  # root can write anywhere else
    else:
        pytest.skip("no unwritable directory for root here")
    with pytest.raises(SystemExit) as exc:
        main(["report", str(two_runs[0]), "--html", str(target)])
    assert exc.value.code == 2
    captured = capsys.readouterr()
    err = [x for x in captured.err.splitlines() if x.strip()]
    assert len(err) == 1 and err[0].startswith("error: --html"), err
    assert not captured.out and not target.exists()


def test_sweep_directory_page_with_its_pareto_chart(tmp_path):
    from vidur_fast.explore.run_sweep import run_sweep

    spec = {
        "base": {
            "workload": {
                "type": "synthetic",
                "num_requests": 60,
                "lengths": {"type": "uniform", "min_tokens": 128, "max_tokens": 1024},
                "intervals": {"type": "poisson", "qps": 4.0},
            },
            "predictor": {**FAST_PREDICTOR, "cache_dir": str(tmp_path / "grids")},
        },
        "grid": {"num_replicas": [1, 2], "qps": [4, 16]},
    }
    path = tmp_path / "sweep.json"
    path.write_text(json.dumps(spec))
    run_sweep(str(path), str(tmp_path / "sw"), workers=1, quiet=True, keep_runs=True)
    page = tmp_path / "sw.html"
    assert main(["report", str(tmp_path / "sw"), "--html", str(page)]) == 0
    text = page.read_text()
    assert "prefill_e2e_time_p90" in text and "Pareto frontier" in text
    assert len(_images(text)) == 1 and 'class="pareto"' in text
    _screenshot(page, tmp_path / "sweep.png")


def test_pd_run_page_shows_the_pools_and_hand_offs(pd_run_dir, tmp_path):
    page = tmp_path / "pd.html"
    assert main(["report", str(pd_run_dir), "--html", str(page)]) == 0
    text = page.read_text()
    assert "<h3>Pools</h3>" in text and "Disaggregated serving" in text
    for cell in ("prefill", "decode", "2 x h100 tp1", "transfer p99 (ms)", "replica 1"):
        assert f"<td>{cell}</td>" in text, cell
    assert 'alt="0_pools"' in text and 'alt="0_pd_transfers"' in text
    _screenshot(page, tmp_path / "pd.png")


def test_one_pool_page_has_no_pool_section(two_runs, tmp_path):
    page = tmp_path / "one.html"
    assert main(["report", str(two_runs[0]), "--html", str(page)]) == 0
    assert "<h3>Pools</h3>" not in page.read_text()
