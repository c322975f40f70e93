"""log, exp and power whose last bit does not depend on the CPU.

numpy evaluates float64 log, exp and power with its own SIMD code on CPUs with AVX-512 and
with the C library elsewhere. The two differ in the last bit on a few percent of inputs (exp,
power) or about one in 10^4 (log), and the timing fits turn such bits into different grids, hence
different simulated times on different machines. These functions evaluate every element with
the C library through Python's math module, which is what numpy itself computes on a CPU
without AVX-512: the grids of every machine are those of that path.

The arrays they see are small (table axes and lookups, ~150,000 elements per grid build), so
the element-by-element evaluation costs milliseconds. Special values follow numpy: log(0) is
-inf, log of a negative number NaN, exp past the float range inf.
"""

import math

import numpy as np


def _log1(x: float) -> float:
    if x > 0.0:
        return math.log(x)
    return -math.inf if x == 0.0 else math.nan


def _exp1(x: float) -> float:
    try:
        return math.exp(x)
    except OverflowError:
        return math.inf


def _pow1(base: float, exponent: float) -> float:
    try:
        return math.pow(base, exponent)
    except (OverflowError, ValueError):
        # domain edges (0 to a negative power, a negative base to a fraction, overflow):
        # numpy's special values, which every implementation gives alike
        with np.errstate(all="ignore"):
            return float(np.power(np.float64(base), np.float64(exponent)))


_LOG = np.frompyfunc(_log1, 1, 1)
_EXP = np.frompyfunc(_exp1, 1, 1)
_POW = np.frompyfunc(_pow1, 2, 1)


def _float_result(out):
    """An array of float64, or a Python float for scalar arguments."""
    if isinstance(out, np.ndarray):
        return out.astype(np.float64)
    return float(out)


def log(x):
    """Natural logarithm, element by element (array in, float64 array out; scalar in, float)."""
    return _float_result(_LOG(np.asarray(x, dtype=np.float64)))


def exp(x):
    """e ** x, element by element."""
    return _float_result(_EXP(np.asarray(x, dtype=np.float64)))


def power(base, exponent):
    """base ** exponent, element by element with numpy's broadcasting."""
    return _float_result(
        _POW(np.asarray(base, dtype=np.float64), np.asarray(exponent, dtype=np.float64))
    )
