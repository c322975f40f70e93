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


def main_cdf(request_id: np.ndarray, values: np.ndarray) -> tuple[np.ndarray, ...]:
    """Vidur's main-line distribution of one metric: the requests with a value, in the order
    of their value (ties in request order, as pandas' rank(method="first")), and each one's
    cdf = rank / n. Returns (request ids, values, cdf)."""
    keep = ~np.isnan(values)
    ids, vals = request_id[keep], values[keep]
    order = np.argsort(vals, kind="stable")
    n = vals.shape[0]
    return ids[order], vals[order], np.arange(1, n + 1, dtype=np.float64) / n


def _write_main_cdf(path: Path, metric: str, ids, vals, cdf) -> None:
    """The file as pandas' to_csv wrote it: the row number first, under an empty name."""
    from vidur_fast.metrics.table import Columns
    from vidur_fast.outputs.request_csv import write_request_csv

    table = Columns({"": np.arange(ids.shape[0]), "Request Id": ids, metric: vals, "cdf": cdf})
    write_request_csv(table, path)


def _quantiles(values: np.ndarray, metric: str):
    import pandas as pd

    q = np.quantile(values, CDF_POINTS) if values.size else np.full(CDF_POINTS.size, np.nan)
    return pd.DataFrame({"cdf": CDF_POINTS, metric: q})


def write_vidur_plots(requests, directory: Path, line: str) -> None:
    """Write Vidur's plots/ CSV and JSON files of one line ("main" or "canary").

    requests: the request table (metrics.table.Columns, or a pandas DataFrame)."""
    directory.mkdir(exist_ok=True)
    if line == "main":  # without pandas (its import and its float formatting: ~1 s of 20k rows)
        ids = np.asarray(requests["request_id"])
        for metric in TIME_METRICS:
            values = np.asarray(requests[metric], dtype=np.float64)
            _write_main_cdf(directory / f"{metric}.csv", metric, *main_cdf(ids, values))
        return
    import pandas as pd

    if not isinstance(requests, pd.DataFrame):
        requests = requests.to_frame()
    done = requests[requests["completed"]]
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
