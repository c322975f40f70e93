"""The package's front door: `from vidur_fast import ...` and `python -m vidur_fast`."""

import subprocess
import sys

import vidur_fast
from tests.conftest import REPO


def test_top_level_names_run_and_read_a_simulation(tmp_path):
    from vidur_fast import Result, SimConfig, read_run, simulate, write_run
    from vidur_fast.config import OutputConfig, PredictorConfig, SyntheticWorkload

    cfg = SimConfig(
        workload=SyntheticWorkload(num_requests=20),
        predictor=PredictorConfig(source="roofline", max_tokens=8192, max_prefill_chunk=4096),
        quiet=True,
    )
    result = simulate(cfg)
    assert isinstance(result, Result)
    assert result.summary["num_completed"] == 20
    path = write_run(result, OutputConfig(dir=str(tmp_path / "run")))
    run = read_run(path)
    assert len(run.requests) == 20


def test_unknown_attribute_is_an_attribute_error():
    try:
        vidur_fast.no_such_name  # noqa: B018
    except AttributeError as exc:
        assert "no_such_name" in str(exc)
    else:
        raise AssertionError("expected AttributeError")


def test_importing_the_package_loads_no_engine():
    code = (
        "import sys, vidur_fast; print(any(m.startswith(('numba', 'pandas')) for m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO)
    assert out.stdout.strip() == "False", out.stderr


def test_python_dash_m_is_the_command(tmp_path):
    out = subprocess.run(
        [sys.executable, "-m", "vidur_fast", "simulate", "--preset", "list"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
    )
    assert out.returncode == 0, out.stderr
    assert "llama3-8b" in out.stdout
