"""metrics.h5 and requests.parquet read back equal the in-memory Result."""

import dataclasses
import json

import h5py
import numpy as np
import pandas as pd
from numpy.testing import assert_allclose, assert_array_equal

from tests.helpers.outputs_fixtures import write_plain
from vidur_fast.outputs import read_run
from vidur_fast.outputs.plots import _series_panels
from vidur_fast.outputs.schema import GROUP_COLUMNS
from vidur_fast.outputs.timeseries import downsample, replica_timeseries


def _same_frame(a: pd.DataFrame, b: pd.DataFrame) -> None:
    assert list(a.columns) == list(b.columns)
    for c in a.columns:
        x, y = a[c].to_numpy(), b[c].to_numpy()
        if x.dtype.kind == "f":
            assert_array_equal(np.isnan(x), np.isnan(y.astype(float)), err_msg=c)
            assert_array_equal(x[~np.isnan(x)], y[~np.isnan(x)], err_msg=c)
        else:
            assert_array_equal(x, y, err_msg=c)


def test_h5_tables_equal_the_result(small_result, small_run_dir):
    run = read_run(small_run_dir)
    assert len(run.requests) == 300 == len(small_result.requests)
    _same_frame(run.requests, small_result.requests)
    _same_frame(run.batches, small_result.batches)
    _same_frame(run.replicas, small_result.replicas)
    assert run.tbt_histogram.sum() == small_result.summary["tbt"]["count"]
    assert_array_equal(run.tbt_histogram, small_result.tbt_histogram)


def test_h5_timeseries_per_replica(small_result, small_run_dir):
    run = read_run(small_run_dir)
    b = small_result.batches
    assert sorted(run.timeseries) == [0, 1]
    assert sum(len(f) for f in run.timeseries.values()) == len(b)
    num_blocks = small_result.summary["num_blocks_per_replica"]
    for r, frame in run.timeseries.items():
        mine = b[b["replica"] == r]
        assert list(frame.columns[:1]) == ["time_s"]
        assert_array_equal(frame["time_s"], mine["start_s"])
        for c in ("batch_size", "num_tokens", "waiting_requests", "preemptions"):
            assert_array_equal(frame[c], mine[c], err_msg=c)  # the batch log's own names
        assert_allclose(frame["kv_usage_fraction"], mine["alloc_blocks"] / num_blocks)
        assert frame["kv_usage_fraction"].max() <= small_result.replicas["kv_usage_peak"][r] + 1e-12
    # some queueing happened, so the waiting series is not trivially zero
    assert max(f["waiting_requests"].max() for f in run.timeseries.values()) > 0


def test_h5_units_and_root_attributes(small_result, small_run_dir):
    with h5py.File(small_run_dir / "metrics.h5") as f:
        for group in ("requests", "batches", "replicas", "tbt_histogram"):
            for name, ds in f[group].items():
                assert ds.attrs["unit"] and ds.attrs["description"], (group, name)
                # every column written is documented in the schema
                assert name in GROUP_COLUMNS[group], (group, name)
        for g in f["timeseries"].values():
            for name, ds in g.items():
                assert name in GROUP_COLUMNS["timeseries"] and ds.attrs["unit"]
        assert f["requests/prefill_e2e_time"].attrs["unit"] == "s"
        assert f["timeseries/replica_0/kv_usage_fraction"].attrs["unit"] == "fraction"
        cfg = json.loads(f.attrs["config_json"])
        assert cfg == json.loads((small_run_dir / "config.json").read_text())
        assert f.attrs["timing_cache_key"] == small_result.summary["timing_cache_key"]
        assert f.attrs["format_version"] == 4
        versions = json.loads(f.attrs["data_versions"])
        assert versions["timing"]["key"] == small_result.summary["timing_cache_key"]
        assert "numpy" in versions["packages"]
        summary = json.loads(f.attrs["summary_json"])
        assert summary["num_completed"] == small_result.summary["num_completed"]


# names one concept has had in some output; every output must use at most one of each set
ALIASES = (
    {"batch_size", "size"},
    {"num_tokens", "n_tokens", "tokens"},
    {"num_prefill_tokens", "n_prefill_tokens", "prefill_tokens"},
    {"num_decode_tokens", "n_decode_tokens", "decode_tokens"},
    {"num_cached_tokens", "n_cached_tokens"},
    {"waiting_requests", "waiting"},
    {"preemptions", "preempted"},
    {"alloc_blocks", "kv_blocks"},
    {"kv_usage_fraction", "kv_use"},
)


def test_batches_and_timeseries_spell_shared_columns_alike(small_run_dir):
    with h5py.File(small_run_dir / "metrics.h5") as f:
        batches = set(f["batches"])
        series = {c for g in f["timeseries"].values() for c in g}
    events = json.loads((small_run_dir / "trace.json").read_text())["traceEvents"]
    args = {a for e in events if e["ph"] in "XC" for a in e["args"]}
    shared = {"batch_size", "num_tokens", "num_prefill_tokens", "num_decode_tokens"}
    shared |= {"num_cached_tokens", "waiting_requests", "preemptions"}
    assert shared <= batches & series & args
    for names in ALIASES:
        used = names & (batches | series | args)
        assert len(used) <= 1, f"one concept, several names: {sorted(used)}"
    assert "start_s" in batches and "time_s" in series  # formation time; the sample time


def test_format_2_batch_columns_read_under_the_current_names(small_run_dir, tmp_path):
    # format_version 2 stored /batches under the kernel's field names
    import shutil

    from vidur_fast.engine.batch_store import BATCH_LOG_NAMES

    old = tmp_path / "old"
    shutil.copytree(small_run_dir, old)
    with h5py.File(old / "metrics.h5", "r+") as f:
        f.attrs["format_version"] = 2
        for field, name in BATCH_LOG_NAMES.items():
            f.move(f"batches/{name}", f"batches/{field}")
    before, after = read_run(small_run_dir), read_run(old)
    _same_frame(after.batches[list(before.batches.columns)], before.batches)
    assert sorted(after.batches.columns) == sorted(before.batches.columns)


def test_documented_pandas_snippet(small_run_dir):
    with h5py.File(small_run_dir / "metrics.h5") as f:
        req = pd.DataFrame({k: v[()] for k, v in f["requests"].items()})
        ts0 = pd.DataFrame({k: v[()] for k, v in f["timeseries/replica_0"].items()})
    assert len(req) == 300 and "prefill_e2e_time" in req
    assert len(ts0) > 0


def test_parquet_equals_requests(small_result, small_run_dir):
    back = pd.read_parquet(small_run_dir / "requests.parquet")
    _same_frame(back, small_result.requests)


def test_same_result_gives_identical_bytes(small_result, small_run_dir, tmp_path):
    a = small_run_dir
    b = write_plain(
        small_result, tmp_path / "b", write_trace=True, write_plots=True, write_parquet=True
    )
    files = sorted(p.relative_to(a) for p in a.rglob("*") if p.is_file())
    assert len(files) >= 8
    for rel in files:
        assert (a / rel).read_bytes() == (b / rel).read_bytes(), rel


class _FrameLog:
    """A batch store backed by a DataFrame (same reading interface as BatchStore)."""

    def __init__(self, frame):
        self._frame = frame

    def __len__(self):
        return len(self._frame)

    def frame(self):
        return self._frame.copy()

    def column_names(self):
        return list(self._frame.columns)

    def column(self, name):
        return self._frame[name].to_numpy()

    def columns(self):
        return ((c, self._frame[c].to_numpy()) for c in self._frame.columns)


def test_extra_batch_column_is_carried(small_result, tmp_path):
    # a counter the batch log may gain later shows up in timeseries, units and plots
    batches = small_result.batches.copy()
    batches["spec_accepted"] = np.arange(len(batches)) % 3
    result = dataclasses.replace(small_result, batch_log=_FrameLog(batches))
    path = write_plain(result, tmp_path / "run")
    run = read_run(path)
    with h5py.File(path / "metrics.h5") as f:
        assert f["timeseries/replica_1/spec_accepted"].attrs["unit"] == "1"
    for r, frame in run.timeseries.items():
        mine = batches[batches["replica"] == r]
        assert frame["spec_accepted"].sum() == mine["spec_accepted"].sum()
    assert "spec_accepted" in [p[0] for p in _series_panels(run.timeseries)]


def test_prefix_cache_hits_per_batch_add_up_to_the_replica_totals(small_result, tmp_path):
    # vllm_v1 with prefix caching; preempted requests hit their own blocks when resumed
    path = write_plain(small_result, tmp_path / "run")
    run = read_run(path)
    totals = run.replicas.set_index("replica")["prefix_cache_hit_tokens"]
    assert totals.sum() > 0
    with h5py.File(path / "metrics.h5") as f:
        assert f["batches/num_cached_tokens"].attrs["unit"] == "tokens"
    for r, frame in run.timeseries.items():
        mine = run.batches[run.batches["replica"] == r]
        hits = mine["num_cached_tokens"].sum()
        assert hits == totals[r] and frame["num_cached_tokens"].sum() == hits
        rate = hits / (hits + mine["num_prefill_tokens"].sum())
        assert_allclose(frame["prefix_cache_hit_rate"].iloc[-1], rate)
    assert "prefix_cache_hit_rate" in [p[0] for p in _series_panels(run.timeseries)]


def test_no_hit_rate_without_prefix_caching(pp_result, tmp_path):
    run = read_run(write_plain(pp_result, tmp_path / "run"))  # sarathi: no prefix cache
    assert (run.batches["num_cached_tokens"] == 0).all()
    assert all("prefix_cache_hit_rate" not in f for f in run.timeseries.values())


def test_pipeline_run_round_trips(pp_result, tmp_path):
    run = read_run(write_plain(pp_result, tmp_path / "pp"))
    assert run.pp == 2
    _same_frame(run.batches, pp_result.batches)
    ts = replica_timeseries(pp_result.batches, pp_result.replicas)
    assert sum(len(f) for f in ts.values()) == len(pp_result.batches)


def test_downsample_keeps_means():
    t = np.linspace(0.0, 10.0, 10_001)
    y = np.where(t < 5.0, 1.0, 3.0)
    tt, yy = downsample(t, y, 100)
    assert tt.shape[0] == 100 and yy.shape[0] == 100
    assert_allclose(yy[:49], 1.0)
    assert_allclose(yy[51:], 3.0)
    same_t, same_y = downsample(t[:50], y[:50], 100)
    assert_array_equal(same_t, t[:50])
    assert_array_equal(same_y, y[:50])


def test_big_run_timeseries_are_the_batches_of_each_replica(
    small_result, small_run_dir, tmp_path, monkeypatch
):
    # above the size threshold nothing is copied: each replica's samples are its rows of
    # /batches, and read_run rebuilds the same frames as the full layout
    import vidur_fast.outputs.h5 as h5

    monkeypatch.setattr(h5, "TIMESERIES_FULL_MAX_ROWS", 10)
    path = write_plain(small_result, tmp_path / "big")
    with h5py.File(path / "metrics.h5") as f:
        assert f["timeseries"].attrs["layout"] == "batches_by_replica"
        assert list(f["timeseries"]) == []
    with h5py.File(small_run_dir / "metrics.h5") as f:
        assert f["timeseries"].attrs["layout"] == "columns"
    full, rows = read_run(small_run_dir).timeseries, read_run(path).timeseries
    assert sorted(full) == sorted(rows) == [0, 1]
    for r in full:
        _same_frame(full[r], rows[r])


def test_format_3_batch_row_timeseries_still_read(
    small_result, small_run_dir, tmp_path, monkeypatch
):
    # files of format_version 2-3 stored each replica's rows of /batches as `batch_row`
    import vidur_fast.outputs.h5 as h5

    monkeypatch.setattr(h5, "TIMESERIES_FULL_MAX_ROWS", 10)
    path = write_plain(small_result, tmp_path / "old")
    b = small_result.batches
    with h5py.File(path / "metrics.h5", "r+") as f:
        f.attrs["format_version"] = 3
        f["timeseries"].attrs["layout"] = "batch_row"
        for r in (0, 1):
            rows = np.flatnonzero(b["replica"] == r)
            f.create_group(f"timeseries/replica_{r}")["batch_row"] = rows[::-1] if r else rows
    full, old = read_run(small_run_dir).timeseries, read_run(path).timeseries
    assert sorted(old) == [0, 1]
    _same_frame(full[0], old[0])
    # the stored rows are what is read (replica 1's written reversed, so read reversed)
    assert_array_equal(old[1]["time_s"].to_numpy(), full[1]["time_s"].to_numpy()[::-1])
