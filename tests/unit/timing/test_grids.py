"""Grid layout, extrapolation, exactness against the models, cache and build entry point."""

import json
from dataclasses import replace

import numpy as np
import pytest
from vidur_fast.kernels.codes import KV_RULE_PER_REQUEST, KV_RULE_SUM, N_COUNTERS
from vidur_fast.kernels.timing import TimingParams

from tests.helpers.timing_samples import (
    SMALL,
    decode_time,
    prefill_time,
    synthetic_samples,
    tok_time,
)
from vidur_fast.catalog import get_model
from vidur_fast.errors import ProfileError
from vidur_fast.timing.build import timing_from_samples, timing_params
from vidur_fast.timing.cache import cache_key, entry_paths
from vidur_fast.timing.fit import LAYER_TOKEN_OPS, baseline, fit_all
from vidur_fast.timing.grids import (
    batch_axis,
    build_grids,
    chunk_axis,
    evaluate_points,
    kv_axis,
    token_axis,
)

GQA = get_model("meta-llama/Meta-Llama-3-8B")  # 32 q heads, 8 kv heads
MHA = get_model("meta-llama/Llama-2-7b-hf")


@pytest.fixture(scope="module")
def samples():
    return synthetic_samples()


@pytest.fixture(scope="module")
def models(samples):
    return fit_all(samples, SMALL)


@pytest.fixture(scope="module")
def grids(models):
    return build_grids(models, SMALL, tp=2, pp=2)


# ---- layout ----


def test_grid_shapes_dtypes_and_zero_edges(grids):
    t, b, g, c, gc = 4096, 64, 16, 2048, 32
    assert grids.tok_ms.shape == grids.kv_save_ms.shape == (t + 1,)
    assert grids.allreduce_ms.shape == grids.sendrecv_ms.shape == (t + 1,)
    assert grids.decode_ms.shape == (b + 1, t // g + 1)
    assert grids.prefill_ms.shape == (t // g + 1, c // gc + 1)
    assert grids.counters.dtype == np.int64 and grids.counters.shape == (N_COUNTERS,)
    assert not grids.counters.any()
    for name in ("tok_ms", "kv_save_ms", "allreduce_ms", "sendrecv_ms", "decode_ms", "prefill_ms"):
        arr = getattr(grids, name)
        assert arr.dtype == np.float64 and arr.flags.c_contiguous
        assert np.isfinite(arr).all() and (arr >= 0).all(), name
    assert not grids.decode_ms[0].any() and not grids.prefill_ms[:, 0].any()
    assert grids.tok_ms[0] == grids.kv_save_ms[0] == 0.0


def test_axes_match_kernel_indexing():
    assert kv_axis(SMALL)[3] == 3 * 16 and chunk_axis(SMALL)[5] == 5 * 32
    assert token_axis(SMALL)[-1] == 4096 and batch_axis(SMALL)[-1] == 64


def test_collectives_zero_without_parallelism(models):
    g = build_grids(models, SMALL, tp=1, pp=1)
    assert not g.allreduce_ms.any() and not g.sendrecv_ms.any()
    cfg = replace(SMALL, nccl_launch_overhead_ms=0.02)
    g2 = build_grids(models, cfg, tp=2, pp=1)
    base = build_grids(models, SMALL, tp=2, pp=1)
    np.testing.assert_allclose(g2.allreduce_ms[1:] - base.allreduce_ms[1:], 0.02, rtol=1e-12)
    assert g2.allreduce_ms[0] == 0.0 and not g2.sendrecv_ms.any()


def test_tok_ms_is_sum_of_layer_ops_without_kv_save(models, grids):
    n = np.array([1.0, 64.0, 1000.0, 3000.0])
    want = sum(evaluate_points(models[op], n[:, None]) for op in LAYER_TOKEN_OPS)
    np.testing.assert_allclose(grids.tok_ms[n.astype(int)], want, rtol=1e-12)
    kv = evaluate_points(models["attn_kv_cache_save"], n[:, None])
    np.testing.assert_array_equal(grids.kv_save_ms[n.astype(int)], kv)


def test_monotone_sanity(grids):
    assert grids.tok_ms[4096] > grids.tok_ms[1024] > grids.tok_ms[8]
    assert grids.decode_ms[64, -1] > grids.decode_ms[64, 10] > 0
    assert grids.decode_ms[64, 10] > grids.decode_ms[1, 10]
    assert grids.prefill_ms[100, -1] > grids.prefill_ms[100, 2] > 0
    assert grids.prefill_ms[-1, 4] > grids.prefill_ms[0, 4]


# ---- exactness: grid == model at grid points ----


def _random_grid_points(rng, n_rows, n_cols, k=400):
    return rng.integers(1, n_rows, k), rng.integers(0, n_cols, k)


def _sklearn_value(m, X):
    """The model through sklearn's own predict (regressor times the work baseline)."""
    kv = X[:, 1] if X.shape[1] > 1 else None
    return m.estimator.predict(X) * baseline(m, X[:, 0], kv)


def _dominated(outer, kv, s_outer, s_kv):
    """Points some sample dominates in both coordinates (the measured support)."""
    s_outer, s_kv = np.asarray(s_outer), np.asarray(s_kv)
    return np.array([((s_outer >= o) & (s_kv >= k)).any() for o, k in zip(outer, kv, strict=True)])


def test_decode_grid_equals_model(models, grids):
    rng = np.random.default_rng(1)
    b, j = _random_grid_points(rng, *grids.decode_ms.shape)
    X = np.column_stack([b, j * SMALL.kv_granularity]).astype(float)
    np.testing.assert_array_equal(grids.decode_ms[b, j], evaluate_points(models["decode"], X))
    d = synthetic_samples().decode
    inside = _dominated(X[:, 0], X[:, 1], d.batch_size, d.kv_len)
    assert inside.sum() > 10
    np.testing.assert_allclose(
        grids.decode_ms[b, j][inside], _sklearn_value(models["decode"], X[inside]), rtol=1e-12
    )


def test_prefill_grid_equals_model(models, grids):
    rng = np.random.default_rng(2)
    j, c = _random_grid_points(rng, *grids.prefill_ms.shape[::-1])[::-1]
    c = np.maximum(c, 1)
    X = np.column_stack([c * SMALL.chunk_granularity, j * SMALL.kv_granularity]).astype(float)
    np.testing.assert_array_equal(grids.prefill_ms[j, c], evaluate_points(models["prefill"], X))
    p = synthetic_samples().prefill
    inside = _dominated(X[:, 0], X[:, 1], p.chunk, p.kv_len)
    assert inside.sum() > 5
    np.testing.assert_allclose(
        grids.prefill_ms[j, c][inside], _sklearn_value(models["prefill"], X[inside]), rtol=1e-12
    )


def test_blocked_2d_evaluation_matches_one_block(models, grids, monkeypatch):
    from vidur_fast.timing import grids as grids_mod

    monkeypatch.setattr(grids_mod, "_BLOCK_CELLS", 1000)  # many row blocks
    small_blocks = build_grids(models, SMALL, tp=2, pp=2)
    np.testing.assert_array_equal(small_blocks.decode_ms, grids.decode_ms)
    np.testing.assert_array_equal(small_blocks.prefill_ms, grids.prefill_ms)


def test_token_grid_equals_model_inside_support(models, grids):
    n = np.arange(1, 1025)
    want = _sklearn_value(models["attn_kv_cache_save"], n[:, None].astype(float))
    np.testing.assert_allclose(grids.kv_save_ms[n], want, rtol=1e-12)


def test_plain_fit_grid_is_the_regressor(samples):
    cfg = replace(SMALL, work_normalized=False)
    m = fit_all(samples, cfg)["decode"]
    assert not m.normalized
    g = build_grids({**fit_all(samples, SMALL), "decode": m}, cfg, tp=1, pp=1)
    np.testing.assert_allclose(
        g.decode_ms[5, 1:20],
        m.estimator.predict(np.column_stack([np.full(19, 5.0), np.arange(1, 20) * 16.0])),
        rtol=1e-12,
    )


# ---- extrapolation ----


def test_token_extrapolation_is_linear_and_continuous(models, grids):
    m = models["attn_kv_cache_save"]
    n_max = int(m.outer_max)
    assert n_max == 1024
    edge = _sklearn_value(m, np.array([[1024.0]]))[0]
    assert grids.kv_save_ms[n_max] == pytest.approx(edge, rel=1e-12)
    steps = np.diff(grids.kv_save_ms[n_max:])
    np.testing.assert_allclose(steps, steps.mean(), rtol=1e-6)
    assert steps.mean() > 0
    # 4x past the data, still within 10% of the true linear cost
    assert grids.kv_save_ms[4096] == pytest.approx(tok_time(4096), rel=0.1)


def test_decode_extrapolation_beyond_staircase(grids):
    g = SMALL.kv_granularity
    for b, kv in [(64, 4096), (32, 4096), (8, 4000), (64, 256)]:
        got = grids.decode_ms[b, kv // g]
        assert got == pytest.approx(decode_time(b, kv), rel=0.15), (b, kv)
    row = grids.decode_ms[16]
    assert (np.diff(row[1024 // g :]) >= -1e-12).all()  # past the edge: non-decreasing


def test_prefill_extrapolation_beyond_max_model_len(grids):
    g, gc = SMALL.kv_granularity, SMALL.chunk_granularity
    for c, kv in [(512, 2048), (2048, 0), (1024, 4096), (2048, 4096)]:
        got = grids.prefill_ms[kv // g, c // gc]
        assert got == pytest.approx(prefill_time(c, kv), rel=0.15), (c, kv)


def test_polynomial_regressor_grids(samples):
    cfg = replace(SMALL, regressor="polynomial", polynomial_degree=2)
    g = build_grids(fit_all(samples, cfg), cfg, tp=2, pp=2)
    assert np.isfinite(g.prefill_ms).all() and (g.prefill_ms >= 0).all()
    assert g.decode_ms[16, 32] == pytest.approx(decode_time(16, 512), rel=0.1)


def test_empty_families_give_zero_grids(samples):
    empty = samples.decode.iloc[:0]
    s = replace(samples, decode=empty, prefill=samples.prefill.iloc[:0])
    models = fit_all(s, SMALL)
    g = build_grids(models, SMALL, tp=1, pp=1)
    assert not g.decode_ms.any() and not g.prefill_ms.any()
    assert models["decode"].stats["empty"]


# ---- params ----


def test_timing_params_overheads_only_for_gqa():
    cfg = replace(
        SMALL,
        decode_batching_overhead=0.1,
        prefill_batching_overhead=0.1,
        cpu_overhead_ms=0.5,
        kv_rule="per_request",
    )
    p = timing_params(GQA, 2, 4, cfg)
    assert isinstance(p, TimingParams)
    assert (p.decode_overhead, p.prefill_overhead) == (0.1, 0.1)
    assert (p.g, p.gc, p.layers_per_stage, p.tp, p.pp) == (16, 32, 8, 2, 4)
    assert p.kv_rule == KV_RULE_PER_REQUEST and p.cpu_overhead_ms == 0.5
    q = timing_params(MHA, 1, 1, cfg)
    assert (q.decode_overhead, q.prefill_overhead) == (0.0, 0.0)
    assert timing_params(MHA, 1, 1, SMALL).kv_rule == KV_RULE_SUM


def test_grids_feed_the_timing_kernel(samples, tmp_path):
    from vidur_fast.kernels.timing import stage_time_ms_nb

    tm = timing_from_samples(samples, GQA, 2, 2, replace(SMALL, cache_dir=str(tmp_path)))
    t = stage_time_ms_nb(tm.grids, tm.params, 100, 10, 5000, 1, 300, 90 * 90, False)
    assert np.isfinite(t) and t > 0
    stage_time_ms_nb(tm.grids, tm.params, 10**6, 1, 0, 0, 0, 0, True)  # past the token edge
    assert tm.grids.counters[0] > 0


def test_eager_launch_floor_applies_to_prefill_steps_only(samples, tmp_path):
    from vidur_fast.kernels.timing import stage_time_ms_nb

    tm = timing_from_samples(samples, GQA, 2, 2, replace(SMALL, cache_dir=str(tmp_path)))
    floored = tm.params._replace(eager_ms_per_layer=100.0)
    layers = tm.params.layers_per_stage
    pre = (100, 10, 5000, 1, 300, 90 * 90, True)
    dec = (10, 10, 5000, 0, 0, 0, True)
    hit = (11, 10, 5000, 1, 300, 1, True)  # a cached prompt: one new token, a decode batch
    assert stage_time_ms_nb(tm.grids, tm.params, *pre) < 100.0 * layers
    assert stage_time_ms_nb(tm.grids, floored, *pre) == pytest.approx(
        100.0 * layers + tm.params.cpu_overhead_ms + tm.params.cpu_overhead_per_seq_ms * 11
    )
    assert stage_time_ms_nb(tm.grids, floored, *dec) == stage_time_ms_nb(tm.grids, tm.params, *dec)
    assert stage_time_ms_nb(tm.grids, floored, *hit) == stage_time_ms_nb(tm.grids, tm.params, *hit)
    graphed = floored._replace(graph_max_tokens=100)  # a mixed batch within the captured sizes
    assert stage_time_ms_nb(tm.grids, graphed, *pre) == stage_time_ms_nb(tm.grids, tm.params, *pre)


# ---- cache ----


def _cfg(tmp_path, mode="use", **kw):
    return replace(SMALL, cache_dir=str(tmp_path), cache_mode=mode, **kw)


def test_cache_round_trip_identical(samples, tmp_path):
    first = timing_from_samples(samples, GQA, 2, 2, _cfg(tmp_path))
    second = timing_from_samples(samples, GQA, 2, 2, _cfg(tmp_path))
    assert not first.meta["from_cache"] and second.meta["from_cache"]
    assert first.meta["key"] == second.meta["key"]
    for name in first.grids._fields:
        np.testing.assert_array_equal(getattr(first.grids, name), getattr(second.grids, name))
    assert second.params == first.params
    assert second.meta["fit"]["decode"]["n"] == first.meta["fit"]["decode"]["n"]
    npz, side = entry_paths(tmp_path, first.meta["key"])
    record = json.loads(side.read_text())
    assert set(record["arrays"]) == {f for f in first.grids._fields if f != "counters"}
    assert not list(tmp_path.glob("*.tmp"))


def test_corrupted_cache_is_detected_and_rebuilt(samples, tmp_path):
    first = timing_from_samples(samples, GQA, 2, 2, _cfg(tmp_path))
    npz, _ = entry_paths(tmp_path, first.meta["key"])
    raw = bytearray(npz.read_bytes())
    raw[len(raw) // 2] ^= 0xFF
    npz.write_bytes(bytes(raw))
    rebuilt = timing_from_samples(samples, GQA, 2, 2, _cfg(tmp_path))
    assert not rebuilt.meta["from_cache"]
    assert "checksum" in rebuilt.meta["cache_miss"] or "unreadable" in rebuilt.meta["cache_miss"]
    np.testing.assert_array_equal(rebuilt.grids.prefill_ms, first.grids.prefill_ms)
    assert timing_from_samples(samples, GQA, 2, 2, _cfg(tmp_path)).meta["from_cache"]


def test_require_mode_raises_profile_error(samples, tmp_path):
    with pytest.raises(ProfileError, match="cache_mode"):
        timing_from_samples(samples, GQA, 2, 2, _cfg(tmp_path, "require"))
    timing_from_samples(samples, GQA, 2, 2, _cfg(tmp_path))
    assert timing_from_samples(samples, GQA, 2, 2, _cfg(tmp_path, "require")).meta["from_cache"]
    _, side = entry_paths(tmp_path, cache_key(samples, SMALL, model=GQA.name, tp=2, pp=2))
    side.write_text("{not json")
    with pytest.raises(ProfileError, match="sidecar"):
        timing_from_samples(samples, GQA, 2, 2, _cfg(tmp_path, "require"))


def test_ignore_never_writes_and_refresh_rebuilds(samples, tmp_path):
    timing_from_samples(samples, GQA, 2, 2, _cfg(tmp_path, "ignore"))
    assert not list(tmp_path.iterdir())
    timing_from_samples(samples, GQA, 2, 2, _cfg(tmp_path, "refresh"))
    assert len(list(tmp_path.glob("*.npz"))) == 1
    again = timing_from_samples(samples, GQA, 2, 2, _cfg(tmp_path, "refresh"))
    assert not again.meta["from_cache"]


def test_cache_key_tracks_values_not_run_time_settings(samples):
    def key(s=samples, **kw):
        return cache_key(s, replace(SMALL, **kw), model=GQA.name, tp=2, pp=2)

    base = key()
    assert key(n_estimators=11) != base
    assert key(kv_granularity=32) != base
    assert key(nccl_launch_overhead_ms=0.02) != base
    assert key(cpu_overhead_ms=1.0) == base
    assert key(decode_batching_overhead=0.1, kv_rule="per_request", cache_mode="use") == base
    assert key(s=synthetic_samples(seed=1)) != base
    assert cache_key(samples, SMALL, model=GQA.name, tp=4, pp=2) != base


def test_progress_bar_goes_to_a_terminal_stderr_only(samples, tmp_path, capsys, monkeypatch):
    import io
    import sys

    timing_from_samples(samples, GQA, 1, 1, _cfg(tmp_path, "ignore"), progress=True)
    captured = capsys.readouterr()
    # not a terminal: no bar in logs, one line for the phase
    assert captured.out == "" and "\r" not in captured.err
    assert captured.err.startswith("timing: ") and captured.err.count("\n") == 1

    class Terminal(io.StringIO):
        def isatty(self):
            return True

    term = Terminal()
    monkeypatch.setattr(sys, "stderr", term)
    timing_from_samples(samples, GQA, 1, 1, _cfg(tmp_path, "ignore"), progress=True)
    assert "timing" in term.getvalue() and capsys.readouterr().out == ""
