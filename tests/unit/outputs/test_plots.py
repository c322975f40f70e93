"""Plots are written when asked (and only then), for one run, many replicas and overlays."""

import numpy as np
import pandas as pd

from tests.helpers.outputs_fixtures import write_plain
from vidur_fast.outputs import read_run
from vidur_fast.outputs.plots import (
    histogram_cdf,
    plot_latency_cdfs,
    plot_timeseries,
    sample_cdf,
    write_plots,
)

PNG = b"\x89PNG\r\n\x1a\n"


def _is_png(path) -> bool:
    return path.is_file() and path.stat().st_size > 5000 and path.read_bytes()[:8] == PNG


def test_plots_written_when_asked(small_run_dir):
    plots = small_run_dir / "plots"
    names = sorted(p.name for p in plots.iterdir())
    assert names == ["latency_cdfs.png", "replica_ttft.png", "timeseries.png"]
    assert all(_is_png(plots / n) for n in names)


def test_no_plots_or_trace_by_default(small_result, tmp_path):
    path = write_plain(small_result, tmp_path / "plain")
    assert sorted(p.name for p in path.iterdir()) == [
        ".vidur-fast-run",
        "config.json",
        "metrics.h5",
        "request_metrics.csv",
        "summary.json",
    ]


def test_many_replicas_are_drawn_as_mean_and_band(small_run_dir, tmp_path):
    # twelve fake replicas: above the per-line limit the plot aggregates them
    run = read_run(small_run_dir)
    base = run.timeseries[0]
    run.timeseries = {r: base.assign(time_s=base["time_s"] + 0.01 * r) for r in range(12)}
    out = plot_timeseries(run, tmp_path / "ts.png", max_points=300)
    assert out is not None and _is_png(out)


def test_overlay_and_single_run_files(small_run_dir, tmp_path):
    a = read_run(small_run_dir)
    b = read_run(small_run_dir)
    b.name = "other"
    out = plot_latency_cdfs([a, b], tmp_path / "overlay.png")
    assert _is_png(out)
    files = write_plots(a, tmp_path / "single")
    assert [f.name for f in files] == ["latency_cdfs.png", "timeseries.png", "replica_ttft.png"]


def test_cdf_helpers():
    x, p = sample_cdf(np.array([3.0, np.nan, 1.0, 2.0]))
    np.testing.assert_array_equal(x, [1.0, 2.0, 3.0])
    np.testing.assert_allclose(p, [1 / 3, 2 / 3, 1.0])
    x, p = sample_cdf(np.arange(10_000.0), points=100)
    assert x.shape[0] == 100 and p[-1] == 1.0 and x[-1] == 9999.0
    e, c = histogram_cdf(np.array([0, 2, 0, 2]), np.array([1.0, 2.0, 3.0, 4.0]))
    np.testing.assert_array_equal(e, [2.0, 4.0])
    np.testing.assert_allclose(c, [0.5, 1.0])
    empty = pd.DataFrame({"prefill_e2e_time": []})
    assert sample_cdf(empty["prefill_e2e_time"].to_numpy())[0].shape[0] == 0
