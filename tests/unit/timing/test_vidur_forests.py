"""Vidur's own forests (predictor.vidur_forests): tree seeds drawn in Vidur's training order
from one RandomState, Vidur's features, grids read straight off the forests."""

from dataclasses import replace

import numpy as np
import pytest
from sklearn.ensemble import RandomForestRegressor

from tests.conftest import SHARED
from tests.helpers.timing_samples import SMALL, synthetic_samples
from vidur_fast.config.validate import validate_predictor
from vidur_fast.config.vidur_flags import read_vidur_command
from vidur_fast.errors import ConfigError
from vidur_fast.timing.fit import (
    VIDUR_FIT_ORDER,
    fit_all,
    model_value,
    op_tables,
    predict,
    vidur_features,
)
from vidur_fast.timing.grids import batch_axis, build_grids, kv_axis, token_axis

VIDUR = replace(SMALL, n_estimators=4, vidur_forests=True, work_normalized=False, random_state=7)


@pytest.fixture(scope="module")
def samples():
    return synthetic_samples()


@pytest.fixture(scope="module")
def models(samples):
    return fit_all(samples, VIDUR)


def _global_rng_forests(samples, cfg, tables=None):
    """What Vidur does: np.random.seed(seed), then unseeded forests fit in its order."""
    tables = tables or op_tables(samples)
    state = np.random.get_state()
    try:
        np.random.seed(cfg.random_state)
        out = {}
        for name in VIDUR_FIT_ORDER:
            kind, X, y = tables[name]
            forest = RandomForestRegressor(
                n_estimators=cfg.n_estimators,
                max_depth=cfg.max_depth,
                min_samples_split=cfg.min_samples_split,
            )
            out[name] = (kind, X, forest.fit(vidur_features(kind, X), y))
        return out
    finally:
        np.random.set_state(state)


def test_forests_equal_unseeded_forests_after_a_global_seed(samples, models):
    for name, (kind, X, forest) in _global_rng_forests(samples, VIDUR).items():
        want = forest.predict(vidur_features(kind, X))
        np.testing.assert_array_equal(model_value(models[name], X), want, err_msg=name)


def test_a_missing_compute_op_still_takes_its_seeds(samples, models):
    # a model without a post-attention norm: Vidur fits that op on zeros, drawing its seeds
    tok = samples.token_ops
    fewer = replace(samples, token_ops=tok[tok.op != "post_attention_layernorm"])
    other = fit_all(fewer, VIDUR)
    assert other["post_attention_layernorm"].empty
    X = op_tables(samples)["decode"][1]
    np.testing.assert_array_equal(model_value(other["decode"], X), model_value(models["decode"], X))


def test_prefill_is_keyed_on_kv_and_chunk_squared(samples, models):
    m = models["prefill"]
    X = np.array([[100.0, 64.0], [300.0, 0.0], [513.0, 128.0]])  # (chunk, kv)
    want = predict(m.estimator, np.column_stack([X[:, 1], X[:, 0] ** 2]))
    np.testing.assert_array_equal(model_value(m, X), want)


def test_grids_are_the_forests_as_they_are(models):
    g = build_grids(models, VIDUR, tp=2, pp=2)
    n = token_axis(VIDUR)
    assert g.tok_ms[0] == 0.0
    big = n > 1024  # past the profiled token counts: flat, as Vidur's tables are
    assert np.all(g.tok_ms[big] == g.tok_ms[1025])
    b, kv = batch_axis(VIDUR), kv_axis(VIDUR)
    pts = np.array([[1.0, 0.0], [17.0, 512.0], [64.0, 4096.0]])
    want = predict(models["decode"].estimator, pts)
    got = [g.decode_ms[int(i), int(k) // VIDUR.kv_granularity] for i, k in pts]
    np.testing.assert_array_equal(got, want)
    assert b[-1] == 64 and kv[-1] == VIDUR.max_tokens


def test_needs_a_plain_forest():
    for change in ({"work_normalized": True}, {"regressor": "polynomial"}):
        with pytest.raises(ConfigError, match=r"^predictor\.vidur_forests"):
            validate_predictor(replace(VIDUR, **change))


def _predictor(extra, predictor="random_forrest"):
    profiles = SHARED / "profiles" / "vidur_format"
    argv = [
        f"--{predictor}_execution_time_predictor_config_compute_input_file",
        f"{profiles}/compute/{{DEVICE}}/{{MODEL}}/mlp.csv",
        *extra,
    ]
    return read_vidur_command(argv).config.predictor


def test_vidur_main_seeds_its_forests_with_seed():
    p = _predictor(["--seed", "7"])
    assert p.vidur_forests and p.random_state == 7
    assert _predictor([]).random_state == 42


def test_canary_and_linear_regression_keep_the_plain_fit():
    canary = _predictor(["--replica_scheduler_config_type", "vllm_v1"])
    assert not canary.vidur_forests
    lr_type = ["--execution_time_predictor_config_type", "linear_regression"]
    lr = _predictor(lr_type, "linear_regression")
    assert not lr.vidur_forests
