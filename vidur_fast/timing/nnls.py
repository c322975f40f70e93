"""Non-negative weighted least squares with the same bits on every CPU.

The work baselines (fit.py) are least-squares fits of a few columns of very different sizes
(a prefill's 1, chunk, kv and chunk x kv span nine orders of magnitude). Solved by BLAS, their
last bits depend on which kernels the BLAS library picks for the CPU, and the ill-conditioned
prefill design turns those bits into relative differences of 1e-4 in the coefficients; the
forests fit on time / baseline then split differently (another OpenBLAS kernel set changed
nearly every prefill cell of the default grid, up to 7e-4). Here nothing goes through BLAS:
columns are scaled by powers of two (exact), every sum is math.fsum (exactly rounded, so
independent of order), products are elementwise, and the tiny systems are solved in Python
floats. The few columns make exhaustive active sets affordable: the optimum is the best of
the subsets whose unconstrained solution is non-negative.
"""

import itertools
import math

import numpy as np


def nnls_weighted(design: np.ndarray, y: np.ndarray, weight: np.ndarray) -> np.ndarray:
    """c >= 0 minimising sum(weight * (y - design @ c)**2); design has a handful of columns.

    Returns: float64[k] (zeros when no subset of columns gives a non-negative solution)."""
    design = np.asarray(design, dtype=np.float64)
    y = np.asarray(y, dtype=np.float64)
    weight = np.asarray(weight, dtype=np.float64)
    k = design.shape[1]
    scale = np.array([_pow2_scale(design[:, j]) for j in range(k)])
    cols = [design[:, j] * scale[j] for j in range(k)]  # exact: scaled by a power of two
    gram = [[math.fsum(weight * cols[a] * cols[b]) for b in range(k)] for a in range(k)]
    rhs = [math.fsum(weight * cols[a] * y) for a in range(k)]
    best = np.zeros(k)
    best_cost = math.fsum(weight * y * y)
    for size in range(1, k + 1):
        for subset in itertools.combinations(range(k), size):
            sol = _solve([[gram[a][b] for b in subset] for a in subset], [rhs[a] for a in subset])
            if sol is None or min(sol) < 0.0:
                continue
            fit = np.zeros_like(y)
            for j, c in zip(subset, sol, strict=True):
                fit = fit + cols[j] * c
            resid = y - fit
            cost = math.fsum(weight * resid * resid)
            if cost < best_cost:
                best_cost = cost
                best = np.zeros(k)
                best[list(subset)] = sol
    return best * scale


def _pow2_scale(col: np.ndarray) -> float:
    """A power of two that brings the column's largest magnitude into [0.5, 1)."""
    top = float(np.abs(col).max()) if col.size else 0.0
    if top == 0.0 or not math.isfinite(top):
        return 1.0
    return math.ldexp(1.0, -math.frexp(top)[1])


def _solve(a: list[list[float]], b: list[float]) -> list[float] | None:
    """x with a x = b by Gaussian elimination with partial pivoting (Python floats); None when
    a is singular to working precision."""
    n = len(b)
    m = [row[:] + [rhs] for row, rhs in zip(a, b, strict=True)]
    size = max((abs(v) for row in a for v in row), default=0.0)
    for col in range(n):
        pivot = max(range(col, n), key=lambda r: abs(m[r][col]))
        if abs(m[pivot][col]) <= 1e-13 * size:
            return None
        m[col], m[pivot] = m[pivot], m[col]
        for r in range(col + 1, n):
            f = m[r][col] / m[col][col]
            for c in range(col, n + 1):
                m[r][c] -= f * m[col][c]
    x = [0.0] * n
    for r in range(n - 1, -1, -1):
        s = m[r][n] - math.fsum(m[r][c] * x[c] for c in range(r + 1, n))
        x[r] = s / m[r][r]
    return x
