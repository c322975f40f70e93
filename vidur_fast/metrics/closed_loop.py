"""Per-request and summary metrics of a closed-loop run (arrivals known only after the run)."""

import numpy as np
import pandas as pd

from vidur_fast.kernels.closed_loop import ClosedLoop
from vidur_fast.kernels.dtypes import NEVER, NS_PER_S
from vidur_fast.kernels.state import Reqs
from vidur_fast.metrics.summary import describe
from vidur_fast.workload.closed_loop import ClosedLoopPlan, measurement_mask


def closed_loop_arrivals(reqs: Reqs) -> np.ndarray:
    """Arrival (send) time of each request in seconds; NaN for requests never sent."""
    a = reqs.arrival_ns
    return np.where(a != NEVER, a.astype(np.float64) / NS_PER_S, np.nan)


def closed_loop_metrics(req: pd.DataFrame, plan: ClosedLoopPlan, cl: ClosedLoop) -> pd.DataFrame:
    """Add client, released, in_window and time_per_output_token (as `vllm bench serve`
    defines it: (e2e - ttft) / (output tokens - 1), NaN for one-token outputs)."""
    out = req.copy()
    arrival = out["arrived_at"].to_numpy()
    out["client"] = cl.client.copy()
    out["released"] = np.isfinite(arrival)
    out["in_window"] = measurement_mask(plan, arrival)
    dec = out["request_num_decode_tokens"].to_numpy().astype(np.float64)
    with np.errstate(invalid="ignore", divide="ignore"):
        tpot = (out["request_e2e_time"] - out["prefill_e2e_time"]).to_numpy() / (dec - 1)
    out["time_per_output_token"] = np.where(dec > 1, tpot, np.nan)
    # what the client sees: every token arrives response_s after the engine emitted it
    out["client_ttft"] = out["prefill_e2e_time"] + plan.response_s
    out["client_e2e_time"] = out["request_e2e_time"] + plan.response_s
    return out


def closed_loop_summary(req: pd.DataFrame, plan: ClosedLoopPlan) -> dict:
    """Clients, requests sent and measured, and client-side TTFT, TPOT and end-to-end latency
    of the measurement window (s)."""
    win = req["in_window"].to_numpy() & req["completed"].to_numpy()
    released = int(req["released"].sum())
    return {
        "concurrency": plan.n_clients,
        "num_released": released,
        "num_measured": int(win.sum()),
        "num_excluded": int(released - win.sum()),
        "warmup_requests": int(plan.warmup_requests),
        "ttft": describe(req["client_ttft"].to_numpy()[win]),
        "tpot": describe(req["time_per_output_token"].to_numpy()[win]),
        "e2e": describe(req["client_e2e_time"].to_numpy()[win]),
    }
