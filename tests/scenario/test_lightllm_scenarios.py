"""LightLLM scripted scenarios: waiting-iteration prefills, the future-memory admission
estimate, and recompute preemption where Vidur raised an OOM error."""

import numpy as np
import pytest
from vidur_fast.kernels.codes import ReqStatus, SchedPolicy
from vidur_fast.kernels.dtypes import NEVER, NO_ID
from vidur_fast.kernels.queues import run_append_nb
from vidur_fast.kernels.sched_lightllm import schedule_lightllm_nb

from tests.helpers.engine_harness import params, run
from vidur_fast.engine.state import alloc_reps, alloc_reqs


def _ms(ns):
    return np.asarray(ns) / 1e6


def _lightllm(**kw):
    kw.setdefault("block_size", 1)
    kw.setdefault("num_blocks", 10_000)
    return params(SchedPolicy.LIGHTLLM, **kw)


def test_waiting_requests_get_a_prefill_after_max_waiting_iters_decodes():
    # A (100 + 6) prefills alone; B (50 + 2) arrives during it and waits for two decode steps.
    # Linear grid, 2 layers: a step of n tokens takes 2 * (1 + 0.01 * ceil8(n)) ms.
    out = run([0.0, 0.0005], [100, 50], [6, 2], _lightllm(max_waiting_iters=2))
    b = out.batches
    assert list(b["num_tokens"]) == [100, 1, 1, 50, 2, 1, 1]
    assert list(b["batch_size"]) == [1, 1, 1, 1, 2, 1, 1]
    r = out.reqs
    assert _ms(r.first_tok_ns[1]) == pytest.approx(4.08 + 2.16 + 2.16 + 3.12)
    assert _ms(r.done_ns[1]) == pytest.approx(11.52 + 2.16)
    assert _ms(r.done_ns[0]) == pytest.approx(13.68 + 2 * 2.16)
    # KV in tokens: A's prompt, then one token per decode step
    assert list(b["alloc_blocks"][:3]) == [100, 101, 102]


@pytest.mark.parametrize("num_blocks,b_batch", [(200, 50), (298, 11), (299, 0)])
def test_admission_estimate_counts_every_request_to_completion(num_blocks, b_batch):
    # Two 100 + 50 requests: each alone peaks at 101 + 48 = 149 tokens, both together at
    # 2 * 48 + 2 * 101 = 298, which must stay below the KV size (strictly). After k decode
    # steps of A the pair needs 298 - k: with 298 tokens B joins at the first prefill attempt
    # (after max_waiting_iters = 10 decodes), with 200 only once A is done.
    out = run([0.0, 0.0], [100, 100], [50, 50], _lightllm(num_blocks=num_blocks))
    r = out.reqs
    b = out.batches
    assert (r.generated == 50).all()
    assert r.sched_ns[1] == b["start_ns"].iloc[b_batch]
    if b_batch == 0:
        assert b["num_tokens"].iloc[0] == 200
    else:
        assert list(b["num_tokens"].iloc[: b_batch + 1]) == [100] + [1] * (b_batch - 1) + [100]
    if num_blocks == 200:
        assert r.sched_ns[1] == r.done_ns[0]
    assert r.restarts.sum() == 0


def test_decode_without_room_preempts_the_latest_running_request():
    # Two running requests hold 249 of 250 KV tokens; a decode step needs one token each.
    reqs = alloc_reqs(
        np.zeros(2, dtype=np.int64),
        np.array([100, 100]),
        np.array([60, 60]),
        np.full(2, -1),
        np.zeros(3, dtype=np.int64),
    )
    reps = alloc_reps(1, 1, 4)
    for i, held in ((0, 100), (1, 149)):
        reqs.processed[i] = 101 + (held - 100)
        reqs.prefill_done[i] = 1
        reqs.generated[i] = 1 + (held - 100)
        reqs.blocks[i] = held
        reqs.status[i] = ReqStatus.RUNNING
        assert run_append_nb(reps, 0, i)
    reps.alloc_blocks[0] = 249
    reps.alloc_reqs[0] = 2
    sp = _lightllm(num_blocks=250)
    n = schedule_lightllm_nb(reps, reqs, sp, 0, 0, 1000)
    assert n == 1 and reps.bat_req[0, 0, 0] == 0 and reps.bat_tok[0, 0, 0] == 1
    assert reps.preemptions[0] == 1 and reqs.restarts[1] == 1
    assert reps.wq_head[0] == 1 and reqs.q_next[1] == NO_ID
    # recompute: the 150 processed tokens become the prompt, 10 remain to generate
    assert reqs.prompt[1] == 150 and reqs.decode[1] == 10 and reqs.processed[1] == 0
    assert reqs.blocks[1] == 0 and reps.alloc_blocks[0] == 101
    assert reqs.sched_ns[1] == NEVER


def test_lightllm_finishes_a_random_trace_without_leaks():
    rng = np.random.default_rng(11)
    n = 80
    arr = np.cumsum(rng.exponential(0.004, n))
    prompt = rng.integers(10, 300, n)
    decode = rng.integers(1, 60, n)
    out = run(arr, prompt, decode, _lightllm(num_blocks=3000, batch_cap=8, n_replicas=2))
    assert (out.reqs.generated == decode).all()
    assert (out.reps.alloc_blocks == 0).all()
    assert out.batches["alloc_blocks"].max() < 3000
