"""What a run produced: the Result the API returns and the run directory is written from."""

from dataclasses import dataclass, field
from functools import cached_property

import numpy as np

from vidur_fast.config.sim import SimConfig
from vidur_fast.engine.batch_store import BatchStore
from vidur_fast.metrics.table import Columns


@dataclass
class Result:
    """Everything a run produced: the summary dict and the tables, as pandas DataFrames
    (`requests`, `replicas`, `batches`) built on first access from the numpy columns the run
    keeps (`request_columns`, `replica_columns`), so that pandas is imported only when a
    DataFrame is asked for."""

    config: SimConfig
    summary: dict
    request_columns: Columns
    batch_log: BatchStore
    replica_columns: Columns
    tbt_histogram: np.ndarray
    timing_meta: dict = field(default_factory=dict)
    phases_s: dict = field(default_factory=dict)

    @cached_property
    def requests(self):
        """One row per request (pandas DataFrame; built once, on first access)."""
        return self.request_columns.to_frame()

    @cached_property
    def replicas(self):
        """One row per replica (pandas DataFrame; built once, on first access)."""
        return self.replica_columns.to_frame()

    @property
    def batches(self):
        """One row per batch (times in s); read from the run's batch store on each access."""
        return self.batch_log.frame()


def replica_table(out, sp, end_ns: int, pools=None) -> Columns:
    """One row per replica. pools: kernels.pools.PoolParams of a cluster of several pools
    (each replica's pool and KV blocks); None = one pool (pool 0, sp's blocks)."""
    reps, kv = out.reps, out.kv
    span = max(end_ns, 1)
    if pools is None:
        pool = np.zeros(sp.num_replicas, dtype=np.int64)
        blocks = np.full(sp.num_replicas, sp.usable_blocks)
    else:
        pool = np.asarray(pools.rep_pool, dtype=np.int64)
        blocks = np.asarray(pools.usable_blocks)[pool]
    # close the kv-usage integral at the end of the run
    area = reps.kv_area + reps.alloc_blocks * np.maximum(end_ns - reps.kv_last_ns, 0)
    return Columns(
        {
            "replica": np.arange(sp.num_replicas),
            "pool": pool,
            "batches": reps.n_batches.copy(),
            "preemptions": reps.preemptions.copy(),
            "num_blocks": blocks,
            "kv_usage_mean": area / span / blocks,
            "kv_usage_peak": reps.kv_peak / blocks,
            "busy_fraction": reps.busy_ns[:, 0] / span,
            "requests_completed": np.bincount(
                out.reqs.replica[out.reqs.replica >= 0], minlength=sp.num_replicas
            )[: sp.num_replicas],
            "prefix_cache_query_tokens": kv.query_tokens.copy(),
            "prefix_cache_hit_tokens": kv.hit_tokens.copy(),
            "prefix_cache_hit_rate": np.divide(
                kv.hit_tokens,
                kv.query_tokens,
                out=np.zeros(sp.num_replicas),
                where=kv.query_tokens > 0,
            ),
            "prefix_cache_evictions": kv.evictions.copy(),
        }
    )
