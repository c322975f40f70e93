"""A fresh interpreter for the compile-cache tests: Numba caches beside the kernel modules of
its working directory (no NUMBA_CACHE_DIR)."""

import os
import subprocess
import sys


def run_fresh_python(args: list[str], cwd, pythonpath: list[str]) -> str:
    """Run `python *args` in `cwd` with PYTHONPATH `pythonpath`; its stdout, stripped (asserts
    a zero exit status)."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(pythonpath)}
    env.pop("NUMBA_CACHE_DIR", None)
    out = subprocess.run(
        [sys.executable, *args], env=env, cwd=cwd, capture_output=True, text=True, timeout=300
    )
    assert out.returncode == 0, out.stderr
    return out.stdout.strip()
