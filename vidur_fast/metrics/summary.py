"""Run summary: percentiles, throughput, utilisation, cost."""

import numpy as np

from vidur_fast.engine.state import HIST_BUCKETS
from vidur_fast.kernels.lifecycle import HIST_MIN_NS, HIST_RATIO

SUMMARY_METRICS = (
    "request_e2e_time",
    "prefill_e2e_time",
    "request_scheduling_delay",
    "decode_time_execution_plus_preemption_normalized",
    "request_execution_time",
    "request_preemption_time",
    "request_e2e_time_normalized",
    "tbt_mean",
)
QUANTILES = (0.5, 0.9, 0.95, 0.99)


def _col(table, name: str) -> np.ndarray:
    """A column of a metrics.table.Columns or a pandas DataFrame, as a numpy array."""
    return np.asarray(table[name])


def _mean(x: np.ndarray) -> float:
    """The mean of the non-NaN values (NaN when there are none), as pandas' Series.mean."""
    x = x[~np.isnan(x)]
    return float(x.mean()) if x.size else float("nan")


def describe(x: np.ndarray) -> dict:
    x = x[np.isfinite(x)]
    if x.size == 0:
        return {"count": 0}
    out = {"count": int(x.size), "mean": float(x.mean())}
    # one partition for all of them (a call per quantile partitioned 1M values four times);
    # each is the same interpolation between the same two order statistics, so the same bits
    for q, v in zip(QUANTILES, np.quantile(x, QUANTILES), strict=True):
        out[f"p{round(q * 100)}"] = float(v)
    out["max"] = float(x.max())
    return out


def hist_bucket_upper_s() -> np.ndarray:
    """Upper edge (s) of each TBT histogram bucket."""
    k = np.arange(HIST_BUCKETS, dtype=np.float64)
    return HIST_MIN_NS * HIST_RATIO**k / 1e9


def hist_quantiles(hist: np.ndarray) -> dict:
    """Quantiles of the inter-token gaps from the log-bucket histogram (<= 1% relative error)."""
    total = int(hist.sum())
    if total == 0:
        return {"count": 0}
    cdf = np.cumsum(hist)
    edges = hist_bucket_upper_s()
    out = {"count": total}
    for q in QUANTILES:
        k = int(np.searchsorted(cdf, q * total, side="left"))
        out[f"p{round(q * 100)}"] = float(edges[min(k, edges.shape[0] - 1)])
    nz = np.nonzero(hist)[0]
    out["max"] = float(edges[nz[-1]])
    return out


def build_summary(
    req,
    replicas,
    hist: np.ndarray,
    sim_time_s: float,
    gpus_per_replica: int,
    price_per_gpu_hour: float,
    clamped: dict,
    status: str,
) -> dict:
    done = _col(req, "completed")
    n_done = int(done.sum())
    dec = _col(req, "request_num_decode_tokens")
    pre = _col(req, "request_num_prefill_tokens")
    gpus = gpus_per_replica * len(replicas)
    cost = price_per_gpu_hour * gpus * sim_time_s / 3600.0
    out = {
        "status": status,
        "num_requests": int(len(req)),
        "num_completed": n_done,
        "num_rejected": int((_col(req, "rejected") > 0).sum()),
        "simulated_time_s": sim_time_s,
        "throughput_requests_per_s": n_done / sim_time_s if sim_time_s > 0 else 0.0,
        "throughput_output_tokens_per_s": float(dec[done].sum()) / sim_time_s
        if sim_time_s > 0
        else 0.0,
        "throughput_total_tokens_per_s": float((dec + pre)[done].sum()) / sim_time_s
        if sim_time_s > 0
        else 0.0,
        "num_preemptions": int(_col(replicas, "preemptions").sum()),
        "num_batches": int(_col(replicas, "batches").sum()),
        "prefix_cache_hit_tokens": int(_col(req, "request_num_prefill_tokens_cached").sum()),
        "kv_usage_mean": _mean(_col(replicas, "kv_usage_mean")),
        "kv_usage_peak": float(_col(replicas, "kv_usage_peak").max()),
        "busy_fraction_mean": _mean(_col(replicas, "busy_fraction")),
        "gpus": gpus,
        "cost_usd": cost,
        "cost_per_1k_requests_usd": 1000.0 * cost / n_done if n_done else None,
        "clamped_lookups": clamped,
        "tbt": hist_quantiles(hist),
    }
    for name in SUMMARY_METRICS:
        out[name] = describe(_col(req, name)[done])
    out.update(prefix_cache_summary(replicas))
    out["prefill_e2e_time_replicawise"] = replicawise(req, "prefill_e2e_time", len(replicas))
    return out


def prefix_cache_summary(replicas) -> dict:
    """Cluster-wide prefix-cache figures (tokens looked up / found at admission)."""
    if "prefix_cache_query_tokens" not in replicas:
        return {}
    q = int(_col(replicas, "prefix_cache_query_tokens").sum())
    h = int(_col(replicas, "prefix_cache_hit_tokens").sum())
    return {
        "prefix_cache_hit_rate": h / q if q else 0.0,
        "prefix_cache_evictions": int(_col(replicas, "prefix_cache_evictions").sum()),
        "prefix_cache_hit_rate_per_replica": [
            float(x) for x in _col(replicas, "prefix_cache_hit_rate")
        ],
    }


def replicawise(req, metric: str, n_replicas: int) -> dict:
    """A request metric's distribution per replica (completed requests), keyed by replica id."""
    done = _col(req, "completed")
    rep = _col(req, "replica")[done]
    # one stable sort instead of a mask per replica (1,000 replicas x 1M requests): each
    # replica's values stay in arrival order, so the figures are the same
    order = np.argsort(rep, kind="stable")
    x = _col(req, metric)[done][order]
    ids = np.arange(n_replicas)
    lo = np.searchsorted(rep[order], ids, side="left")
    hi = np.searchsorted(rep[order], ids, side="right")
    return {str(r): describe(x[lo[r] : hi[r]]) for r in range(n_replicas)}
