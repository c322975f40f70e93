"""Per-request and summary metrics of a closed-loop run (arrivals known only after the run)."""

import numpy as np

from vidur_fast.kernels.closed_loop import ClosedLoop
from vidur_fast.kernels.dtypes import NEVER, NS_PER_S
from vidur_fast.kernels.state import Reqs
from vidur_fast.metrics.summary import describe
from vidur_fast.metrics.table import Columns
from vidur_fast.workload.closed_loop import ClosedLoopPlan, measurement_mask


def closed_loop_arrivals(reqs: Reqs) -> np.ndarray:
    """Arrival (send) time of each request in seconds; NaN for requests never sent."""
    a = reqs.arrival_ns
    return np.where(a != NEVER, a.astype(np.float64) / NS_PER_S, np.nan)


def closed_loop_metrics(req: Columns, plan: ClosedLoopPlan, cl: ClosedLoop) -> Columns:
    """Add client, released, in_window and time_per_output_token (as `vllm bench serve`
    defines it: (e2e - ttft) / (output tokens - 1), NaN for one-token outputs)."""
    arrival = req["arrived_at"]
    e2e, ttft = req["request_e2e_time"], req["prefill_e2e_time"]
    dec = req["request_num_decode_tokens"].astype(np.float64)
    with np.errstate(invalid="ignore", divide="ignore"):
        tpot = (e2e - ttft) / (dec - 1)
    return req.assign(
        client=cl.client.copy(),
        released=np.isfinite(arrival),
        in_window=measurement_mask(plan, arrival),
        time_per_output_token=np.where(dec > 1, tpot, np.nan),
        # what the client sees: every token arrives response_s after the engine emitted it
        client_ttft=ttft + plan.response_s,
        client_e2e_time=e2e + plan.response_s,
    )


def closed_loop_summary(req, plan: ClosedLoopPlan) -> dict:
    """Clients, requests sent and measured, and client-side TTFT, TPOT and end-to-end latency
    of the measurement window (s)."""
    win = np.asarray(req["in_window"]) & np.asarray(req["completed"])
    released = int(np.asarray(req["released"]).sum())
    return {
        "concurrency": plan.n_clients,
        "num_released": released,
        "num_measured": int(win.sum()),
        "num_excluded": int(released - win.sum()),
        "warmup_requests": int(plan.warmup_requests),
        "ttft": describe(np.asarray(req["client_ttft"])[win]),
        "tpot": describe(np.asarray(req["time_per_output_token"])[win]),
        "e2e": describe(np.asarray(req["client_e2e_time"])[win]),
    }
