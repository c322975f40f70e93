"""Closed-loop workload: concurrency bound, client hand-off times, warm-up exclusion."""

import numpy as np
import pytest
from vidur_fast.kernels.codes import SchedPolicy
from vidur_fast.kernels.dtypes import NS_PER_S
from vidur_fast.kernels.timing import TimingParams

from tests.helpers.engine_harness import linear_grids, params
from vidur_fast.config.workload import ClosedLoopWorkload, FixedLengths, UniformLengths
from vidur_fast.engine.run import run_engine
from vidur_fast.errors import ConfigError
from vidur_fast.metrics.closed_loop import closed_loop_arrivals
from vidur_fast.workload.closed_loop import (
    ClosedLoopPlan,
    build_closed_loop,
    measurement_mask,
)


def _run(cfg: ClosedLoopWorkload, seed: int = 0, num_blocks: int = 4000):
    table, plan = build_closed_loop(cfg, seed)
    n = len(table)
    sp = params(SchedPolicy.VLLM_V1, num_blocks=num_blocks, batch_cap=64, chunk=2048)
    tp = TimingParams(64, 32, 2, 0.0, 0.0, 0.0, 1, 1, 1)
    out = run_engine(
        table.arrival_s,
        table.prompt_tokens,
        table.decode_tokens,
        np.full(n, -1),
        np.zeros(n + 1, dtype=np.int64),
        np.zeros(n, dtype=np.uint8),
        linear_grids(),
        tp,
        sp,
        np.zeros(n),
        closed_loop=plan,
    )
    return table, plan, out


def _in_flight_max(send_ns: np.ndarray, done_ns: np.ndarray) -> int:
    """Most requests sent and not yet completed at any instant (a completion at t frees its
    slot before a send at t)."""
    events = np.concatenate(
        [
            np.stack([send_ns, np.ones_like(send_ns)], 1),
            np.stack([done_ns, -np.ones_like(done_ns)], 1),
        ]
    )
    order = np.lexsort((events[:, 1], events[:, 0]))
    return int(np.cumsum(events[order, 1]).max())


@pytest.mark.parametrize("think", ["fixed", "exponential"])
def test_never_more_than_n_in_flight_and_hand_off_at_completion_plus_think(think):
    cfg = ClosedLoopWorkload(
        concurrency=5,
        num_requests=60,
        lengths=UniformLengths(min_tokens=40, max_tokens=400, prefill_to_decode_ratio=3.0),
        think_time_s=0.01,
        think_time=think,
        response_ms=0.5,
        ingest_ms=0.2,
    )
    table, plan, out = _run(cfg, seed=3)
    reqs, cl = out.reqs, out.closed_loop
    assert out.status == "done"
    assert np.all(reqs.done_ns > reqs.arrival_ns)
    assert _in_flight_max(reqs.arrival_ns, reqs.done_ns + 500_000) <= 5
    think_ns = np.round(plan.think_s * NS_PER_S).astype(np.int64)
    assert sorted(set(cl.client.tolist())) == list(range(5))
    for c in range(5):
        ids = np.flatnonzero(cl.client == c)
        ids = ids[np.argsort(reqs.arrival_ns[ids], kind="stable")]
        assert reqs.arrival_ns[ids[0]] == 0
        # next send = previous completion + response latency + think time, exactly
        expect = reqs.done_ns[ids[:-1]] + 500_000 + think_ns[ids[1:]]
        np.testing.assert_array_equal(reqs.arrival_ns[ids[1:]], expect)
    # the serial front end delays the first token past ingest of everything sent before
    assert np.all(reqs.first_tok_ns - reqs.arrival_ns >= 200_000)


def test_concurrency_is_reached_and_requests_released_in_order():
    cfg = ClosedLoopWorkload(concurrency=4, num_requests=30, lengths=FixedLengths(64, 16))
    _, _, out = _run(cfg)
    a = out.reqs.arrival_ns
    assert np.all(np.diff(a) >= 0)  # fixed think time: release order == send order
    assert _in_flight_max(a, out.reqs.done_ns) == 4


def test_duration_stops_sending_and_unsent_requests_are_not_reported():
    cfg = ClosedLoopWorkload(
        concurrency=2, num_requests=1000, duration_s=0.05, lengths=FixedLengths(64, 8)
    )
    _, _, out = _run(cfg)
    arr = closed_loop_arrivals(out.reqs)
    sent = np.isfinite(arr)
    assert 2 < sent.sum() < 1000
    assert arr[sent].max() <= 0.05
    assert np.all(out.reqs.done_ns[sent] < np.iinfo(np.int64).max)


def test_measurement_window_excludes_warmup_requests_and_time():
    plan = ClosedLoopPlan(2, np.zeros(2), np.zeros(6), None, 2, 0.15, 0.2, np.zeros(6), 0.0)
    arrival = np.array([0.0, 0.0, 0.1, 0.2, 0.3, np.nan])
    np.testing.assert_array_equal(
        measurement_mask(plan, arrival), [False, False, False, True, True, False]
    )


def test_simulate_reports_real_arrivals_and_warmup_exclusion():
    from vidur_fast.api import simulate
    from vidur_fast.config.sim import SimConfig

    cfg = SimConfig(
        workload=ClosedLoopWorkload(
            concurrency=3, num_requests=12, lengths=FixedLengths(128, 8), warmup_requests=3
        ),
        quiet=True,
    )
    res = simulate(cfg)
    req = res.requests
    cl = res.summary["closed_loop"]
    assert cl["num_released"] == 12 and cl["num_measured"] == 9 and cl["num_excluded"] == 3
    assert res.summary["num_requests"] == 9
    assert list(req["in_window"]) == [False] * 3 + [True] * 9
    assert req["arrived_at"].iloc[:3].eq(0).all() and req["arrived_at"].iloc[3:].gt(0).all()
    # TTFT is measured from the real send time
    np.testing.assert_allclose(
        req["prefill_completed_at"] - req["arrived_at"], req["prefill_e2e_time"]
    )
    mean_ttft = req.loc[req["in_window"], "client_ttft"].mean()
    assert cl["ttft"]["mean"] == pytest.approx(mean_ttft)


@pytest.mark.parametrize(
    "field,kwargs",
    [
        ("workload.concurrency", dict(concurrency=0)),
        ("workload.num_requests", dict(num_requests=0)),
        ("workload.lengths.decode_tokens", dict(lengths=FixedLengths(16, 0))),
        ("workload.think_time_s", dict(think_time_s=-1.0)),
        ("workload.warmup_requests", dict(num_requests=5, warmup_requests=5)),
        ("workload.think_time", dict(think_time="poisson")),
        ("workload.ingest_ms", dict(ingest_ms=float("nan"))),
    ],
)
def test_bad_closed_loop_config_names_the_field(field, kwargs):
    with pytest.raises(ConfigError, match=field.replace(".", r"\.")):
        build_closed_loop(ClosedLoopWorkload(**kwargs), 0)


@pytest.mark.parametrize("cap,first_batch", [(0, 3), (1, 1), (2, 2)])
def test_max_partial_prefills_caps_prefills_per_step(cap, first_batch):
    from tests.helpers.engine_harness import run

    sp = params(SchedPolicy.VLLM_V1, chunk=4096)._replace(max_num_partial_prefills=cap)
    out = run([0.0, 0.0, 0.0], [100, 100, 100], [4, 4, 4], sp)
    sizes = out.batches["batch_size"].tolist()
    assert sizes[0] == first_batch
    # decodes of admitted requests still run alongside the next prefill
    if cap == 1:
        assert out.batches["num_prefill_tokens"].tolist()[:3] == [100, 100, 100]
        assert sizes[:3] == [1, 2, 3]


def _joined_next_step(out) -> tuple[int, int]:
    """(requests that reached the replica while a step ran, those of them whose first token
    came at the end of the step right after that one)."""
    b = out.batches.sort_values("end_ns")
    start, end = b["start_ns"].to_numpy(), b["end_ns"].to_numpy()
    reqs = out.reqs
    during, joined = 0, 0
    for i in range(reqs.arrival_ns.shape[0]):
        k = np.flatnonzero((start < reqs.arrival_ns[i]) & (reqs.arrival_ns[i] < end))
        if k.size == 0 or k[0] + 1 >= end.shape[0]:
            continue
        during += 1
        joined += int(reqs.first_tok_ns[i] <= end[k[0] + 1])
    return during, joined


def _run_sched(cfg: ClosedLoopWorkload, async_on: bool, seed: int):
    table, plan = build_closed_loop(cfg, seed)
    n = len(table)
    sp = params(SchedPolicy.VLLM_V1, num_blocks=4000, batch_cap=64, chunk=2048)
    sp = sp._replace(async_scheduling=int(async_on))
    return run_engine(
        table.arrival_s, table.prompt_tokens, table.decode_tokens, np.full(n, -1),
        np.zeros(n + 1, dtype=np.int64), np.zeros(n, dtype=np.uint8), linear_grids(),
        TimingParams(64, 32, 2, 0.0, 0.0, 0.0, 1, 1, 1), sp, np.zeros(n),
        closed_loop=plan,
    )  # fmt: skip


def test_async_scheduling_joins_closed_loop_arrivals_to_the_step_after_next():
    """vLLM's async scheduling is the engine's (scheduler.async_scheduling), for closed-loop
    arrivals as for open-loop ones: step k+1 is formed while step k runs, so a request that
    arrives during step k joins step k+2 at the earliest."""
    cfg = ClosedLoopWorkload(
        concurrency=6,
        num_requests=60,
        lengths=UniformLengths(min_tokens=40, max_tokens=400, prefill_to_decode_ratio=3.0),
        response_ms=0.5,
    )
    sync = _run_sched(cfg, False, seed=5)
    ahead = _run_sched(cfg, True, seed=5)
    assert sync.status == ahead.status == "done"
    during, joined = _joined_next_step(sync)
    assert during > 10 and joined == during  # synchronous: the next step takes them
    during, joined = _joined_next_step(ahead)
    assert during > 10 and joined == 0  # one step ahead: never the step already formed
    # a client's first request meets an idle engine and is scheduled at once
    assert ahead.reqs.sched_ns[0] == ahead.reqs.arrival_ns[0] == 0
    # waiting one more step costs time to first token
    ttft = lambda o: np.mean(o.reqs.first_tok_ns - o.reqs.arrival_ns)  # noqa: E731
    assert ttft(ahead) > ttft(sync)
