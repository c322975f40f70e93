"""PredictorConfig validation, per-operator fitting, and held-out accuracy."""

import ast
import inspect
from dataclasses import fields, replace

import numpy as np
import pandas as pd
import pytest

from tests.conftest import SHARED
from tests.helpers.timing_samples import samples_of
from vidur_fast.catalog import get_device, get_model, get_node
from vidur_fast.config import predictor as config_mod
from vidur_fast.config.predictor import PredictorConfig
from vidur_fast.config.validate import validate_predictor
from vidur_fast.errors import ConfigError, ProfileError
from vidur_fast.timing.build import held_out_accuracy
from vidur_fast.timing.fit import fit_op, mape, model_value, predict

FAST = PredictorConfig(n_estimators=10)

# ---- config ----


def test_defaults_are_valid():
    validate_predictor(PredictorConfig())


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"kv_granularity": 0}, "predictor.kv_granularity: must be >= 1 (got 0)"),
        ({"chunk_granularity": -3}, "predictor.chunk_granularity"),
        ({"n_estimators": 0}, "predictor.n_estimators"),
        ({"min_samples_split": 1}, "predictor.min_samples_split"),
        ({"max_depth": 0}, "predictor.max_depth"),
        ({"max_tokens": 4}, "predictor.max_tokens"),
        ({"max_batch_size": 0}, "predictor.max_batch_size"),
        ({"regressor": "svm"}, "predictor.regressor"),
        ({"cache_mode": "maybe"}, "predictor.cache_mode"),
        ({"kv_rule": "max"}, "predictor.kv_rule"),
        ({"decode_batching_overhead": -0.1}, "predictor.decode_batching_overhead"),
        ({"nccl_launch_overhead_ms": float("nan")}, "predictor.nccl_launch_overhead_ms"),
        ({"polynomial_degree": 9}, "predictor.polynomial_degree"),
        ({"max_tokens": 64, "kv_granularity": 128}, "predictor.kv_granularity"),
        ({"chunk_granularity": 1, "max_tokens": 2**20}, "predictor.chunk_granularity"),
        ({"n_estimators": 2.5}, "predictor.n_estimators: must be an integer"),
    ],
)
def test_validation_names_the_field(change, field):
    with pytest.raises(ConfigError) as err:
        validate_predictor(replace(PredictorConfig(), **change))
    assert str(err.value).startswith(field)


def test_vidur_compat_settings_are_valid():
    # Vidur main: gc = 1 (exact chunk keys), per-request kv rule, 0.1 overheads, 4K grids
    validate_predictor(
        PredictorConfig(
            max_tokens=4096,
            max_batch_size=128,
            max_prefill_chunk=4096,
            chunk_granularity=1,
            kv_rule="per_request",
            decode_batching_overhead=0.1,
            prefill_batching_overhead=0.1,
            nccl_launch_overhead_ms=0.02,
            n_estimators=250,
            max_depth=8,
            min_samples_split=5,
        )
    )


def test_every_config_field_has_a_docstring():
    tree = ast.parse(inspect.getsource(config_mod.PredictorConfig))
    body = tree.body[0].body
    documented = {
        stmt.target.id
        for stmt, nxt in zip(body, body[1:], strict=False)
        if isinstance(stmt, ast.AnnAssign)
        and isinstance(nxt, ast.Expr)
        and isinstance(nxt.value, ast.Constant)
    }
    assert documented == {f.name for f in fields(PredictorConfig)}


# ---- fitting ----


def _linear_1d(n_max=1024, noise=0.01, seed=0):
    rng = np.random.default_rng(seed)
    n = np.arange(8, n_max + 1, 8, dtype=float)
    y = (0.01 + 3e-5 * n) * (1 + noise * rng.standard_normal(len(n)))
    return n[:, None], y


def test_fit_is_deterministic_and_matches_sklearn_bit_for_bit():
    X, y = _linear_1d()
    a, b = fit_op("op", "tokens", X, y, FAST), fit_op("op", "tokens", X, y, FAST)
    q = np.linspace(0, 1500, 5000)[:, None]
    np.testing.assert_array_equal(predict(a.estimator, q), predict(b.estimator, q))
    a.estimator.set_params(n_jobs=1)  # sklearn's own sum is ordered only single-threaded
    np.testing.assert_array_equal(predict(a.estimator, q), a.estimator.predict(q))


def test_baseline_recovers_linear_cost():
    X, y = _linear_1d()
    m = fit_op("op", "tokens", X, y, FAST)
    assert m.outer_max == 1024 and m.normalized
    a, b = m.base_coef
    assert a == pytest.approx(0.01, rel=0.1) and b == pytest.approx(3e-5, rel=0.05)
    assert m.stats["n"] == len(y) and m.stats["train_mape_pct"] < 2


def test_baseline_is_non_negative_and_positive_at_zero():
    X = np.array([[8.0], [16.0], [32.0], [64.0]])
    y = np.array([0.5, 0.4, 0.4, 0.4])  # decreasing noise would fit a negative slope
    m = fit_op("op", "tokens", X, y, FAST)
    assert (m.base_coef >= 0).all() and m.base_coef[0] >= 0.2
    np.testing.assert_allclose(model_value(m, X), y, rtol=0.15)


def test_plain_fit_models_raw_time():
    X, y = _linear_1d()
    m = fit_op("op", "tokens", X, y, replace(FAST, work_normalized=False))
    assert not m.normalized
    m.estimator.set_params(n_jobs=1)
    np.testing.assert_array_equal(model_value(m, X), m.estimator.predict(X))


def test_staircase_support_from_2d_samples():
    X = np.array([[1, 4096], [2, 2048], [4, 1024], [4, 512], [8, 256]], dtype=float)
    y = np.arange(1.0, 6.0)
    m = fit_op("decode", "decode", X, y, FAST)
    np.testing.assert_array_equal(m.stair_outer, [1, 2, 4, 8])
    np.testing.assert_array_equal(m.stair_kv, [4096, 2048, 1024, 256])
    assert (m.base_coef >= 0).all() and m.base_coef.shape == (3,)


def test_empty_and_dirty_inputs():
    m = fit_op("all_reduce", "tokens", np.zeros((0, 1)), np.zeros(0), FAST)
    assert m.empty and m.stats["empty"]
    X, y = _linear_1d()
    y[3] = np.nan
    assert fit_op("op", "tokens", X, y, FAST).stats["dropped"] == 1
    y[3] = -1.0
    with pytest.raises(ProfileError, match="op"):
        fit_op("op", "tokens", X, y, FAST)


def test_polynomial_fit():
    X, y = _linear_1d(noise=0.0)
    m = fit_op("op", "tokens", X, y, replace(FAST, regressor="polynomial", polynomial_degree=2))
    np.testing.assert_allclose(model_value(m, X), y, rtol=1e-6)


def test_mape_vidur_convention():
    assert mape(np.array([1.0, 2.0]), np.array([1.1, 2.0])) == pytest.approx(5.0)
    assert mape(np.array([0.0, 0.0]), np.array([0.0, 1.0])) == pytest.approx(50.0)


# ---- held-out accuracy ----


def _token_only_samples(X, y):
    return samples_of(pd.DataFrame({"op": "mlp_up_proj", "num_tokens": X[:, 0], "time_ms": y}))


def test_held_out_accuracy_is_deterministic():
    s = _token_only_samples(*_linear_1d(n_max=4096))
    a, b = held_out_accuracy(s, FAST), held_out_accuracy(s, FAST)
    pd.testing.assert_frame_equal(a, b)
    assert list(a["op"]) == ["mlp_up_proj"]
    row = a.iloc[0]
    assert row.n_test == round(0.2 * (row.n_test + row.n_train))
    assert row.mape_pct < 3


def _load_or_skip(source, model, device, node, tp, **kw):
    if not SHARED.is_dir():
        pytest.skip("shared profiles absent")
    sources = pytest.importorskip("vidur_fast.timing.sources")
    specs = get_model(model), get_device(device), get_node(node)
    return sources.load_samples(source, *specs, tp, 1, **kw)


def test_vidur_measured_mlp_accuracy():
    s = _load_or_skip(
        "vidur",
        "meta-llama/Llama-2-7b-hf",
        "h100",
        "h100_dgx",
        1,
        profile_dir=str(SHARED / "profiles" / "vidur_format"),
    )
    df = held_out_accuracy(replace(s, decode=s.decode.iloc[:0], prefill=s.prefill.iloc[:0]), FAST)
    tok = df[df.kind == "tokens"]
    assert len(tok) >= 9
    assert (tok.mape_pct <= 8).all(), tok


def test_aiconfigurator_accuracy():
    s = _load_or_skip("aiconfigurator", "meta-llama/Meta-Llama-3-8B", "h100", "h100_dgx", 1)
    df = held_out_accuracy(s, FAST)
    assert {"mlp_up_proj", "decode", "prefill"} <= set(df.op)
    assert (df.mape_pct <= 8).all(), df
