"""The first run says what it compiles; a run that loads cached kernels says nothing."""

import os
import subprocess
import sys

from vidur_fast.kernels import loop
from vidur_fast.kernels.block_pool import init_pool_nb
from vidur_fast.kernels.codes import RouterPolicy, SchedPolicy

from vidur_fast.api import simulate
from vidur_fast.config.sim import SimConfig
from vidur_fast.config.workload import FixedLengths, SyntheticWorkload
from vidur_fast.engine.run import kernel_cached


def test_loaded_kernels_count_as_cached_and_print_nothing(capsys):
    cfg = SimConfig(workload=SyntheticWorkload(num_requests=5, lengths=FixedLengths(64, 4)))
    simulate(cfg, progress=True)
    kernel = loop.loop_kernel(SchedPolicy.VLLM_V1, False, False, RouterPolicy.ROUND_ROBIN)
    assert kernel_cached(kernel) is True
    assert kernel_cached(init_pool_nb) is True
    capsys.readouterr()
    simulate(cfg, progress=True)
    assert "compil" not in capsys.readouterr().err


def test_an_empty_numba_cache_counts_as_not_cached(tmp_path):
    # a fresh process that only asks (compiling would take a minute)
    code = (
        "from vidur_fast.engine.run import kernel_cached\n"
        "from vidur_fast.jit_start import start_numba_target\n"
        "from vidur_fast.kernels import loop\n"
        "start_numba_target()\n"
        "print(kernel_cached(loop.loop_kernel(5, False, False, 0)))\n"
    )
    # without the shipped kernel bundle, which would fill the empty cache
    env = {**os.environ, "NUMBA_CACHE_DIR": str(tmp_path), "VIDUR_FAST_KERNEL_BUNDLE": "0"}
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120
    )
    assert out.stdout.strip() == "False", out.stderr
