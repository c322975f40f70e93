"""A batch log too small for the run spills to disk and resumes without changing anything."""

import numpy as np
from vidur_fast.kernels.dtypes import SchedPolicy
from vidur_fast.kernels.timing import TimingParams

from vidur_fast.engine.run import run_engine

from .engine_harness import GC, G, linear_grids, params


def _run(log_capacity, policy=SchedPolicy.VLLM_V1, pp=1):
    rng = np.random.default_rng(11)
    n = 120
    arrival = np.cumsum(rng.exponential(0.01, n))
    prompt = rng.integers(20, 600, n)
    decode = rng.integers(1, 50, n)
    tp = TimingParams(G, GC, 2 // pp, 0.0, 0.0, 0.0, 1, 1, pp)
    return run_engine(
        arrival,
        prompt,
        decode,
        np.full(n, -1),
        np.zeros(n + 1, dtype=np.int64),
        np.zeros(n, dtype=np.uint8),
        linear_grids(),
        tp,
        params(policy, n_replicas=3, pp=pp, num_blocks=200, batch_cap=8),
        np.zeros(n),
        log_capacity=log_capacity,
    )


def test_spilled_batches_and_requests_match_an_unspilled_run():
    for policy, pp in ((SchedPolicy.VLLM_V1, 1), (SchedPolicy.SARATHI, 2)):
        whole = _run(1 << 16, policy, pp)
        spilled = _run(7, policy, pp)
        assert whole.batch_log.spilled_rows == 0
        assert spilled.batch_log.spilled_rows > 0
        assert len(spilled.batch_log) == len(whole.batch_log) > 7
        assert spilled.batches.equals(whole.batches)
        assert spilled.batch_log.frame().equals(whole.batch_log.frame())
        for f in whole.reqs._fields:
            np.testing.assert_array_equal(getattr(spilled.reqs, f), getattr(whole.reqs, f))


def test_frame_reports_seconds_and_streams_the_same_columns():
    out = _run(5)
    frame = out.batch_log.frame()
    assert list(frame.columns)[-3:] == ["start_s", "end_s", "stage_s"]
    np.testing.assert_allclose(frame["end_s"], out.batches["end_ns"] / 1e9)
    streamed = dict(out.batch_log.columns())
    assert list(streamed) == list(frame.columns)
    for k, v in streamed.items():
        np.testing.assert_array_equal(v, frame[k].to_numpy())
