"""Per-operator regressors fit on OperatorSamples, with the work baseline and measured support
that grids.py needs to interpolate and extrapolate.

Every operator is one of three kinds, each with its "work" features phi (what time grows with
once kernels are saturated):
    tokens  (1-D, x = num_tokens):          phi = [n]
    decode  (2-D, x = (batch, kv_len)):     phi = [b, b*kv]              (KV read)
    prefill (2-D, x = (chunk, kv_len)):     phi = [c, kv, c*kv + c*c/2]  (KV read, attended pairs)
2-D features are always ordered (outer, kv) so one code path serves decode and prefill.

The baseline a + sum(b_i * phi_i) (non-negative, least squares in relative error) does two jobs:
the regressor models time / baseline, a slowly varying efficiency that a piecewise-constant
forest interpolates well between sparse samples; and past the measured support time is the
edge value scaled by baseline(x) / baseline(edge), i.e. linear in the work features.
"""

import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace

import numpy as np

from vidur_fast.config.predictor import PredictorConfig
from vidur_fast.errors import ProfileError
from vidur_fast.timing.nnls import nnls_weighted
from vidur_fast.timing.samples import EXTRA_TOKEN_OPS, TOKEN_OPS, OperatorSamples

KV_SAVE = "attn_kv_cache_save"
LAYER_TOKEN_OPS = tuple(op for op in TOKEN_OPS if op != KV_SAVE)
_PREDICT_THREADS = 4
_PREDICT_CHUNK = 1 << 17

# ---- work features ----


def work_features(kind: str, outer, kv=None) -> list:
    """The work features phi of `kind` (arrays broadcast like outer and kv)."""
    if kind == "tokens":
        return [outer]
    if kind == "decode":
        return [outer, outer * kv]
    if kind == "prefill":
        return [outer, kv, outer * kv + outer * outer / 2.0]
    raise ValueError(f"unknown operator kind {kind!r}")


def _n_work(kind: str) -> int:
    return len(work_features(kind, np.zeros(1), np.zeros(1)))


# ---- fitted model ----


@dataclass(frozen=True, eq=False)
class OpModel:
    """One operator's regressor with its work baseline and measured support."""

    name: str
    kind: str
    estimator: object | None
    """Fitted sklearn regressor; None when the operator has no samples (predicts 0)."""
    base_coef: np.ndarray = field(default_factory=lambda: np.ones(1))
    """Work baseline [a, b_1, ...] >= 0 (a > 0)."""
    normalized: bool = True
    """The regressor models time / baseline (else raw time, as Vidur)."""
    outer_max: float = 0.0
    """Largest measured num_tokens (tokens) or batch/chunk (decode/prefill)."""
    stair_outer: np.ndarray = field(default_factory=lambda: np.zeros(0))
    """2-D only: sorted distinct measured outer values."""
    stair_kv: np.ndarray = field(default_factory=lambda: np.zeros(0))
    """2-D only: largest measured kv among samples with outer >= stair_outer[i]."""
    stats: dict = field(default_factory=dict)
    vidur: bool = False
    """Vidur's own forest (fit_vidur): raw time on Vidur's features (vidur_features), read as
    it is everywhere, flat past the support like Vidur's grids."""

    @property
    def empty(self) -> bool:
        return self.estimator is None


def baseline(m: OpModel, outer, kv=None):
    """The work baseline of m at outer (and kv); broadcasts like them."""
    phi = work_features(m.kind, outer, kv)
    return m.base_coef[0] + sum(c * p for c, p in zip(m.base_coef[1:], phi, strict=True))


def edge_scale(m: OpModel, outer, kv, outer_e, kv_e):
    """Factor from the regressor's output at edge point (outer_e, kv_e) to the time at
    (outer, kv); exactly 1 (raw) or the baseline (normalized) when the point is the edge."""
    b = baseline(m, outer, kv)
    return b if m.normalized else b / baseline(m, outer_e, kv_e)


def vidur_features(kind: str, X: np.ndarray) -> np.ndarray:
    """Points (outer[, kv]) as Vidur's models take them: prefill attention is keyed
    (kv_cache_size, prefill_chunk_size**2), decode (batch_size, kv_cache_size), token ops
    num_tokens. A monotone transform moves a forest's split midpoints, so chunk**2 is not
    interchangeable with chunk."""
    X = np.asarray(X, dtype=np.float64)
    if kind == "prefill":
        return np.column_stack([X[:, 1], X[:, 0] * X[:, 0]])
    return X


def model_value(m: OpModel, X: np.ndarray) -> np.ndarray:
    """Predicted time at points X inside the support (no extrapolation rule)."""
    if m.vidur:
        return predict(m.estimator, vidur_features(m.kind, X))
    kv = X[:, 1] if X.shape[1] > 1 else None
    return predict(m.estimator, X) * edge_scale(m, X[:, 0], kv, X[:, 0], kv)


# sklearn is imported inside functions: the import costs ~2 s and a cached load never fits.


def is_forest(estimator) -> bool:
    from sklearn.ensemble import RandomForestRegressor

    return isinstance(estimator, RandomForestRegressor)


def make_regressor(cfg: PredictorConfig, random_state=None):
    """A fresh, unfitted regressor with cfg's fixed hyper-parameters (forests seeded by
    random_state when given, a seed or a RandomState, else by cfg.random_state)."""
    from sklearn.ensemble import RandomForestRegressor
    from sklearn.linear_model import LinearRegression
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import PolynomialFeatures, StandardScaler

    if cfg.regressor == "random_forest":
        return RandomForestRegressor(
            n_estimators=cfg.n_estimators,
            max_depth=cfg.max_depth,
            min_samples_split=cfg.min_samples_split,
            random_state=cfg.random_state if random_state is None else random_state,
            n_jobs=-1,
        )
    # Scaling first keeps kv**3 (~1e15) from wrecking the least-squares conditioning.
    return make_pipeline(
        StandardScaler(), PolynomialFeatures(cfg.polynomial_degree), LinearRegression()
    )


# ---- prediction ----


def _forest_sum(trees, X: np.ndarray) -> np.ndarray:
    out = np.zeros(X.shape[0])
    for tree in trees:
        out += tree.predict(X, check_input=False)
    return out


def predict(estimator, X: np.ndarray) -> np.ndarray:
    """estimator.predict(X), deterministic for forests.

    sklearn sums a forest's trees in thread completion order when n_jobs > 1, so the last bits
    can differ between runs; here rows are split over threads and every row sums its trees in
    index order, which equals sklearn's n_jobs=1 result bit for bit.
    """
    X = np.asarray(X, dtype=np.float64)
    if not is_forest(estimator):
        step = _PREDICT_CHUNK
        parts = [estimator.predict(X[i : i + step]) for i in range(0, len(X), step)]
        return np.concatenate(parts) if parts else np.zeros(0)
    X32 = np.ascontiguousarray(X, dtype=np.float32)  # what sklearn's trees compare
    trees = estimator.estimators_
    if len(X32) < 4096:
        return _forest_sum(trees, X32) / len(trees)
    chunks = np.array_split(X32, _PREDICT_THREADS)
    with ThreadPoolExecutor(_PREDICT_THREADS) as pool:  # tree traversal releases the GIL
        parts = list(pool.map(lambda c: _forest_sum(trees, c), chunks))
    return np.concatenate(parts) / len(trees)


def mape(y: np.ndarray, pred: np.ndarray) -> float:
    """Mean absolute percentage error; a true 0 scores 0 if predicted 0 else 100 (Vidur)."""
    y = np.asarray(y, dtype=np.float64)
    pred = np.asarray(pred, dtype=np.float64)
    if len(y) == 0:
        return float("nan")
    err = np.where(y > 0, np.abs(pred - y) / np.where(y > 0, y, 1.0), (pred != 0) * 1.0)
    return float(100.0 * err.mean())


# ---- fitting ----


def clean_rows(
    name: str, X: np.ndarray, y: np.ndarray, dedupe: bool = True
) -> tuple[np.ndarray, np.ndarray, int]:
    """Finite rows, de-duplicated and sorted unless `dedupe` is False (Vidur's forests take the
    rows in source order, duplicates kept); negative times are a broken source, not noise."""
    ok = np.isfinite(X).all(axis=1) & np.isfinite(y)
    X, y = X[ok], y[ok]
    if (y < 0).any():
        raise ProfileError(f"samples.{name}: {int((y < 0).sum())} negative latencies")
    if (X < 0).any():
        raise ProfileError(f"samples.{name}: negative shape features")
    if not dedupe:
        return X, y, int((~ok).sum())
    rows = np.unique(np.column_stack([X, y]), axis=0)  # sorted, so fits see a fixed order
    return rows[:, :-1], rows[:, -1], int((~ok).sum())


def _stairs(X: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Measured outer values and the largest kv measured at any outer >= each of them."""
    outer, inv = np.unique(X[:, 0], return_inverse=True)
    kv_max = np.zeros(len(outer))
    np.maximum.at(kv_max, inv, X[:, 1])
    return outer, np.maximum.accumulate(kv_max[::-1])[::-1]


def _base_coef(kind: str, X: np.ndarray, y: np.ndarray) -> np.ndarray:
    """[a, b_1, ...] >= 0 of time ~ a + sum(b_i * phi_i), least squares in relative error."""
    kv = X[:, 1] if X.shape[1] > 1 else None
    design = np.column_stack([np.ones(len(y)), *work_features(kind, X[:, 0], kv)])
    pos = y > 0
    coef = np.zeros(design.shape[1])
    if pos.sum() >= 2:
        weight = 1.0 / y[pos] ** 2  # relative error: tiny and huge shapes weigh alike
        # the same bits on every CPU (nnls.py): a BLAS solve made grids machine-dependent
        coef = nnls_weighted(design[pos], y[pos], weight)
    # Keep the baseline away from 0 so time / baseline stays finite at tiny shapes.
    coef[0] = max(coef[0], 0.5 * float(y[pos].min()) if pos.any() else 1.0)
    return coef


def fit_op(name: str, kind: str, X: np.ndarray, y: np.ndarray, cfg: PredictorConfig) -> OpModel:
    """Fit one operator; no usable rows gives an empty (all-zero) model."""
    t0 = time.perf_counter()
    X, y, n_dropped = clean_rows(name, np.asarray(X, np.float64), np.asarray(y, np.float64))
    if len(y) == 0:
        stats = {"n": 0, "dropped": n_dropped, "empty": True}
        return OpModel(name, kind, None, np.r_[1.0, np.zeros(_n_work(kind))], stats=stats)
    stairs = _stairs(X) if kind != "tokens" else (np.zeros(0), np.zeros(0))
    shell = OpModel(
        name,
        kind,
        None,
        _base_coef(kind, X, y),
        cfg.work_normalized,
        float(X[:, 0].max()),
        *stairs,
    )
    kv = X[:, 1] if X.shape[1] > 1 else None
    target = y / baseline(shell, X[:, 0], kv) if cfg.work_normalized else y
    m = replace(shell, estimator=make_regressor(cfg).fit(X, target))
    stats = {
        "n": len(y),
        "dropped": n_dropped,
        "empty": False,
        "outer_range": [float(X[:, 0].min()), float(X[:, 0].max())],
        "train_mape_pct": round(mape(y, model_value(m, X)), 4),
        "base_coef": [float(c) for c in m.base_coef],
        "fit_s": round(time.perf_counter() - t0, 3),
    }
    if kv is not None:
        stats["kv_range"] = [float(kv.min()), float(kv.max())]
    return replace(m, stats=stats)


# ---- operator tables ----


def op_tables(samples: OperatorSamples) -> dict[str, tuple[str, np.ndarray, np.ndarray]]:
    """name -> (kind, X, y) for every operator a grid needs, in a fixed order."""
    tok = samples.token_ops
    out: dict[str, tuple[str, np.ndarray, np.ndarray]] = {}
    present = set(tok["op"].unique()) if len(tok) else set()
    for op in TOKEN_OPS + tuple(o for o in EXTRA_TOKEN_OPS if o in present):
        rows = tok[tok["op"] == op] if len(tok) else tok
        out[op] = ("tokens", _cols(rows, ["num_tokens"]), _cols(rows, ["time_ms"])[:, 0])
    out["decode"] = (
        "decode",
        _cols(samples.decode, ["batch_size", "kv_len"]),
        _cols(samples.decode, ["time_ms"])[:, 0],
    )
    out["prefill"] = (
        "prefill",
        _cols(samples.prefill, ["chunk", "kv_len"]),
        _cols(samples.prefill, ["time_ms"])[:, 0],
    )
    for comm in ("all_reduce", "send_recv"):
        frame = getattr(samples, comm)
        out[comm] = ("tokens", _cols(frame, ["num_tokens"]), _cols(frame, ["time_ms"])[:, 0])
    return out


def _cols(frame, names: list[str]) -> np.ndarray:
    if len(frame) == 0:
        return np.zeros((0, len(names)))
    missing = [n for n in names if n not in frame.columns]
    if missing:
        raise ProfileError(f"samples: frame lacks column(s) {', '.join(missing)}")
    return frame[names].to_numpy(dtype=np.float64)


def fit_all(samples: OperatorSamples, cfg: PredictorConfig, step=None) -> dict[str, OpModel]:
    """Fit every operator of samples; `step(name)` is called after each fit (progress)."""
    if cfg.vidur_forests:
        return fit_vidur(samples, cfg, step)
    models = {}
    for name, (kind, X, y) in op_tables(samples).items():
        models[name] = fit_op(name, kind, X, y, cfg)
        if step is not None:
            step(name)
    return models


# ---- Vidur's own forests ----

# The order in which Vidur main trains its models (SklearnExecutionTimePredictor: the compute
# ops, the KV-cache save, send/recv if PP > 1, all-reduce if TP > 1, then prefill and decode
# attention; the CPU-overhead models are skipped by default).
VIDUR_COMPUTE_OPS = (
    "attn_pre_proj",
    "attn_post_proj",
    "mlp_up_proj",
    "mlp_down_proj",
    "mlp_act",
    "input_layernorm",
    "post_attention_layernorm",
    "attn_rope",
    "add",
    KV_SAVE,
)
VIDUR_FIT_ORDER = (*VIDUR_COMPUTE_OPS, "send_recv", "all_reduce", "prefill", "decode")
_TREE_SEED_MAX = np.iinfo(np.int32).max


def fit_vidur(samples: OperatorSamples, cfg: PredictorConfig, step=None) -> dict[str, OpModel]:
    """Vidur's forests: every operator fit on raw time over its rows as the source gave them
    (file order, duplicate shapes kept), on Vidur's features, in Vidur's training order, with
    the trees' seeds drawn from one RandomState(cfg.random_state).

    Vidur builds RandomForestRegressor() with no random_state, so each forest draws one seed
    per tree from NumPy's global RNG, which Vidur's --seed seeds right before the models are
    trained; its final fits (GridSearchCV's refit) run one after another in that process, so
    the draws follow the training order. A compute op Vidur trains on a column it fills with
    zeros (post_attention_layernorm of a model without that norm) still takes its draws.
    """
    tables = op_tables(samples)
    order = [n for n in VIDUR_FIT_ORDER if n in tables]
    order += [n for n in tables if n not in order]
    rng = np.random.RandomState(cfg.random_state)
    models = {}
    for name in order:
        kind, X, y = tables[name]
        models[name] = _fit_vidur_op(name, kind, X, y, cfg, rng)
        if step is not None:
            step(name)
    return {name: models[name] for name in tables}


def _fit_vidur_op(name, kind, X, y, cfg: PredictorConfig, rng) -> OpModel:
    t0 = time.perf_counter()
    X, y, n_dropped = clean_rows(
        name, np.asarray(X, np.float64), np.asarray(y, np.float64), dedupe=False
    )
    if len(y) == 0:
        if name in VIDUR_COMPUTE_OPS and cfg.regressor == "random_forest":
            for _ in range(cfg.n_estimators):  # Vidur fits zeros here: same draws
                rng.randint(_TREE_SEED_MAX)
        stats = {"n": 0, "dropped": n_dropped, "empty": True}
        return OpModel(name, kind, None, np.r_[1.0, np.zeros(_n_work(kind))], stats=stats)
    est = make_regressor(cfg, random_state=rng).fit(vidur_features(kind, X), y)
    m = OpModel(name, kind, est, normalized=False, outer_max=float(X[:, 0].max()), vidur=True)
    stats = {
        "n": len(y),
        "dropped": n_dropped,
        "empty": False,
        "outer_range": [float(X[:, 0].min()), float(X[:, 0].max())],
        "train_mape_pct": round(mape(y, model_value(m, X)), 4),
        "fit_s": round(time.perf_counter() - t0, 3),
    }
    return replace(m, stats=stats)
