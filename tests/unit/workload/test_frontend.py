"""The open-loop API-server front end: a FIFO server between the client's send and the engine."""

import numpy as np

from vidur_fast.workload.frontend import engine_arrivals, service_s


def _naive(a, s):
    out, free = [], -np.inf
    for ai, si in zip(a, s, strict=True):
        free = max(ai, free) + si
        out.append(free)
    return np.array(out)


def test_fifo_server_matches_the_sequential_definition():
    rng = np.random.default_rng(7)
    a = np.sort(rng.exponential(0.002, 400).cumsum())
    s = service_s(2.0, 1.5, rng.integers(1, 4000, 400))
    np.testing.assert_allclose(engine_arrivals(a, s), _naive(a, s), rtol=0, atol=1e-12)


def test_a_burst_is_spread_and_no_front_end_changes_nothing():
    a = np.array([0.0, 0.0, 0.0, 1.0])
    np.testing.assert_allclose(engine_arrivals(a, np.full(4, 0.002)), [0.002, 0.004, 0.006, 1.002])
    np.testing.assert_array_equal(engine_arrivals(a, service_s(None, 0.0, np.ones(4))), a)
