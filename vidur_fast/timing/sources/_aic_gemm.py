"""Measured GEMM tables of aiconfigurator and their interpolation to a model's (n, k)."""

import math
from dataclasses import dataclass, replace
from functools import lru_cache
from pathlib import Path

import numpy as np

from vidur_fast.numerics import portable_math as pm
from vidur_fast.timing.sources._aic_data import SOURCE, pick_fastest_kernel, read_table
from vidur_fast.timing.sources._common import join, profile_error


@dataclass(frozen=True)
class GemmTable:
    """Measured GEMM latency t[m, n, k] in ms on the table's (m, n, k) axes; NaN = not measured."""

    m: np.ndarray
    n: np.ndarray
    k: np.ndarray
    t: np.ndarray

    def without(self, n: int | None = None, k: int | None = None) -> "GemmTable":
        """The table with one measured n (or k) removed, for hold-out checks."""
        out = self
        if n is not None:
            keep = out.n != n
            out = replace(out, n=out.n[keep], t=out.t[:, keep, :])
        if k is not None:
            keep = out.k != k
            out = replace(out, k=out.k[keep], t=out.t[:, :, keep])
        return out


def gemm_table(path: Path, dtype: str, envelope: bool = True) -> GemmTable:
    """The measured GEMM table of one parquet file and gemm_dtype (cached per file version);
    envelope=True: its fastest-kernel envelope (fastest_envelope)."""
    st = path.stat()
    table = _gemm_table(path, st.st_mtime_ns, dtype)
    return _enveloped(path, st.st_mtime_ns, dtype) if envelope else table


def fastest_envelope(t: np.ndarray) -> np.ndarray:
    """t'(m, n, k) = the smallest measured latency at any (m', n', k') >= (m, n, k), NaN kept.

    A GEMM can always be run by a kernel measured at a shape at least as large in every
    dimension (zero padding), so the fastest kernel's latency cannot grow when a dimension
    shrinks. A measured cell above that envelope is a kernel configuration (or a timing
    state) the fastest available one beats; the tables have such cells, most of all at
    small m (e.g. B200's per-tensor FP8 CUTLASS kernel: 30 us at m=4 between neighbours of
    11 us). docs/validation.md, "Decode step on B200 and H200", gives the evidence."""
    e = np.where(np.isfinite(t), t, np.inf)
    for axis in range(e.ndim):
        e = np.flip(np.minimum.accumulate(np.flip(e, axis), axis=axis), axis)
    return np.where(np.isfinite(t), e, np.nan)


@lru_cache(maxsize=16)
def _enveloped(path: Path, mtime_ns: int, dtype: str) -> GemmTable:
    table = _gemm_table(path, mtime_ns, dtype)
    return replace(table, t=fastest_envelope(table.t))


@lru_cache(maxsize=16)
def _gemm_table(path: Path, mtime_ns: int, dtype: str) -> GemmTable:
    df = read_table(path, ("gemm_dtype", "m", "n", "k", "latency"), ("kernel_source",))
    rows = df[df.gemm_dtype == dtype]
    if rows.empty:
        raise profile_error(
            SOURCE,
            f"{path} has no gemm_dtype={dtype} rows; "
            f"gemm_dtype: {join(sorted(df.gemm_dtype.unique()))}",
        )
    rows = pick_fastest_kernel(rows, ["m", "n", "k"])
    axes = [np.sort(rows[c].unique()).astype(np.int64) for c in ("m", "n", "k")]
    t = np.full([len(a) for a in axes], np.nan)
    idx = [np.searchsorted(a, rows[c].to_numpy()) for a, c in zip(axes, "mnk", strict=True)]
    t[idx[0], idx[1], idx[2]] = rows.latency.to_numpy()
    return GemmTable(axes[0], axes[1], axes[2], t)


def _bracket(axis: np.ndarray, x: float) -> tuple[int, int, float, float]:
    """(i0, i1, weight of i1 in log space, work scale) placing x on a measured axis.

    Below the axis the smallest shape is used as is (latency floor); above it the largest shape
    is scaled by x / largest (the GEMM is compute- or weight-bound there: linear in the dim).
    """
    if x <= axis[0]:
        return 0, 0, 0.0, 1.0
    if x >= axis[-1]:
        return len(axis) - 1, len(axis) - 1, 0.0, x / axis[-1]
    i1 = int(np.searchsorted(axis, x))
    if axis[i1] == x:
        return i1, i1, 0.0, 1.0
    i0 = i1 - 1
    return i0, i1, math.log(x / axis[i0]) / math.log(axis[i1] / axis[i0]), 1.0


def interpolate_gemm(table: GemmTable, n: int, k: int) -> np.ndarray:
    """Latency (ms) of an m x k by k x n GEMM at every measured m (NaN where underivable).

    Bilinear interpolation of log(latency) over (log n, log k) between the four bracketing
    measured shapes, at each measured m: exact where latency is a power law in n and k (linear
    in compute- and weight-bound regimes, flat in the launch-bound one). Where a corner is not
    measured at some m, the nearest measured shape (log distance) is scaled by the FLOP ratio.
    """
    n0, n1, wn, sn = _bracket(table.n, n)
    k0, k1, wk, sk = _bracket(table.k, k)
    with np.errstate(divide="ignore", invalid="ignore"):
        lt = pm.log(table.t)
        mix = (
            (1 - wn) * (1 - wk) * lt[:, n0, k0]
            + (1 - wn) * wk * lt[:, n0, k1]
            + wn * (1 - wk) * lt[:, n1, k0]
            + wn * wk * lt[:, n1, k1]
        )
    out = pm.exp(mix) * sn * sk
    ln, lk = pm.log(table.n)[:, None], pm.log(table.k)[None, :]
    dist = np.abs(ln - math.log(n)) + np.abs(lk - math.log(k))
    for i in np.flatnonzero(~np.isfinite(out)):
        ok = np.isfinite(table.t[i])
        if not ok.any():
            continue
        j = np.unravel_index(np.argmin(np.where(ok, dist, np.inf)), dist.shape)
        out[i] = table.t[i][j] * (n * k) / (table.n[j[0]] * table.k[j[1]])
    return out


def gemm_holdout_errors(table: GemmTable, n: int | None = None, k: int | None = None):
    """Relative errors of interpolate_gemm at a measured n (or k) after removing it from the
    table: one value per measured (m, other dim) point."""
    reduced = table.without(n=n, k=k)
    errs = []
    if n is not None:
        i = int(np.searchsorted(table.n, n))
        for j, kk in enumerate(table.k):
            errs.append(interpolate_gemm(reduced, n, int(kk)) / table.t[:, i, j] - 1)
    else:
        j = int(np.searchsorted(table.k, k))
        for i, nn in enumerate(table.n):
            errs.append(interpolate_gemm(reduced, int(nn), k) / table.t[:, i, j] - 1)
    e = np.concatenate(errs)
    return e[np.isfinite(e)]
