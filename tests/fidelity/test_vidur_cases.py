"""Fidelity vs Vidur: replay every reference case through `vidur-compat` and compare the
distributions of the chosen request metrics (each quantile within 5% of Vidur's)."""

import json
import os
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from tests.conftest import SHARED
from vidur_fast.api import simulate
from vidur_fast.config.vidur_flags import config_from_vidur_args

TOLERANCE = 0.05


def _case_dirs() -> list[Path]:
    roots = [SHARED / "reference" / "vidur" / "cases"]
    extra = os.environ.get("VIDUR_FAST_EXTRA_CASES", "")
    roots += [Path(p) for p in extra.split(os.pathsep) if p]
    found = []
    for root in roots:
        if (root / "case.json").is_file():
            found.append(root)
        elif root.is_dir():
            found += sorted(p for p in root.iterdir() if (p / "case.json").is_file())
    return found


CASES = _case_dirs()


@pytest.mark.skipif(not CASES, reason="no Vidur reference cases found")
@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_vidur_case_quantiles_match(case):
    spec = json.loads((case / "case.json").read_text())
    subs = {"{PROFILES}": str(SHARED / "profiles" / "vidur_format"), "{CASE}": str(case)}
    args = []
    for a in spec["vidur_args"]:
        for k, v in subs.items():
            a = a.replace(k, v)
        args.append(a)
    result = simulate(config_from_vidur_args(args))
    ref = pd.read_csv(case / spec["compare"]["file"])
    rows, worst = [], 0.0
    for m in spec["compare"]["metrics"]:
        ours = result.requests[m].dropna().to_numpy()
        theirs = ref[m].dropna().to_numpy()
        for q in spec["compare"]["quantiles"]:
            a, b = float(np.quantile(ours, q)), float(np.quantile(theirs, q))
            rel = (a - b) / b if b else 0.0
            worst = max(worst, abs(rel))
            rows.append(f"{m:<52} p{round(q * 100):<3} {a:>10.4f} {b:>10.4f} {100 * rel:+6.1f}%")
    print(f"\n{case.name}: metric, quantile, vidur-fast, vidur, difference")
    print("\n".join(rows))
    assert worst <= TOLERANCE, f"worst quantile difference {100 * worst:.1f}%"
