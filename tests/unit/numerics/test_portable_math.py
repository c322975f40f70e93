"""log, exp and power give the C library's bits on every CPU, and the simulation path uses
them: numpy's own AVX-512 log/exp/power differ from the C library in the last bit, which made
the measured golden case's request_metrics.csv differ between an AVX-512 machine and others."""

import json
import math
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from vidur_fast.numerics import portable_math as pm

REPO = Path(__file__).resolve().parents[3]
# numpy's SIMD targets above the x86-64-v2 baseline: disabling them leaves the C library's path
NO_SIMD = "X86_V3 X86_V4 AVX512_ICL AVX512_SPR AVX2 FMA3 AVX512F AVX512_SKX"


def _inputs(n: int = 20_000):
    rng = np.random.default_rng(7)
    return (
        np.exp(rng.uniform(-40.0, 40.0, n)),
        rng.uniform(-40.0, 40.0, n),
        rng.uniform(0.0, 1.0, n),
        rng.uniform(0.0, 300.0, n),
    )


def test_every_element_is_the_c_librarys():
    x, y, b, e = _inputs()
    assert [v.hex() for v in pm.log(x)] == [math.log(v).hex() for v in x]
    assert [v.hex() for v in pm.exp(y)] == [math.exp(v).hex() for v in y]
    pairs = zip(b, e, strict=True)
    assert [v.hex() for v in pm.power(b, e)] == [math.pow(u, v).hex() for u, v in pairs]


def test_special_values_follow_numpy():
    with np.errstate(all="ignore"):
        x = np.array([0.0, -1.0, np.inf, np.nan, 1.0])
        np.testing.assert_array_equal(pm.log(x), np.log(x))
        y = np.array([1e4, -1e4, -np.inf, np.inf, np.nan, 0.0])
        np.testing.assert_array_equal(pm.exp(y), np.exp(y))
        b = np.array([0.0, -2.0, 10.0, 2.0])
        e = np.array([-1.0, 0.5, 400.0, 3.0])
        np.testing.assert_array_equal(pm.power(b, e), np.power(b, e))


def test_shapes_and_scalars():
    assert isinstance(pm.log(2.0), float) and pm.log(2.0) == math.log(2.0)
    assert isinstance(pm.exp(np.float64(1.5)), float)
    assert pm.log(np.zeros(0)).dtype == np.float64 and pm.log(np.zeros(0)).shape == (0,)
    grid = np.arange(1.0, 13.0).reshape(3, 4)
    assert pm.log(grid).shape == (3, 4) and pm.log(grid).dtype == np.float64
    assert pm.power(grid, np.array([1.0, 2.0, 0.5, 3.0])).shape == (3, 4)


_LOOKUPS = """
import json, sys
import numpy as np
from vidur_fast.timing.sources._common import interp_loglog
from vidur_fast.workload.generators import zipf_totals
from vidur_fast.config.workload import ZipfLengths
rng = np.random.default_rng(3)
xp = np.sort(rng.uniform(1.0, 1e5, 64)); fp = np.sort(rng.uniform(1e-3, 50.0, 64))
x = rng.uniform(0.5, 2e5, 5000)
y = interp_loglog(x, xp, fp, above_exponent=1.3)
z = zipf_totals(ZipfLengths(min_tokens=16, max_tokens=40000, theta=0.4, scramble=False),
                np.random.default_rng(5), 20000, 5)
print(json.dumps([[v.hex() for v in y], z.tolist()]))
"""


def test_lookups_and_workloads_do_not_depend_on_numpys_simd_level(tmp_path):
    """Log-log interpolation (every aiconfigurator table lookup) and the Zipf lengths, in a
    process with numpy's SIMD paths and in one without them: the same bits."""
    results = []
    for disable in ("", NO_SIMD):
        env = dict(os.environ)
        env.pop("NPY_DISABLE_CPU_FEATURES", None)
        if disable:
            env["NPY_DISABLE_CPU_FEATURES"] = disable
        out = subprocess.run(
            [sys.executable, "-c", _LOOKUPS],
            env=env,
            capture_output=True,
            text=True,
            check=True,
            cwd=tmp_path,
        )
        results.append(json.loads(out.stdout.strip().splitlines()[-1]))
    assert results[0] == results[1]


# numpy ufuncs whose float64 loops have CPU-specific SIMD implementations
_SIMD_UFUNC = re.compile(
    r"\bnp\.(exp|exp2|expm1|log|log2|log10|log1p|power|float_power|sin|cos|tan|arcsin|arccos|"
    r"arctan|arctan2|sinh|cosh|tanh|arcsinh|arccosh|arctanh|cbrt|geomspace|logspace)\("
)
SIMULATION_PATH = ("timing", "workload", "params", "engine", "metrics", "catalog", "config")


@pytest.mark.parametrize("stage", SIMULATION_PATH)
def test_the_simulation_path_calls_no_simd_transcendental(stage):
    hits = [
        f"{path.relative_to(REPO)}:{i}: {line.strip()}"
        for path in sorted((REPO / "vidur_fast" / stage).rglob("*.py"))
        for i, line in enumerate(path.read_text().splitlines(), 1)
        if _SIMD_UFUNC.search(line.split("#")[0])
    ]
    assert not hits, "use vidur_fast.numerics.portable_math: " + "; ".join(hits)
