"""Without hashes in the workload each replica keeps its prefix-cache pool as counts until
its first preemption (kernels/block_counts.py). The engine still equals the reference, whose
pool holds every block, on every request and batch record and on the cache counters (lookups,
hits, evictions), with and without preemptions and async scheduling; and a run with counted
pools equals the same run with every pool laid out from the start, block by block at the end
wherever a replica was laid out by a preemption."""

import numpy as np
import pytest
from vidur_fast.kernels.codes import BLK_REF

import vidur_fast.engine.run as engine_run
from tests.property.test_reference_diff import assert_same, random_v1_case, run_case

CASES = 40


def _unhashed_case(async_scheduling: bool, seed: int):
    case, sp, grids, tp = random_v1_case(True, async_scheduling, seed)
    case.hashes = [[] for _ in case.hashes]
    return case, sp, grids, tp


@pytest.mark.parametrize("seed", range(CASES))
@pytest.mark.parametrize("async_scheduling", [False, True], ids=["sync", "async"])
def test_counted_pools_equal_reference(async_scheduling, seed):
    out, ref, sp = run_case(*_unhashed_case(async_scheduling, seed))
    assert all(q.done_ns is not None for q in ref.requests if not q.rejected)
    assert_same(out, ref, sp, layout=False)


def _laid_out_run(monkeypatch, case):
    monkeypatch.setattr(engine_run, "COUNT_UNHASHED_POOLS", False)
    try:
        return run_case(*case)[0]
    finally:
        monkeypatch.setattr(engine_run, "COUNT_UNHASHED_POOLS", True)


@pytest.mark.parametrize("seed", range(0, CASES, 4))
def test_counted_pools_equal_laid_out_pools(monkeypatch, seed):
    case = _unhashed_case(True, seed)
    counted = run_case(*case)[0]
    laid_out = _laid_out_run(monkeypatch, case)
    assert laid_out.kv.counted.sum() == 0
    for name in ("sched_ns", "first_tok_ns", "done_ns", "restarts", "preempt_ns", "tbt_sum_ns"):
        np.testing.assert_array_equal(getattr(counted.reqs, name), getattr(laid_out.reqs, name))
    for name in ("query_tokens", "hit_tokens", "evictions", "nfree"):
        np.testing.assert_array_equal(getattr(counted.kv, name), getattr(laid_out.kv, name))
    for r in np.flatnonzero(counted.kv.counted == 0):
        # a replica laid out at its first preemption: the same reference counts per hash
        # state (the block ids differ: they are given in a different order)
        refs_c = np.sort(counted.kv.blk[r, :, BLK_REF])
        refs_l = np.sort(laid_out.kv.blk[r, :, BLK_REF])
        np.testing.assert_array_equal(refs_c, refs_l)


def test_counted_cases_cover_preemption_and_eviction():
    """Some cases lay a replica out (a preemption) and re-admit with hits on its own blocks,
    some stay counted throughout, and cached blocks are evicted (else the comparison would not
    cover them)."""
    laid_out = stayed = evictions = readmit_hits = 0
    for seed in range(CASES):
        for async_scheduling in (False, True):
            out, _, _ = run_case(*_unhashed_case(async_scheduling, seed))
            laid_out += int((out.kv.counted == 0).sum())
            stayed += int(out.kv.counted.sum())
            evictions += int(out.kv.evictions.sum())
            readmit_hits += int(out.kv.hit_tokens.sum())
    assert laid_out > 0 and stayed > 0 and evictions > 0 and readmit_hits > 0
