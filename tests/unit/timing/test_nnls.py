"""The work baselines' least squares: the non-negative optimum, with the same bits whichever
kernels the BLAS library picks for the CPU."""

import json
import os
import platform
import subprocess
import sys

import numpy as np
import pytest
from sklearn.linear_model import LinearRegression

from vidur_fast.timing.fit import work_features
from vidur_fast.timing.nnls import nnls_weighted


def _problem(kind: str, seed: int, n: int = 300):
    rng = np.random.default_rng(seed)
    outer = rng.integers(1, 8192, n).astype(float)
    kv = rng.integers(1, 131072, n).astype(float)
    design = np.column_stack([np.ones(n), *work_features(kind, outer, kv)])
    true = np.array([0.02, 1e-4, 3e-7, 2e-10][: design.shape[1]])
    y = design @ true * rng.lognormal(0.0, 0.1, n)
    return design, y, 1.0 / y**2


@pytest.mark.parametrize("kind", ["tokens", "decode", "prefill"])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_matches_sklearn_non_negative_least_squares(kind, seed):
    design, y, w = _problem(kind, seed)
    ours = nnls_weighted(design, y, w)
    ref = LinearRegression(positive=True, fit_intercept=False).fit(design, y, sample_weight=w)
    np.testing.assert_allclose(ours, ref.coef_, rtol=1e-9, atol=0)


def test_active_constraints_are_zero_and_optimal():
    # y falls with x: the unconstrained slope is negative, the non-negative optimum is a
    # constant (the weighted mean)
    x = np.arange(1.0, 11.0)
    y = 20.0 - x
    design = np.column_stack([np.ones_like(x), x])
    w = np.ones_like(x)
    c = nnls_weighted(design, y, w)
    assert c[1] == 0.0
    assert c[0] == pytest.approx(y.mean(), rel=1e-12)


def test_no_columns_fit_gives_zeros():
    design = np.column_stack([np.ones(5), np.arange(5.0)])
    c = nnls_weighted(design, -np.ones(5), np.ones(5))  # every solution would be negative
    np.testing.assert_array_equal(c, [0.0, 0.0])


_SOLVE = """
import json, sys
import numpy as np
from vidur_fast.timing.nnls import nnls_weighted
d = np.load(sys.argv[1])
print(json.dumps([v.hex() for v in nnls_weighted(d["design"], d["y"], d["w"])]))
"""


@pytest.mark.skipif(platform.machine() not in ("x86_64", "AMD64"), reason="x86 BLAS kernels")
def test_same_bits_with_other_blas_kernels(tmp_path):
    """OpenBLAS picks its kernels by CPU (OPENBLAS_CORETYPE forces a choice): the baseline
    must not depend on them (with a BLAS solve, grids built on two machines differed)."""
    design, y, w = _problem("prefill", 7, n=2000)
    np.savez(tmp_path / "problem.npz", design=design, y=y, w=w)
    results = {}
    for core in ("", "Prescott", "Sandybridge"):
        env = dict(os.environ)
        env.pop("OPENBLAS_CORETYPE", None)
        if core:
            env["OPENBLAS_CORETYPE"] = core
        out = subprocess.run(
            [sys.executable, "-c", _SOLVE, str(tmp_path / "problem.npz")],
            env=env,
            capture_output=True,
            text=True,
            check=True,
        )
        results[core] = tuple(json.loads(out.stdout.strip().splitlines()[-1]))
    assert len(set(results.values())) == 1, results
    assert results[""] == tuple(v.hex() for v in nnls_weighted(design, y, w))
