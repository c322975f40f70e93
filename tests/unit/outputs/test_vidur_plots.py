"""Vidur's main-line plots/ files: the distribution pandas' rank(method="first", pct=True)
gives, ties in request order and requests without a value left out, exact when read back."""

import numpy as np
import pandas as pd

from vidur_fast.metrics.table import Columns
from vidur_fast.outputs.vidur_layout import TIME_METRICS, main_cdf, write_vidur_plots


def _pandas_cdf(req: pd.DataFrame, metric: str) -> pd.DataFrame:
    values = req[["request_id", metric]].dropna()
    cdf = values[metric].rank(method="first", pct=True)
    out = pd.DataFrame({"Request Id": values["request_id"], metric: values[metric], "cdf": cdf})
    return out.sort_values("cdf", kind="stable").reset_index(drop=True)


def _requests(n: int, seed: int) -> dict:
    rng = np.random.default_rng(seed)
    cols = {"request_id": rng.permutation(n).astype(np.int64)}
    for k, metric in enumerate(TIME_METRICS):
        v = np.round(rng.exponential(1.0, n), k % 3)  # rounding: many ties
        v[rng.random(n) < 0.1] = np.nan  # requests without the metric
        v[rng.random(n) < 0.05] = 1e-7 * rng.random()  # tiny values print in exponent form
        cols[metric] = v
    return cols


def test_main_cdf_is_pandas_rank_first():
    cols = _requests(2_000, seed=3)
    frame = pd.DataFrame(cols)
    for metric in TIME_METRICS:
        want = _pandas_cdf(frame, metric)
        ids, vals, cdf = main_cdf(cols["request_id"], cols[metric])
        assert np.array_equal(ids, want["Request Id"].to_numpy())
        assert np.array_equal(vals, want[metric].to_numpy())
        assert np.array_equal(cdf, want["cdf"].to_numpy())


def test_the_files_read_back_as_pandas_wrote_them(tmp_path):
    cols = _requests(500, seed=4)
    write_vidur_plots(Columns(cols), tmp_path, "main")
    frame = pd.DataFrame(cols)
    for metric in TIME_METRICS:
        got = pd.read_csv(tmp_path / f"{metric}.csv", index_col=0)
        want = _pandas_cdf(frame, metric)
        assert (tmp_path / f"{metric}.csv").read_text().startswith(f",Request Id,{metric},cdf\n")
        pd.testing.assert_frame_equal(got, want, check_exact=True, check_index_type=False)
