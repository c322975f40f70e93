"""trace.json is valid trace-event JSON and agrees with the batch log and replica table."""

import json
import math
from collections import defaultdict

import numpy as np
import pandas as pd
import pytest
from numpy.testing import assert_allclose

from vidur_fast.config.sim import OutputConfig
from vidur_fast.errors import ConfigError
from vidur_fast.outputs.perfetto import stage_spans_ns, write_trace
from vidur_fast.outputs.writer import check_output_dir

REQUIRED = {
    "X": {"name", "ph", "ts", "dur", "pid", "tid", "args"},
    "C": {"name", "ph", "ts", "pid", "args"},
    "M": {"name", "ph", "pid", "args"},
}


def _load(path) -> list[dict]:
    doc = json.loads(path.read_text())
    assert isinstance(doc, dict) and isinstance(doc["traceEvents"], list)
    for ev in doc["traceEvents"]:
        assert ev["ph"] in REQUIRED, ev
        assert REQUIRED[ev["ph"]] <= set(ev), ev
        if ev["ph"] in "XC":
            assert isinstance(ev["ts"], float | int) and ev["ts"] >= 0
        if ev["ph"] == "X":
            assert ev["dur"] > 0
    return doc["traceEvents"]


def _tracks(events) -> dict:
    tracks = defaultdict(list)
    for ev in events:
        if ev["ph"] == "X":
            tracks[("X", ev["pid"], ev["tid"])].append(ev)
        elif ev["ph"] == "C":
            tracks[("C", ev["pid"], ev["name"])].append(ev)
    return tracks


def test_trace_matches_batches_and_replicas(small_result, small_run_dir):
    events = _load(small_run_dir / "trace.json")
    b, reps = small_result.batches, small_result.replicas
    xs = [e for e in events if e["ph"] == "X"]
    assert len(xs) == len(b)
    for c in ("num_tokens", "num_prefill_tokens", "num_decode_tokens", "batch_size"):
        assert sum(e["args"][c] for e in xs) == b[c].sum()  # args under the batch-log names
    args = set(xs[0]["args"])
    assert {"alloc_blocks", "waiting_requests", "preemptions", "kv_usage_fraction"} <= args
    assert {e["name"] for e in events if e["ph"] == "C"} == {"kv_use_pct", "waiting_requests"}
    span = small_result.summary["simulated_time_s"]
    for r in reps["replica"]:
        mine = [e for e in xs if e["pid"] == r]
        assert len(mine) == reps["batches"][r]
        # busy time of stage 0 from the trace equals the engine's busy fraction
        busy_s = sum(e["dur"] for e in mine) / 1e6
        assert_allclose(busy_s, reps["busy_fraction"][r] * span, rtol=1e-9)
        kv = [e for e in events if e["ph"] == "C" and e["pid"] == r and e["name"] == "kv_use_pct"]
        last = b[b["replica"] == r].iloc[-1]
        blocks = small_result.summary["num_blocks_per_replica"]
        assert kv[-1]["args"]["kv_use_pct"] == pytest.approx(
            100 * last["alloc_blocks"] / blocks, abs=1e-3
        )
    names = {e["args"]["name"] for e in events if e["ph"] == "M" and e["name"] == "process_name"}
    assert names == {"replica 0", "replica 1"}


def test_trace_tracks_are_monotonic_and_do_not_overlap(small_run_dir):
    tracks = _tracks(_load(small_run_dir / "trace.json"))
    assert {k[0] for k in tracks} == {"X", "C"}
    for key, evs in tracks.items():
        ts = np.array([e["ts"] for e in evs])
        assert (np.diff(ts) >= 0).all(), key
        if key[0] == "X":
            ends = ts + np.array([e["dur"] for e in evs])
            assert (ts[1:] >= ends[:-1] - 1e-3).all(), key
        else:
            vals = [next(iter(e["args"].values())) for e in evs]
            assert all(a != b for a, b in zip(vals, vals[1:], strict=False)), key


def test_pipeline_trace_has_one_track_per_stage(pp_result, tmp_path):
    path = tmp_path / "trace.json"
    n = write_trace(path, pp_result.batches, pp_result.replicas, pp=2)
    assert n == len(pp_result.batches)
    events = _load(path)
    tracks = _tracks(events)
    assert {(k[1], k[2]) for k in tracks if k[0] == "X"} == {(0, 0), (0, 1), (1, 0), (1, 1)}
    for key, evs in tracks.items():
        ts = np.array([e["ts"] for e in evs])
        assert (np.diff(ts) >= 0).all(), key
    begin, end = stage_spans_ns(pp_result.batches, 2)
    assert (begin[:, 1] >= end[:, 0]).all()
    end_ns = np.round(pp_result.batches["end_s"].to_numpy() * 1e9).astype(np.int64)
    assert (end[:, 1] == end_ns).all()
    start_ns = np.round(pp_result.batches["start_s"].to_numpy() * 1e9).astype(np.int64)
    assert (begin[:, 0] >= start_ns).all()


def _spans_by_loop(frame: pd.DataFrame, pp: int):
    """The engine's stage recurrence, one batch at a time."""
    free = defaultdict(lambda: [0] * pp)
    begin = np.zeros((len(frame), pp), dtype=np.int64)
    end = np.zeros_like(begin)
    for i, (r, start, stage, stop) in enumerate(
        frame[["replica", "start_ns", "stage_ns", "end_ns"]].itertuples(index=False)
    ):
        t = start
        for s in range(pp):
            b = max(t, free[r][s])
            t = stop if s == pp - 1 else b + stage
            begin[i, s], end[i, s] = b, t
            free[r][s] = t
    return begin, end


@pytest.mark.parametrize("pp", [1, 2, 4])
def test_stage_spans_equal_the_sequential_recurrence(pp):
    rng = np.random.default_rng(pp)
    n = 400
    rep = rng.integers(0, 3, n)
    start = np.cumsum(rng.integers(0, 5_000, n))
    stage = rng.integers(1_000, 9_000, n)
    frame = pd.DataFrame({"replica": rep, "start_ns": start, "stage_ns": stage})
    # end times from the engine rule with a last stage a bit longer than the others
    free = defaultdict(lambda: [0] * pp)
    ends = []
    for r, s0, d in zip(rep, start, stage, strict=True):
        t = s0
        for s in range(pp):
            t = max(t, free[r][s]) + (d + 700 if s == pp - 1 and pp > 1 else d)
            free[r][s] = t
        ends.append(t)
    frame["end_ns"] = ends
    expect_b, expect_e = _spans_by_loop(frame, pp)
    secs = pd.DataFrame(
        {
            "replica": rep,
            "start_s": frame["start_ns"] / 1e9,
            "stage_s": frame["stage_ns"] / 1e9,
            "end_s": frame["end_ns"] / 1e9,
        }
    )
    got_b, got_e = stage_spans_ns(secs, pp)
    np.testing.assert_array_equal(got_b, expect_b)
    np.testing.assert_array_equal(got_e, expect_e)


def test_sampling_and_window_shrink_the_trace(small_result, small_run_dir, tmp_path):
    b = small_result.batches
    path = tmp_path / "every.json"
    write_trace(path, b, small_result.replicas, 1, every=7)
    xs = [e for e in _load(path) if e["ph"] == "X"]
    for r in (0, 1):
        assert sum(e["pid"] == r for e in xs) == math.ceil((b["replica"] == r).sum() / 7)
    assert path.stat().st_size < (small_run_dir / "trace.json").stat().st_size / 4
    lo, hi = 20.0, 30.0
    path = tmp_path / "window.json"
    n = write_trace(path, b, small_result.replicas, 1, start_s=lo, end_s=hi)
    xs = [e for e in _load(path) if e["ph"] == "X"]
    inside = ((b["end_s"] >= lo) & (b["start_s"] <= hi)).sum()
    assert n == len(xs) == inside > 0
    for e in xs:
        assert e["ts"] + e["dur"] >= lo * 1e6 - 1e-3 and e["ts"] <= hi * 1e6 + 1e-3
    cs = [e for e in _load(path) if e["ph"] == "C"]
    assert cs and all(lo * 1e6 - 1e5 <= e["ts"] <= hi * 1e6 for e in cs)


@pytest.mark.parametrize(
    "kw,needle",
    [
        ({"trace_every": 0}, "output.trace_every"),
        ({"trace_start_s": -1.0}, "output.trace_start_s"),
        ({"trace_start_s": 5.0, "trace_end_s": 2.0}, "output.trace_end_s"),
    ],
)
def test_bad_trace_options_are_config_errors(kw, needle, tmp_path):
    with pytest.raises(ConfigError, match=needle):
        check_output_dir(OutputConfig(dir=str(tmp_path / "x"), write_trace=True, **kw))
