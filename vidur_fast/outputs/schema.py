"""Units and one-line descriptions of every column written to metrics.h5.

Columns that are not listed (for example a new batch-log counter) still get written; their unit
is inferred from the name suffix so the file stays self-describing.
"""

FORMAT_VERSION = 4

REQUEST_COLUMNS = {
    "request_id": ("1", "row index in arrival order"),
    "replica": ("1", "replica the request was routed to (-1: never routed)"),
    "arrived_at": ("s", "arrival time"),
    "request_num_prefill_tokens": ("tokens", "prompt tokens"),
    "request_num_decode_tokens": ("tokens", "output tokens asked for"),
    "request_num_tokens": ("tokens", "prompt + output tokens"),
    "request_pd_ratio": ("1", "prompt / output tokens"),
    "completed": ("bool", "1 when the request finished"),
    "rejected": ("code", "0 = admitted; non-zero = rejected up front (reason code)"),
    "request_e2e_time": ("s", "completion - arrival"),
    "request_e2e_time_normalized": ("s/token", "E2E / output tokens"),
    "request_execution_time": ("s", "sum of stage times of the batches it ran in"),
    "request_execution_time_normalized": ("s/token", "execution time / output tokens"),
    "request_model_execution_time": ("s", "execution time without CPU overhead"),
    "request_model_execution_time_normalized": ("s/token", "model time / output tokens"),
    "request_preemption_time": ("s", "gaps between its stage end and next stage start"),
    "request_scheduling_delay": ("s", "first scheduled - arrival"),
    "request_execution_plus_preemption_time": ("s", "execution + preemption time"),
    "request_execution_plus_preemption_time_normalized": ("s/token", "per output token"),
    "prefill_e2e_time": ("s", "TTFT: first token - arrival"),
    "prefill_e2e_time_normalized": ("s/token", "TTFT / prompt tokens"),
    "prefill_time_execution_plus_preemption": ("s", "first token - first scheduled"),
    "prefill_time_execution_plus_preemption_normalized": ("s/token", "per prompt token"),
    "decode_time_execution_plus_preemption_normalized": (
        "s/token",
        "TPOT: (completion - first token) / output tokens",
    ),  # noqa: E501
    "tbt_mean": ("s", "mean time between consecutive output tokens"),
    "tbt_max": ("s", "longest time between consecutive output tokens"),
    "request_num_restarts": ("1", "times the request was preempted and restarted"),
    "request_num_prefill_tokens_cached": ("tokens", "prompt tokens served from the prefix cache"),
    "request_inter_arrival_delay": ("s", "arrival - previous arrival (NaN for the first)"),
    "completed_at": ("s", "completion time"),
    "scheduled_at": ("s", "time first put in a batch"),
    "prefill_completed_at": ("s", "time of the first output token"),
}

BATCH_COLUMNS = {
    "replica": ("1", "replica id"),
    "batch_size": ("requests", "requests in the batch"),
    "num_tokens": ("tokens", "tokens processed by the batch"),
    "num_prefill_tokens": ("tokens", "prompt tokens (prefill chunks)"),
    "num_decode_tokens": ("tokens", "decode tokens (one per decoding request)"),
    "alloc_blocks": ("blocks", "KV blocks allocated on the replica after the batch was formed"),
    "waiting_requests": ("requests", "waiting-queue length after the batch was formed"),
    "preemptions": ("requests", "preemptions while forming the batch"),
    "num_cached_tokens": (
        "tokens",
        "prompt tokens found in the prefix cache by requests admitted into the batch",
    ),
    "start_s": ("s", "time the batch was formed"),
    "end_s": ("s", "time the batch left the last pipeline stage"),
    "stage_s": ("s", "duration of the first pipeline stage"),
}

REPLICA_COLUMNS = {
    "replica": ("1", "replica id"),
    "pool": ("1", "pool of the replica (cluster.pools order; 0 for a one-pool cluster)"),
    "batches": ("1", "batches run"),
    "preemptions": ("1", "preemptions"),
    "num_blocks": ("blocks", "KV blocks of the replica"),
    "kv_usage_mean": ("fraction", "time-weighted mean of allocated / num_blocks"),
    "kv_usage_peak": ("fraction", "peak allocated / num_blocks"),
    "busy_fraction": ("fraction", "time the first stage was busy / simulated time"),
    "requests_completed": ("1", "requests routed to the replica"),
    "prefix_cache_query_tokens": ("tokens", "prompt tokens looked up in the prefix cache"),
    "prefix_cache_hit_tokens": ("tokens", "prompt tokens found in the prefix cache"),
    "prefix_cache_hit_rate": ("fraction", "hit tokens / query tokens (every admission)"),
    "prefix_cache_evictions": ("blocks", "cached blocks evicted to make room"),
}

# batch-log column -> time-series name (the sample time); the other numeric batch columns keep
# their names
TIMESERIES_RENAME = {"start_s": "time_s"}
TIMESERIES_DROPPED = ("replica", "end_s", "stage_s", "alloc_blocks")

# Above this many batches, /timeseries holds no copies of the batch columns (they doubled the
# write time of big runs) and no row indices either (an index per batch is a sort and a
# compressed int64 column of tens of millions of rows, and /batches/replica already says it):
# replica r's samples are the rows of /batches whose replica is r. The group attribute `layout`
# says which ("columns" or BY_REPLICA; files of format_version 2-3 may say "batch_row": each
# replica group holds only its rows of /batches).
TIMESERIES_FULL_MAX_ROWS = 250_000
BY_REPLICA = "batches_by_replica"

TIMESERIES_COLUMNS = {
    "time_s": ("s", "batch formation time (the sample time)"),
    "batch_size": ("requests", "requests in the batch"),
    "num_tokens": ("tokens", "tokens in the batch"),
    "num_prefill_tokens": ("tokens", "prompt tokens in the batch"),
    "num_decode_tokens": ("tokens", "decode tokens in the batch"),
    "kv_usage_fraction": ("fraction", "allocated KV blocks / num_blocks after formation"),
    "waiting_requests": ("requests", "waiting-queue length after formation"),
    "preemptions": ("requests", "preemptions while forming the batch"),
    "num_cached_tokens": (
        "tokens",
        "prompt tokens found in the prefix cache by requests admitted into the batch",
    ),
    "duration_s": ("s", "end_s - time_s: formation to leaving the last stage"),
    "prefix_cache_hit_rate": ("fraction", "running prefix-cache hit rate of the replica"),
}

TBT_COLUMNS = {
    "count": ("1", "inter-token gaps in the bucket"),
    "upper_edge_s": ("s", "upper edge of the bucket (1% wide log buckets)"),
}

GROUP_COLUMNS = {
    "requests": REQUEST_COLUMNS,
    "batches": BATCH_COLUMNS,
    "replicas": REPLICA_COLUMNS,
    "timeseries": TIMESERIES_COLUMNS,
    "tbt_histogram": TBT_COLUMNS,
}

_SUFFIX_UNITS = (
    ("_ns", "ns"),
    ("_s", "s"),
    ("_tokens", "tokens"),
    ("_blocks", "blocks"),
    ("_fraction", "fraction"),
    ("_rate", "fraction"),
)


def column_unit(group: str, name: str) -> tuple[str, str]:
    """(unit, description) of a column; unlisted columns get a unit from their name suffix."""
    known = GROUP_COLUMNS.get(group, {})
    if name in known:
        return known[name]
    for suffix, unit in _SUFFIX_UNITS:
        if name.endswith(suffix):
            return unit, "extra column"
    return "1", "extra column"
