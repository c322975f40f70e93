"""Attention data parallelism: the DP ranks of one engine step in lockstep (a scripted case).

Two ranks of one Qwen3-30B-A3B engine (attention_dp 2, expert parallel over both), one
request each, routed round robin: a long prompt on rank 0 and a short one on rank 1 at the
same instant. In lockstep the short prompt's first token waits for the long prompt's step;
as two lone replicas it does not. The same in a cluster of pools (beside a pool of lone
replicas) and in the prefill pool of a disaggregated cluster.
"""

import numpy as np
import pytest

from vidur_fast.api import simulate
from vidur_fast.config.predictor import PredictorConfig
from vidur_fast.config.sim import (
    ClusterConfig,
    PoolConfig,
    SarathiScheduler,
    SimConfig,
    VllmV1Scheduler,
)
from vidur_fast.config.workload import TraceWorkload
from vidur_fast.errors import ConfigError
from vidur_fast.outputs.console import format_header

MODEL = "Qwen/Qwen3-30B-A3B"


def _run(tmp_path, dp: int, rows, replicas: int = 2, pp: int = 1, scheduler=None):
    trace = tmp_path / "trace.csv"
    lines = ["arrived_at,num_prefill_tokens,num_decode_tokens"]
    lines += [f"{t},{p},{d}" for t, p, d in rows]
    trace.write_text("\n".join(lines) + "\n")
    cfg = SimConfig(
        cluster=ClusterConfig(model=MODEL, device="h200", num_replicas=replicas, pp=pp),
        predictor=PredictorConfig(attention_dp=dp, moe_ep=2 if dp == 2 else 1),
        scheduler=scheduler or VllmV1Scheduler(),
        workload=TraceWorkload(str(trace)),
        quiet=True,
    )
    return simulate(cfg)


def _ttft(res):
    req = res.requests
    return (req["prefill_completed_at"] - req["arrived_at"]).to_numpy()


def test_ranks_of_an_engine_step_together(tmp_path):
    rows = [(0.0, 4000, 4), (0.0, 16, 40)]
    res = _run(tmp_path, 2, rows)
    b = res.batches
    rep, start, end = b["replica"].to_numpy(), b["start_s"].to_numpy(), b["end_s"].to_numpy()
    assert set(rep) == {0, 1}
    # every step of rank 0 is a step of rank 1 too: same start, same end
    for s0, e0 in zip(start[rep == 0], end[rep == 0], strict=True):
        both = (rep == 1) & (start == s0)
        assert both.sum() == 1 and end[both][0] == e0
    # the short prompt's first token comes with the long prompt's: one step for both
    ttft = _ttft(res)
    assert ttft[1] == pytest.approx(ttft[0], abs=1e-9)
    # rank 1 alone after rank 0's request finished: rank 0 runs dummy steps, not batches
    assert (rep == 1).sum() > (rep == 0).sum()

    alone = _run(tmp_path, 1, rows)  # two replicas that step on their own
    ttft_alone = _ttft(alone)
    assert ttft_alone[1] < 0.5 * ttft[1]
    assert np.array_equal(alone.batches["replica"].unique(), [0, 1])


def test_a_prefill_on_one_rank_stretches_the_other_ranks_decode(tmp_path):
    # rank 0 decodes from t = 0; rank 1 gets a long prompt at 0.5 s
    res = _run(tmp_path, 2, [(0.0, 16, 200), (0.5, 8000, 2)])
    ttft_long = float(_ttft(res)[1])
    b = res.batches
    r0 = b[b["replica"] == 0]
    steps = (r0["end_s"] - r0["start_s"]).to_numpy()
    # the decode step of rank 0 that ran beside the long prefill lasts as long as it
    assert steps.max() > 0.5 * ttft_long
    assert steps.max() > 10 * np.median(steps)


def test_engines_must_be_whole_and_one_stage(tmp_path):
    with pytest.raises(ConfigError, match=r"^cluster.num_replicas: 3 is not a multiple of"):
        _run(tmp_path, 2, [(0.0, 16, 2)], replicas=3)
    with pytest.raises(ConfigError, match=r"^cluster.pp: attention data parallelism"):
        _run(tmp_path, 2, [(0.0, 16, 2)], pp=2, scheduler=SarathiScheduler())


# ---- DP engines in a cluster of pools ----


def _run_pools(tmp_path, pools, rows):
    trace = tmp_path / "trace.csv"
    lines = ["arrived_at,num_prefill_tokens,num_decode_tokens"]
    lines += [f"{t},{p},{d}" for t, p, d in rows]
    trace.write_text("\n".join(lines) + "\n")
    cfg = SimConfig(
        cluster=ClusterConfig(model=MODEL, pools=tuple(pools)),
        scheduler=VllmV1Scheduler(),
        workload=TraceWorkload(str(trace)),
        quiet=True,
    )
    return simulate(cfg)


def _steps_together(b, r0, r1):
    """Every step of replica r0 is a step of replica r1 too: same start, same end."""
    rep, start, end = b["replica"].to_numpy(), b["start_s"].to_numpy(), b["end_s"].to_numpy()
    for s0, e0 in zip(start[rep == r0], end[rep == r0], strict=True):
        both = (rep == r1) & (start == s0)
        if both.sum() != 1 or end[both][0] != e0:
            return False
    return True


def test_a_pool_of_dp_ranks_steps_in_lockstep_beside_a_pool_without(tmp_path):
    # round robin: the long prompt to rank 0 and a short one to rank 1 of pool 0's engine, a
    # short one to pool 1's lone replica
    pools = [
        PoolConfig(device="h200", num_replicas=2, attention_dp=2, moe_ep=2),
        PoolConfig(device="h200", num_replicas=1),
    ]
    res = _run_pools(tmp_path, pools, [(0.0, 4000, 4), (0.0, 16, 40), (0.0, 16, 40)])
    assert _steps_together(res.batches, 0, 1)
    ttft = _ttft(res)
    assert ttft[1] == pytest.approx(ttft[0], abs=1e-9)
    assert ttft[2] < 0.5 * ttft[1]
    # the summary's first line names each pool's expert split
    assert "(TP1/1 PP1/1 DP2/1 EP2/1, 3 replicas)" in format_header(res.summary["run"])


def test_prefill_ranks_of_a_pd_cluster_step_in_lockstep(tmp_path):
    pools = [
        PoolConfig(device="h200", num_replicas=2, role="prefill", attention_dp=2, moe_ep=2),
        PoolConfig(device="h200", num_replicas=1, role="decode"),
    ]
    res = _run_pools(tmp_path, pools, [(0.0, 4000, 4), (0.0, 16, 4)])
    assert res.summary["num_completed"] == 2
    b = res.batches
    assert _steps_together(b[b["replica"] < 2], 0, 1)
    # the short prompt's prefill ends with the long one's on the other rank
    pre = b[(b["replica"] < 2) & (b["num_prefill_tokens"] > 0)]
    assert pre["end_s"].nunique() == 1


def test_a_pools_engines_must_be_whole(tmp_path):
    pools = [PoolConfig(device="h200", num_replicas=3, attention_dp=2, moe_ep=2)]
    with pytest.raises(ConfigError, match=r"^cluster.pools\[0\].num_replicas: 3 is not a"):
        _run_pools(tmp_path, pools, [(0.0, 16, 2)])
