"""Synthetic arrivals with a trace's lengths keep each row's session and prefix hashes."""

import numpy as np

from tests.conftest import REPO
from vidur_fast.config.workload import PoissonIntervals, SyntheticWorkload, TraceLengths
from vidur_fast.workload import TraceWorkload, build_workload

MULTITURN = str(REPO / "traces" / "examples" / "multiturn_shared_prefix.csv")


def _hashes(t, i):
    return t.hashes[t.hash_offsets[i] : t.hash_offsets[i + 1]]


def test_rows_in_file_order_carry_sessions_and_hashes_of_the_trace():
    trace = build_workload(TraceWorkload(MULTITURN), seed=0, need_hashes=True)
    rows = len(trace)
    cfg = SyntheticWorkload(
        num_requests=rows + 20,
        lengths=TraceLengths(MULTITURN, shuffle=False),
        intervals=PoissonIntervals(qps=5.0),
    )
    t = build_workload(cfg, seed=3, need_hashes=True)
    by_row = np.argsort(trace.source_row, kind="stable")
    assert np.array_equal(t.session_id[:rows], trace.session_id[by_row])
    assert np.array_equal(t.prompt_tokens[:rows], trace.prompt_tokens[by_row])
    for i in (0, 5, rows - 1):
        assert np.array_equal(_hashes(t, i), _hashes(trace, by_row[i]))


def test_a_row_taken_twice_shares_only_the_blocks_its_trace_names(tmp_path):
    f = tmp_path / "short.csv"
    # 96 prompt tokens = the 6 blocks the trace names; scaled x2 the prompt has 12 blocks,
    # and the 6 past the named ones are private to each request
    f.write_text(
        "arrived_at,num_prefill_tokens,num_decode_tokens,block_hash_ids,block_size\n"
        '0.0,96,10,"[1,2,3,4,5,6]",16\n'
    )
    lengths = TraceLengths(str(f), prefill_scale=2.0, shuffle=False)
    t = build_workload(SyntheticWorkload(num_requests=2, lengths=lengths), 0, need_hashes=True)
    a, b = _hashes(t, 0), _hashes(t, 1)
    assert a.size == b.size == 12
    assert np.array_equal(a[:6], b[:6])
    assert not np.any(a[6:] == b[6:])


def test_without_hashes_asked_the_table_has_none():
    cfg = SyntheticWorkload(num_requests=10, lengths=TraceLengths(MULTITURN))
    t = build_workload(cfg, seed=0, need_hashes=False)
    assert t.hash_block_size == 0
    assert t.has_sessions
