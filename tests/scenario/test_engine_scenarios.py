"""Scripted engine scenarios with exact expected token counts and times."""

import numpy as np
import pytest
from vidur_fast.kernels.codes import ReqStatus, SchedPolicy
from vidur_fast.kernels.dtypes import NS_PER_S

from tests.helpers.engine_harness import ALL_POLICIES, params, run


def _ms(ns):
    return np.asarray(ns) / 1e6


@pytest.mark.parametrize("policy", ALL_POLICIES)
def test_every_request_finishes_with_its_tokens(policy):
    rng = np.random.default_rng(3)
    n = 60
    arr = np.cumsum(rng.exponential(0.05, n))
    prompt = rng.integers(20, 400, n)
    decode = rng.integers(1, 40, n)
    out = run(arr, prompt, decode, params(policy, n_replicas=2))
    r = out.reqs
    assert (r.status == ReqStatus.FINISHED).all()
    assert (r.generated == decode).all()
    assert (r.arrival_ns <= r.sched_ns).all()
    assert (r.sched_ns < r.first_tok_ns).all()
    assert (r.first_tok_ns <= r.done_ns).all()
    assert (out.reps.alloc_blocks == 0).all(), "blocks leaked"
    assert out.batches["num_tokens"].sum() >= prompt.sum() + decode.sum() - n


def test_sarathi_chunks_a_long_prompt_and_decodes_first():
    # request 0 (600-token prompt) is chunked 512 + 88; request 1 arrives later and its
    # decodes take one token of the budget each step.
    out = run([0.0], [600], [3], params(SchedPolicy.SARATHI, chunk=512))
    b = out.batches
    assert list(b["num_tokens"]) == [512, 88, 1, 1]
    assert list(b["num_prefill_tokens"]) == [512, 88, 0, 0]
    # linear grid: 1 ms + 0.01 ms/token, tokens rounded up to 8
    assert _ms(out.reqs.first_tok_ns[0]) == pytest.approx(2 * ((1 + 5.12) + (1 + 0.88)))


def test_vllm_v1_budget_is_shared_by_decodes_and_prefill():
    # A decodes while B's 1000-token prompt arrives: 512 budget = 1 decode + 511 prefill.
    out = run([0.0, 0.0011], [16, 1000], [50, 2], params(SchedPolicy.VLLM_V1, chunk=512))
    b = out.batches
    second = b.iloc[1]
    assert second["num_tokens"] == 512 and second["num_prefill_tokens"] == 511


def test_vllm_v1_preempts_newest_running_request_when_blocks_run_out():
    # 10 usable blocks of 16 tokens: two 64-token prompts fit (4 blocks each) but cannot
    # both grow to 64 + 60 tokens; the later one is preempted and recomputed.
    sp = params(SchedPolicy.VLLM_V1, num_blocks=10, chunk=512)
    out = run([0.0, 0.0], [64, 64], [60, 60], sp)
    assert out.reps.preemptions[0] >= 1
    assert out.reqs.restarts[1] >= 1 and out.reqs.restarts[0] == 0
    assert (out.reqs.generated == 60).all()


def test_sarathi_preemption_restarts_latest_arrival():
    sp = params(SchedPolicy.SARATHI, num_blocks=12, chunk=512)
    out = run([0.0, 0.001], [64, 64], [100, 100], sp)
    assert out.reqs.restarts[1] >= 1
    assert out.reqs.restarts[0] == 0
    assert (out.reqs.generated == 100).all()


def test_pipeline_parallel_stages_overlap_micro_batches():
    # with 2 stages two micro-batches are in flight: the run is shorter than serial
    rng = np.random.default_rng(0)
    n = 40
    arr = np.zeros(n)
    prompt = rng.integers(50, 100, n)
    decode = np.full(n, 20)
    serial = run(arr, prompt, decode, params(SchedPolicy.SARATHI, batch_cap=8, pp=1))
    piped = run(arr, prompt, decode, params(SchedPolicy.SARATHI, batch_cap=8, pp=2), pp=2)
    assert (piped.reqs.generated == 20).all()
    assert piped.end_ns < serial.end_ns
    assert piped.batches["end_s" if "end_s" in piped.batches else "end_ns"].size > 0


def test_two_runs_are_identical():
    rng = np.random.default_rng(7)
    n = 80
    arr = np.cumsum(rng.exponential(0.01, n))
    prompt = rng.integers(20, 800, n)
    decode = rng.integers(1, 60, n)
    a = run(arr, prompt, decode, params(SchedPolicy.VLLM_V1, num_blocks=60, n_replicas=3))
    b = run(arr, prompt, decode, params(SchedPolicy.VLLM_V1, num_blocks=60, n_replicas=3))
    for f in a.reqs._fields:
        np.testing.assert_array_equal(getattr(a.reqs, f), getattr(b.reqs, f))
    assert a.batches.equals(b.batches)
    assert a.end_ns / NS_PER_S > 0
