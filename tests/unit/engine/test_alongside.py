"""The writers' imports run beside the loop when the run is to be written, and only then."""

import subprocess
import sys

CODE = """
import sys, tempfile
from vidur_fast.api import simulate
from vidur_fast.config.sim import OutputConfig, SimConfig
from vidur_fast.config.workload import FixedLengths, SyntheticWorkload

wl = SyntheticWorkload(num_requests=20, lengths=FixedLengths(64, 4))
out = OutputConfig(dir=tempfile.mkdtemp() + "/run") if sys.argv[1] == "dir" else OutputConfig()
simulate(SimConfig(workload=wl, output=out, quiet=True))
print("h5py" in sys.modules, "pyarrow.csv" in sys.modules)
"""


def _loaded(mode: str) -> str:
    out = subprocess.run(
        [sys.executable, "-c", CODE, mode], capture_output=True, text=True, timeout=300
    )
    assert out.returncode == 0, out.stderr
    return out.stdout.strip()


def test_writer_imports_load_during_a_run_with_a_run_directory_only():
    assert _loaded("dir") == "True True"
    assert _loaded("memory") == "False False"
