"""dp_lb, vLLM's data-parallel front end (kernels/router.py _g_dp_lb_nb): the least waiting x 4
+ running from the counts its coordinator last published (every 100 ms while they change,
else every 5 s), each pick since adding one waiting request to its replica."""

import numpy as np
from vidur_fast.kernels.codes import RouterPolicy, SchedPolicy
from vidur_fast.kernels.router import _g_dp_lb_nb, cluster_group

from tests.helpers.engine_harness import params, run
from vidur_fast.engine.state import alloc_reps

MS = 1_000_000
DP_LB = (RouterPolicy.DP_LB, 2.0, 2, 0)


def _picks(reps, rt, p, times_ms):
    return [int(_g_dp_lb_nb(reps, rt, p, 0, int(t * MS), True)) for t in times_ms]


def test_a_waiting_request_weighs_four_running_ones():
    p = params(SchedPolicy.VLLM_V1, n_replicas=2, router=RouterPolicy.DP_LB)
    reps = alloc_reps(2, 1, 16)
    reps.wq_len[0] = 1  # score 4
    reps.run_n[1] = 3  # score 3
    rt = cluster_group(DP_LB, 2)
    # published at the first pick (the counts differ from the zeros of the start); at
    # 100 ms they have not changed, so the pick of 0 still counts
    assert _picks(reps, rt, p, [0, 100]) == [1, 0]
    assert rt.lb_pub.tolist() == [4, 3] and rt.lb_score.tolist() == [4 + 4, 3 + 4]


def test_picks_between_publications_count_locally_until_five_idle_seconds():
    p = params(SchedPolicy.VLLM_V1, n_replicas=2, router=RouterPolicy.DP_LB)
    reps = alloc_reps(2, 1, 16)  # the engines' counts stay 0: nothing to publish ...
    rt = cluster_group(DP_LB, 2)
    assert _picks(reps, rt, p, [0, 0, 0, 1000]) == [0, 1, 0, 1]
    assert rt.lb_score.tolist() == [8, 8]
    # ... until 5 s after the last publication, when the same counts are published again
    assert _picks(reps, rt, p, [4999, 5000]) == [0, 0]
    assert rt.lb_score.tolist() == [4, 0]


def test_the_front_end_routes_on_stale_counts():
    # a and b at 0 (b finishes within ms on replica 1); c at 50 ms still sees the counts of 0
    # plus its own picks, so it joins a; d at 150 ms sees the counts published after 100 ms
    # (replica 0 runs a and c, replica 1 nothing); e at 160 ms sees those plus d.
    arrival = [0.0, 0.0, 0.05, 0.15, 0.16]
    decode = [1000, 2, 1000, 1000, 1000]
    prompt = [16] * 5
    dp = params(SchedPolicy.VLLM_V1, n_replicas=2, router=RouterPolicy.DP_LB)
    assert run(arrival, prompt, decode, dp).reqs.replica.tolist() == [0, 1, 0, 1, 0]
    # the live count of outstanding requests sends c to the idle replica at once
    lor = dp._replace(router=int(RouterPolicy.LOR))
    assert run(arrival, prompt, decode, lor).reqs.replica.tolist()[:3] == [0, 1, 1]


def test_in_flight_batches_count_as_running_for_schedulers_that_unlist_them():
    p = params(SchedPolicy.SARATHI, n_replicas=2, router=RouterPolicy.DP_LB)
    reps = alloc_reps(2, 1, 16)
    reps.bat_end[0, 0] = 7 * MS  # replica 0: a batch of 2 in flight, none listed
    reps.bat_n[0, 0] = 2
    reps.run_n[1] = 1
    rt = cluster_group(DP_LB, 2)
    assert _picks(reps, rt, p, [100]) == [1]
    assert np.array_equal(rt.lb_pub, [2, 1])
