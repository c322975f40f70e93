"""Clusters of two pools: the kernel engine equals the plain-Python reference exactly when the
pools differ in KV blocks, pipeline stages, timing grids and timing parameters (the reference
gets each replica's pool; the engine one PoolParams)."""

import dataclasses

import numpy as np
import pytest
from vidur_fast.kernels.codes import KV_RULE_PER_REQUEST, KV_RULE_SUM, SchedPolicy
from vidur_fast.kernels.dtypes import NS_PER_S
from vidur_fast.kernels.pools import stack_pools

from tests.helpers.random_cases import PP_CAPABLE, random_case
from tests.property.test_reference_diff import (
    V1_CONFIGS,
    _v1_id,
    assert_same,
    engine_pool,
    random_v1_case,
)
from tests.reference.naive_sim import naive_sim
from vidur_fast.engine.run import run_engine

CASES = 12


def other_pool(rng, sp, grids, tp):
    """A second pool: slower or faster grids, its own host overhead and kv rule, more KV
    blocks (every request still fits), and another pipeline depth where the policy has one."""
    scale = float(rng.choice([0.5, 1.7, 3.0]))
    g1 = grids._replace(
        tok_ms=grids.tok_ms * scale + 0.01,
        kv_save_ms=grids.kv_save_ms * scale,
        sendrecv_ms=grids.sendrecv_ms * scale,
        decode_ms=grids.decode_ms * scale,
        prefill_ms=grids.prefill_ms * scale,
    )
    pp = sp.pp
    if sp.policy in PP_CAPABLE and not sp.async_scheduling:
        pp = int(rng.choice([1, 2]))
    p1 = sp._replace(
        pp=pp,
        usable_blocks=sp.usable_blocks + int(rng.integers(0, 3 * sp.usable_blocks)),
        batch_size_cap_per_stage=max(1, sp.batch_size_cap // pp),
    )
    kv_rule = KV_RULE_PER_REQUEST if rng.random() < 0.5 else KV_RULE_SUM
    t1 = tp._replace(
        layers_per_stage=2 // pp,
        pp=pp,
        kv_rule=kv_rule,
        cpu_overhead_ms=float(rng.choice([0.0, 0.4])),
    )
    return p1, g1, t1


def run_pools(case, sp, grids, tp, rng):
    p1, g1, t1 = other_pool(rng, sp, grids, tp)
    counts = [int(rng.integers(1, 3)), int(rng.integers(1, 3))]
    rep_pool = np.repeat([0, 1], counts)
    per_pool = [(sp, grids, tp), (p1, g1, t1)]
    R = int(rep_pool.size)
    sp_all = sp._replace(
        num_replicas=R, pp=max(sp.pp, p1.pp), usable_blocks=max(sp.usable_blocks, p1.usable_blocks)
    )
    pools = stack_pools(rep_pool, [sp, p1], [tp, t1], [grids, g1])
    n = len(case.arrival_s)
    hash_off = np.zeros(n + 1, dtype=np.int64)
    hash_off[1:] = np.cumsum([len(h) for h in case.hashes])
    flat = np.array([h for hs in case.hashes for h in hs], dtype=np.int64)
    out = run_engine(
        case.arrival_s,
        case.prompt,
        case.decode,
        case.session,
        hash_off,
        case.rejected,
        grids,
        tp,
        sp_all,
        case.u_route,
        hashes=flat,
        pools=pools,
    )
    arrival_ns = np.round(case.arrival_s * NS_PER_S).astype(np.int64)
    ref = naive_sim(
        arrival_ns,
        case.prompt,
        case.decode,
        sp_all,
        grids,
        tp,
        case.u_route,
        rejected=case.rejected,
        session=case.session,
        hashes=case.hashes,
        replica_params=[per_pool[q] for q in rep_pool],
    )
    return out, ref, sp_all, [per_pool[q][0] for q in rep_pool]


def assert_same_pools(out, ref, sp_all, rep_params):
    assert all(q.done_ns is not None for q in ref.requests if not q.rejected)
    width = out.reps.busy_ns.shape[1]
    padded = [list(b) + [0] * (width - len(b)) for b in ref.busy_ns]
    assert_same(
        out, dataclasses.replace(ref, busy_ns=padded), sp_all._replace(enable_prefix_caching=0)
    )
    if not sp_all.enable_prefix_caching:
        return
    kv = out.kv
    for name in ("query_tokens", "hit_tokens", "evictions"):
        want = [getattr(x, name) for x in ref.pools]
        np.testing.assert_array_equal(getattr(kv, name), want, err_msg=name)
    for r, pool in enumerate(ref.pools):
        order, hashes, refs = engine_pool(kv, r)
        u = rep_params[r].usable_blocks
        assert order == pool.free_order(), f"replica {r}: free queue order"
        assert hashes[:u] == pool.block_hashes(), f"replica {r}: cached block hashes"
        assert refs[:u] == pool.ref_counts(), f"replica {r}: reference counts"


@pytest.mark.parametrize("seed", range(CASES))
@pytest.mark.parametrize(
    "policy",
    [SchedPolicy.SARATHI, SchedPolicy.VLLM, SchedPolicy.ORCA, SchedPolicy.LIGHTLLM],
    ids=lambda p: p.name.lower(),
)
def test_pools_equal_reference(policy, seed):
    case, sp, grids, tp = random_case(policy, seed)
    rng = np.random.default_rng([7, int(policy), seed])
    assert_same_pools(*run_pools(case, sp, grids, tp, rng))


@pytest.mark.parametrize("seed", range(CASES))
@pytest.mark.parametrize("config", V1_CONFIGS, ids=_v1_id)
def test_v1_pools_equal_reference(config, seed):
    case, sp, grids, tp = random_v1_case(*config, seed)
    rng = np.random.default_rng([8, *config, seed])
    assert_same_pools(*run_pools(case, sp, grids, tp, rng))
