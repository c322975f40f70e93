"""Per-replica time series derived from the batch log (one sample per batch formation).

Every numeric batch-log column is carried, so a counter added to the log later shows up here
(and in the plots) without changes. A prefix-cache hit column, when the log has one, also
yields a running hit rate.
"""

import numpy as np

from vidur_fast.outputs.schema import TIMESERIES_DROPPED, TIMESERIES_RENAME

# batch column: prompt tokens found in the prefix cache by the requests admitted into a batch
HIT_TOKENS = "num_cached_tokens"
# batch column: prompt tokens computed (not found in the cache) by a batch
PREFILL_TOKENS = "num_prefill_tokens"


def has_prefix_cache(batch_columns, replicas) -> bool:
    """Whether the run used a prefix cache (vllm_v1 with prefix caching looks up every
    admission), so that a running hit rate means something."""
    return (
        HIT_TOKENS in batch_columns
        and PREFILL_TOKENS in batch_columns
        and "prefix_cache_query_tokens" in replicas
        and bool(np.asarray(replicas["prefix_cache_query_tokens"]).sum() > 0)
    )


def running_hit_rate(hits: np.ndarray, prefill: np.ndarray) -> np.ndarray:
    """Cumulative hit tokens / (cumulative hit + prefill tokens) over one replica's batches."""
    hits = np.cumsum(np.asarray(hits, dtype=np.float64))
    total = hits + np.cumsum(np.asarray(prefill, dtype=np.float64))
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(total > 0, hits / total, np.nan)


def order_by_replica(rep_col: np.ndarray) -> np.ndarray:
    """Row order grouping rows by replica id, each replica's rows kept in their order."""
    rep_col = np.asarray(rep_col)
    if rep_col.size and rep_col.min() >= -(1 << 15) and rep_col.max() < (1 << 15):
        # numpy's stable sort is a radix sort for 16-bit integers: ~3x faster than on int64
        rep_col = rep_col.astype(np.int16)
    return np.argsort(rep_col, kind="stable")


def replica_rows(batches, replicas) -> dict[int, np.ndarray]:
    """{replica: rows of batches that replica ran, in formation order}."""
    rep_col = batches["replica"].to_numpy()
    order = order_by_replica(rep_col)
    rep_ids = replicas["replica"].to_numpy()
    bounds = np.searchsorted(rep_col[order], rep_ids, side="left")
    ends = np.append(bounds[1:], order.shape[0])
    return {int(r): order[lo:hi] for r, lo, hi in zip(rep_ids, bounds, ends, strict=True)}


def replica_timeseries(batches, replicas, batch_rows: dict[int, np.ndarray] | None = None) -> dict:
    """{replica: DataFrame} with one row per batch of that replica, in formation order.

    batch_rows: each replica's rows of batches (metrics.h5 `batch_row`); found from batches if None.
    """
    import pandas as pd  # not at start-up: the run directory is written without it

    num_blocks = replicas.set_index("replica")["num_blocks"]
    numeric = [c for c in batches.columns if pd.api.types.is_numeric_dtype(batches[c])]
    hit_rate = has_prefix_cache(batches.columns, replicas)
    out = {}
    if batch_rows is None:
        batch_rows = replica_rows(batches, replicas)
    for r, idx in batch_rows.items():
        rows = batches.iloc[idx]
        cols = {"time_s": rows["start_s"].to_numpy()} if "start_s" in rows else {}
        for c in numeric:
            if c in TIMESERIES_DROPPED:
                continue
            cols[TIMESERIES_RENAME.get(c, c)] = rows[c].to_numpy()
        if "alloc_blocks" in rows:
            blocks = max(int(num_blocks.get(r, 0)), 1)
            cols["kv_usage_fraction"] = rows["alloc_blocks"].to_numpy() / blocks
        if "end_s" in rows and "start_s" in rows:
            cols["duration_s"] = rows["end_s"].to_numpy() - rows["start_s"].to_numpy()
        if hit_rate:
            cols["prefix_cache_hit_rate"] = running_hit_rate(
                rows[HIT_TOKENS].to_numpy(), rows[PREFILL_TOKENS].to_numpy()
            )
        out[int(r)] = pd.DataFrame(cols)
    return out


def downsample(t: np.ndarray, y: np.ndarray, max_points: int) -> tuple[np.ndarray, np.ndarray]:
    """Mean of y in max_points equal time bins (bin centres); empty bins are dropped.

    Raw samples are returned unchanged when there are no more than max_points of them.
    """
    if t.shape[0] <= max_points:
        return t, y
    lo, hi = float(t[0]), float(t[-1])
    width = (hi - lo) / max_points or 1.0
    k = np.minimum(((t - lo) / width).astype(np.int64), max_points - 1)
    ok = np.isfinite(y)
    cnt = np.bincount(k[ok], minlength=max_points)
    tot = np.bincount(k[ok], weights=y[ok], minlength=max_points)
    keep = cnt > 0
    centres = lo + (np.arange(max_points) + 0.5) * width
    return centres[keep], tot[keep] / cnt[keep]
