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


def _naive_servers(a, s, c):
    free, out = [0.0] * c, []
    for ai, si in zip(a, s, strict=True):
        k = min(range(c), key=lambda j: free[j])
        free[k] = max(ai, free[k]) + si
        out.append(free[k])
    return np.array(out)


def test_several_front_ends_match_the_first_free_server_definition():
    rng = np.random.default_rng(11)
    a = np.sort(rng.exponential(0.0005, 2000).cumsum())
    s = service_s(2.0, 1.5, rng.integers(1, 4000, 2000))
    for c in (1, 2, 3, 8, 64):
        want = _naive_servers(a, s, c)
        np.testing.assert_allclose(engine_arrivals(a, s, c), want, rtol=0, atol=1e-9)


def test_one_front_end_per_replica_keeps_a_busy_cluster_from_queueing_at_the_door():
    """800 req/s of 2 ms ingest: one front end (500 req/s at most) piles requests up; one per
    replica of 4 replicas serves each within its service time."""
    a = np.arange(4000) / 800.0
    s = np.full(4000, 0.002)
    one = engine_arrivals(a, s, 1) - a
    four = engine_arrivals(a, s, 4) - a
    assert one[-1] > 1.0
    np.testing.assert_allclose(four, 0.002, atol=1e-12)


def test_simulate_gives_each_replica_its_front_end():
    from vidur_fast import SimConfig, simulate
    from vidur_fast.config.sim import ClusterConfig
    from vidur_fast.config.workload import FixedLengths, PoissonIntervals, SyntheticWorkload

    def ttft_p99(replicas):
        cfg = SimConfig(
            cluster=ClusterConfig(num_replicas=replicas),
            workload=SyntheticWorkload(
                num_requests=3000, lengths=FixedLengths(64, 4), intervals=PoissonIntervals(qps=800)
            ),
            quiet=True,
        )
        return float(np.quantile(simulate(cfg).requests["prefill_e2e_time"], 0.99))

    # 8 replicas at 100 req/s each: the front ends add about their 2 ms, no queue of seconds
    assert ttft_p99(8) < 0.2
