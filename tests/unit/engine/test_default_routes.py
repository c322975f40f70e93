"""A cluster without prefill/decode pools: the PDState its builder makes (kernels/pd.py no_pd)
carries the cluster router's one route group, so routing with it picks what the engine
picks for such a cluster."""

import numpy as np
from numba import njit
from vidur_fast.kernels.codes import RouterPolicy, SchedPolicy
from vidur_fast.kernels.pd import no_pd
from vidur_fast.kernels.router import cluster_group, route_nb

from tests.helpers.engine_harness import params, run
from vidur_fast.engine.state import alloc_kv, alloc_reps, alloc_reqs

# every request arrives at 0: each is routed before any prefill ends and takes a load off
PROMPTS = [100, 10, 10, 50, 5, 200, 30]
N_REPLICAS = 3


@njit(cache=False)
def _route_in_order(reps, kv, reqs, pd, p):
    for i in range(reqs.replica.shape[0]):
        reqs.replica[i] = route_nb(reps, kv, reqs, pd.rt, p, i, reqs.arrival_ns[i], False)


def _knobs(sp):
    return (sp.router, sp.router_tolerance_factor, sp.router_top_k, sp.max_imbalance_tokens)


def test_the_builder_gives_the_cluster_group():
    sp = params(SchedPolicy.SARATHI, n_replicas=N_REPLICAS, router=RouterPolicy.LOP)
    built, group = no_pd(_knobs(sp), N_REPLICAS).rt, cluster_group(_knobs(sp), N_REPLICAS)
    for name, a, b in zip(built._fields, built, group, strict=True):
        assert np.array_equal(a, b), name


def test_a_state_from_the_builder_routes_as_the_engine():
    n = len(PROMPTS)
    sp = params(SchedPolicy.SARATHI, n_replicas=N_REPLICAS, router=RouterPolicy.LOP)
    engine = run(np.zeros(n), PROMPTS, [4] * n, sp).reqs.replica.tolist()

    reqs = alloc_reqs(
        np.zeros(n, dtype=np.int64),
        np.array(PROMPTS),
        np.full(n, 4),
        np.full(n, -1),
        np.zeros(n + 1, dtype=np.int64),
    )
    reps = alloc_reps(N_REPLICAS, sp.pp, sp.batch_size_cap)
    _route_in_order(reps, alloc_kv(N_REPLICAS, n), reqs, no_pd(_knobs(sp), N_REPLICAS), sp)
    # least outstanding prompt tokens, ties to the lowest id
    assert reqs.replica.tolist() == engine == [0, 1, 2, 1, 2, 2, 1]
