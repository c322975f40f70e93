"""A batch log too small for the run spills to disk and resumes without changing anything."""

import threading
from concurrent.futures import ThreadPoolExecutor

import h5py
import numpy as np
from vidur_fast.kernels.codes import SchedPolicy
from vidur_fast.kernels.timing import TimingParams

from tests.helpers.engine_harness import GC, G, linear_grids, params
from vidur_fast.engine import batch_store
from vidur_fast.engine.run import run_engine
from vidur_fast.outputs import h5


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


def _batches_h5(out, path) -> None:
    with ThreadPoolExecutor(2) as pool, h5py.File(path, "w") as f:
        for name, rows, chunks, rest in out.batch_log.encoded_columns():
            h5._write_column(f, "batches", name, rows, chunks, rest, pool)


def test_chunks_compressed_during_the_run_give_the_batches_exactly(monkeypatch, tmp_path):
    # chunks of 5 rows, flushes of up to 7: chunks straddle flushes and runs end mid-chunk
    monkeypatch.setattr(batch_store, "CHUNK_ROWS", 5)
    monkeypatch.setattr(h5, "CHUNK_ROWS", 5)
    whole = _run(1 << 16).batch_log.frame()
    for name in ("a", "b"):
        out = _run(7)
        assert out.batch_log.spilled_rows > 10
        _batches_h5(out, tmp_path / f"{name}.h5")
        # the spill thread ends at the first read of the batches after the run
        assert not [t for t in threading.enumerate() if t.name.startswith("vidur-fast-spill")]
    assert (tmp_path / "a.h5").read_bytes() == (tmp_path / "b.h5").read_bytes()
    with h5py.File(tmp_path / "a.h5") as f:
        for c in whole.columns:
            assert f[c].chunks == (5,)
            np.testing.assert_array_equal(f[c][()], whole[c].to_numpy())
