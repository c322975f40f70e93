"""Replay every recorded vLLM v1 case and require the same decisions, step by step.

Cases: directories holding meta.json under ../shared/reference/vllm_v1/cases and under each
directory named in VIDUR_FAST_EXTRA_CASES (os.pathsep-separated).
"""

import csv
import gzip
import os
from pathlib import Path

import pytest

from tests.fidelity.v1_replay import replay_case

_SHARED_CASES = Path(__file__).resolve().parents[2].parent / "shared/reference/vllm_v1/cases"


def _case_dirs() -> list[Path]:
    roots = [_SHARED_CASES]
    roots += [Path(x) for x in os.environ.get("VIDUR_FAST_EXTRA_CASES", "").split(os.pathsep) if x]
    found: list[Path] = []
    for root in roots:
        if root.is_dir():
            found += sorted(m.parent for m in root.rglob("meta.json"))
    return found


CASES = _case_dirs()


def _open(case: Path, name: str):
    if (case / name).exists():
        return open(case / name, newline="")
    return gzip.open(case / (name + ".gz"), "rt", newline="")


def _expected_rows(case: Path) -> list[tuple]:
    with _open(case, "schedule.csv") as f:
        return [
            (
                int(r["step"]),
                int(r["pos"]),
                r["request_id"],
                r["kind"],
                int(r["start"]),
                int(r["num_tokens"]),
            )
            for r in csv.DictReader(f)
        ]


def _expected_requests(case: Path) -> tuple[dict, dict]:
    with _open(case, "requests.csv") as f:
        rows = list(csv.DictReader(f))
    hits = {r["request_id"]: int(r["prefix_hit_tokens"] or 0) for r in rows}
    pre = {r["request_id"]: int(r["num_preemptions"] or 0) for r in rows}
    return hits, pre


@pytest.mark.skipif(not CASES, reason="no vLLM v1 reference cases found")
@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_replay_matches_vllm(case: Path):
    got = replay_case(case)
    want = _expected_rows(case)
    for k, (g, w) in enumerate(zip(got.rows, want, strict=False)):
        assert g == w, f"{case.name}: row {k} differs: got {g}, want {w}"
    assert len(got.rows) == len(want), f"{case.name}: {len(got.rows)} rows, want {len(want)}"
    hits, pre = _expected_requests(case)
    assert got.prefix_hit == hits
    assert got.preemptions == pre
