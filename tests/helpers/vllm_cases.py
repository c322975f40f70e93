"""The recorded real-vLLM scheduler cases: where they are and what each expects.

Cases: directories holding meta.json under ../shared/reference/vllm_v1/cases and under each
directory named in VIDUR_FAST_EXTRA_CASES (os.pathsep-separated).
"""

import csv
import gzip
import os
from pathlib import Path

from tests.conftest import SHARED

_SHARED_CASES = SHARED / "reference" / "vllm_v1" / "cases"


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


def expected_rows(case: Path) -> list[tuple]:
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


def expected_requests(case: Path) -> tuple[dict, dict]:
    with _open(case, "requests.csv") as f:
        rows = list(csv.DictReader(f))
    hits = {r["request_id"]: int(r["prefix_hit_tokens"] or 0) for r in rows}
    pre = {r["request_id"]: int(r["num_preemptions"] or 0) for r in rows}
    return hits, pre
