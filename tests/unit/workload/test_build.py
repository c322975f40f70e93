"""TraceWorkload building: scaling, clipping rules, table invariants, round trip."""

import json

import numpy as np
import pandas as pd
import pytest

from vidur_fast.errors import TraceError
from vidur_fast.workload import (
    SyntheticWorkload,
    TraceWorkload,
    build_workload,
    make_table,
    read_trace,
    write_vidur_csv,
)
from vidur_fast.workload.clipping import clip_prompt, clip_proportional


def _csv(tmp_path, rows, header="arrived_at,num_prefill_tokens,num_decode_tokens"):
    path = tmp_path / "t.csv"
    path.write_text(header + "\n" + "\n".join(",".join(map(str, r)) for r in rows) + "\n")
    return str(path)


# ---- clipping rules ----


def test_clip_proportional_matches_vidur_rule():
    p, d = clip_proportional(np.array([3000, 100, 4000]), np.array([1000, 50, 96]), 4096)
    total = np.array([4000, 150, 4096])
    np.testing.assert_array_equal(p + d, np.minimum(total, 4096))
    np.testing.assert_array_equal(p, [3000, 100, 4000])
    p, d = clip_proportional(np.array([6000]), np.array([2000]), 4000)
    # excess 4000: P -= ceil(4000*6000/8000) = 3000, D -= ceil(4000*2000/8000) = 1000
    assert (p[0], d[0]) == (3000, 1000)


def test_clip_proportional_floor_at_one_still_fits():
    # Vidur: D -> 0 -> clipped to 1 -> P + D = max + 1 (its assert fails); fixed here
    p, d = clip_proportional(np.array([10_000, 1]), np.array([1, 10_000]), 100)
    assert np.all(p >= 1) and np.all(d >= 1)
    assert np.all(p + d <= 100)


def test_clip_prompt_never_below_one():
    p, d = clip_prompt(np.array([3000, 10, 50]), np.array([2000, 5000, 10]), 4096)
    np.testing.assert_array_equal(p, [2096, 1, 50])
    np.testing.assert_array_equal(d, [2000, 4095, 10])


@pytest.mark.parametrize(
    ("rule", "expected"),
    [("proportional", ([60, 20], [20, 10])), ("prompt", ([50, 20], [30, 10]))],
)
def test_trace_workload_clip_rules(tmp_path, rule, expected):
    path = _csv(tmp_path, [(0, 90, 30), (1, 20, 10)])
    t = build_workload(TraceWorkload(path, max_tokens=80, clip=rule), 0)
    np.testing.assert_array_equal(t.prompt_tokens, expected[0])
    np.testing.assert_array_equal(t.decode_tokens, expected[1])


def test_trace_workload_clip_error_names_row(tmp_path):
    path = _csv(tmp_path, [(0, 20, 10), (1, 90, 30)])
    with pytest.raises(TraceError, match=r"row 2, column 'num_prefill_tokens\+num_decode_tokens'"):
        build_workload(TraceWorkload(path, max_tokens=80, clip="error"), 0)


# ---- scaling, subsets, time ----


def test_scales_truncate_and_floor_at_one(tmp_path):
    path = _csv(tmp_path, [(2, 3, 5), (4, 10, 1)])
    t = build_workload(TraceWorkload(path, prefill_scale=0.5, decode_scale=0.1, time_scale=0.5), 0)
    np.testing.assert_array_equal(t.prompt_tokens, [1, 5])
    np.testing.assert_array_equal(t.decode_tokens, [1, 1])
    np.testing.assert_array_equal(t.arrival_s, [1.0, 2.0])
    z = build_workload(TraceWorkload(path, start_at_zero=True), 0)
    np.testing.assert_array_equal(z.arrival_s, [0.0, 2.0])


def test_num_requests_takes_the_head(tmp_path):
    path = _csv(tmp_path, [(i, 10 + i, 1) for i in range(10)])
    t = build_workload(TraceWorkload(path, num_requests=3), 0)
    np.testing.assert_array_equal(t.prompt_tokens, [10, 11, 12])
    np.testing.assert_array_equal(t.source_row, [0, 1, 2])


def test_sessions_and_hashes_flow_through(tmp_path):
    header = "arrived_at,num_prefill_tokens,num_decode_tokens,session_id,block_hash_ids,block_size"
    rows = [(0, 32, 1, 4, '"[1, 2]"', 16), (1, 17, 16, "", '"[1, 3]"', 16)]
    path = _csv(tmp_path, rows, header)
    t = build_workload(TraceWorkload(path), 0, need_hashes=True)
    np.testing.assert_array_equal(t.session_id, [4, -1])
    assert t.hash_block_size == 16 and list(t.num_hashes) == [2, 2]
    assert t.hashes_of(0)[0] == t.hashes_of(1)[0] and t.hashes_of(0)[1] != t.hashes_of(1)[1]
    no_hashes = build_workload(TraceWorkload(path), 0)
    assert no_hashes.hash_block_size == 0 and no_hashes.hashes.size == 0


# ---- RequestTable ----


def test_make_table_sorts_stably_with_hash_lists():
    t = make_table(
        [2.0, 1.0, 1.0],
        [32, 16, 48],
        [1, 1, 1],
        hash_offsets=[0, 2, 3, 6],
        hashes=[20, 21, 10, 30, 31, 32],
        hash_block_size=16,
    )
    np.testing.assert_array_equal(t.arrival_s, [1.0, 1.0, 2.0])
    np.testing.assert_array_equal(t.source_row, [1, 2, 0])
    np.testing.assert_array_equal(t.hash_offsets, [0, 1, 4, 6])
    np.testing.assert_array_equal(t.hashes, [10, 30, 31, 32, 20, 21])
    with pytest.raises(ValueError):
        t.arrival_s[0] = 5.0  # read-only


def test_table_rejects_zero_hash_and_missing_prompt_blocks():
    with pytest.raises(ValueError):
        make_table([0.0], [16], [1], hash_offsets=[0, 1], hashes=[0], hash_block_size=16)
    with pytest.raises(ValueError):
        make_table([0.0], [64], [1], hash_offsets=[0, 1], hashes=[5], hash_block_size=16)


def test_summary_and_frame():
    t = build_workload(SyntheticWorkload(num_requests=100), 0)
    s = t.summary()
    assert s["count"] == 100 and s["prompt_tokens"]["p50"] == 2048.0
    assert s["qps"] == pytest.approx(100 / s["duration_s"])
    json.dumps(s)  # plain Python values only
    frame = t.to_frame()
    assert isinstance(frame, pd.DataFrame) and len(frame) == 100
    assert list(frame.columns)[:3] == ["arrival_s", "prompt_tokens", "decode_tokens"]


def test_vidur_csv_round_trip(tmp_path):
    header = "arrived_at,num_prefill_tokens,num_decode_tokens,session_id,block_hash_ids,block_size"
    rows = [(0.25, 40, 9, 3, '"[5, 6, 7]"', 16), (1.5, 16, 1, 3, '"[5]"', 16)]
    src = build_workload(TraceWorkload(_csv(tmp_path, rows, header)), 0, need_hashes=True)
    out = tmp_path / "out.csv.gz"
    write_vidur_csv(src, out)
    back = build_workload(TraceWorkload(str(out)), 0, need_hashes=True)
    for name in ("arrival_s", "prompt_tokens", "decode_tokens", "session_id", "hash_offsets"):
        np.testing.assert_array_equal(getattr(back, name), getattr(src, name))
    # hashes are re-chained on read: equal structure, not equal values
    assert back.hashes_of(0)[0] == back.hashes_of(1)[0]
    assert len(read_trace(out)) == 2
