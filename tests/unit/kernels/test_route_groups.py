"""The route groups' layout (kernels/router.py route_groups): one first-level router per role,
a pool's own router as the only one of a role it serves alone, and as a second level beside
other pools of its role; a cluster of one pool as one group (cluster_group)."""

import numpy as np
from vidur_fast.kernels.codes import RouterPolicy as P
from vidur_fast.kernels.dtypes import NO_ID
from vidur_fast.kernels.pd import ROLE_DECODE, ROLE_MIXED, ROLE_PREFILL
from vidur_fast.kernels.router import cluster_group, pins_sessions, route_groups, with_sessions

LOR = (P.LOR, 2.0, 2, 0)
LOP = (P.LOP, 2.0, 2, 0)
RR = (P.ROUND_ROBIN, 2.0, 2, 0)
STICKY = (P.STICKY_LOR, 2.0, 2, 0)


def _ids(rt, g):
    return rt.ids[rt.off[g] : rt.off[g + 1]].tolist()


def test_layout_of_two_prefill_pools_one_decode_pool_and_a_mixed_pool():
    # pools: 0 prefill x2 (own lop), 1 prefill x1, 2 decode x2 (own sticky_lor), 3 mixed x1
    role = [ROLE_PREFILL] * 3 + [ROLE_DECODE] * 2 + [ROLE_MIXED]
    rep_pool = [0, 0, 1, 2, 2, 3]
    rt = route_groups(role, rep_pool, LOR, [LOP, None, STICKY, None], n=5, seed=3)
    pre, dec, mix = rt.first[ROLE_PREFILL], rt.first[ROLE_DECODE], rt.first[ROLE_MIXED]
    # prefill: two pools, so the cluster's lor over all three, lop again inside pool 0
    assert rt.policy[pre] == P.LOR and _ids(rt, pre) == [0, 1, 2]
    assert rt.sub[2] == NO_ID and rt.sub[0] == rt.sub[1] != NO_ID
    assert rt.policy[rt.sub[0]] == P.LOP and _ids(rt, rt.sub[0]) == [0, 1]
    # decode: one pool with its own router, the only level
    assert rt.policy[dec] == P.STICKY_LOR and _ids(rt, dec) == [3, 4]
    assert (rt.sub[3:5] == NO_ID).all()
    # mixed: one pool without a router, the cluster's
    assert rt.policy[mix] == P.LOR and _ids(rt, mix) == [5]
    assert rt.top.tolist() == [pre, pre, pre, dec, dec, mix]
    assert rt.u.shape == (5, 3) and rt.load2.shape == (5,) and rt.pend2.shape == (6,)
    assert pins_sessions(rt)
    assert with_sessions(rt, 7).sess.shape == (len(rt.policy), 7)


def test_without_pool_routers_one_group_per_role():
    role = [ROLE_MIXED, ROLE_MIXED, ROLE_MIXED]
    rt = route_groups(role, [0, 1, 1], RR, [None, None], n=2)
    assert rt.policy.tolist() == [P.ROUND_ROBIN] and _ids(rt, 0) == [0, 1, 2]
    assert (rt.first[[ROLE_PREFILL, ROLE_DECODE]] == NO_ID).all()
    assert (rt.sub == NO_ID).all() and not pins_sessions(rt)


def test_the_seed_draws_the_later_uniforms():
    role = [ROLE_MIXED] * 2
    a, b = (route_groups(role, [0, 1], RR, [None, None], n=4, seed=s) for s in (1, 2))
    assert not np.array_equal(a.u, b.u)
    same = route_groups(role, [0, 1], RR, [None, None], n=4, seed=1)
    assert np.array_equal(a.u, same.u)


def test_a_cluster_of_one_pool_is_one_group_of_every_replica():
    # route_nb routes group 0 with its knobs and never reads the per-request arrays
    rt = cluster_group((P.TOLERANT_STICKY_LOP_UNCACHED, 1.5, 3, 7), 4)
    assert rt.policy.tolist() == [P.TOLERANT_STICKY_LOP_UNCACHED] and _ids(rt, 0) == [0, 1, 2, 3]
    assert rt.tol.tolist() == [1.5] and rt.top_k.tolist() == [3] and rt.imb.tolist() == [7]
    assert rt.first[ROLE_MIXED] == 0 and (rt.top == 0).all() and (rt.sub == NO_ID).all()
    assert rt.load2.shape == (0,) and rt.hold.shape == (0,) and rt.u.shape == (0, 3)
    assert rt.held.shape == (4,) and pins_sessions(rt)
    assert with_sessions(rt, 5).sess.shape == (1, 5)
