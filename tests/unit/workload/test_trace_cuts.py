"""A trace cut by offset, time window and count keeps exactly those rows, with their sessions
and prefix hashes."""

import numpy as np
import pytest

from tests.conftest import REPO
from vidur_fast.errors import ConfigError, TraceError
from vidur_fast.workload import TraceWorkload, build_workload

MULTITURN = str(REPO / "traces" / "examples" / "multiturn_shared_prefix.csv")


def _rows(t):
    return [
        (
            int(t.source_row[i]),
            int(t.prompt_tokens[i]),
            int(t.session_id[i]),
            tuple(t.hashes[t.hash_offsets[i] : t.hash_offsets[i + 1]]),
        )
        for i in range(len(t))
    ]


@pytest.fixture(scope="module")
def full():
    return build_workload(TraceWorkload(MULTITURN), seed=0, need_hashes=True)


def test_offset_and_count_take_those_rows(full):
    t = build_workload(
        TraceWorkload(MULTITURN, offset=10, num_requests=5), seed=0, need_hashes=True
    )
    want = [r for r in _rows(full) if 10 <= r[0] < 15]
    assert _rows(t) == want


def test_time_window_keeps_arrivals_inside_it(full):
    lo, hi = float(full.arrival_s[20]), float(full.arrival_s[60])
    t = build_workload(
        TraceWorkload(MULTITURN, start_s=lo, end_s=hi, offset=3), seed=0, need_hashes=True
    )
    inside = (full.arrival_s >= lo) & (full.arrival_s < hi) & (full.source_row >= 3)
    assert _rows(t) == [r for r, k in zip(_rows(full), inside, strict=True) if k]
    assert np.all((t.arrival_s >= lo) & (t.arrival_s < hi))


@pytest.mark.parametrize(
    "kw,error,needle",
    [
        ({"offset": -1}, ConfigError, "workload.offset"),
        ({"start_s": 5.0, "end_s": 5.0}, ConfigError, "workload.end_s"),
        ({"start_s": float("nan")}, ConfigError, "workload.start_s"),
        ({"offset": 10_000}, TraceError, "no row left"),
        ({"offset": 100, "num_requests": 50}, TraceError, "after offset and time window"),
    ],
)
def test_bad_cuts_name_the_field(kw, error, needle):
    with pytest.raises(error, match=needle):
        build_workload(TraceWorkload(MULTITURN, **kw), seed=0)
