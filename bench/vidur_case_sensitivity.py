"""How much a Vidur reference case's compared quantiles move when every stage time is scaled
by a factor close to 1: the spread a quantile shows under timing differences far below the
timing model's accuracy, i.e. how tight a fidelity tolerance on it can meaningfully be.

    python bench/vidur_case_sensitivity.py CASE_DIR              # 1 +/- k * 5e-5, k = -20..20
    python bench/vidur_case_sensitivity.py CASE_DIR --center 0.985 --step 5e-5 --k 10

Prints, per factor, each quantile's difference from Vidur (%), then mean, min, max and
standard deviation over the factors. CASE_DIR holds case.json as tests/fidelity reads it.
"""

import argparse
import dataclasses
import json
from pathlib import Path

import numpy as np
import pandas as pd

from vidur_fast.api import simulate
from vidur_fast.config.vidur_flags import config_from_vidur_args

SHARED = Path(__file__).resolve().parents[2] / "shared"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("case", type=Path)
    ap.add_argument("--center", type=float, default=1.0)
    ap.add_argument("--step", type=float, default=5e-5)
    ap.add_argument("--k", type=int, default=20, help="factors center + i * step, |i| <= k")
    ap.add_argument("--shared", type=Path, default=SHARED)
    a = ap.parse_args()
    spec = json.loads((a.case / "case.json").read_text())
    subs = {"{PROFILES}": str(a.shared / "profiles" / "vidur_format"), "{CASE}": str(a.case)}
    args = []
    for x in spec["vidur_args"]:
        for k, v in subs.items():
            x = x.replace(k, v)
        args.append(x)
    cfg = config_from_vidur_args(args)
    ref = pd.read_csv(a.case / spec["compare"]["file"])
    cache: dict = {}
    simulate(cfg, timing_cache=cache)  # builds (or loads) the timing model once
    ((key, base),) = cache.items()
    cols = [(m, q) for m in spec["compare"]["metrics"] for q in spec["compare"]["quantiles"]]
    rows = []
    for i in range(-a.k, a.k + 1):
        f = a.center + i * a.step
        scaled = {n: np.asarray(v) * f for n, v in base.grids._asdict().items() if n != "counters"}
        cache[key] = dataclasses.replace(base, grids=base.grids._replace(**scaled))
        res = simulate(cfg, timing_cache=cache)
        row = []
        for m, q in cols:
            ours = np.quantile(res.requests[m].dropna().to_numpy(), q)
            theirs = np.quantile(ref[m].dropna().to_numpy(), q)
            row.append(100 * (ours - theirs) / theirs if theirs else 0.0)
        rows.append(row)
        print(f"{f:.5f} " + " ".join(f"{x:+6.1f}" for x in row), flush=True)
    d = np.array(rows)
    print(f"\n{spec['name']}: difference from Vidur (%) over {len(rows)} factors")
    for j, (m, q) in enumerate(cols):
        c = d[:, j]
        print(
            f"{m:<50} p{round(q * 100):<3} mean {c.mean():+6.1f} min {c.min():+6.1f} "
            f"max {c.max():+6.1f} sd {c.std():5.1f}"
        )


if __name__ == "__main__":
    main()
