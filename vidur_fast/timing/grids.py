"""Evaluate fitted operator models on the dense TimingGrids layout (kernels/timing.py).

Inside the measured support a grid cell is the model's prediction (regressor, times the work
baseline when normalized; see fit.py). Past it, where random forests are flat, the value is
the prediction at the edge scaled by the work baseline:
    t(x) = t(edge(x)) * baseline(x) / baseline(edge(x))
so time grows linearly in the work features (tokens; b and b*kv; c, kv and c*kv + c^2/2).
edge(x) clamps the outer axis (tokens, batch, chunk) to its largest measured value, then the kv
axis to the largest kv measured at that outer value or above (the "staircase" left by memory
limits and kv + chunk <= max_model_len). The rule is continuous at the edge and, since the
baseline's coefficients are >= 0, never drops below the edge value.

Vidur's own forests (fit.fit_vidur) are read as they are at every grid point, flat past the
support, as Vidur's prediction tables are.

Random forests are piecewise constant: two points on the same side of every split threshold
of a feature predict the same value. So a forest is evaluated once per threshold cell that the
grid touches and the result is broadcast; this equals predict() at every grid point exactly.
"""

import numpy as np

from vidur_fast.config.predictor import PredictorConfig
from vidur_fast.errors import ProfileError
from vidur_fast.kernels.codes import N_COUNTERS
from vidur_fast.kernels.timing import TimingGrids
from vidur_fast.timing.fit import (
    KV_SAVE,
    LAYER_TOKEN_OPS,
    OpModel,
    edge_scale,
    is_forest,
    predict,
    vidur_features,
)
from vidur_fast.timing.samples import EXTRA_TOKEN_OPS

# Cells per block of 2-D evaluation (bounds temporaries to a few x 32 MB).
_BLOCK_CELLS = 1 << 22
GRID_FIELDS = ("tok_ms", "kv_save_ms", "allreduce_ms", "sendrecv_ms", "decode_ms", "prefill_ms")

# ---- axes ----


def token_axis(cfg: PredictorConfig) -> np.ndarray:
    """Token counts n = 0..T of the 1-D grids."""
    return np.arange(cfg.max_tokens + 1, dtype=np.float64)


def batch_axis(cfg: PredictorConfig) -> np.ndarray:
    """Decode batch sizes b = 0..B (rows of decode_ms)."""
    return np.arange(cfg.max_batch_size + 1, dtype=np.float64)


def kv_axis(cfg: PredictorConfig) -> np.ndarray:
    """kv lengths j*g, j = 0..T//g (decode_ms columns, prefill_ms rows)."""
    return np.arange(cfg.n_kv, dtype=np.float64) * cfg.kv_granularity


def chunk_axis(cfg: PredictorConfig) -> np.ndarray:
    """Equivalent prefill chunks c*gc, c = 0..C//gc (prefill_ms columns)."""
    return np.arange(cfg.n_chunk, dtype=np.float64) * cfg.chunk_granularity


# ---- forest cells ----


def _thresholds(forest, n_features: int) -> list[np.ndarray]:
    """Sorted distinct split thresholds of each feature over all trees."""
    per = [[] for _ in range(n_features)]
    for tree in forest.estimators_:
        t = tree.tree_
        split = t.feature >= 0  # leaves have feature -2
        for f in range(n_features):
            per[f].append(t.threshold[split & (t.feature == f)])
    return [np.unique(np.concatenate(p)) if p else np.zeros(0) for p in per]


def _cells(values: np.ndarray, thresholds: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """One representative value per threshold cell touched, and each value's cell."""
    # Trees test float32(x) <= threshold (float64); side="left" puts x == t left, as they do.
    x = values.astype(np.float32).astype(np.float64)
    cell = np.searchsorted(thresholds, x, side="left")
    _, first, inverse = np.unique(cell, return_index=True, return_inverse=True)
    return values[first], inverse.reshape(-1)


def evaluate_product(estimator, axes: list[np.ndarray], thresholds=None) -> np.ndarray:
    """estimator's prediction at every point of the Cartesian product of axes (1 or 2 axes).

    thresholds: the forest's _thresholds, when the caller already has them.
    """
    if is_forest(estimator):
        thr = thresholds if thresholds is not None else _thresholds(estimator, len(axes))
        cells = [_cells(ax, t) for ax, t in zip(axes, thr, strict=True)]
        reps = [c[0] for c in cells]
        small = _predict_product(estimator, reps)
        return small[np.ix_(*[c[1] for c in cells])]
    return _predict_product(estimator, axes)


def _predict_product(estimator, axes: list[np.ndarray]) -> np.ndarray:
    mesh = np.meshgrid(*axes, indexing="ij")
    X = np.column_stack([m.reshape(-1) for m in mesh])
    return predict(estimator, X).reshape([len(a) for a in axes])


# ---- support and extrapolation ----


def kv_limit(m: OpModel, outer: np.ndarray) -> np.ndarray:
    """Largest measured kv at clamped outer values (the staircase)."""
    i = np.searchsorted(m.stair_outer, outer, side="left")
    return m.stair_kv[np.minimum(i, len(m.stair_kv) - 1)]


def evaluate_points(m: OpModel, X: np.ndarray) -> np.ndarray:
    """The model with the extrapolation rule at scattered points X (n, 1 or 2 features)."""
    X = np.asarray(X, dtype=np.float64)
    if m.empty:
        return np.zeros(len(X))
    if m.vidur:
        return _finish(m, predict(m.estimator, vidur_features(m.kind, X)))
    o = X[:, 0]
    o_e = np.minimum(o, m.outer_max)
    if m.kind == "tokens":
        return _finish(m, predict(m.estimator, o_e[:, None]) * edge_scale(m, o, None, o_e, None))
    kv = X[:, 1]
    kv_e = np.minimum(kv, kv_limit(m, o_e))
    at_edge = predict(m.estimator, np.column_stack([o_e, kv_e]))
    return _finish(m, at_edge * edge_scale(m, o, kv, o_e, kv_e))


def _finish(m: OpModel, t: np.ndarray) -> np.ndarray:
    if not np.all(np.isfinite(t)):
        raise ProfileError(f"timing grid {m.name}: model produced non-finite times")
    # Polynomials may dip below zero between samples; a latency cannot.
    return np.maximum(t, 0.0)


def evaluate_tokens(m: OpModel, n: np.ndarray) -> np.ndarray:
    """1-D model on the token counts n; equals evaluate_points at every n."""
    if m.empty:
        return np.zeros(len(n))
    if m.vidur:
        return _finish(m, evaluate_product(m.estimator, [np.asarray(n, dtype=np.float64)]))
    n_e = np.minimum(n, m.outer_max)
    uniq, inverse = np.unique(n_e, return_inverse=True)
    at_edge = evaluate_product(m.estimator, [uniq])[inverse.reshape(-1)]
    return _finish(m, at_edge * edge_scale(m, n, None, n_e, None))


def evaluate_2d(m: OpModel, outer: np.ndarray, kv: np.ndarray, out=None) -> np.ndarray:
    """2-D model on the product outer x kv, shape (len(outer), len(kv)).

    Written into `out` (any strides, e.g. a transposed view) when given. Rows go in blocks so
    temporaries stay ~_BLOCK_CELLS whatever the grid size.
    """
    if out is None:
        out = np.zeros((len(outer), len(kv)))
    if m.empty:
        out[...] = 0.0
        return out
    if m.vidur:
        if m.kind == "prefill":  # Vidur's features (kv, chunk**2)
            out[...] = _finish(m, evaluate_product(m.estimator, [kv, outer * outer]).T)
        else:
            out[...] = _finish(m, evaluate_product(m.estimator, [outer, kv]))
        return out
    thr = _thresholds(m.estimator, 2) if is_forest(m.estimator) else None
    step = max(1, _BLOCK_CELLS // len(kv))
    for i in range(0, len(outer), step):
        out[i : i + step] = _evaluate_2d_block(m, outer[i : i + step], kv, thr)
    return out


def _evaluate_2d_block(m: OpModel, outer: np.ndarray, kv: np.ndarray, thr) -> np.ndarray:
    o_e = np.minimum(outer, m.outer_max)
    lim = kv_limit(m, o_e)
    rows, row_of = np.unique(o_e, return_inverse=True)
    # Edge kv values are grid kv values or a row's limit; evaluate each (row, kv) pair once.
    cols = np.unique(np.concatenate([kv[kv <= lim.max()], lim]))
    table = evaluate_product(m.estimator, [rows, cols], thr)
    kv_e = np.minimum(kv[None, :], lim[:, None])
    at_edge = table[row_of.reshape(-1)[:, None], np.searchsorted(cols, kv_e)]
    return _finish(m, at_edge * edge_scale(m, outer[:, None], kv[None, :], o_e[:, None], kv_e))


# ---- the grids ----


def build_grids(
    models: dict[str, OpModel],
    cfg: PredictorConfig,
    tp: int,
    pp: int,
    step=None,
    weights: dict[str, float] | None = None,
) -> TimingGrids:
    """Dense TimingGrids from fitted models; `step(stage)` is called after each stage.

    weights: share of the layers each token op runs in (MoE models: the dense MLP ops in the
    dense layers, the MoE ops in the MoE layers), so tok_ms is the mean layer; None (dense
    models): every op in every layer."""

    def done(stage: str) -> None:
        if step is not None:
            step(stage)

    n = token_axis(cfg)
    tok = np.zeros(len(n))
    for op in LAYER_TOKEN_OPS:  # fixed order: the float sum is reproducible
        if weights is None:
            tok += evaluate_tokens(models[op], n)
        else:
            tok += weights.get(op, 1.0) * evaluate_tokens(models[op], n)
    for op in EXTRA_TOKEN_OPS:
        if op in models:
            tok += (weights or {}).get(op, 1.0) * evaluate_tokens(models[op], n)
    kv_save = evaluate_tokens(models[KV_SAVE], n)
    done("grid token ops")

    allreduce = np.zeros(len(n))
    if tp > 1:
        allreduce = evaluate_tokens(models["all_reduce"], n) + cfg.nccl_launch_overhead_ms
    sendrecv = evaluate_tokens(models["send_recv"], n) if pp > 1 else np.zeros(len(n))
    done("grid collectives")

    b, kv, c = batch_axis(cfg), kv_axis(cfg), chunk_axis(cfg)
    decode = np.zeros((len(b), len(kv)))
    evaluate_2d(models["decode"], b[1:], kv, out=decode[1:])
    done("grid decode")

    prefill = np.zeros((len(kv), len(c)))
    evaluate_2d(models["prefill"], c[1:], kv, out=prefill[:, 1:].T)  # rows are chunks there
    done("grid prefill")

    for arr in (tok, kv_save, allreduce, sendrecv):
        arr[0] = 0.0  # zero tokens do no work
    return make_grids(
        tok_ms=tok,
        kv_save_ms=kv_save,
        allreduce_ms=allreduce,
        sendrecv_ms=sendrecv,
        decode_ms=decode,
        prefill_ms=prefill,
    )


def make_grids(**arrays: np.ndarray) -> TimingGrids:
    """TimingGrids from the named arrays (C-contiguous float64) and fresh zero counters."""
    fixed = {k: np.ascontiguousarray(arrays[k], dtype=np.float64) for k in GRID_FIELDS}
    return TimingGrids(**fixed, counters=np.zeros(N_COUNTERS, dtype=np.int64))
