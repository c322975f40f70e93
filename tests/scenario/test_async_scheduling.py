"""vLLM v1 async scheduling in the engine loop: the next step is formed while the previous one
runs, so the host overhead of a step hides behind the step before it."""

import numpy as np
import pytest
from vidur_fast.kernels.codes import BLK_REF, ReqStatus, SchedPolicy
from vidur_fast.kernels.timing import TimingParams

from tests.helpers.engine_harness import GC, G, linear_grids, params
from vidur_fast.engine.run import run_engine

HOST_MS = 0.5


def _run(arrival_s, prompt, decode, async_on, host_ms=HOST_MS, hashes=None, **kw):
    n = len(arrival_s)
    sp = params(SchedPolicy.VLLM_V1, **kw)._replace(async_scheduling=int(async_on))
    if hashes is not None:
        sp = sp._replace(enable_prefix_caching=1)
    # 2 layers of 1 ms + 0.01 ms/token (tokens rounded up to 8), plus a fixed host overhead
    tp = TimingParams(G, GC, 2, 0.0, 0.0, host_ms, 1, 1, 1)
    hash_off = np.zeros(n + 1, dtype=np.int64)
    if hashes is not None:
        hash_off[1:] = np.cumsum([len(h) for h in hashes])
        hashes = np.concatenate([np.asarray(h, dtype=np.int64) for h in hashes])
    return run_engine(
        np.asarray(arrival_s, dtype=np.float64),
        np.asarray(prompt),
        np.asarray(decode),
        np.full(n, -1),
        hash_off,
        np.zeros(n, dtype=np.uint8),
        linear_grids(),
        tp,
        sp,
        np.zeros(n),
        hashes=hashes,
    )


def _assert_drained(out, decode):
    r = out.reqs
    assert (r.status == ReqStatus.FINISHED).all()
    assert (r.generated == np.asarray(decode)).all()
    assert (out.reps.alloc_blocks == 0).all(), "blocks leaked"
    assert (r.tok_inflight == 0).all() and (r.placeholders == 0).all()
    assert (r.tok_stale == 0).all()
    assert (out.reps.inflight == 0).all() and (out.reps.wq_len == 0).all()


def test_async_decode_gap_is_the_gpu_time_only():
    # one request alone: a decode step takes 2 * 1.08 ms on the GPU plus 0.5 ms on the host.
    # Synchronously every token waits for both; with async scheduling the host work of step
    # N+1 runs while step N is on the GPU, so the gap between tokens is the GPU part alone.
    sync = _run([0.0], [100], [20], False)
    asyn = _run([0.0], [100], [20], True)
    step_ns, gpu_ns = 2_660_000, 2_160_000
    for out, gap in ((sync, step_ns), (asyn, gpu_ns)):
        r = out.reqs
        assert r.tbt_n[0] == 19
        assert r.tbt_max_ns[0] == gap
        assert r.tbt_sum_ns[0] == 19 * gap
    # the first step starts on an idle replica: the same time to first token in both modes
    assert sync.reqs.first_tok_ns[0] == asyn.reqs.first_tok_ns[0]
    _assert_drained(asyn, [20])


def test_async_scheduling_lowers_tbt_under_load():
    rng = np.random.default_rng(11)
    n = 120
    arr = np.cumsum(rng.exponential(0.004, n))
    prompt = rng.integers(20, 600, n)
    decode = rng.integers(2, 80, n)
    sync = _run(arr, prompt, decode, False, chunk=1024, batch_cap=32)
    asyn = _run(arr, prompt, decode, True, chunk=1024, batch_cap=32)
    _assert_drained(sync, decode)
    _assert_drained(asyn, decode)

    def mean_tbt(out):
        return out.reqs.tbt_sum_ns.sum() / out.reqs.tbt_n.sum()

    # the host overhead (0.5 ms per step) disappears from almost every gap
    assert mean_tbt(asyn) < mean_tbt(sync) - 0.8 * HOST_MS * 1e6
    assert asyn.end_ns < sync.end_ns
    # batch records of one replica never overlap: a step starts when the one before ends
    b = asyn.batches.sort_values("start_ns")
    assert (b["start_ns"].to_numpy()[1:] >= b["end_ns"].to_numpy()[:-1]).all()


def test_async_without_host_overhead_keeps_step_times():
    # no host work to hide: every step costs what it costs synchronously
    out = _run([0.0], [100], [10], True, host_ms=0.0)
    assert out.reqs.tbt_max_ns[0] == 2_160_000
    assert out.reqs.tbt_sum_ns[0] == 9 * 2_160_000


@pytest.mark.parametrize("caching", [False, True])
def test_async_preemption_under_block_pressure_drains_cleanly(caching):
    # 40 blocks of 16 tokens for up to 8 requests: decodes run out of blocks and the newest
    # running request is preempted, often with its previous step still in flight
    rng = np.random.default_rng(5)
    n = 60
    arr = np.cumsum(rng.exponential(0.003, n))
    prompt = rng.integers(40, 200, n)
    decode = rng.integers(1, 120, n)
    hashes = None
    if caching:
        # every prompt starts with one of three shared 4-block prefixes
        hashes = [
            [1000 * (i % 3) + k + 1 for k in range(4)] + [10**6 + 100 * i + k for k in range(8)]
            for i in range(n)
        ]
    out = _run(arr, prompt, decode, True, hashes=hashes, num_blocks=40, batch_cap=8)
    _assert_drained(out, decode)
    assert out.reps.preemptions[0] > 0
    if caching:
        assert out.kv.hit_tokens[0] > 0
        assert (out.kv.blk[:, :, BLK_REF] == 0).all()


def test_sync_and_async_runs_are_each_deterministic():
    rng = np.random.default_rng(2)
    n = 50
    arr = np.cumsum(rng.exponential(0.005, n))
    prompt = rng.integers(20, 400, n)
    decode = rng.integers(1, 50, n)
    a = _run(arr, prompt, decode, True, num_blocks=60)
    b = _run(arr, prompt, decode, True, num_blocks=60)
    for f in a.reqs._fields:
        np.testing.assert_array_equal(getattr(a.reqs, f), getattr(b.reqs, f))
    assert a.batches.equals(b.batches)
