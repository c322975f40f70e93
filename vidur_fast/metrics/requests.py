"""Per-request metrics with Vidur's names, vectorised over the request columns."""

import numpy as np

from vidur_fast.kernels.codes import ReqStatus
from vidur_fast.kernels.dtypes import NEVER, NS_PER_S
from vidur_fast.kernels.state import Reqs
from vidur_fast.metrics.table import Columns


def _s(ns: np.ndarray) -> np.ndarray:
    return ns.astype(np.float64) / NS_PER_S


def request_metrics(reqs: Reqs, arrival_s: np.ndarray, response_s: float = 0.0) -> Columns:
    """One row per request, in arrival order; metrics of unfinished requests are NaN.

    arrival_s: the client's send times; response_s: front-end latency of each streamed token,
    added to the client-facing latencies (request_e2e_time, prefill_e2e_time) but not to the
    engine's own timestamps (scheduled_at, prefill_completed_at, completed_at).

    Normalised metrics divide by the tokens the request asked for (Vidur divides by the
    restart-changed counts).
    """
    done = reqs.status == ReqStatus.FINISHED
    prompt = reqs.total - reqs.orig_decode
    # copies, not views: most request fields are strided views of the engine's per-request
    # records (engine.state.alloc_reqs), which a view kept in the table would keep alive
    decode = np.ascontiguousarray(reqs.orig_decode)
    a = arrival_s
    c = np.where(done, _s(reqs.done_ns), np.nan)
    s = np.where(reqs.sched_ns != NEVER, _s(reqs.sched_ns), np.nan)
    f = np.where(reqs.first_tok_ns != NEVER, _s(reqs.first_tok_ns), np.nan)
    e = np.where(done, _s(reqs.exec_ns), np.nan)
    m = np.where(done, _s(reqs.model_ns), np.nan)
    p = np.where(done, _s(reqs.preempt_ns), np.nan)
    d = decode.astype(np.float64)
    pf = prompt.astype(np.float64)
    tbt_n = reqs.tbt_n.astype(np.float64)
    with np.errstate(invalid="ignore", divide="ignore"):
        tbt_mean = np.where(tbt_n > 0, _s(reqs.tbt_sum_ns) / tbt_n, np.nan)
    inter = np.diff(a, prepend=np.nan)
    return Columns(
        {
            "request_id": np.arange(a.shape[0]),
            "replica": reqs.replica.astype(np.int64),
            "arrived_at": a,
            "request_num_prefill_tokens": prompt,
            "request_num_decode_tokens": decode,
            "request_num_tokens": prompt + decode,
            "request_pd_ratio": pf / d,
            "completed": done,
            "rejected": reqs.rejected.astype(np.int64),
            "request_e2e_time": c - a + response_s,
            "request_e2e_time_normalized": (c - a + response_s) / d,
            "request_execution_time": e,
            "request_execution_time_normalized": e / d,
            "request_model_execution_time": m,
            "request_model_execution_time_normalized": m / d,
            "request_preemption_time": p,
            "request_scheduling_delay": s - a,
            "request_execution_plus_preemption_time": e + p,
            "request_execution_plus_preemption_time_normalized": (e + p) / d,
            "prefill_e2e_time": f - a + response_s,
            "prefill_e2e_time_normalized": (f - a + response_s) / pf,
            "prefill_time_execution_plus_preemption": f - s,
            "prefill_time_execution_plus_preemption_normalized": (f - s) / pf,
            "decode_time_execution_plus_preemption_normalized": (c - f) / d,
            "tbt_mean": tbt_mean,
            "tbt_max": np.where(tbt_n > 0, _s(reqs.tbt_max_ns), np.nan),
            "request_num_restarts": np.ascontiguousarray(reqs.restarts),
            "request_num_prefill_tokens_cached": np.ascontiguousarray(reqs.cached_tokens),
            "request_inter_arrival_delay": inter,
            "completed_at": c,
            "scheduled_at": s,
            "prefill_completed_at": f,
        }
    )
