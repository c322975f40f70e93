"""Vidur's own plots/ files, for scripts written against a Vidur run directory.

Main line: plots/<metric>.csv per request time distribution (`Request Id`, value, `cdf` =
rank / n, sorted by cdf). Canary line: plots/<metric>.csv as 101 quantiles (`cdf` 0, 0.01, ...,
1), plots/<metric>_replicawise.csv (the same per replica, with a `replica` column, when there
is more than one replica) and plots/replica_prefix_cache_metrics.json (per replica: cached
prompt tokens, prompt tokens, hit ratio over completed requests). Only the CSV and JSON files:
Vidur's PNG renderings are not repeated (`--output.write-plots` draws this project's plots).
"""

import json
from pathlib import Path

import numpy as np
import pandas as pd

# Vidur's request time distributions, in its column order
TIME_METRICS = (
    "request_e2e_time",
    "request_e2e_time_normalized",
    "request_execution_time",
    "request_execution_time_normalized",
    "request_model_execution_time",
    "request_model_execution_time_normalized",
    "request_preemption_time",
    "request_scheduling_delay",
    "request_execution_plus_preemption_time",
    "request_execution_plus_preemption_time_normalized",
    "prefill_e2e_time",
    "prefill_time_execution_plus_preemption",
    "prefill_time_execution_plus_preemption_normalized",
    "decode_time_execution_plus_preemption_normalized",
)
CANARY_TIME_METRICS = (*TIME_METRICS, "prefill_e2e_time_normalized")
CDF_POINTS = np.linspace(0.0, 1.0, 101)


def _main_cdf(req: pd.DataFrame, metric: str) -> pd.DataFrame:
    values = req[["request_id", metric]].dropna()
    cdf = values[metric].rank(method="first", pct=True)
    out = pd.DataFrame({"Request Id": values["request_id"], metric: values[metric], "cdf": cdf})
    return out.sort_values("cdf", kind="stable").reset_index(drop=True)


def _quantiles(values: np.ndarray, metric: str) -> pd.DataFrame:
    q = np.quantile(values, CDF_POINTS) if values.size else np.full(CDF_POINTS.size, np.nan)
    return pd.DataFrame({"cdf": CDF_POINTS, metric: q})


def write_vidur_plots(requests: pd.DataFrame, directory: Path, line: str) -> None:
    """Write Vidur's plots/ CSV and JSON files of one line ("main" or "canary")."""
    directory.mkdir(exist_ok=True)
    done = requests[requests["completed"]]
    if line == "main":
        for metric in TIME_METRICS:
            _main_cdf(requests, metric).to_csv(directory / f"{metric}.csv")
        return
    replicas = sorted(int(r) for r in done["replica"].unique())
    for metric in CANARY_TIME_METRICS:
        _quantiles(done[metric].dropna().to_numpy(), metric).to_csv(
            directory / f"{metric}.csv", index=False
        )
        if len(replicas) > 1:
            parts = []
            for r in replicas:
                part = _quantiles(
                    done.loc[done["replica"] == r, metric].dropna().to_numpy(), metric
                )
                part["replica"] = r
                parts.append(part)
            pd.concat(parts, ignore_index=True).to_csv(
                directory / f"{metric}_replicawise.csv", index=False
            )
    cache = {}
    for r in replicas:
        rows = done[done["replica"] == r]
        cached = int(rows["request_num_prefill_tokens_cached"].sum())
        total = int(rows["request_num_prefill_tokens"].sum())
        cache[str(r)] = {
            "cached_tokens_sum": cached,
            "total_tokens_sum": total,
            "hit_ratio": cached / total if total else 0.0,
        }
    (directory / "replica_prefix_cache_metrics.json").write_text(json.dumps(cache, indent=4))
