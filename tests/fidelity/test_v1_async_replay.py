"""Scripted async-scheduling case: the newest running request is preempted while the step
that samples its last token is in flight, and that stale output still finishes it.

Expected decisions are those of vLLM 0.32's AsyncScheduler, recorded with the same workload
and settings (49 usable blocks of 16, budget 1024).
"""

import json
from pathlib import Path

import pytest

from tests.helpers.v1_replay import replay_case

WORKLOAD = """request_id,arrival,prompt,max_tokens,depends_on,delay
A,0,unique:240,100,,
B,0,unique:240,100,,
C,0,unique:240,17,,
"""


def _case(tmp_path: Path, async_on: bool) -> Path:
    cfg = {
        "max_num_seqs": 64,
        "max_num_batched_tokens": 1024,
        "block_size": 16,
        "num_gpu_blocks": 50,
        "enable_prefix_caching": False,
        "long_prefill_token_threshold": 0,
        "max_model_len": 1024,
        "scheduler_reserve_full_isl": True,
        "watermark": 0.0,
        "policy": "fcfs",
        "async_scheduling": async_on,
        "arrival": "step",
        "step_time_base": 0.02,
        "step_time_per_token": 0.0,
    }
    d = tmp_path / ("async" if async_on else "sync")
    d.mkdir()
    (d / "workload.csv").write_text(WORKLOAD)
    (d / "meta.json").write_text(json.dumps({"config": cfg}))
    return d


def _rows_of(res, rid):
    return [r for r in res.rows if r[2] == rid]


@pytest.mark.parametrize("async_on", [False, True])
def test_last_token_in_flight_at_preemption(tmp_path, async_on):
    res = replay_case(_case(tmp_path, async_on))
    c = _rows_of(res, "C")
    # C: its prefill, then 16 decodes at 240..255; its last one samples output 17
    assert [r[0] for r in c] == list(range(17))
    assert c[-1] == (16, 2, "C", "running", 255, 1)
    assert all(r[3] != "resumed" for r in c)
    # step 17: A and B each need a 17th block and one is free
    assert [r[2] for r in res.rows if r[0] == 17] == ["A", "B"]
    if async_on:
        # C's output 17 is still in flight when step 17 is formed: C is skipped (its last
        # token is coming) but still the newest running request, so B's allocation preempts
        # it; the stale output then finishes C in the waiting queue
        assert res.preemptions == {"A": 0, "B": 0, "C": 1}
    else:
        # synchronously C finished before step 17 and freed its blocks
        assert res.preemptions == {"A": 0, "B": 0, "C": 0}
    for rid in "AB":
        rows = _rows_of(res, rid)
        assert len(rows) == 100 and rows[-1][4] == 240 + 98
