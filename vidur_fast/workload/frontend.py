"""The API-server front ends of an open-loop workload: when each request reaches the engine.

There is one front end per replica that takes arrivals (vLLM runs an API server per engine);
each handles one request at a time (request parsing, tokenization), and requests are taken in
arrival order by the first one free (kernels/front_end.py): with one front end, request i
reaches the engine at e_i = max(a_i, e_{i-1}) + s_i for arrival a_i and service time s_i.
The closed loop runs the same FIFO inside the engine (kernels/closed_loop.py), since its
arrivals are decided during the run.
"""

import numpy as np


def service_s(ingest_ms: float | None, ingest_us_per_token: float, prompt: np.ndarray):
    """Front-end time of each request (s); None (an unresolved engine default) counts as 0."""
    p = np.asarray(prompt, dtype=np.float64)
    return 1e-3 * (ingest_ms or 0.0) + 1e-6 * ingest_us_per_token * p


def engine_arrivals(arrival_s: np.ndarray, service: np.ndarray, servers: int = 1) -> np.ndarray:
    """Time each request reaches the engine through a FIFO of servers front ends (arrivals
    in time order).

    Arrivals that are not finite (none in an open-loop table) pass through unchanged.
    """
    a = np.asarray(arrival_s, dtype=np.float64)
    s = np.asarray(service, dtype=np.float64)
    if a.shape[0] == 0 or not np.any(s > 0):
        return a.copy()
    from vidur_fast.jit_start import start_numba_target
    from vidur_fast.kernels.front_end import fifo_servers_nb

    start_numba_target()  # before the first kernel (jit_start.py)
    out = np.empty_like(a)
    fifo_servers_nb(a, s, np.zeros(max(1, servers), dtype=np.float64), out)
    return out
