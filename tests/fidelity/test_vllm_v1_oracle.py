"""Replay every recorded vLLM v1 case and require the same decisions, step by step.

Cases: see tests/helpers/vllm_cases.py.
"""

from pathlib import Path

import pytest

from tests.helpers.v1_replay import replay_case
from tests.helpers.vllm_cases import CASES, expected_requests, expected_rows


@pytest.mark.skipif(not CASES, reason="no vLLM v1 reference cases found")
@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_replay_matches_vllm(case: Path):
    got = replay_case(case)
    want = expected_rows(case)
    for k, (g, w) in enumerate(zip(got.rows, want, strict=False)):
        assert g == w, f"{case.name}: row {k} differs: got {g}, want {w}"
    assert len(got.rows) == len(want), f"{case.name}: {len(got.rows)} rows, want {len(want)}"
    hits, pre = expected_requests(case)
    assert got.prefix_hit == hits
    assert got.preemptions == pre
