"""Fidelity vs Vidur: replay every reference case through `vidur-compat` and compare the
distributions of the chosen request metrics: each quantile within 3 % of Vidur's.

vidur-compat fits Vidur's own forests (predictor.vidur_forests: tree seeds from Vidur's
--seed in its training order), so the reference cases reproduce Vidur's stage times and every
quantile lands within 3 % as it is. Some quantiles are chaotic, though: a sub-millisecond
scheduling delay (the wait for the next batch end while every pipeline stage is busy) moves by
tens of percent when every stage time changes by 0.01 %, so a case whose timing cannot be
reproduced that closely (other profiles, another scikit-learn) would miss the bar on them for
no scheduling reason. In an extra case (VIDUR_FAST_EXTRA_CASES; the reference cases get no such
clause) a quantile outside 3 % therefore passes only if it is shown to be chaotic and
Vidur's value lies inside the spread: the case is re-run with every stage time scaled by
1 + k * 1e-4 (|k| <= 10), the quantile's range over those runs must be wider than the
tolerance, and Vidur's value must fall inside that range. A real difference of scheduling
semantics shifts the whole range and still fails. bench/vidur_case_sensitivity.py prints the
full spread of every quantile.
"""

import dataclasses
import json
import os
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from tests.conftest import SHARED
from vidur_fast.api import simulate
from vidur_fast.config.vidur_flags import config_from_vidur_args

TOLERANCE = 0.03
PERTURBATION_STEP = 1e-4
PERTURBATION_STEPS = 10


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


def _case_config(case: Path, spec: dict):
    subs = {"{PROFILES}": str(SHARED / "profiles" / "vidur_format"), "{CASE}": str(case)}
    args = []
    for a in spec["vidur_args"]:
        for k, v in subs.items():
            a = a.replace(k, v)
        args.append(a)
    return config_from_vidur_args(args)


def _quantiles(requests: pd.DataFrame, spec: dict) -> dict[tuple[str, float], float]:
    return {
        (m, q): float(np.quantile(requests[m].dropna().to_numpy(), q))
        for m in spec["compare"]["metrics"]
        for q in spec["compare"]["quantiles"]
    }


def _perturbed_ranges(cfg, spec: dict) -> dict[tuple[str, float], tuple[float, float]]:
    """Each quantile's (min, max) over runs with every stage time scaled by 1 + k * step."""
    cache: dict = {}
    simulate(cfg, timing_cache=cache)
    ((key, base),) = cache.items()
    runs = []
    for k in range(-PERTURBATION_STEPS, PERTURBATION_STEPS + 1):
        f = 1.0 + k * PERTURBATION_STEP
        grids = {n: np.asarray(v) * f for n, v in base.grids._asdict().items() if n != "counters"}
        cache[key] = dataclasses.replace(base, grids=base.grids._replace(**grids))
        runs.append(_quantiles(simulate(cfg, timing_cache=cache).requests, spec))
    return {mq: (min(r[mq] for r in runs), max(r[mq] for r in runs)) for mq in runs[0]}


@pytest.mark.skipif(not CASES, reason="no Vidur reference cases found")
@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_vidur_case_quantiles_match(case):
    spec = json.loads((case / "case.json").read_text())
    cfg = _case_config(case, spec)
    ours = _quantiles(simulate(cfg).requests, spec)
    theirs = _quantiles(pd.read_csv(case / spec["compare"]["file"]), spec)
    rel = {mq: (ours[mq] - b) / b if b else 0.0 for mq, b in theirs.items()}
    outside = [mq for mq, r in rel.items() if abs(r) > TOLERANCE]
    reference = case.parent == SHARED / "reference" / "vidur" / "cases"
    ranges = _perturbed_ranges(cfg, spec) if outside and not reference else {}
    rows, failed = [], []
    for (m, q), r in rel.items():
        note = ""
        if (m, q) in outside and reference:
            failed.append(f"{m} p{round(q * 100)} {100 * r:+.1f}%")
        elif (m, q) in outside:
            lo, hi = ranges[(m, q)]
            b = theirs[(m, q)]
            chaotic = (hi - lo) / b > TOLERANCE
            inside = lo <= b <= hi
            note = f"  perturbed {100 * (lo - b) / b:+.1f}..{100 * (hi - b) / b:+.1f}%"
            if not (chaotic and inside):
                failed.append(f"{m} p{round(q * 100)} {100 * r:+.1f}%{note}")
        rows.append(
            f"{m:<52} p{round(q * 100):<3} {ours[(m, q)]:>10.4f} {theirs[(m, q)]:>10.4f} "
            f"{100 * r:+8.3f}%{note}"
        )
    print(f"\n{case.name}: metric, quantile, vidur-fast, vidur, difference")
    print("\n".join(rows))
    assert not failed, "quantiles off by more than 3 % and not chaotic: " + "; ".join(failed)
